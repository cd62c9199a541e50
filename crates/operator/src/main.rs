//! The `valkey-operator` binary: parses the command line and dispatches.

use clap::{CommandFactory, Parser, Subcommand};
use operator::{crd_cmd, exporter, plan_cmd, probe_cmd, run, topology_cmd};
use std::process::ExitCode;

/// Kubernetes operator for sharded Valkey clusters.
#[derive(Debug, Parser)]
#[command(
    name = "valkey-operator",
    version,
    about,
    after_help = "Run `valkey-operator <command> --help` for a command's options."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller (KUBECONFIG or in-cluster config).
    Run(run::RunArgs),
    /// Print the CustomResourceDefinitions (ValkeyCluster, ValkeyBackup) as
    /// YAML, or one of them with --kind.
    Crd(crd_cmd::CrdArgs),
    /// Print the Markdown reference of a CRD (every field's path, type,
    /// default, whether required, description and rules), generated from the
    /// same schema `crd` prints (docs/reference/*.md).
    CrdReference(crd_cmd::CrdReferenceArgs),
    /// Take one backup of a ValkeyCluster to an S3-compatible store (what a
    /// ValkeyBackup's Job runs). Exit 0 when every shard and the manifest
    /// are written, 1 when not; the outcome is printed as JSON.
    Backup(operator::backup::take::BackupArgs),
    /// Load one shard's RDB from a backup onto a member's data volume, its
    /// size and SHA-256 checked against the manifest (the init container of
    /// each shard's first member while a cluster is restored). Leaves a
    /// volume that already holds a node or data alone. Exit 1 on a mismatch.
    Restore(operator::backup::load::LoadArgs),
    /// Plan member placement for a ValkeyCluster over Nodes and Pods read from
    /// files. Exit 0 when every member is placed, 2 when not, 1 on bad input.
    Plan(plan_cmd::PlanArgs),
    /// Print the live topology of a running ValkeyCluster (region, zone, node,
    /// members with their live roles), as its status reports it.
    Topology(topology_cmd::TopologyArgs),
    /// Serve one Valkey member's metrics (INFO, CLUSTER INFO) in the
    /// Prometheus format: the sidecar of member pods (`spec.exporter`). With
    /// auth, the password comes from the environment variable
    /// VALKEY_PASSWORD, never from the command line.
    Exporter(exporter::ExporterArgs),
    /// Check once that an operator's metrics endpoint answers with its
    /// metrics (the Helm chart's test). Exit 0 when it does, 1 when not.
    ProbeMetrics(probe_cmd::ProbeArgs),
    /// Print a shell completion script: `source <(valkey-operator completion
    /// bash)`, or write it where your shell loads completions from.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// Reports panics through the log (one JSON object) instead of the default
/// plain-text message, which would break `--log-format json`.
fn json_panics() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            panic = %info,
            "panic"
        );
    }));
}

/// With `--features heap-profile`, every allocation is counted by dhat.
#[cfg(feature = "heap-profile")]
#[global_allocator]
static HEAP_PROFILE: dhat::Alloc = dhat::Alloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 1 (clap's default, 2, means "infeasible" for plan).
            let code = if e.use_stderr() { 1 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if matches!(cli.command, Command::Run(_) | Command::Exporter(_)) {
        operator::malloc::tune();
    }
    match cli.command {
        Command::Run(args) => {
            // Written to dhat-heap.json when `run` returns (on SIGTERM).
            #[cfg(feature = "heap-profile")]
            let _profiler = dhat::Profiler::new_heap();
            if args.log_format == run::LogFormat::Json {
                json_panics();
            }
            match run::run(&args) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    // Through the log, so that with `--log-format json` every
                    // line the operator writes is a JSON object.
                    if tracing::dispatcher::has_been_set() {
                        tracing::error!(error = %e, "valkey-operator run stopped");
                    } else {
                        eprintln!("{e}");
                    }
                    ExitCode::from(1)
                }
            }
        }
        Command::Crd(args) => match crd_cmd::write(args.kind, &mut std::io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        Command::CrdReference(args) => {
            match crd_cmd::write_reference(args.kind, &mut std::io::stdout().lock()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(1)
                }
            }
        }
        Command::Plan(args) => plan_cmd::main(&args),
        Command::Backup(args) => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(operator::backup::take::main(args)),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        Command::Restore(args) => match tokio::runtime::Runtime::new() {
            Ok(rt) => rt.block_on(operator::backup::load::main(args)),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
        Command::ProbeMetrics(args) => probe_cmd::main(&args),
        Command::Exporter(args) => {
            if args.log_format == run::LogFormat::Json {
                json_panics();
            }
            exporter::main(&args)
        }
        Command::Completion { shell } => {
            let mut cli = Cli::command();
            clap_complete::generate(shell, &mut cli, "valkey-operator", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Topology(args) => match topology_cmd::main(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(1)
            }
        },
    }
}
