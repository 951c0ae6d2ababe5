//! tcpstall: reproduce, find, explain and fix TCP small-write stalls.
//!
//! The classic case is Nagle's algorithm (RFC 896, Linux `tcp_nagle_check`) holding a small
//! segment until the peer's delayed ACK (RFC 1122 §4.2.3.2, Linux `tcp_send_delayed_ack`)
//! releases it: 40 ms on Linux, 200 ms on Windows. Every verb of the command line is a module
//! here with one public entry point, `run`; they share one decoder ([`decode`]), one flow table
//! (`flow`) and one detector ([`detect`]), from the portable crate `tcpstall_core`.

/// Declares items that exist only on Linux: the verbs that run on this host's kernel (sockets,
/// BPF, netlink, ptrace, namespaces) and what only they use. Elsewhere `unsupported` stands
/// in for those verbs, and `probe` runs with what its own socket shows.
macro_rules! on_linux {
    ($($item:item)*) => { $( #[cfg(target_os = "linux")] $item )* };
}

pub mod analyze;
pub mod args;
pub mod capture;
pub mod host;
pub mod latency;
pub mod probe;
pub mod report;
pub(crate) mod terminal;
#[cfg(not(target_os = "linux"))]
pub mod unsupported;

on_linux! {
    pub(crate) mod exchange;
    pub mod lab;
    pub(crate) mod peer;
    pub mod process;
    pub(crate) mod route;
    pub mod watch;
}

pub use tcpstall_core::{decode, detect, tcp_rules};
// The core's modules under the paths the verbs have always used (`crate::flow`, ...).
#[allow(unused_imports)]
pub(crate) use tcpstall_core::{flow, ladder, units};

pub use tcpstall_core::Side;

/// What a verb found, for the exit status (0 done, 1 stalls found with `--fail-on-stall`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The work is done and nothing calls for a non-zero exit.
    Done,
    /// Stalls were found; `main` exits 1 when the user asked for `--fail-on-stall`.
    StallsFound,
}
