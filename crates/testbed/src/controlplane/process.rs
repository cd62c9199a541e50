//! Detached processes with pid files: how `up` leaves components running after
//! it exits, and how `down` and `status` find them again.
//!
//! A component runs in its own process group (so a Ctrl-C on the terminal that ran
//! `up` does not reach it), with stdin closed and stdout and stderr appended to
//! `DIR/logs/<name>.log`; its pid goes to `DIR/pids/<name>.pid`. A pid file is
//! only believed while the process it names still looks like ours: its command
//! line mentions the testbed directory, or, for pid files written by others (the
//! demo's operator), it started before the pid file was written. That keeps a
//! recycled pid from being killed.

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Errors starting or stopping a component.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("opening log {path}: {source}")]
    Log {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("starting {name} ({program}): {source}")]
    Spawn {
        name: String,
        program: PathBuf,
        source: std::io::Error,
    },
    #[error("writing pid file {path}: {source}")]
    PidFile {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where a testbed keeps its pid files and logs.
#[derive(Debug, Clone)]
pub struct Supervisor {
    dir: PathBuf,
}

/// What a pid file says about its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// No pid file.
    NotStarted,
    /// The pid file names a process that is gone (or is someone else now).
    Dead(i32),
    Alive(i32),
}

impl Liveness {
    pub fn pid(self) -> Option<i32> {
        match self {
            Liveness::NotStarted => None,
            Liveness::Dead(p) | Liveness::Alive(p) => Some(p),
        }
    }

    pub fn is_alive(self) -> bool {
        matches!(self, Liveness::Alive(_))
    }
}

impl Supervisor {
    /// The supervisor of the testbed at `dir` (absolute).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
        }
    }

    pub fn logs_dir(&self) -> PathBuf {
        self.dir.join("logs")
    }

    pub fn pids_dir(&self) -> PathBuf {
        self.dir.join("pids")
    }

    pub fn log_path(&self, name: &str) -> PathBuf {
        self.logs_dir().join(format!("{name}.log"))
    }

    fn pid_path(&self, name: &str) -> PathBuf {
        self.pids_dir().join(format!("{name}.pid"))
    }

    /// Starts `program args` detached and records its pid as `name`.
    pub fn spawn(&self, name: &str, program: &Path, args: &[String]) -> Result<i32, ProcessError> {
        self.spawn_with_env(name, program, args, &[])
    }

    /// [`Self::spawn`] with `env` added to this process's environment.
    pub fn spawn_with_env(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
    ) -> Result<i32, ProcessError> {
        for d in [self.logs_dir(), self.pids_dir()] {
            std::fs::create_dir_all(&d).map_err(|source| ProcessError::Log {
                path: d.clone(),
                source,
            })?;
        }
        let log_path = self.log_path(name);
        let open_log = || {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .map_err(|source| ProcessError::Log {
                    path: log_path.clone(),
                    source,
                })
        };
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(open_log()?)
            .stderr(open_log()?)
            .process_group(0)
            .spawn()
            .map_err(|source| ProcessError::Spawn {
                name: name.to_string(),
                program: program.to_path_buf(),
                source,
            })?;
        let pid = i32::try_from(child.id()).unwrap_or(i32::MAX);
        // The child is not waited for: it outlives this process and is reaped by
        // init. Dropping `Child` neither kills nor waits.
        drop(child);
        let path = self.pid_path(name);
        std::fs::write(&path, format!("{pid}\n"))
            .map_err(|source| ProcessError::PidFile { path, source })?;
        Ok(pid)
    }

    /// Whether the component `name` is running.
    pub fn liveness(&self, name: &str) -> Liveness {
        let path = self.pid_path(name);
        let Some(pid) = read_pid(&path) else {
            return Liveness::NotStarted;
        };
        if self.is_ours(pid, &path) {
            Liveness::Alive(pid)
        } else {
            Liveness::Dead(pid)
        }
    }

    /// Names of every pid file in `DIR/pids` (ours and others').
    pub fn recorded(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.pids_dir()) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".pid"))
                    .map(str::to_string)
            })
            .collect();
        names.sort();
        names
    }

    /// Stops `name`: SIGTERM, up to `grace` to exit, then SIGKILL to its whole
    /// process group. Removes the pid file. Returns whether it was running.
    pub fn stop(&self, name: &str, grace: Duration) -> bool {
        let was_running = match self.liveness(name) {
            Liveness::Alive(pid) => {
                terminate(pid, grace);
                true
            }
            _ => false,
        };
        let _ = std::fs::remove_file(self.pid_path(name));
        was_running
    }

    /// A process is ours when its command line names this testbed's directory,
    /// or (pid files others wrote) when it is older than its pid file.
    fn is_ours(&self, pid: i32, pid_file: &Path) -> bool {
        if !is_running(pid) {
            return false;
        }
        let dir = self.dir.to_string_lossy().into_owned();
        if cmdline(pid).iter().any(|a| mentions_dir(a, &dir)) {
            return true;
        }
        match (started_at(pid), modified_at(pid_file)) {
            (Some(started), Some(written)) => started <= written + Duration::from_secs(2),
            _ => false,
        }
    }
}

/// Whether a command-line argument points into `dir` (and not into a sibling
/// whose name merely starts the same way, `/x/tb` vs `/x/tb2`).
pub fn mentions_dir(arg: &str, dir: &str) -> bool {
    arg == dir || arg.contains(&format!("{dir}/"))
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 1)
}

