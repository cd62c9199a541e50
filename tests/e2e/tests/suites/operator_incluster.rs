// Over 600 lines: tests, one scenario per function, read top to bottom.
//! The user's path (issue 12, part 3): the operator installed from its image
//! with the Helm chart and running in-cluster, nothing on the host but the
//! testbed.
//!
//! 1. `testbed image load` imports the archive `make image` wrote
//!    (target/image/valkey-operator-<version>.oci.tar);
//! 2. `helm install vk deploy/helm/valkey-operator -n valkey-system
//!    --create-namespace` with the chart's defaults (its image reference is
//!    the loaded image's; only `watchNamespaces` is set to this suite's
//!    namespace, so the in-cluster operator never touches the clusters of the
//!    other suites on the shared testbed, and its ServiceAccount can read
//!    Secrets there and nowhere else (`kubectl auth can-i`);
//! 3. both operator pods become Ready through their `/readyz` probe, running
//!    the image's binary from its root filesystem as uid 65532, talking to the
//!    API server with kube's in-cluster config and the pod's service-account
//!    token; one of them holds the Lease `valkey-system/valkey-operator`;
//! 4. a ValkeyCluster the user applies becomes Ready with the shape it asks for;
//!    one whose image matches none of the chart's `allowedImages` is refused
//!    (`InvalidSpec` naming `spec.image`) and gets no pod;
//!    then `helm test` (the chart's test pod, the image's `probe-metrics`)
//!    reads the operator's metrics through the metrics Service;
//! 5. an in-cluster client pod writes and reads keys through the cluster;
//!    then every member's exporter sidecar (the same image, `valkey-operator
//!    exporter`, which the chart's operator names) answers `GET
//!    http://<pod IP>:9121/metrics` from the host with the member's own view:
//!    up, cluster state ok, 16384 slots, its role, a replica's link up, and
//!    the keys the client wrote across the primaries;
//! 6. monitoring (issue 11): the chart was installed with its ServiceMonitor,
//!    PrometheusRule and dashboard (the Prometheus Operator's CRDs, minimal,
//!    from tests/e2e/crds); a real Prometheus on the host, configured from
//!    those objects as read back from the API server (tests/e2e/src/prometheus.rs),
//!    scrapes every target they describe; `promtool check metrics` passes on
//!    a live scrape of each operator replica; every alert's rule evaluates,
//!    none is active on the healthy cluster and each vector selector in it
//!    returns data; every dashboard query and variable returns data; the
//!    chart's PodMonitor (pod role) scrapes the same replicas instead; with
//!    the operator scaled to 0, ValkeyOperatorDown's expression returns a
//!    series and the alert becomes active;
//! 7. `helm uninstall` removes the operator and keeps the CRD, the
//!    ValkeyCluster and its data (docs/guide/install.md, "Installing and uninstalling").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, condition, wait_until};
use e2e::exporter;
use e2e::helm::helm;
use e2e::manifest::cluster_manifest;
use e2e::prometheus::expr::{
    dashboard_label_variables, dashboard_queries, grafana_substitute, vector_selectors,
};
use e2e::prometheus::{Generated, Prometheus, http_get, promtool, refresh_discovery, write_config};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

const RELEASE: &str = "vk";
const OPERATOR_NS: &str = "valkey-system";
/// The chart's name: its Deployment, ServiceAccount and Lease carry it.
const CHART_NAME: &str = "valkey-operator";
const CLUSTER: &str = "incluster";
/// The Prometheus Operator's CRDs, minimal, for the chart's monitoring objects.
const MONITORING_CRDS: &str = "tests/e2e/crds/monitoring.coreos.com.yaml";
/// The scrape interval the suite gives the chart's monitors (default 30s),
/// so targets, rates and alert states show within seconds.
const SCRAPE_INTERVAL: &str = "1s";
/// What `$__rate_interval` stands for in the dashboard's queries: what
/// Grafana makes of its default 15 s scrape interval (four of them). Rates
/// over a window that holds no reconcile (every 30 s on a steady cluster)
/// are 0, and a quantile of them NaN: a series still, counted as such.
const RATE_INTERVAL: &str = "1m";

/// Polls `f` every `every` until it gives a value or `timeout` passes (its
/// errors count as "not yet"; the last one is reported).
fn poll<T>(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::new();
    loop {
        match f() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last = format!(" (last error: {e:#})"),
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?}{last}");
        }
        std::thread::sleep(every);
    }
}

/// The operator pods of the release, as JSON items.
fn operator_pods(env: &Env) -> Result<Vec<Value>> {
    let pods = env.kubectl_json(&[
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        &format!("app.kubernetes.io/name={CHART_NAME}"),
    ])?;
    Ok(pods["items"].as_array().cloned().unwrap_or_default())
}

