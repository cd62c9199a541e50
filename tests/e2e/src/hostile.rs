//! The hostile tenant's member image: the `hostile-valkey` binary (a fake
//! server that harms whoever administers it) packed as an OCI image and
//! loaded into a testbed, for the `hostile_tenant` suite and the benchmarks.

use crate::cluster::Env;
use anyhow::{Context, Result, ensure};
use std::path::Path;

/// The image's name in the testbed. No "valkey" in it: the testbed would run
/// the host's valkey-server.
pub const IMAGE: &str = "hostile/server:1";

/// Packs `binary` (the `hostile-valkey` cargo built) as `/usr/local/bin/valkey-server`
/// of an image and loads it into the testbed as [`IMAGE`].
pub fn load_image(env: &Env, binary: &Path) -> Result<()> {
    let out_dir = env.work_dir("hostile-image")?;
    let built = std::process::Command::new("python3")
        .arg(env.root.join("scripts/image/build.py"))
        .arg("--binary")
        .arg(binary)
        .args(["--name", "hostile-server"])
        .args(["--path-in-image", "/usr/local/bin/valkey-server"])
        .arg("--out-dir")
        .arg(&out_dir)
        .output()
        .context("running scripts/image/build.py")?;
    ensure!(
        built.status.success(),
        "build.py for the hostile image failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let archive = std::fs::read_dir(&out_dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.to_string_lossy().ends_with(".oci.tar"))
        .with_context(|| format!("build.py wrote no .oci.tar in {}", out_dir.display()))?;
    let archive = archive.to_string_lossy();
    env.testbed(&["image", "load", &archive, "--name", IMAGE])?;
    Ok(())
}
