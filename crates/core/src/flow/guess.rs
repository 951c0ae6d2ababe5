//! What a capture that misses the handshake leaves to guess: which side is the client
//! ([`ClientGuess`]) and each side's MSS ([`MssSource`]).

/// Lowest port of Linux's default ephemeral range (`net.ipv4.ip_local_port_range` 32768-60999;
/// Windows and macOS use 49152-65535, within it): a port below it is a service's.
pub const EPHEMERAL_PORT_MIN: u16 = 32768;

/// How the client of a flow was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ClientGuess {
    /// The client sent the SYN: certain.
    Syn,
    /// Only the SYN-ACK was seen: its receiver is the client.
    SynAck,
    /// The capture starts mid-flow; one port is below the ephemeral range
    /// (from 32768, Linux's default) and the other in it: the lower one is the server's.
    ServicePort,
    /// The capture starts mid-flow and both ports are on the same side of the ephemeral range,
    /// so they tell little: the side with the larger port. With both ports ephemeral this
    /// holds only until the first data is seen ([`ClientGuess::FirstData`]).
    EphemeralPort,
    /// The capture starts mid-flow with both ports ephemeral (a server on a port the kernel
    /// picked): the side that sent the first data, since a client speaks first in
    /// request/response protocols (a capture cut just after the handshake shows its request).
    FirstData,
}

impl ClientGuess {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ClientGuess::Syn => "syn",
            ClientGuess::SynAck => "syn_ack",
            ClientGuess::ServicePort => "service_port",
            ClientGuess::EphemeralPort => "ephemeral_port",
            ClientGuess::FirstData => "first_data",
        }
    }

    /// The capture has no SYN of the flow: client and server are guessed.
    pub fn is_guess(self) -> bool {
        !matches!(self, ClientGuess::Syn | ClientGuess::SynAck)
    }

    /// How the client was told apart, in words.
    pub fn describe(self) -> &'static str {
        match self {
            ClientGuess::Syn => "the client sent the SYN",
            ClientGuess::SynAck => "capture starts at the SYN-ACK: its receiver is the client",
            ClientGuess::ServicePort => {
                "capture starts mid-flow: client guessed from ports (the server's is below the \
                 ephemeral range)"
            }
            ClientGuess::EphemeralPort => {
                "capture starts mid-flow: client guessed from ports (the larger one)"
            }
            ClientGuess::FirstData => {
                "capture starts mid-flow: client guessed as the side that sent data first"
            }
        }
    }
}

/// Where the MSS of a direction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum MssSource {
    /// The MSS option of the peer's SYN (what this side may send, RFC 9293 §3.7.1).
    Syn,
    /// The peer's SYN was not seen, this side's was: the MSS this side announced, as both ends
    /// of a path usually announce the same (each derives it from its interface's MTU); raised
    /// to the largest segment seen when larger.
    OwnSyn,
    /// No SYN seen: Ethernet's MSS ([`crate::tcp_rules::DEFAULT_MSS_V4`]; loopback's on `lo` addresses), or the
    /// largest segment seen when larger.
    #[default]
    Assumed,
}

impl MssSource {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MssSource::Syn => "syn",
            MssSource::OwnSyn => "own_syn",
            MssSource::Assumed => "assumed",
        }
    }
}

/// The client of a flow whose capture starts mid-flow, from its ports: whether the segment's
/// source (port `src`) is the client, how sure that is, and whether the first data may still
/// overturn it (both ports ephemeral: [`ClientGuess::FirstData`]).
pub fn client_by_ports(src: u16, dst: u16) -> PortGuess {
    let src_ephemeral = src >= EPHEMERAL_PORT_MIN;
    let dst_ephemeral = dst >= EPHEMERAL_PORT_MIN;
    if src_ephemeral != dst_ephemeral {
        // A port below the ephemeral range is a service's.
        PortGuess {
            src_is_client: src_ephemeral,
            guess: ClientGuess::ServicePort,
            open: false,
        }
    } else {
        // Both on the same side of the range: the larger port is taken as the client's.
        PortGuess {
            src_is_client: src > dst,
            guess: ClientGuess::EphemeralPort,
            open: src_ephemeral,
        }
    }
}

/// What [`client_by_ports`] concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortGuess {
    /// The segment's source is the client.
    pub src_is_client: bool,
    /// How it was told.
    pub guess: ClientGuess,
    /// Both ports are ephemeral: the first data decides ([`ClientGuess::FirstData`]).
    pub open: bool,
}

/// Where a flow's two path legs (capture point ↔ client, capture point ↔ server) come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum PathSource {
    /// The handshake timed both (SYN → SYN-ACK: the server's leg; SYN-ACK → ACK: the
    /// client's), refined by the quickest answer each side sent.
    Handshake,
    /// No whole handshake: the quickest answers each side sent, as far as there were any.
    Answers,
    /// Neither leg is known.
    #[default]
    Unknown,
}

impl PathSource {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            PathSource::Handshake => "handshake",
            PathSource::Answers => "answers",
            PathSource::Unknown => "unknown",
        }
    }
}
