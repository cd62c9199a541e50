//! The committed CRD on a real API server: it is accepted, its schema bounds and
//! CEL rules refuse bad ValkeyClusters with messages naming the field, its
//! transition rules guard persistence, defaults are filled in, and `kubectl
//! explain` / `kubectl get` show what users read.
//!
//! Needs no operator. Runs against the testbed in `TESTBED_DIR` (or any API
//! server in `KUBECONFIG`); when neither is set it fails like every e2e suite
//! (`Env::or_skip`), unless `E2E_SKIP=1` skips it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use e2e::cluster::{Env, wait_until};
use std::path::PathBuf;
use std::time::Duration;

fn env(suite: &str) -> Option<Env> {
    if let Some(env) = Env::from_env() {
        return Some(env);
    }
    let Some(kubeconfig) = std::env::var_os("KUBECONFIG") else {
        // Neither a testbed nor an API server: a suite that did not run must
        // not count as passed.
        return Env::or_skip(suite);
    };
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut env = Env::for_testbed(&root, &std::env::temp_dir());
    env.kubeconfig = PathBuf::from(kubeconfig);
    if let Some(k) = std::env::var_os("KUBECTL") {
        env.kubectl = PathBuf::from(k);
    }
    Some(env)
}

fn manifest(name: &str, spec: &str) -> String {
    let spec: String = spec.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "apiVersion: valkey.rs/v1alpha1\nkind: ValkeyCluster\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// Server-side dry run of a create: runs defaulting, the schema and every CEL
/// rule, stores nothing.
fn dry_run(env: &Env, ns: &str, name: &str, spec: &str) -> Result<String, String> {
    env.kubectl_stdin(
        &[
            "apply",
            "--dry-run=server",
            "-o",
            "yaml",
            "-n",
            ns,
            "-f",
            "-",
        ],
        &manifest(name, spec),
    )
    .map_err(|e| format!("{e:#}"))
}

fn assert_refused(env: &Env, ns: &str, case: &str, spec: &str, expected: &[&str]) {
    match dry_run(env, ns, case, spec) {
        Ok(out) => panic!("{case}: accepted, expected a refusal:\n{out}"),
        Err(err) => {
            for e in expected {
                assert!(err.contains(e), "{case}: {err:?} should contain {e:?}");
            }
        }
    }
}

/// A namespace of this suite, deleted on drop. Made here rather than with
/// `Env::namespace`, which waits for a ServiceAccount: these tests create no
/// pods and also run on a bare API server.
struct Namespace {
    env: Env,
    name: String,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = self
            .env
            .kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
    }
}

fn setup(suite: &str) -> Option<(Env, Namespace)> {
    let env = env(suite)?;
    env.install_crd().expect("the committed CRD is accepted");
    let name = format!("{suite}-{}", std::process::id() % 100_000);
    let _ = env.kubectl(&["delete", "namespace", &name, "--wait=true", "--timeout=60s"]);
    env.kubectl(&["create", "namespace", &name])
        .expect("namespace");
    let ns = Namespace {
        env: env.clone(),
        name,
    };
    Some((env, ns))
}

