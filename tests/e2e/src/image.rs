//! Test images: a binary of this workspace (and any extra files) packed as an
//! OCI image by `scripts/image/build.py` and loaded into a testbed.

use crate::cluster::Env;
use anyhow::{Context, Result, ensure};
use std::path::Path;

/// Packs `binary` at `path_in_image` of an image called `name` (with each
/// `(file, path)` of `extra` beside it) and loads it into the testbed as
/// `load_as`.
pub fn build_and_load(
    env: &Env,
    binary: &Path,
    name: &str,
    path_in_image: &str,
    extra: &[(&Path, &str)],
    load_as: &str,
) -> Result<()> {
    let out_dir = env.work_dir(&format!("{name}-image"))?;
    let mut build = std::process::Command::new("python3");
    build
        .arg(env.root.join("scripts/image/build.py"))
        .arg("--binary")
        .arg(binary)
        .args(["--name", name, "--path-in-image", path_in_image]);
    for (file, path) in extra {
        build
            .arg("--extra")
            .arg(format!("{}:{path}", file.display()));
    }
    let built = build
        .arg("--out-dir")
        .arg(&out_dir)
        .output()
        .context("running scripts/image/build.py")?;
    ensure!(
        built.status.success(),
        "build.py for {load_as} failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let archive = std::fs::read_dir(&out_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".oci.tar"))
        .with_context(|| format!("build.py wrote no .oci.tar in {}", out_dir.display()))?;
    env.testbed(&[
        "image",
        "load",
        &archive.to_string_lossy(),
        "--name",
        load_as,
    ])?;
    Ok(())
}
