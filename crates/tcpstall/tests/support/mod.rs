//! Plumbing shared by the integration tests: child processes that never outlive a test, the
//! first line a server prints (its port) read with a time bound, root required, the lab run,
//! a self-signed certificate, a build script run in the tests' build directory, Python's
//! http.server (python_http.rs), a container's cgroup (cgroup.rs), the process tests' fixtures and servers (process.rs),
//! a C client whose writes' call sites are known (call_site.rs).

#![allow(dead_code)] // each test binary uses its own part of this module

pub mod call_site;
pub mod cgroup;
pub mod process;
pub mod python_http;
pub mod tcpdump;

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The file where skipped tests are listed, one line each, when the run names one
/// (`scripts/test` sets it and counts its lines in the closing line's skipped count).
pub const SKIPPED_LIST: &str = "TCPSTALL_SKIPPED";

/// Says that the running test (or the part of it named in `why`) cannot run here and why, on
/// standard error and in the [`SKIPPED_LIST`] file: a test that returns early is counted as
/// skipped, never as passed in silence.
pub fn skip(why: impl std::fmt::Display) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let binary = std::env::args()
        .next()
        .map(|a| {
            let name = Path::new(&a)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or(a);
            // Cargo's test binaries end in `-HASH`.
            match name.rsplit_once('-') {
                Some((stem, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => stem.into(),
                _ => name,
            }
        })
        .unwrap_or_default();
    let line = format!("{binary}::{test}: {why}");
    eprintln!("SKIPPED {line}");
    if let Some(list) = std::env::var_os(SKIPPED_LIST) {
        use std::io::Write;
        // One write of one line to a file opened for appending: test binaries and threads
        // appending at once do not interleave within a line.
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(list)
        {
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
}

/// A directory of the test's own under the system's temporary one, emptied when made and
/// removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// `tcpstall-test-NAME-PID`: tests running at once name theirs apart.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("tcpstall-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch directory");
        Scratch(dir)
    }

    /// `file` in it.
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A turn that waited for the 40 ms delayed-ACK timer lasts at least this many ms: the rule's
/// threshold, the timer's floor less its margin (`tcp_rules::STALL_THRESHOLD`).
pub const STALL_MIN_MS: f64 = tcpstall::tcp_rules::STALL_THRESHOLD.as_millis() as f64;
/// A turn no timer held stays under this many ms (`tcp_rules::CLEAN_BOUND`).
pub const NO_STALL_MAX_MS: f64 = tcpstall::tcp_rules::CLEAN_BOUND.as_millis() as f64;

/// The stall rule as the lab writes it: `>= 30 ms`.
pub fn stall_rule_text() -> String {
    format!(">= {STALL_MIN_MS} ms")
}

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
    let (child, line) = spawn_printing_line(command, what);
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{what} printed {line:?}, not a port"));
    (child, port)
}

/// Starts `command` (standard error discarded) and reads the first line it prints within
/// 10 s, its end of line trimmed; `what` names the program in the failure.
pub fn spawn_printing_line(command: &mut Command, what: &str) -> (KillOnDrop, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("{what} cannot start ({err}): see scripts/install-deps"));
    let stdout = child.stdout.take().expect("piped stdout");
    let child = KillOnDrop(child);
    let line = first_line_within(stdout, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("{what} printed nothing within 10 s"));
    (child, line.trim_end().to_string())
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

/// `tcpstall lab ARGS`, run to its end: its status and output, whatever they are. Whatever
/// they are, the run leaves none of its network namespaces behind (`--rtt` creates two).
pub fn lab(args: &[&str]) -> std::process::Output {
    let child = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .arg("lab")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tcpstall binary runs");
    let pid = child.id();
    let out = child.wait_with_output().expect("tcpstall lab finishes");
    assert_eq!(
        namespaces_of(pid),
        Vec::<String>::new(),
        "lab {args:?} left namespaces behind"
    );
    out
}

/// Namespaces left by the lab process `pid` (`tcpstall-lab-<pid>-client` / `-server` /
/// `-path`).
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list runs");
    let prefix = format!("tcpstall-lab-{pid}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with(&prefix))
        .map(str::to_string)
        .collect()
}

/// nginx serving the files of `root` on `port` in one process (master_process off: killing
/// it leaves no worker behind), `sendfile on`, with `tcp_nodelay` as given; its configuration
/// and logs in `root` too.
pub fn nginx_static(root: &Path, port: u16, tcp_nodelay: &str) -> KillOnDrop {
    let conf = root.join(format!("nginx-{port}.conf"));
    let r = root.display();
    std::fs::write(
        &conf,
        format!(
            "daemon off; master_process off; worker_processes 1;\n\
             error_log {r}/nginx-error.log; pid {r}/nginx-{port}.pid;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log off; sendfile on; tcp_nodelay {tcp_nodelay}; keepalive_timeout 30;\n\
             client_body_temp_path {r}; proxy_temp_path {r}; fastcgi_temp_path {r};\n\
             uwsgi_temp_path {r}; scgi_temp_path {r};\n\
             server {{ listen 127.0.0.1:{port}; root {r}; }} }}\n"
        ),
    )
    .expect("write nginx.conf");
    Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(root)
        .stderr(Stdio::null())
        .spawn()
        .map(KillOnDrop)
        .expect("nginx must be installed (nginx-light, scripts/install-deps)")
}

/// `tcpstall sockets ARGS --json` (inside network namespace `ns`, if given), which must
/// succeed: its rows.
pub fn sockets_json(ns: Option<&str>, args: &[&str]) -> Vec<serde_json::Value> {
    let out = command_in(ns, env!("CARGO_BIN_EXE_tcpstall"))
        .arg("sockets")
        .args(args)
        .arg("--json")
        .output()
        .expect("the tcpstall binary runs");
    assert!(
        out.status.success(),
        "sockets {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("sockets JSON");
    rows.as_array().expect("an array of rows").clone()
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

/// `tcpstall lab --json ARGS`, which must succeed: its rows, each checked error-free.
pub fn lab_rows(args: &[&str]) -> Vec<serde_json::Value> {
    let report = lab_report(args);
    let rows = report["rows"].as_array().expect("rows").clone();
    for row in &rows {
        assert!(
            row["errors"].is_null(),
            "{}: {}",
            row_name(row),
            row["errors"]
        );
    }
    rows
}

/// A lab row's `scenario/variant`, for failure messages.
pub fn row_name(row: &serde_json::Value) -> String {
    format!("{}/{}", row["scenario"], row["variant"])
}

/// The row `scenario/variant` of `rows`.
pub fn lab_row<'a>(
    rows: &'a [serde_json::Value],
    scenario: &str,
    variant: &str,
) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["scenario"] == scenario && r["variant"] == variant)
        .unwrap_or_else(|| panic!("no row {scenario}/{variant}"))
}

