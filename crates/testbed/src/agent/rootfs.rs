//! Containers whose image was loaded (`testbed image load`, see
//! [`crate::images`]): they run the image's own entrypoint from its unpacked
//! root filesystem, as the image's user, like a container runtime would.
//!
//! Inside the container's fresh mount namespace (see `runtime`), the wrapper
//! script mounts an overlay (the image's rootfs below, a per-container writable
//! layer above) at the container's `rootfs` folder, `/proc` and a minimal
//! `/dev` in it, then the volumes at `rootfs/<mountPath>`; the root is made
//! read-only last when `readOnlyRootFilesystem` asks. It then execs
//! `testbed exec-root`, which chroots into it, enters the working directory,
//! drops to the user and execs the argv (resolved on the image's PATH).

use super::spec::{Mount, shell_quote};
use crate::images::{ImageConfig, Loaded};
use k8s_openapi::api::core::v1::{Container, Pod};
use std::path::{Path, PathBuf};

/// The standard PATH of a container whose image sets none.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The device nodes a container gets in its `/dev`.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// The root filesystem of one container start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFs {
    /// The image's unpacked layers (never written).
    pub lower: PathBuf,
    /// The container's folder: `upper/` and `work/` of the overlay, and
    /// `rootfs/`, where the container's root is mounted.
    pub dir: PathBuf,
    pub read_only: bool,
}

