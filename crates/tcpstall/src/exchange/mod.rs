//! The exchanges of the lab's rows, as both of its implementations speak them: the kernel
//! sockets of `lab`'s own clients and servers, and the smoltcp peer of `lab --peer`. What a
//! server speaks and replies (protocol.rs), where a message ends (framing.rs), how a message
//! is split into writes (write.rs), and a server's errors, counted (notes.rs).

use std::collections::HashMap;
use std::time::Instant;

pub mod framing;
pub mod notes;
pub mod protocol;
pub mod write;

use self::notes::ErrorTally;

/// What a server saw: returned by the lab's kernel server and by the peer's when they stop.
#[derive(Debug, Default, Clone)]
pub struct ServerReport {
    /// Connections accepted.
    pub connections: u64,
    /// Data segments the server sent (`tcpi_data_segs_out` of every accepted socket).
    pub data_segs_out: u64,
    /// TCP_NODELAY of the first accepted socket, read before any option is set on it.
    pub accepted_nodelay: Option<bool>,
    /// TCP_QUICKACK of the first accepted socket, read before any data.
    pub accepted_quickack: Option<bool>,
    /// Sink protocol: per client port, when each chunk had fully arrived.
    pub arrivals: HashMap<u16, Vec<Instant>>,
    /// Errors of the acceptor and the connection handlers (a timeout, a reset, running out
    /// of file descriptors), counted, for the row's notes.
    pub errors: ErrorTally,
}
