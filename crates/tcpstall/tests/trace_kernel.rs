//! `tcpstall trace -p` and `trace -- CMD` through the kernel's tracepoints: real processes
//! (Python's http.server under keep-alive requests, the trace fixtures' split-writing client
//! and server) followed without ever being stopped: every thread's state is sampled from /proc
//! while the trace runs, and the target answers or finishes after it, whether the trace ends by
//! its time, by SIGINT or by the target's own end. A command is followed from its first
//! syscall, with the processes it forks, its exit status told; without CAP_BPF it is followed
//! with ptrace, which the report and a note name. The committed BPF object is checked against
//! its source.
//!
//! The live tests need root (CAP_BPF + CAP_PERFMON) and a kernel that lets BPF programs on
//! its BTF tracepoints load; where it does not they say why and pass without checking.

mod support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::python_http::PythonServer;
use support::{call_site, serial, spawn_printing_port, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/process")
        .join(name)
}

/// Why `trace -p` cannot take the tracepoints here, or `None` when it can.
fn tracepoints_unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root: BPF needs CAP_BPF + CAP_PERFMON".into());
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some("the kernel has no BTF (/sys/kernel/btf/vmlinux)".into());
    }
    // This test process itself, which the tracepoints follow without stopping it.
    let me = std::process::id().to_string();
    let out = Command::new(BIN)
        .args(["trace", "-p", &me, "--duration", "0.2", "--json"])
        .output()
        .expect("the tcpstall binary runs");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (report["method"] != "tracepoints").then(|| {
        format!(
            "trace -p fell back to ptrace: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

macro_rules! require_tracepoints {
    () => {
        if let Some(why) = tracepoints_unavailable() {
            support::skip(format!(
                "trace -p cannot use the kernel's tracepoints here: {why}"
            ));
            return;
        }
    };
}

/// Samples the state of every thread of a process from /proc every few milliseconds, until
/// stopped: any stopped ('t' traced, 'T' job control) state or tracer seen.
struct StateWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(u64, Vec<String>)>,
}

impl StateWatch {
    fn start(pid: u32) -> StateWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let (mut samples, mut bad) = (0u64, Vec::new());
            let give_up = Instant::now() + Duration::from_secs(60);
            while !flag.load(Ordering::SeqCst) && Instant::now() < give_up {
                let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
                    break; // the process has ended
                };
                for task in tasks.flatten() {
                    let path = task.path();
                    let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
                    let state = stat
                        .rsplit_once(')')
                        .and_then(|(_, r)| r.trim().chars().next());
                    let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
                    let tracer = status
                        .lines()
                        .find_map(|l| l.strip_prefix("TracerPid:"))
                        .map(str::trim);
                    if matches!(state, Some('t' | 'T')) || tracer.is_some_and(|t| t != "0") {
                        bad.push(format!("{}: {state:?}, tracer {tracer:?}", path.display()));
                    }
                    samples += 1;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            (samples, bad)
        });
        StateWatch { stop, thread }
    }

    /// Ends the sampling and asserts that no thread was ever seen stopped or traced.
    fn assert_never_stopped(self) {
        self.stop.store(true, Ordering::SeqCst);
        let (samples, bad) = self.thread.join().expect("state sampler");
        assert!(samples >= 20, "too few samples of the target: {samples}");
        assert!(bad.is_empty(), "the target was stopped or traced: {bad:?}");
    }
}

