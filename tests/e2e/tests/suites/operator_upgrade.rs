// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Operator upgrades restart nothing needlessly (issue 29, item 2): the
//! previous release, installed as a user installed it, hands its live
//! clusters to this tree's operator through `helm upgrade`, and no member
//! restarts and no acknowledged write is lost.
//!
//! 1. the previous release is built from git (`e2e::release`): the tag's
//!    source, its `valkey-operator` binary, its image from its own
//!    `scripts/image/build.py` (named `valkey-operator-prev`, so it never
//!    takes the current image's reference) and its chart; cached by commit;
//! 2. the tag's CRDs are applied (as a fresh install of that release left
//!    them) and its chart is installed with its image, watching this suite's
//!    namespace only; it creates two clusters: `plain` (3x1, password auth
//!    as by default) and `secure` (3x1, TLS, auth, the exporter sidecar);
//! 3. writers counting `WAIT 1` acknowledgements run against both; every
//!    member's pod UID, container restart count and Valkey `run_id` (INFO
//!    server) are recorded, and each StatefulSet's restart hash;
//! 4. the upgrade, as docs/guide/upgrades.md ("The operator") says: the
//!    current chart's CRDs with `kubectl apply --server-side
//!    --force-conflicts` (Helm never upgrades `crds/`), then `helm upgrade`
//!    to the current chart and image;
//! 5. the new operator has reconciled both clusters (its leader's
//!    `valkey_operator_cluster_last_reconcile_timestamp_seconds` for each is
//!    later than the upgrade; the exporter sidecars' StatefulSets name the
//!    new image), a resync later both are Ready;
//! 6. member restarts (a pod replaced, a container restarted, a new `run_id`)
//!    and lost acknowledged writes are counted, printed and must be 0.
//!
//! Whatever happens, the release and its namespace are removed and the
//! current CRDs are put back: the suites share one testbed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, Load, wait_until};
use e2e::exporter;
use e2e::helm::helm;
use e2e::manifest::{ClusterManifest, cluster_manifest};
use e2e::release::{self, Release};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The release this tree's operator must take over from.
const PREVIOUS_TAG: &str = "v0.1.0";
/// Its commit: a clone of main has it in its history but not the tag.
const PREVIOUS_COMMIT: &str = "44f5054c710a5758a83f29ff76a0bc595cb318cf";
const RELEASE: &str = "vk-upgrade";
const OPERATOR_NS: &str = "valkey-upgrade";
const PLAIN: &str = "plain";
const SECURE: &str = "secure";
/// The operator's metrics port (the chart's `metrics.port`).
const METRICS_PORT: u16 = 8080;

/// One member as it runs: a restart of any kind changes one of these.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberState {
    uid: String,
    restarts: u64,
    run_id: String,
}

/// Every member pod of `cluster` by name.
fn snapshot(
    env: &Env,
    ns: &str,
    cluster: &str,
    password: &str,
) -> Result<BTreeMap<String, MemberState>> {
    let ids = env.pod_identities(ns, cluster)?;
    let mut out = BTreeMap::new();
    for (pod, id) in ids {
        let info = env
            .valkey_cli(&id.ip, password, &["info", "server"])
            .with_context(|| format!("INFO server on {pod}"))?;
        let run_id = info
            .lines()
            .find_map(|l| l.trim().strip_prefix("run_id:"))
            .with_context(|| format!("{pod}: INFO server has no run_id"))?
            .to_string();
        out.insert(
            pod,
            MemberState {
                uid: id.uid,
                restarts: id.restarts,
                run_id,
            },
        );
    }
    ensure!(!out.is_empty(), "{ns}/{cluster} has no member pod");
    Ok(out)
}

/// How the members changed between two snapshots: (pods replaced,
/// containers restarted, Valkey restarted, members restarted in any way) and
/// a line per changed member.
fn restarts(
    before: &BTreeMap<String, MemberState>,
    after: &BTreeMap<String, MemberState>,
) -> (usize, usize, usize, usize, Vec<String>) {
    let (mut replaced, mut containers, mut valkey, mut any) = (0, 0, 0, 0);
    let mut lines = Vec::new();
    for (pod, was) in before {
        let now = after.get(pod);
        let gone = now.is_none_or(|n| n.uid != was.uid);
        let restarted = now.is_some_and(|n| n.restarts != was.restarts);
        let new_run = now.is_none_or(|n| n.run_id != was.run_id);
        replaced += usize::from(gone);
        containers += usize::from(restarted);
        valkey += usize::from(new_run);
        if gone || restarted || new_run {
            any += 1;
            lines.push(format!("{pod}: {was:?} -> {now:?}"));
        }
    }
    (replaced, containers, valkey, any, lines)
}

