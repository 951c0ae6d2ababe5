//! `tcpstall probe`'s verdict says only what the evidence shows: a server that takes its own
//! time and answers in one write (TCP_NODELAY) is `slow`, never a stall; a server that closes
//! each kept-alive connection is reconnected to; HTTP error answers are errors; Ctrl-C keeps
//! the work; two causes are both named. Real servers on loopback, started here, stopped after.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{spawn_printing_port, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// `tcpstall probe ARGS`, with CAP_NET_RAW dropped when `no_net_raw` (and root).
fn probe_command(no_net_raw: bool, args: &[&str]) -> Command {
    let mut command = if no_net_raw && is_root() {
        let mut c = Command::new("setpriv");
        c.args(["--inh-caps=-net_raw", "--bounding-set=-net_raw", BIN]);
        c
    } else {
        Command::new(BIN)
    };
    command.arg("probe").args(args);
    command
}

fn run(no_net_raw: bool, args: &[&str]) -> Output {
    probe_command(no_net_raw, args)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs")
}

/// `probe --json ARGS`: exit status and the JSON.
fn probe_json(no_net_raw: bool, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run(no_net_raw, &all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "probe --json prints JSON ({err}): {} {stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), v, stderr)
}

/// A Python fixture server that prints its port.
fn python(script: &str, args: &[&str]) -> (KillOnDrop, u16) {
    spawn_printing_port(
        Command::new("python3").arg(fixture(script)).args(args),
        script,
    )
}

#[test]
fn a_server_taking_its_own_time_in_one_write_is_never_a_stall() {
    // Node's http module behind a handler that works 42-400 ms, then one write with
    // TCP_NODELAY: waits shaped like a delayed ACK (42 ms) or the cork timer (200 ms) with no
    // hold anywhere.
    for think in ["42", "60", "150", "200", "400"] {
        let (_server, port) = python("probe/think_server.py", &[think]);
        let target = format!("http://127.0.0.1:{port}/");
        for no_net_raw in [false, true] {
            let (code, v, err) =
                probe_json(no_net_raw, &["--requests", "6", "--fail-on-stall", &target]);
            let what = format!("think {think} ms, no_net_raw {no_net_raw}: {v} {err}");
            assert_eq!(code, 0, "{what}");
            assert_eq!(v["verdict"], "slow", "{what}");
            assert_eq!(v["culprit"], Value::Null, "{what}");
            assert_eq!(v["stalls"]["cork_timer"], 0, "{what}");
            assert_eq!(v["stalls"]["nagle_delayed_ack"], 0, "{what}");
            assert_eq!(v["upstream"], Value::Null, "{what}");
            assert!(
                v["server_time"]["p50_ms"].as_f64() >= Some(support::STALL_MIN_MS),
                "{what}"
            );
            assert_eq!(v["requests"], 6, "{what}");
        }
    }
}

#[test]
fn a_server_closing_each_connection_unannounced_is_reconnected_to() {
    // One answer per connection, then a close without `Connection: close`: curl and
    // http.client open a new connection and go on; so does the probe, and says so.
    let (_server, port) = python("probe/think_server.py", &["0", "--close"]);
    let target = format!("http://127.0.0.1:{port}/");
    let (code, v, err) = probe_json(false, &["--requests", "25", &target]);
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["requests"], 25, "{v}");
    assert_eq!(v["errors"].as_array().map(Vec::len), Some(0), "{v}");
    assert!(v["reconnects"].as_u64() >= Some(20), "{v}");
    assert!(v["connections"].as_u64() >= Some(21), "{v}");
    assert!(
        v["notes"].to_string().contains("on a new connection"),
        "{v}"
    );
    let out = run(false, &["--requests", "5", &target]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("so far"), "{text}");
}

#[test]
fn ctrl_c_prints_what_was_answered_and_exits_130() {
    // 200 requests of 20 ms each: about 4 s, interrupted once the server has answered some
    // (its answers are about 100 bytes each).
    let (_server, port) = python("probe/think_server.py", &["20"]);
    let target = format!("http://127.0.0.1:{port}/");
    for json in [false, true] {
        let mut args = vec!["--requests", "200"];
        if json {
            args.push("--json");
        }
        args.push(&target);
        let child = probe_command(false, &args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpstall runs");
        support::wait_for_bytes_sent(port, 500, "the server");
        support::interrupt(&child);
        let started = std::time::Instant::now();
        let out = child.wait_with_output().expect("wait for the probe");
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(130), "{stdout}");
        if json {
            let v: Value = serde_json::from_str(&stdout).expect("JSON");
            assert_eq!(v["interrupted"], true, "{v}");
            let answered = v["requests"].as_u64().unwrap_or(0);
            assert!((1..200).contains(&answered), "{v}");
            assert_eq!(v["requests_asked"], 200, "{v}");
        } else {
            assert!(stdout.contains("of 200 requests answered"), "{stdout}");
            assert!(stdout.contains("interrupted by Ctrl-C"), "{stdout}");
            assert!(stdout.contains("latency: p50"), "{stdout}");
        }
    }
}