/// `tcpstall trace -p PID` started in the background, once it says it follows the target.
fn start_trace(pid: u32, args: &[&str]) -> (KillOnDrop, PathBuf) {
    let stderr = std::env::temp_dir().join(format!(
        "tcpstall-trace-kernel-{}-{pid}.err",
        std::process::id()
    ));
    let file = std::fs::File::create(&stderr).expect("stderr file");
    let child = Command::new(BIN)
        .args(["trace", "-p", &pid.to_string()])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(file)
        .spawn()
        .expect("the tcpstall binary runs");
    let child = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let text = std::fs::read_to_string(&stderr).unwrap_or_default();
        if text.contains("through the kernel's tracepoints (it is never stopped)") {
            break;
        }
        assert!(Instant::now() < deadline, "trace -p not ready: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, stderr)
}

/// Waits (at most `limit`) for the trace to end; its exit status, stdout and stderr.
fn finish(
    mut trace: KillOnDrop,
    stderr: PathBuf,
    limit: Duration,
) -> (Option<i32>, String, String) {
    let started = Instant::now();
    let status = loop {
        if let Some(status) = trace.0.try_wait().expect("wait for trace") {
            break status;
        }
        assert!(
            started.elapsed() < limit,
            "trace -p did not end in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    if let Some(mut pipe) = trace.0.stdout.take() {
        pipe.read_to_string(&mut out).expect("report");
    }
    let errors = std::fs::read_to_string(&stderr).unwrap_or_default();
    let _ = std::fs::remove_file(&stderr);
    (status.code(), out, errors)
}

fn report_of(out: &str, errors: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("not JSON ({e}): {out}\n{errors}"))
}

fn sockets(report: &Value) -> &Vec<Value> {
    report["sockets"].as_array().expect("sockets")
}

#[test]
fn an_http_server_is_followed_without_being_stopped_and_its_split_answers_named() {
    require_tracepoints!();
    let _serial = serial();
    let server = PythonServer::start();
    let pid = server.pid();
    let watch = StateWatch::start(pid);
    let (trace, stderr) = start_trace(pid, &["--duration", "4", "--json"]);
    // Two keep-alive connections: each answer after a connection's first waits for the
    // client's delayed ACK (header and body written apart).
    server.requests(8);
    // The second stays open past the trace: its ACKing end, this test, is named.
    let open = server.requests_kept_open(8);
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{errors}");
    let report = report_of(&out, &errors);
    assert_eq!(report["method"], "tracepoints", "{errors}");
    assert_eq!(report["pid"], pid);
    assert_eq!(report["interrupted"], true, "--duration ended it");
    let local = format!("127.0.0.1:{}", server.port);
    let answers: Vec<&Value> = sockets(&report)
        .iter()
        .filter(|s| s["local"] == local.as_str())
        .collect();
    assert_eq!(answers.len(), 2, "one socket per connection: {report:#}");
    for s in answers {
        assert_eq!(s["pid"], pid, "{s:#}");
        assert_eq!(s["nodelay"], false, "{s:#}");
        assert!(
            s["write_write_read"].as_u64().is_some_and(|n| n >= 5),
            "the held answers are named: {s:#}"
        );
        assert!(
            s["waits_over_30ms"].as_u64().is_some_and(|n| n >= 1),
            "{s:#}"
        );
        assert_eq!(s["example"]["writes"].as_array().map(Vec::len), Some(2));
        // The kernel saw the body's tail held as the write returned.
        assert!(s["kernel_holds"].as_u64().is_some_and(|n| n >= 1), "{s:#}");
    }
    let open_end = open
        .local_addr()
        .expect("the open connection's address")
        .to_string();
    let kept = sockets(&report)
        .iter()
        .find(|s| s["remote"] == open_end.as_str())
        .expect("the connection kept open");
    assert_eq!(
        kept["peer_process"]["pid"],
        std::process::id(),
        "the ACKing peer on this host: {kept:#}"
    );
    drop(open);
    watch.assert_never_stopped();
    // It runs on, answering.
    server.requests(2);
}

#[test]
fn the_hold_is_timed_by_the_kernel_not_by_the_idle_after_it() {
    require_tracepoints!();
    let _serial = serial();
    let server = support::process::SplitServer::start(&[]);
    let (trace, stderr) = start_trace(server.pid(), &["--duration", "30", "--json"]);
    let clients = support::process::idle_clients(server.addr(), 6);
    support::interrupt(&trace.0);
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{errors}");
    let report = report_of(&out, &errors);
    assert_eq!(report["method"], "tracepoints", "{errors}");
    support::process::assert_holds_told_from_idle(&report, &clients);
}

/// `python3 client.py PORT REQUESTS MODE` followed by `trace -p` from its first syscall: a
/// shell waiting on a FIFO is followed, then let go to exec the client (the same process). The
/// report, what the client says of its connections, and the client's pid; every thread of it
/// sampled all along, never stopped.
fn client_under_trace(port: u16, requests: usize, mode: &str) -> (Value, Value, u32) {
    let fifo = std::env::temp_dir().join(format!(
        "tcpstall-trace-kernel-{}-{mode}.fifo",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&fifo);
    let made = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success(), "mkfifo {}", fifo.display());
    let client = Command::new("sh")
        .args(["-c", r#"read -r _ < "$0"; exec "$@""#])
        .arg(&fifo)
        .arg("python3")
        .arg(fixture("client.py"))
        .args([&port.to_string(), &requests.to_string(), mode])
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let mut client = KillOnDrop(client);
    let pid = client.0.id();
    let watch = StateWatch::start(pid);
    let (trace, stderr) = start_trace(pid, &["--duration", "60", "--json"]);
    std::fs::write(&fifo, b"go\n").expect("let the client go");
    let _ = std::fs::remove_file(&fifo);
    let info_line = support::first_line_within(
        client.0.stderr.take().expect("client stderr"),
        Duration::from_secs(10),
    )
    .expect("the client names its connections");
    let info: Value = serde_json::from_str(&info_line).expect("client info is JSON");
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(40));
    let status = client.0.wait().expect("client ends");
    assert!(
        status.success(),
        "{mode}: the client ran to its end: {status}"
    );
    assert_eq!(code, Some(0), "{mode}: {errors}");
    watch.assert_never_stopped();
    let report = report_of(&out, &errors);
    assert_eq!(report["method"], "tracepoints", "{mode}");
    assert_eq!(
        report["interrupted"], false,
        "{mode}: the target's end ended it"
    );
    (report, info, pid)
}

/// The socket the client named, in the report.
fn client_socket<'a>(report: &'a Value, connection: &Value) -> &'a Value {
    sockets(report)
        .iter()
        .find(|s| s["fd"] == connection["fd"] && s["local"] == connection["local"])
        .unwrap_or_else(|| panic!("the client's socket {connection} is reported: {report:#}"))
}

