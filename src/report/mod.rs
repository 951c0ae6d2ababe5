//! Rendering results: terminal tables and stable JSON.

pub mod json;
pub mod text;

/// Nanoseconds as milliseconds with one decimal, for people.
pub fn ms(ns: u64) -> String {
    format!("{:.1} ms", ns as f64 / 1e6)
}
