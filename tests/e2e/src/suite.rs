//! What every operator suite does around its scenario: start (the CRD, an
//! operator of its own, a fresh namespace), create a cluster and wait for its
//! exact shape, write in the background while something changes, stop the
//! writes and read every acknowledged key back, and fail with diagnostics.

use crate::cluster::{Env, Load, MemberPod, Namespace, Operator, wait_until};
use crate::manifest::ClusterManifest;
use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// One operator suite's test: the testbed, an operator of its own and a
/// namespace. Fields drop in order: the namespace goes first, then the
/// operator stops.
pub struct Suite {
    pub ns: Namespace,
    pub operator: Operator,
    pub env: Env,
}

impl Suite {
    /// The suite's environment with the CRD installed, an operator whose log
    /// is `operator-<operator>.log`, and a namespace `<ns_prefix>-<pid>`; or
    /// `None` (the suite is skipped with a message) without a testbed.
    /// Panics when the setup fails: the test cannot run.
    #[allow(clippy::panic)] // a test harness: failing the test is its job
    pub fn start(suite: &str, operator: &str, ns_prefix: &str) -> Option<Suite> {
        let env = Env::or_skip(suite)?;
        let setup = || -> Result<Suite> {
            env.install_crd()?;
            let operator = env.start_operator(operator)?;
            let ns = env.namespace(ns_prefix)?;
            Ok(Suite {
                ns,
                operator,
                env: env.clone(),
            })
        };
        match setup() {
            Ok(s) => Some(s),
            Err(e) => panic!("{suite}: setup failed: {e:#}"),
        }
    }

    /// The suite's namespace.
    pub fn ns(&self) -> &str {
        &self.ns.name
    }

    /// [`Env::diagnostics`] of each of `clusters`.
    pub fn diagnostics(&self, clusters: &[&str]) -> String {
        clusters
            .iter()
            .map(|c| self.env.diagnostics(self.ns(), c, &self.operator))
            .collect()
    }

    /// Runs the scenario `f` in the suite's namespace; when it fails, panics
    /// with the error and the diagnostics of `clusters`.
    #[allow(clippy::panic)] // a test harness: failing the test is its job
    pub fn run(&self, clusters: &[&str], f: impl FnOnce(&Env, &str) -> Result<()>) {
        if let Err(e) = f(&self.env, self.ns()) {
            panic!("{e:#}\n{}", self.diagnostics(clusters));
        }
    }
}

/// Waits until a background load has acknowledged some writes, so that a
/// change happens while the client is really writing.
pub fn wait_load_running(load: &mut Load) -> Result<()> {
    wait_until(Duration::from_secs(60), Duration::from_millis(200), || {
        if !load.alive() {
            bail!("judge load exited early");
        }
        Ok(load.acked_so_far() >= 50)
    })
    .context("judge load acknowledged no writes")
}

/// Lets the writes go on a little (the cluster must serve them after the
/// change too), stops the load and checks that it acknowledged writes.
/// Returns its summary (writes, acked, errors, longest_gap_ms).
pub fn finish_load(load: &mut Load, what: &str) -> Result<Value> {
    std::thread::sleep(Duration::from_secs(2));
    let summary = load.finish(Duration::from_secs(30))?;
    ensure!(
        summary["acked"].as_u64().unwrap_or(0) > 0,
        "{what}: the load acknowledged nothing: {summary}"
    );
    Ok(summary)
}

