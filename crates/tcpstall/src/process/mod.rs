//! Seeing and changing what a running process does with its TCP sockets: `sockets` lists them with
//! their Nagle, cork and quick-ACK state, `fix` switches TCP_NODELAY on live, `trace` follows the
//! socket syscalls of a program and names write-write-read sequences.
//!
//! All three reach into another process the same two ways: `/proc` (which fds are sockets, the
//! process tree, the credentials that explain a refusal) and `pidfd_getfd` (a duplicate of the
//! process's own socket, so that getsockopt/setsockopt act on it); the kernel's TCP tables
//! (sock_diag netlink, `/proc/net/tcp`) only for what cannot be duplicated. Those mechanisms live in [`crate::host`], shared with
//! `watch` and `probe`.

pub mod bpf_iter;
pub mod fix;
pub mod fix_state;
pub mod host_sockets;
pub mod sockets;
pub mod trace;

mod events;
mod fd_probe;
mod fd_table;
pub(crate) mod kernel_trace;
mod launch;
mod pattern;
mod seccomp;
mod signals;
pub(crate) mod socket_model;
mod syscall_info;
mod syscalls;
mod tracee_memory;
mod tracer;

pub use crate::host::access::AccessError;
