//! Rendering results: terminal tables and stable JSON.

pub(crate) mod charts;
pub(crate) mod groups;
pub(crate) mod html;
pub(crate) mod json;
pub(crate) mod lab;
pub(crate) mod ladder;
pub(crate) mod model;
pub(crate) mod probe;
pub(crate) mod sockets;
pub mod style;
pub(crate) mod text;
pub(crate) mod trace;
pub(crate) mod watch;

use std::io::{self, Write};

use crate::flow::Span;

/// Writes `text` to standard output and returns what went wrong (a reader that closed the
/// pipe included) instead of panicking as `print!` does.
pub fn print_stdout(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// A value for a table, or `?` when it could not be read.
pub fn or_unknown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "?".to_string(), |v| v.to_string())
}

/// A duration for people: milliseconds with one decimal, seconds from 10 s up.
pub fn ms(span: Span) -> String {
    if span >= Span::from_millis(10_000) {
        format!("{:.1} s", span.as_secs_f64())
    } else {
        format!("{:.1} ms", span.as_millis_f64())
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

/// `n` and the noun in the form that agrees with it: `1 flow`, `2 flows`, `0 flows`.
pub(crate) fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}
