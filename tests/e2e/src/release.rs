//! A previous release, built from git as a user would have installed it: the
//! source of its tag, its `valkey-operator` binary, its image (built by that
//! tree's own `scripts/image/build.py`) and its Helm chart.
//!
//! Everything is cached by the tag's commit under `target/prev-release/`, so
//! a second run rebuilds nothing:
//!
//! ```text
//! target/prev-release/
//!   <commit>/src/            git archive of the tag (.extracted once complete)
//!   <commit>/image/          <name>-<version>.oci.tar
//!   target/                  cargo's --target-dir, shared by every tag
//! ```
//!
//! The target directory is its own (not the workspace's `target/`): a build
//! there would replace `target/release/valkey-operator`, which the suites run
//! meanwhile. It is shared between tags, so dependencies compile once; and
//! when it is first made it is seeded with hard links to what the
//! workspace's own release build compiled (`deps`, `build`, `.fingerprint`):
//! a crates.io dependency compiled with the same version and features has
//! the same unit hash in any workspace, so cargo finds it fresh and compiles
//! only the tag's own crates and what differs. A unit cargo rebuilds gets a
//! new file or rewrites one of the same hash with the same content. The
//! links share modification times too: when the workspace's build later
//! rewrites a shared unit, cargo here may find its dependents older and
//! rebuild them (a partial rebuild, never a wrong one); a copy would avoid
//! that at the price of gigabytes per checkout.

use crate::cluster::Env;
use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The image name the previous release's image is built under, so that it
/// never takes the reference of the current image (both may carry the same
/// version while the next release is unreleased).
pub const PREVIOUS_IMAGE_NAME: &str = "valkey-operator-prev";

/// A previous release, ready to install.
#[derive(Debug, Clone)]
pub struct Release {
    pub tag: String,
    pub commit: String,
    /// Its source tree.
    pub src: PathBuf,
    /// Its `valkey-operator` binary.
    pub binary: PathBuf,
    /// Its image as an OCI archive (reference [`Release::image`]).
    pub archive: PathBuf,
    /// `<name>:<version>`, as the archive names it.
    pub image_repository: String,
    pub image_tag: String,
    /// Its chart (`deploy/helm/valkey-operator` of the tag).
    pub chart: PathBuf,
    /// What building it cost this run (zero when everything was cached).
    pub build_time: Duration,
    /// Whether cargo compiled anything.
    pub compiled: bool,
}

impl Release {
    /// The image reference the chart must name.
    pub fn image(&self) -> String {
        format!("{}:{}", self.image_repository, self.image_tag)
    }
}

fn run(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Extracts `commit` into `dest` (atomically: a half-extracted tree is never
/// taken for a complete one).
fn extract(root: &Path, commit: &str, dest: &Path) -> Result<()> {
    let stamp = dest.join(".extracted");
    if stamp.exists() {
        return Ok(());
    }
    let partial = dest.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    let mut archive = Command::new("git")
        .arg("-C")
        .arg(root)
        .args(["archive", "--format=tar", commit])
        .stdout(Stdio::piped())
        .spawn()
        .context("running git archive")?;
    let tar_in = archive
        .stdout
        .take()
        .context("git archive gave no stdout")?;
    let tar = Command::new("tar")
        .arg("-x")
        .arg("-C")
        .arg(&partial)
        .stdin(tar_in)
        .status()
        .context("running tar -x")?;
    let git = archive.wait()?;
    ensure!(
        git.success() && tar.success(),
        "git archive {commit} | tar -x failed ({git}, {tar})"
    );
    let _ = std::fs::remove_dir_all(dest);
    std::fs::rename(&partial, dest)?;
    std::fs::write(&stamp, commit)?;
    Ok(())
}

/// Hard-links the workspace's compiled release units into `target_dir`
/// once (see the module doc); without a workspace build it does nothing and
/// the first build is cold.
fn seed(root: &Path, target_dir: &Path) -> Result<()> {
    let release = target_dir.join("release");
    if release.exists() {
        return Ok(());
    }
    let ours = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| if d.is_absolute() { d } else { root.join(d) })
        .unwrap_or_else(|| root.join("target"))
        .join("release");
    let partial = target_dir.join("release.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    for dir in ["deps", "build", ".fingerprint"] {
        if !ours.join(dir).is_dir() {
            continue;
        }
        let ok = Command::new("cp")
            .arg("-al")
            .arg(ours.join(dir))
            .arg(partial.join(dir))
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            // Another file system, say: a cold build is slower, not wrong.
            let _ = std::fs::remove_dir_all(partial.join(dir));
        }
    }
    std::fs::rename(&partial, &release)?;
    Ok(())
}

