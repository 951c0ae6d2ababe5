//! Plumbing shared by the integration tests: child processes that never outlive a test, the
//! first line a server prints (its port) read with a time bound, root required, the lab run.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::io::{BufRead, BufReader, Read};
use std::process::Child;
use std::sync::mpsc;
use std::time::Duration;

/// A child process killed and reaped when the test ends, passing or failing.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line `output` (a child's piped stdout or stderr) prints, or `None` when nothing
/// comes within `limit`; the reading thread ends with the child.
pub fn first_line_within(output: impl Read + Send + 'static, limit: Duration) -> Option<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(output).read_line(&mut line);
        let _ = tx.send(line);
    });
    rx.recv_timeout(limit).ok()
}

/// Fails the test unless it runs as root; `needs` says what for (capabilities), in words.
pub fn require_root(needs: &str) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{needs}: run the tests as root (`sudo scripts/test`)"
    );
}

/// `tcpstall lab --json ARGS`, which must succeed: the whole report.
pub fn lab_report(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["lab", "--json"];
    all.extend_from_slice(args);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(&all)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("the tcpstall binary runs");
    assert!(
        out.status.success(),
        "tcpstall {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("lab --json prints JSON")
}
