//! Security state that follows the spec whatever path users take (issue 25,
//! item 2): reversals under a connected client, and deletions of what the
//! operator made.
//!
//! On one 2x1 cluster, under a `WAIT 1` writer that logs in as `default`
//! with the cluster password:
//! 1. auth off, then on again 6 s later (before the roll finished): once
//!    Ready, no member answers PING without the password and every pod is
//!    Ready;
//! 2. the password A -> B, then back to A 4 s later: once settled, every
//!    member takes A and refuses B;
//! 3. A -> B, then C 4 s later: every member ends on C alone (A and B
//!    refused);
//!
//! the writer reading the password from a file that follows the Secret at
//! each reconnection; then, the writer stopped and every acknowledged key
//! read back:
//! 4. `<cluster>-auth-applied` deleted: rebuilt, no member restarted;
//! 5. `<cluster>-auth` deleted: made again with the password the members
//!    run (not a new one), no member restarted;
//! 6. `<cluster>-users` deleted: made again; a replica whose link to its
//!    primary is dropped (`CLIENT KILL TYPE master`) links up again as the
//!    replication user.
//!
//! And two hostile or mistaken specs, each refused without harm: a
//! `securityContext` beyond the restricted profile (Ready False
//! `InvalidSpec` naming the field, no pod made), and a cluster whose
//! ConfigMap name is taken by an object it does not own (`NotOwned`, the
//! object left as it was).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load, wait_load_running};
use std::collections::BTreeMap;
use std::time::Duration;

const NAME: &str = "rev";

/// `PING` on `ip` as `default` with `password` ("" for none): the reply.
fn ping(env: &Env, ip: &str, password: &str) -> Result<String> {
    let mut cmd = env.redis_cli();
    cmd.args(["-h", ip, "-p", "6379", "--no-auth-warning"]);
    if !password.is_empty() {
        cmd.args(["--user", "default", "--pass", password]);
    }
    let out = cmd.arg("ping").output().context("redis-cli")?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_string())
}

