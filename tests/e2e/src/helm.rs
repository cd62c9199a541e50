//! Helm as the suites run it: the binary `make setup` builds (or `HELM_BIN`),
//! with the testbed's kubeconfig and Helm's cache and config kept in the
//! testbed directory.

use crate::cluster::Env;
use anyhow::{Context, Result, bail, ensure};
use std::path::PathBuf;
use std::process::Command;

/// The Helm release scripts/build-helm.sh builds.
pub const HELM_VERSION: &str = "v4.3.2";

/// `HELM_BIN`, else the cached build.
pub fn helm_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("HELM_BIN") {
        return PathBuf::from(p);
    }
    let cache = std::env::var_os("VALKEY_RS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/valkey-rs")
        });
    cache.join(format!("bin/helm-{HELM_VERSION}/helm"))
}

/// Runs helm with `args`; its stdout, or an error with both outputs.
pub fn helm(env: &Env, args: &[&str]) -> Result<String> {
    let bin = helm_bin();
    ensure!(
        bin.exists(),
        "{} is missing: `make setup` (scripts/build-helm.sh) builds it",
        bin.display()
    );
    let out = Command::new(&bin)
        .args(args)
        .env("KUBECONFIG", &env.kubeconfig)
        .env("HELM_CACHE_HOME", env.testbed_dir.join("helm/cache"))
        .env("HELM_CONFIG_HOME", env.testbed_dir.join("helm/config"))
        .env("HELM_DATA_HOME", env.testbed_dir.join("helm/data"))
        .output()
        .with_context(|| format!("running {}", bin.display()))?;
    if !out.status.success() {
        bail!(
            "helm {} failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