/// The split server answering each request in one write (no stall of its own): the client's
/// writes are what a test looks at.
fn single_write_server() -> (KillOnDrop, u16) {
    let mut command = Command::new("python3");
    command
        .arg(fixture("split_server.py"))
        .arg("--single-write");
    spawn_printing_port(&mut command, "the python3 split server")
}

#[test]
fn a_client_writing_twice_is_named_by_fd_and_pid_and_its_end_ends_the_trace() {
    require_tracepoints!();
    let _serial = serial();
    let (_server, port) = single_write_server();
    // Header then body, each request held by Nagle until the server's delayed ACK.
    let (report, info, pid) = client_under_trace(port, 12, "split-blocking");
    let guilty = client_socket(&report, &info[0]);
    assert_eq!(guilty["pid"], pid);
    assert_eq!(guilty["remote"], format!("127.0.0.1:{port}").as_str());
    assert_eq!(guilty["sends"], 24, "{guilty:#}");
    assert!(
        guilty["write_write_read"].as_u64().is_some_and(|n| n >= 10),
        "{guilty:#}"
    );
    assert_eq!(guilty["example"]["writes"], serde_json::json!([60, 10]));
    assert!(guilty["fix"].as_str().is_some_and(|f| f.contains("writev")));
}

#[test]
fn every_way_of_sending_and_waiting_is_followed() {
    require_tracepoints!();
    let _serial = serial();
    let (_server, port) = single_write_server();
    // Waits named by select and epoll, a reader thread, sends through a dup, both parts in one
    // sendmmsg call (one send each, as the kernel makes them): all write-write-reads.
    for mode in [
        "split",
        "split-select",
        "split-epoll",
        "split-reader",
        "split-dup",
        "split-sendmmsg",
    ] {
        let (report, info, _) = client_under_trace(port, 8, mode);
        let guilty = client_socket(&report, &info[0]);
        assert!(
            guilty["write_write_read"].as_u64().is_some_and(|n| n >= 6),
            "{mode}: {guilty:#}"
        );
        assert_eq!(
            guilty["example"]["writes"],
            serde_json::json!([60, 10]),
            "{mode}"
        );
    }
    // One write per request, and split writes with TCP_NODELAY: nothing to name.
    for mode in ["single", "nodelay-split"] {
        let (report, info, _) = client_under_trace(port, 8, mode);
        let socket = client_socket(&report, &info[0]);
        assert_eq!(socket["write_write_read"], 0, "{mode}: {socket:#}");
        assert!(socket["sends"].as_u64().is_some_and(|n| n >= 8), "{mode}");
    }
}