fn is_ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// What the agent's log of a pod's container says (DIR/logs/pods/).
fn pod_log(env: &Env, ns: &str, pod: &str, container: &str) -> String {
    let path = env
        .testbed_dir
        .join("logs/pods")
        .join(format!("{ns}_{pod}_{container}.log"));
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The operator pods' state for a failure message.
fn operator_diagnostics(env: &Env) -> String {
    let mut out = String::new();
    for p in operator_pods(env).unwrap_or_default() {
        let name = p["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        out.push_str(&format!(
            "\n--- pod {OPERATOR_NS}/{name}: {}\n",
            p["status"]
        ));
        let log = pod_log(env, OPERATOR_NS, &name, "operator");
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        for l in tail.into_iter().rev() {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

/// The host process of a container, from `containerID: testbed://<pid>`.
fn container_pid(pod: &Value) -> Option<u32> {
    pod["status"]["containerStatuses"][0]["containerID"]
        .as_str()?
        .strip_prefix("testbed://")?
        .parse()
        .ok()
}

/// Checks that a container process runs the image's binary from the image's
/// root, as uid 65532, and got the service-account token and API address.
fn check_runs_from_the_image(pid: u32) -> Result<()> {
    let root = std::fs::read_link(format!("/proc/{pid}/root"))
        .with_context(|| format!("reading /proc/{pid}/root"))?;
    ensure!(
        root != std::path::Path::new("/"),
        "pid {pid} runs in the host's root, not the image's"
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let uid_line = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .unwrap_or_default();
    ensure!(
        uid_line.split_whitespace().nth(1) == Some("65532"),
        "pid {pid} does not run as 65532: {uid_line}"
    );
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    ensure!(
        exe.ends_with("usr/local/bin/valkey-operator"),
        "pid {pid} runs {}",
        exe.display()
    );
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let environ = String::from_utf8_lossy(&environ);
    ensure!(
        environ
            .split('\0')
            .any(|v| v.starts_with("KUBERNETES_SERVICE_HOST=")),
        "pid {pid} has no KUBERNETES_SERVICE_HOST"
    );
    // Through /proc/PID/root: the container's mounts exist only in its own
    // mount namespace.
    let sa = PathBuf::from(format!(
        "/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount"
    ));
    for f in ["token", "ca.crt", "namespace"] {
        let text = std::fs::read_to_string(sa.join(f))
            .with_context(|| format!("the pod has no service-account {f}"))?;
        ensure!(!text.trim().is_empty(), "service-account {f} is empty");
    }
    let ns = std::fs::read_to_string(sa.join("namespace"))?;
    ensure!(ns.trim() == OPERATOR_NS, "namespace file says {ns:?}");
    Ok(())
}

/// A pod of the Valkey image that writes keys through the cluster and reads
/// them back, from inside the cluster, then exits.
fn client_pod_yaml(name: &str, target: &str, password: &str, keys: u32) -> String {
    let script = format!(
        "set -e; for i in $(seq 1 {keys}); do \
           valkey-cli -c -h \"$TARGET\" -p 6379 --no-auth-warning -a \"$PW\" set incluster-$i v$i | grep -qx OK; \
         done; \
         for i in $(seq 1 {keys}); do \
           test \"$(valkey-cli -c -h \"$TARGET\" -p 6379 --no-auth-warning -a \"$PW\" get incluster-$i)\" = v$i; \
         done; echo wrote-and-read {keys}"
    );
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            // Within Pod Security `restricted`, which the suite's namespace
            // enforces (as every e2e namespace does).
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": 999,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [{
                "name": "client",
                "image": "valkey/valkey:9.1",
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                },
                "command": ["sh", "-c", script],
                "env": [
                    {"name": "TARGET", "value": target},
                    {"name": "PW", "value": password},
                ],
            }],
        },
    })
    .to_string()
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn suite(env: &Env, ns: &str) -> Result<()> {
    // 1. the image.
    let archive = exporter::image_archive(env);
    ensure!(
        archive.exists(),
        "{} is missing: `make image` builds it (make e2e depends on it)",
        archive.display()
    );
    let loaded = env.testbed(&["image", "load", &archive.to_string_lossy()])?;
    println!("operator_incluster: {}", loaded.trim());

    // 2. the chart, its defaults (the image reference is the loaded image's),
    // with its monitoring objects: the API server needs their kinds first.
    let crds = env.root.join(MONITORING_CRDS);
    env.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &crds.to_string_lossy(),
    ])?;
    env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/servicemonitors.monitoring.coreos.com",
        "crd/podmonitors.monitoring.coreos.com",
        "crd/prometheusrules.monitoring.coreos.com",
        "--timeout=60s",
    ])?;
    let chart = env.root.join("deploy/helm/valkey-operator");
    let watch = format!("watchNamespaces={{{ns}}}");
    let interval = format!("monitoring.serviceMonitor.interval={SCRAPE_INTERVAL}");
    let timeout = format!("monitoring.serviceMonitor.scrapeTimeout={SCRAPE_INTERVAL}");
    let member_interval = format!("monitoring.memberPodMonitor.interval={SCRAPE_INTERVAL}");
    let member_timeout = format!("monitoring.memberPodMonitor.scrapeTimeout={SCRAPE_INTERVAL}");
    let mut install = vec![
        "install",
        RELEASE,
        chart.to_str().context("the chart's path is not UTF-8")?,
        "-n",
        OPERATOR_NS,
        "--create-namespace",
    ];
    for value in [
        watch.as_str(),
        "monitoring.serviceMonitor.enabled=true",
        &interval,
        &timeout,
        "monitoring.memberPodMonitor.enabled=true",
        &member_interval,
        &member_timeout,
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
        "allowedImages={valkey/valkey:*}",
    ] {
        install.extend(["--set", value]);
    }
    helm(env, &install)?;
    println!(
        "operator_incluster: helm install {RELEASE} in {OPERATOR_NS} with the ServiceMonitor, the members' PodMonitor, PrometheusRule and dashboard"
    );

    // Least privilege: with watchNamespaces the ServiceAccount reads Secrets
    // in the watched namespace only (a RoleBinding), and has no verb the
    // operator does not use.
    let sa = format!("system:serviceaccount:{OPERATOR_NS}:{CHART_NAME}");
    for (args, want) in [
        (vec!["list", "secrets", "-n", ns], "yes"),
        (vec!["list", "secrets", "--all-namespaces"], "no"),
        (vec!["get", "secrets", "-n", "default"], "no"),
        (vec!["list", "nodes"], "yes"),
        (
            vec![
                "patch",
                "valkeyclusters.valkey.rs",
                "-n",
                ns,
                "--subresource=status",
            ],
            "yes",
        ),
        (
            vec![
                "update",
                "valkeyclusters.valkey.rs",
                "-n",
                ns,
                "--subresource=status",
            ],
            "no",
        ),
        // The per-member Services of spec.externalAccess go when it is
        // turned off; nodes are never the operator's to change.
        (vec!["delete", "services", "-n", ns], "yes"),
        (vec!["delete", "nodes"], "no"),
        // Secrets are patched (the CA rotation too), never updated.
        (vec!["update", "secrets", "-n", ns], "no"),
        (vec!["patch", "pods", "-n", "default"], "no"),
    ] {
        let mut full = vec!["auth", "can-i"];
        full.extend(args.iter().copied());
        full.extend(["--as", sa.as_str()]);
        // `can-i` exits 1 for "no": read the answer, not the status.
        let out = env.kubectl_cmd().args(&full).output()?;
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
        ensure!(
            answer == want,
            "kubectl auth can-i {} as {sa}: {answer:?}, want {want:?}",
            args.join(" ")
        );
    }
    println!("operator_incluster: RBAC reads Secrets in {ns} only, and no verb it does not use");

    // 3. every replica Ready through /readyz; one holds the Lease.
    let replicas = poll(Duration::from_secs(180), Duration::from_secs(1), || {
        let pods = operator_pods(env)?;
        Ok((!pods.is_empty() && pods.iter().all(is_ready)).then_some(pods))
    })
    .with_context(|| {
        format!(
            "the operator pods did not become Ready{}",
            operator_diagnostics(env)
        )
    })?;
    let names: Vec<String> = replicas
        .iter()
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    ensure!(
        names.len() == 2,
        "the chart's default is 2 replicas, found {names:?}"
    );
    for p in &replicas {
        let pid = container_pid(p).context("no containerID")?;
        check_runs_from_the_image(pid)?;
    }
    let holder = poll(Duration::from_secs(60), Duration::from_millis(500), || {
        let h = env.kubectl(&[
            "get",
            "lease",
            CHART_NAME,
            "-n",
            OPERATOR_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ]);
        Ok(h.ok()
            .map(|h| h.trim().to_string())
            .filter(|h| !h.is_empty()))
    })
    .context("nobody took the Lease")?;
    ensure!(
        names.iter().any(|n| holder.starts_with(n.as_str())),
        "the Lease holder {holder:?} is none of the operator pods {names:?}"
    );
    println!(
        "operator_incluster: pods {names:?} Ready from the image as uid 65532; {holder} holds the Lease"
    );

    // 4. the user's cluster.
    // A memory limit, as production clusters set one: the dashboard's
    // memory panel shows `maxmemory` only where it is set.
    let m = cluster_manifest(CLUSTER, 3, 1)
        .extra_spec("  config:\n    maxmemory: 64mb\n  exporter:\n    enabled: true\n");
    env.create_cluster(ns, &m, Duration::from_secs(300))
        .with_context(|| {
            format!(
                "the cluster did not become Ready{}",
                operator_diagnostics(env)
            )
        })?;
    println!("operator_incluster: ValkeyCluster {ns}/{CLUSTER} Ready 3x1");

    // The chart's allowedImages (--allowed-images): a cluster whose image
    // matches none is refused with the field named, and no pod is made.
    let refused = cluster_manifest("miner", 1, 1).image("evil/miner:1");
    env.apply(ns, &refused.yaml())?;
    let mut last = Value::Null;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        last = env.cluster(ns, "miner")?;
        Ok(condition(&last, "Ready").is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "InvalidSpec"
                && c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("spec.image") && m.contains("evil/miner:1"))
        }))
    })
    .with_context(|| {
        format!(
            "an image outside allowedImages was not refused: {}",
            last["status"]
        )
    })?;
    let pods = env.kubectl(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        "valkey.rs/cluster=miner",
        "-o",
        "name",
    ])?;
    ensure!(
        pods.trim().is_empty(),
        "pods made for a refused image: {pods}"
    );
    env.kubectl(&["delete", "valkeycluster", "miner", "-n", ns, "--wait=false"])?;
    println!(
        "operator_incluster: allowedImages refuses evil/miner:1 (InvalidSpec naming spec.image), no pod made"
    );

    // `helm test`: the chart's test pod, the operator's image running
    // `probe-metrics`, reads the metrics Service through cluster DNS. A
    // failed test pod is kept (hook-delete-policy hook-succeeded): its log
    // says why.
    helm(
        env,
        &["test", RELEASE, "-n", OPERATOR_NS, "--timeout", "120s"],
    )
    .with_context(|| {
        let pod = format!("{CHART_NAME}-test-metrics");
        format!(
            "helm test failed; {pod} said: {}{}",
            pod_log(env, OPERATOR_NS, &pod, "probe-metrics"),
            operator_diagnostics(env)
        )
    })?;
    println!(
        "operator_incluster: helm test: the metrics Service answers with valkey_operator_build_info"
    );

    // 5. an in-cluster client.
    let password = env.password(ns, CLUSTER)?;
    // Through cluster DNS and the client Service's ClusterIP, as an
    // application would (`-c` then follows the members' redirects).
    let target = format!("{CLUSTER}.{ns}.svc.cluster.local");
    let keys = 30;
    env.kubectl_stdin(
        &["apply", "-n", ns, "-f", "-"],
        &client_pod_yaml("client", &target, &password, keys),
    )?;
    let phase = poll(Duration::from_secs(120), Duration::from_secs(1), || {
        let p = env.kubectl(&[
            "get",
            "pod",
            "client",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase}",
        ])?;
        let p = p.trim().to_string();
        Ok((p == "Succeeded" || p == "Failed").then_some(p))
    })?;
    let log = pod_log(env, ns, "client", "client");
    ensure!(
        phase == "Succeeded" && log.contains(&format!("wrote-and-read {keys}")),
        "the client pod ended {phase}: {log}"
    );
    println!("operator_incluster: an in-cluster client wrote and read {keys} keys via {target}");

    // The members' exporter sidecars, scraped from the host.
    let reports = exporter::wait_members_report(env, ns, CLUSTER, 3, 1, Duration::from_secs(120))?;
    let counted = exporter::primaries_keys(&reports);
    ensure!(
        counted == f64::from(keys),
        "the primaries' exporters count {counted} keys, the client wrote {keys}"
    );
    let mut rss = Vec::new();
    for (m, _) in &reports {
        let pid = exporter::exporter_pid(env, ns, &m.name)?;
        rss.push(exporter::check_exporter_process(pid)?);
    }
    println!(
        "operator_incluster: every member's exporter (from the image, uid 65532, {}-{} KiB resident) \
         reports up, cluster_state ok, 16384 slots, its role, replicas' links up and {counted} keys",
        rss.iter().min().unwrap_or(&0),
        rss.iter().max().unwrap_or(&0)
    );

    // The members' NetworkPolicy (the chart's default `networkPolicy.members: true`).
    member_network_policy(env, ns)?;

    // 6. monitoring, with a real Prometheus.
    monitoring(env, ns, &chart)?;

    // 7. uninstall: the operator goes; the CRD, the cluster and its data stay.
    helm(env, &["uninstall", RELEASE, "-n", OPERATOR_NS, "--wait"])?;
    wait_until(Duration::from_secs(90), Duration::from_millis(500), || {
        Ok(operator_pods(env)?.is_empty())
    })
    .context("the operator pods outlived helm uninstall")?;
    env.kubectl(&["get", "crd", "valkeyclusters.valkey.rs", "-o", "name"])
        .context("helm uninstall removed the CRD (Helm keeps CRDs)")?;
    env.cluster(ns, CLUSTER)
        .context("helm uninstall removed the user's ValkeyCluster")?;
    let members = env.members(ns, CLUSTER)?;
    ensure!(
        members.len() == 6 && members.iter().all(|m| m.ready),
        "the cluster's pods did not survive the uninstall: {members:?}"
    );
    for i in [1, keys / 2, keys] {
        let ip = &members[0].ip;
        let v = env.valkey_cli(ip, &password, &["-c", "get", &format!("incluster-{i}")])?;
        ensure!(v.trim() == format!("v{i}"), "key incluster-{i} reads {v:?}");
    }
    println!(
        "operator_incluster: uninstalled; the CRD, the ValkeyCluster, its pods and its keys stay"
    );
    Ok(())
}

