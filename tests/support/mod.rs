//! Plumbing shared by the integration tests: child processes that never outlive a test, and
//! the first line a server prints (its port) read with a time bound.

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
