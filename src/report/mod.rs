//! Rendering results: terminal tables and stable JSON.

pub mod json;
pub mod text;

/// A duration for people: milliseconds with one decimal, seconds from 10 s up.
pub fn ms(ns: u64) -> String {
    if ns >= 10_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}