/// Sets the cluster password in `<cluster>-auth`.
fn set_password(env: &Env, ns: &str, password: &str) -> Result<()> {
    env.kubectl(&[
        "patch",
        "secret",
        &format!("{NAME}-auth"),
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        &format!(r#"{{"stringData":{{"password":"{password}"}}}}"#),
    ])?;
    Ok(())
}

/// Waits until the cluster is Ready with every pod Ready and `check` holds
/// on every member IP; `what` names the state in the error.
fn wait_settled(
    env: &Env,
    ns: &str,
    what: &str,
    timeout: Duration,
    mut check: impl FnMut(&str) -> Result<Option<String>>,
) -> Result<()> {
    let mut last = String::new();
    wait_until(timeout, Duration::from_millis(500), || {
        let obj = env.cluster(ns, NAME)?;
        if condition_status(&obj, "Ready").as_deref() != Some("True")
            || obj["status"]["observedGeneration"] != obj["metadata"]["generation"]
        {
            last = "not Ready".into();
            return Ok(false);
        }
        let members = env.members(ns, NAME)?;
        if let Some(m) = members.iter().find(|m| !m.ready || m.deleting) {
            last = format!("pod {} not Ready", m.name);
            return Ok(false);
        }
        for m in &members {
            if let Some(wrong) = check(&m.ip)? {
                last = format!("{}: {wrong}", m.name);
                return Ok(false);
            }
        }
        Ok(true)
    })
    .with_context(|| format!("{what}: {last}"))
}

fn uids(env: &Env, ns: &str) -> Result<BTreeMap<String, String>> {
    Ok(env
        .pod_identities(ns, NAME)?
        .into_iter()
        .map(|(name, p)| (name, p.uid))
        .collect())
}

/// Checks for `quiet` that no member pod was re-created.
fn none_restarted(
    env: &Env,
    ns: &str,
    before: &BTreeMap<String, String>,
    quiet: Duration,
) -> Result<()> {
    std::thread::sleep(quiet);
    let after = uids(env, ns)?;
    ensure!(
        &after == before,
        "members were restarted: {before:?} -> {after:?}"
    );
    Ok(())
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn scenario(env: &Env, ns: &str) -> Result<()> {
    let work = env.work_dir("security_reversals")?;
    let m = cluster_manifest(NAME, 2, 1);
    env.create_cluster(ns, &m, Duration::from_secs(240))?;
    let a = env.password(ns, NAME)?;
    let ips = env.member_ips(ns, NAME)?;
    let hosts: Vec<&str> = ips.iter().map(String::as_str).collect();
    // The writer reads the password as an application reading the Secret
    // would: from a file that follows it, at each reconnection.
    let password_file = work.join("password");
    std::fs::write(&password_file, &a)?;
    let password_arg = password_file.to_string_lossy().to_string();
    let mut load = env.start_load(
        &hosts,
        &a,
        &work,
        "reversals",
        &[
            "--username",
            "default",
            "--wait-replicas",
            "1",
            "--password-file",
            &password_arg,
        ],
    )?;
    let set_password = |password: &str| -> Result<()> {
        set_password(env, ns, password)?;
        std::fs::write(&password_file, password)?;
        Ok(())
    };
    wait_load_running(&mut load)?;

    // 1. auth off, on again before the roll finished.
    env.patch_cluster(ns, NAME, r#"{"spec":{"auth":{"enabled":false}}}"#)?;
    std::thread::sleep(Duration::from_secs(6));
    env.patch_cluster(ns, NAME, r#"{"spec":{"auth":{"enabled":true}}}"#)?;
    wait_settled(
        env,
        ns,
        "auth off then on",
        Duration::from_secs(300),
        |ip| {
            let bare = ping(env, ip, "")?;
            if !bare.contains("NOAUTH") {
                return Ok(Some(format!("PING without a password: {bare:?}")));
            }
            let with = ping(env, ip, &a)?;
            Ok((with != "PONG").then(|| format!("PING with the password: {with:?}")))
        },
    )?;
    println!("security_reversals: auth off, on again 6 s later: no member left open");

    // 2. A -> B -> A.
    let b = format!("{a}-b");
    set_password(&b)?;
    std::thread::sleep(Duration::from_secs(4));
    set_password(&a)?;
    wait_settled(env, ns, "A -> B -> A", Duration::from_secs(300), |ip| {
        let with_a = ping(env, ip, &a)?;
        let with_b = ping(env, ip, &b)?;
        Ok((with_a != "PONG" || !with_b.contains("WRONGPASS"))
            .then(|| format!("A: {with_a:?}, B: {with_b:?}")))
    })?;
    println!("security_reversals: A -> B -> A: A alone on every member");

    // 3. A -> B -> C.
    let c = format!("{a}-c");
    set_password(&b)?;
    std::thread::sleep(Duration::from_secs(4));
    set_password(&c)?;
    wait_settled(env, ns, "A -> B -> C", Duration::from_secs(300), |ip| {
        let replies = [ping(env, ip, &a)?, ping(env, ip, &b)?, ping(env, ip, &c)?];
        let ok = replies[0].contains("WRONGPASS")
            && replies[1].contains("WRONGPASS")
            && replies[2] == "PONG";
        Ok((!ok).then(|| format!("A, B, C: {replies:?}")))
    })?;
    println!("security_reversals: A -> B -> C: C alone on every member");
    let summary = finish_load(&mut load, "writes across the reversals")?;
    let verify = env.verify_cluster_keys(ns, NAME, &c, &work.join("reversals.keys"))?;
    ensure!(
        verify["missing"] == 0,
        "keys across the reversals: {verify}"
    );
    println!("security_reversals: writer across the three reversals {summary}");

    // 4. the record deleted: rebuilt, nothing restarted.
    let before = uids(env, ns)?;
    let applied = format!("{NAME}-auth-applied");
    env.kubectl(&["delete", "secret", &applied, "-n", ns])?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(env
            .secret_text(ns, &applied, "password")
            .is_ok_and(|p| p == c))
    })
    .context("the deleted record was not rebuilt with the password the members run")?;
    none_restarted(env, ns, &before, Duration::from_secs(10))?;
    println!("security_reversals: {applied} deleted: rebuilt, no member restarted");

    // 5. the password Secret deleted: the same password again.
    let auth = format!("{NAME}-auth");
    env.kubectl(&["delete", "secret", &auth, "-n", ns])?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(env.secret_text(ns, &auth, "password").is_ok())
    })
    .context("the deleted password Secret was not made again")?;
    let again = env.secret_text(ns, &auth, "password")?;
    ensure!(
        again == c,
        "the password Secret came back with another password"
    );
    none_restarted(env, ns, &before, Duration::from_secs(10))?;
    println!(
        "security_reversals: {auth} deleted: made again with the members' password, no restart"
    );

    // 6. the users Secret deleted: replicas still link up after a drop.
    let users = format!("{NAME}-users");
    let old_replication = env.secret_text(ns, &users, "replication-password")?;
    env.kubectl(&["delete", "secret", &users, "-n", ns])?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(env
            .secret_text(ns, &users, "replication-password")
            .is_ok_and(|p| p != old_replication))
    })
    .context("the deleted users Secret was not made again")?;
    // Let the operator hand the new password to every member.
    std::thread::sleep(Duration::from_secs(5));
    let replicas: Vec<_> = env
        .members(ns, NAME)?
        .into_iter()
        .filter(|m| m.role == "replica")
        .collect();
    ensure!(!replicas.is_empty(), "no replica");
    for r in &replicas {
        env.valkey_cli(&r.ip, &c, &["client", "kill", "type", "master"])?;
    }
    for r in &replicas {
        let mut last = String::new();
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            last = env.valkey_cli(&r.ip, &c, &["info", "replication"])?;
            Ok(last.contains("master_link_status:up"))
        })
        .with_context(|| format!("replica {} did not link up again: {last}", r.name))?;
    }
    none_restarted(env, ns, &before, Duration::from_secs(1))?;
    if !env
        .object_events(ns, "ValkeyCluster", NAME)?
        .iter()
        .any(|e| e.reason == "UsersSecretRecreated")
    {
        bail!("no UsersSecretRecreated event");
    }
    println!(
        "security_reversals: {users} deleted: made again; replicas link up after a drop, no restart"
    );
    Ok(())
}

