//! `valkey-operator run`: the controller. A placeholder until the controller
//! lands; it owns its flags ([`RunArgs`]) so `main` only dispatches.

use thiserror::Error;

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `valkey-operator run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Why the controller stopped.
#[derive(Debug, Error)]
pub enum RunError {
    #[error("valkey-operator run: not yet implemented")]
    NotYet,
}

/// Runs the controller until it is told to stop.
pub fn run(_args: &RunArgs) -> Result<(), RunError> {
    Err(RunError::NotYet)
}
