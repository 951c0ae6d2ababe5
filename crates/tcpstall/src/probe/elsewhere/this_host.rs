//! Elsewhere than Linux the probe learns nothing of this host beyond its own socket: finding
//! the server's process, its accept queue and the hops behind it takes Linux's /proc,
//! sock_diag and packet rings. The report says what was not looked at.

use std::net::SocketAddr;
use std::time::Duration;

use super::client::RunLog;
use super::ServerSeen;
use crate::detect::PeerStack;
use crate::tcp_rules;

/// Why the server's side of this host is not looked at.
const NOT_LOOKED_AT: &str = "the server's process, accept queue and connections behind it are \
                             looked up only on Linux (/proc, sock_diag, packet capture)";

/// Nothing is watched of a server here.
pub(crate) struct ServerWatch;

impl ServerWatch {
    /// Watches nothing: the server's process is not found here.
    pub(crate) fn start(_target: SocketAddr) -> ServerWatch {
        ServerWatch
    }

    /// What was seen: nothing but why.
    pub(crate) fn finish(self, _log: &RunLog) -> ServerSeen {
        ServerSeen {
            proxy: None,
            queue: None,
            held: None,
            hops: Err(NOT_LOOKED_AT.to_string()),
            connections_behind: None,
        }
    }
}

/// The kernel's tick is unknown here: the delayed-ACK timers are matched with the widest
/// spread ([`tcp_rules::JIFFY_UNKNOWN_HZ`]).
pub(crate) fn jiffy() -> Duration {
    tcp_rules::JIFFY_UNKNOWN_HZ
}

/// This host's TCP stack: the client's of every connection the probe makes, whose delayed ACK
/// a server's Nagle hold waits for (Windows's 200 ms; macOS's 100-200 ms).
pub(crate) const STACK: PeerStack = if cfg!(windows) {
    PeerStack::Windows
} else {
    PeerStack::MacOsBsd
};
