//! Rendering results: terminal tables and stable JSON.

pub mod charts;
pub mod flows;
pub mod groups;
pub mod html;
pub mod json;
pub mod ladder;
pub mod style;
pub mod text;
pub mod wrap;

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

/// `n` and the noun in the form that agrees with it: `1 flow`, `2 flows`, `0 flows`.
pub fn counted(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}