/// Runs `scripts/NAME ARGS` with the tests' build directory as CARGO_TARGET_DIR (so that what
/// it builds reuses this build), its progress on stderr; the path it prints on its last line.
pub fn build_with_script(name: &str, args: &[&str]) -> std::path::PathBuf {
    let out = script(name)
        .args(args)
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

/// `scripts/NAME`, to be given its arguments, with the tests' build directory as
/// CARGO_TARGET_DIR (so that what it builds reuses this build).
pub fn script(name: &str) -> std::process::Command {
    use std::path::Path;
    // The binary under test is TARGET_DIR/release/tcpstall.
    let target_dir = Path::new(env!("CARGO_BIN_EXE_tcpstall"))
        .parent()
        .and_then(Path::parent)
        .expect("the binary sits in TARGET_DIR/release");
    let mut command = std::process::Command::new(repository().join("scripts").join(name));
    // Cargo gives the tests its package's CARGO_PKG_* and CARGO_MANIFEST_DIR; build scripts
    // (ring's) rebuild when those change, so the script gets the environment of a shell. The
    // profile's settings given to the test run (scripts/test) stay: the script's build then
    // shares the test run's artifacts.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_some_and(|k| {
            k.starts_with("CARGO_") && k != "CARGO_HOME" && !k.starts_with("CARGO_PROFILE_")
        }) {
            command.env_remove(key);
        }
    }
    command.env("CARGO_TARGET_DIR", target_dir);
    command
}

