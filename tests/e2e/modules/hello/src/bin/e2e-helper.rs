//! The one program of the e2e suite `extensions`' image (built with
//! `scripts/image/build.py --extra`, beside the module's `.so`), so its init
//! containers and sidecars really run on the testbed, where a container of an
//! image that was not loaded runs a placeholder:
//!
//! - `copy SRC DEST`: copies a file (an init container putting the module
//!   where the Valkey container loads it from: the "own image" path);
//! - `write PATH TEXT`: writes TEXT to PATH (an init container);
//! - `serve PATH`: reads PATH (failing when it is missing), prints it, and
//!   stays up printing it again every 10 s (a sidecar; its exit would keep
//!   the pod from being Ready);
//! - `check PATH TEXT`: succeeds when PATH holds TEXT (the sidecar's
//!   readiness probe: the pod is Ready only once the sidecar reads what
//!   the init container wrote).

use std::process::ExitCode;
use std::time::Duration;

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, src, dest] if cmd == "copy" => std::fs::copy(src, dest)
            .map(|_| println!("copied {src} to {dest}"))
            .map_err(|e| format!("copy {src} {dest}: {e}")),
        [cmd, path, text] if cmd == "write" => std::fs::write(path, text)
            .map(|()| println!("wrote {path}"))
            .map_err(|e| format!("write {path}: {e}")),
        [cmd, path] if cmd == "serve" => loop {
            let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
            println!("{path}: {text}");
            std::thread::sleep(Duration::from_secs(10));
        },
        [cmd, path, text] if cmd == "check" => {
            let found = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
            if found == *text {
                Ok(())
            } else {
                Err(format!("{path} holds {found:?}, not {text:?}"))
            }
        }
        _ => Err(
            "usage: e2e-helper copy SRC DEST | write PATH TEXT | serve PATH | check PATH TEXT"
                .into(),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e-helper: {e}");
            ExitCode::FAILURE
        }
    }
}
