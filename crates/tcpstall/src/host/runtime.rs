//! The language runtime and server framework of a process, and the switch that stops its
//! writes waiting on Nagle in that program's own terms: a JVM flag, a handler attribute, the
//! line of code to add. The finding is plain data every report shows; reading it from a
//! process (`discover`) needs Linux's /proc.

use serde::Serialize;

on_linux! {
    mod discover;
    pub use discover::{runtime_of, RuntimeCache};
}

/// A process's runtime, the framework when it shows, and the fix in their terms (the JSON
/// `runtime` object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Runtime {
    /// The runtime: `CPython`, `Java (JVM)`, `Erlang/OTP`, `Ruby`, `Perl`, `Node.js`, `Go`, `.NET`.
    pub name: &'static str,
    /// Its version, where the executable's or a library's name or the runtime's release file
    /// says it.
    pub version: Option<String>,
    /// The server framework, where the process shows it: `http.server`,
    /// `com.sun.net.httpserver`, `inets`, `WEBrick`, `HTTP::Daemon`.
    pub framework: Option<&'static str>,
    /// The option, flag or line that sets TCP_NODELAY.
    pub fix: &'static str,
    /// Where it goes.
    #[serde(rename = "where")]
    pub place: &'static str,
}

impl Runtime {
    /// `CPython 3.11, http.server`.
    pub fn describe(&self) -> String {
        let mut text = self.name.to_string();
        if let Some(version) = &self.version {
            text.push(' ');
            text.push_str(version);
        }
        if let Some(framework) = self.framework {
            text.push_str(", ");
            text.push_str(framework);
        }
        text
    }

    /// The fix as advice: `for good, in the program (CPython 3.11, http.server):
    /// disable_nagle_algorithm = True; as a class attribute …`.
    pub fn advice(&self) -> String {
        format!(
            "for good, in the program ({}): {}; {}",
            self.describe(),
            self.fix,
            self.place
        )
    }
}
