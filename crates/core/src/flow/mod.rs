//! The TCP flow table: per-connection, per-direction sequence state.
//!
//! Sequence numbers are kept as the wire carries them ([`SeqNumber`]) and compared modulo
//! 2^32 (RFC 9293 §3.4, RFC 1982), so a connection that wraps around keeps working; times are
//! capture times ([`Timestamp`]) and spans between them ([`Span`]).
//!
//! Memory is bounded by the number of *active* flows: `FlowTable::evict` retires flows that
//! closed (FIN both ways or RST, then a grace period) or went idle, and hands them back so the
//! caller can keep a compact summary. What rejoins a retired connection is kept apart, small
//! and bounded (a tombstone: id and client): only a new SYN starts another connection on a
//! 4-tuple, so a connection idle for long, or its late retransmissions after the close, stay
//! one flow.
//!
//! - `key`: the 4-tuple key; `index`: the open-addressing index over it; `table`: the table
//!   of flows.
//! - `connection`: one flow, and its update in steps (handshake, data, ACK, close).
//! - `direction`: the state of the data one side sends.
//! - `guess`: client and MSS when the handshake was not captured.
//! - `cadence`: packet gaps that repeat, the mark of generated timing.
//! - `turns`: request/response turns and the writes of the current one.
//! - `endpoint`, `side`: the values the rest is written in, with [`crate::units`]' sequence
//!   numbers and times.

mod cadence;
mod connection;
mod direction;
mod endpoint;
mod guess;
mod index;
mod key;
mod side;
mod table;
mod turns;

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
#[cfg(test)]
mod tests;

pub use cadence::Cadence;
pub use connection::{is_client_syn, Flow, IDLE_TIMEOUT};
pub use direction::PeerWindow;
pub use endpoint::Endpoint;
pub use guess::{ClientGuess, MssSource, PathSource};
pub use key::{owner_hash, FlowKey, HashedKey};
pub use side::Side;
pub use table::FlowTable;
// The values live below the decoder; re-exported where the flow table's users look for them.
pub use crate::units::{SeqNumber, Span, Timestamp};