/// Whether the Rust standard library for `target` is installed (`rustup target add TARGET`).
pub fn has_rust_target(target: &str) -> bool {
    std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|sysroot| sysroot.join("lib/rustlib").join(target).is_dir())
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

/// The objects `scripts/build-bpf` builds: (name, the headers its stamp covers besides
/// NAME.bpf.c), from the script's own list.
pub fn bpf_objects() -> Vec<(String, Vec<String>)> {
    let root = repository();
    let script = std::fs::read_to_string(root.join("scripts/build-bpf")).expect("the script");
    let list = script
        .split_once("objects='")
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(list, _)| list)
        .expect("the object list in scripts/build-bpf");
    list.lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace().map(str::to_string);
            Some((words.next()?, words.collect()))
        })
        .collect()
}

/// The committed BPF object `bpf/NAME.bpf.o` is built from its sources (in bpf/, as
/// `scripts/build-bpf` lists them): its stamp is their hash as the script writes it and, where
/// clang-14 and libbpf-dev are installed, a fresh build of them is the same bytes.
pub fn assert_bpf_object_fresh(name: &str) {
    let root = repository();
    let bpf = root.join("bpf");
    let headers = bpf_objects()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, headers)| headers)
        .unwrap_or_else(|| panic!("scripts/build-bpf does not list {name}"));
    // The stamp scripts/build-bpf writes: SHA-256 over `sha256sum NAME.bpf.c HEADERS`.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "sha256sum {name}.bpf.c {} | sha256sum | cut -d' ' -f1",
            headers.join(" ")
        ))
        .current_dir(&bpf)
        .output()
        .expect("sh runs");
    let stamp = std::fs::read_to_string(bpf.join(format!("{name}.bpf.stamp"))).expect("the stamp");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        stamp.trim(),
        "bpf/{name}.bpf.c or its headers changed since bpf/{name}.bpf.o was built: run \
         scripts/build-bpf"
    );
    let has_clang = Command::new("sh")
        .args([
            "-c",
            "command -v clang-14 && test -f /usr/include/bpf/bpf_helpers.h",
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_clang {
        eprintln!("clang-14 or libbpf-dev not installed: bpf/{name}.bpf.o was not rebuilt");
        return;
    }
    let fresh = std::env::temp_dir().join(format!("tcpstall-{name}-{}.o", std::process::id()));
    let status = Command::new(root.join("scripts/build-bpf"))
        .arg(name)
        .arg(&fresh)
        .status()
        .expect("scripts/build-bpf runs");
    assert!(status.success(), "scripts/build-bpf {name} failed");
    let (built, committed) = (
        std::fs::read(&fresh).expect("the rebuilt object"),
        std::fs::read(bpf.join(format!("{name}.bpf.o"))).expect("the committed object"),
    );
    let _ = std::fs::remove_file(&fresh);
    assert!(
        built == committed,
        "bpf/{name}.bpf.o differs from a fresh build of its source: run scripts/build-bpf"
    );
}

/// strace attached to process `pid` (`strace -p`), once the target's TracerPid names it: the
/// strace process and its pid.
pub fn strace_attached(pid: &str) -> (KillOnDrop, String) {
    let strace = KillOnDrop(
        Command::new("strace")
            .args(["-p", pid, "-o", "/dev/null"])
            .stderr(Stdio::null())
            .spawn()
            .expect("strace runs (scripts/install-deps)"),
    );
    let strace_pid = strace.0.id().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tracer_of(pid).as_deref() != Some(strace_pid.as_str()) {
        assert!(Instant::now() < deadline, "strace did not attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    (strace, strace_pid)
}

/// The TracerPid of process `pid`, as /proc/PID/status has it.
pub fn tracer_of(pid: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim().to_string()))
}

/// A Python script for a network namespace: a client whose server's segments to it are
/// dropped (nft), so its second small write waits behind its first with nothing to release
/// it; then, per `ending`: `rto` (after 0.6 s the drop is lifted and the server writes, its
/// segment acknowledging; the client reads it), `close` or `reset` (the client closes after
/// 0.1 s, plainly or with SO_LINGER 0). With `wait`, it first waits for a line on stdin (a
/// tracer following it) before any socket. It prints the server's port.
pub fn held_behind_a_drop(ending: &str, wait: bool) -> String {
    let wait = if wait { "True" } else { "False" };
    format!(
        r#"
import socket, struct, subprocess, sys, time
if {wait}:
    sys.stdin.readline()
L = socket.socket(); L.bind(("127.0.0.1", 0)); L.listen(1)
lp = L.getsockname()[1]
c = socket.create_connection(("127.0.0.1", lp)); s, _ = L.accept()
nft = lambda *a: subprocess.run(["nft", *a], check=True)
nft("add", "table", "inet", "t")
nft("add chain inet t out {{ type filter hook output priority 0; }}")
nft(f"add rule inet t out tcp sport {{lp}} tcp dport {{c.getsockname()[1]}} drop")
c.send(b"a" * 10); c.send(b"b" * 10)
ending = "{ending}"
time.sleep(0.6 if ending == "rto" else 0.1)
if ending == "reset":
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
if ending != "rto":
    c.close()
nft("flush", "ruleset")
if ending == "rto":
    s.send(b"z"); c.recv(1)
time.sleep(0.2)
print(lp, flush=True)
"#
    )
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

/// `bin` without CAP_NET_RAW, so that it cannot capture: as root, run through setpriv with
/// the capability dropped from its inheritable and bounding sets; as any other user, as is
/// (it has none to drop, and may not change its bounding set).
pub fn without_net_raw(bin: &str) -> Command {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Command::new(bin);
    }
    let mut command = Command::new("setpriv");
    command.args(["--inh-caps=-net_raw", "--bounding-set=-net_raw", bin]);
    command
}

/// `bin ARGS` run as user nobody (setpriv), to its end; `None` (said on stderr) when the
/// tests do not run as root and cannot drop to another user.
pub fn as_nobody(bin: &str, args: &[&str]) -> Option<std::process::Output> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        skip("dropping privileges with setpriv needs root");
        return None;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin])
        .args(args)
        .output()
        .expect("setpriv runs");
    Some(out)
}

