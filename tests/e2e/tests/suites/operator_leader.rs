// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Running several operators, as a Deployment with replicas > 1 does:
//! (a) two operators with leader election on: exactly one holds the Lease and
//!     acts (it alone reconciles and reports Events), the other says on
//!     `/readyz` and in its log that it is a standby; a 3x1 cluster becomes
//!     Ready under the leader;
//! (b) the leader is SIGKILLed (no release): the standby takes the Lease
//!     within the lease duration and applies a live config change;
//! (c) a third operator joins as standby and the leader is stopped with
//!     SIGTERM: it exits 0 after releasing the Lease, and the standby takes
//!     over at once and applies another change;
//! (d) `/healthz` answers 200 on every operator; `/readyz` is 503 on an
//!     operator whose controller cannot sync (its API server is unreachable)
//!     and 200 on one that has synced or stands by;
//! (e) with `--log-format json` every line each operator wrote is a JSON
//!     object with `level` and `message`.
//! The takeover and handover times are printed (docs/benchmarks.md).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Operator, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::rbac::OPERATOR_SA_NAMESPACE;
use serde_json::Value;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const NAME: &str = "lead";
/// The suite's Lease, in the namespace of the chart's ServiceAccount (the
/// chart grants the leader-election verbs there only), one per test process.
fn lease() -> String {
    format!("valkey-operator-e2e-{}", std::process::id())
}
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// The operator's lease duration (crates/operator/src/leader.rs).
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// One operator process with leader election on, its HTTP address and pid.
struct Replica {
    name: String,
    addr: String,
    pid: u32,
    op: Operator,
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

impl Replica {
    /// Starts an operator that takes the suite's Lease in `ns` and watches
    /// only `ns`, logging JSON.
    fn start(env: &Env, ns: &str, name: &str) -> Result<Replica> {
        Replica::spawn(env, ns, name, &[], &[])
    }

    fn spawn(
        env: &Env,
        ns: &str,
        name: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Replica> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let lease = lease();
        let mut args = vec![
            "run",
            "--lease-name",
            &lease,
            "--lease-namespace",
            OPERATOR_SA_NAMESPACE,
            "--namespace",
            ns,
            "--http-addr",
            &addr,
            "--log-format",
            "json",
        ];
        args.extend_from_slice(extra);
        let op = env.spawn_operator(&format!("leader-{name}"), &args, envs)?;
        let pid = op.pid().context("operator pid")?;
        let r = Replica {
            name: name.to_string(),
            addr,
            pid,
            op,
        };
        wait_until(Duration::from_secs(30), Duration::from_millis(200), || {
            Ok(r.get("/healthz").is_ok_and(|(code, _)| code == 200))
        })
        .with_context(|| format!("operator {name}: /healthz never answered 200"))?;
        Ok(r)
    }

    /// Whether the Lease holder identity `holder` is this process (the
    /// operator's identity is `<host>-<pid>`).
    fn holds(&self, holder: Option<&str>) -> bool {
        holder.is_some_and(|h| h.ends_with(&format!("-{}", self.pid)))
    }

    /// A plain HTTP GET on the operator: status code and body.
    fn get(&self, path: &str) -> Result<(u16, String)> {
        http_get(&self.addr, path)
    }

    fn readyz(&self) -> Result<(u16, String)> {
        self.get("/readyz")
    }

    /// `valkey_operator_reconciles_total` from its `/metrics`.
    fn reconciles(&self) -> Result<f64> {
        let (code, body) = self.get("/metrics")?;
        ensure!(code == 200, "{}: /metrics answered {code}", self.name);
        body.lines()
            .find_map(|l| l.strip_prefix("valkey_operator_reconciles_total "))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("{}: no reconciles counter in /metrics", self.name))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.op.log).unwrap_or_default()
    }
}

fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    let sock: std::net::SocketAddr = addr.parse()?;
    let mut s = std::net::TcpStream::connect_timeout(&sock, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("GET {addr}{path}: no status line in {out:?}"))?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.to_string()))
}

