// Over 600 lines: tests, one scenario per function, read top to bottom.
//! TLS (issue 10, item 1): with `spec.tls.enabled` the members speak only TLS,
//! to clients, to their replicas and on the cluster bus.
//!
//! - `secure` (3x1) uses the operator's own CA: the bundle clients trust is
//!   published in Secret `secure-tls-ca` (`ca.crt`); `redis-cli --tls`,
//!   `redis-cli --cluster check --tls` and the Python `valkey` cluster client
//!   work, openssl verifies that each served certificate names its pod's IP,
//!   plain TCP is refused, and `tls-cluster`/`tls-replication` are on.
//! - renewal: the serving certificate Secret is deleted while a client writes;
//!   the operator issues a new one, the members serve it (a new serial) without
//!   a restart, and every acknowledged write reads back.
//! - `byo` (1x1) names a Secret the user made (with openssl here, as
//!   cert-manager would): it waits in `TLSSecretMissing` until the Secret is
//!   there, then comes up on the user's certificate.
//! - a rolling restart (a start-only setting) goes through over TLS and keeps
//!   every key.
//! - the operator's CA rotates (annotation `valkey.rs/rotate-ca`) while a
//!   client writes whose CA file follows `secure-tls-ca`: the bundle of both
//!   CAs first, then the new CA alone; afterwards every member presents a
//!   certificate of the new CA, none verifies against the old one, and every
//!   acknowledged write reads back.
//! - the CA's Secret (`secure-tls-ca-key`) deleted while a client writes:
//!   the operator makes a new CA, trusted beside the lost one first
//!   (`CAKeyLost`), signing once every member trusts it, alone once every
//!   member presents its certificate; every acknowledged write reads back.
//!   `secure-tls-ca` deleted: published again with the same CA.
//! - TLS turned on for a live cluster (`switch`, 2x1, plaintext first) while
//!   a client writes with WAIT 1 and follows the members to TLS once they
//!   refuse plaintext: every member restarts once (onto a pod with the
//!   certificates, still on plaintext), then all switch at once (event
//!   `TLSEnabled`); afterwards plaintext is refused, `tls-cluster`,
//!   `tls-replication` and `port 0` read back, `--cluster check` passes over
//!   TLS, a member restarted later comes back on TLS, and every
//!   acknowledged write reads back. Turning TLS off again is refused.
//! - every member's exporter sidecar (the operator's image, loaded into the
//!   testbed first) reaches its member over TLS on 127.0.0.1 with the mounted
//!   CA and reports it up, with the cluster's state, slots and roles.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, condition, condition_status, wait_until};
use e2e::exporter;
use e2e::manifest::cluster_manifest;
use e2e::suite::{Suite, finish_load};
use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// `data[key]` of a Secret, decoded, or `None` while it is not there.
fn secret_key(env: &Env, ns: &str, secret: &str, key: &str) -> Option<String> {
    let obj = env
        .kubectl_json(&["get", "secret", secret, "-n", ns])
        .ok()?;
    let b64 = obj["data"][key].as_str()?;
    let out = Command::new("base64")
        .arg("-d")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take()?.write_all(b64.as_bytes()).ok()?;
            child.wait_with_output().ok()
        })?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned()).filter(|s| !s.is_empty())
}

/// The serial of the certificate the member at `ip` serves (openssl s_client,
/// verifying it against `ca` and, with `names_ip`, that it names `ip`).
fn served_serial(ip: &str, ca: &Path, names_ip: bool) -> Result<String> {
    let mut verify = Command::new("openssl");
    verify
        .args(["s_client", "-connect", &format!("{ip}:6379"), "-CAfile"])
        .arg(ca)
        .args(["-verify_return_error", "-brief"]);
    if names_ip {
        verify.args(["-verify_ip", ip]);
    }
    let hello = verify
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .context("openssl s_client")?;
    ensure!(
        hello.status.success(),
        "openssl s_client to {ip}:6379 failed to verify the served certificate \
         (names the IP: {names_ip})"
    );
    let full = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {ip}:6379 -CAfile {} -showcerts </dev/null 2>/dev/null \
             | openssl x509 -noout -serial",
            ca.display()
        ))
        .output()
        .context("openssl x509")?;
    let text = String::from_utf8_lossy(&full.stdout).trim().to_string();
    text.strip_prefix("serial=")
        .map(str::to_string)
        .with_context(|| format!("no serial from {ip}: {text:?}"))
}

