//! The host layer: what tcpstall reads from and does to the machine it runs on, shared by the
//! verbs (`sockets`, `fix`, `trace`, `watch`, `probe`, `lab`) so that none reaches into another.
//! Processes and their sockets (`/proc`, `pidfd_getfd`, `sock_diag`), the kernel's facts and
//! sysctls, network namespaces, socket options, tracepoints, and who owns a socket.
//!
//! It knows nothing of the command line and imports no verb; `tests/layers.rs` checks that.
//! Elsewhere than Linux only [`runtime`]'s finding, plain data the reports show, is here.

pub mod runtime;

on_linux! {
    pub mod access;
    #[cfg(test)]
    pub(crate) mod c_layout;
    pub(crate) mod call_stack;
    pub(crate) mod kernel;
    pub(crate) mod kernel_btf;
    pub(crate) mod netns;
    pub(crate) mod owner;
    pub(crate) mod pidfd;
    pub(crate) mod privilege;
    pub(crate) mod procfs;
    pub(crate) mod record;
    pub(crate) mod sock_diag;
    pub(crate) mod sockopt;
    pub mod tcp_state;
    pub(crate) mod tracepoints;
    pub(crate) mod tree;
}