/// One ingress rule of a NetworkPolicy: its ports and its `from`.
type Rule = (Vec<i64>, Value);

/// The rules of the NetworkPolicy `<cluster>-members`, `None` when there is
/// none.
fn policy_rules(env: &Env, ns: &str) -> Result<Option<Vec<Rule>>> {
    let name = format!("{CLUSTER}-members");
    let out = env
        .kubectl_cmd()
        .args(["get", "networkpolicy", &name, "-n", ns, "-o", "json"])
        .output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            err.contains("NotFound"),
            "kubectl get networkpolicy {name}: {err}"
        );
        return Ok(None);
    }
    let policy: Value = serde_json::from_slice(&out.stdout)?;
    let rules = policy["spec"]["ingress"]
        .as_array()
        .context("the policy has no ingress rules")?
        .iter()
        .map(|r| {
            let ports = r["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["port"].as_i64())
                .collect();
            (ports, r["from"].clone())
        })
        .collect();
    Ok(Some(rules))
}

/// Issue 10: the operator keeps `<cluster>-members` (the chart's
/// default `networkPolicy.members: true`): clients on 6379 from anywhere, peers on
/// 6379 and the bus, the operator's own pods (its namespace, the chart's
/// selector labels, which the chart hands it) on 6379, the exporter's port
/// from anywhere. The API server admits it; the cluster is Ready under it.
/// A cluster's `clientsFrom` narrows the client rule, and
/// `spec.networkPolicy.enabled: false` removes the policy; neither restarts a
/// member. The testbed enforces no NetworkPolicy (no CNI): what is shown is
/// the object, not packets dropped.
fn member_network_policy(env: &Env, ns: &str) -> Result<()> {
    let rules = poll(Duration::from_secs(30), Duration::from_millis(500), || {
        policy_rules(env, ns)
    })?;
    let ports: Vec<&Vec<i64>> = rules.iter().map(|(p, _)| p).collect();
    ensure!(
        ports == [&vec![6379], &vec![6379, 16379], &vec![6379], &vec![9121]],
        "the members' NetworkPolicy has ports {ports:?}"
    );
    ensure!(
        rules[0].1.is_null() && rules[3].1.is_null(),
        "clients and scrapers are not open to every source: {rules:?}"
    );
    ensure!(
        rules[1].1[0]["podSelector"]["matchLabels"]["valkey.rs/cluster"] == CLUSTER,
        "the peer rule does not select the cluster's pods: {}",
        rules[1].1
    );
    let operator = &rules[2].1[0];
    ensure!(
        operator["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == OPERATOR_NS
            && operator["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == CHART_NAME
            && operator["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE,
        "the operator rule does not name the operator's pods: {operator}"
    );
    // The operator's pods carry the labels the rule selects.
    let selector =
        format!("app.kubernetes.io/name={CHART_NAME},app.kubernetes.io/instance={RELEASE}");
    let running = env.kubectl(&[
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        &selector,
        "-o",
        "name",
    ])?;
    ensure!(
        running.lines().count() == 2,
        "the operator rule's selector matches {running:?}"
    );
    let uids = || {
        env.kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("valkey.rs/cluster={CLUSTER}"),
            "-o",
            "jsonpath={.items[*].metadata.uid}",
        ])
    };
    let before = uids()?;

    env.kubectl(&[
        "patch", "vkc", CLUSTER, "-n", ns, "--type", "merge", "-p",
        r#"{"spec":{"networkPolicy":{"clientsFrom":[{"podSelector":{"matchLabels":{"app":"web"}}}]}}}"#,
    ])?;
    poll(Duration::from_secs(30), Duration::from_millis(500), || {
        let rules = policy_rules(env, ns)?.unwrap_or_default();
        Ok(rules
            .first()
            .filter(|(_, from)| from[0]["podSelector"]["matchLabels"]["app"] == "web")
            .map(|_| ()))
    })
    .context("clientsFrom did not reach the policy's client rule")?;
    env.kubectl(&[
        "patch",
        "vkc",
        CLUSTER,
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"networkPolicy":{"enabled":false,"clientsFrom":null}}}"#,
    ])?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(policy_rules(env, ns)?.is_none())
    })
    .context("spec.networkPolicy.enabled: false left the policy")?;
    env.wait_condition(ns, CLUSTER, "Ready", "True", Duration::from_secs(60))?;
    ensure!(
        before == uids()?,
        "a NetworkPolicy change restarted members"
    );
    println!(
        "operator_incluster: NetworkPolicy {CLUSTER}-members admitted with clients, peers (6379, 16379), \
         the operator's pods and the exporter; clientsFrom narrowed it, enabled: false removed it, no member restarted"
    );
    Ok(())
}

