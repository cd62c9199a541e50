//! The container runtime: starting a container process inside its pod's network
//! namespace and a fresh mount namespace of its own, and signalling it.
//!
//! The chain is `nsenter --net=/run/netns/<pod>` -> `unshare --mount
//! --propagation private` -> `sh -c <wrapper>` -> the container argv. Each step
//! execs the next, so the PID the agent spawned is the container's main
//! process (what `containerID: testbed://<pid>` names), and its process group
//! holds everything it forks. The wrapper (see `spec::wrapper_script`) makes the
//! bind mounts, so volumes appear at their real mount paths only inside.

use super::spec::{Mount, RootScript, ScriptTools, wrapper_script_with};
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// Errors starting a container.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("tool {0:?} not found on PATH (install util-linux / iproute2 / nftables)")]
    MissingTool(String),
    #[error("opening log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting container {container}: {source}")]
    Spawn {
        container: String,
        source: std::io::Error,
    },
}

/// Absolute paths of the host tools the agent uses.
#[derive(Debug, Clone)]
pub struct Tools {
    pub ip: PathBuf,
    pub nft: PathBuf,
    pub nsenter: PathBuf,
    pub unshare: PathBuf,
    pub sh: PathBuf,
    pub mount: PathBuf,
    pub mkdir: PathBuf,
    pub sleep: PathBuf,
    pub true_: PathBuf,
}

/// Finds an executable on PATH plus the sbin folders.
pub fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain([
            "/usr/local/sbin",
            "/usr/local/bin",
            "/usr/sbin",
            "/usr/bin",
            "/sbin",
            "/bin",
        ])
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

impl Tools {
    pub fn find() -> Result<Tools, RuntimeError> {
        let f = |n: &str| which(n).ok_or_else(|| RuntimeError::MissingTool(n.to_string()));
        Ok(Tools {
            ip: f("ip")?,
            nft: f("nft")?,
            nsenter: f("nsenter")?,
            unshare: f("unshare")?,
            sh: f("sh")?,
            mount: f("mount")?,
            mkdir: f("mkdir")?,
            sleep: f("sleep")?,
            true_: f("true")?,
        })
    }

    pub fn script_tools(&self) -> ScriptTools {
        ScriptTools {
            mount: self.mount.clone(),
            mkdir: self.mkdir.clone(),
        }
    }
}

/// What to start.
#[derive(Debug, Clone)]
pub struct Launch {
    pub container: String,
    pub netns: PathBuf,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    pub workdir: PathBuf,
    /// The pod's hostname, set in the container's own UTS namespace.
    pub hostname: String,
    pub log: PathBuf,
    /// A loaded image's root filesystem (`rootfs`): its mount script parts.
    pub root: Option<RootScript>,
}

/// The full argument vector of the launch chain (program first).
pub fn launch_argv(tools: &Tools, l: &Launch) -> Vec<String> {
    let mut argv = vec![
        tools.nsenter.display().to_string(),
        format!("--net={}", l.netns.display()),
        "--".into(),
        tools.unshare.display().to_string(),
        "--mount".into(),
        "--uts".into(),
        "--propagation".into(),
        "private".into(),
        "--".into(),
        tools.sh.display().to_string(),
        "-c".into(),
        wrapper_script_with(
            &l.mounts,
            &l.workdir,
            &l.hostname,
            &tools.script_tools(),
            l.root.as_ref(),
        ),
        "sh".into(),
    ];
    argv.extend(l.argv.iter().cloned());
    argv
}

/// Starts a container; its stdout and stderr are appended to its log file.
pub fn launch(tools: &Tools, l: &Launch) -> Result<tokio::process::Child, RuntimeError> {
    if let Some(parent) = l.log.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&l.log)
            .map_err(|source| RuntimeError::Log {
                path: l.log.clone(),
                source,
            })
    };
    let out = open()?;
    let err = open()?;
    let argv = launch_argv(tools, l);
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| RuntimeError::MissingTool("nsenter".into()))?;
    tokio::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(l.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .kill_on_drop(false)
        .spawn()
        .map_err(|source| RuntimeError::Spawn {
            container: l.container.clone(),
            source,
        })
}

/// Sends `sig` to the container's process group (falling back to the process).
pub fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    let Ok(raw) = i32::try_from(pid) else {
        return;
    };
    let p = nix::unistd::Pid::from_raw(raw);
    if nix::sys::signal::killpg(p, sig).is_err() {
        let _ = nix::sys::signal::kill(p, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Tools {
        let p = |s: &str| PathBuf::from(s);
        Tools {
            ip: p("/sbin/ip"),
            nft: p("/sbin/nft"),
            nsenter: p("/usr/bin/nsenter"),
            unshare: p("/usr/bin/unshare"),
            sh: p("/bin/sh"),
            mount: p("/bin/mount"),
            mkdir: p("/bin/mkdir"),
            sleep: p("/bin/sleep"),
            true_: p("/bin/true"),
        }
    }

    #[test]
    fn the_chain_enters_the_pod_netns_then_a_private_mount_namespace_then_execs_argv() {
        let l = Launch {
            container: "valkey".into(),
            netns: "/run/netns/vk3-ab".into(),
            argv: vec!["/opt/valkey-server".into(), "--port".into(), "6379".into()],
            env: vec![],
            mounts: vec![],
            workdir: "/data".into(),
            hostname: "vk-0".into(),
            log: "/tmp/x.log".into(),
            root: None,
        };
        let a = launch_argv(&tools(), &l);
        assert_eq!(a[0], "/usr/bin/nsenter");
        assert_eq!(a[1], "--net=/run/netns/vk3-ab");
        assert_eq!(
            &a[3..9],
            &[
                "/usr/bin/unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "--"
            ]
        );
        assert_eq!(a[9], "/bin/sh");
        assert!(a[11].ends_with("exec \"$@\"\n"));
        assert_eq!(&a[12..], &["sh", "/opt/valkey-server", "--port", "6379"]);
    }

    #[test]
    fn which_finds_sh() {
        assert!(which("sh").is_some());
        assert!(which("definitely-not-a-tool-xyz").is_none());
    }
}
