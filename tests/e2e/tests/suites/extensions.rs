//! Extension points and modules (issue 30): `spec.podTemplate` and
//! `spec.modules` on real pods and a real module.
//!
//! The image `valkey-hello:0.1.0` is built here (scripts/image/build.py
//! `--extra`) from the workspace crate `tests/e2e/modules/hello`: its program
//! `e2e-helper` and the module it builds with the `valkey-module` SDK,
//! `/usr/lib/valkey/libvalkey_hello_module.so`. Loaded into the testbed, its
//! containers really run (others run a placeholder).
//!
//! - An overlay with labels, annotations, an init container writing to an
//!   emptyDir that a sidecar reads (its readiness probe checks the text),
//!   env and a volume mount on the `valkey` container: on every member pod,
//!   the cluster Ready.
//! - A second init container copies the module into an emptyDir the Valkey
//!   container mounts (the "own image" path); `spec.modules` loads it:
//!   `HELLO.GREET` answers on every member, `status.members[].modules` lists
//!   it, and it still answers on every primary after a primary is killed
//!   (its replica took over, the killed server restarted and loaded it again).
//! - A template with an owned label, or a command for the `valkey`
//!   container, is refused at admission naming `spec.podTemplate...`.
//! - A privileged sidecar, beyond what the operator's security flags allow,
//!   is refused by the operator (`InvalidSpec` naming the field), and no pod
//!   is made.
//! - A second module whose file is missing: the first member restarted
//!   for it cannot start; its `moduleError` and the Ready condition
//!   (`MemberCannotStart`) carry Valkey's own words, and the roll stops
//!   there (no other member restarted). Taken back, the cluster is Ready
//!   again with every member loading `hello`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::Suite;
use std::time::Duration;

const IMAGE: &str = "valkey-hello:0.1.0";
const CLUSTER: &str = "ext";
const GREETING: &str = "hello-from-init";

/// Builds the module and the helper (a no-op when the workspace build made
/// them), the image holding both, and loads it into the testbed.
fn load_image(env: &Env) -> Result<()> {
    let built = std::process::Command::new("cargo")
        .current_dir(&env.root)
        .args(["build", "--release", "-p", "valkey-hello-module"])
        .status()
        .context("cargo build -p valkey-hello-module")?;
    ensure!(built.success(), "cargo build -p valkey-hello-module failed");
    let release = env.root.join("target/release");
    let module = release.join("libvalkey_hello_module.so");
    e2e::image::build_and_load(
        env,
        &release.join("e2e-helper"),
        "valkey-hello",
        "/usr/local/bin/e2e-helper",
        &[(&module, "/usr/lib/valkey/libvalkey_hello_module.so")],
        IMAGE,
    )
}

fn spec() -> String {
    format!(
        "  modules:
  - name: hello
    path: /modules/libhello.so
    args: [hi]
  podTemplate:
    metadata:
      labels: {{team: platform}}
      annotations: {{example.com/owner: platform-team}}
    spec:
      initContainers:
      - name: install-module
        image: {IMAGE}
        args: [copy, /usr/lib/valkey/libvalkey_hello_module.so, /modules/libhello.so]
        volumeMounts: [{{name: modules, mountPath: /modules}}]
      - name: write-greeting
        image: {IMAGE}
        args: [write, /shared/greeting, {GREETING}]
        volumeMounts: [{{name: shared, mountPath: /shared}}]
      containers:
      - name: valkey
        env: [{{name: EXTENSIONS_MARK, value: platform}}]
        volumeMounts: [{{name: modules, mountPath: /modules, readOnly: true}}]
      - name: reader
        image: {IMAGE}
        args: [serve, /shared/greeting]
        volumeMounts: [{{name: shared, mountPath: /shared, readOnly: true}}]
        resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}
        readinessProbe:
          exec: {{command: [/usr/local/bin/e2e-helper, check, /shared/greeting, {GREETING}]}}
          periodSeconds: 2
      volumes:
      - {{name: modules, emptyDir: {{}}}}
      - {{name: shared, emptyDir: {{}}}}
"
    )
}

