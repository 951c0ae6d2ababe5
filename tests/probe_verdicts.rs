//! `tcpstall probe`'s verdict says only what the evidence shows: a server that takes its own
//! time and answers in one write (TCP_NODELAY) is `slow`, never a stall; a server that closes
//! each kept-alive connection is reconnected to; HTTP error answers are errors; Ctrl-C keeps
//! the work; two causes are both named. Real servers on loopback, started here, stopped after.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
    // 200 requests of 20 ms each: about 4 s, interrupted after 1.5 s.
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
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: signals our own child, still running (it is reaped below).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
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