/// `tcpstall watch ARGS --metrics 127.0.0.1:0 --duration SECONDS` started and ready: the
/// running watch and its metrics address (host:port).
pub fn watch_with_metrics(args: &[&str], seconds: u32) -> (Collected, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
    command
        .arg("watch")
        .args(args)
        .args([
            "--metrics",
            "127.0.0.1:0",
            "--duration",
            &seconds.to_string(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let watch = Collected::new(command.spawn().expect("tcpstall runs"));
    let said = watch.stderr_until(
        "tcpstall: watching",
        Duration::from_secs(20),
        &format!("watch {args:?}"),
    );
    let addr = said
        .iter()
        .find_map(|l| l.split("metrics at http://").nth(1))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address in {said:?}"))
        .to_string();
    (watch, addr)
}

/// TCP states as /proc/net/tcp numbers them (`tcp_states.h`).
pub mod tcp_state {
    /// ESTABLISHED.
    pub const ESTABLISHED: u8 = 0x01;
    /// TIME_WAIT.
    pub const TIME_WAIT: u8 = 0x06;
    /// LISTEN.
    pub const LISTEN: u8 = 0x0A;
}

/// The states of this network namespace's TCP sockets (IPv4 and IPv6) whose local port is
/// `port`, from /proc/net/tcp and /proc/net/tcp6: seeing a socket opens no connection.
pub fn local_port_states(port: u16) -> Vec<u8> {
    let mut states = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local_port = fields
                .get(1)
                .and_then(|a| a.rsplit(':').next())
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            let state = fields.get(3).and_then(|s| u8::from_str_radix(s, 16).ok());
            if let (Some(p), Some(state)) = (local_port, state) {
                if p == port {
                    states.push(state);
                }
            }
        }
    }
    states
}

/// Waits up to 10 s for a socket on local port `port` in `state` ([`tcp_state`]); `what`
/// names it in the failure.
pub fn wait_for_socket(port: u16, state: u8, what: &str) {
    assert!(
        wait_until(Duration::from_secs(10), || local_port_states(port)
            .contains(&state)),
        "{what}: no socket on port {port} in state {state:#04x} within 10 s"
    );
}

/// Polls `done` every 10 ms until it holds (true) or `limit` has passed (false): how a test
/// waits for an event it can only observe.
pub fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The bytes this network namespace's established connections on local port `port` have
/// sent, as TCP_INFO counts them (`ss -ti`'s `bytes_sent`): what a server has answered.
pub fn bytes_sent_from(port: u16) -> u64 {
    let out = Command::new("ss")
        .args(["-tinH", "state", "established"])
        .arg(format!("( sport = :{port} )"))
        .output()
        .expect("ss runs (iproute2, scripts/install-deps)");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_sent:")?.parse::<u64>().ok())
        .sum()
}

/// Sends SIGINT (a terminal's Ctrl-C) to `child`, which the caller has not reaped yet.
pub fn interrupt(child: &Child) {
    signal(child.id(), libc::SIGINT).expect("SIGINT sent to the child");
}

/// Sends `signal` to process `pid`: one the test started and has not reaped (so the pid is
/// still its own), or a process of the test's own server. An error when it has gone.
pub fn signal(pid: u32, signal: libc::c_int) -> std::io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    // SAFETY: kill(2) has no memory preconditions; the pid is the caller's, as said above.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Waits up to 20 s until the connections on local port `port` have sent at least `bytes`
/// ([`bytes_sent_from`]): a server has answered that much.
pub fn wait_for_bytes_sent(port: u16, bytes: u64, what: &str) {
    assert!(
        wait_until(Duration::from_secs(20), || bytes_sent_from(port) >= bytes),
        "{what}: {} of {bytes} bytes sent on port {port} within 20 s",
        bytes_sent_from(port)
    );
}

/// The text a `--metrics` endpoint at `addr` (host:port) serves, headers included.
pub fn scrape(addr: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to the metrics");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    text
}

/// The value of the series `series` (its name and labels, exactly as served) in a scrape, 0
/// when absent.
pub fn series_value(scraped: &str, series: &str) -> u64 {
    scraped
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// Scrapes `addr` until `ready` holds for the text served (the counters are brought up to
/// date by the watch's own ticks), up to `limit`; the last text served either way.
pub fn scrape_until(addr: &str, limit: Duration, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let text = scrape(addr);
        if ready(&text) || Instant::now() >= deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The repository's root (scripts/, bpf/, packaging/), two levels above this package.
pub fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The public capture corpus: `TCPSTALL_CORPUS`, else `shared/corpus` beside the repository.
pub fn corpus_dir() -> PathBuf {
    match std::env::var_os("TCPSTALL_CORPUS") {
        Some(dir) => PathBuf::from(dir),
        None => repository().join("../shared/corpus"),
    }
}
