//! Rendering results: terminal tables and stable JSON.

pub mod json;
pub mod lab;
pub mod sockets;
pub mod text;
pub mod trace;

use std::io::{self, Write};

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
pub fn ms(ns: u64) -> String {
    if ns >= 10_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}