/// The version of package `operator` in the tree at `src`.
fn crate_version(src: &Path) -> Result<String> {
    let text = run(
        "cargo metadata",
        Command::new("cargo").current_dir(src).args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ]),
    )?;
    let meta: serde_json::Value = serde_json::from_str(&text)?;
    meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "operator")
        .and_then(|p| p["version"].as_str())
        .map(str::to_string)
        .context("cargo metadata lists no package operator")
}

/// Builds (or finds cached) the release tagged `tag` at `commit` in the
/// repository at `env.root`: `cargo build --release -p operator --bin
/// valkey-operator` (niced: the e2e suites share the machine), then the
/// tag's own image script with the name [`PREVIOUS_IMAGE_NAME`].
///
/// The commit is pinned next to the tag because a clone of one branch (as CI
/// makes) carries the release's commit in its history but not its tag; when
/// the tag is present it must name the same commit.
pub fn build(env: &Env, tag: &str, commit: &str) -> Result<Release> {
    let started = Instant::now();
    let root = &env.root;
    let resolve = |rev: &str| {
        run(
            "git rev-parse",
            Command::new("git").arg("-C").arg(root).args([
                "rev-parse",
                "--verify",
                "--quiet",
                &format!("{rev}^{{commit}}"),
            ]),
        )
        .map(|s| s.trim().to_string())
    };
    let commit = resolve(commit).with_context(|| {
        format!(
            "the commit {commit} of release {tag} is not in this clone \
             (a shallow clone? git fetch --unshallow)"
        )
    })?;
    if let Ok(tagged) = resolve(tag) {
        ensure!(
            tagged == commit,
            "the tag {tag} names {tagged}, but the release is pinned at {commit}"
        );
    }
    let base = root.join("target/prev-release");
    let here = base.join(&commit);
    let src = here.join("src");
    extract(root, &commit, &src)?;

    // Cargo decides what is fresh; with everything cached it only checks.
    let target_dir = base.join("target");
    seed(root, &target_dir)?;
    let out = Command::new("nice")
        .args(["-n", "10", "cargo", "build", "--release", "--locked"])
        .args(["-p", "operator", "--bin", "valkey-operator", "--target-dir"])
        .arg(&target_dir)
        .current_dir(&src)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .context("running cargo build for the previous release")?;
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        out.status.success(),
        "cargo build of {tag} failed ({}):\n{log}",
        out.status
    );
    let compiled = log.lines().any(|l| l.trim_start().starts_with("Compiling"));
    let binary = target_dir.join("release/valkey-operator");

    let version = crate_version(&src)?;
    let image_dir = here.join("image");
    let archive = image_dir.join(format!("{PREVIOUS_IMAGE_NAME}-{version}.oci.tar"));
    let stale = match (std::fs::metadata(&archive), std::fs::metadata(&binary)) {
        (Ok(a), Ok(b)) => a.modified()? < b.modified()?,
        _ => true,
    };
    if stale {
        run(
            "the tag's scripts/image/build.py",
            Command::new("python3")
                .arg(src.join("scripts/image/build.py"))
                .arg("--binary")
                .arg(&binary)
                .args(["--name", PREVIOUS_IMAGE_NAME, "--out-dir"])
                .arg(&image_dir)
                .current_dir(&src),
        )?;
    }
    ensure!(
        archive.exists(),
        "{} is missing after the image build",
        archive.display()
    );
    let chart = src.join("deploy/helm/valkey-operator");
    ensure!(
        chart.join("Chart.yaml").exists(),
        "{tag} has no chart at deploy/helm/valkey-operator"
    );
    Ok(Release {
        tag: tag.to_string(),
        commit,
        src,
        binary,
        archive,
        image_repository: PREVIOUS_IMAGE_NAME.to_string(),
        image_tag: version,
        chart,
        build_time: started.elapsed(),
        compiled,
    })
}
