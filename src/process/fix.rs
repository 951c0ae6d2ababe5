//! `tcpstall fix`.

use clap::Args;

use crate::Outcome;

/// Arguments of `tcpstall fix`.
#[derive(Args, Debug, Clone)]
pub struct FixArgs {

}

/// Runs `tcpstall fix`.
pub fn run(_args: &FixArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("fix is not built yet")
}