/// A CA and a certificate it signed for server and client use, made with the
/// openssl CLI into `dir` (`ca.crt`, `tls.crt`, `tls.key`).
fn user_certificates(dir: &Path) -> Result<()> {
    let script = r#"set -e
openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=e2e user CA" \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=byo" -keyout tls.key -out tls.csr 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' > ext.cnf
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
  -extfile ext.cnf -out tls.crt 2>/dev/null
"#;
    let out = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .output()?;
    ensure!(
        out.status.success(),
        "openssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A plain-TCP PING to `ip`: must not be answered.
fn plaintext_refused(env: &Env, ip: &str, password: &str) -> Result<()> {
    let out = Command::new("redis-cli")
        .args(["-h", ip, "-p", "6379", "-a", password, "--no-auth-warning"])
        .args(["ping"])
        .stdin(Stdio::null())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        !text.contains("PONG"),
        "{ip} answered a plaintext PING: {text}"
    );
    // And with TLS it does.
    let pong = env.valkey_cli(ip, password, &["ping"])?;
    ensure!(pong.contains("PONG"), "{ip} over TLS: {pong}");
    Ok(())
}

/// The member at `ip` refuses plaintext, answers over TLS, and has its
/// bus and replication on TLS with no plaintext port.
fn speaks_only_tls(env: &Env, ip: &str, password: &str) -> Result<()> {
    plaintext_refused(env, ip, password)?;
    for (key, want) in [
        ("tls-cluster", "yes"),
        ("tls-replication", "yes"),
        ("port", "0"),
    ] {
        let got = env.valkey_cli(ip, password, &["config", "get", key])?;
        let value = got.lines().nth(1).unwrap_or_default().trim();
        ensure!(value == want, "{ip}: {key} is {value:?}, want {want}");
    }
    Ok(())
}

/// `spec.tls.enabled: true` patched into the plaintext cluster `switch`
/// while a WAIT-1 writer runs (see the module doc). Leaves the suite's
/// clients on plaintext, as it found them.
/// Follows Secret `secure-tls-ca` into `ca_file` (as a mounted Secret would)
/// until a CA change from `from_pem` is over: a bundle of two or more CAs
/// seen, then one CA other than `from_pem`, and `rotated` CARotated events in
/// all. Returns the CA published last and the CA events' reasons.
fn follow_ca_change(
    env: &Env,
    ns: &str,
    from_pem: &str,
    ca_file: &Path,
    rotated: usize,
) -> Result<(String, Vec<String>)> {
    let mut published = from_pem.to_string();
    let mut bundle_seen = false;
    let mut reasons: Vec<String> = Vec::new();
    wait_until(Duration::from_secs(240), Duration::from_millis(500), || {
        let now = secret_key(env, ns, "secure-tls-ca", "ca.crt").unwrap_or_default();
        if now.contains("BEGIN CERTIFICATE") && now != published {
            let tmp = ca_file.with_extension("new");
            std::fs::write(&tmp, &now)?;
            std::fs::rename(&tmp, ca_file)?;
            published = now;
        }
        let certs = published.matches("BEGIN CERTIFICATE").count();
        bundle_seen |= certs >= 2;
        reasons = env
            .object_events(ns, "ValkeyCluster", "secure")?
            .into_iter()
            .map(|e| e.reason)
            .filter(|r| r.starts_with("CA"))
            .collect();
        Ok(bundle_seen
            && certs == 1
            && published != from_pem
            && reasons.iter().filter(|r| *r == "CARotated").count() >= rotated)
    })
    .with_context(|| {
        format!(
            "the CA change did not finish: bundle seen {bundle_seen}, events {reasons:?}, secure-tls-ca holds {} certificates",
            published.matches("BEGIN CERTIFICATE").count()
        )
    })?;
    Ok((published, reasons))
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn tls_on_for_a_live_cluster(
    env: &Env,
    ns: &str,
    switch: &e2e::manifest::ClusterManifest,
    work: &Path,
) -> Result<()> {
    env.wait_ready_shape(ns, switch, Duration::from_secs(300))?;
    let password = env.password(ns, "switch")?;
    let before: BTreeSet<String> = env
        .pod_identities(ns, "switch")?
        .values()
        .map(|p| p.uid.clone())
        .collect();
    // The writer trusts the CA file once the members refuse plaintext; the
    // file is written below, long before the members switch.
    let ca_file = work.join("switch-ca.crt");
    env.use_tls(Some(ca_file.clone()));
    let load = env.start_member_load(
        ns,
        "switch",
        &password,
        work,
        "switch",
        &["--wait-replicas", "1", "--plaintext-first"],
    );
    env.use_tls(None);
    let mut load = load?;
    let started = std::time::Instant::now();
    env.patch_cluster(ns, "switch", r#"{"spec":{"tls":{"enabled":true}}}"#)?;
    let mut ca_pem = String::new();
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        ca_pem = secret_key(env, ns, "switch-tls-ca", "ca.crt").unwrap_or_default();
        Ok(ca_pem.contains("BEGIN CERTIFICATE"))
    })
    .context("Secret switch-tls-ca with ca.crt never appeared")?;
    std::fs::write(&ca_file, &ca_pem)?;
    let mut last = String::new();
    wait_until(Duration::from_secs(600), Duration::from_secs(1), || {
        let reasons: Vec<String> = env
            .object_events(ns, "ValkeyCluster", "switch")?
            .into_iter()
            .map(|e| e.reason)
            .collect();
        let ids = env.pod_identities(ns, "switch")?;
        let obj = env.cluster(ns, "switch")?;
        let ready = obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
            && condition_status(&obj, "Ready").as_deref() == Some("True");
        let all_new = ids.len() == 4 && ids.values().all(|p| !before.contains(&p.uid));
        let enabled = reasons.iter().any(|r| r == "TLSEnabled");
        last = format!("Ready {ready}, every pod new {all_new}, events {reasons:?}");
        Ok(ready && all_new && enabled)
    })
    .with_context(|| format!("the switch to TLS did not finish: {last}"))?;
    let took = started.elapsed().as_secs_f64();
    env.use_tls(Some(ca_file.clone()));
    let result = (|| -> Result<serde_json::Value> {
        env.check_shape(ns, "switch", 2, 1)?;
        for ip in env.member_ips(ns, "switch")? {
            speaks_only_tls(env, &ip, &password)?;
        }
        // The writer follows onto TLS and is acknowledged there.
        let keys = work.join("switch.keys");
        let count = || -> Result<usize> { Ok(std::fs::read_to_string(&keys)?.lines().count()) };
        let at_switch = count()?;
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            Ok(count()? > at_switch + 50)
        })
        .context("the writer was not acknowledged over TLS after the switch")?;
        let summary = finish_load(&mut load, "writes across the switch to TLS")?;
        let verified = env.verify_cluster_keys(ns, "switch", &password, &keys)?;
        ensure!(
            verified["missing"] == 0,
            "keys written across the switch to TLS: {verified}"
        );
        // A member restarted now starts on TLS (its config file says so).
        let replica = env.member_with_role(ns, "switch", 0, "replica")?;
        let old_uid = env
            .pod_identities(ns, "switch")?
            .get(&replica.name)
            .map(|p| p.uid.clone());
        env.kubectl(&["delete", "pod", &replica.name, "-n", ns])?;
        let mut last = String::new();
        wait_until(Duration::from_secs(180), Duration::from_secs(1), || {
            let new_pod = env
                .pod_identities(ns, "switch")?
                .get(&replica.name)
                .is_some_and(|p| Some(&p.uid) != old_uid.as_ref());
            if !new_pod {
                last = "the deleted replica's pod is not back yet".into();
                return Ok(false);
            }
            match env.check_shape(ns, "switch", 2, 1) {
                Ok(_) => Ok(true),
                Err(e) => {
                    last = format!("{e:#}");
                    Ok(false)
                }
            }
        })
        .with_context(|| format!("the restarted replica did not rejoin on TLS: {last}"))?;
        for ip in env.member_ips(ns, "switch")? {
            plaintext_refused(env, &ip, &password)?;
        }
        Ok(summary)
    })();
    env.use_tls(None);
    let summary = result?;
    println!(
        "tls: switch turned TLS on live in {took:.1}s (every member restarted once, then switched at once); plaintext refused, bus and replication on TLS, a restarted member came back on TLS; writer {summary}"
    );
    env.kubectl(&[
        "delete",
        "valkeycluster",
        "switch",
        "-n",
        ns,
        "--wait=false",
    ])?;
    Ok(())
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn members_speak_only_tls_and_renew_their_certificate() {
    let Some(suite) = Suite::start("tls", "tls", "e2e-tls") else {
        return;
    };
    suite.run(&["switch", "secure", "byo"], |env, ns| {
        let work = env.work_dir("tls")?;
        // The member pods' exporter runs the operator's image: loaded before
        // the members start, or they run a placeholder.
        exporter::load_image(env)?;
        let switch = cluster_manifest("switch", 2, 1);
        env.apply(ns, &switch.yaml())?;
        let tls_spec = "  tls:\n    enabled: true\n  exporter:\n    enabled: true\n";
        let secure = cluster_manifest("secure", 3, 1).extra_spec(tls_spec);
        env.apply(ns, &secure.yaml())?;
        tls_on_for_a_live_cluster(env, ns, &switch, &work)?;

        // The CA clients trust: published by the operator.
        let mut ca_pem = String::new();
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            ca_pem = secret_key(env, ns, "secure-tls-ca", "ca.crt").unwrap_or_default();
            Ok(ca_pem.contains("BEGIN CERTIFICATE"))
        })
        .context("Secret secure-tls-ca with ca.crt never appeared")?;
        let ca_file = work.join("secure-ca.crt");
        std::fs::write(&ca_file, &ca_pem)?;
        env.use_tls(Some(ca_file.clone()));

        // Ready, with its shape checked over TLS (CLUSTER NODES and
        // `redis-cli --cluster check --tls` on every member).
        env.wait_ready_shape(ns, &secure, Duration::from_secs(300))?;
        let password = env.password(ns, "secure")?;
        let ips = env.member_ips(ns, "secure")?;
        for ip in &ips {
            speaks_only_tls(env, ip, &password)?;
        }
        println!(
            "tls: secure is Ready over TLS only; plaintext refused on {} members",
            ips.len()
        );
        exporter::wait_members_report(env, ns, "secure", 3, 1, Duration::from_secs(120))?;
        println!(
            "tls: every member's exporter reads its member over TLS (up, cluster ok, slots, roles)"
        );

        // The Python cluster client over TLS.
        let hosts: Vec<&str> = ips.iter().map(String::as_str).collect();
        let filled = env.judge(&hosts, &password, &["fill", "--count", "2000"])?;
        ensure!(filled["written"] == 2000, "fill over TLS: {filled}");
        ensure!(filled["missing_or_wrong"] == 0, "fill over TLS: {filled}");

        // The first certificate is issued before the pods have IPs; the one
        // that names them reaches the members once the Secret volume is
        // refreshed and Valkey reloads its files.
        let mut before: Vec<String> = Vec::new();
        wait_until(Duration::from_secs(90), Duration::from_secs(2), || {
            before = ips
                .iter()
                .map(|ip| served_serial(ip, &ca_file, true).unwrap_or_default())
                .collect();
            Ok(before.iter().all(|s| !s.is_empty()))
        })
        .with_context(|| {
            format!("the members never served a certificate naming their IP: {before:?}")
        })?;

        // Renewal while a client writes: delete the serving certificate.
        let mut load = env.start_member_load(ns, "secure", &password, &work, "renew", &[])?;
        env.kubectl(&["delete", "secret", "secure-tls", "-n", ns])?;
        let mut now: Vec<String> = Vec::new();
        wait_until(Duration::from_secs(120), Duration::from_secs(2), || {
            // A failed handshake is not an answer yet: ask again.
            now = ips
                .iter()
                .map(|ip| served_serial(ip, &ca_file, true).unwrap_or_default())
                .collect();
            Ok(now
                .iter()
                .zip(&before)
                .all(|(a, b)| !a.is_empty() && a != b))
        })
        .with_context(|| {
            format!("the members did not serve a new certificate: before {before:?}, now {now:?}")
        })?;
        let summary = finish_load(&mut load, "writes across the renewal")?;
        let verified =
            env.verify_cluster_keys(ns, "secure", &password, &work.join("renew.keys"))?;
        ensure!(
            verified["missing"] == 0,
            "keys written across the renewal: {verified}"
        );
        let events = env.object_events(ns, "ValkeyCluster", "secure")?;
        ensure!(
            events.iter().any(|e| e.reason == "CertificateIssued"),
            "no CertificateIssued event: {events:?}"
        );
        println!("tls: certificate renewed (serials {before:?} -> {now:?}) under load {summary}");

        // A rolling restart over TLS: the probes and the preStop hook speak
        // TLS, the new pods' IPs get into a new certificate, and the data
        // stays (the primaries fail over to their replicas first).
        let old_uids: BTreeSet<String> = env
            .pod_identities(ns, "secure")?
            .values()
            .map(|p| p.uid.clone())
            .collect();
        env.patch_cluster(ns, "secure", r#"{"spec":{"config":{"tcp-backlog":"256"}}}"#)?;
        let mut last = String::new();
        wait_until(Duration::from_secs(600), Duration::from_secs(1), || {
            let ids = env.pod_identities(ns, "secure")?;
            let obj = env.cluster(ns, "secure")?;
            let current = obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
            let settled = current
                && condition_status(&obj, "Ready").as_deref() == Some("True")
                && condition_status(&obj, "Progressing").as_deref() != Some("True");
            let all_new = ids.len() == 6 && ids.values().all(|p| !old_uids.contains(&p.uid));
            if !(settled && all_new) {
                last = format!("settled {settled}, all pods new {all_new}");
                return Ok(false);
            }
            match env.check_shape(ns, "secure", 3, 1) {
                Ok(_) => Ok(true),
                Err(e) => {
                    last = format!("{e:#}");
                    Ok(false)
                }
            }
        })
        .with_context(|| format!("the rolling restart over TLS did not finish: {last}"))?;
        let verified =
            env.verify_cluster_keys(ns, "secure", &password, &work.join("renew.keys"))?;
        ensure!(
            verified["missing"] == 0,
            "keys after the rolling restart over TLS: {verified}"
        );
        println!("tls: rolled every member over TLS; every key reads back");

        // CA rotation while a client writes. The client's CA file follows
        // Secret secure-tls-ca, as a mounted Secret would: the bundle of
        // both CAs, then the new CA alone. The members trust the new CA
        // before it signs, and present its certificate before the old one
        // is dropped, so no handshake fails on the way.
        let old_ca_file = work.join("secure-ca-1.crt");
        std::fs::write(&old_ca_file, &ca_pem)?;
        let mut load = env.start_member_load(ns, "secure", &password, &work, "rotate", &[])?;
        env.kubectl(&[
            "annotate",
            "valkeycluster",
            "secure",
            "-n",
            ns,
            "valkey.rs/rotate-ca=e2e-1",
        ])?;
        let started = std::time::Instant::now();
        let (published, reasons) = follow_ca_change(env, ns, &ca_pem, &ca_file, 1)?;
        let took = started.elapsed().as_secs_f64();
        for want in ["CARotationStarted", "CARotationSigning", "CARotated"] {
            ensure!(
                reasons.iter().any(|r| r == want),
                "no {want} event: {reasons:?}"
            );
        }
        // Every member presents a certificate of the new CA (naming its IP)
        // and none verifies against the old CA alone.
        // (The rolling restart gave the members new IPs.)
        for ip in &env.member_ips(ns, "secure")? {
            served_serial(ip, &ca_file, true)
                .with_context(|| format!("{ip} against the new CA"))?;
            ensure!(
                served_serial(ip, &old_ca_file, false).is_err(),
                "{ip} still serves a certificate of the old CA"
            );
        }
        let summary = finish_load(&mut load, "writes across the CA rotation")?;
        let verified =
            env.verify_cluster_keys(ns, "secure", &password, &work.join("rotate.keys"))?;
        ensure!(
            verified["missing"] == 0,
            "keys written across the CA rotation: {verified}"
        );
        // The shape, `--cluster check` included, over TLS with the new CA.
        env.check_shape(ns, "secure", 3, 1)?;
        println!(
            "tls: CA rotated in {took:.1}s (bundle, new signer, new CA alone; events {reasons:?}) under load {summary}"
        );
        ca_pem = published;

        // The CA's Secret deleted while a client writes (a mistake, or a
        // namespace restored without it): the members keep their
        // certificate and trust a new CA beside the lost one first
        // (CAKeyLost), the new CA signs once every member trusts it, and
        // the lost CA is dropped once every member presents the new
        // certificate: no handshake fails on the way.
        let rotated_ca_file = work.join("secure-ca-2.crt");
        std::fs::write(&rotated_ca_file, &ca_pem)?;
        let mut load = env.start_member_load(ns, "secure", &password, &work, "lost", &[])?;
        env.kubectl(&["delete", "secret", "secure-tls-ca-key", "-n", ns])?;
        let started = std::time::Instant::now();
        let (published, reasons) = follow_ca_change(env, ns, &ca_pem, &ca_file, 2)?;
        let took = started.elapsed().as_secs_f64();
        ensure!(
            reasons.iter().any(|r| r == "CAKeyLost"),
            "no CAKeyLost event: {reasons:?}"
        );
        for ip in &env.member_ips(ns, "secure")? {
            served_serial(ip, &ca_file, true)
                .with_context(|| format!("{ip} against the CA made after the loss"))?;
            ensure!(
                served_serial(ip, &rotated_ca_file, false).is_err(),
                "{ip} still serves a certificate of the lost CA"
            );
        }
        // The rotation asked for before the loss is not made again.
        let started_rotations = env
            .object_events(ns, "ValkeyCluster", "secure")?
            .into_iter()
            .filter(|e| e.reason == "CARotationStarted")
            .count();
        ensure!(
            started_rotations == 1,
            "{started_rotations} rotations started: the loss started another"
        );
        let summary = finish_load(&mut load, "writes across the loss of the CA's Secret")?;
        let verified = env.verify_cluster_keys(ns, "secure", &password, &work.join("lost.keys"))?;
        ensure!(
            verified["missing"] == 0,
            "keys written across the loss of the CA's Secret: {verified}"
        );
        env.check_shape(ns, "secure", 3, 1)?;
        println!(
            "tls: the CA's Secret deleted: a new CA trusted, signing, alone in {took:.1}s (events {reasons:?}) under load {summary}"
        );
        ca_pem = published;

        // The public CA Secret deleted: published again, the same CA.
        env.kubectl(&["delete", "secret", "secure-tls-ca", "-n", ns])?;
        let mut again = String::new();
        wait_until(Duration::from_secs(30), Duration::from_millis(500), || {
            again = secret_key(env, ns, "secure-tls-ca", "ca.crt").unwrap_or_default();
            Ok(!again.is_empty())
        })
        .context("the deleted secure-tls-ca was not published again")?;
        ensure!(again == ca_pem, "secure-tls-ca came back with another CA");
        println!("tls: secure-tls-ca deleted: published again with the same CA");

        // TLS stays on once on.
        let refused = env.patch_cluster(ns, "secure", r#"{"spec":{"tls":{"enabled":false}}}"#);
        let message = format!(
            "{:#}",
            refused.err().context("turning TLS off was accepted")?
        );
        ensure!(
            message.contains("tls.enabled cannot be turned off once on"),
            "turning TLS off: {message}"
        );

        // The user's own certificate: the cluster waits for its Secret.
        let byo = cluster_manifest("byo", 1, 1)
            .extra_spec("  tls:\n    enabled: true\n    secretName: byo-certs\n");
        env.apply(ns, &byo.yaml())?;
        let mut last = serde_json::Value::Null;
        wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
            last = env.cluster(ns, "byo")?;
            Ok(condition(&last, "Ready").is_some_and(|c| c["reason"] == "TLSSecretMissing"))
        })
        .with_context(|| format!("byo never waited in TLSSecretMissing: {}", last["status"]))?;
        let certs = work.join("byo");
        std::fs::create_dir_all(&certs)?;
        user_certificates(&certs)?;
        env.kubectl(&[
            "create",
            "secret",
            "generic",
            "byo-certs",
            "-n",
            ns,
            &format!("--from-file=ca.crt={}", certs.join("ca.crt").display()),
            &format!("--from-file=tls.crt={}", certs.join("tls.crt").display()),
            &format!("--from-file=tls.key={}", certs.join("tls.key").display()),
        ])?;
        // Trust both CAs from now on.
        let bundle = work.join("bundle.crt");
        std::fs::write(
            &bundle,
            format!(
                "{ca_pem}\n{}",
                std::fs::read_to_string(certs.join("ca.crt"))?
            ),
        )?;
        env.use_tls(Some(bundle.clone()));
        env.wait_ready_shape(ns, &byo, Duration::from_secs(240))?;
        let byo_password = env.password(ns, "byo")?;
        for ip in env.member_ips(ns, "byo")? {
            plaintext_refused(env, &ip, &byo_password)?;
            let serial = served_serial(&ip, &certs.join("ca.crt"), false)?;
            let out = Command::new("openssl")
                .args(["x509", "-noout", "-serial", "-in"])
                .arg(certs.join("tls.crt"))
                .output()?;
            let want = String::from_utf8_lossy(&out.stdout)
                .trim()
                .replace("serial=", "");
            if !want.eq_ignore_ascii_case(&serial) {
                bail!("{ip} serves serial {serial}, not the user's certificate ({want})");
            }
        }
        println!("tls: byo runs on the user's certificate");
        Ok(())
    });
}