/// Each member StatefulSet of `cluster`: its restart hash and its whole pod
/// template (to show what changed, if anything did).
fn statefulsets(env: &Env, ns: &str, cluster: &str) -> Result<BTreeMap<String, Value>> {
    let selector = format!("valkey.rs/cluster={cluster}");
    let list = env.kubectl_json(&["get", "statefulsets", "-n", ns, "-l", &selector])?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            (
                s["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                s["spec"]["template"].clone(),
            )
        })
        .collect())
}

fn restart_hash(template: &Value) -> &str {
    template["metadata"]["annotations"]["valkey.rs/restart-hash"]
        .as_str()
        .unwrap_or_default()
}

fn exporter_image(template: &Value) -> Option<&str> {
    template["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "exporter")?["image"]
        .as_str()
}

/// The operator pods of the release.
fn operator_pods(env: &Env) -> Result<Vec<Value>> {
    let pods = env.kubectl_json(&[
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        &format!("app.kubernetes.io/instance={RELEASE}"),
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

/// Waits until every operator pod runs `image`, is Ready and not going away
/// (the Deployment rolled onto it).
fn wait_operator_on(env: &Env, image: &str) -> Result<()> {
    let mut last = String::new();
    wait_until(Duration::from_secs(300), Duration::from_secs(1), || {
        let pods = operator_pods(env)?;
        last = pods
            .iter()
            .map(|p| {
                format!(
                    "{} {} ready={} deleting={}",
                    p["metadata"]["name"],
                    p["spec"]["containers"][0]["image"],
                    is_ready(p),
                    !p["metadata"]["deletionTimestamp"].is_null()
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        Ok(!pods.is_empty()
            && pods.iter().all(|p| {
                p["spec"]["containers"][0]["image"] == image
                    && is_ready(p)
                    && p["metadata"]["deletionTimestamp"].is_null()
            }))
    })
    .with_context(|| format!("the operator pods never all ran {image} Ready: {last}"))
}

/// The latest `valkey_operator_cluster_last_reconcile_timestamp_seconds` of
/// `ns/cluster` any operator pod reports (only the leader reconciles).
fn last_reconcile(env: &Env, ns: &str, cluster: &str) -> Result<Option<f64>> {
    let mut best: Option<f64> = None;
    let want = format!("cluster=\"{cluster}\"");
    let want_ns = format!("namespace=\"{ns}\"");
    for pod in operator_pods(env)? {
        let Some(ip) = pod["status"]["podIP"].as_str() else {
            continue;
        };
        let Ok(addr) = format!("{ip}:{METRICS_PORT}").parse() else {
            continue;
        };
        let Ok((200, body)) = exporter::http_get(addr, "/metrics") else {
            continue;
        };
        for line in body.lines() {
            if line.starts_with("valkey_operator_cluster_last_reconcile_timestamp_seconds{")
                && line.contains(&want)
                && line.contains(&want_ns)
                && let Some(v) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok())
            {
                best = Some(best.map_or(v, |b| b.max(v)));
            }
        }
    }
    Ok(best)
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// `judge.py verify` of the acknowledged keys: how many are missing, and the
/// judge's summary.
fn lost_writes(env: &Env, ns: &str, cluster: &str, password: &str, keys: &Path) -> Result<u64> {
    let hosts = env.member_ips(ns, cluster)?;
    let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
    let keys_s = keys.to_string_lossy().to_string();
    let out = env
        .judge_cmd(&hosts, password, &["verify", "--in", &keys_s])
        .output()
        .context("running judge.py verify")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let summary: Value = text
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .with_context(|| {
            format!(
                "judge verify gave no summary: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })?;
    eprintln!("operator_upgrade: {cluster}: verify {summary}");
    summary["missing"]
        .as_u64()
        .with_context(|| format!("judge verify summary has no missing count: {summary}"))
}

/// The CRDs in `dir` (a chart's `crds/`), applied server-side by kubectl's
/// field manager (the one `Env::install_crd` uses, so fields the files do not
/// name are removed), and served.
fn apply_crds(env: &Env, dir: &Path) -> Result<()> {
    env.kubectl(&[
        "apply",
        "--server-side",
        "--force-conflicts",
        "-f",
        &dir.to_string_lossy(),
    ])?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        let Some(name) = text
            .lines()
            .skip_while(|l| !l.starts_with("metadata:"))
            .find_map(|l| l.trim().strip_prefix("name:"))
        else {
            continue;
        };
        let crd = format!("crd/{}", name.trim().trim_matches('"'));
        env.kubectl(&["wait", "--for=condition=Established", &crd, "--timeout=60s"])?;
    }
    Ok(())
}

/// Puts the CRDs as the previous release installed them. A CRD it did not
/// have (ValkeyBackup came later) is removed when no object of it exists, so
/// the new operator meets the state a real upgrade starts from.
fn previous_crds(env: &Env, prev: &Release) -> Result<()> {
    let dir = prev.chart.join("crds");
    let had_backup = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .any(|e| e.file_name().to_string_lossy().contains("backup"));
    if !had_backup {
        let backups = env
            .kubectl_json(&["get", "valkeybackups", "--all-namespaces"])
            .map(|l| l["items"].as_array().map_or(0, Vec::len))
            .unwrap_or(0);
        if backups == 0 {
            env.kubectl(&[
                "delete",
                "crd",
                "valkeybackups.valkey.rs",
                "--ignore-not-found",
                "--timeout=60s",
            ])?;
        } else {
            eprintln!(
                "operator_upgrade: {backups} ValkeyBackup(s) exist on the testbed: its CRD stays"
            );
        }
    }
    apply_crds(env, &dir)
}

/// The password and a writer for each cluster.
struct Writer {
    env: Env,
    cluster: &'static str,
    password: String,
    load: Load,
}

fn create(env: &Env, ns: &str, m: &ClusterManifest) -> Result<()> {
    env.apply(ns, &m.yaml())?;
    Ok(())
}

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn suite(env: &Env, ns: &str) -> Result<()> {
    // 1. the previous release, from git.
    let prev = release::build(env, PREVIOUS_TAG, PREVIOUS_COMMIT)?;
    eprintln!(
        "operator_upgrade: previous release {} ({}) {} in {:.1}s: {}, image {}, chart {}",
        prev.tag,
        &prev.commit[..12],
        if prev.compiled {
            "built"
        } else {
            "found cached"
        },
        prev.build_time.as_secs_f64(),
        prev.binary.display(),
        prev.image(),
        prev.chart.display()
    );
    // The current image (the exporter sidecars and the upgraded operator run
    // it) and the previous one, each under its own reference.
    exporter::load_image(env)?;
    let loaded = env.testbed(&["image", "load", &prev.archive.to_string_lossy()])?;
    eprintln!("operator_upgrade: {}", loaded.trim());
    let current_image = format!("valkey-operator:{}", env!("CARGO_PKG_VERSION"));

    // 2. the previous release as installed: its CRDs, its chart, its image.
    previous_crds(env, &prev)?;
    let _ = helm(env, &["uninstall", RELEASE, "-n", OPERATOR_NS, "--wait"]);
    let watch = format!("watchNamespaces={{{ns}}}");
    let repo = format!("image.repository={}", prev.image_repository);
    let tag = format!("image.tag={}", prev.image_tag);
    let prev_chart = prev.chart.to_string_lossy().to_string();
    helm(
        env,
        &[
            "install",
            RELEASE,
            &prev_chart,
            "-n",
            OPERATOR_NS,
            "--create-namespace",
            "--set",
            &watch,
            "--set",
            &repo,
            "--set",
            &tag,
        ],
    )?;
    wait_operator_on(env, &prev.image())?;
    eprintln!(
        "operator_upgrade: {} installed from {}'s chart, running {}",
        RELEASE,
        prev.tag,
        prev.image()
    );

    let plain = cluster_manifest(PLAIN, 3, 1);
    let secure = cluster_manifest(SECURE, 3, 1)
        .extra_spec("  tls:\n    enabled: true\n  exporter:\n    enabled: true\n");
    create(env, ns, &plain)?;
    create(env, ns, &secure)?;
    let work = env.work_dir("operator_upgrade")?;
    // The TLS cluster's clients trust its CA; the plain one's must not use
    // TLS: each gets an environment of its own.
    let plain_env = Env {
        tls_ca: Default::default(),
        ..env.clone()
    };
    let secure_env = Env {
        tls_ca: Default::default(),
        ..env.clone()
    };
    let mut ca = String::new();
    wait_until(Duration::from_secs(120), Duration::from_millis(500), || {
        ca = secret_text_opt(env, ns, &format!("{SECURE}-tls-ca"), "ca.crt");
        Ok(ca.contains("BEGIN CERTIFICATE"))
    })
    .context("the previous operator never published secure-tls-ca")?;
    let ca_file = work.join("secure-ca.crt");
    std::fs::write(&ca_file, &ca)?;
    secure_env.use_tls(Some(ca_file));
    plain_env.wait_ready_shape(ns, &plain, Duration::from_secs(300))?;
    secure_env.wait_ready_shape(ns, &secure, Duration::from_secs(300))?;
    eprintln!(
        "operator_upgrade: {PLAIN} and {SECURE} are Ready under {}",
        prev.tag
    );

    // 3. writers, then what every member is.
    let mut writers = Vec::new();
    for (e, cluster) in [(&plain_env, PLAIN), (&secure_env, SECURE)] {
        let password = e.password(ns, cluster)?;
        let load = e.start_member_load(
            ns,
            cluster,
            &password,
            &work,
            cluster,
            &["--wait-replicas", "1"],
        )?;
        writers.push(Writer {
            env: e.clone(),
            cluster,
            password,
            load,
        });
    }
    let mut before = BTreeMap::new();
    let mut templates_before = BTreeMap::new();
    for w in &writers {
        before.insert(w.cluster, snapshot(&w.env, ns, w.cluster, &w.password)?);
        let sts = statefulsets(env, ns, w.cluster)?;
        let hashes: std::collections::BTreeSet<&str> = sts.values().map(restart_hash).collect();
        eprintln!(
            "operator_upgrade: {} renders {}'s StatefulSets with restart hash {hashes:?}",
            prev.tag, w.cluster
        );
        templates_before.insert(w.cluster, sts);
    }

    // 4. the upgrade: CRDs first (Helm leaves crds/ alone on upgrade), then
    // the chart and image of this tree.
    let upgrade_started = now_unix();
    let started = Instant::now();
    let chart = env.root.join("deploy/helm/valkey-operator");
    apply_crds(env, &chart.join("crds"))?;
    let chart_s = chart.to_string_lossy().to_string();
    helm(
        env,
        &[
            "upgrade",
            RELEASE,
            &chart_s,
            "-n",
            OPERATOR_NS,
            "--set",
            &watch,
        ],
    )?;
    wait_operator_on(env, &current_image)?;
    eprintln!(
        "operator_upgrade: CRDs applied and helm upgrade to {current_image} done in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // 5. the new operator reconciled both clusters.
    for cluster in [PLAIN, SECURE] {
        let mut last = None;
        wait_until(Duration::from_secs(180), Duration::from_secs(1), || {
            last = last_reconcile(env, ns, cluster)?;
            Ok(last.is_some_and(|t| t > upgrade_started))
        })
        .with_context(|| {
            format!("the new operator never reconciled {cluster} (last reconcile: {last:?})")
        })?;
    }
    wait_until(Duration::from_secs(120), Duration::from_secs(1), || {
        let sts = statefulsets(env, ns, SECURE)?;
        Ok(!sts.is_empty()
            && sts
                .values()
                .all(|t| exporter_image(t) == Some(current_image.as_str())))
    })
    .context("the new operator never applied its exporter image to secure's StatefulSets")?;
    // A resync later (30 s), anything the new operator meant to roll has
    // begun; both clusters must be Ready again (and stay their shape).
    std::thread::sleep(Duration::from_secs(35));
    plain_env.wait_ready_shape(ns, &plain, Duration::from_secs(600))?;
    secure_env.wait_ready_shape(ns, &secure, Duration::from_secs(600))?;
    eprintln!(
        "operator_upgrade: the new operator reconciled both clusters; Ready {:.1}s after the upgrade began",
        started.elapsed().as_secs_f64()
    );

    // 6. what restarted, what was lost.
    let mut total_restarts = 0;
    let mut total_lost = 0;
    let mut report = Vec::new();
    for w in &mut writers {
        let summary = e2e::suite::finish_load(&mut w.load, w.cluster)?;
        let after = snapshot(&w.env, ns, w.cluster, &w.password)?;
        let (replaced, containers, valkey, any, lines) = restarts(&before[w.cluster], &after);
        let lost = lost_writes(&w.env, ns, w.cluster, &w.password, &w.load.keys)?;
        let templates_after = statefulsets(env, ns, w.cluster)?;
        for (name, old) in &templates_before[w.cluster] {
            let new = templates_after.get(name).cloned().unwrap_or_default();
            if restart_hash(old) != restart_hash(&new) {
                let path = work.join(format!("{name}.template"));
                std::fs::write(
                    &path,
                    format!(
                        "before:\n{}\nafter:\n{}\n",
                        serde_json::to_string_pretty(old)?,
                        serde_json::to_string_pretty(&new)?
                    ),
                )?;
                report.push(format!(
                    "{name}: restart hash {} -> {} (templates in {})",
                    restart_hash(old),
                    restart_hash(&new),
                    path.display()
                ));
            }
        }
        eprintln!(
            "operator_upgrade: {}: member restarts {any} (pods replaced {replaced}, containers restarted {containers}, run_id changed {valkey}) of {} members; acknowledged writes lost {lost} of {}; writer {summary}",
            w.cluster,
            before[w.cluster].len(),
            summary["acked"]
        );
        report.extend(lines);
        total_restarts += any;
        total_lost += lost;
    }
    eprintln!(
        "operator_upgrade: {} -> this tree: member restarts {total_restarts}, lost acknowledged writes {total_lost}",
        prev.tag
    );
    if total_restarts != 0 || total_lost != 0 {
        bail!(
            "the operator upgrade restarted {total_restarts} member(s) and lost {total_lost} acknowledged write(s):\n{}",
            report.join("\n")
        );
    }
    Ok(())
}

/// A Secret's key, decoded; empty when it is not there (yet).
fn secret_text_opt(env: &Env, ns: &str, secret: &str, key: &str) -> String {
    env.secret_text(ns, secret, key).unwrap_or_default()
}

#[test]
fn an_operator_upgrade_from_the_last_release_restarts_no_member_and_loses_no_write() {
    let Some(env) = Env::or_skip("operator_upgrade") else {
        return;
    };
    let ns = env.namespace("e2e-upgrade").unwrap();
    let result = suite(&env, &ns.name);
    if let Err(e) = &result {
        // While the clusters still exist: what they and the operator say.
        let mut out = String::new();
        for cluster in [PLAIN, SECURE] {
            if let Ok(obj) = env.cluster(&ns.name, cluster) {
                out.push_str(&format!(
                    "--- {cluster} status: {}\n",
                    serde_json::to_string_pretty(&obj["status"]).unwrap_or_default()
                ));
            }
            if let Ok(events) = env.object_events(&ns.name, "ValkeyCluster", cluster) {
                for ev in events.iter().rev().take(20).rev() {
                    out.push_str(&format!("{} {}: {}\n", ev.type_, ev.reason, ev.message));
                }
            }
        }
        if let Ok(pods) = env.kubectl(&["get", "pods", "-n", &ns.name, "-o", "wide"]) {
            out.push_str(&format!("--- pods:\n{pods}"));
        }
        for pod in operator_pods(&env).unwrap_or_default() {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default();
            let log = env
                .testbed_dir
                .join("logs/pods")
                .join(format!("{OPERATOR_NS}_{name}_operator.log"));
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(25).collect();
            out.push_str(&format!("--- operator pod {name}:\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        eprintln!("operator_upgrade failed: {e:#}\n{out}");
    }
    // Whatever happened: no operator of this suite outlives it, and the
    // testbed keeps the current CRDs for the suites after this one.
    let _ = helm(&env, &["uninstall", RELEASE, "-n", OPERATOR_NS, "--wait"]);
    let _ = env.kubectl(&["delete", "namespace", OPERATOR_NS, "--wait=false"]);
    let _ = env.install_crd();
    drop(ns);
    if let Err(e) = result {
        panic!("{e:#}");
    }
}

#[test]
fn a_member_counts_as_restarted_when_its_pod_container_or_valkey_changed() {
    let m = |uid: &str, restarts, run_id: &str| MemberState {
        uid: uid.into(),
        restarts,
        run_id: run_id.into(),
    };
    let before: BTreeMap<String, MemberState> = [
        ("a".to_string(), m("u1", 0, "r1")),
        ("b".to_string(), m("u2", 0, "r2")),
        ("c".to_string(), m("u3", 1, "r3")),
        ("d".to_string(), m("u4", 0, "r4")),
    ]
    .into();
    let mut after = before.clone();
    assert_eq!(restarts(&before, &after).3, 0);
    after.insert("a".into(), m("u9", 0, "r9"));
    after.insert("b".into(), m("u2", 1, "r2"));
    after.insert("c".into(), m("u3", 1, "r8"));
    after.remove("d");
    let (replaced, containers, valkey, any, lines) = restarts(&before, &after);
    assert_eq!((replaced, containers, valkey, any), (2, 1, 3, 4));
    assert_eq!(lines.len(), 4);
}
