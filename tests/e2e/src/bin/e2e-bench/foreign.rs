//! The operator in a real cluster (issue 39): its memory must depend on its
//! own clusters, not on what other teams run. One operator and a 3x2
//! cluster; the operator's RSS and an apply -> Ready are measured, then
//! `PODS` Pending pods of other namespaces (realistic specs: three
//! containers, env, annotations, about 4 KB each; Pending because their
//! nodeSelector matches no node, so they take no room) and `OTHERS` foreign
//! Secrets and ConfigMaps are created, and both are measured again.
//! `--foreign-pods N` changes the count.

use crate::{bench_operator, goal, rss_kib, warm_kubectl};
use anyhow::{Context, Result};
use e2e::cluster::Env;
use std::time::{Duration, Instant};

/// Foreign Secrets and ConfigMaps, each.
const OTHERS: usize = 500;
/// Namespaces the foreign objects are spread over.
const NAMESPACES: usize = 3;
/// Objects per `kubectl apply` (one List each).
const BATCH: usize = 250;
/// Held after the objects exist before memory is read: the watches take
/// them in meanwhile.
const SETTLE: Duration = Duration::from_secs(30);

fn pod(ns: &str, i: usize) -> String {
    let env: String = (0..12)
        .map(|k| {
            format!(
                "        - {{name: SETTING_{k}, value: \"value-{i}-{k}-{}\"}}\n",
                "x".repeat(40)
            )
        })
        .collect();
    let container = |name: &str| {
        format!(
            "    - name: {name}\n      image: registry.example/team/{name}:1.{i}\n      args: [\"--port=8080\", \"--log-level=info\", \"--config=/etc/app/config.yaml\"]\n      resources: {{requests: {{cpu: 10m, memory: 16Mi}}, limits: {{memory: 64Mi}}}}\n      env:\n{env}      volumeMounts: [{{name: config, mountPath: /etc/app}}]\n"
        )
    };
    format!(
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: app-{i}\n    namespace: {ns}\n    labels: {{app: app-{i}, team: other, tier: backend}}\n    annotations:\n      example.com/owner: \"team-{i}@example.com\"\n      example.com/notes: \"{}\"\n  spec:\n    nodeSelector: {{example.com/pool: none}}\n    volumes: [{{name: config, configMap: {{name: app-config}}}}]\n    containers:\n{}{}{}",
        "n".repeat(300),
        container("api"),
        container("worker"),
        container("proxy"),
    )
}

fn secret_and_config_map(ns: &str, i: usize) -> String {
    let blob = "s".repeat(1024);
    format!(
        "- apiVersion: v1\n  kind: Secret\n  metadata: {{name: s-{i}, namespace: {ns}}}\n  stringData: {{token: \"{blob}\"}}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: c-{i}, namespace: {ns}}}\n  data: {{config.yaml: \"{blob}\"}}\n"
    )
}

fn apply_list(env: &Env, items: &[String]) -> Result<()> {
    for chunk in items.chunks(BATCH) {
        let yaml = format!("apiVersion: v1\nkind: List\nitems:\n{}", chunk.concat());
        env.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &yaml)?;
    }
    Ok(())
}

fn rss_after_settle(pid: u32) -> Result<u64> {
    std::thread::sleep(SETTLE);
    rss_kib(pid).context("the operator's RSS")
}

pub fn figures(env: &Env, operator_args: &[String], pods: usize) -> Result<()> {
    let (ns, operator) = bench_operator(env, "foreign", operator_args)?;
    let pid = operator.pid().context("operator pid")?;
    warm_kubectl(env, &ns.name)?;
    let before_ready = crate::apply_to_ready(env, &ns.name, "own", false)?;
    let before = rss_after_settle(pid)?;
    println!(
        "foreign objects: with its own 3x2 cluster only: RSS {:.1} MB, apply -> Ready {before_ready:.1} s",
        before as f64 / 1024.0
    );

    let spaces: Vec<String> = (0..NAMESPACES).map(|k| format!("other-team-{k}")).collect();
    for s in &spaces {
        let _ = env.kubectl(&["create", "namespace", s]);
    }
    let started = Instant::now();
    let items: Vec<String> = (0..pods).map(|i| pod(&spaces[i % NAMESPACES], i)).collect();
    let pod_bytes: usize = items.iter().map(String::len).sum();
    apply_list(env, &items)?;
    let others: Vec<String> = (0..OTHERS)
        .map(|i| secret_and_config_map(&spaces[i % NAMESPACES], i))
        .collect();
    apply_list(env, &others)?;
    println!(
        "foreign objects: {pods} Pending pods ({:.1} KB of YAML each), {OTHERS} Secrets and {OTHERS} ConfigMaps in {NAMESPACES} other namespaces, created in {:.0} s",
        pod_bytes as f64 / pods.max(1) as f64 / 1024.0,
        started.elapsed().as_secs_f64()
    );
    let after = rss_after_settle(pid)?;
    let after_ready = crate::apply_to_ready(env, &ns.name, "own-2", false)?;
    let grew_mb = (after as f64 - before as f64) / 1024.0;
    println!(
        "foreign objects: RSS {:.1} MB with them ({grew_mb:+.1} MB), apply -> Ready {after_ready:.1} s {}",
        after as f64 / 1024.0,
        goal(
            "RSS within 10 MB of the figure without them",
            grew_mb <= 10.0
        )
    );
    for s in &spaces {
        let _ = env.kubectl(&["delete", "namespace", s, "--wait=false"]);
    }
    Ok(())
}
