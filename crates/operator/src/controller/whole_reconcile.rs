// Over 600 lines: tests, one scenario per function, read top to bottom.
//! Whole reconciles against an API server in memory ([`super::fake_api`])
//! and seeded caches: what one pass of [`super::reconcile::reconcile`]
//! reads and writes, from the object to the status, for a bootstrap, a
//! steady pass, a password rotation step, a paused cluster and an invalid
//! spec (members not running: the Valkey side sees them not answering), and
//! a failover seen, where each member pod is a real valkey-server on a
//! loopback address of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::fake_api::{Call, FakeApi};
use super::reconcile::reconcile;
use super::{Context, OwnedStores, Settings};
use api::ValkeyCluster;
use http::Method;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::collections::BTreeSet;

const NS: &str = "shop";
const NAME: &str = "c";

/// The writer side of every cache the reconcile reads.
struct Writers {
    nodes: Writer<Node>,
    pods: Writer<Pod>,
    statefulsets: Writer<StatefulSet>,
    services: Writer<Service>,
    config_maps: Writer<ConfigMap>,
    pdbs: Writer<PodDisruptionBudget>,
    network_policies: Writer<NetworkPolicy>,
    secrets: Writer<Secret>,
}

/// A fake API server, the caches a watch would fill from it, and the
/// controller's context on both.
struct Harness {
    fake: FakeApi,
    ctx: Context,
    writers: Writers,
}

/// Fills `writer` with every object of `resource` the fake holds, as a
/// watch's relist does.
fn refill<K>(writer: &mut Writer<K>, fake: &FakeApi, resource: &str)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
{
    refill_where(writer, fake, resource, |_| true);
}

/// An owned-object cache: as the operator's watches, it holds only what
/// carries the label `valkey.rs/cluster`.
fn refill_owned<K>(writer: &mut Writer<K>, fake: &FakeApi, resource: &str)
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
{
    refill_where(writer, fake, resource, |o| {
        o["metadata"]["labels"][api::constants::LABEL_CLUSTER].is_string()
    });
}