#[test]
fn sigint_ends_the_trace_and_the_target_runs_on() {
    require_tracepoints!();
    let _serial = serial();
    let mut command = Command::new("python3");
    command.arg(fixture("split_server.py"));
    let (mut server, port) = spawn_printing_port(&mut command, "the python3 split server");
    let pid = server.0.id();
    let watch = StateWatch::start(pid);
    let (trace, stderr) = start_trace(pid, &["--duration", "60"]);
    let client = std::thread::spawn(move || {
        let mut stream =
            std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to the server");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        for _ in 0..4 {
            use std::io::Write;
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
                .expect("request");
            let mut reply = [0u8; 512];
            let n = stream.read(&mut reply).expect("reply");
            assert!(n > 0, "the server answers");
        }
    });
    client.join().expect("client thread");
    support::interrupt(&trace.0);
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{errors}");
    assert!(
        out.starts_with(&format!("traced pid {pid} (still running, never stopped)")),
        "{out}"
    );
    watch.assert_never_stopped();
    assert!(
        matches!(server.0.try_wait(), Ok(None)),
        "the server runs on"
    );
    let again = std::net::TcpStream::connect(("127.0.0.1", port));
    assert!(again.is_ok(), "the server still accepts");
}

#[test]
fn a_target_that_exits_mid_trace_is_said_to_have_exited() {
    require_tracepoints!();
    let short = Command::new("python3")
        .args(["-c", "import time; time.sleep(0.7)"])
        .spawn()
        .expect("python3 runs");
    let mut short = KillOnDrop(short);
    let started = Instant::now();
    let out: Output = Command::new(BIN)
        .args(["trace", "-p", &short.0.id().to_string(), "--duration", "30"])
        .output()
        .expect("tcpstall runs");
    let _ = short.0.wait();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("(exited during the trace)"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the trace outlived its target"
    );
}

#[test]
fn a_process_already_under_strace_is_followed_too() {
    require_tracepoints!();
    let _serial = serial();
    let target = KillOnDrop(Command::new("sleep").arg("20").spawn().expect("sleep runs"));
    let pid = target.0.id().to_string();
    let (_strace, strace_pid) = support::strace_attached(&pid);
    // ptrace allows one tracer; the tracepoints need none.
    let out = Command::new(BIN)
        .args(["trace", "-p", &pid, "--duration", "0.3", "--json"])
        .output()
        .expect("tcpstall runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        report_of(&String::from_utf8_lossy(&out.stdout), &stderr)["method"],
        "tracepoints"
    );
    assert_eq!(
        support::tracer_of(&pid),
        Some(strace_pid),
        "strace still traces it"
    );
}

/// Requests the C client of support::call_site makes under `trace -p`.
const CALL_SITE_REQUESTS: usize = 8;

