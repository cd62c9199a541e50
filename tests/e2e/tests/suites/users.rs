//! ACL users (issue 10, item 2): `spec.users` become Valkey ACL users on
//! every member, live.
//!
//! - `app` (rules `~app:* +@read +@write`) writes and reads `app:1` through
//!   the cluster (redis-cli -c and the Python `valkey` cluster client as
//!   that user), and is refused `FLUSHALL`, `CONFIG SET` and `other:1`;
//! - its password rotates through its Secret: with both keys listed and
//!   present, old and new passwords log in and a client connected with the
//!   old one keeps writing; once the old key is gone from the Secret the old
//!   password is refused and the client still writes;
//! - a user whose Secret is missing is reported (`UserSecretMissing`) and
//!   the cluster stays Ready; a user removed from the spec is deleted;
//! - the cluster password (`<cluster>-auth`) rotates under a `WAIT 1`
//!   writer: the new one is added, the members roll onto it, then the old
//!   one is dropped; nothing acknowledged is lost and Ready is never gone
//!   for longer than a member's restart;
//! - auth goes off and on again under a `WAIT 1` writer (each a roll, the
//!   same bounds);
//! - replicas log in to their primaries as the system user
//!   `valkey-replication` (its password in `<cluster>-users`), also on a
//!   member restarted with the operator paused; that user is refused
//!   CONFIG, FLUSHALL and ACL;
//! - the operator logs in to every member as its own system user
//!   `valkey-operator` (its password in `<cluster>-users`), which runs the
//!   commands the operator sends (CLUSTER...) and no data command.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, condition_status, wait_until};
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load, wait_load_running};
use std::collections::BTreeSet;
use std::time::Duration;

/// `redis-cli -c` as `user` with `password` against `ip`: the raw reply
/// (errors are replies here, not failures).
fn as_user(env: &Env, ip: &str, user: &str, password: &str, args: &[&str]) -> Result<String> {
    let out = env
        .redis_cli()
        .args(["-h", ip, "-p", "6379", "--user", user, "--pass", password])
        .args(["--no-auth-warning", "-c"])
        .args(args)
        .output()
        .context("redis-cli")?;
    Ok(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .trim()
    .to_string())
}

/// The longest time the cluster was seen out of Ready, sampled as a wait
/// polls it.
#[derive(Default)]
struct NotReady {
    since: Option<std::time::Instant>,
    longest: Duration,
}

impl NotReady {
    fn sample(&mut self, cluster: &serde_json::Value) {
        if condition_status(cluster, "Ready").as_deref() == Some("True") {
            self.since = None;
        } else {
            let since = *self.since.get_or_insert_with(std::time::Instant::now);
            self.longest = self.longest.max(since.elapsed());
        }
    }
}

/// Whether `password` logs `user` in on every member.
fn logs_in(env: &Env, ips: &[String], user: &str, password: &str) -> Result<bool> {
    for ip in ips {
        if as_user(env, ip, user, password, &["ping"])? != "PONG" {
            return Ok(false);
        }
    }
    Ok(true)
}

/// SHA-256 of `text`, lower-case hex (how ACL lists a password).
fn sha256_hex(text: &str) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            if let Some(mut i) = c.stdin.take() {
                i.write_all(text.as_bytes())?;
            }
            c.wait_with_output()
        })
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    out.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

