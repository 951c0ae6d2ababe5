//! What `tcpstall trace` hands its renderer ([`crate::report::trace`]): each traced socket and
//! its longest write-write-read, plain data the tracer's socket model fills in.

use std::net::SocketAddr;
use std::time::Duration;

/// A wait this long after a write-write-read is the delayed ACK at work
/// ([`crate::tcp_rules::STALL_THRESHOLD`]).
pub(crate) const LONG_WAIT: Duration = crate::tcp_rules::STALL_THRESHOLD;

/// What the tracer knows about one TCP socket it saw used; serialised as is in `trace --json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct TracedSocket {
    /// Process (thread-group id) that used it first.
    pub pid: u32,
    /// Its fd there.
    pub fd: i32,
    /// Local address, once known.
    pub local: Option<SocketAddr>,
    /// Remote address, once known.
    pub remote: Option<SocketAddr>,
    /// TCP_NODELAY as last seen (read from the socket or from a setsockopt call).
    pub nodelay: bool,
    /// TCP_NODELAY was switched on at some point (setsockopt seen or read on the socket).
    pub nodelay_ever_set: bool,
    /// TCP_CORK as last seen.
    pub cork: bool,
    /// setsockopt(TCP_QUICKACK, 1) calls: the program re-arms immediate ACKs on this socket.
    pub quickack_sets: u64,
    /// MSS for sending (TCP_MAXSEG).
    pub mss: u64,
    /// Send syscalls that moved data.
    pub sends: u64,
    /// Read calls on the socket.
    pub reads: u64,
    /// Write-write-read sequences found.
    pub write_write_read: u64,
    /// Of those, how many were followed by a wait of at least 30 ms.
    pub waits_over_30ms: u64,
    /// The write-write-read with the longest wait.
    pub example: Option<Example>,
}

/// The sizes of one write-write-read and how long the read after it waited.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Example {
    /// Bytes of each send (at most 8 listed).
    pub writes: Vec<u64>,
    /// Sends before the read.
    pub sends: u64,
    /// From the end of the last send to the end of the wait, milliseconds.
    pub wait_ms: f64,
}

impl Example {
    /// "6 B, then 7 B, then a read waiting 41.2 ms".
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.writes.iter().map(|b| format!("{b} B")).collect();
        if self.sends > self.writes.len() as u64 {
            parts.push(format!("{} more", self.sends - self.writes.len() as u64));
        }
        format!(
            "{}, then a read waiting {:.1} ms",
            parts.join(", then "),
            self.wait_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::Example;

    #[test]
    fn example_text() {
        let e = Example {
            writes: vec![6, 7],
            sends: 2,
            wait_ms: 41.23,
        };
        assert_eq!(e.describe(), "6 B, then 7 B, then a read waiting 41.2 ms");
    }
}
