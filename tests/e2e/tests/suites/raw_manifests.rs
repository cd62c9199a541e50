//! The raw manifests as a user without Helm applies them: deploy/crd,
//! deploy/rbac and deploy/operator (the last two rendered from the chart by
//! scripts/gen-manifests.sh, drift-checked by `make test`), nothing changed.
//!
//! Both operator pods become Ready from the image the suite loaded; a
//! ValkeyCluster in a fresh namespace becomes Ready with its shape under the
//! manifests' RBAC (any RBAC denial in the operators' logs fails the suite);
//! the members' NetworkPolicy, on by default, admits the operator's pods by
//! the labels the Deployment passes (`--operator-pod-labels`). Then the
//! manifests are deleted again (the names are the chart's, which
//! operator_incluster installs next).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::exporter;
use e2e::manifest::cluster_manifest;
use e2e::rbac::forbidden_lines;
use serde_json::Value;
use std::time::Duration;

const OPERATOR_NS: &str = "valkey-operator";
const CLUSTER: &str = "raw";

/// Deletes what the manifests created (the Deployment first, so that no
/// operator is left without its rules), whatever the test did.
struct Installed<'a> {
    env: &'a Env,
}

impl Drop for Installed<'_> {
    fn drop(&mut self) {
        for file in ["deploy/operator/deployment.yaml", "deploy/rbac/rbac.yaml"] {
            let path = self.env.root.join(file);
            let _ = self.env.kubectl(&[
                "delete",
                "--ignore-not-found",
                "--wait=true",
                "--timeout=60s",
                "-f",
                &path.to_string_lossy(),
            ]);
        }
    }
}

fn operator_pods(env: &Env) -> Result<Vec<Value>> {
    let pods = env.kubectl_json(&[
        "get",
        "pods",
        "-n",
        OPERATOR_NS,
        "-l",
        "app.kubernetes.io/name=valkey-operator",
    ])?;
    Ok(pods["items"].as_array().cloned().unwrap_or_default())
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Every operator pod's log, as the node agent keeps it.
fn operator_logs(env: &Env) -> String {
    let mut all = String::new();
    for p in operator_pods(env).unwrap_or_default() {
        let name = p["metadata"]["name"].as_str().unwrap_or_default();
        let path = env
            .testbed_dir
            .join("logs/pods")
            .join(format!("{OPERATOR_NS}_{name}_operator.log"));
        all.push_str(&std::fs::read_to_string(path).unwrap_or_default());
    }
    all
}

fn suite(env: &Env, ns: &str) -> Result<()> {
    let archive = exporter::image_archive(env);
    ensure!(
        archive.exists(),
        "{} is missing: `make image` builds it",
        archive.display()
    );
    env.testbed(&["image", "load", &archive.to_string_lossy()])?;
    for file in ["deploy/rbac/rbac.yaml", "deploy/operator/deployment.yaml"] {
        env.kubectl(&["apply", "-f", &env.root.join(file).to_string_lossy()])
            .with_context(|| format!("kubectl apply -f {file}"))?;
    }
    wait_until(Duration::from_secs(120), Duration::from_millis(500), || {
        let pods = operator_pods(env)?;
        Ok(pods.len() == 2 && pods.iter().all(ready))
    })
    .context("the raw manifests' operator pods never became Ready")?;
    println!("raw_manifests: both operator pods of deploy/operator are Ready");

    let m = cluster_manifest(CLUSTER, 2, 1);
    let took = env.create_cluster(ns, &m, Duration::from_secs(240))?;
    println!("raw_manifests: {CLUSTER} 2x1 Ready in {took:?}");

    let policy = env
        .kubectl_json(&[
            "get",
            "networkpolicy",
            &format!("{CLUSTER}-members"),
            "-n",
            ns,
        ])
        .context("the members' NetworkPolicy (on by default) is missing")?;
    let admits_operator = policy["spec"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rule| rule["from"].as_array().cloned().unwrap_or_default())
        .any(|peer| {
            peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == OPERATOR_NS
                && peer["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "valkey-operator"
        });
    ensure!(
        admits_operator,
        "the members' NetworkPolicy does not admit the operator's pods: {}",
        policy["spec"]
    );
    let logs = operator_logs(env);
    let refused = forbidden_lines(&logs);
    ensure!(
        refused.is_empty(),
        "the raw manifests' RBAC refused the operator:\n{}",
        refused.join("\n")
    );
    env.kubectl(&[
        "delete",
        "valkeycluster",
        CLUSTER,
        "-n",
        ns,
        "--wait=true",
        "--timeout=120s",
    ])?;
    println!("raw_manifests: the NetworkPolicy admits the operator's pods; no RBAC denial");
    Ok(())
}

#[test]
fn the_raw_manifests_run_a_cluster() {
    let Some(env) = Env::or_skip("raw_manifests") else {
        return;
    };
    env.install_crd().unwrap();
    let ns = env.namespace("e2e-raw").unwrap();
    let installed = Installed { env: &env };
    if let Err(e) = suite(&env, &ns.name) {
        let pods = operator_pods(&env).unwrap_or_default();
        let logs = operator_logs(&env);
        let tail: Vec<&str> = logs.lines().rev().take(40).collect();
        drop(installed);
        panic!(
            "{e:#}\noperator pods: {}\nlast log lines:\n{}",
            serde_json::to_string(
                &pods
                    .iter()
                    .map(|p| &p["status"]["phase"])
                    .collect::<Vec<_>>()
            )
            .unwrap_or_default(),
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
}
