// Over 600 lines: the e2e harness's view of one cluster: one helper per thing a suite asks of it.
//! Harness for the operator suites: a running testbed (from `TESTBED_DIR`), the
//! operator binary started per suite, a namespace per test, and independent
//! judges (`redis-cli --cluster check`, the Python `valkey` cluster client).
//!
//! It deliberately knows nothing of the operator's Rust types: it reads the
//! cluster through kubectl JSON, as a user would.

use anyhow::{Context, Result, anyhow, bail, ensure};
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
    /// The CA bundle (PEM file) to trust when the members speak TLS: set by
    /// a suite of TLS clusters ([`Env::use_tls`]); `redis-cli` and the judge
    /// then connect with TLS.
    pub tls_ca: std::sync::Arc<std::sync::Mutex<Option<PathBuf>>>,
    /// Run the judge from `testbed outside` (a client outside the cluster,
    /// which reaches node and load-balancer addresses only): set by
    /// [`Env::judge_outside`].
    pub outside: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Run the judge with one server's client (a replication set's Service),
    /// not the cluster client: [`Env::judge_standalone`].
    pub standalone: std::sync::Arc<std::sync::atomic::AtomicBool>,
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
        if let Some(b) = std::env::var_os("TESTBED_BIN") {
            env.testbed_bin = PathBuf::from(b);
        }
        Some(env)
    }

    /// The environment for the testbed in `testbed_dir`, with the binaries of
    /// the release build under `root` (the operator's: `OPERATOR_BIN` when set,
    /// e.g. a build with the `heap-profile` feature).
    pub fn for_testbed(root: &Path, testbed_dir: &Path) -> Env {
        let cache = cache_dir();
        Env {
            operator_bin: std::env::var_os("OPERATOR_BIN").map_or_else(
                || root.join("target/release/valkey-operator"),
                PathBuf::from,
            ),
            testbed_bin: root.join("target/release/testbed"),
            kubectl: cache.join("bin/kube-v1.36.3/kubectl"),
            python: cache.join("venv/bin/python"),
            root: root.to_path_buf(),
            testbed_dir: testbed_dir.to_path_buf(),
            kubeconfig: testbed_dir.join("kubeconfig"),
            tls_ca: Default::default(),
            outside: Default::default(),
            standalone: Default::default(),
        }
    }

    /// `Env::from_env()`. Without a testbed the suite fails, so that
    /// `cargo test --workspace` never counts a suite that did not run as
    /// passed; `E2E_SKIP=1` skips it instead (printed, and `None`).
    #[allow(clippy::panic)] // a test harness: failing the test is its job
    pub fn or_skip(suite: &str) -> Option<Env> {
        let env = Env::from_env();
        if env.is_none() {
            if std::env::var_os("E2E_SKIP").is_some_and(|v| v == "1") {
                eprintln!("{suite}: skipped (E2E_SKIP=1): TESTBED_DIR is not set");
            } else {
                panic!(
                    "{suite}: needs a testbed: TESTBED_DIR is not set (run it through `make e2e` \
                     or scripts/e2e.sh; E2E_SKIP=1 skips the e2e suites)"
                );
            }
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

    /// Installs (or updates) the committed CRDs (ValkeyCluster, ValkeyBackup)
    /// and waits until they are served.
    pub fn install_crd(&self) -> Result<()> {
        for (file, name) in [
            ("valkeycluster.yaml", "crd/valkeyclusters.valkey.rs"),
            ("valkeybackup.yaml", "crd/valkeybackups.valkey.rs"),
            (
                "valkeybackupschedule.yaml",
                "crd/valkeybackupschedules.valkey.rs",
            ),
            ("valkeyreplication.yaml", "crd/valkeyreplications.valkey.rs"),
        ] {
            let crd = self.root.join("deploy/crd").join(file);
            let crd = crd.to_string_lossy();
            self.kubectl(&["apply", "--server-side", "--force-conflicts", "-f", &crd])?;
            // Polled rather than `kubectl wait`, which fails at once while a
            // freshly created CRD has no status.conditions yet (a large CRD
            // stays so for a moment).
            wait_until(Duration::from_secs(60), Duration::from_millis(250), || {
                let crd = self.kubectl_json(&["get", name])?;
                Ok(crd["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Established" && c["status"] == "True"))
            })
            .with_context(|| format!("{name} is not Established"))?;
        }
        Ok(())
    }

    /// Starts `valkey-operator run` against the testbed; it stops when the
    /// returned guard drops. Its log goes to `TESTBED_DIR/logs/operator-<name>.log`.
    pub fn start_operator(&self, name: &str) -> Result<Operator> {
        self.start_operator_with(name, &["--http-addr", "127.0.0.1:0"])
    }

    /// [`Env::start_operator`] with extra `run` flags.
    pub fn start_operator_with(&self, name: &str, extra: &[&str]) -> Result<Operator> {
        let mut args = vec!["run", "--no-leader-election"];
        args.extend_from_slice(extra);
        self.spawn_operator(name, &args, &[])
    }

    /// Starts `valkey-operator ARGS...` as given (no flag added), with
    /// KUBECONFIG set to the chart's ServiceAccount under the chart's RBAC
    /// ([`Env::operator_kubeconfig`]: every request goes through the rules
    /// users install) and then the extra environment `envs` (which may
    /// override it). Its stdout and stderr go to
    /// `TESTBED_DIR/logs/operator-<name>.log`; it stops when the guard drops,
    /// and the guard fails the test if RBAC refused the operator anything.
    pub fn spawn_operator(
        &self,
        name: &str,
        args: &[&str],
        envs: &[(&str, &str)],
    ) -> Result<Operator> {
        let logs = self.testbed_dir.join("logs");
        std::fs::create_dir_all(&logs)?;
        let log_path = logs.join(format!("operator-{name}.log"));
        let log = std::fs::File::create(&log_path)?;
        let kubeconfig = self.operator_kubeconfig()?;
        let child = Command::new(&self.operator_bin)
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,operator=debug,valkey=debug")
            .envs(envs.iter().copied())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.operator_bin.display()))?;
        Ok(Operator {
            child: Some(child),
            log: log_path,
        })
    }

    /// `testbed s3-info`: the object store's endpoint, accessKey, secretKey
    /// and bucket.
    pub fn s3_info(&self) -> Result<Value> {
        let out = Command::new(&self.testbed_bin)
            .arg("s3-info")
            .arg("--dir")
            .arg(&self.testbed_dir)
            .output()
            .context("testbed s3-info")?;
        ensure!(out.status.success(), "testbed s3-info: {out:?}");
        serde_json::from_slice(&out.stdout).context("s3-info JSON")
    }

    /// A fresh namespace, deleted when the guard drops.
    pub fn namespace(&self, prefix: &str) -> Result<Namespace> {
        self.make_namespace(prefix, true)
    }

    /// [`Env::namespace`] without Pod Security enforcement: for the testbed's
    /// own suites, whose pods are plain test pods (a root busybox, a
    /// hand-written StatefulSet), not the operator's.
    pub fn namespace_for_any_pod(&self, prefix: &str) -> Result<Namespace> {
        self.make_namespace(prefix, false)
    }

    fn make_namespace(&self, prefix: &str, restricted: bool) -> Result<Namespace> {
        let name = format!("{prefix}-{}", std::process::id() % 100_000);
        let _ = self.kubectl(&["delete", "namespace", &name, "--wait=true", "--timeout=60s"]);
        self.kubectl(&["create", "namespace", &name])?;
        // The API server's own Pod Security admission judges every pod the
        // suite makes (member pods, backup Jobs, anything a test adds):
        // one beyond `restricted` is refused, and the suite sees it fail.
        if restricted {
            self.kubectl(&[
                "label",
                "namespace",
                &name,
                "pod-security.kubernetes.io/enforce=restricted",
                "pod-security.kubernetes.io/enforce-version=latest",
            ])?;
        }
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

    /// The password clients use: from the Secret `spec.auth.passwordSecret`
    /// names, else from the generated `<cluster>-auth` Secret (key `password`).
    pub fn password(&self, ns: &str, cluster: &str) -> Result<String> {
        let given = self
            .cluster(ns, cluster)
            .ok()
            .map(|c| c["spec"]["auth"]["passwordSecret"].clone())
            .filter(|s| s["name"].is_string());
        let (secret, key) = match given {
            Some(s) => (
                str_of(&s["name"]),
                s["key"].as_str().unwrap_or("password").to_string(),
            ),
            None => (format!("{cluster}-auth"), "password".to_string()),
        };
        self.secret_text(ns, &secret, &key)
    }

    /// The text of `key` in Secret `secret` (base64-decoded).
    pub fn secret_text(&self, ns: &str, secret: &str, key: &str) -> Result<String> {
        let b64 = self.kubectl(&[
            "get",
            "secret",
            secret,
            "-n",
            ns,
            "-o",
            &format!("jsonpath={{.data.{}}}", key.replace('.', "\\.")),
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

    /// From now on, connect to members with TLS, trusting the CAs of the PEM
    /// file `ca` (`None`: plain TCP again).
    pub fn use_tls(&self, ca: Option<PathBuf>) {
        *self.tls_ca.lock().unwrap_or_else(|e| e.into_inner()) = ca;
    }

    /// The CA file of [`Env::use_tls`], if any.
    pub fn tls_ca_file(&self) -> Option<PathBuf> {
        self.tls_ca
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// `redis-cli` with the TLS flags [`Env::use_tls`] asks for.
    pub fn redis_cli(&self) -> Command {
        let mut cmd = Command::new("redis-cli");
        if let Some(ca) = self.tls_ca_file() {
            cmd.arg("--tls").arg("--cacert").arg(ca);
        }
        cmd
    }

    /// `redis-cli --cluster check IP:6379`: the independent judge of a healthy
    /// cluster (all slots covered, every node agrees). Returns its output.
    pub fn cluster_check(&self, ip: &str, password: &str) -> Result<String> {
        let addr = format!("{ip}:6379");
        let mut cmd = self.redis_cli();
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

    /// From now on, run the judge outside the cluster (`testbed outside`),
    /// or on the host again.
    pub fn judge_outside(&self, outside: bool) {
        self.outside
            .store(outside, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on, run the judge with one server's client (`--standalone`:
    /// a replication set), or the cluster client again.
    pub fn judge_standalone(&self, standalone: bool) {
        self.standalone
            .store(standalone, std::sync::atomic::Ordering::SeqCst);
    }

    /// The judge as a command, to run it in the background (load).
    pub fn judge_cmd(&self, hosts: &[&str], password: &str, args: &[&str]) -> Command {
        let mut cmd = if self.outside.load(std::sync::atomic::Ordering::SeqCst) {
            let mut c = Command::new(&self.testbed_bin);
            c.arg("--dir")
                .arg(&self.testbed_dir)
                .args(["outside", "--"])
                .arg(&self.python)
                .env_remove("TESTBED_DIR");
            c
        } else {
            Command::new(&self.python)
        };
        cmd.arg(self.root.join("tests/e2e/py/judge.py"));
        for h in hosts {
            cmd.args(["--host", h]);
        }
        cmd.args(["--password", password]);
        if self.standalone.load(std::sync::atomic::Ordering::SeqCst) {
            cmd.arg("--standalone");
        }
        if let Some(ca) = self.tls_ca_file() {
            cmd.arg("--tls-ca").arg(ca);
            if self.outside.load(std::sync::atomic::Ordering::SeqCst) {
                // Outside, clients are sent to external addresses, which
                // the members' certificate must name.
                cmd.arg("--tls-check-hostname");
            }
        }
        cmd.args(args);
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
    /// The operator's process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Stops the operator (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) {
        let _ = self.stop_with_code();
    }

    /// Kills the operator at once (SIGKILL: no lease release, no cleanup),
    /// as a crash or an OOM kill would.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the operator (SIGTERM, then SIGKILL after 10 s) and returns its
    /// exit code (`None` when it had to be killed or was not running).
    pub fn stop_with_code(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
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
    /// Stops the operator; then a request RBAC refused (in its whole log)
    /// fails the test, unless the test is failing already.
    #[allow(clippy::panic)] // a test harness: failing the test is its job
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            return;
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let refused = crate::rbac::forbidden_lines(&log);
        if !refused.is_empty() {
            panic!(
                "the chart's RBAC refused the operator {} request(s) ({}):\n{}",
                refused.len(),
                self.log.display(),
                refused
                    .iter()
                    .take(5)
                    .copied()
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
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

// ---------------------------------------------------------------------------
// Helpers of the day-2 suites (scale, rolling, heal, delete): Valkey's own view
// of the cluster, pod identities, background write load, diagnostics.

/// One line of `CLUSTER NODES`, as the judge reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLine {
    pub id: String,
    /// The announced IP (the part before the last `:` of `ip:port@cport`).
    pub ip: String,
    pub flags: Vec<String>,
    /// For a replica: its primary's node id.
    pub primary_id: Option<String>,
    /// The link state column says `connected`.
    pub connected: bool,
    /// Number of slots it serves (single slots and ranges; the `[slot->-id]`
    /// importing/migrating markers do not count).
    pub slots: u32,
}

impl NodeLine {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }

    pub fn is_primary(&self) -> bool {
        self.has_flag("master")
    }

    /// Flagged failed, suspected, handshaking or without an address.
    pub fn unhealthy(&self) -> bool {
        ["fail", "fail?", "handshake", "noaddr"]
            .iter()
            .any(|f| self.has_flag(f))
    }
}

/// Parses the text of `CLUSTER NODES` (lines that do not look like node lines
/// are skipped).
pub fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 8 || cols[0].len() != 40 {
            continue;
        }
        let addr = cols[1].split(['@', ',']).next().unwrap_or_default();
        let ip = addr
            .rsplit_once(':')
            .map(|(ip, _)| ip)
            .unwrap_or(addr)
            .to_string();
        let mut slots = 0u32;
        for s in &cols[8..] {
            if s.starts_with('[') {
                continue;
            }
            match s.split_once('-') {
                Some((a, b)) => {
                    if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                        slots += b.saturating_sub(a) + 1;
                    }
                }
                None => {
                    if s.parse::<u32>().is_ok() {
                        slots += 1;
                    }
                }
            }
        }
        out.push(NodeLine {
            id: cols[0].to_string(),
            ip,
            flags: cols[2].split(',').map(str::to_string).collect(),
            primary_id: (cols[3] != "-").then(|| cols[3].to_string()),
            connected: cols[7] == "connected",
            slots,
        });
    }
    out
}

/// A pod's identity: a re-created pod has a new UID, a restarted container a
/// higher restart count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    pub uid: String,
    pub restarts: u64,
    pub ip: String,
}

/// One Event about an object, as `kubectl get events` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    pub type_: String,
    pub reason: String,
    pub message: String,
}

impl Env {
    /// Runs `redis-cli -h IP -p 6379 [-a P] ARGS...` and returns its output.
    /// Fails when redis-cli exits non-zero or the reply is an error (redis-cli
    /// exits 0 on error replies, printing them raw).
    pub fn valkey_cli(&self, ip: &str, password: &str, args: &[&str]) -> Result<String> {
        let mut cmd = self.redis_cli();
        cmd.args(["-h", ip, "-p", "6379"]);
        if !password.is_empty() {
            cmd.args(["-a", password, "--no-auth-warning"]);
        }
        let out = cmd.args(args).output().context("running redis-cli")?;
        let what = format!("redis-cli -h {ip} {}", args.join(" "));
        let text = ok_stdout(&what, out)?;
        let first = text.lines().next().unwrap_or_default();
        let error_prefixes = [
            "ERR",
            "NOAUTH",
            "WRONGPASS",
            "NOPERM",
            "LOADING",
            "CLUSTERDOWN",
            "MOVED",
            "ASK ",
            "READONLY",
            "MASTERDOWN",
            "BUSY",
            "Could not connect",
            "Error:",
        ];
        if error_prefixes.iter().any(|p| first.starts_with(p)) {
            bail!("{what}: {}", text.trim());
        }
        Ok(text)
    }

    /// `CLUSTER NODES` as the member at `ip` sees it.
    pub fn cluster_nodes(&self, ip: &str, password: &str) -> Result<Vec<NodeLine>> {
        let text = self.valkey_cli(ip, password, &["cluster", "nodes"])?;
        let nodes = parse_cluster_nodes(&text);
        if nodes.is_empty() {
            bail!("CLUSTER NODES on {ip} gave no node line: {text}");
        }
        Ok(nodes)
    }

    /// Merge-patches a ValkeyCluster (`kubectl patch --type merge -p PATCH`).
    pub fn patch_cluster(&self, ns: &str, name: &str, patch: &str) -> Result<()> {
        self.kubectl(&[
            "patch",
            "valkeycluster",
            name,
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            patch,
        ])?;
        Ok(())
    }

    /// Every pod of the cluster by name: UID, restart count (summed over its
    /// containers) and IP.
    pub fn pod_identities(
        &self,
        ns: &str,
        cluster: &str,
    ) -> Result<std::collections::BTreeMap<String, PodIdentity>> {
        let selector = format!("valkey.rs/cluster={cluster}");
        let pods = self.kubectl_json(&["get", "pods", "-n", ns, "-l", &selector])?;
        let mut out = std::collections::BTreeMap::new();
        for pod in pods["items"].as_array().into_iter().flatten() {
            let restarts = pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| c["restartCount"].as_u64().unwrap_or(0))
                .sum();
            out.insert(
                str_of(&pod["metadata"]["name"]),
                PodIdentity {
                    uid: str_of(&pod["metadata"]["uid"]),
                    restarts,
                    ip: str_of(&pod["status"]["podIP"]),
                },
            );
        }
        Ok(out)
    }

    /// The Events about object `kind/name` in `ns`, oldest first.
    pub fn object_events(&self, ns: &str, kind: &str, name: &str) -> Result<Vec<ObjectEvent>> {
        let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
        let list =
            self.kubectl_json(&["get", "events", "-n", ns, "--field-selector", &selector])?;
        let mut items: Vec<&Value> = list["items"].as_array().into_iter().flatten().collect();
        let when = |e: &Value| {
            [
                &e["eventTime"],
                &e["lastTimestamp"],
                &e["metadata"]["creationTimestamp"],
            ]
            .iter()
            .find_map(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
        };
        items.sort_by_key(|e| when(e));
        Ok(items
            .into_iter()
            .map(|e| ObjectEvent {
                type_: str_of(&e["type"]),
                reason: str_of(&e["reason"]),
                message: str_of(&e["message"]),
            })
            .collect())
    }

    /// What a person needs when an operator suite fails: the cluster's status,
    /// its pods, its Events, Valkey's CLUSTER NODES from one member and the
    /// operator's log tail. Never fails (what cannot be read says so).
    pub fn diagnostics(&self, ns: &str, name: &str, operator: &Operator) -> String {
        let mut out = String::new();
        match self.cluster(ns, name) {
            Ok(obj) => {
                out.push_str(&format!(
                    "--- valkeycluster {ns}/{name} (generation {}) status:\n{}\n",
                    obj["metadata"]["generation"],
                    serde_json::to_string_pretty(&obj["status"]).unwrap_or_default()
                ));
            }
            Err(e) => out.push_str(&format!("--- valkeycluster {ns}/{name}: {e}\n")),
        }
        let selector = format!("valkey.rs/cluster={name}");
        match self.kubectl(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &selector,
            "-o",
            "wide",
            "-L",
            "valkey.rs/role",
        ]) {
            Ok(text) => out.push_str(&format!("--- pods:\n{text}")),
            Err(e) => out.push_str(&format!("--- pods: {e}\n")),
        }
        match self.object_events(ns, "ValkeyCluster", name) {
            Ok(events) => {
                out.push_str("--- events (last 25):\n");
                for e in &events[events.len().saturating_sub(25)..] {
                    out.push_str(&format!("{} {}: {}\n", e.type_, e.reason, e.message));
                }
            }
            Err(e) => out.push_str(&format!("--- events: {e}\n")),
        }
        let password = self.password(ns, name).unwrap_or_default();
        let ips: Vec<String> = self
            .members(ns, name)
            .unwrap_or_default()
            .into_iter()
            .filter(|m| !m.ip.is_empty())
            .map(|m| m.ip)
            .collect();
        for ip in &ips {
            if let Ok(text) = self.valkey_cli(ip, &password, &["cluster", "nodes"]) {
                out.push_str(&format!("--- CLUSTER NODES on {ip}:\n{text}"));
                break;
            }
        }
        out.push_str(&format!(
            "--- operator log ({}), last 80 lines:\n{}\n",
            operator.log.display(),
            operator.tail(80)
        ));
        out
    }

    /// The logs of the containers of the pods in `ns` whose names start with
    /// `pod_prefix`, concatenated (the testbed keeps each container's log as
    /// `logs/pods/<ns>_<pod>_<container>.log`), e.g. a Job's pods.
    pub fn pod_logs(&self, ns: &str, pod_prefix: &str) -> String {
        let prefix = format!("{ns}_{pod_prefix}");
        std::fs::read_dir(self.testbed_dir.join("logs/pods"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .filter_map(|e| std::fs::read_to_string(e.path()).ok())
            .collect()
    }

    /// A fresh directory for a suite's files (judge key lists and output),
    /// under `TESTBED_DIR/work/`, kept after the run for post-mortems.
    pub fn work_dir(&self, suite: &str) -> Result<PathBuf> {
        let dir = self
            .testbed_dir
            .join("work")
            .join(format!("{suite}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Starts `judge.py load` in the background, writing the acknowledged keys
    /// to `DIR/NAME.keys` (prefix `NAME`); `extra` are further load options
    /// (e.g. `--wait-replicas 1`). Stop it with [`Load::finish`].
    pub fn start_load(
        &self,
        hosts: &[&str],
        password: &str,
        dir: &Path,
        name: &str,
        extra: &[&str],
    ) -> Result<Load> {
        let keys = dir.join(format!("{name}.keys"));
        let stop_file = dir.join(format!("{name}.stop"));
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.err"));
        let _ = std::fs::remove_file(&stop_file);
        let keys_s = keys.to_string_lossy().to_string();
        let stop_s = stop_file.to_string_lossy().to_string();
        let mut args = vec![
            "load",
            "--out",
            &keys_s,
            "--stop-file",
            &stop_s,
            "--seconds",
            "3600",
            "--prefix",
            name,
        ];
        args.extend_from_slice(extra);
        let child = self
            .judge_cmd(hosts, password, &args)
            .stdout(std::fs::File::create(&stdout)?)
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .context("starting judge.py load")?;
        Ok(Load {
            child: Some(child),
            keys,
            stop_file,
            stdout,
            stderr,
        })
    }

    /// The pid of the valkey-server process that serves `ip`: the one whose
    /// network namespace holds that address.
    pub fn valkey_pid(&self, ip: &str) -> Result<u32> {
        let needle = format!(" {ip}/");
        let mut found = Vec::new();
        for entry in std::fs::read_dir("/proc")? {
            let entry = entry?;
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() != "valkey-server" {
                continue;
            }
            let out = Command::new("nsenter")
                .arg(format!("--net=/proc/{pid}/ns/net"))
                .args(["ip", "-4", "-o", "addr", "show"])
                .output();
            let Ok(out) = out else { continue };
            if String::from_utf8_lossy(&out.stdout).contains(&needle) {
                found.push(pid);
            }
        }
        match found.as_slice() {
            [pid] => Ok(*pid),
            [] => bail!("no valkey-server process has the address {ip}"),
            many => bail!("several valkey-server processes have the address {ip}: {many:?}"),
        }
    }
}

/// A `judge.py load` running in the background; killed on drop.
pub struct Load {
    child: Option<Child>,
    /// The acknowledged keys, one a line (`judge.py verify --in` reads it).
    pub keys: PathBuf,
    stop_file: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Load {
    /// Whether the judge still runs (it exits early when it cannot connect).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// How many keys were acknowledged so far.
    pub fn acked_so_far(&self) -> usize {
        std::fs::read_to_string(&self.keys)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    /// Stops the load through its stop file and returns its summary (writes,
    /// acked, errors, longest_gap_ms). Kills it when it does not stop in `timeout`.
    pub fn finish(&mut self, timeout: Duration) -> Result<Value> {
        std::fs::write(&self.stop_file, b"stop")?;
        let Some(mut child) = self.child.take() else {
            bail!("judge load already finished");
        };
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "judge load did not stop within {timeout:?}; stderr:\n{}",
                    tail_file(&self.stderr, 20)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let text = std::fs::read_to_string(&self.stdout).unwrap_or_default();
        let line = text.lines().last().unwrap_or_default();
        serde_json::from_str(line).map_err(|_| {
            anyhow!(
                "judge load exited with {status} without a summary; stdout: {text}; stderr:\n{}",
                tail_file(&self.stderr, 20)
            )
        })
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What [`Env::check_shape`] found.
#[derive(Debug, Clone)]
pub struct Shape {
    pub members: Vec<MemberPod>,
    /// CLUSTER NODES of the first member.
    pub nodes: Vec<NodeLine>,
    /// Slots per shard, by shard index.
    pub slots: Vec<u32>,
}

impl Env {
    /// Checks that the cluster is exactly `shards` x (1 + `replicas`), as
    /// Kubernetes and Valkey both see it: every member pod Ready with the
    /// contract name (`<cluster>-<shard>-<member>-<ordinal>`) and one
    /// `primary` role label per shard; every member's
    /// CLUSTER NODES lists exactly the member pods (no stale or failed node),
    /// each shard's labelled primary is a Valkey primary with slots and its
    /// other members replicate it; the 16384 slots are spread over the shards
    /// within one slot of each other; `redis-cli --cluster check` passes on
    /// every member. Returns what it saw.
    #[expect(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
    pub fn check_shape(&self, ns: &str, name: &str, shards: u32, replicas: u32) -> Result<Shape> {
        let total = shards * (replicas + 1);
        let members = self.members(ns, name)?;
        let listing = || format!("{members:#?}");
        if members.len() as u32 != total {
            bail!(
                "{} member pods, want {total} ({shards} shards x {} members): {}",
                members.len(),
                replicas + 1,
                listing()
            );
        }
        for shard in 0..shards {
            for member in 0..=replicas {
                let Some(m) = members
                    .iter()
                    .find(|m| m.shard == shard && m.member == member)
                else {
                    bail!("no pod for shard {shard} member {member}: {}", listing());
                };
                // `<cluster>-<shard>-<member>-<ordinal>`: a member that moved
                // runs under a later ordinal of its StatefulSet.
                let ordinal = m
                    .name
                    .strip_prefix(&format!("{name}-{shard}-{member}-"))
                    .and_then(|o| o.parse::<u32>().ok());
                if ordinal.is_none() {
                    bail!("pod of shard {shard} member {member} is named {}", m.name);
                }
                if !m.ready || m.deleting || m.ip.is_empty() {
                    bail!("pod {} is not Ready (or is being deleted): {m:?}", m.name);
                }
            }
            let labelled: Vec<&MemberPod> = members
                .iter()
                .filter(|m| m.shard == shard && m.role == "primary")
                .collect();
            if labelled.len() != 1 {
                bail!(
                    "shard {shard} has {} pods labelled valkey.rs/role=primary, want 1: {}",
                    labelled.len(),
                    listing()
                );
            }
            if let Some(m) = members
                .iter()
                .find(|m| m.shard == shard && m.role != "primary" && m.role != "replica")
            {
                bail!("pod {} has role label {:?}", m.name, m.role);
            }
        }
        let password = self.password(ns, name)?;
        let mut first_view = Vec::new();
        for m in &members {
            let nodes = self.cluster_nodes(&m.ip, &password)?;
            if nodes.len() as u32 != total {
                bail!(
                    "CLUSTER NODES on {} ({}) lists {} nodes, want {total}:\n{nodes:#?}",
                    m.name,
                    m.ip,
                    nodes.len()
                );
            }
            if let Some(bad) = nodes.iter().find(|n| n.unhealthy()) {
                bail!(
                    "CLUSTER NODES on {} ({}) flags {} ({}) {:?}",
                    m.name,
                    m.ip,
                    bad.id,
                    bad.ip,
                    bad.flags
                );
            }
            for other in &members {
                let n = nodes.iter().filter(|n| n.ip == other.ip).count();
                if n != 1 {
                    bail!(
                        "CLUSTER NODES on {} lists pod {} ({}) {n} times:\n{nodes:#?}",
                        m.name,
                        other.name,
                        other.ip
                    );
                }
            }
            if first_view.is_empty() {
                first_view = nodes;
            }
        }
        let by_ip = |ip: &str| first_view.iter().find(|n| n.ip == ip);
        let mut slots = Vec::new();
        for shard in 0..shards {
            let of_shard: Vec<&MemberPod> = members.iter().filter(|m| m.shard == shard).collect();
            let Some(primary) = of_shard.iter().find(|m| m.role == "primary") else {
                bail!("shard {shard}: no primary label");
            };
            let Some(p) = by_ip(&primary.ip) else {
                bail!(
                    "shard {shard}: primary {} not in CLUSTER NODES",
                    primary.name
                );
            };
            if !p.is_primary() || p.slots == 0 {
                bail!(
                    "shard {shard}: pod {} is labelled primary but Valkey says {:?} with {} slots",
                    primary.name,
                    p.flags,
                    p.slots
                );
            }
            slots.push(p.slots);
            for r in of_shard.iter().filter(|m| m.role == "replica") {
                let Some(n) = by_ip(&r.ip) else {
                    bail!("shard {shard}: replica {} not in CLUSTER NODES", r.name);
                };
                if n.is_primary() || n.primary_id.as_deref() != Some(p.id.as_str()) {
                    bail!(
                        "shard {shard}: pod {} should replicate {} ({}), Valkey says {:?} of {:?}",
                        r.name,
                        primary.name,
                        p.id,
                        n.flags,
                        n.primary_id
                    );
                }
            }
        }
        let served: u32 = first_view.iter().map(|n| n.slots).sum();
        let owners = first_view.iter().filter(|n| n.slots > 0).count() as u32;
        if served != 16384 || owners != shards {
            bail!("{served} slots served by {owners} primaries, want 16384 by {shards}: {slots:?}");
        }
        let (lo, hi) = (
            slots.iter().copied().min().unwrap_or(0),
            slots.iter().copied().max().unwrap_or(0),
        );
        if hi - lo > 1 {
            bail!("slots per shard not balanced within one slot: {slots:?}");
        }
        for m in &members {
            self.cluster_check(&m.ip, &password)
                .with_context(|| format!("on {}", m.name))?;
        }
        Ok(Shape {
            members,
            nodes: first_view,
            slots,
        })
    }
}

impl Env {
    /// Waits until the cluster has exactly `total` member pods, all Ready and
    /// none being deleted (pods of removed members have gone).
    pub fn wait_pods(&self, ns: &str, name: &str, total: usize, timeout: Duration) -> Result<()> {
        let mut last = Vec::new();
        wait_until(timeout, Duration::from_millis(500), || {
            last = self.members(ns, name)?;
            Ok(last.len() == total && last.iter().all(|m| m.ready && !m.deleting))
        })
        .map_err(|_| anyhow!("want {total} Ready member pods within {timeout:?}, have: {last:#?}"))
    }

    /// The IPs of the cluster's member pods that have one.
    pub fn member_ips(&self, ns: &str, name: &str) -> Result<Vec<String>> {
        Ok(self
            .members(ns, name)?
            .into_iter()
            .filter(|m| !m.ip.is_empty() && !m.deleting)
            .map(|m| m.ip)
            .collect())
    }

    /// `judge.py verify` of every key in `keys` through the members at `hosts`:
    /// fails naming the first missing keys unless every one reads back.
    pub fn verify_keys(&self, hosts: &[String], password: &str, keys: &Path) -> Result<Value> {
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        let keys_s = keys.to_string_lossy().to_string();
        let mut cmd = self.judge_cmd(&hosts, password, &["verify", "--in", &keys_s]);
        let out = cmd.output().context("running judge.py verify")?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let summary: Value = text
            .lines()
            .last()
            .and_then(|l| serde_json::from_str(l).ok())
            .ok_or_else(|| {
                anyhow!(
                    "judge verify {} gave no summary (exit {}): {text}{}",
                    keys.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
        if !out.status.success() || summary["missing"] != 0 {
            bail!("acknowledged keys lost ({}): {summary}", keys.display());
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_give_roles_primaries_health_and_slot_counts() {
        let text = "\
ca996b80cc9607b6d805151c0b0df3db702ee5f2 10.102.4.4:6379@16379 slave 7965a55cc27f5856ffb900eef366f4c652b681d7 0 1796235533565 8 connected
96d290061af6036d648edce8b9d44e195ae5c086 10.102.7.5:6379@16379,host myself,master - 0 0 12 connected 0-5460 5461 [5462->-7965a55cc27f5856ffb900eef366f4c652b681d7]
7965a55cc27f5856ffb900eef366f4c652b681d7 10.102.3.4:6379@16379 master,fail - 0 1796235533061 8 disconnected 5462-10922
not a node line
";
        let nodes = parse_cluster_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert!(!nodes[0].is_primary());
        assert_eq!(
            nodes[0].primary_id.as_deref(),
            Some("7965a55cc27f5856ffb900eef366f4c652b681d7")
        );
        assert_eq!(nodes[0].slots, 0);
        assert!(nodes[1].is_primary() && nodes[1].has_flag("myself"));
        assert_eq!(nodes[1].ip, "10.102.7.5");
        assert_eq!(nodes[1].slots, 5462, "a range, a single slot, no marker");
        assert!(!nodes[1].unhealthy() && nodes[1].connected);
        assert!(nodes[2].unhealthy() && !nodes[2].connected);
        assert_eq!(nodes[2].slots, 5461);
    }
}