#[test]
#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn schema_and_cel_refuse_bad_specs_naming_the_field() {
    let Some((env, ns)) = setup("crd-create") else {
        return;
    };
    let ns = ns.name.as_str();
    let cases: &[(&str, &str, &[&str])] = &[
        (
            "shards-0",
            "shards: 0",
            &["spec.shards", "greater than or equal to 1"],
        ),
        (
            "shards-16385",
            "shards: 16385",
            &["spec.shards", "less than or equal to 16384"],
        ),
        (
            "replicas-neg",
            "replicas: -1",
            &["spec.replicas", "greater than or equal to 0"],
        ),
        (
            "replicas-16",
            "shards: 1\nreplicas: 16",
            &["spec.replicas", "less than or equal to 15"],
        ),
        (
            "hostile-size",
            "shards: 16384\nreplicas: 1000",
            &["spec.replicas", "less than or equal to 15"],
        ),
        (
            "members-1002",
            "shards: 334\nreplicas: 2",
            &["spec.shards * (spec.replicas + 1) must be at most 1000"],
        ),
        (
            // replicas left out: its default (1) counts.
            "members-default-replicas",
            "shards: 501",
            &["spec.shards * (spec.replicas + 1) must be at most 1000"],
        ),
        (
            "max-replicas-0",
            "replicaSpreadConstraints: [{topologyKey: zone, maxReplicas: 0}]",
            &[
                "spec.replicaSpreadConstraints[0].maxReplicas",
                "greater than or equal to 1",
            ],
        ),
        (
            "bad-mode",
            "replicaSpreadConstraints: [{topologyKey: zone, maxReplicas: 1, mode: Sometimes}]",
            &[
                "spec.replicaSpreadConstraints[0].mode",
                "Unsupported value",
                "Sometimes",
            ],
        ),
        (
            "empty-key",
            "replicaSpreadConstraints: [{topologyKey: '', maxReplicas: 1}]",
            &["spec.replicaSpreadConstraints[0].topologyKey"],
        ),
        (
            "bad-key",
            "replicaSpreadConstraints: [{topologyKey: 'not a key', maxReplicas: 1}]",
            &[
                "spec.replicaSpreadConstraints[0].topologyKey",
                "valid label key",
            ],
        ),
        (
            "dup-same-key",
            "replicaSpreadConstraints: [{topologyKey: node, maxReplicas: 1, mode: Required}, \
             {topologyKey: node, maxReplicas: 2, mode: Required}]",
            &["spec.replicaSpreadConstraints", "same topologyKey"],
        ),
        (
            "dup-alias-vs-full-key",
            "replicaSpreadConstraints: [{topologyKey: zone, maxReplicas: 1, mode: Required}, \
             {topologyKey: topology.kubernetes.io/zone, maxReplicas: 2, mode: Required}]",
            &["spec.replicaSpreadConstraints", "same topologyKey"],
        ),
        (
            "dup-with-default-mode",
            "replicaSpreadConstraints: [{topologyKey: region, maxReplicas: 1}, \
             {topologyKey: topology.kubernetes.io/region, maxReplicas: 2, mode: Preferred}]",
            &["spec.replicaSpreadConstraints", "same topologyKey"],
        ),
        (
            "owned-port",
            "config: {port: '7000'}",
            &["spec.config", "port is owned by the operator"],
        ),
        (
            "owned-loadmodule",
            "config: {loadmodule: /tmp/evil.so}",
            &[
                "spec.config",
                "loadmodule is refused in spec.config: list modules in spec.modules",
            ],
        ),
        (
            "owned-module-command",
            "config: {enable-module-command: 'yes'}",
            &[
                "spec.config",
                "enable-module-command is owned by the operator",
            ],
        ),
        (
            "owned-debug-command",
            "config: {enable-debug-command: local}",
            &[
                "spec.config",
                "enable-debug-command is owned by the operator",
            ],
        ),
        (
            "owned-protected-configs",
            "config: {enable-protected-configs: 'yes'}",
            &[
                "spec.config",
                "enable-protected-configs is owned by the operator",
            ],
        ),
        (
            "owned-module-any-case",
            "config: {LoadModule: /tmp/evil.so}",
            &["spec.config", "any case"],
        ),
        (
            // kubectl reads a bare yes as a boolean (YAML 1.1): config values
            // are strings, so it must be quoted (docs/guide/configuration.md says so).
            "config-bare-yes",
            "config: {appendonly: yes}",
            &["spec.config.appendonly", "must be of type string"],
        ),
        (
            "owned-announce",
            "config: {cluster-announce-ip: 10.0.0.1}",
            &["spec.config", "cluster-announce-"],
        ),
        (
            "owned-any-case",
            "config: {RequirePass: x}",
            &["spec.config", "any case"],
        ),
        (
            "config-newline",
            "config: {maxmemory: \"1gb\\nrequirepass x\"}",
            &["spec.config", "single line"],
        ),
        (
            "size-zero",
            "persistence: {size: '0'}",
            &["spec.persistence.size", "positive quantity"],
        ),
        (
            "size-garbage",
            "persistence: {size: ten}",
            &["spec.persistence.size"],
        ),
        (
            "owned-pod-label",
            "podLabels: {valkey.rs/role: primary}",
            &["spec.podLabels", "valkey.rs/"],
        ),
        (
            "short-grace",
            "terminationGracePeriodSeconds: 5",
            &[
                "spec.terminationGracePeriodSeconds",
                "greater than or equal to 15",
            ],
        ),
    ];
    for (case, spec, expected) in cases {
        assert_refused(&env, ns, case, spec, expected);
    }
    assert_refused(
        &env,
        ns,
        "a-name-that-is-far-too-long-for-member-statefulsets",
        "shards: 1",
        &["metadata.name", "at most 40 characters"],
    );
}

