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

/// The width tables are fitted to: `COLUMNS` when set to a number, else the width of the
/// terminal on standard output, else 100 columns (a pipe, a file).
pub(crate) fn terminal_width() -> usize {
    if let Some(columns) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&c| c >= 20)
    {
        return columns;
    }
    // SAFETY: TIOCGWINSZ writes one winsize into the struct given; fd 1 may be anything, and
    // the call fails harmlessly on a non-terminal.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col >= 20 {
        usize::from(size.ws_col)
    } else {
        100
    }
}
