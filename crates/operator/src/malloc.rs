//! How glibc's malloc is tuned for the long-running commands (`run`,
//! `exporter`).
//!
//! glibc raises its mmap threshold each time a large block is freed (up to
//! 32 MiB), so after the first large reply every later one comes from the
//! heap arenas, which keep what was freed. A tenant's members answering with
//! replies of megabytes then leave the operator's RSS tens of MB higher for
//! good, though the live memory is small. Measured with 20 members answering
//! every command with 4 MB (docs/benchmarks.md, "Replies of any size"): peak
//! 84 MB and 67 MB at rest with glibc's defaults, 104/84 MB with jemalloc,
//! 136/98 MB with mimalloc, 50/8 MB with the threshold fixed at 128 KiB (which
//! also keeps the trim threshold fixed). So blocks of 128 KiB and more are
//! always mapped and given back when freed.
//!
//! The tunable must be in the environment when the process starts (it is
//! read before `main`), and setting malloc options from Rust takes `unsafe`,
//! which this workspace forbids: so the command re-executes itself once with
//! `GLIBC_TUNABLES` set, before it starts a thread. A `GLIBC_TUNABLES` the
//! user set is kept as it is (no re-execution).

/// What the re-executed process gets.
pub const TUNABLES: &str = "glibc.malloc.mmap_threshold=131072";

/// Re-executes this process with [`TUNABLES`] unless `GLIBC_TUNABLES` is set
/// already. Returns only when it did not (the variable was set, not glibc, or
/// the exec failed, which is logged to stderr; the process then goes on with
/// glibc's defaults).
pub fn tune() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt as _;
        if std::env::var_os("GLIBC_TUNABLES").is_some() {
            return;
        }
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_else(|| "valkey-operator".into());
        // /proc/self/exe: this very binary, even if its file was replaced
        // since it started.
        let error = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", TUNABLES)
            .exec();
        eprintln!("valkey-operator: could not restart with {TUNABLES} ({error}); going on without");
    }
}