/// The targets the chart's monitors must give Prometheus: by `job` label,
/// how many, and the scrape pool they come from (`None`: the pool the
/// caller names). Both operator replicas, through the ServiceMonitor or the
/// PodMonitor; every member's exporter (3 shards x 1 replica), through the
/// members' PodMonitor.
fn expected_targets() -> Vec<(String, usize, Option<String>)> {
    vec![
        (CHART_NAME.to_string(), 2, None),
        (
            format!("{CHART_NAME}-members"),
            6,
            Some(format!("podMonitor/{OPERATOR_NS}/{CHART_NAME}-members/")),
        ),
    ]
}

/// Waits until Prometheus scrapes at least the [`expected_targets`] and
/// every active target is up; returns the targets. `pool` narrows the
/// expected ones to scrape pools starting with it (`serviceMonitor/`).
/// Discovery follows the API server meanwhile.
fn wait_targets_up(
    env: &Env,
    generated: &Generated,
    prom: &Prometheus,
    pool: &str,
) -> Result<Vec<Value>> {
    poll(Duration::from_secs(90), Duration::from_secs(1), || {
        refresh_discovery(env, generated)?;
        let targets = prom.targets()?;
        let down: Vec<String> = targets
            .iter()
            .filter(|t| t["health"] != "up")
            .map(|t| format!("{} {} {}", t["scrapeUrl"], t["health"], t["lastError"]))
            .collect();
        ensure!(down.is_empty(), "targets not up: {down:?}");
        for (job, want, own_pool) in expected_targets() {
            let pool = own_pool.as_deref().unwrap_or(pool);
            let got = targets
                .iter()
                .filter(|t| t["labels"]["job"] == job.as_str())
                .filter(|t| {
                    t["scrapePool"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with(pool)
                })
                .count();
            ensure!(
                got >= want,
                "{got} of {want} targets of job {job} in {pool}*"
            );
        }
        Ok(Some(targets))
    })
    .with_context(|| format!("Prometheus' targets:\n{}", prom.log_tail(15)))
}

/// Step 6: a real Prometheus configured from the chart's monitoring objects.
/// A Completed ValkeyBackup of the cluster and a yearly
/// ValkeyBackupSchedule: the series of the `ValkeyBackupTooOld` alert.
fn backup_series(env: &Env, ns: &str) -> Result<()> {
    let s3 = env.s3_info()?;
    let text = |k: &str| s3[k].as_str().unwrap_or_default().to_string();
    let location = format!(
        "  s3:\n    endpoint: \"{}\"\n    bucket: \"{}\"\n    prefix: incluster\n    credentialsSecret: s3\n",
        text("endpoint"),
        text("bucket")
    );
    env.apply(
        ns,
        &format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: s3}}\nstringData:\n  AWS_ACCESS_KEY_ID: \"{}\"\n  AWS_SECRET_ACCESS_KEY: \"{}\"\n---\napiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackup\nmetadata: {{name: incluster-now}}\nspec:\n  cluster: {CLUSTER}\n{location}---\napiVersion: valkey.rs/v1alpha1\nkind: ValkeyBackupSchedule\nmetadata: {{name: yearly}}\nspec:\n  cluster: {CLUSTER}\n  schedule: \"@yearly\"\n{location}",
            text("accessKey"),
            text("secretKey")
        ),
    )?;
    let mut last = Value::Null;
    poll(Duration::from_secs(120), Duration::from_secs(1), || {
        last = env.kubectl_json(&["get", "valkeybackup", "incluster-now", "-n", ns])?["status"]
            .clone();
        ensure!(last["phase"] != "Failed", "backup Failed: {last}");
        Ok((last["phase"] == "Completed").then_some(()))
    })
    .with_context(|| format!("the in-cluster operator's backup: {last}"))?;
    println!(
        "operator_incluster: ValkeyBackup incluster-now Completed: {}",
        last["message"]
    );
    Ok(())
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn monitoring(env: &Env, ns: &str, chart: &std::path::Path) -> Result<()> {
    let started = Instant::now();
    let dir = env.work_dir("operator_incluster-prometheus")?;
    let selector = format!("app.kubernetes.io/instance={RELEASE}");
    let generated = write_config(env, &selector, &dir)?;
    let jobs = generated.job_names();
    ensure!(
        jobs.contains(&format!("serviceMonitor/{OPERATOR_NS}/{CHART_NAME}/0"))
            && jobs.contains(&format!("podMonitor/{OPERATOR_NS}/{CHART_NAME}-members/0"))
            && !jobs
                .iter()
                .any(|j| j.starts_with(&format!("podMonitor/{OPERATOR_NS}/{CHART_NAME}/"))),
        "the chart's monitors gave the scrape jobs {jobs:?}"
    );
    let config = generated.config.to_string_lossy().to_string();
    promtool(&["check", "config", &config], "")?;
    for f in &generated.rule_files {
        let out = promtool(&["check", "rules", &f.to_string_lossy()], "")?;
        println!("operator_incluster: promtool check rules: {}", out.trim());
    }
    let prom = Prometheus::start(env, &dir, &generated.config)?;
    let targets = wait_targets_up(env, &generated, &prom, "serviceMonitor/")?;
    println!(
        "operator_incluster: Prometheus {} scrapes {} targets through the ServiceMonitor, all up ({:.1}s)",
        prom.authority,
        targets.len(),
        started.elapsed().as_secs_f64()
    );

    // `promtool check metrics` on a live scrape of each replica and each
    // member's exporter, at the URL Prometheus scrapes, as a client that asks
    // for no format in particular.
    let members_job = format!("{CHART_NAME}-members");
    for t in targets
        .iter()
        .filter(|t| t["labels"]["job"] == CHART_NAME || t["labels"]["job"] == members_job.as_str())
    {
        let url = t["scrapeUrl"]
            .as_str()
            .context("a target without scrapeUrl")?;
        let rest = url.strip_prefix("http://").context("not an http URL")?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (code, body) = http_get(authority, path, "")?;
        ensure!(code == 200, "GET {url}: {code}");
        let member = t["labels"]["job"] == members_job.as_str();
        let want = if member {
            "valkey_up 1"
        } else {
            "valkey_operator_build_info"
        };
        ensure!(body.contains(want), "{url} has no {want}:\n{body}");
        if member {
            ensure!(
                t["labels"]["cluster"] == CLUSTER && t["labels"]["namespace"] == ns,
                "a member target without its cluster's labels: {t}"
            );
        }
        promtool(&["check", "metrics"], &body).with_context(|| format!("scrape of {url}"))?;
        let samples = body.lines().filter(|l| !l.starts_with('#')).count();
        println!("operator_incluster: promtool check metrics: {url} ({samples} samples) passes");
    }

    // The backup alert's inputs: a Completed backup of the cluster (to the
    // testbed's object store, through the chart's RBAC) and a schedule
    // (yearly: it makes no backup during the suite).
    backup_series(env, ns)?;

    // Each alert: its rule is loaded and evaluates, it is not active on a
    // healthy cluster, and every vector selector in it returns data (the
    // alert's input is there; only its condition is false).
    ensure!(
        !generated.alerts.is_empty(),
        "the PrometheusRule has no alerts"
    );
    poll(Duration::from_secs(60), Duration::from_secs(1), || {
        let rules = prom.rules()?;
        let bad: Vec<String> = rules
            .iter()
            .filter(|r| r["health"] != "ok")
            .map(|r| format!("{} {} {}", r["name"], r["health"], r["lastError"]))
            .collect();
        ensure!(
            rules.len() == generated.alerts.len() && bad.is_empty(),
            "{} rules loaded, not evaluated ok: {bad:?}",
            rules.len()
        );
        for (alert, expr) in &generated.alerts {
            let active = prom.query(expr)?;
            ensure!(
                active.is_empty(),
                "{alert} is active on a healthy cluster: {active:?}"
            );
            let selectors = vector_selectors(expr);
            ensure!(!selectors.is_empty(), "{alert}: no selector in {expr}");
            for sel in selectors {
                let n = prom.query(&sel)?.len();
                ensure!(n > 0, "{alert}: {sel} returns no series");
            }
        }
        let active = prom.alerts()?;
        ensure!(
            active.is_empty(),
            "alerts active on a healthy cluster: {active:?}"
        );
        Ok(Some(()))
    })
    .context("the chart's alerts")?;
    for (alert, expr) in &generated.alerts {
        println!(
            "operator_incluster: alert {alert}: rule ok, inactive, data for {}",
            vector_selectors(expr).join(", ")
        );
    }

    // The dashboard as Grafana's sidecar would load it: from its ConfigMap.
    let cm = env.kubectl_json(&[
        "get",
        "configmap",
        &format!("{CHART_NAME}-dashboard"),
        "-n",
        OPERATOR_NS,
    ])?;
    let dashboard: Value = serde_json::from_str(
        cm["data"]["valkey-operator.json"]
            .as_str()
            .context("the dashboard ConfigMap has no valkey-operator.json")?,
    )
    .context("the dashboard is not JSON")?;
    let values = BTreeMap::from([
        ("datasource", "prometheus".to_string()),
        ("job", CHART_NAME.to_string()),
        ("namespace", ns.to_string()),
        ("cluster", CLUSTER.to_string()),
        ("__rate_interval", RATE_INTERVAL.to_string()),
        ("__interval", SCRAPE_INTERVAL.to_string()),
        ("__range", RATE_INTERVAL.to_string()),
    ]);
    let variables = dashboard_label_variables(&dashboard)?;
    let queries = dashboard_queries(&dashboard);
    ensure!(!queries.is_empty(), "the dashboard has no queries");
    let counts = poll(Duration::from_secs(60), Duration::from_secs(1), || {
        for (name, selector, label) in &variables {
            let sel = grafana_substitute(selector, &values)?;
            let want = values
                .get(name.as_str())
                .with_context(|| format!("no value chosen for variable {name}"))?;
            let found: Vec<String> = prom
                .query(&sel)?
                .iter()
                .filter_map(|s| s["metric"][label.as_str()].as_str().map(str::to_string))
                .collect();
            ensure!(
                found.contains(want),
                "variable {name} (label_values({sel}, {label})) offers {found:?}, not {want}"
            );
        }
        let mut counts = Vec::new();
        for (title, expr) in &queries {
            let q = grafana_substitute(expr, &values)?;
            let series = prom.query(&q)?;
            ensure!(!series.is_empty(), "panel {title:?}: {q} returns no data");
            let nan = series.iter().filter(|s| s["value"][1] == "NaN").count();
            counts.push(format!(
                "{}{}",
                series.len(),
                if nan > 0 { " (NaN)" } else { "" }
            ));
        }
        Ok(Some(counts))
    })
    .context("the dashboard")?;
    println!(
        "operator_incluster: the dashboard's {} variables and {} queries all return data (series per query: {})",
        variables.len(),
        queries.len(),
        counts.join(", ")
    );

    // The pod role: the chart's PodMonitor instead of its ServiceMonitor
    // (the chart refuses both), Prometheus reloaded with what it becomes.
    let pod_interval = format!("monitoring.podMonitor.interval={SCRAPE_INTERVAL}");
    let pod_timeout = format!("monitoring.podMonitor.scrapeTimeout={SCRAPE_INTERVAL}");
    let mut upgrade = vec![
        "upgrade",
        RELEASE,
        chart.to_str().context("the chart's path is not UTF-8")?,
        "-n",
        OPERATOR_NS,
        "--reuse-values",
    ];
    for value in [
        "monitoring.serviceMonitor.enabled=false",
        "monitoring.podMonitor.enabled=true",
        &pod_interval,
        &pod_timeout,
    ] {
        upgrade.extend(["--set", value]);
    }
    helm(env, &upgrade)?;
    let generated = write_config(env, &selector, &dir)?;
    let jobs = generated.job_names();
    ensure!(
        jobs.contains(&format!("podMonitor/{OPERATOR_NS}/{CHART_NAME}/0"))
            && !jobs.iter().any(|j| j.starts_with("serviceMonitor/")),
        "after the upgrade the chart's monitors gave the scrape jobs {jobs:?}"
    );
    promtool(&["check", "config", &config], "")?;
    prom.reload()?;
    let targets = wait_targets_up(env, &generated, &prom, "podMonitor/")?;
    ensure!(
        !targets.iter().any(|t| t["scrapePool"]
            .as_str()
            .unwrap_or_default()
            .starts_with("serviceMonitor/")),
        "the ServiceMonitor's targets outlived the reload"
    );
    println!(
        "operator_incluster: the PodMonitor (pod role) scrapes the {} replicas instead, all up",
        targets
            .iter()
            .filter(|t| t["labels"]["job"] == CHART_NAME)
            .count()
    );

    // ValkeyOperatorDown for real: no replica left. A fresh Prometheus (its
    // own data folder, the same configuration): the ServiceMonitor's `up`
    // series, dropped by the reload without staleness markers, would
    // otherwise answer `up == 1` for another 5 minutes.
    drop(prom);
    let fresh = env.work_dir("operator_incluster-prometheus-down")?;
    let prom = Prometheus::start(env, &fresh, &generated.config)?;
    wait_targets_up(env, &generated, &prom, "podMonitor/")?;
    let (_, down_expr) = generated
        .alerts
        .iter()
        .find(|(a, _)| a == "ValkeyOperatorDown")
        .context("no ValkeyOperatorDown alert")?;
    let scaled = Instant::now();
    env.kubectl(&[
        "scale",
        "deployment",
        CHART_NAME,
        "-n",
        OPERATOR_NS,
        "--replicas=0",
    ])?;
    let mut seen = String::new();
    let alert = poll(Duration::from_secs(120), Duration::from_secs(1), || {
        refresh_discovery(env, &generated)?;
        let up = prom.query(&format!(
            "up{{job=\"{CHART_NAME}\", namespace=\"{OPERATOR_NS}\"}}"
        ))?;
        let found = prom.query(down_expr)?;
        let alerts = prom.alerts()?;
        seen = format!("up {up:?}; {down_expr}: {found:?}; alerts {alerts:?}");
        if found.is_empty() {
            return Ok(None);
        }
        Ok(alerts
            .into_iter()
            .find(|a| a["labels"]["alertname"] == "ValkeyOperatorDown"))
    })
    .with_context(|| {
        format!("ValkeyOperatorDown did not become active with the operator scaled to 0: {seen}")
    })?;
    let summary = alert["annotations"]["summary"].as_str().unwrap_or_default();
    ensure!(
        alert["labels"]["severity"] == "critical" && summary.contains(OPERATOR_NS),
        "ValkeyOperatorDown: {alert}"
    );
    println!(
        "operator_incluster: operator scaled to 0: {down_expr} returns a series; ValkeyOperatorDown is {} after {:.1}s ({summary})",
        alert["state"],
        scaled.elapsed().as_secs_f64()
    );
    println!(
        "operator_incluster: monitoring checked in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[test]
fn the_chart_runs_the_operator_image_in_cluster_and_it_serves_a_users_cluster() {
    let Some(env) = Env::or_skip("operator_incluster") else {
        return;
    };
    let ns = env.namespace("e2e-incluster").unwrap();
    let result = suite(&env, &ns.name);
    // Whatever happened: no operator of this suite outlives it.
    let _ = helm(&env, &["uninstall", RELEASE, "-n", OPERATOR_NS, "--wait"]);
    let _ = env.kubectl(&["delete", "namespace", OPERATOR_NS, "--wait=false"]);
    let crds = env.root.join(MONITORING_CRDS);
    let _ = env.kubectl(&[
        "delete",
        "--ignore-not-found",
        "--wait=false",
        "-f",
        &crds.to_string_lossy(),
    ]);
    if let Err(e) = result {
        panic!("{e:#}");
    }
}