fn secret_yaml(pairs: &[(&str, &str)]) -> String {
    let mut y =
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: app-pw\nstringData:\n".to_string();
    for (k, v) in pairs {
        y.push_str(&format!("  {k}: {v}\n"));
    }
    y
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn app_users_are_limited_and_rotate_without_dropping_clients() {
    let Some(suite) = Suite::start("users", "users", "e2e-users") else {
        return;
    };
    suite.run(&["acl"], |env, ns| {
        let work = env.work_dir("users")?;
        env.apply(ns, &secret_yaml(&[("password", "old-secret-1")]))?;
        let users = "  users:
    - name: app
      passwordSecret: {name: app-pw, keys: [password, password-next]}
      permissions: \"~app:* +@read +@write\"
    - name: ghost
      passwordSecret: {name: ghost-pw}
      permissions: \"~* +@all\"
";
        let m = cluster_manifest("acl", 2, 1).extra_spec(users);
        env.apply(ns, &m.yaml())?;
        env.wait_ready_shape(ns, &m, Duration::from_secs(240))?;
        let ips = env.member_ips(ns, "acl")?;
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            logs_in(env, &ips, "app", "old-secret-1")
        })
        .context("user app never logged in on every member")?;

        // Limited to its keys and its commands.
        let ip = &ips[0];
        let set = as_user(env, ip, "app", "old-secret-1", &["set", "app:1", "v1"])?;
        ensure!(set == "OK", "SET app:1 as app: {set}");
        let get = as_user(env, ip, "app", "old-secret-1", &["get", "app:1"])?;
        ensure!(get == "v1", "GET app:1 as app: {get}");
        for args in [
            vec!["flushall"],
            vec!["config", "set", "maxmemory", "1"],
            vec!["set", "other:1", "x"],
            vec!["get", "other:1"],
        ] {
            let reply = as_user(env, ip, "app", "old-secret-1", &args)?;
            ensure!(
                reply.contains("NOPERM"),
                "{} as app was not refused: {reply}",
                args.join(" ")
            );
        }
        // The Python cluster client as app.
        let hosts: Vec<&str> = ips.iter().map(String::as_str).collect();
        let filled = env.judge(
            &hosts,
            "old-secret-1",
            &[
                "--username",
                "app",
                "fill",
                "--count",
                "500",
                "--prefix",
                "app:fill",
            ],
        )?;
        ensure!(filled["missing_or_wrong"] == 0, "fill as app: {filled}");
        // The user with no Secret is reported; the cluster stays Ready.
        wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
            Ok(env
                .object_events(ns, "ValkeyCluster", "acl")?
                .iter()
                .any(|e| e.reason == "UserSecretMissing" && e.message.contains("ghost")))
        })
        .context("no UserSecretMissing event for ghost")?;
        env.wait_condition(ns, "acl", "Ready", "True", Duration::from_secs(10))?;
        println!("users: app limited to app:* and read/write; ghost reported");

        // Rotation under a connected client.
        let mut load = env.start_load(
            &hosts,
            "old-secret-1",
            &work,
            "rotate",
            &["--username", "app", "--prefix", "app:rotate"],
        )?;
        wait_load_running(&mut load)?;
        env.apply(
            ns,
            &secret_yaml(&[
                ("password", "old-secret-1"),
                ("password-next", "new-secret-2"),
            ]),
        )?;
        wait_until(Duration::from_secs(90), Duration::from_secs(1), || {
            logs_in(env, &ips, "app", "new-secret-2")
        })
        .context("the new password never logged in")?;
        ensure!(
            logs_in(env, &ips, "app", "old-secret-1")?,
            "the old password stopped working while both keys are listed"
        );
        // The old key goes away.
        env.kubectl(&[
            "patch",
            "secret",
            "app-pw",
            "-n",
            ns,
            "--type",
            "json",
            "-p",
            r#"[{"op":"remove","path":"/data/password"}]"#,
        ])?;
        wait_until(Duration::from_secs(90), Duration::from_secs(1), || {
            let mut refused = true;
            for ip in &ips {
                refused &=
                    as_user(env, ip, "app", "old-secret-1", &["ping"])?.contains("WRONGPASS");
            }
            Ok(refused)
        })
        .context("the old password was never refused")?;
        ensure!(
            logs_in(env, &ips, "app", "new-secret-2")?,
            "new password refused"
        );
        let summary = finish_load(&mut load, "writes across the rotation")?;
        ensure!(
            summary["errors"] == 0,
            "the client connected with the old password saw errors: {summary}"
        );
        let verify = env.judge(
            &hosts,
            "new-secret-2",
            &[
                "--username",
                "app",
                "verify",
                "--in",
                &work.join("rotate.keys").to_string_lossy(),
            ],
        )?;
        ensure!(
            verify["missing"] == 0,
            "keys written across the rotation: {verify}"
        );
        println!("users: password rotated under a connected client {summary}");

        // The members' users file (`acl-users`, loaded at start): a member
        // that restarts while the operator stays away (the cluster paused)
        // has app with its current password before anyone sets it.
        let file = || env.secret_text(ns, "acl-users", "users.acl");
        let new_hash = sha256_hex("new-secret-2");
        let old_hash = sha256_hex("old-secret-1");
        wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
            let f = file()?;
            Ok(f.lines().any(|l| l.starts_with("user app ") && l.contains(&new_hash) && !l.contains(&old_hash)))
        })
        .with_context(|| format!("acl-users never held app with the new password alone: {:?}", file()))?;
        let f = file()?;
        ensure!(
            !f.contains("ghost") && !f.contains("user default") && !f.contains("new-secret-2"),
            "acl-users holds more than app's hashes: {f}"
        );
        let annotate = |value: &str| env.kubectl(&["annotate", "valkeycluster", "acl", "-n", ns, value]);
        annotate("valkey.rs/paused=true")?;
        env.wait_condition(ns, "acl", "Paused", "True", Duration::from_secs(30))?;
        let victim = env
            .members(ns, "acl")?
            .into_iter()
            .find(|m| m.role == "replica")
            .context("no replica pod")?;
        env.kubectl(&["delete", "pod", &victim.name, "-n", ns, "--wait=true"])?;
        let mut back = None;
        wait_until(Duration::from_secs(120), Duration::from_millis(500), || {
            back = env
                .members(ns, "acl")?
                .into_iter()
                .find(|m| m.name == victim.name && m.ready && !m.deleting);
            Ok(back.is_some())
        })
        .context("the deleted member pod did not come back Ready")?;
        let back = back.context("no pod")?;
        let pong = as_user(env, &back.ip, "app", "new-secret-2", &["ping"])?;
        ensure!(pong == "PONG", "app on the restarted member (no operator since): {pong}");
        let old = as_user(env, &back.ip, "app", "old-secret-1", &["ping"])?;
        ensure!(old.contains("WRONGPASS"), "the old password on the restarted member: {old}");
        let denied = as_user(env, &back.ip, "app", "new-secret-2", &["flushall"])?;
        ensure!(denied.contains("NOPERM"), "FLUSHALL as app on the restarted member: {denied}");
        annotate("valkey.rs/paused-")?;
        env.wait_condition(ns, "acl", "Ready", "True", Duration::from_secs(120))?;
        // Attached again (a member without a volume comes back as a new
        // node), it logs in to its primary as the replication user (its
        // environment; the primary has the user from its file or live),
        // which may replicate and import slots but run no admin command.
        let password = env.password(ns, "acl")?;
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            Ok(env
                .valkey_cli(&back.ip, &password, &["info", "replication"])?
                .contains("master_link_status:up"))
        })
        .context("the restarted replica's link to its primary never came up")?;
        let primary = env.member_with_role(ns, "acl", back.shard, "primary")?;
        let links = env.valkey_cli(&primary.ip, &password, &["client", "list", "type", "replica"])?;
        ensure!(
            !links.trim().is_empty() && links.lines().all(|l| l.contains("user=valkey-replication")),
            "replicas of {} log in as another user: {links}",
            primary.name
        );
        let replication = env.secret_text(ns, "acl-users", "replication-password")?;
        for command in [&["config", "get", "port"][..], &["flushall"], &["acl", "list"]] {
            let denied = as_user(env, &primary.ip, "valkey-replication", &replication, command)?;
            ensure!(
                denied.contains("NOPERM"),
                "{command:?} as the replication user: {denied}"
            );
        }
        let ips = env.member_ips(ns, "acl")?;
        println!("users: a member restarted with the operator paused has app (new password only, its limits) from the users file, and replicates as valkey-replication (no admin command, no FLUSHALL)");

        // The operator logs in as its own user on every member (the restarted
        // one too: the user is in its file), which may run the commands the
        // operator sends and no data command.
        wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
            for ip in &ips {
                let clients = env.valkey_cli(ip, &password, &["client", "list"])?;
                if !clients.lines().any(|l| l.contains("user=valkey-operator")) {
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .context("a member has no connection of the operator as valkey-operator")?;
        let operator = env.secret_text(ns, "acl-users", "operator-password")?;
        let myid = as_user(env, &primary.ip, "valkey-operator", &operator, &["cluster", "myid"])?;
        ensure!(
            myid.len() == 40 && myid.chars().all(|c| c.is_ascii_hexdigit()),
            "CLUSTER MYID as the operator's user: {myid}"
        );
        for command in [
            &["get", "app:1"][..],
            &["set", "app:op", "1"],
            &["flushall"],
            &["keys", "*"],
            &["shutdown", "nosave"],
        ] {
            let denied = as_user(env, &primary.ip, "valkey-operator", &operator, command)?;
            ensure!(
                denied.contains("NOPERM"),
                "{command:?} as the operator's user: {denied}"
            );
        }
        println!("users: the operator is logged in to every member as valkey-operator, which runs CLUSTER but no data command, no FLUSHALL, no SHUTDOWN");

        // Users removed from the spec are deleted.
        env.patch_cluster(ns, "acl", r#"{"spec":{"users":null}}"#)?;
        wait_until(Duration::from_secs(60), Duration::from_secs(1), || {
            let password = env.password(ns, "acl")?;
            let mut gone = true;
            for ip in &ips {
                let list = env.valkey_cli(ip, &password, &["acl", "users"])?;
                gone &= !list
                    .lines()
                    .any(|l| l.trim() == "app" || l.trim() == "ghost");
            }
            Ok(gone)
        })
        .context("app was not deleted from every member")?;
        println!("users: removed from the spec, deleted from the members");

        // The cluster password rotates under a WAIT 1 writer: the operator
        // adds the new one, rolls the members onto it (their environment),
        // then drops the old one. Nothing acknowledged is lost and the
        // cluster is never out of Ready for longer than one member's restart.
        let old = env.password(ns, "acl")?;
        let old_uids: BTreeSet<String> = env
            .pod_identities(ns, "acl")?
            .values()
            .map(|p| p.uid.clone())
            .collect();
        let mut load = env.start_load(
            &hosts,
            &old,
            &work,
            "cluster-rotate",
            &["--wait-replicas", "1"],
        )?;
        wait_load_running(&mut load)?;
        let new = "rotated-cluster-password-3";
        env.kubectl(&[
            "patch",
            "secret",
            "acl-auth",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"stringData":{{"password":"{new}"}}}}"#),
        ])?;
        let mut not_ready = NotReady::default();
        let mut last = String::new();
        wait_until(Duration::from_secs(420), Duration::from_millis(500), || {
            let obj = env.cluster(ns, "acl")?;
            not_ready.sample(&obj);
            let rotated = env
                .object_events(ns, "ValkeyCluster", "acl")?
                .iter()
                .any(|e| e.reason == "PasswordRotated");
            if !rotated {
                last = "no PasswordRotated event yet".into();
                return Ok(false);
            }
            for ip in env.member_ips(ns, "acl")? {
                let with_new = as_user(env, &ip, "default", new, &["ping"])?;
                let with_old = as_user(env, &ip, "default", &old, &["ping"])?;
                if with_new != "PONG" || !with_old.contains("WRONGPASS") {
                    last = format!("{ip}: new password {with_new:?}, old password {with_old:?}");
                    return Ok(false);
                }
            }
            Ok(true)
        })
        .with_context(|| format!("the cluster password rotation did not finish: {last}"))?;
        ensure!(
            not_ready.longest < Duration::from_secs(60),
            "the cluster left Ready for {:?} during the rotation",
            not_ready.longest
        );
        let summary = finish_load(&mut load, "writes across the cluster password rotation")?;
        let verify = env.verify_cluster_keys(ns, "acl", new, &work.join("cluster-rotate.keys"))?;
        ensure!(verify["missing"] == 0, "keys across the rotation: {verify}");
        let rolled = env
            .pod_identities(ns, "acl")?
            .values()
            .all(|p| !old_uids.contains(&p.uid));
        ensure!(
            rolled,
            "the members were not restarted onto the new password"
        );
        env.wait_ready_shape(ns, &m, Duration::from_secs(120))?;
        println!("users: cluster password rotated under a WAIT 1 writer {summary}");

        // Auth off, then on again, under a WAIT 1 writer that logs in as
        // `default` with the password (three-argument AUTH, which members
        // taking any password accept too): each switch is a roll, the
        // writer stays in, nothing acknowledged is lost.
        let ips = env.member_ips(ns, "acl")?;
        let hosts: Vec<&str> = ips.iter().map(String::as_str).collect();
        let mut load = env.start_load(
            &hosts,
            new,
            &work,
            "auth-switch",
            &["--username", "default", "--wait-replicas", "1"],
        )?;
        wait_load_running(&mut load)?;
        let switch = |enabled: bool, reason: &str| -> Result<Duration> {
            let uids: BTreeSet<String> = env
                .pod_identities(ns, "acl")?
                .values()
                .map(|p| p.uid.clone())
                .collect();
            env.patch_cluster(
                ns,
                "acl",
                &format!(r#"{{"spec":{{"auth":{{"enabled":{enabled}}}}}}}"#),
            )?;
            let mut not_ready = NotReady::default();
            let mut last = String::new();
            wait_until(Duration::from_secs(420), Duration::from_millis(500), || {
                let obj = env.cluster(ns, "acl")?;
                not_ready.sample(&obj);
                if !env
                    .object_events(ns, "ValkeyCluster", "acl")?
                    .iter()
                    .any(|e| e.reason == reason)
                {
                    last = format!("no {reason} event yet");
                    return Ok(false);
                }
                let pods = env.pod_identities(ns, "acl")?;
                if pods.values().any(|p| uids.contains(&p.uid)) {
                    last = "not every member restarted yet".into();
                    return Ok(false);
                }
                if condition_status(&obj, "Ready").as_deref() != Some("True") {
                    last = "not Ready".into();
                    return Ok(false);
                }
                for ip in env.member_ips(ns, "acl")? {
                    let bare = env
                        .redis_cli()
                        .args(["-h", &ip, "-p", "6379", "ping"])
                        .output()?;
                    let bare = format!(
                        "{}{}",
                        String::from_utf8_lossy(&bare.stdout),
                        String::from_utf8_lossy(&bare.stderr)
                    )
                    .trim()
                    .to_string();
                    let ok = if enabled {
                        bare.contains("NOAUTH")
                    } else {
                        bare == "PONG"
                    };
                    if !ok {
                        last = format!("{ip}: PING without a password: {bare:?}");
                        return Ok(false);
                    }
                }
                Ok(true)
            })
            .with_context(|| format!("auth enabled={enabled} did not finish: {last}"))?;
            ensure!(
                not_ready.longest < Duration::from_secs(60),
                "the cluster left Ready for {:?} switching auth to {enabled}",
                not_ready.longest
            );
            Ok(not_ready.longest)
        };
        let off = switch(false, "AuthDisabled")?;
        println!("users: auth off (longest not Ready {off:?})");
        let on = switch(true, "AuthEnabled")?;
        println!("users: auth on again (longest not Ready {on:?})");
        let summary = finish_load(&mut load, "writes across auth off and on")?;
        let verify = env.verify_cluster_keys(ns, "acl", new, &work.join("auth-switch.keys"))?;
        ensure!(
            verify["missing"] == 0,
            "keys across auth off and on: {verify}"
        );
        ensure!(
            logs_in(env, &env.member_ips(ns, "acl")?, "default", new)?,
            "the password does not log in after auth came back on"
        );
        println!("users: auth off -> on under a WAIT 1 writer {summary}");
        Ok(())
    });
}
