//! The command lines of the verbs that run on this host's kernel (lab, probe, sockets, fix,
//! trace, watch), apart from the verbs: every system parses and documents them alike (`--help`,
//! completions, manual pages), also where the verbs themselves need Linux
//! (the stand-ins of `unsupported.rs`).

pub mod fix;
pub mod lab;
pub mod probe;
pub mod sockets;
pub mod trace;
pub mod watch;
