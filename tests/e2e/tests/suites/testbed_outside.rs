//! Clients outside the cluster (the testbed side of issue 27), on the shared
//! testbed: from `testbed outside`, a NodePort Service answers on every
//! node's address and a LoadBalancer Service on the address the testbed's
//! pool gave it (shown in its status); the pod's address and the ClusterIPs
//! do not answer there. The address moves with `testbed lb reassign`, waits
//! for `testbed lb release` after `testbed lb hold`, and goes back to the
//! pool when the Service stops being a LoadBalancer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// One Valkey pod behind a NodePort and a LoadBalancer Service.
const KV: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: kv, labels: {app: kv}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: valkey
    image: valkey/valkey:9.1
    command: [valkey-server, --port, "6379", --protected-mode, "no", --save, ""]
    readinessProbe:
      tcpSocket: {port: 6379}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: np}
spec:
  type: NodePort
  selector: {app: kv}
  ports: [{name: client, port: 6379}]
---
apiVersion: v1
kind: Service
metadata: {name: lb}
spec:
  type: LoadBalancer
  selector: {app: kv}
  ports: [{name: client, port: 6379}]
"#;

const LATE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: late}
spec:
  type: LoadBalancer
  selector: {app: kv}
  ports: [{name: client, port: 6379}]
"#;

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `testbed --dir DIR VERB...` (the directory first: after `outside --`
/// everything is the command's).
fn testbed(env: &Env, args: &[&str]) -> Result<Output> {
    Command::new(&env.testbed_bin)
        .arg("--dir")
        .arg(&env.testbed_dir)
        .args(args)
        .env_remove("TESTBED_DIR")
        .output()
        .with_context(|| format!("running testbed {args:?}"))
}

/// What `redis-cli PING` answers (or says) at each `addr:port`, asked from
/// the outside namespace in one `testbed outside` run.
fn ping_outside(env: &Env, targets: &[String]) -> Result<BTreeMap<String, String>> {
    let mut script = String::new();
    for t in targets {
        let (host, port) = t.split_once(':').context("addr:port")?;
        script.push_str(&format!(
            "echo \"{t} $(timeout 3 redis-cli -h {host} -p {port} ping 2>&1 | tr '\\n' ' ')\"\n"
        ));
    }
    let out = testbed(env, &["outside", "--", "sh", "-c", &script])?;
    ensure!(out.status.success(), "testbed outside: {}", text(&out));
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(t, r)| (t.to_string(), r.trim().to_string()))
        .collect())
}

/// `redis-cli PING` from the host.
fn ping_host(addr: &str, port: &str) -> String {
    Command::new("timeout")
        .args(["3", "redis-cli", "-h", addr, "-p", port, "ping"])
        .output()
        .map(|o| text(&o).trim().to_string())
        .unwrap_or_default()
}

/// The first `status.loadBalancer.ingress[].ip` of Service `name`.
fn lb_ip(env: &Env, ns: &str, name: &str) -> Result<Option<String>> {
    let svc = env.kubectl_json(&["get", "service", name, "-n", ns])?;
    Ok(svc["status"]["loadBalancer"]["ingress"][0]["ip"]
        .as_str()
        .map(str::to_string))
}

/// Ends `testbed lb hold` whatever happens, so later suites get addresses.
struct Release<'a>(&'a Env);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        let _ = testbed(self.0, &["lb", "release"]);
    }
}