/// `trace -p` (with `extra` arguments) following the C client of support::call_site, started
/// first and let go once followed, ended by SIGINT after the client's requests; its report
/// (`--json` among `extra`) or text, and the client's pid.
fn call_site_trace(extra: &[&str]) -> (String, u32) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = call_site::build(dir.path());
    let (_server, port) = call_site::request_server();
    let mut client = call_site::Client::start(&exe, port, CALL_SITE_REQUESTS);
    let pid = client.pid();
    let mut args = vec!["--duration", "60"];
    args.extend_from_slice(extra);
    let (trace, stderr) = start_trace(pid, &args);
    client.go();
    support::interrupt(&trace.0);
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(20));
    assert_eq!(code, Some(0), "{errors}");
    drop(client);
    (out, pid)
}

/// The client's socket in a `trace --json` report, its write-write-reads found.
fn call_site_socket(out: &str, pid: u32) -> Value {
    let report = report_of(out, "");
    assert_eq!(report["method"], "tracepoints");
    let socket = sockets(&report)
        .iter()
        .find(|s| s["pid"] == pid && s["write_write_read"].as_u64() > Some(0))
        .unwrap_or_else(|| panic!("the client's socket is reported: {report:#}"))
        .clone();
    assert!(
        socket["write_write_read"].as_u64() >= Some(CALL_SITE_REQUESTS as u64 - 2),
        "{socket:#}"
    );
    assert!(socket["waits_over_30ms"].as_u64() >= Some(1), "{socket:#}");
    socket
}

#[test]
fn the_example_names_the_held_write_and_the_one_before_to_their_lines() {
    require_tracepoints!();
    let _serial = serial();
    let (out, pid) = call_site_trace(&["--json"]);
    let socket = call_site_socket(&out, pid);
    let example = &socket["example"];
    assert!(
        example["hold_ms"].as_f64().is_some_and(|h| h >= 30.0),
        "{example:#}"
    );
    call_site::assert_both_writes_named(example);
    // The text names the same two lines.
    let (text, _) = call_site_trace(&[]);
    let (held, _) = call_site::held_lines();
    let (first, _) = call_site::first_lines();
    assert!(
        text.contains(&format!("  at: send_body (client.c:{held})")),
        "{text}"
    );
    assert!(
        text.contains(&format!("  after: send_header (client.c:{first})")),
        "{text}"
    );
}

#[test]
fn without_stacks_the_example_has_none() {
    require_tracepoints!();
    let _serial = serial();
    let (out, pid) = call_site_trace(&["--json", "--no-stacks"]);
    let socket = call_site_socket(&out, pid);
    for key in ["stack", "previous_stack", "stack_missing"] {
        assert!(socket["example"].get(key).is_none(), "{socket:#}");
    }
}

#[test]
fn the_committed_object_is_built_from_its_source() {
    support::assert_bpf_object_fresh("trace");
}

