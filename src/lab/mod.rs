//! `tcpstall lab`: the source documents' experiments, reproduced on real kernel sockets.

use clap::Args;

use crate::Outcome;

/// Arguments of `tcpstall lab`.
#[derive(Args, Debug, Clone)]
pub struct LabArgs {
    /// Exit 1 when a row stalls that is not expected to.
    #[arg(long)]
    pub fail_on_stall: bool,
}

/// Runs the lab.
pub fn run(_args: &LabArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("lab is not built yet")
}