/// The Lease's spec (`None` when the Lease does not exist).
fn lease_spec(env: &Env) -> Result<Option<Value>> {
    let out = env
        .kubectl_cmd()
        .args([
            "get",
            "lease",
            &lease(),
            "-n",
            OPERATOR_SA_NAMESPACE,
            "--ignore-not-found",
            "-o",
            "json",
        ])
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl get lease: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim().is_empty() {
        return Ok(None);
    }
    let lease: Value = serde_json::from_str(&text)?;
    Ok(Some(lease["spec"].clone()))
}

/// The holderIdentity of a Lease spec, if any.
fn holder_of(spec: Option<&Value>) -> Option<String> {
    spec.and_then(|s| s["holderIdentity"].as_str())
        .filter(|h| !h.is_empty())
        .map(str::to_string)
}

/// The Lease's holderIdentity (`None` when it has none or does not exist).
fn lease_holder(env: &Env) -> Result<Option<String>> {
    Ok(holder_of(lease_spec(env)?.as_ref()))
}

/// Seconds since the epoch of a Kubernetes MicroTime (`2026-12-02T20:31:40.123456Z`).
fn micro_time(v: &Value) -> Option<f64> {
    let s = v.as_str()?.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|x| x.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.splitn(3, ':');
    let (hh, mm) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    let ss = t.next()?.parse::<f64>().ok()?;
    // Days from the civil date (proleptic Gregorian), 1970-01-01 = 0.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + hh * 3600.0 + mm * 60.0 + ss)
}

/// A change of Lease holder: how long it took to see it, the last spec that
/// named the old holder and the first that names the new one.
struct Takeover {
    took: Duration,
    before: Option<Value>,
    after: Value,
}

/// Waits until `r` holds the Lease.
fn wait_holder(env: &Env, r: &Replica, timeout: Duration) -> Result<Takeover> {
    let started = Instant::now();
    let (mut before, mut last) = (None, None);
    wait_until(timeout, Duration::from_millis(200), || {
        let spec = lease_spec(env)?;
        let holder = holder_of(spec.as_ref());
        let held = r.holds(holder.as_deref());
        // A standby clears an expired lease before it takes it: keep the
        // last spec that still named the old holder.
        if !held && holder.is_some() {
            before = spec.clone();
        }
        last = spec;
        Ok(held)
    })
    .with_context(|| {
        format!(
            "operator {} (pid {}) did not take the Lease in {timeout:?}; last {last:?}",
            r.name, r.pid
        )
    })?;
    Ok(Takeover {
        took: started.elapsed(),
        before,
        after: last.unwrap_or_default(),
    })
}

/// Waits until `/readyz` of `r` answers `code` with a body ending in `body`.
fn wait_readyz(r: &Replica, code: u16, body: &str, timeout: Duration) -> Result<Duration> {
    let started = Instant::now();
    let mut last = None;
    wait_until(timeout, Duration::from_millis(200), || {
        let got = r.readyz().ok();
        let ok = got
            .as_ref()
            .is_some_and(|(c, b)| *c == code && b.trim_end().ends_with(body));
        last = got;
        Ok(ok)
    })
    .with_context(|| {
        format!(
            "operator {}: /readyz should answer {code} {body:?}, last {last:?}",
            r.name
        )
    })?;
    Ok(started.elapsed())
}

/// `CONFIG GET key` on every member equals `want`.
fn config_everywhere(env: &Env, ns: &str, password: &str, key: &str, want: &str) -> Result<()> {
    for m in env.members(ns, NAME)? {
        let out = env.valkey_cli(&m.ip, password, &["config", "get", key])?;
        let got = out.lines().nth(1).unwrap_or_default().trim().to_string();
        ensure!(
            got == want,
            "{} ({}): {key}={got:?}, want {want:?}",
            m.name,
            m.ip
        );
    }
    Ok(())
}

