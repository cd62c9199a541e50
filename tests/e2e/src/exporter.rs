//! The members' exporter sidecars as a scraper sees them: `GET
//! http://<pod IP>:9121/metrics` from the host (pod IPs route from the host on
//! the testbed), the exposition read line by line. The checks are written
//! from the metric names of the contract (docs/guide/monitoring.md),
//! not from the exporter's code.

use crate::cluster::{Env, MemberPod};
use anyhow::{Context, Result, bail, ensure};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The exporter's port on every member pod.
pub const PORT: u16 = 9121;

/// The archive `make image` writes for this version (its exporter and
/// operator image).
pub fn image_archive(env: &Env) -> std::path::PathBuf {
    env.root.join(format!(
        "target/image/valkey-operator-{}.oci.tar",
        env!("CARGO_PKG_VERSION")
    ))
}

/// Loads the operator's image into the testbed, so member pods started from
/// now on run the real exporter (`scripts/e2e.sh` loads it once for every
/// suite; without it the exporter container cannot start and no member pod
/// is Ready). Loading it again is harmless.
pub fn load_image(env: &Env) -> Result<String> {
    let archive = image_archive(env);
    ensure!(
        archive.exists(),
        "{} is missing: `make image` builds it (make e2e depends on it)",
        archive.display()
    );
    env.testbed(&["image", "load", &archive.to_string_lossy()])
}

/// `GET path` over HTTP/1.0 (no chunked body): the status and the body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .with_context(|| format!("reading GET {addr}{path}"))?;
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("GET {addr}{path}: no status line in {out:?}"))?;
    let body = out.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    Ok((code, body.to_string()))
}

/// The value of the sample `series` (name with its labels, as written), if
/// the exposition has it.
pub fn value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// A member's `/metrics`, which must answer 200.
pub fn scrape(member: &MemberPod) -> Result<String> {
    let addr: SocketAddr = format!("{}:{PORT}", member.ip)
        .parse()
        .with_context(|| format!("{}: pod IP {:?}", member.name, member.ip))?;
    let (code, body) = http_get(addr, "/metrics")?;
    ensure!(
        code == 200,
        "{}: /metrics answered {code}: {body}",
        member.name
    );
    Ok(body)
}

/// What one member's exporter says, checked against the member's role label
/// and the cluster's shape; the reason it is not (yet) right otherwise.
fn check_member(m: &MemberPod, text: &str, members: usize, replicas: u32) -> Result<()> {
    let want = |series: &str, v: f64| -> Result<()> {
        let got = value(text, series);
        ensure!(got == Some(v), "{}: {series} is {got:?}, want {v}", m.name);
        Ok(())
    };
    want("valkey_up", 1.0)?;
    want("valkey_cluster_state_ok", 1.0)?;
    want("valkey_cluster_slots_assigned", 16384.0)?;
    want("valkey_cluster_slots_ok", 16384.0)?;
    want("valkey_cluster_known_nodes", members as f64)?;
    // The exporter is a client itself; a fresh primary's offset may be 0.
    ensure!(
        value(text, "valkey_replication_offset_bytes").is_some(),
        "{}: no valkey_replication_offset_bytes",
        m.name
    );
    for name in [
        "valkey_memory_used_bytes",
        "valkey_connected_clients",
        "valkey_commands_processed_total",
    ] {
        ensure!(
            value(text, name).is_some_and(|v| v > 0.0),
            "{}: no positive {name}",
            m.name
        );
    }
    ensure!(
        value(text, "valkey_memory_max_bytes").is_some(),
        "{}: no valkey_memory_max_bytes",
        m.name
    );
    match m.role.as_str() {
        "primary" => {
            want("valkey_role_primary", 1.0)?;
            want("valkey_connected_replicas", f64::from(replicas))?;
            ensure!(
                value(text, "valkey_master_link_up").is_none(),
                "{}: a primary reports valkey_master_link_up",
                m.name
            );
        }
        "replica" => {
            want("valkey_role_primary", 0.0)?;
            want("valkey_master_link_up", 1.0)?;
        }
        other => bail!("{}: role label {other:?}", m.name),
    }
    Ok(())
}

/// Polls every member of `cluster` until each exporter reports what the
/// cluster's shape and the member's role label say (a role label follows a
/// failover within a reconcile), or `timeout` passes. Returns the members
/// with the text each exporter served last.
pub fn wait_members_report(
    env: &Env,
    ns: &str,
    cluster: &str,
    shards: u32,
    replicas: u32,
    timeout: Duration,
) -> Result<Vec<(MemberPod, String)>> {
    let members = (shards * (replicas + 1)) as usize;
    let deadline = Instant::now() + timeout;
    loop {
        let attempt = || -> Result<Vec<(MemberPod, String)>> {
            let pods = env.members(ns, cluster)?;
            ensure!(
                pods.len() == members,
                "{} member pods, want {members}",
                pods.len()
            );
            let mut out = Vec::new();
            for m in pods {
                let text = scrape(&m)?;
                check_member(&m, &text, members, replicas)?;
                out.push((m, text));
            }
            Ok(out)
        };
        match attempt() {
            Ok(out) => return Ok(out),
            Err(e) if Instant::now() >= deadline => {
                return Err(e.context(format!(
                    "the exporters of {ns}/{cluster} did not report the cluster within {timeout:?}"
                )));
            }
            Err(_) => std::thread::sleep(Duration::from_secs(1)),
        }
    }
}

/// The sum over the primaries of `valkey_keyspace_keys` (every database).
pub fn primaries_keys(reports: &[(MemberPod, String)]) -> f64 {
    reports
        .iter()
        .filter(|(m, _)| m.role == "primary")
        .flat_map(|(_, text)| {
            text.lines()
                .filter(|l| l.starts_with("valkey_keyspace_keys{"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// The host pid of a member pod's `exporter` container, from its
/// `containerID: testbed://<pid>`.
pub fn exporter_pid(env: &Env, ns: &str, pod: &str) -> Result<u32> {
    let p = env.kubectl_json(&["get", "pod", pod, "-n", ns])?;
    p["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == "exporter")
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("testbed://"))
        .and_then(|pid| pid.parse().ok())
        .with_context(|| format!("{pod}: no running exporter container"))
}

/// Checks that the exporter process `pid` runs the image's binary from the
/// image's root as uid 65532; returns its resident memory in KiB.
pub fn check_exporter_process(pid: u32) -> Result<u64> {
    let root = std::fs::read_link(format!("/proc/{pid}/root"))?;
    ensure!(
        root != std::path::Path::new("/"),
        "exporter pid {pid} runs in the host's root, not the image's"
    );
    let exe = std::fs::read_link(format!("/proc/{pid}/exe"))?;
    ensure!(
        exe.ends_with("usr/local/bin/valkey-operator"),
        "exporter pid {pid} runs {}",
        exe.display()
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_string)
    };
    ensure!(
        field("Uid:").as_deref() == Some("65532"),
        "exporter pid {pid} runs as uid {:?}",
        field("Uid:")
    );
    field("VmRSS:")
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("exporter pid {pid}: no VmRSS"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_read_by_exact_series() {
        let text = "# TYPE valkey_up gauge\nvalkey_up 1\nvalkey_up_extra 5\nvalkey_keyspace_keys{db=\"0\"} 30\n# EOF\n";
        assert_eq!(value(text, "valkey_up"), Some(1.0));
        assert_eq!(value(text, "valkey_keyspace_keys{db=\"0\"}"), Some(30.0));
        assert_eq!(value(text, "valkey_down"), None);
    }
}
