//! The values the wire and the capture are written in, below both the decoder and the flow
//! table: sequence numbers ([`SeqNumber`], compared modulo 2^32, RFC 9293 §3.4 and RFC 1982)
//! and capture times ([`Timestamp`]) with the spans between them ([`Span`]).

mod seq;
mod time;

pub use seq::SeqNumber;
pub use time::{Span, Timestamp};
