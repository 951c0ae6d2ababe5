//! What the probe learns of this host beyond its own socket, from Linux's /proc, sock_diag and
//! packet rings: when the server runs here, its process, its accept queue and the hops behind
//! it while the requests run; and the kernel's tick, which the delayed-ACK timers are counted in.

use std::net::SocketAddr;
use std::time::Duration;

use super::client::RunLog;
use super::{behind, hops, listen_queue, upstream, ServerSeen};
use crate::detect::PeerStack;
use crate::tcp_rules;

/// What is watched of a server on this host while the requests run.
pub(crate) struct ServerWatch {
    /// The owner of the target's listening socket, or why it is not known.
    proxy: Result<upstream::Process, String>,
    hops: Result<hops::HopWatch, String>,
    queue: Option<listen_queue::Watch>,
    lister: Option<behind::Lister>,
}

impl ServerWatch {
    /// Starts watching the server listening on `target`, when it is on this host.
    pub(crate) fn start(target: SocketAddr) -> ServerWatch {
        // The hops behind a server on this host are watched while the requests run.
        let proxy = hops::listener_owner(target);
        let hops = proxy
            .as_ref()
            .map_err(Clone::clone)
            .and_then(hops::HopWatch::start);
        // The server's accept queue, read before and after the requests (server on this host).
        let queue = proxy
            .as_ref()
            .ok()
            .and_then(|p| listen_queue::Watch::start(target, p).ok());
        // The server's own connections: whether there is any hop behind it at all.
        let lister = proxy.as_ref().ok().and_then(behind::Lister::start);
        ServerWatch {
            proxy,
            hops,
            queue,
            lister,
        }
    }

    /// Stops watching once the requests of `log` ran.
    pub(crate) fn finish(self, log: &RunLog) -> ServerSeen {
        let queue = self.queue.map(listen_queue::Watch::finish);
        let hops = self.hops.and_then(|watch| watch.finish(log));
        let connections_behind = self.lister.map(|l| l.finish(log));
        ServerSeen {
            proxy: self.proxy.ok(),
            queue,
            held: hops.as_ref().ok().and_then(|h| hops::held_behind(h, log)),
            hops: hops.map(|_| ()),
            connections_behind,
        }
    }
}

/// The running kernel's tick, [`tcp_rules::JIFFY_UNKNOWN_HZ`] when HZ is unknown.
pub(crate) fn jiffy() -> Duration {
    crate::host::kernel::KernelFacts::read()
        .jiffy()
        .unwrap_or(tcp_rules::JIFFY_UNKNOWN_HZ)
}

/// This host's TCP stack: the client's of every connection the probe makes.
pub(crate) const STACK: PeerStack = PeerStack::Linux;
