//! Restricted Pod Security (issue 10, item 4): in a namespace that enforces
//! the `restricted` profile (the real apiserver's PodSecurity admission
//! refuses a root pod there), a default cluster's members are admitted, run
//! as uid 999 (read from the valkey-server process itself), and serve reads
//! and writes; a cluster whose `podSecurityContext` names another user runs
//! as that user, with its data on a claim it can write through fsGroup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::Suite;
use std::time::Duration;

/// The real uid and gid of the process `pid` (`Uid:`/`Gid:` of its status).
fn ids_of(pid: u32) -> Result<(u32, u32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u32> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("Uid:")?, field("Gid:")?))
}

/// Every member of `name` runs its valkey-server as `uid`:`gid`, and its pod
/// carries the restricted settings.
fn members_run_as(env: &Env, ns: &str, name: &str, uid: u32, gid: u32) -> Result<()> {
    let pods = env.kubectl_json(&[
        "get",
        "pods",
        "-n",
        ns,
        "-l",
        &format!("valkey.rs/cluster={name}"),
    ])?;
    let pods = pods["items"].as_array().cloned().unwrap_or_default();
    ensure!(!pods.is_empty(), "{name}: no member pods");
    for pod in &pods {
        let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let psc = &pod["spec"]["securityContext"];
        let sc = &pod["spec"]["containers"][0]["securityContext"];
        ensure!(
            psc["runAsNonRoot"] == true,
            "{pod_name}: pod securityContext {psc}"
        );
        ensure!(
            psc["seccompProfile"]["type"] == "RuntimeDefault",
            "{pod_name}: pod securityContext {psc}"
        );
        ensure!(sc["allowPrivilegeEscalation"] == false, "{pod_name}: {sc}");
        ensure!(sc["capabilities"]["drop"][0] == "ALL", "{pod_name}: {sc}");
        ensure!(sc["readOnlyRootFilesystem"] == true, "{pod_name}: {sc}");
        let ip = pod["status"]["podIP"].as_str().unwrap_or_default();
        let pid = env.valkey_pid(ip)?;
        let ids = ids_of(pid)?;
        ensure!(
            ids == (uid, gid),
            "{pod_name}: valkey-server (pid {pid}) runs as uid:gid {ids:?}, not {uid}:{gid}"
        );
    }
    Ok(())
}

#[test]
fn members_pass_the_restricted_profile_and_run_as_non_root() {
    let Some(suite) = Suite::start("pod_security", "podsec", "e2e-podsec") else {
        return;
    };
    suite.run(&["locked", "custom"], |env, ns_name| {
        env.kubectl(&[
            "label",
            "--overwrite",
            "namespace",
            ns_name,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/enforce-version=latest",
        ])?;
        // The profile is enforced: a pod with no security settings is refused.
        let root_pod = "apiVersion: v1
kind: Pod
metadata:
  name: as-root
spec:
  containers:
    - name: c
      image: busybox
";
        let refused = env.apply(ns_name, root_pod);
        let message = format!("{:#}", refused.as_ref().err().context("a root pod was admitted")?);
        ensure!(message.contains("violates PodSecurity"), "{message}");

        let locked = cluster_manifest("locked", 3, 1);
        let custom = cluster_manifest("custom", 1, 1)
            .persistence("64Mi", "Delete")
            .extra_spec(
                "  podSecurityContext:\n    runAsUser: 1001\n    runAsGroup: 1001\n    fsGroup: 1001\n",
            );
        env.apply(ns_name, &locked.yaml())?;
        env.apply(ns_name, &custom.yaml())?;
        for m in [&locked, &custom] {
            env.wait_ready_shape(ns_name, m, Duration::from_secs(240))?;
        }
        members_run_as(env, ns_name, "locked", 999, 999)?;
        members_run_as(env, ns_name, "custom", 1001, 1001)?;

        // Non-root members write their data: keys in, keys back.
        for name in ["locked", "custom"] {
            let password = env.password(ns_name, name)?;
            let hosts = env.member_ips(ns_name, name)?;
            let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
            let out = env.judge(&hosts, &password, &["fill", "--count", "2000"])?;
            ensure!(out["written"] == 2000, "{name}: {out}");
            ensure!(out["missing_or_wrong"] == 0, "{name}: {out}");
        }
        // With persistence the data survives a restart as the same user:
        // the claim's files are the member's own.
        let password = env.password(ns_name, "custom")?;
        let primary = env.member_with_role(ns_name, "custom", 0, "primary")?;
        env.valkey_cli(&primary.ip, &password, &["bgsave"])?;
        let mut last = String::new();
        wait_until(Duration::from_secs(30), Duration::from_millis(250), || {
            last = env.valkey_cli(&primary.ip, &password, &["info", "persistence"])?;
            Ok(last.contains("rdb_bgsave_in_progress:0") && last.contains("rdb_last_bgsave_status:ok"))
        })
        .with_context(|| format!("a snapshot on the claim as uid 1001: {last}"))?;
        pod_that_cannot_be_created_is_explained(env, ns_name)?;
        external_access_without_auth_is_refused(env, ns_name)?;
        Ok(())
    });
}