fn refill_where<K>(
    writer: &mut Writer<K>,
    fake: &FakeApi,
    resource: &str,
    keep: impl Fn(&Value) -> bool,
) where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in fake.all(resource).into_iter().filter(|o| keep(o)) {
        let k: K = serde_json::from_value(object).unwrap();
        writer.apply_watcher_event(&watcher::Event::InitApply(k));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

fn node(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": format!("n{i}"), "labels": {
            "kubernetes.io/hostname": format!("n{i}"),
            "topology.kubernetes.io/zone": format!("z{}", i % 3)}},
        "status": {
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn cluster(spec: Value, annotations: Value) -> Value {
    json!({
        "apiVersion": "valkey.rs/v1alpha1", "kind": "ValkeyCluster",
        "metadata": {"name": NAME, "namespace": NS, "uid": "uid-c", "generation": 1,
                     "annotations": annotations},
        "spec": spec
    })
}

fn three_by_one() -> Value {
    json!({"shards": 3, "replicas": 1,
           "replicaSpreadConstraints": [{"topologyKey": "zone", "maxReplicas": 1}]})
}

impl Harness {
    /// Nine nodes in three zones and `vc` created.
    fn new(vc: Value) -> Harness {
        let fake = FakeApi::default();
        for i in 0..9 {
            fake.put("nodes", node(i));
        }
        fake.put("valkeyclusters", vc);
        let (nodes, node_w) = reflector::store();
        let (pods, pod_w) = reflector::store();
        let (statefulsets, sts_w) = reflector::store();
        let (services, svc_w) = reflector::store();
        let (config_maps, cm_w) = reflector::store();
        let (pdbs, pdb_w) = reflector::store();
        let (network_policies, np_w) = reflector::store();
        let (secrets, secret_w) = reflector::store();
        let owned = OwnedStores {
            statefulsets,
            services,
            config_maps,
            pdbs,
            network_policies,
            secrets,
        };
        let ctx = Context::for_tests(fake.client(), (nodes, pods), owned, Settings::default());
        Harness {
            fake,
            ctx,
            writers: Writers {
                nodes: node_w,
                pods: pod_w,
                statefulsets: sts_w,
                services: svc_w,
                config_maps: cm_w,
                pdbs: pdb_w,
                network_policies: np_w,
                secrets: secret_w,
            },
        }
    }

    /// The caches brought up to what the fake holds (the watches' work).
    fn sync(&mut self) {
        let (w, f) = (&mut self.writers, &self.fake);
        refill(&mut w.nodes, f, "nodes");
        refill(&mut w.pods, f, "pods");
        refill_owned(&mut w.statefulsets, f, "statefulsets");
        refill_owned(&mut w.services, f, "services");
        refill_owned(&mut w.config_maps, f, "configmaps");
        refill_owned(&mut w.pdbs, f, "poddisruptionbudgets");
        refill_owned(&mut w.network_policies, f, "networkpolicies");
        refill_owned(&mut w.secrets, f, "secrets");
    }

    fn cluster(&self) -> ValkeyCluster {
        serde_json::from_value(self.fake.get("valkeyclusters", NS, NAME).unwrap()).unwrap()
    }

    /// One reconcile of the cluster as the API server holds it, after the
    /// caches caught up; the requests it made.
    async fn reconcile(&mut self) -> (Action, Vec<Call>) {
        self.sync();
        self.fake.take_calls();
        let vc = self.cluster();
        let action = reconcile(&vc, &self.ctx, &format!("{NS}/{NAME}"))
            .await
            .unwrap();
        (action, self.fake.take_calls())
    }

    fn condition(&self, kind: &str) -> (String, String, String) {
        let vc = self.fake.get("valkeyclusters", NS, NAME).unwrap();
        let c = vc["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind)
            .unwrap_or_else(|| panic!("no {kind} condition in {}", vc["status"]));
        (
            c["status"].as_str().unwrap().to_string(),
            c["reason"].as_str().unwrap_or_default().to_string(),
            c["message"].as_str().unwrap_or_default().to_string(),
        )
    }
}

/// `resource name` of every write, in a set.
fn writes(calls: &[Call]) -> BTreeSet<String> {
    calls
        .iter()
        .filter(|c| c.is_write() && c.resource != "events")
        .map(|c| format!("{} {} {}", c.method, c.resource, c.name))
        .collect()
}

fn events(calls: &[Call]) -> usize {
    calls
        .iter()
        .filter(|c| c.resource == "events" && c.method == Method::POST)
        .count()
}

fn annotation(object: &Value, key: &str) -> String {
    object["spec"]["template"]["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn secret_text(h: &Harness, name: &str, key: &str) -> String {
    let secret = h.fake.get("secrets", NS, name).unwrap();
    let bytes: k8s_openapi::ByteString =
        serde_json::from_value(secret["data"][key].clone()).unwrap();
    String::from_utf8(bytes.0).unwrap()
}

const MEMBERS: [&str; 6] = ["c-0-0", "c-0-1", "c-1-0", "c-1-1", "c-2-0", "c-2-1"];

/// A new 3x1 cluster, first pass: the password and users Secrets, every
/// owned object (a StatefulSet per member, each shard's PDB, the Services,
/// the config, the members' NetworkPolicy), then a status that says no slot
/// is served yet; looked at again in a second.
#[tokio::test]
async fn bootstrap_makes_the_secrets_then_every_owned_object_then_the_status() {
    let mut h = Harness::new(cluster(three_by_one(), json!({})));
    let (action, calls) = h.reconcile().await;
    assert_eq!(action, Action::requeue(std::time::Duration::from_secs(1)));
    let mut want: BTreeSet<String> = [
        "POST secrets c-auth",
        "PATCH secrets c-auth-applied",
        "PATCH secrets c-users",
        "PATCH configmaps c-config",
        "PATCH services c-headless",
        "PATCH services c",
        "PATCH poddisruptionbudgets c-0",
        "PATCH poddisruptionbudgets c-1",
        "PATCH poddisruptionbudgets c-2",
        "PATCH networkpolicies c-members",
        "PATCH valkeyclusters/status c",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    want.extend(MEMBERS.iter().map(|m| format!("PATCH statefulsets {m}")));
    assert_eq!(writes(&calls), want);
    // The Secrets before the StatefulSets (members mount them), the status
    // last.
    let position = |resource: &str| {
        calls
            .iter()
            .position(|c| c.is_write() && c.resource == resource)
    };
    assert!(position("secrets") < position("statefulsets"));
    assert_eq!(
        calls
            .iter()
            .rev()
            .find(|c| c.resource != "events")
            .map(|c| c.resource.as_str()),
        Some("valkeyclusters/status")
    );
    assert!(events(&calls) >= 1, "{calls:?}");
    let (ready, reason, message) = h.condition("Ready");
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("False", "SlotsUncovered"),
        "{message}"
    );
    // The shard's copies kept apart by zone, as the spec asks (Preferred by
    // default): every member's pod template says so to the scheduler.
    for m in MEMBERS {
        let sts = h.fake.get("statefulsets", NS, m).unwrap();
        let rules = sts["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            ["preferredDuringSchedulingIgnoredDuringExecution"]
            .to_string();
        assert!(
            rules.contains("topology.kubernetes.io/zone"),
            "{m}: {rules}"
        );
    }
    // The password Secret holds a password; the record names it as applied.
    let password = secret_text(&h, "c-auth", "password");
    assert_eq!(password.len(), 32);
    assert_eq!(secret_text(&h, "c-auth-applied", "password"), password);
}

/// The pass after it, with the caches caught up: no request at all (the
/// owned objects and the operator's Secrets come from the caches).
#[tokio::test]
async fn a_steady_pass_makes_no_request() {
    let mut h = Harness::new(cluster(three_by_one(), json!({})));
    h.reconcile().await;
    let (action, calls) = h.reconcile().await;
    assert!(calls.is_empty(), "{calls:?}");
    // Still converging: the members do not answer here.
    assert_eq!(action, Action::requeue(std::time::Duration::from_secs(1)));
}

/// A Secret the operator wrote is not read from a cache that has not seen
/// that write yet: the pass after a rotation's first step, with the
/// watches behind, reads the record live and does not start the rotation
/// a second time.
#[tokio::test]
async fn a_cache_behind_the_operators_own_write_is_not_trusted() {
    let mut h = Harness::new(cluster(three_by_one(), json!({})));
    h.reconcile().await;
    let mut auth = h.fake.get("secrets", NS, "c-auth").unwrap();
    auth["data"]["password"] =
        serde_json::to_value(k8s_openapi::ByteString(b"a-new-password".to_vec())).unwrap();
    h.fake.put("secrets", auth);
    h.reconcile().await;
    assert_eq!(secret_text(&h, "c-auth-applied", "target-generation"), "1");
    // The caches as they were before that pass's writes.
    h.fake.take_calls();
    let vc = h.cluster();
    reconcile(&vc, &h.ctx, &format!("{NS}/{NAME}"))
        .await
        .unwrap();
    let calls = h.fake.take_calls();
    assert!(
        calls
            .iter()
            .any(|c| c.method == Method::GET && c.name == "c-auth-applied"),
        "{calls:?}"
    );
    assert_eq!(secret_text(&h, "c-auth-applied", "target-generation"), "1");
    assert_eq!(secret_text(&h, "c-auth-applied", "highest-generation"), "1");
    // Caught up: served from the cache again.
    let (_, calls) = h.reconcile().await;
    assert!(
        !calls
            .iter()
            .any(|c| c.resource == "secrets" && !c.is_write()),
        "{calls:?}"
    );
}

/// A deleted cluster leaves none of its Secrets' read-own-write guards
/// behind (what the operator wrote at bootstrap, before any cache read).
#[tokio::test]
async fn a_forgotten_cluster_leaves_no_guard_behind() {
    let mut h = Harness::new(cluster(three_by_one(), json!({})));
    h.reconcile().await;
    h.ctx.secret_seen(NS, "c-auth", Some("999".into()));
    h.ctx.secret_seen(NS, "other-auth", Some("5".into()));
    assert!(h.ctx.guards(NS, "c-auth") && h.ctx.guards(NS, "other-auth"));
    h.ctx.forget(&format!("{NS}/{NAME}"));
    assert!(
        !h.ctx.guards(NS, "c-auth"),
        "the cluster's guard is dropped"
    );
    assert!(
        h.ctx.guards(NS, "other-auth"),
        "another cluster's guard stays"
    );
}

/// A user's password Secret (named in `spec.users`) carries no cluster
/// label, so it is never in the cache: read live, and no guard is kept for
/// it (the guards of the operator's own Secrets stay).
#[tokio::test]
async fn a_user_named_secret_keeps_no_guard() {
    let mut spec = three_by_one();
    spec["users"] = json!([{"name": "app", "passwordSecret": {"name": "app-pw"},
                            "permissions": "+@read"}]);
    let mut h = Harness::new(cluster(spec, json!({})));
    h.fake.put(
        "secrets",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "app-pw", "namespace": NS},
               "data": {"password": "c2VjcmV0LXBhc3N3b3Jk"}}),
    );
    let (_, calls) = h.reconcile().await;
    assert!(
        calls
            .iter()
            .any(|c| c.method == Method::GET && c.name == "app-pw"),
        "{calls:?}"
    );
    assert!(!h.ctx.guards(NS, "app-pw"));
}

/// A password rotation, its first step: the user changes the password
/// Secret; the record keeps the password the members run and names the new
/// one as the target, and every member's template carries the new
/// generation (a rolling restart onto it), with an event.
#[tokio::test]
async fn a_changed_password_starts_a_rotation() {
    let mut h = Harness::new(cluster(three_by_one(), json!({})));
    h.reconcile().await;
    let old = secret_text(&h, "c-auth", "password");
    let hashes: Vec<String> = MEMBERS
        .iter()
        .map(|m| {
            annotation(
                &h.fake.get("statefulsets", NS, m).unwrap(),
                "valkey.rs/restart-hash",
            )
        })
        .collect();
    let mut auth = h.fake.get("secrets", NS, "c-auth").unwrap();
    auth["data"]["password"] =
        serde_json::to_value(k8s_openapi::ByteString(b"a-new-password".to_vec())).unwrap();
    h.fake.put("secrets", auth);
    let (_, calls) = h.reconcile().await;
    let mut want: BTreeSet<String> = BTreeSet::from(["PATCH secrets c-auth-applied".to_string()]);
    want.extend(MEMBERS.iter().map(|m| format!("PATCH statefulsets {m}")));
    assert_eq!(writes(&calls), want);
    assert_eq!(secret_text(&h, "c-auth-applied", "password"), old);
    assert_eq!(
        secret_text(&h, "c-auth-applied", "target-password"),
        "a-new-password"
    );
    assert_eq!(secret_text(&h, "c-auth-applied", "target-generation"), "1");
    for (m, before) in MEMBERS.iter().zip(&hashes) {
        let sts = h.fake.get("statefulsets", NS, m).unwrap();
        assert_eq!(annotation(&sts, "valkey.rs/auth-generation"), "1", "{m}");
        assert_ne!(&annotation(&sts, "valkey.rs/restart-hash"), before, "{m}");
    }
    assert!(events(&calls) >= 1, "{calls:?}");
}

/// A paused cluster: its status says so and one event; nothing is read or
/// made; the next look is at the resync. Paused again: not even the status.
#[tokio::test]
async fn a_paused_cluster_only_says_so() {
    let mut h = Harness::new(cluster(three_by_one(), json!({"valkey.rs/paused": "true"})));
    let (action, calls) = h.reconcile().await;
    assert_eq!(action, Action::requeue(Settings::default().slow_requeue));
    assert_eq!(
        writes(&calls),
        BTreeSet::from(["PATCH valkeyclusters/status c".to_string()])
    );
    assert_eq!(
        calls.iter().filter(|c| !c.is_write()).count(),
        0,
        "{calls:?}"
    );
    assert_eq!(events(&calls), 1);
    let (paused, _, message) = h.condition("Paused");
    assert_eq!(paused, "True");
    assert!(message.contains("valkey.rs/paused"), "{message}");
    let (progressing, reason, _) = h.condition("Progressing");
    assert_eq!((progressing.as_str(), reason.as_str()), ("False", "Paused"));
    let (_, calls) = h.reconcile().await;
    assert!(calls.is_empty(), "{calls:?}");
}

/// An invalid spec: the status names the field, one event says it, nothing
/// else is read or made, and only a change of the object is waited for.
#[tokio::test]
async fn an_invalid_spec_is_refused_naming_the_field() {
    let spec = json!({"shards": 3, "replicas": 1,
        "replicaSpreadConstraints": [{"topologyKey": "zone", "maxReplicas": 0}]});
    let mut h = Harness::new(cluster(spec, json!({})));
    let (action, calls) = h.reconcile().await;
    assert_eq!(action, Action::await_change());
    assert_eq!(
        writes(&calls),
        BTreeSet::from(["PATCH valkeyclusters/status c".to_string()])
    );
    assert_eq!(events(&calls), 1);
    let (ready, reason, message) = h.condition("Ready");
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    assert!(
        message.contains("spec.replicaSpreadConstraints[0].maxReplicas"),
        "{message}"
    );
    assert!(h.fake.all("statefulsets").is_empty());
    // Looked at again unchanged: the same words, no second event.
    let (_, calls) = h.reconcile().await;
    assert_eq!(events(&calls), 0, "{calls:?}");
    assert!(writes(&calls).is_empty(), "{calls:?}");
}

/// A member pod made as the StatefulSet controller and a kubelet would:
/// the template's labels and annotations, on the node the placement
/// prefers, Running and Ready at `ip`.
fn member_pod(sts: &Value, ip: &str) -> Value {
    let name = format!("{}-0", sts["metadata"]["name"].as_str().unwrap());
    let template = &sts["spec"]["template"];
    let node = template["spec"]["affinity"]["nodeAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]["matchFields"][0]
        ["values"][0]
        .clone();
    let mut spec = template["spec"].clone();
    spec["nodeName"] = node;
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "labels": template["metadata"]["labels"],
                     "annotations": template["metadata"]["annotations"]},
        "spec": spec,
        "status": {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// A real valkey-server for one member: the cluster's rendered config and
/// users file, the arguments of the pod's start line, bound to `ip`.
struct Member {
    child: std::process::Child,
    _dir: TempDir,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn valkey_server() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("VALKEY_SERVER") {
        return Some(path.into());
    }
    let cache = std::env::var_os("VALKEY_RS_CACHE")
        .filter(|c| !c.is_empty())
        .map(std::path::PathBuf::from)
        .or_else(|| {
            Some(std::path::PathBuf::from(std::env::var_os("HOME")?).join(".cache/valkey-rs"))
        })?;
    let path = cache.join("bin/valkey-9.1.2/valkey-server");
    path.is_file().then_some(path)
}

fn start_member(h: &Harness, server: &std::path::Path, ip: &str) -> Member {
    let dir = std::env::temp_dir().join(format!("whole-reconcile-{}-{ip}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let config = h.fake.get("configmaps", NS, "c-config").unwrap();
    // `dir /data` is checked as the file is read, before the arguments
    // below: this machine need not have /data.
    let conf: String = config["data"]["valkey.conf"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("dir "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.join("valkey.conf"), conf).unwrap();
    std::fs::write(
        dir.join("users.acl"),
        secret_text(h, "c-users", "users.acl"),
    )
    .unwrap();
    let d = dir.display().to_string();
    let child = std::process::Command::new(server)
        .arg(dir.join("valkey.conf"))
        .args([
            "--bind",
            ip,
            "--dir",
            &d,
            "--cluster-config-file",
            &format!("{d}/nodes.conf"),
        ])
        .args([
            "--cluster-announce-ip",
            ip,
            "--include",
            &format!("{d}/users.acl"),
        ])
        .args(["--primaryuser", "valkey-replication"])
        .args([
            "--primaryauth",
            &secret_text(h, "c-users", "replication-password"),
        ])
        .args(["--requirepass", &secret_text(h, "c-auth", "password")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    Member {
        child,
        _dir: TempDir(dir),
    }
}

/// Reconciles until the Ready condition is `want` (at most `secs`).
async fn reconcile_until_ready(h: &mut Harness, want: &str, secs: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        h.reconcile().await;
        let (ready, reason, message) = h.condition("Ready");
        if ready == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "Ready is still {ready} ({reason}: {message})"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

fn member_status(h: &Harness, shard: u64, member: u64) -> Value {
    let vc = h.fake.get("valkeyclusters", NS, NAME).unwrap();
    vc["status"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["shard"] == shard && m["member"] == member)
        .cloned()
        .unwrap_or_else(|| panic!("no member {shard}/{member} in {}", vc["status"]))
}

/// A failover seen: one shard of a primary and a replica, each a real
/// valkey-server, bootstrapped by reconciles alone (MEET, slots, REPLICATE,
/// users) until Ready; then the replica takes over by itself (CLUSTER
/// FAILOVER sent to it, as Valkey's own failure detection would), and the
/// next reconciles say so: the status names the new primary, the pods'
/// role labels follow, an event tells, and the cluster stays Ready.
#[tokio::test]
async fn a_failover_is_seen_and_reported() {
    let Some(server) = valkey_server() else {
        assert!(
            std::env::var("VALKEY_RS_SKIP_REAL").is_ok_and(|v| v == "1"),
            "no valkey-server: run `make setup` or set VALKEY_SERVER (VALKEY_RS_SKIP_REAL=1 skips)"
        );
        return;
    };
    let spec = json!({"shards": 1, "replicas": 1,
        "replicaSpreadConstraints": [{"topologyKey": "zone", "maxReplicas": 1}]});
    let mut h = Harness::new(cluster(spec, json!({})));
    h.reconcile().await;
    // Loopback addresses of this process's own (the whole 127/8 is local).
    let pid = std::process::id();
    let base = format!("127.{}.{}", 20 + pid % 200, (pid / 200) % 250);
    let ips = [format!("{base}.2"), format!("{base}.3")];
    let mut members = Vec::new();
    for (m, ip) in ips.iter().enumerate() {
        let sts = h.fake.get("statefulsets", NS, &format!("c-0-{m}")).unwrap();
        h.fake.put("pods", member_pod(&sts, ip));
        members.push(start_member(&h, &server, ip));
    }
    reconcile_until_ready(&mut h, "True", 60).await;
    assert_eq!(member_status(&h, 0, 0)["role"], "primary");
    assert_eq!(member_status(&h, 0, 1)["role"], "replica");

    let opts = valkey_client::client::ConnectOptions {
        password: Some(secret_text(&h, "c-auth", "password")),
        ..Default::default()
    };
    let replica = valkey_client::client::ValkeyAdmin::connect(ips[1].parse().unwrap(), 6379, &opts)
        .await
        .unwrap();
    use valkey_client::client::Admin as _;
    replica
        .cluster_failover(valkey::actions::FailoverMode::Default)
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !matches!(
        replica.role().await,
        Ok(valkey::parse::RoleReply::Primary { .. })
    ) {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never took over"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        h.reconcile().await;
        let pod = h.fake.get("pods", NS, "c-0-1-0").unwrap();
        if member_status(&h, 0, 1)["role"] == "primary"
            && pod["metadata"]["labels"]["valkey.rs/role"] == "primary"
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the failover was never reported: {}",
            member_status(&h, 0, 1)
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let old = h.fake.get("pods", NS, "c-0-0-0").unwrap();
    assert_eq!(old["metadata"]["labels"]["valkey.rs/role"], "replica");
    let reasons: Vec<String> = h
        .fake
        .all("events")
        .iter()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect();
    assert!(reasons.iter().any(|r| r == "PrimaryChanged"), "{reasons:?}");
    reconcile_until_ready(&mut h, "True", 30).await;
    drop(members);
}
