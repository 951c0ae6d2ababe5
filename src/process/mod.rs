//! Seeing and changing what a running process does with its TCP sockets.

pub mod fix;
pub mod sockets;
pub mod trace;
