//! `tcpstall trace`.

use clap::Args;

use crate::Outcome;

/// Arguments of `tcpstall trace`.
#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Exit 1 when a write-write-read pattern is found.
    #[arg(long)]
    pub fail_on_stall: bool,
}

/// Runs `tcpstall trace`.
pub fn run(_args: &TraceArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("trace is not built yet")
}