/// A directory with index.html for http_server.py, removed when dropped.
struct WebRoot(PathBuf);

impl WebRoot {
    fn new(name: &str) -> WebRoot {
        let dir = std::env::temp_dir().join(format!(
            "tcpstall-probe-verdicts-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        std::fs::write(dir.join("index.html"), "hello\n").expect("write a file");
        WebRoot(dir)
    }
}

impl Drop for WebRoot {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn two_causes_are_both_named_in_order_of_cost_with_their_advice() {
    // CPython's http.server: header and body in two writes (Nagle x our delayed ACK) and a
    // listen backlog of 5 that 16 connections at once overflow (SYN resends).
    let _serial = support::serial();
    let root = WebRoot::new("two-causes");
    let (server, port) = python(
        "probe/http_server.py",
        &[root.0.to_str().expect("a UTF-8 path")],
    );
    let pid = server.0.id();
    let target = format!("http://127.0.0.1:{port}/index.html");
    let (code, v, err) = probe_json(
        false,
        &["--connections", "16", "--requests", "200", &target],
    );
    assert_eq!(code, 0, "{v} {err}");
    assert_eq!(v["verdict"], "stall", "{v}");
    let causes = v["causes"].as_array().expect("causes");
    let kinds: Vec<&str> = causes.iter().filter_map(|c| c["kind"].as_str()).collect();
    assert_eq!(kinds.len(), 2, "{v}");
    assert!(
        kinds.contains(&"listen_queue") && kinds.contains(&"nagle_delayed_ack"),
        "{v}"
    );
    assert!(
        causes[0]["lost_ms"].as_f64() >= causes[1]["lost_ms"].as_f64(),
        "{v}"
    );
    let advice = v["advice"].to_string();
    assert!(advice.contains("TCP_NODELAY"), "{v}");
    assert!(
        advice.contains(&format!("tcpstall fix {pid} --port {port}")),
        "{v}"
    );
    assert!(advice.contains("--yes"), "{v}");
    assert!(advice.contains("listen()"), "{v}");
    // The server's pid is known: no placeholder for it (the client's host's line keeps one:
    // the client is whatever program the probe stands in for).
    assert!(!advice.contains("tcpstall fix PID --port"), "{v}");
    // The counters agree with the connects line.
    let waited = v["connect_times"]["waited_for_syn"].as_u64().unwrap_or(0);
    assert!(waited >= 1, "{v}");
    assert!(v["stalls"]["syn_retry"].as_u64() >= Some(waited), "{v}");
}

/// redis-server on a free port, without persistence, once it accepts.
fn redis_server() -> (KillOnDrop, u16) {
    for _ in 0..3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut child = KillOnDrop(
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server is installed (scripts/install-deps)"),
        );
        let started = std::time::Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return (child, port);
            }
            if child.0.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("redis-server did not start listening");
}

#[test]
fn a_split_request_has_no_pacing_block_and_batches_are_counted_one_way() {
    let (server, port) = python("probe/think_server.py", &["0"]);
    let target = format!("http://127.0.0.1:{port}/");
    let out = run(
        false,
        &[
            "--split-request",
            "--method",
            "POST",
            "--body-size",
            "100",
            &target,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("ACK pacing"), "{text}");
    assert!(!text.contains("batches of 1"), "{text}");
    // The server's delayed-ACK cap names its pid in a command that pastes as it stands: the
    // words about the process come after it, not in its middle.
    let pid = server.0.id();
    assert!(text.contains("culprit: client"), "{text}");
    assert!(
        text.contains(&format!(
            "tcpstall fix {pid} --delack-max 5ms (pid {pid}, python3"
        )),
        "{text}"
    );
    assert!(!text.contains(") --delack-max"), "{text}");

    let (_redis, port) = redis_server();
    let target = format!("redis://127.0.0.1:{port}");
    let out = run(
        false,
        &[
            "--pipeline",
            "16",
            "--connections",
            "4",
            "--requests",
            "100",
            &target,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("100 of 100 batches of 16 = 1600 requests"),
        "{text}"
    );
    // Every count of requests in the text uses the same wording.
    assert!(!text.contains(" 200 requests"), "{text}");
    if text.contains("TCP_NODELAY re-run") {
        assert!(
            text.contains("re-run: 100 batches of 16 = 1600 requests"),
            "{text}"
        );
    }
}

#[test]
fn a_run_that_ends_in_an_error_never_prints_a_plain_clean_verdict() {
    // Three answers, then the server closes in the middle of the fourth: exit 2, and the
    // verdict line says the run ended early.
    let (_server, port) = python("probe/bad_server.py", &["close-mid", "3"]);
    let out = run(false, &[&format!("http://127.0.0.1:{port}/index.html")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let first = text.lines().next().unwrap_or("");
    assert!(first.contains("3 of 20 requests answered"), "{text}");
    assert!(
        first.ends_with("so far (the run ended early: see the error below)"),
        "{text}"
    );
}

/// Whether `signal` is still pending for process `pid` (not yet delivered to a handler):
/// SigPnd (its threads) or ShdPnd (the process) in /proc/PID/status.
fn signal_pending(pid: u32, signal: libc::c_int) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let bit = 1u64 << (signal - 1);
    status
        .lines()
        .filter_map(|l| l.strip_prefix("SigPnd:").or(l.strip_prefix("ShdPnd:")))
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & bit != 0)
}

#[test]
fn a_repeated_sigint_is_one_interruption_and_the_report_still_prints() {
    // `timeout -s INT 3 tcpstall probe …` signals the probe, then its whole process group:
    // two SIGINTs microseconds apart. The second, delivered once the first was handled, is
    // the same interruption: the report of the requests answered so far is printed, and the
    // re-run that never ran is said not run, not called another kind of stall.
    let root = WebRoot::new("two-sigints");
    let (_server, port) = python(
        "probe/http_server.py",
        &[root.0.to_str().expect("a UTF-8 path")],
    );
    let target = format!("http://127.0.0.1:{port}/index.html");
    let child = probe_command(false, &["--requests", "1000", &target])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpstall runs");
    let pid = child.id();
    // Some stalled requests first (each waits ~40 ms for the delayed ACK; an answer is about
    // 200 bytes).
    support::wait_for_bytes_sent(port, 1000, "the server");
    // Our own child, still running (it is reaped below).
    support::signal(pid, libc::SIGINT).expect("SIGINT sent");
    let sent = std::time::Instant::now();
    while signal_pending(pid, libc::SIGINT) && sent.elapsed() < Duration::from_secs(5) {
        std::thread::yield_now();
    }
    // The child is not reaped until wait_with_output.
    support::signal(pid, libc::SIGINT).expect("SIGINT sent");
    let out = child.wait_with_output().expect("wait for the probe");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stdout} {stderr}");
    assert!(stdout.contains("of 1000 requests answered"), "{stdout}");
    assert!(stdout.contains("interrupted by Ctrl-C"), "{stdout}");
    assert!(stdout.contains("verdict: stall"), "{stdout}");
    assert!(!stdout.contains("another kind"), "{stdout}");
    assert!(
        stdout.contains("confirmation: not run (interrupted by Ctrl-C"),
        "{stdout}"
    );
}

#[test]
fn an_error_answer_written_in_two_parts_is_an_error_not_a_stall() {
    // A 401 whose head and body leave in two writes on a kept-alive connection: the body
    // waits for the delayed ACK, but the answers are errors: verdict `error`, exit 2, as a
    // 401 written in one call.
    let (_server, port) = python("probe/bad_server.py", &["401-split"]);
    let target = format!("http://127.0.0.1:{port}/");
    let (code, v, err) = probe_json(false, &["--fail-on-stall", &target]);
    assert_eq!(code, 2, "{v} {err}");
    assert_eq!(v["verdict"], "error", "{v}");
    assert_eq!(v["http_errors"][0]["status"], 401, "{v}");
    assert!(err.contains("401"), "{err}");
    let out = run(false, &["--requests", "5", &target]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("verdict: error"), "{text}");
    assert!(!text.contains("verdict: stall"), "{text}");
}
