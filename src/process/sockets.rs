//! `tcpstall sockets`.

use clap::Args;

use crate::Outcome;

/// Arguments of `tcpstall sockets`.
#[derive(Args, Debug, Clone)]
pub struct SocketsArgs {

}

/// Runs `tcpstall sockets`.
pub fn run(_args: &SocketsArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("sockets is not built yet")
}