/// Patches a live config key and waits until the cluster is Ready for the
/// new generation with the value on every member; returns the time it took.
fn change_config(env: &Env, ns: &str, key: &str, value: &str) -> Result<Duration> {
    let started = Instant::now();
    env.patch_cluster(
        ns,
        NAME,
        &format!(r#"{{"spec":{{"config":{{"{key}":"{value}"}}}}}}"#),
    )?;
    env.wait_condition(ns, NAME, "Ready", "True", READY_TIMEOUT)
        .with_context(|| format!("Ready after setting {key}"))?;
    let took = started.elapsed();
    let password = env.password(ns, NAME)?;
    config_everywhere(env, ns, &password, key, value)?;
    Ok(took)
}

/// The `reportingInstance` of every Event about the cluster.
fn event_instances(env: &Env, ns: &str) -> Result<Vec<String>> {
    let list = env.kubectl_json(&["get", "events", "-n", ns])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            e["involvedObject"]["kind"] == "ValkeyCluster" && e["involvedObject"]["name"] == NAME
        })
        .map(|e| {
            e["reportingInstance"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect())
}

/// Every complete line of the log is a JSON object with string `level` and
/// `message`; only a process killed with SIGKILL may leave a last line cut
/// short. Returns the number of lines.
fn check_json_log(r: &Replica, killed: bool) -> Result<usize> {
    let text = r.log();
    let mut n = 0;
    for (i, chunk) in text.split_inclusive('\n').enumerate() {
        if !chunk.ends_with('\n') {
            ensure!(
                killed,
                "{}: log line {} is not terminated: {chunk:?}",
                r.name,
                i + 1
            );
            continue;
        }
        let line = chunk.trim_end();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .with_context(|| format!("{}: log line {} is not JSON: {line}", r.name, i + 1))?;
        ensure!(
            v.is_object() && v["level"].is_string() && v["message"].is_string(),
            "{}: log line {} lacks level or message: {line}",
            r.name,
            i + 1
        );
        n += 1;
    }
    ensure!(n > 0, "{}: empty log", r.name);
    Ok(n)
}

/// A copy of the testbed's kubeconfig whose API server cannot be reached.
fn unreachable_kubeconfig(env: &Env, dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let mut cfg: Value = serde_json::from_str(&std::fs::read_to_string(&env.kubeconfig)?)
        .context("the testbed kubeconfig is JSON")?;
    for c in cfg["clusters"].as_array_mut().into_iter().flatten() {
        c["cluster"]["server"] = Value::from("https://127.0.0.1:1");
    }
    let path = dir.join("unreachable.kubeconfig");
    std::fs::write(&path, serde_json::to_string_pretty(&cfg)?)?;
    Ok(path)
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn run(env: &Env, ns: &str, replicas: &mut Vec<Replica>) -> Result<()> {
    // (a) Two operators: one leads, one stands by.
    replicas.push(Replica::start(env, ns, "a")?);
    replicas.push(Replica::start(env, ns, "b")?);
    let started = Instant::now();
    let mut holder = None;
    wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        holder = lease_holder(env)?;
        Ok(replicas.iter().any(|r| r.holds(holder.as_deref())))
    })
    .with_context(|| format!("no operator took the Lease; holder {holder:?}"))?;
    println!(
        "operator_leader: first leader elected {:.1}s after start: {holder:?}",
        started.elapsed().as_secs_f64()
    );
    let leader_i = replicas
        .iter()
        .position(|r| r.holds(holder.as_deref()))
        .context("leader")?;
    let standby_i = 1 - leader_i;
    let holder_a = holder.clone();
    wait_readyz(
        &replicas[leader_i],
        200,
        "ready (leader)",
        Duration::from_secs(60),
    )?;
    wait_readyz(
        &replicas[standby_i],
        200,
        "ready (standby, waiting for the leader Lease)",
        Duration::from_secs(10),
    )?;

    let took = env.create_cluster(ns, &cluster_manifest(NAME, 3, 1), READY_TIMEOUT)?;
    println!(
        "operator_leader: (a) 3x1 Ready {:.1}s after apply under {}",
        took.as_secs_f64(),
        replicas[leader_i].name
    );
    let (leader, standby) = (&replicas[leader_i], &replicas[standby_i]);
    ensure!(
        lease_holder(env)? == holder_a,
        "the Lease changed hands while both ran"
    );
    let (lr, sr) = (leader.reconciles()?, standby.reconciles()?);
    ensure!(lr > 0.0, "the leader reconciled nothing");
    ensure!(sr == 0.0, "the standby reconciled {sr} times");
    let instances = event_instances(env, ns)?;
    let of_leader = instances.iter().filter(|i| leader.holds(Some(i))).count();
    ensure!(
        of_leader > 0,
        "no Event reported by the leader: {instances:?}"
    );
    ensure!(
        !instances.iter().any(|i| standby.holds(Some(i))),
        "the standby reported Events: {instances:?}"
    );
    let slog = standby.log();
    ensure!(
        slog.contains("waiting for the lease") && !slog.contains("lease acquired"),
        "the standby's log should say it waits and never that it leads"
    );
    println!(
        "operator_leader: (a) leader {} reconciled {lr} times and reported {of_leader} Events; standby {} none",
        leader.name, standby.name
    );

    // (b) SIGKILL the leader: no release, the standby waits for expiry.
    replicas[leader_i].op.kill();
    let killed_at = Instant::now();
    let takeover = wait_holder(env, &replicas[standby_i], Duration::from_secs(60))?;
    // The old holder's last renewal to the new holder's acquisition: the
    // lease must have expired first, and be taken soon after.
    let renewed = takeover
        .before
        .as_ref()
        .and_then(|b| micro_time(&b["renewTime"]));
    let acquired = micro_time(&takeover.after["acquireTime"]);
    let (Some(renewed), Some(acquired)) = (renewed, acquired) else {
        bail!(
            "the Lease lacks renewTime or acquireTime: before {:?}, after {}",
            takeover.before,
            takeover.after
        );
    };
    let gap = acquired - renewed;
    let takeover = takeover.took;
    wait_readyz(
        &replicas[standby_i],
        200,
        "ready (leader)",
        Duration::from_secs(60),
    )?;
    let ready_after_kill = killed_at.elapsed();
    println!(
        "operator_leader: (b) leader SIGKILLed: Lease taken after {:.1}s ({gap:.2}s after its last renewal), new leader ready {:.1}s after the kill",
        takeover.as_secs_f64(),
        ready_after_kill.as_secs_f64()
    );
    let lease = LEASE_DURATION.as_secs_f64();
    ensure!(
        gap >= lease,
        "the Lease was taken {gap:.3}s after its last renewal, before it expired ({lease}s)"
    );
    ensure!(
        gap <= lease + 3.0,
        "the Lease was taken {gap:.3}s after its last renewal: more than the lease duration + 3 s"
    );
    ensure!(
        takeover <= LEASE_DURATION + Duration::from_secs(5),
        "takeover took {takeover:?} after the kill, more than the lease duration + 5 s"
    );
    let took = change_config(env, ns, "maxmemory-policy", "allkeys-lru")?;
    ensure!(
        replicas[standby_i].reconciles()? > 0.0,
        "the new leader reconciled nothing"
    );
    println!(
        "operator_leader: (b) live config applied by the new leader, Ready {:.1}s after the patch",
        took.as_secs_f64()
    );

    // (c) A third operator stands by; the leader stops gracefully.
    replicas.push(Replica::start(env, ns, "c")?);
    let (b_i, c_i) = (standby_i, replicas.len() - 1);
    wait_readyz(
        &replicas[c_i],
        200,
        "ready (standby, waiting for the leader Lease)",
        Duration::from_secs(10),
    )?;
    let stopping = Instant::now();
    let code = replicas[b_i].op.stop_with_code();
    let stopped = stopping.elapsed();
    ensure!(
        code == Some(0),
        "the leader should exit 0 on SIGTERM, got {code:?}"
    );
    let handover = wait_holder(env, &replicas[c_i], Duration::from_secs(60))?.took;
    println!(
        "operator_leader: (c) leader SIGTERMed: exited in {:.1}s, Lease taken {:.1}s later",
        stopped.as_secs_f64(),
        handover.as_secs_f64()
    );
    ensure!(
        handover <= Duration::from_secs(8),
        "a released Lease should be taken within a few seconds, took {handover:?}"
    );
    let took = change_config(env, ns, "slowlog-max-len", "256")?;
    println!(
        "operator_leader: (c) config applied by the third operator, Ready {:.1}s after the patch",
        took.as_secs_f64()
    );
    let shape = env
        .check_shape(ns, NAME, 3, 1)
        .context("3x1 after the changes")?;
    println!("operator_leader: (c) shape kept: slots {:?}", shape.slots);

    // (d) An operator that cannot reach its API server is alive, not ready.
    let dir = env.work_dir("operator_leader")?;
    let cfg = unreachable_kubeconfig(env, &dir)?;
    let cfg = cfg.to_string_lossy().to_string();
    replicas.push(Replica::spawn(
        env,
        ns,
        "unreachable",
        &["--no-leader-election"],
        &[("KUBECONFIG", &cfg)],
    )?);
    let d = replicas.last().context("replica d")?;
    std::thread::sleep(Duration::from_secs(3));
    let (code, body) = d.readyz()?;
    ensure!(
        code == 503 && body.trim_end() == "not ready (no leader election)",
        "/readyz of an operator without its API server: {code} {body:?}"
    );
    ensure!(d.get("/healthz")?.0 == 200, "/healthz should answer 200");
    for r in replicas.iter_mut().filter(|r| r.op.pid().is_some()) {
        ensure!(
            r.get("/healthz")?.0 == 200,
            "{}: /healthz should answer 200",
            r.name
        );
    }
    println!(
        "operator_leader: (d) /readyz 503 without an API server, 200 once synced or standing by; /healthz 200"
    );

    // (e) JSON logs, every line.
    for r in replicas.iter_mut() {
        r.op.stop();
    }
    for (i, r) in replicas.iter().enumerate() {
        let n = check_json_log(r, i == leader_i)?;
        println!("operator_leader: (e) {}: {n} JSON log lines", r.name);
    }
    Ok(())
}