/// Running means present and not a zombie (a component that died while `up`,
/// its parent, was still running stays a zombie until `up` exits).
pub fn is_running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat_state(&stat).is_some_and(|s| s != 'Z' && s != 'X'),
        Err(_) => false,
    }
}

/// The state letter of a `/proc/<pid>/stat` line (after the parenthesised name,
/// which may itself contain spaces and parentheses).
fn stat_state(stat: &str) -> Option<char> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

/// The start time field of `/proc/<pid>/stat`, in clock ticks after boot.
fn stat_start_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields after the name start at field 3 (state); starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// The arguments of a process.
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn started_at(pid: i32) -> Option<SystemTime> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = stat_start_ticks(&stat)?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|v| u64::try_from(v).ok())
        .filter(|v| *v > 0)
        .unwrap_or(100);
    let millis = ticks.saturating_mul(1000) / hz;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(btime) + Duration::from_millis(millis))
}

fn modified_at(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).ok()?.modified().ok()
}

/// SIGTERM `pid`, wait up to `grace`, then SIGKILL its process group and the
/// process itself.
pub fn terminate(pid: i32, grace: Duration) {
    let p = Pid::from_raw(pid);
    let _ = kill(p, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if !is_running(pid) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The group too: whatever the component started and left behind.
    let _ = killpg(p, Signal::SIGKILL);
    if is_running(pid) {
        let _ = kill(p, Signal::SIGKILL);
        wait_gone(pid, Duration::from_secs(5));
    }
}

/// SIGKILL without a grace period.
pub fn kill_now(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// Waits until `pid` is no longer running, up to `timeout`.
pub fn wait_gone(pid: i32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !is_running(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Every process on the machine running one of `programs` (executable file
/// names) whose command line points into `dir`, except this one and its
/// ancestors. Limited to known programs so that, say, a `tail -f` of a log in
/// `dir` is never killed.
pub fn processes_mentioning(dir: &Path, programs: &[&str]) -> Vec<i32> {
    let dir = dir.to_string_lossy().into_owned();
    let spared = ancestry();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
        .filter(|pid| !spared.contains(pid))
        .filter(|pid| exe_name(*pid).is_some_and(|n| programs.contains(&n.as_str())))
        .filter(|pid| cmdline(*pid).iter().any(|a| mentions_dir(a, &dir)))
        .filter(|pid| is_running(*pid))
        .collect()
}

/// The file name of a process's executable (without the ` (deleted)` the kernel
/// appends when the binary was replaced, e.g. by a rebuild).
fn exe_name(pid: i32) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let name = exe.file_name()?.to_string_lossy().into_owned();
    Some(name.trim_end_matches(" (deleted)").to_string())
}

/// This process and its ancestors (never to be killed by a sweep).
fn ancestry() -> Vec<i32> {
    let mut out = Vec::new();
    let mut pid = i32::try_from(std::process::id()).unwrap_or(0);
    while pid > 1 && !out.contains(&pid) {
        out.push(pid);
        pid = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let rest = s[s.rfind(')')? + 1..].to_string();
                rest.split_whitespace().nth(1)?.parse().ok()
            })
            .unwrap_or(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_a_name_with_spaces_and_parentheses() {
        let stat = "1234 (odd (name) x) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 10";
        assert_eq!(stat_state(stat), Some('S'));
        assert_eq!(stat_start_ticks(stat), Some(98765));
    }

    #[test]
    fn a_sibling_directory_with_a_longer_name_is_not_ours() {
        assert!(mentions_dir("--data-dir=/x/tb/etcd", "/x/tb"));
        assert!(mentions_dir("/x/tb", "/x/tb"));
        assert!(!mentions_dir("--data-dir=/x/tb2/etcd", "/x/tb"));
    }

    #[test]
    fn a_spawned_component_is_alive_until_stopped() {
        let dir = std::env::temp_dir().join(format!("testbed-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sup = Supervisor::new(&dir);
        assert_eq!(sup.liveness("sleeper"), Liveness::NotStarted);
        // The argument names the directory, so the pid file is believed.
        let marker = dir.join("marker").to_string_lossy().into_owned();
        let pid = sup
            .spawn(
                "sleeper",
                Path::new("/bin/sh"),
                &["-c".into(), "sleep 30; :".into(), marker],
            )
            .unwrap();
        assert_eq!(sup.liveness("sleeper"), Liveness::Alive(pid));
        assert_eq!(sup.recorded(), vec!["sleeper".to_string()]);
        let shells = ["sh", "dash", "bash"];
        // Between fork and exec the child still runs the test binary: give a
        // loaded machine a moment to exec the shell.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !processes_mentioning(&dir, &shells).contains(&pid) {
            assert!(
                std::time::Instant::now() < deadline,
                "pid {pid} never showed up as a shell mentioning {}",
                dir.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!processes_mentioning(&dir, &["valkey-server"]).contains(&pid));
        assert!(sup.stop("sleeper", Duration::from_secs(5)));
        assert!(!is_running(pid) || wait_gone(pid, Duration::from_secs(2)));
        assert_eq!(sup.liveness("sleeper"), Liveness::NotStarted);
        assert!(!sup.stop("sleeper", Duration::from_secs(1)));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
