//! Rendering results: the renderers of [`tcpstall_core::report`] and those of the verbs that
//! run on this host (lab, probe, sockets, trace, watch).

pub(crate) mod lab;
pub(crate) mod model;
mod pages;
pub(crate) mod probe;
pub(crate) mod sockets;
pub(crate) mod trace;
pub(crate) mod watch;

pub use tcpstall_core::report::*;

/// The HTML pages: the analysis page of the core and the pages of lab and probe.
pub mod html {
    pub(crate) use super::pages::lab_page;
    pub use super::pages::probe_page;
    pub use tcpstall_core::report::html::*;
}
