//! Rendering results: the renderers of [`tcpstall_core::report`] and those of the verbs that
//! run on this host (lab, probe, sockets, trace, watch).

pub(crate) mod model;
mod pages;
pub(crate) mod probe;

// The renderers of the verbs that run on this host's kernel, which only Linux has.
on_linux! {
    pub(crate) mod call_sites;
    pub(crate) mod lab;
    pub(crate) mod sockets;
    pub(crate) mod trace;
    pub(crate) mod watch;
}

pub use tcpstall_core::report::*;

/// The HTML pages: the analysis page of the core and the pages of lab and probe.
pub mod html {
    on_linux! {
        pub(crate) use super::pages::lab_page;
    }
    pub use super::pages::probe_page;
    pub use tcpstall_core::report::html::*;
}

/// `text` with its long lines broken to the terminal's width ([`wrap::lines`]) when standard
/// output is a terminal or `COLUMNS` is set; as it is into a pipe or a file, where each finding
/// stays on one line for grep.
pub(crate) fn fit_prose(text: String) -> String {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() || std::env::var_os("COLUMNS").is_some() {
        wrap::lines(&text, terminal_width())
    } else {
        text
    }
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
    match console::Term::stdout().size_checked() {
        Some((_rows, columns)) if columns >= 20 => usize::from(columns),
        _ => 100,
    }
}