#[test]
fn valid_specs_are_accepted_and_defaulted() {
    let Some((env, ns)) = setup("crd-defaults") else {
        return;
    };
    let ns = ns.name.as_str();
    let out = dry_run(
        &env,
        ns,
        "defaults",
        "replicaSpreadConstraints: [{topologyKey: zone, maxReplicas: 1}]\npersistence: {size: 1Gi}",
    )
    .expect("a minimal spec is valid");
    let obj: serde_json::Value = serde_saphyr::from_str(&out).unwrap();
    let spec = &obj["spec"];
    assert_eq!(spec["shards"], 3);
    assert_eq!(spec["replicas"], 1);
    assert!(
        spec["image"]
            .as_str()
            .unwrap()
            .starts_with("valkey/valkey:9")
    );
    assert_eq!(spec["replicaSpreadConstraints"][0]["mode"], "Preferred");
    assert_eq!(spec["auth"]["enabled"], true);
    assert_eq!(spec["podDisruptionBudget"]["enabled"], true);
    assert_eq!(spec["primaryBalancing"]["mode"], "Auto");
    assert_eq!(spec["primaryBalancing"]["quietPeriodSeconds"], 60);
    assert_eq!(spec["persistence"]["reclaimPolicy"], "Retain");
    assert_eq!(spec["persistence"]["nodeLossGraceSeconds"], 300);
    assert_eq!(spec["terminationGracePeriodSeconds"], 30);

    for (case, spec) in [
        (
            "one-key-both-modes",
            "replicaSpreadConstraints: [{topologyKey: zone, maxReplicas: 2, mode: Required}, \
             {topologyKey: topology.kubernetes.io/zone, maxReplicas: 1, mode: Preferred}]",
        ),
        (
            "custom-key",
            "replicaSpreadConstraints: [{topologyKey: example.com/rack, maxReplicas: 1}]",
        ),
        (
            "user-config",
            "config: {maxmemory-policy: allkeys-lru, maxmemory: 100mb}",
        ),
        ("int-size", "persistence: {size: 1073741824}"),
        ("no-replicas", "replicas: 0\nshards: 1000"),
        ("members-1000", "shards: 500\nreplicas: 1"),
        ("replicas-15", "shards: 62\nreplicas: 15"),
        ("config-quoted-yes", "config: {appendonly: 'yes'}"),
    ] {
        if let Err(e) = dry_run(&env, ns, case, spec) {
            panic!("{case}: refused: {e}");
        }
    }
    let examples = env.root.join("examples");
    for example in [
        "cluster.yaml",
        "cluster-preferred.yaml",
        "cluster-secure.yaml",
    ] {
        let path = examples.join(example);
        let path = path.to_string_lossy();
        env.kubectl(&["apply", "--dry-run=server", "-n", ns, "-f", &path])
            .unwrap_or_else(|e| panic!("examples/{example}: {e:#}"));
    }
}

/// What `valkey-operator crd` prints, applied with kubectl as a user does, and
/// what the API server then serves: kubectl reads YAML 1.1, where a bare `Off`
/// is `false`, so an unquoted enum value broke `primaryBalancing.mode: Off`.
#[test]
fn the_generated_crd_applied_with_kubectl_keeps_off_a_string() {
    let Some((env, ns)) = setup("crd-yaml11") else {
        return;
    };
    let out = std::process::Command::new(&env.operator_bin)
        .arg("crd")
        .output()
        .expect("run valkey-operator crd");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd = String::from_utf8(out.stdout).expect("UTF-8");
    env.kubectl_stdin(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &crd,
    )
    .expect("kubectl applies the generated CRD");
    env.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/valkeyclusters.valkey.rs",
        "--timeout=60s",
    ])
    .expect("established");
    let served = env
        .kubectl_json(&["get", "crd", "valkeyclusters.valkey.rs"])
        .expect("get crd");
    let mode = &served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["primaryBalancing"]["properties"]["mode"];
    assert_eq!(mode["enum"], serde_json::json!(["Auto", "Off"]), "{mode}");

    // The manifest is YAML read by kubectl too, so Off is quoted there.
    env.apply(
        &ns.name,
        &manifest(
            "balancing-off",
            "shards: 1\nreplicas: 0\nprimaryBalancing: {mode: 'Off'}",
        ),
    )
    .expect("a cluster with primaryBalancing.mode Off is created");
    let stored = env
        .kubectl_json(&["get", "vkc", "balancing-off", "-n", &ns.name])
        .expect("get the cluster");
    assert_eq!(stored["spec"]["primaryBalancing"]["mode"], "Off");
}

fn patch(env: &Env, ns: &str, name: &str, json_patch: &str) -> Result<String, String> {
    env.kubectl(&[
        "patch",
        "valkeycluster",
        name,
        "-n",
        ns,
        "--type=json",
        "-p",
        json_patch,
    ])
    .map_err(|e| format!("{e:#}"))
}

