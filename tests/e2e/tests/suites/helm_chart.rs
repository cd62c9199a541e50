//! The Helm chart (deploy/helm/valkey-operator) on the testbed:
//! 1. `helm lint` passes and `helm template` renders objects the API server
//!    accepts (server-side dry run);
//! 2. `helm install` creates the ServiceAccount, RBAC, Deployment and metrics
//!    Service (the Deployment scaled to 0: here the operator runs on the
//!    host with the chart's ServiceAccount token; `operator_incluster` runs
//!    the chart's Deployment from the image);
//! 3. the operator, run with a token of the chart's ServiceAccount and no
//!    other rights, takes the Lease in the release namespace and brings a 3x1
//!    cluster to Ready: the chart's RBAC is enough for the operator's work;
//! 4. `helm uninstall` removes what it installed and keeps the CRD.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use anyhow::{Context, Result, bail, ensure};
use e2e::cluster::{Env, wait_until};
use e2e::helm::helm;
use e2e::manifest::cluster_manifest;
use e2e::rbac::token_kubeconfig;
use std::time::Duration;

const RELEASE: &str = "vko";
/// The chart's name: ServiceAccount, Deployment and RBAC objects carry it.
const CHART_NAME: &str = "valkey-operator";

#[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn chart_suite(env: &Env, ns: &str) -> Result<()> {
    let chart = env.root.join("deploy/helm/valkey-operator");
    let chart_s = chart.to_string_lossy().to_string();

    // 1. lint, and the rendered objects pass the API server's validation.
    let lint = helm(env, &["lint", &chart_s])?;
    println!("helm_chart: {}", lint.lines().last().unwrap_or_default());
    let rendered = helm(env, &["template", RELEASE, &chart_s, "-n", ns])?;
    env.kubectl_stdin(
        &["apply", "--dry-run=server", "-n", ns, "-f", "-"],
        &rendered,
    )
    .context("the rendered chart is refused by the API server")?;
    // The optional parts, and RoleBindings per watched namespace.
    let rendered = helm(
        env,
        &[
            "template",
            RELEASE,
            &chart_s,
            "-n",
            ns,
            "--set",
            "networkPolicy.enabled=true",
            "--set",
            &format!("watchNamespaces={{{ns}}}"),
        ],
    )?;
    ensure!(
        rendered.contains("kind: NetworkPolicy") && rendered.contains("kind: RoleBinding"),
        "networkPolicy.enabled and watchNamespaces rendered no NetworkPolicy or RoleBinding"
    );
    env.kubectl_stdin(
        &["apply", "--dry-run=server", "-n", ns, "-f", "-"],
        &rendered,
    )
    .context("the rendered chart (NetworkPolicy, watchNamespaces) is refused by the API server")?;
    // values.schema.json refuses bad values before anything is rendered.
    for (bad, named) in [
        ("replicaCount=-1", "/replicaCount"),
        ("logFormat=xml", "/logFormat"),
        ("imag.tag=1", "additional properties 'imag'"),
    ] {
        let refused = helm(env, &["template", RELEASE, &chart_s, "--set", bad]);
        match refused {
            Ok(_) => bail!("helm accepted --set {bad}"),
            Err(e) => ensure!(
                format!("{e:#}").contains(named),
                "helm refused --set {bad} without naming {named}: {e:#}"
            ),
        }
    }

    // 2. install.
    helm(
        env,
        &[
            "install",
            RELEASE,
            &chart_s,
            "-n",
            ns,
            "--set",
            "replicaCount=0",
        ],
    )?;
    for (kind, name) in [
        ("serviceaccount", CHART_NAME.to_string()),
        ("deployment", CHART_NAME.to_string()),
        ("service", format!("{CHART_NAME}-metrics")),
        ("clusterrole", CHART_NAME.to_string()),
        ("clusterrolebinding", CHART_NAME.to_string()),
    ] {
        let scope: &[&str] = if kind.starts_with("cluster") {
            &[]
        } else {
            &["-n", ns]
        };
        let mut args = vec!["get", kind, name.as_str(), "-o", "name"];
        args.extend_from_slice(scope);
        env.kubectl(&args)
            .with_context(|| format!("helm install left no {kind} {name}"))?;
    }
    println!("helm_chart: installed release {RELEASE} in {ns}");

    // 3. the operator with the chart's ServiceAccount and nothing else.
    let token = env.kubectl(&["create", "token", CHART_NAME, "-n", ns, "--duration=3600s"])?;
    let kubeconfig = env.testbed_dir.join(format!("kubeconfig-{ns}-sa"));
    token_kubeconfig(env, token.trim(), &kubeconfig)?;
    let kc = kubeconfig.to_string_lossy().to_string();
    let lease = format!("{RELEASE}-e2e");
    let mut operator = env.spawn_operator(
        "helm-sa",
        &["run", "--http-addr", "127.0.0.1:0", "--lease-name", &lease],
        &[("KUBECONFIG", kc.as_str()), ("POD_NAMESPACE", ns)],
    )?;
    let manifest = cluster_manifest("hc", 3, 1).yaml();
    env.apply(ns, &manifest)?;
    let ready = env.wait_condition(ns, "hc", "Ready", "True", Duration::from_secs(240));
    if let Err(e) = ready {
        bail!("{e:#}\noperator log:\n{}", operator.tail(60));
    }
    env.check_shape(ns, "hc", 3, 1)?;
    let holder = env.kubectl(&[
        "get",
        "lease",
        &lease,
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])?;
    ensure!(
        !holder.trim().is_empty(),
        "the Lease {ns}/{lease} has no holder"
    );
    let forbidden = std::fs::read_to_string(&operator.log)
        .unwrap_or_default()
        .lines()
        // An RBAC denial names the ServiceAccount ("... is forbidden: User
        // \"system:serviceaccount:NS:NAME\" cannot ..."); other 403s (e.g.
        // a namespace of another suite being deleted) are not the chart's.
        .filter(|l| l.contains("system:serviceaccount:") && l.contains(" cannot "))
        .take(5)
        .collect::<Vec<_>>()
        .join("\n");
    ensure!(
        forbidden.is_empty(),
        "the chart's RBAC refused the operator something:\n{forbidden}"
    );
    println!(
        "helm_chart: the operator as ServiceAccount {ns}/{CHART_NAME} holds Lease {lease} ({}) and brought hc to Ready",
        holder.trim()
    );
    env.kubectl(&[
        "delete",
        "valkeycluster",
        "hc",
        "-n",
        ns,
        "--wait=true",
        "--timeout=120s",
    ])?;
    operator.stop();

    // 4. uninstall: the release's objects go, the CRD stays.
    helm(env, &["uninstall", RELEASE, "-n", ns, "--wait"])?;
    wait_until(Duration::from_secs(60), Duration::from_millis(500), || {
        Ok(env
            .kubectl(&[
                "get",
                "clusterrole",
                CHART_NAME,
                "--ignore-not-found",
                "-o",
                "name",
            ])?
            .trim()
            .is_empty())
    })
    .context("helm uninstall left the ClusterRole behind")?;
    env.kubectl(&["get", "crd", "valkeyclusters.valkey.rs", "-o", "name"])
        .context("helm uninstall removed the CRD (Helm keeps CRDs)")?;
    println!("helm_chart: uninstalled; the CRD is kept");
    Ok(())
}

#[test]
fn the_chart_installs_and_its_rbac_is_enough_for_the_operator() {
    let Some(env) = Env::or_skip("helm_chart") else {
        return;
    };
    env.install_crd().unwrap();
    let ns = env.namespace("e2e-helm").unwrap();
    if let Err(e) = chart_suite(&env, &ns.name) {
        let _ = helm(&env, &["uninstall", RELEASE, "-n", &ns.name]);
        panic!("{e:#}");
    }
}
