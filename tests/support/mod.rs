//! Plumbing shared by the integration tests: child processes that never outlive a test, the
//! first line a server prints (its port) read with a time bound, root required, the lab run,
//! a self-signed certificate, a build script run in the tests' build directory, Python's
//! http.server (python_http.rs).

#![allow(dead_code)] // each test binary uses its own part of this module

pub mod python_http;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A child process killed and reaped when the test ends, passing or failing.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running child whose standard output a thread reads whole and whose standard error comes
/// line by line on a channel as it is printed; killed and reaped when dropped.
pub struct Collected {
    pub child: KillOnDrop,
    /// Its stderr lines, as they come.
    pub stderr: mpsc::Receiver<String>,
    stdout: JoinHandle<String>,
}

impl Collected {
    /// Takes over `child`, whose stdout and stderr are piped.
    pub fn new(mut child: Child) -> Collected {
        let mut stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        Collected {
            child: KillOnDrop(child),
            stderr: rx,
            stdout,
        }
    }

    /// The stderr lines up to the first that contains `needle`, which must come within
    /// `limit`; `what` names the child in the failure.
    pub fn stderr_until(&self, needle: &str, limit: Duration, what: &str) -> Vec<String> {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    seen.push(line);
                    if found {
                        return seen;
                    }
                }
                Err(_) => panic!("{what} did not say {needle:?} within {limit:?}: {seen:?}"),
            }
        }
    }

    /// Waits up to `limit` for the child to end by itself: its status, its whole stdout, and
    /// the stderr lines not taken yet.
    pub fn finish(mut self, limit: Duration, what: &str) -> (ExitStatus, String, Vec<String>) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.0.try_wait().expect("wait for the child") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{what} did not end within {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = self.stdout.join().expect("stdout reader");
        let stderr = self.stderr.iter().collect();
        (status, stdout, stderr)
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

/// `tcpstall lab ARGS`, run to its end: its status and output, whatever they are.
pub fn lab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .arg("lab")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the tcpstall binary runs")
}

/// `tcpstall lab --json ARGS`, which must succeed: the whole report.
pub fn lab_report(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = lab(&all);
    assert!(
        out.status.success(),
        "tcpstall lab {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("lab --json prints JSON")
}

/// Runs `scripts/NAME ARGS` with the tests' build directory as CARGO_TARGET_DIR (so that what
/// it builds reuses this build), its progress on stderr; the path it prints on its last line.
pub fn build_with_script(name: &str, args: &[&str]) -> std::path::PathBuf {
    use std::path::Path;
    // The binary under test is TARGET_DIR/release/tcpstall.
    let target_dir = Path::new(env!("CARGO_BIN_EXE_tcpstall"))
        .parent()
        .and_then(Path::parent)
        .expect("the binary sits in TARGET_DIR/release");
    let mut command = std::process::Command::new(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("scripts")
            .join(name),
    );
    // Cargo gives the tests its package's CARGO_PKG_* and CARGO_MANIFEST_DIR; build scripts
    // (ring's) rebuild when those change, so the script gets the environment of a shell.
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(|k| k.starts_with("CARGO_") && k != "CARGO_HOME")
        {
            command.env_remove(key);
        }
    }
    let out = command
        .args(args)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("scripts/{name} runs: {e}"));
    assert!(
        out.status.success(),
        "scripts/{name} failed: {}",
        out.status
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    let path = std::path::PathBuf::from(printed.lines().last().unwrap_or_default().trim());
    assert!(path.is_file(), "scripts/{name} printed no file: {printed}");
    path
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

/// One test of the binary at a time, for tests that measure latency: run side by side on two
/// cores they would slow each other and measure the machine, not the rule. Hold the guard for
/// the test's length.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A network namespace of its own, loopback up, deleted when the test ends; `tag` tells the
/// tests apart in its name.
pub struct Netns(pub String);

impl Netns {
    /// Creates it (needs root).
    pub fn new(tag: &str) -> Netns {
        let name = format!("tcpstall-{tag}-{}", std::process::id());
        let ns = Netns(name);
        ns.run(&["ip", "netns", "add", &ns.0], false);
        ns.run(&["ip", "link", "set", "lo", "up"], true);
        ns
    }

    /// Runs `args` (inside the namespace when `inside`), which must succeed.
    pub fn run(&self, args: &[&str], inside: bool) {
        let mut command = command_in(inside.then_some(self.0.as_str()), args[0]);
        let status = command.args(&args[1..]).status().expect("the command runs");
        assert!(status.success(), "{args:?}: {status}");
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .status();
    }
}

/// Why tcpstall's BPF programs cannot run here, or `None` when they can: not root, no BTF, or
/// `bin ARGS` (a short run of the verb that loads them) failed, with its error.
pub fn bpf_unavailable(bin: &str, args: &[&str]) -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: BPF needs CAP_BPF + CAP_PERFMON".into());
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    let out = Command::new(bin)
        .args(args)
        .output()
        .expect("the tcpstall binary runs");
    (!out.status.success()).then(|| {
        format!(
            "the kernel refused the programs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// `bin ARGS` run as user nobody (setpriv), to its end; `None` (said on stderr) when the
/// tests do not run as root and cannot drop to another user.
pub fn as_nobody(bin: &str, args: &[&str]) -> Option<std::process::Output> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: dropping privileges with setpriv needs root");
        return None;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin])
        .args(args)
        .output()
        .expect("setpriv runs");
    Some(out)
}
