//! The hostile tenant's member image: the `hostile-valkey` binary (a fake
//! server that harms whoever administers it) packed as an OCI image and
//! loaded into a testbed, for the `hostile_tenant` suite and the benchmarks.

use crate::cluster::Env;
use anyhow::Result;
use std::path::Path;

/// The image's name in the testbed. No "valkey" in it: the testbed would run
/// the host's valkey-server.
pub const IMAGE: &str = "hostile/server:1";

/// Packs `binary` (the `hostile-valkey` cargo built) as `/usr/local/bin/valkey-server`
/// of an image and loads it into the testbed as [`IMAGE`].
pub fn load_image(env: &Env, binary: &Path) -> Result<()> {
    crate::image::build_and_load(
        env,
        binary,
        "hostile-server",
        "/usr/local/bin/valkey-server",
        &[],
        IMAGE,
    )
}
