//! The plain data each report renders, one file per verb: the verbs fill these in and hand them
//! over, and the renderers read them without knowing the verbs (this module imports no verb).

pub mod latency;
pub mod probe;

// The models of the verbs only Linux runs.
on_linux! {
    pub mod lab;
    pub mod sockets;
    pub mod trace;
    pub mod watch;
}

/// A process's runtime and framework, and their fix: every verb that names a process shows it.
pub use crate::host::runtime::Runtime;