#[test]
fn outside_clients_reach_node_ports_and_load_balancers_and_no_pod_or_cluster_ip() {
    let Some(env) = Env::or_skip("testbed_outside") else {
        return;
    };
    let ns = env.namespace_for_any_pod("outside").unwrap();
    if let Err(e) = scenario(&env, &ns.name) {
        let agent =
            std::fs::read_to_string(env.testbed_dir.join("logs/agent.log")).unwrap_or_default();
        let tail: Vec<&str> = agent.lines().rev().take(30).collect();
        let lb = testbed(&env, &["lb", "status"])
            .map(|o| text(&o))
            .unwrap_or_default();
        panic!(
            "{e:#}\nlb status:\n{lb}\nagent log (last lines, newest first):\n{}",
            tail.join("\n")
        );
    }
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn scenario(env: &Env, ns: &str) -> Result<()> {
    let start = Instant::now();
    let state: Value = serde_json::from_str(&std::fs::read_to_string(
        env.testbed_dir.join("testbed.json"),
    )?)?;
    let pool = format!("10.{}.254.", 100 + state["id"].as_u64().unwrap_or_default());

    // The exit code of the command comes back.
    let out = testbed(env, &["outside", "--", "sh", "-c", "exit 3"])?;
    ensure!(out.status.code() == Some(3), "exit code {:?}", out.status);

    env.apply(ns, KV)?;
    env.kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod/kv",
        "-n",
        ns,
        "--timeout=60s",
    ])?;
    let pod = env.kubectl_json(&["get", "pod", "kv", "-n", ns])?;
    let pod_ip = pod["status"]["podIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let np = env.kubectl_json(&["get", "service", "np", "-n", ns])?;
    let node_port = np["spec"]["ports"][0]["nodePort"].to_string();
    let cluster_ip = np["spec"]["clusterIP"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let nodes = env.kubectl_json(&["get", "nodes"])?;
    let node_addrs: Vec<String> = nodes["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            n["status"]["addresses"]
                .as_array()?
                .iter()
                .find(|a| a["type"] == "InternalIP")?["address"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    ensure!(node_addrs.len() >= 3, "node addresses {node_addrs:?}");
    let mut lb = None;
    wait_until(Duration::from_secs(20), Duration::from_millis(200), || {
        lb = lb_ip(env, ns, "lb")?;
        Ok(lb.is_some())
    })
    .context("Service lb got no address")?;
    let lb = lb.unwrap_or_default();
    ensure!(
        lb.starts_with(&pool),
        "lb address {lb} is not in {pool}0/24"
    );
    eprintln!(
        "[testbed_outside {:>5.1}s] pod {pod_ip}, ClusterIP {cluster_ip}, nodePort {node_port}, lb {lb}",
        start.elapsed().as_secs_f64()
    );

    // From outside: the nodePort on every node address and the balancer.
    let mut good: Vec<String> = node_addrs
        .iter()
        .map(|a| format!("{a}:{node_port}"))
        .collect();
    good.push(format!("{lb}:6379"));
    let mut seen = BTreeMap::new();
    wait_until(Duration::from_secs(20), Duration::from_millis(300), || {
        seen = ping_outside(env, &good)?;
        Ok(good
            .iter()
            .all(|t| seen.get(t).map(String::as_str) == Some("PONG")))
    })
    .with_context(|| format!("from outside: {seen:?}"))?;
    // Nor pod nor ClusterIP: both are refused at once (no route).
    let bad = [format!("{pod_ip}:6379"), format!("{cluster_ip}:6379")];
    let seen = ping_outside(env, &bad)?;
    for t in &bad {
        let r = seen.get(t).cloned().unwrap_or_default();
        ensure!(
            !r.contains("PONG") && !r.is_empty(),
            "{t} answers from outside: {r:?}"
        );
    }
    // Even with a route added there, the host refuses what no Service's
    // DNAT took (the route goes again at once: the namespace is shared).
    let range = format!(
        "10.{}.0.0/16",
        100 + state["id"].as_u64().unwrap_or_default()
    );
    let script = format!(
        "ip route add {range} via 169.254.1.1 dev eth0\n\
         for t in {pod_ip} {cluster_ip}; do echo \"$t $(timeout 3 redis-cli -h $t -p 6379 ping 2>&1 | tr '\\n' ' ')\"; done\n\
         ip route del {range} via 169.254.1.1 dev eth0\n"
    );
    let out = testbed(env, &["outside", "--", "sh", "-c", &script])?;
    let routed = text(&out);
    ensure!(
        out.status.success() && !routed.contains("PONG") && routed.lines().count() >= 2,
        "outside, with a route to {range}: {routed}"
    );
    // From the host, as well.
    for (addr, port) in [(node_addrs[0].as_str(), node_port.as_str()), (&lb, "6379")] {
        let r = ping_host(addr, port);
        ensure!(r == "PONG", "host -> {addr}:{port}: {r:?}");
    }
    eprintln!(
        "[testbed_outside {:>5.1}s] outside: PONG on {} node addresses:{node_port} and {lb}:6379; {pod_ip} and {cluster_ip} not reachable ({:?}), nor with a route to {range} ({:?})",
        start.elapsed().as_secs_f64(),
        node_addrs.len(),
        seen.values().collect::<Vec<_>>(),
        routed.trim()
    );

    // A new address: in the status, routed, and the old one refused.
    let out = testbed(env, &["lb", "reassign", "--namespace", ns, "lb"])?;
    ensure!(out.status.success(), "lb reassign: {}", text(&out));
    let mut moved = None;
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        moved = lb_ip(env, ns, "lb")?.filter(|ip| ip != &lb);
        Ok(moved.is_some())
    })
    .with_context(|| format!("lb still shows {lb} after `lb reassign`"))?;
    let moved = moved.unwrap_or_default();
    ensure!(
        moved.starts_with(&pool) && text(&out).contains(&format!("{lb} -> {moved}")),
        "lb reassign said {:?}, status shows {moved}",
        text(&out)
    );
    let (new_t, old_t) = (format!("{moved}:6379"), format!("{lb}:6379"));
    let mut seen = BTreeMap::new();
    wait_until(Duration::from_secs(10), Duration::from_millis(200), || {
        seen = ping_outside(env, &[new_t.clone(), old_t.clone()])?;
        Ok(seen.get(&new_t).map(String::as_str) == Some("PONG")
            && seen.get(&old_t).is_some_and(|r| r.contains("refused")))
    })
    .with_context(|| format!("after reassign: {seen:?}"))?;
    eprintln!(
        "[testbed_outside {:>5.1}s] lb reassign: {lb} -> {moved}; the new one answers, the old one is refused",
        start.elapsed().as_secs_f64()
    );

    // Held: a new LoadBalancer stays pending until released.
    let release = Release(env);
    let out = testbed(env, &["lb", "hold"])?;
    ensure!(out.status.success(), "lb hold: {}", text(&out));
    env.apply(ns, LATE)?;
    std::thread::sleep(Duration::from_secs(2));
    ensure!(
        lb_ip(env, ns, "late")?.is_none(),
        "Service late got an address while held"
    );
    drop(release);
    let mut late = None;
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        late = lb_ip(env, ns, "late")?;
        Ok(late.is_some())
    })
    .context("Service late got no address after lb release")?;
    let late = late.unwrap_or_default();
    ensure!(late != moved && late.starts_with(&pool), "late got {late}");

    // No longer a LoadBalancer: its status is cleared (its address free).
    env.kubectl(&[
        "patch",
        "service",
        "late",
        "-n",
        ns,
        "-p",
        r#"{"spec":{"type":"ClusterIP"}}"#,
    ])?;
    wait_until(Duration::from_secs(10), Duration::from_millis(100), || {
        Ok(lb_ip(env, ns, "late")?.is_none())
    })
    .context("Service late (now ClusterIP) still shows a load-balancer address")?;
    eprintln!(
        "[testbed_outside {:>5.1}s] held: late pending 2 s, {late} after release, cleared when it turned ClusterIP",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