impl Env {
    /// Applies `yaml` (a cluster named `name`) in `ns` and waits until its
    /// Ready condition says `InvalidSpec` with every one of `fields` in its
    /// message; then no pod and no Service may carry the cluster's label,
    /// and the cluster is deleted. What a refused spec leaves: nothing.
    pub fn refused_naming(&self, ns: &str, name: &str, yaml: &str, fields: &[&str]) -> Result<()> {
        self.apply(ns, yaml)?;
        let mut last = Value::Null;
        wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
            last = self.cluster(ns, name)?;
            Ok(crate::cluster::condition(&last, "Ready").is_some_and(|c| {
                c["status"] == "False"
                    && c["reason"] == "InvalidSpec"
                    && c["message"]
                        .as_str()
                        .is_some_and(|m| fields.iter().all(|f| m.contains(f)))
            }))
        })
        .with_context(|| {
            format!(
                "{name} was not refused naming {fields:?}: {}",
                last["status"]
            )
        })?;
        let selector = format!("valkey.rs/cluster={name}");
        let made = self.kubectl(&[
            "get",
            "pods,services",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "name",
        ])?;
        ensure!(
            made.trim().is_empty(),
            "objects made for the refused {name}: {made}"
        );
        self.kubectl(&["delete", "valkeycluster", name, "-n", ns, "--wait=false"])?;
        Ok(())
    }

    /// Applies `m` in `ns`, waits until it is Ready for its generation and
    /// has exactly the shape it asks for ([`Env::check_shape`]). Returns the
    /// time from apply to Ready and checked.
    pub fn create_cluster(
        &self,
        ns: &str,
        m: &ClusterManifest,
        timeout: Duration,
    ) -> Result<Duration> {
        let started = Instant::now();
        self.apply(ns, &m.yaml())?;
        self.wait_ready_shape(ns, m, timeout)?;
        Ok(started.elapsed())
    }

    /// Waits until the cluster of `m` is Ready for its generation, then
    /// checks it has exactly the shape `m` asks for. Returns the status.
    pub fn wait_ready_shape(
        &self,
        ns: &str,
        m: &ClusterManifest,
        timeout: Duration,
    ) -> Result<Value> {
        let obj = self.wait_condition(ns, &m.name, "Ready", "True", timeout)?;
        self.check_shape(ns, &m.name, m.shards, m.replicas)
            .with_context(|| format!("{}: {}x{} when Ready", m.name, m.shards, m.replicas))?;
        Ok(obj)
    }

    /// Starts `judge.py load` (see [`Env::start_load`]) through the member
    /// pods of cluster `name` and waits until it has acknowledged writes.
    pub fn start_member_load(
        &self,
        ns: &str,
        name: &str,
        password: &str,
        dir: &Path,
        label: &str,
        extra: &[&str],
    ) -> Result<Load> {
        let hosts = self.member_ips(ns, name)?;
        let host_refs: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let mut load = self.start_load(&host_refs, password, dir, label, extra)?;
        wait_load_running(&mut load)?;
        Ok(load)
    }

    /// [`Env::verify_keys`] through the current member pods of cluster `name`.
    pub fn verify_cluster_keys(
        &self,
        ns: &str,
        name: &str,
        password: &str,
        keys: &Path,
    ) -> Result<Value> {
        self.verify_keys(&self.member_ips(ns, name)?, password, keys)
    }

    /// The member pod of `shard` whose role label is `role`.
    pub fn member_with_role(
        &self,
        ns: &str,
        name: &str,
        shard: u32,
        role: &str,
    ) -> Result<MemberPod> {
        self.members(ns, name)?
            .into_iter()
            .find(|m| m.shard == shard && m.role == role)
            .with_context(|| format!("shard {shard} has no pod labelled {role}"))
    }

    /// The Valkey node id of the member at `ip`, from its own CLUSTER NODES.
    pub fn node_id(&self, ip: &str, password: &str) -> Result<String> {
        self.cluster_nodes(ip, password)?
            .into_iter()
            .find(|n| n.has_flag("myself"))
            .map(|n| n.id)
            .with_context(|| format!("{ip}: no myself line"))
    }

    /// SIGKILLs the valkey-server that serves `ip` (no goodbye to its peers).
    /// Returns its pid.
    pub fn kill_valkey(&self, ip: &str) -> Result<u32> {
        let pid = self.valkey_pid(ip)?;
        let killed = std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()?;
        ensure!(killed.success(), "kill -KILL {pid} failed");
        Ok(pid)
    }

    /// The zone label of every Node, by node name (empty when unlabelled).
    pub fn node_zones(&self) -> Result<BTreeMap<String, String>> {
        let nodes = self.kubectl_json(&["get", "nodes"])?;
        Ok(nodes["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&n["metadata"]["name"]),
                    text(&n["metadata"]["labels"]["topology.kubernetes.io/zone"]),
                )
            })
            .collect())
    }
}
