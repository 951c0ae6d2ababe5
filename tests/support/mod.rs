//! Plumbing shared by the integration tests: child processes that never outlive a test, the
//! first line a server prints (its port) read with a time bound, root required, the lab run, a
//! self-signed certificate.

#![allow(dead_code)] // each test binary uses its own part of this module

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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

/// Starts `command` (a server that prints its port on its first line, standard error
/// discarded) and reads that port within 10 s; `what` names the server in the failure.
pub fn spawn_printing_port(command: &mut Command, what: &str) -> (KillOnDrop, u16) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("{what} cannot start ({err}): see scripts/install-deps"));
    let stdout = child.stdout.take().expect("piped stdout");
    let child = KillOnDrop(child);
    let line = first_line_within(stdout, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{what} printed no port within 10 s"));
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what} printed {line:?}, not a port"));
    (child, port)
}

/// `program`, inside network namespace `ns` when given (`ip netns exec` execs it: the pid is
/// the program's).
pub fn command_in(ns: Option<&str>, program: &str) -> Command {
    match ns {
        Some(ns) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns, program]);
            c
        }
        None => Command::new(program),
    }
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

/// A self-signed certificate for 127.0.0.1, made by openssl in `dir`.
pub fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl runs (scripts/install-deps)");
    assert!(status.success(), "openssl made a certificate");
    (cert, key)
}