/// Every member pod carries the overlay: labels, annotations, the init
/// containers run to exit 0, the sidecar ready (it read the init
/// container's text), the env on the Valkey container.
fn check_pods(env: &Env, ns: &str) -> Result<()> {
    let pods = env.kubectl_json(&["get", "pods", "-n", ns, "-l", "valkey.rs/cluster=ext"])?;
    let items = pods["items"].as_array().cloned().unwrap_or_default();
    ensure!(
        items.len() == 4,
        "expected 4 member pods, found {}",
        items.len()
    );
    for pod in &items {
        let name = pod["metadata"]["name"].as_str().unwrap_or("?");
        ensure!(
            pod["metadata"]["labels"]["team"] == "platform",
            "{name}: no label team=platform"
        );
        ensure!(
            pod["metadata"]["annotations"]["example.com/owner"] == "platform-team",
            "{name}: no annotation example.com/owner"
        );
        for init in pod["status"]["initContainerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let code = &init["state"]["terminated"]["exitCode"];
            ensure!(
                code == 0,
                "{name}: init container {} did not exit 0: {}",
                init["name"],
                init["state"]
            );
        }
        let statuses = pod["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let reader = statuses
            .iter()
            .find(|c| c["name"] == "reader")
            .with_context(|| format!("{name}: no sidecar reader"))?;
        ensure!(
            reader["ready"] == true,
            "{name}: the sidecar is not ready: {reader}"
        );
        let valkey = pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "valkey")
            .with_context(|| format!("{name}: no valkey container"))?;
        ensure!(
            valkey["env"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|e| e["name"] == "EXTENSIONS_MARK" && e["value"] == "platform"),
            "{name}: the valkey container lacks the overlay's env"
        );
        ensure!(
            valkey["securityContext"]["readOnlyRootFilesystem"] == true,
            "{name}: the valkey container lost its restricted security context"
        );
    }
    Ok(())
}

/// `HELLO.GREET e2e` on each of `ips` answers the module's greeting.
fn greet_everywhere(env: &Env, ips: &[String], password: &str) -> Result<()> {
    for ip in ips {
        let reply = env.valkey_cli(ip, password, &["hello.greet", "e2e"])?;
        ensure!(
            reply.trim() == "hi, e2e",
            "{ip}: HELLO.GREET answered {reply:?}"
        );
    }
    Ok(())
}