/// A member whose pod the API server refuses (here: a PriorityClass that
/// does not exist) is reported in the API server's own words, with the
/// member named, in Ready's message and an event, within 10 s of the first
/// refusal; creating the class lets the cluster come up.
fn pod_that_cannot_be_created_is_explained(env: &Env, ns: &str) -> Result<()> {
    let class = format!("valkey-e2e-{}", std::process::id());
    let m = cluster_manifest("forbidden", 1, 0)
        .extra_spec(&format!("  scheduling:\n    priorityClassName: {class}\n"));
    let applied = std::time::Instant::now();
    env.apply(ns, &m.yaml())?;
    let mut last = serde_json::Value::Null;
    wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
        last = env.cluster(ns, "forbidden")?;
        Ok(e2e::cluster::condition(&last, "Ready").is_some_and(|c| {
            c["reason"] == "MemberPodNotCreated"
                && c["message"].as_str().is_some_and(|m| {
                    m.contains("member 0/0")
                        && m.contains(&format!("no PriorityClass with name {class}"))
                })
        }))
    })
    .with_context(|| {
        format!(
            "a pod refused for its PriorityClass is not reported: {}",
            last["status"]
        )
    })?;
    let seen = applied.elapsed();
    // From the first refusal the StatefulSet controller reported.
    let events = env.kubectl_json(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        "involvedObject.kind=StatefulSet,involvedObject.name=forbidden-0-0,reason=FailedCreate",
    ])?;
    let first = events["items"].as_array().and_then(|items| {
        items
            .iter()
            .filter_map(|e| e["firstTimestamp"].as_str())
            .min()
            .map(str::to_string)
    });
    println!(
        "pod_security: a pod refused for its PriorityClass is in Ready's message {:.1}s after apply (first FailedCreate at {first:?})",
        seen.as_secs_f64()
    );
    ensure!(
        seen < Duration::from_secs(20),
        "reported {seen:?} after apply (the refusal comes within a second or two; the goal is 10 s)"
    );
    let ours = env.kubectl_json(&[
        "get",
        "events",
        "-n",
        ns,
        "--field-selector",
        "reason=MemberPodNotCreated",
    ])?;
    ensure!(
        ours["items"].as_array().is_some_and(|i| !i.is_empty()),
        "no MemberPodNotCreated event: {ours}"
    );
    env.apply(
        ns,
        &format!("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {class}}}\nvalue: 1000\n"),
    )?;
    let ready = env.wait_ready_shape(ns, &m, Duration::from_secs(180));
    let _ = env.kubectl(&["delete", "priorityclass", &class]);
    ready.context("the cluster did not come up once its PriorityClass existed")?;
    Ok(())
}

/// External access with auth off would be a server anyone who reaches the
/// balancer may read, write and flush: refused (InvalidSpec naming
/// `spec.externalAccess.allowUnauthenticated`), no member Service made.
fn external_access_without_auth_is_refused(env: &Env, ns: &str) -> Result<()> {
    let m = cluster_manifest("open", 1, 0)
        .extra_spec("  auth:\n    enabled: false\n  externalAccess:\n    type: NodePort\n");
    env.refused_naming(
        ns,
        "open",
        &m.yaml(),
        &["spec.externalAccess.allowUnauthenticated"],
    )?;
    println!(
        "pod_security: external access with auth off refused (InvalidSpec naming spec.externalAccess.allowUnauthenticated)"
    );
    Ok(())
}
