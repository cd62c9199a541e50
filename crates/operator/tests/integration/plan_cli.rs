// Over 600 lines: tests, one scenario per function, read top to bottom.
//! `valkey-operator plan` as a user runs it: the built binary on fixture files
//! (tests/fixtures: 3 zones x 3 nodes, a cordoned zone, a tainted zone, running
//! members, a full zone), checking exit codes, stderr and the JSON contract.
//!
//! (Over 600 lines on purpose: one test per promise of the CLI, each reading
//! as the command a user types and what it must answer; they share only the
//! small helpers at the top.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

/// The path of fixture `name`; an absolute path is taken as is (a file
/// that does not exist, for the error tests).
fn fixture(name: &str) -> String {
    if name.starts_with('/') {
        return name.to_string();
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_valkey-operator"))
        .arg("plan")
        .args(args)
        .output()
        .expect("run valkey-operator");
    Run {
        code: out
            .status
            .code()
            .expect("exit code (not killed by a signal)"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `plan --cluster C --nodes N EXTRA...` with fixtures C and N.
fn run_fixtures(cluster: &str, nodes: &str, extra: &[&str]) -> Run {
    let (c, n) = (fixture(cluster), fixture(nodes));
    let mut args = vec!["--cluster", c.as_str(), "--nodes", n.as_str()];
    args.extend_from_slice(extra);
    run(&args)
}

/// `plan --output json` over fixtures; the JSON on stdout.
fn plan_json(cluster: &str, nodes: &str, pods: Option<&str>) -> (i32, Value) {
    let p = pods.map(fixture);
    let mut extra = vec!["--output", "json"];
    if let Some(p) = &p {
        extra.extend(["--pods", p.as_str()]);
    }
    let r = run_fixtures(cluster, nodes, &extra);
    assert!(
        r.code == 0 || r.code == 2,
        "exit {}; stderr: {}",
        r.code,
        r.stderr
    );
    let json: Value = serde_json::from_str(&r.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", r.stdout));
    (r.code, json)
}

/// A bad-input run of `plan --cluster C --nodes N` (fixtures): exit 1,
/// nothing on stdout, exactly one line on stderr that contains every one of
/// `expected`.
fn assert_refused(cluster: &str, nodes: &str, expected: &[&str]) {
    let r = run_fixtures(cluster, nodes, &[]);
    assert_eq!(r.code, 1, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "stdout: {}", r.stdout);
    let lines: Vec<&str> = r.stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one message on stderr, got: {}", r.stderr);
    for e in expected {
        assert!(lines[0].contains(e), "{:?} should contain {e:?}", lines[0]);
    }
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
}

/// The keys of a JSON object.
fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .expect("a JSON object")
        .keys()
        .map(String::as_str)
        .collect()
}

fn members(plan: &Value) -> &Vec<Value> {
    plan["members"].as_array().expect("members is a list")
}

fn zone_of(m: &Value) -> &str {
    m["domains"][ZONE].as_str().expect("zone domain")
}

/// Per shard, the placed members.
fn by_shard(plan: &Value) -> BTreeMap<u64, Vec<&Value>> {
    let mut out: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for m in members(plan) {
        out.entry(m["shard"].as_u64().unwrap()).or_default().push(m);
    }
    out
}

// ---------- bad input: one message naming the file and the field, exit 1 ----------

#[test]
fn max_replicas_zero_is_refused_naming_file_and_field() {
    assert_refused(
        "cluster-bad-max-replicas.yaml",
        "nodes-3x3.yaml",
        &[
            "cluster-bad-max-replicas.yaml: spec.replicaSpreadConstraints[0].maxReplicas: must be >= 1",
        ],
    );
}

#[test]
fn shards_zero_is_refused() {
    assert_refused(
        "cluster-bad-shards.yaml",
        "nodes-3x3.yaml",
        &["cluster-bad-shards.yaml", "spec.shards"],
    );
}

#[test]
fn an_alias_and_its_full_key_with_one_mode_are_refused() {
    assert_refused(
        "cluster-duplicate-key.yaml",
        "nodes-3x3.yaml",
        &[
            "cluster-duplicate-key.yaml",
            "spec.replicaSpreadConstraints[1].topologyKey",
        ],
    );
}

#[test]
fn an_unknown_mode_is_refused() {
    assert_refused(
        "cluster-bad-mode.yaml",
        "nodes-3x3.yaml",
        &[
            "cluster-bad-mode.yaml",
            "spec.replicaSpreadConstraints[0].mode",
            "Sometimes",
        ],
    );
}

#[test]
fn an_owned_config_key_is_refused() {
    assert_refused(
        "cluster-owned-config.yaml",
        "nodes-3x3.yaml",
        &["cluster-owned-config.yaml", "spec.config", "port"],
    );
}

#[test]
fn a_cluster_file_of_the_wrong_kind_is_refused() {
    assert_refused(
        "cluster-wrong-kind.yaml",
        "nodes-3x3.yaml",
        &[
            "cluster-wrong-kind.yaml",
            "kind",
            "ValkeyCluster",
            "ConfigMap",
        ],
    );
}

#[test]
fn a_missing_file_is_refused_naming_it() {
    assert_refused(
        "cluster-required.yaml",
        "/nonexistent/nodes.yaml",
        &["/nonexistent/nodes.yaml", "cannot read"],
    );
}

#[test]
fn invalid_yaml_is_refused_naming_the_file() {
    assert_refused(
        "cluster-required.yaml",
        "nodes-invalid-yaml.yaml",
        &["nodes-invalid-yaml.yaml", "invalid YAML"],
    );
}

#[test]
fn a_pod_list_given_as_nodes_is_refused() {
    assert_refused(
        "cluster-required.yaml",
        "pods-members.yaml",
        &["pods-members.yaml", "kind", "Node"],
    );
}

#[test]
fn a_bad_allocatable_quantity_names_the_node_and_field() {
    assert_refused(
        "cluster-required.yaml",
        "nodes-bad-quantity.yaml",
        &[
            "nodes-bad-quantity.yaml",
            "node-b2",
            "status.allocatable.cpu",
        ],
    );
}

#[test]
fn a_missing_required_flag_exits_1_not_2() {
    let c = fixture("cluster-required.yaml");
    let r = run(&["--cluster", &c]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stderr.contains("--nodes"), "{}", r.stderr);
}

#[test]
fn an_unknown_output_format_exits_1() {
    let r = run_fixtures(
        "cluster-required.yaml",
        "nodes-3x3.yaml",
        &["--output", "xml"],
    );
    assert_eq!(r.code, 1, "{}", r.stderr);
}

#[test]
fn unknown_fields_are_refused_naming_their_paths() {
    assert_refused(
        "cluster-unknown-fields.yaml",
        "nodes-3x3.yaml",
        &[
            "cluster-unknown-fields.yaml: ",
            "metadata.lables: unknown field",
            "spec.replica: unknown field",
            "spec.replicaSpreadConstraints[0].maxSkew: unknown field",
        ],
    );
}

#[test]
fn a_null_spec_is_refused_not_planned_with_defaults() {
    assert_refused(
        "cluster-null-spec.yaml",
        "nodes-3x3.yaml",
        &["cluster-null-spec.yaml: spec: must be an object, got null"],
    );
    assert_refused(
        "cluster-no-spec.yaml",
        "nodes-3x3.yaml",
        &["cluster-no-spec.yaml: spec: required"],
    );
}

#[test]
fn a_time_limit_that_is_not_a_duration_exits_1_naming_the_flag() {
    for bad in ["soon", "-1s", "0", "1h", "NaN"] {
        let flag = format!("--time-limit={bad}");
        let r = run_fixtures("cluster-required.yaml", "nodes-3x3.yaml", &[&flag]);
        assert_eq!(r.code, 1, "{bad}: {}", r.stderr);
        assert!(r.stdout.is_empty(), "{bad}: {}", r.stdout);
        assert!(r.stderr.contains("--time-limit"), "{bad}: {}", r.stderr);
    }
}

#[test]
fn a_time_limit_is_a_duration_in_seconds_milliseconds_or_minutes() {
    for good in ["500ms", "1s", "0.25", "2m", "none"] {
        let r = run_fixtures(
            "cluster-required.yaml",
            "nodes-3x3.yaml",
            &["--time-limit", good],
        );
        assert_eq!(r.code, 0, "{good}: {}", r.stderr);
        assert!(r.stderr.is_empty(), "proven optimal, no note: {}", r.stderr);
    }
}

#[test]
fn the_help_documents_the_time_limit() {
    let r = run(&["--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for word in ["--time-limit", "500ms", "[default: 1s]", "none"] {
        assert!(
            r.stdout.contains(word),
            "{word} missing from:\n{}",
            r.stdout
        );
    }
}

/// Files for `plan` that make the branch and bound work: 60 shards of 3 over
/// 60 nodes in 3 zones whose racks (6) and rows (5) are scattered over the
/// zones and each other (three keys that cross pairwise), rack Required 1,
/// zone, row and node Preferred 1, one or two pod slots per node, and the
/// primaries of about half the shards running. Without the rows (the
/// placement crate's `crossing_unproven_60`) the planner proves its optimum
/// in milliseconds since issue 31; with them its bound is not tight and the
/// search does not end within 10 s. Returns the paths of the cluster, nodes
/// and pods.
fn crossing_files() -> (tempdir::Dir, [String; 3]) {
    let dir = tempdir::Dir::new("crossing");
    let mut state: u64 = 110;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize
    };
    let nodes: Vec<Value> = (0..60)
        .map(|i| {
            let rack = format!("k{}", next() % 6);
            let pods = (1 + next() % 2).to_string();
            let name = format!("n{i:03}");
            let row = format!("r{}", next() % 5);
            serde_json::json!({
                "kind": "Node",
                "metadata": {"name": name, "labels": {
                    HOST: name, ZONE: format!("z{}", i % 3), "example.com/rack": rack,
                    "example.com/row": row,
                }},
                "status": {
                    "allocatable": {"cpu": "8", "memory": "32Gi", "pods": pods},
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            })
        })
        .collect();
    let mut pods = Vec::new();
    for s in 0..60 {
        if next() % 2 == 0 {
            pods.push(serde_json::json!({
                "kind": "Pod",
                "metadata": {"name": format!("demo-{s}-0-0"), "namespace": "default", "labels": {
                    "valkey.rs/cluster": "demo", "valkey.rs/shard": s.to_string(),
                    "valkey.rs/member": "0", "valkey.rs/role": "primary",
                }},
                "spec": {"nodeName": format!("n{:03}", next() % 60),
                         "containers": [{"name": "valkey", "image": "x"}]},
                "status": {"phase": "Running"},
            }));
        }
    }
    let cluster = "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyCluster\n\
                   metadata: {name: demo, namespace: default}\n\
                   spec:\n  shards: 60\n  replicas: 2\n  replicaSpreadConstraints:\n\
                   \x20 - {topologyKey: zone, maxReplicas: 1, mode: Preferred}\n\
                   \x20 - {topologyKey: example.com/rack, maxReplicas: 1, mode: Required}\n\
                   \x20 - {topologyKey: example.com/row, maxReplicas: 1, mode: Preferred}\n\
                   \x20 - {topologyKey: node, maxReplicas: 1, mode: Preferred}\n";
    let list = |items: Vec<Value>| serde_json::json!({"kind": "List", "items": items}).to_string();
    let paths = [
        dir.write("cluster.yaml", cluster),
        dir.write("nodes.json", &list(nodes)),
        dir.write("pods.json", &list(pods)),
    ];
    (dir, paths)
}

/// A self-cleaning temporary directory, to keep dev-dependencies small.
mod tempdir {
    pub struct Dir(std::path::PathBuf);

    impl Dir {
        pub fn new(name: &str) -> Self {
            let path = std::env::temp_dir().join(format!("plan-cli-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        pub fn write(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path.display().to_string()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// `plan` over [`crossing_files`] with `extra` flags: the run and how long it took.
fn run_crossing(extra: &[&str]) -> (Run, std::time::Duration) {
    let (_dir, [cluster, nodes, pods]) = crossing_files();
    let mut args = vec![
        "--cluster",
        &cluster,
        "--nodes",
        &nodes,
        "--pods",
        &pods,
        "--output",
        "json",
    ];
    args.extend_from_slice(extra);
    let started = std::time::Instant::now();
    let r = run(&args);
    (r, started.elapsed())
}

#[test]
fn a_time_limit_cuts_a_crossing_search_short_and_says_so_on_stderr() {
    let (r, took) = run_crossing(&["--time-limit", "100ms"]);
    assert!(r.code == 0 || r.code == 2, "exit {}: {}", r.code, r.stderr);
    let note: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(note.len(), 1, "{}", r.stderr);
    assert!(
        note[0].contains("cluster.yaml: note:") && note[0].contains("not proven optimal"),
        "{}",
        r.stderr
    );
    // The JSON keeps its documented shape: the note is not in it.
    let plan: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        keys(&plan),
        BTreeSet::from(["cluster", "feasible", "members", "unplaced", "violations"])
    );
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}

#[test]
fn plan_searches_for_1s_by_default() {
    let (r, took) = run_crossing(&[]);
    assert!(r.code == 0 || r.code == 2, "exit {}: {}", r.code, r.stderr);
    assert!(r.stderr.contains("not proven optimal"), "{}", r.stderr);
    assert!(took >= std::time::Duration::from_secs(1), "took {took:?}");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}

// ---------- plans (these need the real planner) ----------

#[test]
fn the_json_has_exactly_the_documented_shape() {
    let (_, plan) = plan_json("cluster-required.yaml", "nodes-3x3.yaml", None);
    assert_eq!(
        keys(&plan),
        BTreeSet::from(["cluster", "feasible", "members", "unplaced", "violations"])
    );
    assert_eq!(plan["cluster"], "demo");
    for m in members(&plan) {
        assert_eq!(
            keys(m),
            BTreeSet::from(["shard", "member", "node", "primary", "moved", "domains"])
        );
        assert_eq!(
            keys(&m["domains"]),
            BTreeSet::from([ZONE, HOST]),
            "every constraint's resolved key"
        );
    }
}

#[test]
fn three_zones_required_put_one_member_of_each_shard_in_every_zone() {
    let (code, plan) = plan_json("cluster-required.yaml", "nodes-3x3.yaml", None);
    assert_eq!(code, 0);
    assert_eq!(plan["feasible"], true);
    assert_eq!(plan["unplaced"], Value::Array(vec![]));
    assert_eq!(plan["violations"], Value::Array(vec![]));
    let shards = by_shard(&plan);
    assert_eq!(shards.len(), 3);
    for (shard, ms) in &shards {
        assert_eq!(ms.len(), 3, "shard {shard}");
        let zones: BTreeSet<&str> = ms.iter().map(|m| zone_of(m)).collect();
        assert_eq!(zones.len(), 3, "shard {shard} spans every zone");
        let nodes: BTreeSet<&str> = ms.iter().map(|m| m["node"].as_str().unwrap()).collect();
        assert_eq!(nodes.len(), 3, "shard {shard} uses 3 nodes");
        let primaries: Vec<u64> = ms
            .iter()
            .filter(|m| m["primary"] == true)
            .map(|m| m["member"].as_u64().unwrap())
            .collect();
        assert_eq!(primaries, [0], "member 0 is the primary at creation");
        assert!(ms.iter().all(|m| m["moved"] == false));
        for m in ms {
            assert_eq!(
                m["domains"][HOST], m["node"],
                "the hostname domain is the node"
            );
        }
    }
    let primary_zones: BTreeSet<&str> = members(&plan)
        .iter()
        .filter(|m| m["primary"] == true)
        .map(zone_of)
        .collect();
    assert_eq!(
        primary_zones.len(),
        3,
        "primaries are spread over the zones"
    );
}

#[test]
fn a_cordoned_zone_leaves_required_members_unplaced_with_a_reason() {
    let (code, plan) = plan_json("cluster-required.yaml", "nodes-zone-c-cordoned.yaml", None);
    assert_eq!(code, 2, "infeasible exits 2 and still prints the plan");
    assert_eq!(plan["feasible"], false);
    assert_eq!(members(&plan).len(), 6);
    assert!(members(&plan).iter().all(|m| zone_of(m) != "zone-c"));
    let unplaced = plan["unplaced"].as_array().unwrap();
    assert_eq!(unplaced.len(), 3);
    let shards: BTreeSet<u64> = unplaced
        .iter()
        .map(|u| u["shard"].as_u64().unwrap())
        .collect();
    assert_eq!(shards.len(), 3, "one member of every shard is unplaced");
    for u in unplaced {
        assert!(!u["reason"].as_str().unwrap().trim().is_empty());
    }
    assert_eq!(
        plan["violations"],
        Value::Array(vec![]),
        "Required is never violated"
    );
    let every: usize = members(&plan).len() + unplaced.len();
    assert_eq!(every, 9, "every member appears once");
}

#[test]
fn a_cordoned_zone_with_preferred_places_everything_and_reports_the_excess() {
    let (code, plan) = plan_json("cluster-preferred.yaml", "nodes-zone-c-cordoned.yaml", None);
    assert_eq!(code, 0);
    assert_eq!(plan["feasible"], true);
    assert_eq!(members(&plan).len(), 9);
    assert!(members(&plan).iter().all(|m| zone_of(m) != "zone-c"));
    let violations = plan["violations"].as_array().unwrap();
    assert_eq!(
        violations.len(),
        3,
        "one zone of each shard holds 2 members: {violations:?}"
    );
    for v in violations {
        assert_eq!(v["topologyKey"], ZONE);
        assert_eq!(v["members"], 2);
        assert_eq!(v["maxReplicas"], 1);
        assert_eq!(v["mode"], "Preferred");
        assert_ne!(v["domain"], "zone-c");
    }
    for ms in by_shard(&plan).values() {
        let nodes: BTreeSet<&str> = ms.iter().map(|m| m["node"].as_str().unwrap()).collect();
        assert_eq!(nodes.len(), 3, "node Required 1 still holds");
    }
}

#[test]
fn untolerated_taints_keep_new_members_off_a_zone() {
    let (code, plan) = plan_json("cluster-required.yaml", "nodes-zone-c-tainted.yaml", None);
    assert_eq!(code, 2);
    assert!(members(&plan).iter().all(|m| zone_of(m) != "zone-c"));
    assert_eq!(plan["unplaced"].as_array().unwrap().len(), 3);
}

#[test]
fn tolerated_taints_let_members_into_the_zone() {
    let (code, plan) = plan_json("cluster-tolerating.yaml", "nodes-zone-c-tainted.yaml", None);
    assert_eq!(code, 0);
    assert_eq!(members(&plan).len(), 9);
    assert!(members(&plan).iter().any(|m| zone_of(m) == "zone-c"));
}

#[test]
fn running_members_stay_where_they_are() {
    let (code, plan) = plan_json(
        "cluster-required.yaml",
        "nodes-3x3.yaml",
        Some("pods-members.yaml"),
    );
    assert_eq!(code, 0);
    for m in members(&plan) {
        let (s, i) = (m["shard"].as_u64().unwrap(), m["member"].as_u64().unwrap());
        // The fixture puts shard s member m on node-<zone (s+m)%3><s+1>.
        let zone = ["a", "b", "c"][((s + i) % 3) as usize];
        assert_eq!(
            m["node"],
            format!("node-{zone}{}", s + 1),
            "shard {s} member {i}"
        );
        assert_eq!(m["moved"], false);
        assert_eq!(m["primary"], i == 0);
    }
}

#[test]
fn running_members_on_a_cordoned_node_stay() {
    let (code, plan) = plan_json(
        "cluster-required.yaml",
        "nodes-zone-c-cordoned.yaml",
        Some("pods-members.yaml"),
    );
    assert_eq!(
        code, 0,
        "members already in zone-c may stay on cordoned nodes"
    );
    assert_eq!(members(&plan).len(), 9);
    assert!(members(&plan).iter().all(|m| m["moved"] == false));
}

#[test]
fn a_full_zone_counts_other_pods_requests() {
    let (code, plan) = plan_json(
        "cluster-required.yaml",
        "nodes-3x3.yaml",
        Some("pods-zone-b-full.yaml"),
    );
    assert_eq!(
        code, 2,
        "zone-b has no room, and zone Required 1 forbids doubling up"
    );
    assert!(members(&plan).iter().all(|m| zone_of(m) != "zone-b"));
    assert_eq!(plan["unplaced"].as_array().unwrap().len(), 3);
}

#[test]
fn the_same_input_gives_the_same_plan() {
    let (_, a) = plan_json("cluster-preferred.yaml", "nodes-zone-c-cordoned.yaml", None);
    let (_, b) = plan_json("cluster-preferred.yaml", "nodes-zone-c-cordoned.yaml", None);
    assert_eq!(a, b);
}

#[test]
fn text_is_the_default_output_and_draws_the_topology() {
    let r = run_fixtures("cluster-required.yaml", "nodes-3x3.yaml", &[]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        serde_json::from_str::<Value>(&r.stdout).is_err(),
        "text, not JSON"
    );
    for zone in ["zone-a", "zone-b", "zone-c"] {
        assert!(r.stdout.contains(zone), "{}", r.stdout);
    }
}

#[test]
fn a_single_node_object_is_accepted() {
    let r = run_fixtures(
        "cluster-required.yaml",
        "node-single.yaml",
        &["--output", "json"],
    );
    assert_eq!(
        r.code, 2,
        "one node cannot hold 3 members per shard: {}",
        r.stderr
    );
}

// ---------- YAML aliases: shared objects are fine, alias bombs are refused ----------

/// Nodes for the alias tests: 3 zones x 3 nodes with room for 200 pods each
/// (1000 pods need more than the fixtures' 110).
fn roomy_nodes() -> String {
    let mut yaml = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for zone in ["a", "b", "c"] {
        for i in 1..=3 {
            let name = format!("node-{zone}{i}");
            yaml.push_str(&format!(
                "- apiVersion: v1\n  kind: Node\n  metadata:\n    name: {name}\n    labels:\n      \
                 {HOST}: {name}\n      {ZONE}: zone-{zone}\n  status:\n    allocatable: \
                 {{cpu: '64', memory: 256Gi, pods: '200'}}\n    conditions:\n    - {{type: Ready, \
                 status: 'True'}}\n"
            ));
        }
    }
    yaml
}

/// 1000 running pods as PyYAML's `yaml.dump` writes a list whose pods share
/// one `resources` object: anchored (`&id001`) at its first use, an alias
/// (`*id001`) at the 999 others. With `members`, the first 9 are the members
/// of demo, as pods-members.yaml places them (shard s member m on
/// node-<zone (s+m)%3><s+1>); the others spread over the 9 nodes.
fn pods_sharing_one_anchor(members: bool) -> String {
    let mut yaml = String::from("apiVersion: v1\nitems:\n");
    for p in 0..1000 {
        let (labels, node) = if members && p < 9 {
            let (s, m) = (p / 3, p % 3);
            let zone = ["a", "b", "c"][(s + m) % 3];
            let role = if m == 0 { "primary" } else { "replica" };
            (
                format!(
                    "    labels:\n      valkey.rs/cluster: demo\n      valkey.rs/member: '{m}'\n      \
                     valkey.rs/role: {role}\n      valkey.rs/shard: '{s}'\n    name: demo-{s}-{m}-0\n"
                ),
                format!("node-{zone}{}", s + 1),
            )
        } else {
            let zone = ["a", "b", "c"][p % 3];
            (
                format!("    name: other-{p}\n"),
                format!("node-{zone}{}", p / 3 % 3 + 1),
            )
        };
        let resources = if p == 0 {
            "      resources: &id001\n        requests:\n          cpu: 10m\n          memory: 16Mi\n"
        } else {
            "      resources: *id001\n"
        };
        yaml.push_str(&format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata:\n{labels}    namespace: default\n  spec:\n    \
             containers:\n    - image: x\n      name: main\n{resources}    nodeName: {node}\n  \
             status:\n    phase: Running\n"
        ));
    }
    yaml.push_str("kind: List\n");
    yaml
}

#[test]
fn a_thousand_pods_sharing_one_anchor_plan_fine() {
    let dir = tempdir::Dir::new("one-anchor");
    let pods = pods_sharing_one_anchor(true);
    assert_eq!(pods.matches("*id001").count(), 999);
    let pods = dir.write("pods.yaml", &pods);
    let nodes = dir.write("nodes.yaml", &roomy_nodes());
    let cluster = fixture("cluster-required.yaml");
    let r = run(&[
        "--cluster",
        &cluster,
        "--nodes",
        &nodes,
        "--pods",
        &pods,
        "--output",
        "json",
    ]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let plan: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(members(&plan).len(), 9);
    assert!(
        members(&plan).iter().all(|m| m["moved"] == false),
        "the running members were read from the list: {plan}"
    );
}

/// The pods' requests are what the alias expands to: some 111 pods of 10m
/// on a node of 1 cpu leave no room for a member's 100m (were the alias read
/// as nothing, every member would fit).
#[test]
fn what_an_alias_stands_for_counts_as_requests() {
    let dir = tempdir::Dir::new("alias-requests");
    let pods = dir.write("pods.yaml", &pods_sharing_one_anchor(false));
    let nodes = dir.write(
        "nodes.yaml",
        &roomy_nodes().replace("cpu: '64'", "cpu: '1'"),
    );
    let cluster = fixture("cluster-required.yaml");
    let r = run(&[
        "--cluster",
        &cluster,
        "--nodes",
        &nodes,
        "--pods",
        &pods,
        "--output",
        "json",
    ]);
    assert_eq!(r.code, 2, "stderr: {}", r.stderr);
    let plan: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(plan["unplaced"].as_array().unwrap().len(), 9, "{plan}");
}

#[test]
fn an_alias_bomb_is_refused_quickly_naming_the_file() {
    // `billion laughs`: nine levels of nine aliases, 9^9 (387 million)
    // strings from under a kilobyte.
    let mut bomb = String::from("a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for (prev, level) in "abcdefgh".chars().zip("bcdefghi".chars()) {
        let aliases = vec![format!("*{prev}"); 9].join(", ");
        bomb.push_str(&format!("{level}: &{level} [{aliases}]\n"));
    }
    let dir = tempdir::Dir::new("alias-bomb");
    let pods = dir.write("bomb.yaml", &bomb);
    let (cluster, nodes) = (fixture("cluster-required.yaml"), fixture("nodes-3x3.yaml"));
    let started = std::time::Instant::now();
    let r = run(&["--cluster", &cluster, "--nodes", &nodes, "--pods", &pods]);
    let took = started.elapsed();
    assert_eq!(r.code, 1, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    assert!(r.stdout.is_empty(), "stdout: {}", r.stdout);
    let lines: Vec<&str> = r.stderr.trim_end().lines().collect();
    assert_eq!(lines.len(), 1, "one message on stderr, got: {}", r.stderr);
    for expected in [pods.as_str(), "invalid YAML", "aliases are expanded"] {
        assert!(
            lines[0].contains(expected),
            "{:?} should contain {expected:?}",
            lines[0]
        );
    }
    assert!(took < std::time::Duration::from_secs(30), "took {took:?}");
}
