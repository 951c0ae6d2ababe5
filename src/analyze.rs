//! `tcpstall analyze`: find and explain stalls in pcap/pcapng captures.

use std::path::PathBuf;

use clap::Args;

use crate::Outcome;

/// Arguments of `tcpstall analyze`.
#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng); `-` reads standard input.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Exit 1 when a stall is found.
    #[arg(long)]
    pub fail_on_stall: bool,
}

/// Analyses the captures.
pub fn run(_args: &AnalyzeArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("analyze is not built yet")
}
