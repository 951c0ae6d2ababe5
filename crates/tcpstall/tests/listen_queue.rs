//! A server whose accept queue overflows, on loopback, with real kernel sockets: the listener
//! drops SYNs and handshake ACKs (`sk_acceptq_is_full`), and the clients wait for their
//! retransmission timers. There is no loss on loopback: `probe` must name the server's accept
//! queue, never the network, and `analyze` of the capture must explain the timeouts as the
//! handshake the server did not take. The overflow is made certain, not raced: the server
//! (tests/fixtures/listen_queue/slow_accept.py) waits before accepting each connection.
//!
//! Needs root (the probe's capture, tcpdump on `lo`).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::process::{json_of, tcpstall};
use support::tcpdump::Tcpdump;
use support::{require_root, serial, spawn_printing_port, KillOnDrop, STALL_MIN_MS};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/listen_queue")
        .join(name)
}

/// The slow-accepting HTTP/1.0 server with `backlog`, waiting `delay_s` before each accept.
fn slow_server(backlog: u32, delay_s: f64) -> (KillOnDrop, u16) {
    spawn_printing_port(
        Command::new("python3")
            .arg(fixture("slow_accept.py"))
            .arg(backlog.to_string())
            .arg(delay_s.to_string()),
        "slow_accept.py",
    )
}

/// A file in the system's temporary directory, removed when the test ends.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!(
            "tcpstall-listen-queue-{tag}-{}.pcap",
            std::process::id()
        )))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// `probe --json` of the server on `port` with 16 connections and 32 requests, bounded.
fn probe(port: u16) -> Value {
    let url = format!("http://127.0.0.1:{port}/");
    let out = tcpstall(&[
        "probe",
        "--json",
        &url,
        "--connections",
        "16",
        "--requests",
        "32",
        "--timeout",
        "10",
        "--max-time",
        "40",
    ]);
    json_of(&out)
}

fn stalls(v: &Value, kind: &str) -> u64 {
    v["stalls"][kind].as_u64().unwrap_or(0)
}

/// A backlog of 1 and 16 connections at once: SYNs and handshake ACKs are dropped. The probe
/// names the accept queue with its backlog and the counters that rose, advises the backlog,
/// and never blames the network; a timer wait of at least the stall threshold exists.
#[test]
fn overflowing_accept_queue_is_the_culprit_not_the_network() {
    require_root("the probe's capture and tcpdump");
    let _serial = serial();
    let (_server, port) = slow_server(1, 0.02);
    let file = TempFile::new("probe");
    let capture = Tcpdump::start(&file.0, &["tcp", "port", &port.to_string()]);
    let v = probe(port);
    capture.stop_now();

    let queue = &v["listen_queue"];
    assert_eq!(queue["backlog"], 1, "{v}");
    assert_eq!(queue["command"], "python3", "{v}");
    assert!(queue["listen_overflows"].as_u64() >= Some(1), "{v}");
    assert_eq!(queue["blamed"], true, "{v}");
    assert_eq!(v["verdict"], "stall", "{v}");
    assert_eq!(v["culprit"], "server", "{v}");
    let why = v["explanation"].as_str().unwrap_or_default();
    assert!(why.contains("accept queue (backlog 1) overflowed"), "{why}");
    let advice = v["advice"].to_string();
    assert!(advice.contains("listen()"), "{advice}");
    assert!(!advice.contains("packet loss"), "{advice}");
    // The timer waits: a connect that waited for its SYN resent (1 s), or a request resent.
    let connects = &v["connect_times"];
    let waited = connects["waited_for_syn"].as_u64().unwrap_or(0);
    assert!(waited >= 1 || stalls(&v, "rto") >= 1, "{v}");
    if waited >= 1 {
        assert!(connects["max_ms"].as_f64() >= Some(STALL_MIN_MS), "{v}");
    }

    // The same traffic, read back from tcpdump's capture: the dropped SYNs are connect
    // stalls, and every timeout of a request is the handshake the listener did not take,
    // none a loss of the path.
    let a = json_of(&tcpstall(&["analyze", "--json", &file.0.to_string_lossy()]));
    let summary = &a["summary"]["stalls"];
    assert!(summary["syn_retry"].as_u64() >= Some(1), "{summary}");
    let events = a["events"].as_array().expect("events");
    for e in events.iter().filter(|e| e["kind"] == "rto") {
        assert_eq!(e["held_side"], "client", "{e}");
        assert_eq!(e["handshake_not_taken"]["by"], "listener", "{e}");
    }
    for e in events.iter().filter(|e| e["kind"] == "syn_retry") {
        assert!(e["delay_ms"].as_f64() >= Some(STALL_MIN_MS), "{e}");
    }
}

/// The same server with a backlog of 64: the burst waits in the queue, nothing is dropped,
/// no timer fires, and the probe puts nothing on the accept queue.
#[test]
fn large_backlog_makes_no_accept_queue_claim() {
    require_root("the probe's capture");
    let _serial = serial();
    let (_server, port) = slow_server(64, 0.02);
    let v = probe(port);
    let queue = &v["listen_queue"];
    assert_eq!(queue["backlog"], 64, "{v}");
    assert_eq!(queue["blamed"], false, "{v}");
    assert_eq!(stalls(&v, "rto"), 0, "{v}");
    assert_eq!(stalls(&v, "syn_retry"), 0, "{v}");
    assert_eq!(v["connect_times"]["waited_for_syn"], 0, "{v}");
    let why = v["explanation"].as_str().unwrap_or_default();
    assert!(!why.contains("accept queue"), "{why}");
}

/// A handshake ACK dropped, made certain: a client whose ACK waits (TCP_DEFER_ACCEPT on a
/// connecting socket), two clients that fill a backlog of 1, then the first client's request
/// carrying that ACK (tests/fixtures/listen_queue/late_ack_client.py). The capture on `lo`
/// shows the request resent by the timer; analyze says the listener dropped the handshake's
/// ACK, not the network, and advises the backlog.
#[test]
fn analyze_explains_a_dropped_handshake_ack() {
    require_root("tcpdump");
    let _serial = serial();
    let (_server, port) = slow_server(1, 1.0);
    let file = TempFile::new("late-ack");
    let capture = Tcpdump::start(&file.0, &["tcp", "port", &port.to_string()]);
    let client = Command::new("python3")
        .arg(fixture("late_ack_client.py"))
        .arg(port.to_string())
        .output()
        .expect("python3 runs");
    capture.stop_now();
    let said = String::from_utf8_lossy(&client.stdout);
    assert!(client.status.success(), "the clients ran: {said}");
    // The two that filled the queue are answered; the late one's request may still be in its
    // timer's backoff when the server gives up on it: its resends are what is judged.
    assert!(said.matches(" ok").count() >= 2, "{said}");

    let a = json_of(&tcpstall(&["analyze", "--json", &file.0.to_string_lossy()]));
    let rto: Vec<&Value> = a["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["kind"] == "rto")
        .collect();
    assert!(!rto.is_empty(), "the late request resent: {a}");
    for e in rto {
        assert_eq!(e["held_side"], "client", "{e}");
        assert!(e["delay_ms"].as_f64() >= Some(STALL_MIN_MS), "{e}");
        assert_eq!(e["handshake_not_taken"]["by"], "listener", "{e}");
    }
    let text = tcpstall(&["analyze", &file.0.to_string_lossy()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("dropped the handshake's ACK"), "{text}");
    assert!(text.contains("listen()"), "{text}");
    assert!(!text.contains("packet loss"), "{text}");
}
