//! `check-layers [--transitive] [SRC]`: checks the operator crate's step rules
//! (see the library) on what each step's modules name, or with `--transitive`
//! through any chain of modules; SRC defaults to `crates/operator/src`. Exit 1 with each broken
//! rule and its chain of references, 2 when the code cannot be read.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reach = if args.iter().any(|a| a == "--transitive") {
        layers::Reach::Transitive
    } else {
        layers::Reach::Direct
    };
    let src = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("crates/operator/src"));
    let files = match layers::read_tree(&src) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("check-layers: reading {}: {e}", src.display());
            return ExitCode::from(2);
        }
    };
    let graph = match layers::graph(&files) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("check-layers: {e}");
            return ExitCode::from(2);
        }
    };
    let mut broken = layers::check(&graph, layers::RULES, reach);
    match layers::act_calls_decide(&files) {
        Ok(found) => broken.extend(found),
        Err(e) => {
            eprintln!("check-layers: {e}");
            return ExitCode::from(2);
        }
    }
    for b in &broken {
        println!("{b}");
    }
    if broken.is_empty() {
        println!(
            "check-layers ({reach:?}): {} modules; observe reaches neither act nor report, act not report, report not act, backup none of the cluster's steps; act calls no function of decide",
            graph.files.len()
        );
        ExitCode::SUCCESS
    } else {
        eprintln!("check-layers: {} rule(s) broken", broken.len());
        ExitCode::FAILURE
    }
}
