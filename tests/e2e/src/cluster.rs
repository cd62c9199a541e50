//! Harness for the operator suites: a running testbed (from `TESTBED_DIR`), the
//! operator binary started per suite, a namespace per test, and independent
//! judges (`redis-cli --cluster check`, the Python `valkey` cluster client).
//!
//! It deliberately knows nothing of the operator's Rust types: it reads the
//! cluster through kubectl JSON, as a user would.

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Where everything the suites need lives.
#[derive(Debug, Clone)]
pub struct Env {
    pub root: PathBuf,
    pub testbed_dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub operator_bin: PathBuf,
    pub testbed_bin: PathBuf,
    pub kubectl: PathBuf,
    pub python: PathBuf,
}

fn cache_dir() -> PathBuf {
    std::env::var_os("VALKEY_RS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/valkey-rs")
        })
}

impl Env {
    /// The environment `scripts/e2e.sh` sets up, or `None` (the suite is then
    /// skipped with a message) when no testbed was given.
    pub fn from_env() -> Option<Env> {
        let testbed_dir = PathBuf::from(std::env::var_os("TESTBED_DIR")?);
        let root = std::env::var_os("VALKEY_RS_ROOT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."));
        let mut env = Env::for_testbed(&root, &testbed_dir);
        if let Some(k) = std::env::var_os("KUBECONFIG") {
            env.kubeconfig = PathBuf::from(k);
        }
        if let Some(b) = std::env::var_os("OPERATOR_BIN") {
            env.operator_bin = PathBuf::from(b);
        }
        if let Some(b) = std::env::var_os("TESTBED_BIN") {
            env.testbed_bin = PathBuf::from(b);
        }
        Some(env)
    }

    /// The environment for the testbed in `testbed_dir`, with the binaries of
    /// the release build under `root`.
    pub fn for_testbed(root: &Path, testbed_dir: &Path) -> Env {
        let cache = cache_dir();
        Env {
            operator_bin: root.join("target/release/valkey-operator"),
            testbed_bin: root.join("target/release/testbed"),
            kubectl: cache.join("bin/kube-v1.36.3/kubectl"),
            python: cache.join("venv/bin/python"),
            root: root.to_path_buf(),
            testbed_dir: testbed_dir.to_path_buf(),
            kubeconfig: testbed_dir.join("kubeconfig"),
        }
    }

    /// `Env::from_env()`, or prints why the suite is skipped.
    pub fn or_skip(suite: &str) -> Option<Env> {
        let env = Env::from_env();
        if env.is_none() {
            eprintln!("{suite}: skipped: TESTBED_DIR is not set (run it through `make e2e`)");
        }
        env
    }

    pub fn kubectl_cmd(&self) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    /// Runs kubectl; fails with its stderr when it exits non-zero.
    pub fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = self
            .kubectl_cmd()
            .args(args)
            .output()
            .with_context(|| format!("running kubectl {args:?}"))?;
        ok_stdout(&format!("kubectl {}", args.join(" ")), out)
    }

    /// Runs kubectl with `input` on stdin.
    pub fn kubectl_stdin(&self, args: &[&str], input: &str) -> Result<String> {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawning kubectl")?;
        child
            .stdin
            .take()
            .ok_or_else(|| anyhow!("kubectl stdin"))?
            .write_all(input.as_bytes())?;
        let out = child.wait_with_output()?;
        ok_stdout(&format!("kubectl {}", args.join(" ")), out)
    }

    pub fn kubectl_json(&self, args: &[&str]) -> Result<Value> {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl(&all)?;
        serde_json::from_str(&text).context("parsing kubectl JSON")
    }

    /// Installs (or updates) the committed CRD and waits until it is served.
    pub fn install_crd(&self) -> Result<()> {
        let crd = self.root.join("deploy/crd/valkeycluster.yaml");
        let crd = crd.to_string_lossy();
        self.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &crd])?;
        self.kubectl(&[
            "wait",
            "--for=condition=Established",
            "crd/valkeyclusters.valkey.rs",
            "--timeout=60s",
        ])?;
        Ok(())
    }

    /// Starts `valkey-operator run` against the testbed; it stops when the
    /// returned guard drops. Its log goes to `TESTBED_DIR/logs/operator-<name>.log`.
    pub fn start_operator(&self, name: &str) -> Result<Operator> {
        let logs = self.testbed_dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let log_path = logs.join(format!("operator-{name}.log"));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(&self.operator_bin)
            .args(["run", "--no-leader-election"])
            .env("KUBECONFIG", &self.kubeconfig)
            .env("RUST_LOG", "info,operator=debug,valkey=debug")
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.operator_bin.display()))?;
        Ok(Operator {
            child: Some(child),
            log: log_path,
        })
    }

    /// A fresh namespace, deleted when the guard drops.
    pub fn namespace(&self, prefix: &str) -> Result<Namespace> {
        let name = format!("{prefix}-{}", std::process::id() % 100_000);
        let _ = self.kubectl(&["delete", "namespace", &name, "--wait=true", "--timeout=60s"]);
        self.kubectl(&["create", "namespace", &name])?;
        // Pods are refused until the controller-manager made the default ServiceAccount.
        wait_until(Duration::from_secs(30), Duration::from_millis(250), || {
            Ok(self
                .kubectl(&["get", "serviceaccount", "default", "-n", &name])
                .is_ok())
        })?;
        Ok(Namespace {
            env: self.clone(),
            name,
        })
    }

    /// Applies a manifest in `ns`.
    pub fn apply(&self, ns: &str, yaml: &str) -> Result<()> {
        self.kubectl_stdin(&["apply", "-n", ns, "-f", "-"], yaml)?;
        Ok(())
    }

    /// The ValkeyCluster object as JSON.
    pub fn cluster(&self, ns: &str, name: &str) -> Result<Value> {
        self.kubectl_json(&["get", "valkeycluster", name, "-n", ns])
    }

    /// Waits until condition `cond` of the cluster has `status`, and the
    /// status reflects the latest generation.
    pub fn wait_condition(
        &self,
        ns: &str,
        name: &str,
        cond: &str,
        status: &str,
        timeout: Duration,
    ) -> Result<Value> {
        let mut last = Value::Null;
        let res = wait_until(timeout, Duration::from_millis(500), || {
            let Ok(obj) = self.cluster(ns, name) else {
                return Ok(false);
            };
            let done = condition_status(&obj, cond).as_deref() == Some(status)
                && obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
            last = obj;
            Ok(done)
        });
        match res {
            Ok(()) => Ok(last),
            Err(_) => bail!(
                "valkeycluster {ns}/{name}: condition {cond} did not become {status} in {timeout:?}; last status: {}",
                serde_json::to_string_pretty(&last["status"]).unwrap_or_default()
            ),
        }
    }

    /// The member pods of a cluster, sorted by (shard, member).
    pub fn members(&self, ns: &str, cluster: &str) -> Result<Vec<MemberPod>> {
        let selector = format!("valkey.rs/cluster={cluster}");
        let pods = self.kubectl_json(&["get", "pods", "-n", ns, "-l", &selector])?;
        let mut out = Vec::new();
        for pod in pods["items"].as_array().into_iter().flatten() {
            let labels = &pod["metadata"]["labels"];
            let num = |k: &str| labels[k].as_str().and_then(|s| s.parse::<u32>().ok());
            let (Some(shard), Some(member)) = (num("valkey.rs/shard"), num("valkey.rs/member"))
            else {
                continue;
            };
            let ready = pod["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            out.push(MemberPod {
                name: str_of(&pod["metadata"]["name"]),
                shard,
                member,
                ip: str_of(&pod["status"]["podIP"]),
                node: str_of(&pod["spec"]["nodeName"]),
                role: str_of(&labels["valkey.rs/role"]),
                phase: str_of(&pod["status"]["phase"]),
                deleting: !pod["metadata"]["deletionTimestamp"].is_null(),
                ready,
            });
        }
        out.sort_by_key(|m| (m.shard, m.member));
        Ok(out)
    }

    /// The password clients use, from the `<cluster>-auth` Secret.
    pub fn password(&self, ns: &str, cluster: &str) -> Result<String> {
        let secret = format!("{cluster}-auth");
        let b64 = self.kubectl(&[
            "get",
            "secret",
            &secret,
            "-n",
            ns,
            "-o",
            "jsonpath={.data.password}",
        ])?;
        let out = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn();
        let mut child = out.context("base64")?;
        {
            use std::io::Write;
            child
                .stdin
                .take()
                .ok_or_else(|| anyhow!("base64 stdin"))?
                .write_all(b64.trim().as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    }

    /// `redis-cli --cluster check IP:6379`: the independent judge of a healthy
    /// cluster (all slots covered, every node agrees). Returns its output.
    pub fn cluster_check(&self, ip: &str, password: &str) -> Result<String> {
        let addr = format!("{ip}:6379");
        let mut cmd = Command::new("redis-cli");
        if !password.is_empty() {
            cmd.args(["-a", password, "--no-auth-warning"]);
        }
        let out = cmd.args(["--cluster", "check", &addr]).output()?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() || text.contains("[ERR]") {
            bail!("redis-cli --cluster check {addr} failed:\n{text}");
        }
        Ok(text)
    }

    /// Waits until `--cluster check` passes on `ip`.
    pub fn wait_cluster_check(&self, ip: &str, password: &str, timeout: Duration) -> Result<()> {
        let mut last = String::new();
        wait_until(timeout, Duration::from_secs(1), || {
            match self.cluster_check(ip, password) {
                Ok(_) => Ok(true),
                Err(e) => {
                    last = e.to_string();
                    Ok(false)
                }
            }
        })
        .map_err(|_| anyhow!("cluster check never passed in {timeout:?}: {last}"))
    }

    /// Runs tests/e2e/py/judge.py with the Python `valkey` cluster client.
    pub fn judge(&self, hosts: &[&str], password: &str, args: &[&str]) -> Result<Value> {
        let mut cmd = self.judge_cmd(hosts, password, args);
        let out = cmd.output().context("running judge.py")?;
        let text = ok_stdout("judge.py", out)?;
        let line = text.lines().last().unwrap_or("{}");
        serde_json::from_str(line).with_context(|| format!("judge output: {text}"))
    }

    /// The judge as a command, to run it in the background (load).
    pub fn judge_cmd(&self, hosts: &[&str], password: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(self.root.join("tests/e2e/py/judge.py"));
        for h in hosts {
            cmd.args(["--host", h]);
        }
        cmd.args(["--password", password]).args(args);
        cmd
    }

    /// Runs a `testbed` verb (e.g. `["node", "fail", "node-1a-1"]`) on this testbed.
    pub fn testbed(&self, args: &[&str]) -> Result<String> {
        let dir = self.testbed_dir.to_string_lossy().to_string();
        let out = Command::new(&self.testbed_bin)
            .args(args)
            .args(["--dir", &dir])
            .output()?;
        ok_stdout(&format!("testbed {}", args.join(" ")), out)
    }
}

/// One member pod as kubectl shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberPod {
    pub name: String,
    pub shard: u32,
    pub member: u32,
    pub ip: String,
    pub node: String,
    pub role: String,
    pub phase: String,
    pub deleting: bool,
    pub ready: bool,
}