#[test]
fn transition_rules_guard_persistence() {
    let Some((env, ns)) = setup("crd-update") else {
        return;
    };
    let ns = ns.name.as_str();
    // Stored objects, so updates have an oldSelf. Small shapes in case an
    // operator happens to be running.
    env.apply(
        ns,
        &manifest(
            "with-volumes",
            "shards: 1\nreplicas: 0\npersistence: {size: 1Gi, storageClassName: fast}",
        ),
    )
    .expect("create with persistence");
    env.apply(ns, &manifest("without-volumes", "shards: 1\nreplicas: 0"))
        .expect("create without persistence");

    let refused = |name: &str, p: &str, expected: &[&str]| match patch(&env, ns, name, p) {
        Ok(out) => panic!("{name} {p}: accepted: {out}"),
        Err(err) => {
            for e in expected {
                assert!(err.contains(e), "{p}: {err:?} should contain {e:?}");
            }
        }
    };
    refused(
        "with-volumes",
        r#"[{"op":"remove","path":"/spec/persistence"}]"#,
        &["spec.persistence", "cannot be added or removed"],
    );
    refused(
        "without-volumes",
        r#"[{"op":"add","path":"/spec/persistence","value":{"size":"1Gi"}}]"#,
        &["spec.persistence", "cannot be added or removed"],
    );
    refused(
        "with-volumes",
        r#"[{"op":"replace","path":"/spec/persistence/storageClassName","value":"slow"}]"#,
        &["spec.persistence.storageClassName", "immutable"],
    );
    refused(
        "with-volumes",
        r#"[{"op":"remove","path":"/spec/persistence/storageClassName"}]"#,
        &["spec.persistence.storageClassName", "immutable"],
    );
    refused(
        "with-volumes",
        r#"[{"op":"replace","path":"/spec/persistence/size","value":"512Mi"}]"#,
        &["spec.persistence.size", "only grow"],
    );
    patch(
        &env,
        ns,
        "with-volumes",
        r#"[{"op":"replace","path":"/spec/persistence/size","value":"2Gi"}]"#,
    )
    .expect("size may grow");
    patch(
        &env,
        ns,
        "with-volumes",
        r#"[{"op":"replace","path":"/spec/persistence/size","value":"2048Mi"}]"#,
    )
    .expect("the same size written differently is no shrink");
    patch(
        &env,
        ns,
        "with-volumes",
        r#"[{"op":"replace","path":"/spec/shards","value":2}]"#,
    )
    .expect("other fields still change");
}

#[test]
fn kubectl_explains_fields_and_prints_the_columns() {
    let Some((env, ns)) = setup("crd-explain") else {
        return;
    };
    // The API server publishes a new CRD's OpenAPI a moment after it is Established.
    let mut text = String::new();
    wait_until(
        Duration::from_secs(60),
        Duration::from_millis(500),
        || match env.kubectl(&["explain", "valkeycluster.spec.replicaSpreadConstraints"]) {
            Ok(t) if t.contains("maxReplicas") => {
                text = t;
                Ok(true)
            }
            _ => Ok(false),
        },
    )
    .expect("kubectl explain valkeycluster.spec.replicaSpreadConstraints");
    for word in [
        "topologyKey",
        "maxReplicas",
        "mode",
        "Preferred",
        "Required",
        "kubernetes.io/hostname",
    ] {
        assert!(
            text.contains(word),
            "explain should mention {word}:\n{text}"
        );
    }
    let spec = env
        .kubectl(&["explain", "vkc.spec"])
        .expect("explain by short name");
    for field in [
        "shards",
        "replicas",
        "persistence",
        "config",
        "auth",
        "scheduling",
    ] {
        assert!(spec.contains(field), "{field} missing from:\n{spec}");
    }

    env.apply(&ns.name, &manifest("columns", "shards: 1\nreplicas: 0"))
        .expect("create");
    let table = env
        .kubectl(&["get", "vkc", "-n", &ns.name])
        .expect("kubectl get vkc");
    let header = table.lines().next().unwrap_or_default();
    for column in ["NAME", "READY", "SHARDS", "REPLICAS", "TOPOLOGY", "AGE"] {
        assert!(header.contains(column), "{column} missing from {header:?}");
    }
}

#[test]
fn kubectl_scale_sets_the_number_of_shards() {
    let Some((env, ns)) = setup("crd-scale") else {
        return;
    };
    let ns = ns.name.as_str();
    env.apply(ns, &manifest("scaled", "shards: 1\nreplicas: 0"))
        .expect("create");
    env.kubectl(&["scale", "valkeycluster", "scaled", "-n", ns, "--replicas=2"])
        .expect("kubectl scale through the scale subresource");
    let shards = env
        .kubectl(&[
            "get",
            "vkc",
            "scaled",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.shards}",
        ])
        .unwrap();
    assert_eq!(shards.trim(), "2", "kubectl scale sets spec.shards");
    // The scale subresource goes through the same schema: no zero shards.
    let refused = env.kubectl(&["scale", "vkc", "scaled", "-n", ns, "--replicas=0"]);
    let err = format!("{:#}", refused.expect_err("zero shards accepted"));
    assert!(err.contains("spec.shards"), "{err}");
}