fn hostile_specs(env: &Env, ns: &str) -> Result<()> {
    // A privileged container is refused with the field named; nothing runs.
    let privileged = cluster_manifest("priv", 1, 0).extra_spec(
        "  securityContext:\n    privileged: true\n    allowPrivilegeEscalation: true\n",
    );
    env.apply(ns, &privileged.yaml())?;
    let obj = env.wait_condition(ns, "priv", "Ready", "False", Duration::from_secs(30))?;
    let ready = e2e::cluster::condition(&obj, "Ready")
        .cloned()
        .unwrap_or_default();
    ensure!(
        ready["reason"] == "InvalidSpec"
            && ready["message"]
                .as_str()
                .is_some_and(|m| m.contains("spec.securityContext.privileged")),
        "a privileged securityContext was not refused with the field named: {ready}"
    );
    ensure!(
        env.members(ns, "priv")?.is_empty(),
        "a refused cluster got pods"
    );
    println!(
        "security_reversals: privileged securityContext refused: {}",
        ready["message"]
    );

    // An object of the cluster's name that it does not own is not taken over.
    env.apply(
        ns,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: taken-config\ndata:\n  mine: \"yes\"\n",
    )?;
    env.apply(ns, &cluster_manifest("taken", 1, 0).yaml())?;
    wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
        Ok(env
            .object_events(ns, "ValkeyCluster", "taken")?
            .iter()
            .any(|e| e.message.contains("not owned by this ValkeyCluster")))
    })
    .context("no event says the ConfigMap is not owned")?;
    let cm = env.kubectl_json(&["get", "configmap", "taken-config", "-n", ns])?;
    ensure!(
        cm["data"]["mine"] == "yes"
            && cm["data"].get("valkey.conf").is_none()
            && cm["metadata"]["ownerReferences"].is_null(),
        "the user's ConfigMap was taken over: {cm}"
    );
    println!(
        "security_reversals: a ConfigMap of the cluster's name it does not own is left alone (NotOwned)"
    );
    Ok(())
}

#[test]
fn hostile_specs_are_refused_and_nothing_is_taken_over() {
    let Some(suite) = Suite::start("security_reversals", "hostile-specs", "e2e-hostile-spec")
    else {
        return;
    };
    suite.run(&["priv", "taken"], hostile_specs);
}

#[test]
fn security_follows_the_spec_through_reversals_and_deletions() {
    let Some(suite) = Suite::start("security_reversals", "reversals", "e2e-rev") else {
        return;
    };
    suite.run(&[NAME], scenario);
}