/// The running operator; killed on drop.
pub struct Operator {
    child: Option<Child>,
    pub log: PathBuf,
}

impl Operator {
    /// Stops the operator (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Whether the process is still alive.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The last lines of its log, for failure messages.
    pub fn tail(&self, lines: usize) -> String {
        tail_file(&self.log, lines)
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A namespace deleted on drop (without waiting: the next test need not wait).
pub struct Namespace {
    env: Env,
    pub name: String,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if std::env::var_os("E2E_KEEP").is_none() {
            let _ = self
                .env
                .kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
        }
    }
}

/// The status of condition `cond` of an object, if present.
pub fn condition_status(obj: &Value, cond: &str) -> Option<String> {
    condition(obj, cond).and_then(|c| c["status"].as_str().map(str::to_string))
}

/// Condition `cond` of an object, if present.
pub fn condition<'a>(obj: &'a Value, cond: &str) -> Option<&'a Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == cond)
}

/// Polls `f` every `every` until it returns true or `timeout` passes.
pub fn wait_until(
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if f()? {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("timed out after {timeout:?}");
        }
        std::thread::sleep(every);
    }
}

fn ok_stdout(what: &str, out: Output) -> Result<String> {
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).to_string())
    } else {
        bail!(
            "{what} exited with {}: {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        )
    }
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

/// The last `lines` lines of a file.
pub fn tail_file(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