/// A held tail that the tail-loss probe sends, then an RTO before any ACK: the client writes
/// twice (its second write held by Nagle behind the first), the server's segments to it are
/// dropped, and it reads the server's answer once the drop is lifted 0.6 s later. The probe
/// (tcp_send_loss_probe, about 200 ms after the writes: tcp_schedule_loss_probe with one
/// segment out) sends the held tail whatever Nagle says; the RTO follows at least 200 ms
/// later (tcp_retransmit_timer: tcp_enter_loss, then the first segment resent, which moves
/// lsndtime). The hold ends at the probe's send, not at the RTO's nor at the read.
#[test]
fn a_tail_sent_by_the_loss_probe_before_an_rto_is_timed_by_the_probe() {
    require_tracepoints!();
    let _serial = serial();
    let ns = support::Netns::new("tp");
    ns.run(&["sysctl", "-qw", "net.ipv4.tcp_early_retrans=3"], true);
    let target = support::command_in(Some(&ns.0), "python3")
        .args(["-c", &support::held_behind_a_drop("rto", true)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut target = KillOnDrop(target);
    // `ip netns exec` execs the command: the pid is python's.
    let pid = target.0.id();
    let (trace, stderr) = start_trace(pid, &["--duration", "30", "--json"]);
    {
        use std::io::Write;
        let mut go = target.0.stdin.take().expect("target stdin");
        go.write_all(b"go\n").expect("let the target go");
    }
    let (code, out, errors) = finish(trace, stderr, Duration::from_secs(20));
    let mut printed = String::new();
    if let Some(mut pipe) = target.0.stdout.take() {
        pipe.read_to_string(&mut printed)
            .expect("the target's port");
    }
    assert!(target.0.wait().expect("target ends").success(), "{printed}");
    assert_eq!(code, Some(0), "{errors}");
    let report = report_of(&out, &errors);
    assert_eq!(report["method"], "tracepoints", "{errors}");
    let server = format!("127.0.0.1:{}", printed.trim());
    let client = sockets(&report)
        .iter()
        .find(|s| s["remote"] == server.as_str())
        .unwrap_or_else(|| panic!("the client's socket (to {server}) is reported: {report:#}"));
    let example = &client["example"];
    assert_eq!(example["writes"], serde_json::json!([10, 10]), "{client:#}");
    assert_eq!(example["hold_is_upper_bound"], false, "{client:#}");
    // The probe's send, before the RTO's resend (at least 200 ms after the probe) and the
    // read after the drop was lifted.
    let hold = example["hold_ms"].as_f64().unwrap_or(f64::NAN);
    assert!((30.0..400.0).contains(&hold), "{client:#}");
}

/// The pid of the first child of process `parent`, once it has one (at most 10 s).
fn first_child(parent: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().expect("a pid");
        }
        assert!(Instant::now() < deadline, "pid {parent} started no child");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What client.py says of its connections (a JSON line), found in the stderr it shares.
fn client_info(errors: &str) -> Value {
    let line = errors
        .lines()
        .find(|l| l.starts_with('['))
        .unwrap_or_else(|| panic!("the client names its connections: {errors}"));
    serde_json::from_str(line).expect("client info is JSON")
}

/// `tcpstall trace --json ARGS -- python3 client.py PORT REQUESTS MODE` run to its end: the
/// report, what the client says of its connections, tcpstall's stderr, and the client's pid,
/// sampled from its start, never stopped nor traced.
fn command_under_trace(
    args: &[&str],
    port: u16,
    requests: usize,
    mode: &str,
) -> (Value, Value, String, u32) {
    let trace = Command::new(BIN)
        .args(["trace", "--json"])
        .args(args)
        .args(["--", "python3"])
        .arg(fixture("client.py"))
        .args([&port.to_string(), &requests.to_string(), mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tcpstall binary runs");
    let tracer = trace.id();
    let trace = support::Collected::new(trace);
    let pid = first_child(tracer);
    let watch = StateWatch::start(pid);
    let (status, out, errors) = trace.finish(Duration::from_secs(40), "trace -- client.py");
    assert_eq!(status.code(), Some(0), "{mode}: {errors:?}");
    watch.assert_never_stopped();
    let errors = errors.join("\n");
    let info = client_info(&errors);
    (report_of(&out, &errors), info, errors, pid)
}

#[test]
fn a_command_is_followed_from_its_first_syscall_without_being_stopped() {
    require_tracepoints!();
    let _serial = serial();
    let (_server, port) = single_write_server();
    // Header then body from the very first request, each held by Nagle until the server's
    // delayed ACK.
    let (report, info, errors, pid) = command_under_trace(&[], port, 12, "split-blocking");
    assert_eq!(report["method"], "tracepoints", "{errors}");
    assert_eq!(report["exit_status"], 0, "{errors}");
    assert_eq!(report["interrupted"], false);
    assert!(!errors.contains("ptrace instead"), "{errors}");
    let guilty = client_socket(&report, &info[0]);
    assert_eq!(guilty["pid"], pid, "{guilty:#}");
    // Every send, the first request's included: followed from before the connect.
    assert_eq!(guilty["sends"], 24, "{guilty:#}");
    assert!(
        guilty["write_write_read"].as_u64().is_some_and(|n| n >= 11),
        "{guilty:#}"
    );
    assert!(
        guilty["waits_over_30ms"].as_u64().is_some_and(|n| n >= 5),
        "{guilty:#}"
    );
    assert_eq!(guilty["example"]["writes"], serde_json::json!([60, 10]));
    assert!(
        guilty["kernel_holds"].as_u64().is_some_and(|n| n >= 5),
        "{guilty:#}"
    );
}

#[test]
fn a_command_s_forked_children_are_followed_and_its_exit_status_told() {
    require_tracepoints!();
    let _serial = serial();
    let (_server, port) = single_write_server();
    // The shell forks the client (a command follows it), then exits 5.
    let script = format!(
        "python3 {} {port} 8 split-blocking; exit 5",
        fixture("client.py").display()
    );
    let out = Command::new(BIN)
        .args(["trace", "--json", "--", "sh", "-c", &script])
        .output()
        .expect("tcpstall runs");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{errors}");
    let report = report_of(&String::from_utf8_lossy(&out.stdout), &errors);
    assert_eq!(report["method"], "tracepoints", "{errors}");
    assert_eq!(report["exit_status"], 5, "{report:#}");
    let guilty = client_socket(&report, &client_info(&errors)[0]);
    assert_eq!(guilty["sends"], 16, "{guilty:#}");
    assert!(
        guilty["write_write_read"].as_u64().is_some_and(|n| n >= 7),
        "{guilty:#}"
    );
    // A command killed by a signal: 128 + its number.
    let out = Command::new(BIN)
        .args(["trace", "--json", "--", "sh", "-c", "kill -TERM $$"])
        .output()
        .expect("tcpstall runs");
    let report = report_of(
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(report["exit_status"], 128 + libc::SIGTERM, "{report:#}");
}

#[test]
fn a_command_outliving_its_duration_is_killed_not_left_running() {
    require_tracepoints!();
    let started = Instant::now();
    let out = Command::new(BIN)
        .args(["trace", "--duration", "0.5", "--", "sleep", "30"])
        .output()
        .expect("tcpstall runs");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{errors}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the trace waited for sleep"
    );
    // The text names the way it was followed, and the kill (128 + SIGKILL).
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("traced sleep 30 for ")
            && text
                .contains(", exit status 137, through the kernel's tracepoints (never stopped): "),
        "{text}"
    );
}

#[test]
fn without_cap_bpf_a_command_is_followed_with_ptrace_and_the_note_says_why() {
    require_tracepoints!();
    let _serial = serial();
    let (_server, port) = single_write_server();
    // Root without CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN (not in the bounding set, so not
    // in tcpstall's permitted set either); ptrace of its own child needs none of them.
    let out = Command::new("setpriv")
        .args([
            "--bounding-set=-bpf,-perfmon,-sys_admin",
            BIN,
            "trace",
            "--json",
            "--",
        ])
        .arg("python3")
        .arg(fixture("client.py"))
        .args([&port.to_string(), "6", "split-blocking"])
        .output()
        .expect("setpriv runs (util-linux)");
    let errors = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{errors}");
    assert!(
        errors.contains("following it with ptrace instead") && errors.contains("CAP_BPF"),
        "{errors}"
    );
    let report = report_of(&String::from_utf8_lossy(&out.stdout), &errors);
    assert_eq!(report["method"], "seccomp", "{errors}");
    let guilty = client_socket(&report, &client_info(&errors)[0]);
    assert!(
        guilty["write_write_read"].as_u64().is_some_and(|n| n >= 5),
        "{guilty:#}"
    );
}
