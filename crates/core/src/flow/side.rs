//! The two ends of a connection, named by who opened it.

/// Which end of a connection: the client opened it (sent the SYN), the server accepted it.
/// Every verb names ends this way (re-exported as `tcpstall::Side`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The connection initiator.
    Client,
    /// The side that accepted the connection.
    Server,
}

impl Side {
    /// The other end.
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }

    /// Index into per-direction arrays.
    pub fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }

    /// Stable lower-case name (`client`, `server`), as in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}