#[test]
fn one_of_several_operators_leads_and_a_standby_takes_over_when_it_dies() {
    let Some(env) = Env::or_skip("operator_leader") else {
        return;
    };
    env.install_crd().unwrap();
    let ns = env.namespace("e2e-leader").unwrap();
    let mut replicas = Vec::new();
    if let Err(e) = run(&env, &ns.name, &mut replicas) {
        let mut diag = String::new();
        for r in &replicas {
            diag.push_str(&format!(
                "--- operator {} (pid {}, {}), last 40 lines:\n{}\n",
                r.name,
                r.pid,
                r.addr,
                r.op.tail(40)
            ));
        }
        if let Some(r) = replicas.first() {
            diag.push_str(&env.diagnostics(&ns.name, NAME, &r.op));
        }
        if let Ok(lease) = env.kubectl(&[
            "get",
            "lease",
            &lease(),
            "-n",
            OPERATOR_SA_NAMESPACE,
            "-o",
            "yaml",
        ]) {
            diag.push_str(&format!("--- lease:\n{lease}"));
        }
        panic!("{e:#}\n{diag}");
    }
}

#[test]
fn micro_times_read_as_seconds_since_the_epoch() {
    assert_eq!(
        micro_time(&Value::from("1970-01-01T00:00:00.000000Z")),
        Some(0.0)
    );
    let t = micro_time(&Value::from("2026-12-02T20:31:40.250000Z")).unwrap();
    assert!((t - 1_796_243_500.25).abs() < 1e-3, "{t}");
    let leap = micro_time(&Value::from("2024-03-01T00:00:00.000000Z")).unwrap();
    assert_eq!(leap, 1_709_251_200.0);
    assert_eq!(micro_time(&Value::from("not a time")), None);
}