impl RootFs {
    pub fn merged(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// A path of the container as seen from outside its root.
    pub fn host_path(&self, inside: &Path) -> PathBuf {
        let rel = inside.strip_prefix("/").unwrap_or(inside);
        self.merged().join(rel)
    }

    /// Script lines before the volume mounts: the overlay root, `/proc`, `/dev`.
    pub fn prelude(&self, mount: &str, mkdir: &str) -> String {
        let q = |p: &Path| shell_quote(&p.display().to_string());
        let (upper, work, merged) = (self.dir.join("upper"), self.dir.join("work"), self.merged());
        let opts = format!(
            "lowerdir={},upperdir={},workdir={}",
            self.lower.display(),
            upper.display(),
            work.display()
        );
        let mut s = format!(
            "{mkdir} -p {} {} {}\n{mount} -t overlay overlay -o {} {}\n",
            q(&upper),
            q(&work),
            q(&merged),
            shell_quote(&opts),
            q(&merged)
        );
        let proc_ = merged.join("proc");
        let dev = merged.join("dev");
        s.push_str(&format!(
            "{mkdir} -p {p}\n{mount} -t proc -o nosuid,nodev,noexec proc {p}\n",
            p = q(&proc_)
        ));
        s.push_str(&format!(
            "{mkdir} -p {d}\n{mount} -t tmpfs -o nosuid,mode=755,size=65536k tmpfs {d}\n",
            d = q(&dev)
        ));
        for n in DEVICES {
            let target = q(&dev.join(n));
            s.push_str(&format!(
                ": > {target}\n{mount} --bind {} {target}\n",
                shell_quote(&format!("/dev/{n}"))
            ));
        }
        s.push_str(&format!(
            "{mkdir} -p {}\n{mount} -t tmpfs -o nosuid,nodev,mode=1777 shm {}\n",
            q(&dev.join("shm")),
            q(&dev.join("shm"))
        ));
        s
    }

    /// Script lines after every volume is mounted.
    pub fn epilogue(&self, mount: &str) -> String {
        if self.read_only {
            format!(
                "{mount} -o remount,ro,bind {}\n",
                shell_quote(&self.merged().display().to_string())
            )
        } else {
            String::new()
        }
    }
}

/// Kubernetes command/args over the image's Entrypoint/Cmd: `command`
/// replaces the entrypoint (and drops the Cmd), `args` replaces the Cmd.
pub fn image_argv(command: &[String], args: &[String], config: &ImageConfig) -> Vec<String> {
    let entrypoint = config.entrypoint.clone().unwrap_or_default();
    let cmd = config.cmd.clone().unwrap_or_default();
    match (command.is_empty(), args.is_empty()) {
        (false, _) => command.iter().chain(args).cloned().collect(),
        (true, false) => entrypoint.into_iter().chain(args.iter().cloned()).collect(),
        (true, true) => entrypoint.into_iter().chain(cmd).collect(),
    }
}

/// `runAsUser`, `runAsGroup` and `runAsNonRoot`: the container's, then the pod's.
fn requested_ids(pod: &Pod, container: &Container) -> (Option<i64>, Option<i64>, Option<bool>) {
    let csc = container.security_context.as_ref();
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    (
        csc.and_then(|s| s.run_as_user)
            .or(psc.and_then(|s| s.run_as_user)),
        csc.and_then(|s| s.run_as_group)
            .or(psc.and_then(|s| s.run_as_group)),
        csc.and_then(|s| s.run_as_non_root)
            .or(psc.and_then(|s| s.run_as_non_root)),
    )
}

fn id(what: &str, v: i64) -> Result<u32, String> {
    u32::try_from(v).map_err(|_| format!("{what} {v} out of range"))
}

/// The uid and gid the container runs as: the container's then the pod's
/// `runAsUser`/`runAsGroup`, else the image's `User`.
pub fn run_as(
    pod: &Pod,
    container: &Container,
    image: &Loaded,
) -> Result<(u32, u32, String), String> {
    let (img_uid, img_gid, home) = crate::images::resolve_user(
        &image.rootfs,
        image.config.user.as_deref().unwrap_or_default(),
    )
    .map_err(|e| e.to_string())?;
    let (uid, gid, non_root) = requested_ids(pod, container);
    let (uid, home) = match uid {
        Some(u) => {
            let u = id("runAsUser", u)?;
            let home = crate::images::resolve_user(&image.rootfs, &u.to_string())
                .map(|(_, _, h)| h)
                .unwrap_or_else(|_| "/".into());
            (u, home)
        }
        None => (img_uid, home),
    };
    let gid = match gid {
        Some(g) => id("runAsGroup", g)?,
        None => img_gid,
    };
    if non_root == Some(true) && uid == 0 {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    Ok((uid, gid, home))
}

/// The uid and gid of a container run from the host's binaries (the
/// testbed's stand-in for the Valkey image, whose user is root unless the pod
/// says otherwise): `runAsUser`/`runAsGroup`, else 0; root under
/// `runAsNonRoot` is refused, as the kubelet refuses it.
pub fn host_run_as(pod: &Pod, container: &Container) -> Result<(u32, u32), String> {
    let (uid, gid, non_root) = requested_ids(pod, container);
    let uid = uid.map(|u| id("runAsUser", u)).transpose()?.unwrap_or(0);
    let gid = gid.map(|g| id("runAsGroup", g)).transpose()?.unwrap_or(0);
    if non_root == Some(true) && uid == 0 {
        return Err("container has runAsNonRoot and image will run as root".into());
    }
    Ok((uid, gid))
}

/// Supplementary groups: the pod's `supplementalGroups` and `fsGroup`.
pub fn supplementary_groups(pod: &Pod) -> Vec<u32> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut g: Vec<u32> = psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(psc.and_then(|s| s.fs_group))
        .filter_map(|x| u32::try_from(x).ok())
        .collect();
    g.sort_unstable();
    g.dedup();
    g
}

/// The environment over the image's `Env`: the image's variables first, the
/// container's (`container_env`, which already set PATH from the image) over
/// them; `HOME` from the user's passwd entry unless the pod or image sets it.
pub fn image_env(
    config: &ImageConfig,
    container: &Container,
    pod_env: Vec<(String, String)>,
    home: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = config
        .env
        .iter()
        .flatten()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let pod_sets_home = container.env.iter().flatten().any(|e| e.name == "HOME");
    let image_sets_home = env.iter().any(|(k, _)| k == "HOME");
    for (k, v) in pod_env {
        if k == "HOME" && !pod_sets_home {
            continue;
        }
        match env.iter_mut().find(|(name, _)| *name == k) {
            Some(slot) => slot.1 = v,
            None => env.push((k, v)),
        }
    }
    if !pod_sets_home && !image_sets_home {
        env.push(("HOME".into(), home.to_string()));
    }
    env
}

/// The image's PATH (what `container_env` should default to).
pub fn image_path(config: &ImageConfig) -> String {
    config
        .env
        .iter()
        .flatten()
        .find_map(|kv| kv.strip_prefix("PATH=").map(str::to_string))
        .unwrap_or_else(|| DEFAULT_PATH.to_string())
}

/// The volume mounts re-targeted inside the container's root.
pub fn mounts_in_root(root: &RootFs, mounts: Vec<Mount>) -> Vec<Mount> {
    mounts
        .into_iter()
        .map(|m| Mount {
            target: root.host_path(&m.target),
            ..m
        })
        .collect()
}

/// `testbed exec-root --root=ROOT ... -- ARGV`: enters a loaded image's root
/// (`RootFs::merged`), or with `/` as the root only changes user (a
/// container run from the host's binaries).
pub fn exec_as_argv(
    testbed: &Path,
    root: &Path,
    workdir: &str,
    uid: u32,
    gid: u32,
    groups: &[u32],
    argv: &[String],
) -> Vec<String> {
    let mut out = vec![
        testbed.display().to_string(),
        "exec-root".into(),
        format!("--root={}", root.display()),
        format!("--wd={workdir}"),
        format!("--uid={uid}"),
        format!("--gid={gid}"),
    ];
    if !groups.is_empty() {
        out.push(format!(
            "--groups={}",
            groups
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    out.push("--".into());
    out.extend(argv.iter().cloned());
    out
}

/// `testbed exec-root`: chroot into `root`, enter `wd`, become `uid:gid`
/// (with `groups`), exec `argv` (a bare name is looked up on PATH inside the
/// root). Returns only on failure.
pub fn exec_root(
    root: &Path,
    wd: &str,
    uid: u32,
    gid: u32,
    groups: &[u32],
    argv: &[String],
) -> anyhow::Error {
    use anyhow::Context;
    use nix::unistd::{Gid, Uid};
    use std::os::unix::process::CommandExt;
    let go = || -> anyhow::Result<std::convert::Infallible> {
        let (program, args) = argv.split_first().context("no command to run")?;
        nix::unistd::chroot(root).with_context(|| format!("chroot {}", root.display()))?;
        nix::unistd::chdir(wd).with_context(|| format!("chdir {wd}"))?;
        let mut all: Vec<Gid> = vec![Gid::from_raw(gid)];
        all.extend(groups.iter().map(|g| Gid::from_raw(*g)));
        nix::unistd::setgroups(&all).context("setgroups")?;
        nix::unistd::setgid(Gid::from_raw(gid)).context("setgid")?;
        nix::unistd::setuid(Uid::from_raw(uid)).context("setuid")?;
        let program = resolve_program(program, &std::env::var("PATH").unwrap_or_default())
            .with_context(|| format!("{program}: not found on PATH in the image"))?;
        let err = std::process::Command::new(&program)
            .arg0(&argv[0])
            .args(args)
            .exec();
        Err(err).with_context(|| format!("exec {}", program.display()))
    };
    match go() {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// A program name as execvp finds it: a path as is, a bare name on PATH.
fn resolve_program(program: &str, path: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    path.split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// Everything `runtime::launch` needs for a container of a loaded image.
#[derive(Debug, Clone)]
pub struct ImageLaunch {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// The working directory as the wrapper sees it (inside the root).
    pub workdir: PathBuf,
    pub script: super::spec::RootScript,
}

/// The launch of `container` from `image`: the argv (through `testbed
/// exec-root`), the environment over the image's, the volume mounts inside
/// the root, and the root's mount script. `dir` is the container's own
/// folder; its writable layer starts empty on every start, like a new
/// container's.
#[allow(clippy::too_many_arguments)]
pub fn plan(
    pod: &Pod,
    container: &Container,
    image: &Loaded,
    command: &[String],
    args: &[String],
    env: Vec<(String, String)>,
    mounts: Vec<Mount>,
    dir: &Path,
    tools: &super::spec::ScriptTools,
) -> Result<ImageLaunch, String> {
    let (uid, gid, home) = run_as(pod, container, image)?;
    let groups = supplementary_groups(pod);
    let root = RootFs {
        lower: image.rootfs.clone(),
        dir: dir.to_path_buf(),
        read_only: container
            .security_context
            .as_ref()
            .and_then(|s| s.read_only_root_filesystem)
            == Some(true),
    };
    for layer in ["upper", "work"] {
        let _ = std::fs::remove_dir_all(dir.join(layer));
    }
    let workdir = container
        .working_dir
        .clone()
        .filter(|w| !w.is_empty())
        .or_else(|| image.config.working_dir.clone().filter(|w| !w.is_empty()))
        .unwrap_or_else(|| "/".into());
    let argv = image_argv(command, args, &image.config);
    if argv.is_empty() {
        return Err("no command: the image has no Entrypoint or Cmd and the pod gives none".into());
    }
    let exe = testbed_exe().map_err(|e| format!("finding the testbed binary: {e}"))?;
    let mount = shell_quote(&tools.mount.display().to_string());
    let mkdir = shell_quote(&tools.mkdir.display().to_string());
    Ok(ImageLaunch {
        argv: exec_as_argv(&exe, &root.merged(), &workdir, uid, gid, &groups, &argv),
        env: image_env(&image.config, container, env, &home),
        mounts: mounts_in_root(&root, mounts),
        workdir: root.host_path(Path::new(&workdir)),
        script: super::spec::RootScript {
            prelude: root.prelude(&mount, &mkdir),
            epilogue: root.epilogue(&mount),
        },
    })
}

/// This binary (what `exec-root` runs); a rebuilt binary's new file when the
/// running one was replaced.
pub(crate) fn testbed_exe() -> std::io::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let text = exe.display().to_string();
    Ok(match text.strip_suffix(" (deleted)") {
        Some(p) => PathBuf::from(p),
        None => exe,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|x| x.to_string()).collect()
    }

    fn config() -> ImageConfig {
        ImageConfig {
            user: Some("65532:65532".into()),
            entrypoint: Some(v(&["/usr/local/bin/valkey-operator"])),
            cmd: Some(v(&["run"])),
            env: Some(v(&["PATH=/usr/local/bin:/usr/bin", "LANG=C"])),
            working_dir: Some("/home/nonroot".into()),
        }
    }

    #[test]
    fn command_and_args_override_entrypoint_and_cmd_as_kubernetes_says() {
        let c = config();
        assert_eq!(
            image_argv(&[], &[], &c),
            v(&["/usr/local/bin/valkey-operator", "run"])
        );
        assert_eq!(
            image_argv(&[], &v(&["run", "--log-format=json"]), &c),
            v(&["/usr/local/bin/valkey-operator", "run", "--log-format=json"])
        );
        assert_eq!(image_argv(&v(&["/bin/x"]), &[], &c), v(&["/bin/x"]));
        assert_eq!(
            image_argv(&v(&["/bin/x"]), &v(&["a"]), &c),
            v(&["/bin/x", "a"])
        );
    }

    #[test]
    fn the_pods_env_goes_over_the_images_and_home_comes_from_passwd() {
        let c = config();
        let container = Container::default();
        let pod_env = vec![
            ("PATH".to_string(), image_path(&c)),
            ("HOME".to_string(), "/root".to_string()),
            ("LANG".to_string(), "en".to_string()),
            ("HOSTNAME".to_string(), "op-0".to_string()),
        ];
        let env = image_env(&c, &container, pod_env, "/home/nonroot");
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("PATH"), Some("/usr/local/bin:/usr/bin"));
        assert_eq!(get("LANG"), Some("en"));
        assert_eq!(get("HOME"), Some("/home/nonroot"));
        assert_eq!(get("HOSTNAME"), Some("op-0"));
        assert_eq!(image_path(&ImageConfig::default()), DEFAULT_PATH);
    }

    #[test]
    fn the_root_is_an_overlay_with_proc_and_dev_and_read_only_last() {
        let r = RootFs {
            lower: "/tb/images/ab/rootfs".into(),
            dir: "/tb/pods/p/containers/op".into(),
            read_only: true,
        };
        let s = r.prelude("mount", "mkdir");
        assert!(s.contains("-t overlay overlay -o 'lowerdir=/tb/images/ab/rootfs,upperdir=/tb/pods/p/containers/op/upper,workdir=/tb/pods/p/containers/op/work' '/tb/pods/p/containers/op/rootfs'"), "{s}");
        assert!(s.contains("-t proc"));
        assert!(s.contains("--bind '/dev/null' '/tb/pods/p/containers/op/rootfs/dev/null'"));
        assert_eq!(
            r.epilogue("mount"),
            "mount -o remount,ro,bind '/tb/pods/p/containers/op/rootfs'\n"
        );
        assert_eq!(
            r.host_path(Path::new("/var/run/secrets")),
            PathBuf::from("/tb/pods/p/containers/op/rootfs/var/run/secrets")
        );
        let a = exec_as_argv(
            Path::new("/bin/testbed"),
            &r.merged(),
            "/home/nonroot",
            65532,
            65532,
            &[2000],
            &v(&["/x", "run"]),
        );
        assert_eq!(
            a,
            v(&[
                "/bin/testbed",
                "exec-root",
                "--root=/tb/pods/p/containers/op/rootfs",
                "--wd=/home/nonroot",
                "--uid=65532",
                "--gid=65532",
                "--groups=2000",
                "--",
                "/x",
                "run"
            ])
        );
    }

    #[test]
    fn bare_names_are_found_on_path() {
        assert_eq!(resolve_program("/a/b", ""), Some(PathBuf::from("/a/b")));
        assert!(resolve_program("sh", "/nonexistent:/bin:/usr/bin").is_some());
        assert!(resolve_program("no-such-tool-xyz", "/bin").is_none());
    }
}