#[test]
fn pod_template_overlay_and_a_real_module() {
    let Some(suite) = Suite::start("extensions", "extensions", "e2e-ext") else {
        return;
    };
    suite.run(&[CLUSTER], |env, ns| {
        // Refused at admission: an owned label, the valkey container's command.
        let owned = cluster_manifest("owned", 1, 0).extra_spec(
            "  podTemplate:\n    metadata:\n      labels: {valkey.rs/cluster: other}\n",
        );
        let err = env
            .apply(ns, &owned.yaml())
            .err()
            .context("a valkey.rs/ label in spec.podTemplate was accepted")?;
        ensure!(
            format!("{err:#}").contains("spec.podTemplate.metadata.labels"),
            "the refusal does not name spec.podTemplate.metadata.labels: {err:#}"
        );
        let command = cluster_manifest("owned", 1, 0).extra_spec(
            "  podTemplate:\n    spec:\n      containers:\n      - {name: valkey, command: [sh]}\n",
        );
        let err = env
            .apply(ns, &command.yaml())
            .err()
            .context("a command for the valkey container was accepted")?;
        ensure!(
            format!("{err:#}").contains("spec.podTemplate.spec.containers"),
            "the refusal does not name spec.podTemplate.spec.containers: {err:#}"
        );

        privileged_sidecar_refused(env, ns)?;

        load_image(env)?;
        let m = cluster_manifest(CLUSTER, 2, 1).extra_spec(&spec());
        env.create_cluster(ns, &m, Duration::from_secs(180))?;
        check_pods(env, ns)?;

        let password = env.password(ns, CLUSTER)?;
        let members = env.members(ns, CLUSTER)?;
        let ips: Vec<String> = members.iter().map(|p| p.ip.clone()).collect();
        greet_everywhere(env, &ips, &password)?;
        // The status lists what every member loaded.
        wait_until(Duration::from_secs(30), Duration::from_secs(1), || {
            let obj = env.cluster(ns, CLUSTER)?;
            let members = obj["status"]["members"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            Ok(members.len() == 4
                && members.iter().all(|m| {
                    m["modules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|x| x == "hello")
                }))
        })
        .context("status.members[].modules does not list hello on every member")?;

        // Kill a primary: its replica takes over, the server restarts and
        // loads the module again; every primary answers.
        let victim = members
            .iter()
            .find(|p| p.role == "primary")
            .context("no primary")?;
        env.kill_valkey(&victim.ip)?;
        wait_until(Duration::from_secs(60), Duration::from_secs(1), || {
            let nodes = env.cluster_nodes(&ips[ips.len() - 1], &password)?;
            Ok(nodes
                .iter()
                .find(|n| n.ip == victim.ip)
                .is_some_and(|n| !n.is_primary() && !n.unhealthy()))
        })
        .context("the killed primary did not come back as a replica")?;
        env.wait_condition(ns, CLUSTER, "Ready", "True", Duration::from_secs(90))?;
        let primaries: Vec<String> = env
            .cluster_nodes(&ips[0], &password)?
            .into_iter()
            .filter(|n| n.is_primary())
            .map(|n| n.ip)
            .collect();
        ensure!(primaries.len() == 2, "expected 2 primaries: {primaries:?}");
        ensure!(
            !primaries.contains(&victim.ip),
            "the killed primary {} is a primary again",
            victim.ip
        );
        greet_everywhere(env, &primaries, &password)?;
        greet_everywhere(env, std::slice::from_ref(&victim.ip), &password)?;
        a_module_that_fails_stops_the_roll(env, ns)
    });
}

/// A sidecar asking for `privileged` is the operator's to refuse (the
/// chart does not pass `--allow-privileged-security-context`).
fn privileged_sidecar_refused(env: &Env, ns: &str) -> Result<()> {
    let m = cluster_manifest("priv", 1, 0).extra_spec(
        "  podTemplate:\n    spec:\n      containers:\n      - {name: shell, image: busybox:1, securityContext: {privileged: true}}\n",
    );
    env.refused_naming(
        ns,
        "priv",
        &m.yaml(),
        &["spec.podTemplate.spec.containers[0].securityContext.privileged"],
    )?;
    beyond_restricted_refused(env, ns)
}

/// What would take a member pod out of Pod Security `restricted` through
/// the overlay: a hostPath volume is refused by the API server itself
/// (admission, the field named); a host port, group 0 and LD_PRELOAD on the
/// valkey container by the operator (InvalidSpec, each field named), and
/// no pod is made for any of them.
fn beyond_restricted_refused(env: &Env, ns: &str) -> Result<()> {
    let host_path = cluster_manifest("hostpath", 1, 0).extra_spec(
        "  podTemplate:\n    spec:\n      volumes:\n      - {name: sock, hostPath: {path: /run/containerd}}\n      containers:\n      - {name: spy, image: busybox:1, volumeMounts: [{name: sock, mountPath: /sock}]}\n",
    );
    let refused = env.apply(ns, &host_path.yaml());
    let message = format!(
        "{:#}",
        refused.err().context("a hostPath volume was admitted")?
    );
    ensure!(
        message.contains("spec.podTemplate.spec.volumes") && message.contains("restricted"),
        "a hostPath volume refused without the field named: {message}"
    );
    println!(
        "extensions: a hostPath volume refused at admission: {}",
        message.lines().last().unwrap_or_default()
    );

    let m = cluster_manifest("beyond", 1, 0).extra_spec(
        "  podSecurityContext:\n    supplementalGroups: [0]\n  podTemplate:\n    spec:\n      containers:\n      - {name: valkey, env: [{name: LD_PRELOAD, value: /x.so}]}\n      - {name: spy, image: busybox:1, ports: [{containerPort: 8080, hostPort: 8080}], securityContext: {runAsGroup: 0}}\n",
    );
    env.refused_naming(
        ns,
        "beyond",
        &m.yaml(),
        &[
            "spec.podSecurityContext.supplementalGroups[0]",
            "spec.podTemplate.spec.containers[0].env[0].name",
            "spec.podTemplate.spec.containers[1].ports[0].hostPort",
            "spec.podTemplate.spec.containers[1].securityContext.runAsGroup",
        ],
    )?;
    println!(
        "extensions: host port, group 0 and LD_PRELOAD refused (InvalidSpec naming each field), no pod made"
    );
    Ok(())
}

/// Pod name -> uid of the cluster's member pods.
fn pod_uids(env: &Env, ns: &str) -> Result<std::collections::BTreeMap<String, String>> {
    let pods = env.kubectl_json(&["get", "pods", "-n", ns, "-l", "valkey.rs/cluster=ext"])?;
    Ok(pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                p["metadata"]["uid"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect())
}

fn a_module_that_fails_stops_the_roll(env: &Env, ns: &str) -> Result<()> {
    let before = pod_uids(env, ns)?;
    env.patch_cluster(
        ns,
        CLUSTER,
        r#"{"spec":{"modules":[{"name":"hello","path":"/modules/libhello.so","args":["hi"]},{"name":"absent","path":"/modules/absent.so"}]}}"#,
    )?;
    let mut last = String::new();
    wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let obj = env.cluster(ns, CLUSTER)?;
        let errors: Vec<String> = obj["status"]["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["moduleError"].as_str().map(str::to_string))
            .collect();
        let ready = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or_default();
        last = format!("moduleError {errors:?}; Ready {ready}");
        Ok(errors.iter().any(|e| e.contains("absent.so"))
            && ready["reason"] == "MemberCannotStart"
            && ready["message"]
                .as_str()
                .is_some_and(|m| m.contains("absent.so")))
    })
    .with_context(|| format!("a module that fails to load is not reported: {last}"))?;
    // The roll stops at the member that cannot start.
    std::thread::sleep(Duration::from_secs(20));
    let during = pod_uids(env, ns)?;
    let replaced: Vec<&String> = before
        .iter()
        .filter(|(name, uid)| during.get(*name) != Some(uid))
        .map(|(name, _)| name)
        .collect();
    ensure!(
        replaced.len() == 1,
        "want the roll stopped after one member, replaced: {replaced:?} ({last})"
    );
    eprintln!("extensions: a missing module stopped the roll at {replaced:?}: {last}");

    // Taken back: the stuck member is replaced and everything converges.
    env.patch_cluster(
        ns,
        CLUSTER,
        r#"{"spec":{"modules":[{"name":"hello","path":"/modules/libhello.so","args":["hi"]}]}}"#,
    )?;
    env.wait_condition(ns, CLUSTER, "Ready", "True", Duration::from_secs(180))?;
    let password = env.password(ns, CLUSTER)?;
    let ips: Vec<String> = env
        .members(ns, CLUSTER)?
        .iter()
        .map(|p| p.ip.clone())
        .collect();
    greet_everywhere(env, &ips, &password)?;
    let obj = env.cluster(ns, CLUSTER)?;
    ensure!(
        obj["status"]["members"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|m| m["moduleError"].is_null()),
        "a moduleError stayed after the module was taken back: {}",
        obj["status"]["members"]
    );
    Ok(())
}
