//! tcpstall-core: reading, decoding and judging packet captures for TCP small-write stalls.
//!
//! The classic case is Nagle's algorithm (RFC 896, Linux `tcp_nagle_check`) holding a small
//! segment until the peer's delayed ACK (RFC 1122 §4.2.3.2, Linux `tcp_send_delayed_ack`)
//! releases it: 40 ms on Linux, 200 ms on Windows. This crate holds what needs no operating
//! system: the capture readers ([`capture`]), the decoder ([`decode`]), the flow table
//! ([`flow`]), the detector ([`detect`]), the ladder pictures ([`ladder`]) and the report
//! renderers ([`report`]). It builds for any target Rust supports, WebAssembly included.

pub mod analysis;
pub mod capture;
pub mod decode;
pub mod detect;
pub mod flow;
pub mod ladder;
pub mod report;
pub mod tcp_rules;
pub mod units;

pub use analysis::analyse_capture;
pub use flow::Side;
