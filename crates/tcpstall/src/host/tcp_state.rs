//! A TCP socket's state as the kernel numbers it, read from `/proc/net/tcp` and `sock_diag`.

use std::fmt;

use serde::Serialize;

/// TCP states as numbered in `include/net/tcp_states.h`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TcpState {
    /// Data flows both ways.
    Established,
    /// Active open, SYN sent.
    SynSent,
    /// Passive open, SYN received.
    SynRecv,
    /// Our FIN sent, not acknowledged.
    FinWait1,
    /// Our FIN acknowledged, waiting for the peer's.
    FinWait2,
    /// Both FINs done, waiting 2 MSL.
    TimeWait,
    /// Closed.
    Close,
    /// The peer's FIN received, ours not sent.
    CloseWait,
    /// Our FIN sent after the peer's, waiting for its ACK.
    LastAck,
    /// Listening for connections.
    Listen,
    /// Both sides sent FIN at once.
    Closing,
    /// A request socket in the SYN queue.
    NewSynRecv,
}

impl TcpState {
    pub(crate) fn from_code(code: u8) -> Option<TcpState> {
        Some(match code {
            0x01 => TcpState::Established,
            0x02 => TcpState::SynSent,
            0x03 => TcpState::SynRecv,
            0x04 => TcpState::FinWait1,
            0x05 => TcpState::FinWait2,
            0x06 => TcpState::TimeWait,
            0x07 => TcpState::Close,
            0x08 => TcpState::CloseWait,
            0x09 => TcpState::LastAck,
            0x0A => TcpState::Listen,
            0x0B => TcpState::Closing,
            0x0C => TcpState::NewSynRecv,
            _ => return None,
        })
    }

    /// The kernel's name of the state, as `ss` prints it without abbreviation.
    pub fn name(self) -> &'static str {
        match self {
            TcpState::Established => "ESTABLISHED",
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::FinWait1 => "FIN_WAIT1",
            TcpState::FinWait2 => "FIN_WAIT2",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::Listen => "LISTEN",
            TcpState::Closing => "CLOSING",
            TcpState::NewSynRecv => "NEW_SYN_RECV",
        }
    }
}

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
