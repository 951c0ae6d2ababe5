//! `tcpstall analyze` on real captures: the lab's own capture of every catalogue row, tcpdump's
//! capture of the same traffic, the fixture captures of stalls and look-alikes (committed, and
//! regenerated live by tests/fixtures/analyze/make-fixtures.py), exit statuses, standard input
//! and damaged input.
//!
//! The live tests need root (tcpdump on `lo`, AF_PACKET for the lab, `ip netns` for `rto`),
//! as CI runs them.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::tcpdump::{all_closed, wait_for_listening, Tcpdump};
use support::{KillOnDrop, Scratch};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/analyze");

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run tcpstall")
}

fn analyze_json(file: &Path) -> Value {
    let out = Command::new(BIN)
        .args(["analyze", "--json"])
        .arg(file)
        .output()
        .expect("run tcpstall analyze");
    assert_eq!(
        out.status.code(),
        Some(0),
        "analyze {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("analyze --json prints JSON")
}

/// (kind, held_side) → count, for the events of flows whose server listens on `port`
/// (all flows when `port` is None).
fn verdicts(analysis: &Value, port: Option<u64>) -> BTreeMap<(String, String), u64> {
    let mut m = BTreeMap::new();
    for e in analysis["events"].as_array().expect("events") {
        if port.is_some_and(|p| e["server_port"].as_u64() != Some(p)) {
            continue;
        }
        let key = (
            e["kind"].as_str().unwrap_or("?").to_string(),
            e["held_side"].as_str().unwrap_or("?").to_string(),
        );
        *m.entry(key).or_insert(0) += 1;
    }
    m
}

/// The claims the analysis set apart on a server port, with their reasons.
fn undecided_on(analysis: &Value, port: u64) -> Vec<String> {
    analysis["undecided"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|u| {
                    u["flow"].as_str().is_some_and(|f| {
                        f.contains(&format!(":{port}-")) || f.ends_with(&format!(":{port}"))
                    })
                })
                .map(|u| format!("{} {} ({})", u["kind"], u["reason"], u["why"]))
                .collect()
        })
        .unwrap_or_default()
}

fn count(v: &BTreeMap<(String, String), u64>, kind: &str, side: &str) -> u64 {
    v.get(&(kind.to_string(), side.to_string()))
        .copied()
        .unwrap_or(0)
}

fn total(v: &BTreeMap<(String, String), u64>) -> u64 {
    v.values().sum()
}

/// What each fixture scenario must yield; `exact` for the committed files (their traffic is
/// fixed), a tolerance of one for live captures (the first or last turn may differ).
fn check_fixture(name: &str, analysis: &Value, exact: bool) {
    let v = verdicts(analysis, None);
    let requests = 10;
    let in_range = |n: u64, want: u64| {
        if exact {
            n == want
        } else {
            n + 1 >= want && n <= want
        }
    };
    match name {
        "split_response" => {
            let n = count(&v, "nagle_delayed_ack", "server");
            assert!(
                in_range(n, requests - 1),
                "{name}: {n} server stalls, {v:?}"
            );
            assert_eq!(
                total(&v),
                n,
                "{name}: only Nagle stalls of the server: {v:?}"
            );
            let e = &analysis["events"][0];
            assert_eq!(e["ack_side"], "client");
            assert_eq!(e["peer_stack"], "linux");
            // The flow is named client-server as in flows[]; the time is the released
            // packet's capture time (seconds since the Unix epoch).
            assert_eq!(e["flow"], analysis["flows"][0]["flow"]);
            let flow = e["flow"].as_str().unwrap_or_default();
            assert!(
                flow.starts_with("127.0.0.1:")
                    && flow.ends_with(&format!("-127.0.0.1:{}", e["server_port"])),
                "{flow}"
            );
            if exact {
                let packet = e["packet"].as_u64().unwrap_or(0) as usize;
                let want = record_time(
                    &fs::read(format!("{FIXTURES}/{name}.pcap")).expect("fixture"),
                    packet,
                );
                let time = e["time"].as_f64().unwrap_or(0.0);
                assert!(
                    (time - want).abs() < 1e-6,
                    "{name}: time {time}, packet {packet} at {want}"
                );
            }
            assert_eq!(
                e["writes"],
                serde_json::json!([143, 127]),
                "{name}: header then body"
            );
            let d = e["delay_ms"].as_f64().unwrap_or(0.0);
            let threshold = support::STALL_MIN_MS;
            assert!(
                d >= threshold,
                "{name}: a delayed-ACK stall lasts >= {threshold} ms, got {d}"
            );
        }
        "split_request" | "split_request_v6" => {
            let n = count(&v, "nagle_delayed_ack", "client");
            assert!(
                in_range(n, requests - 1),
                "{name}: {n} client stalls, {v:?}"
            );
            assert_eq!(total(&v), n, "{name}: {v:?}");
            assert_eq!(analysis["events"][0]["writes"], serde_json::json!([6, 7]));
        }
        "nodelay" | "think_time" | "think_oneway" | "think_200ms" => {
            assert_eq!(total(&v), 0, "{name} must not be flagged: {v:?}");
        }
        "cork" => {
            // Each answer leaves whole, one corked segment ~200 ms after its request: the
            // capture cannot tell the cork timer from the writer's own 200 ms (no full
            // segments went ahead of the tail), so every claim is set apart, none counted.
            assert_eq!(total(&v), 0, "{name}: {v:?}");
            let set_apart = analysis["undecided"].as_array().map_or(0, |claims| {
                claims
                    .iter()
                    .filter(|c| {
                        c["kind"] == "cork_timer"
                            && c["held_side"] == "server"
                            && c["reason"] == "cork_not_a_tail"
                    })
                    .count()
            });
            assert!(
                in_range(set_apart as u64, 5),
                "{name}: {set_apart} cork claims set apart, {}",
                analysis["undecided"]
            );
        }
        "cork_tail" => {
            // Each 70 KB answer: a full segment at once, the tail ~200 ms later on the cork
            // timer with nothing in flight. The first answers may be ACK-clocked otherwise.
            let n = count(&v, "cork_timer", "server");
            assert!((1..=5).contains(&n), "{name}: {n} cork claims, {v:?}");
            assert_eq!(total(&v), n, "{name}: {v:?}");
            for e in analysis["events"].as_array().into_iter().flatten() {
                if e["kind"] == "cork_timer" {
                    let d = e["delay_ms"].as_f64().unwrap_or(0.0);
                    assert!((190.0..=260.0).contains(&d), "{name}: {e}");
                }
            }
        }
        "rto_lost" => {
            // The request is dropped as it reaches the server; the capture on the client's
            // side holds the original and its resend on the timer: a lost segment, no D-SACK.
            assert_eq!(count(&v, "rto", "client"), 1, "{name}: {v:?}");
            assert_eq!(total(&v), 1, "{name}: {v:?}");
            assert_eq!(
                analysis["undecided"].as_array().map_or(0, Vec::len),
                0,
                "{name}: {}",
                analysis["undecided"]
            );
        }
        "zero_window" => {
            assert!(count(&v, "zero_window", "client") >= 1, "{name}: {v:?}");
            assert_eq!(count(&v, "nagle_delayed_ack", "client"), 0, "{name}: {v:?}");
            assert_eq!(count(&v, "rto", "client"), 0, "{name}: {v:?}");
        }
        "rto" => {
            // The server's packets are black-holed, its ACKs with them: the request arrived,
            // and the server's D-SACK of the resend says so (RFC 2883). The resend is set
            // apart as spurious, never claimed as a lost segment.
            assert_eq!(total(&v), 0, "{name}: {v:?}");
            let spurious = analysis["undecided"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| {
                    c["kind"] == "rto"
                        && c["held_side"] == "client"
                        && c["reason"] == "spurious_dsack"
                })
                .count();
            assert!(spurious >= 1, "{name}: {}", analysis["undecided"]);
            assert_eq!(count(&v, "nagle_delayed_ack", "client"), 0, "{name}: {v:?}");
            assert_eq!(count(&v, "nagle_delayed_ack", "server"), 0, "{name}: {v:?}");
            for e in analysis["events"].as_array().into_iter().flatten() {
                assert_eq!(
                    e["ack_side"],
                    Value::Null,
                    "{name}: the timer, not an ACK: {e}"
                );
            }
        }
        "windows_peer" => {
            // 5 requests; the first waits for a quick ACK held 160 ms by the relay, the others
            // for the 40 ms delayed ACK held 160 ms more: ~200 ms, named Windows.
            let n = count(&v, "nagle_delayed_ack", "client");
            assert!(in_range(n, 5), "{name}: {n} client stalls, {v:?}");
            assert_eq!(total(&v), n, "{name}: {v:?}");
            let windows = analysis["events"].as_array().map_or(0, |e| {
                e.iter().filter(|e| e["peer_stack"] == "windows").count()
            });
            assert!(
                windows + 1 >= n as usize,
                "{name}: {windows} of {n} named windows"
            );
        }
        other => panic!("no expectation for fixture {other}"),
    }
}

const FIXTURE_NAMES: [&str; 13] = [
    "split_response",
    "split_request",
    "split_request_v6",
    "nodelay",
    "think_time",
    "think_oneway",
    "think_200ms",
    "cork",
    "cork_tail",
    "zero_window",
    "rto",
    "rto_lost",
    "windows_peer",
];

#[test]
fn committed_fixtures_get_their_verdicts() {
    for name in FIXTURE_NAMES {
        let file = Path::new(FIXTURES).join(format!("{name}.pcap"));
        check_fixture(name, &analyze_json(&file), true);
    }
}

#[test]
fn live_fixture_captures_get_the_same_verdicts() {
    let dir = Scratch::new("fixtures");
    let out = Command::new("python3")
        .arg(Path::new(FIXTURES).join("make-fixtures.py"))
        .arg(&dir.0)
        .output()
        .expect("python3 must be installed (scripts/install-deps)");
    assert!(
        out.status.success(),
        "make-fixtures.py failed (needs root, tcpdump, ip netns): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in FIXTURE_NAMES {
        check_fixture(
            name,
            &analyze_json(&dir.path(&format!("{name}.pcap"))),
            false,
        );
    }
}

/// Runs the lab with reduced counts, capturing with both the lab and tcpdump.
fn lab_run(dir: &Scratch) -> (Value, Value, Value) {
    let lab_pcap = dir.path("lab.pcap");
    let dump_pcap = dir.path("tcpdump.pcap");
    let dump = Tcpdump::start(&dump_pcap, &["tcp"]);
    let out = Command::new(BIN)
        .args([
            "lab",
            "--requests",
            "16",
            "--connections",
            "4",
            "--writes",
            "4",
            "--json",
            "--capture",
        ])
        .arg(&lab_pcap)
        .output()
        .expect("run tcpstall lab");
    let lab: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    // The rows' servers: their connections are the ones to see closed in tcpdump's file.
    let ports: Vec<u16> = lab["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|row| row["server_port"].as_u64()?.try_into().ok())
        .collect();
    dump.stop_after_ports(&ports);
    assert!(
        out.status.success(),
        "lab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (lab, analyze_json(&lab_pcap), analyze_json(&dump_pcap))
}

#[test]
fn lab_catalogue_rows_found_in_both_captures() {
    let dir = Scratch::new("lab");
    let (lab, from_lab, from_tcpdump) = lab_run(&dir);
    let rows = lab["rows"].as_array().expect("lab rows");
    assert!(rows.len() >= 10, "the catalogue has rows");
    let mut stalled_rows = 0;
    for row in rows {
        let scenario = row["scenario"].as_str().unwrap_or("?");
        let variant = row["variant"].as_str().unwrap_or("?");
        let port = row["server_port"].as_u64().expect("server_port");
        let requests = row["requests"].as_u64().expect("requests");
        let name = format!("{scenario}/{variant} (port {port})");
        // A port a later row's server was given again (the kernel's bind to port 0 may reuse
        // one) holds two rows' flows: the verdicts by port cannot tell them apart.
        let flows_on_port = from_lab["flows"]
            .as_array()
            .expect("flows")
            .iter()
            .filter(|f| f["server_port"].as_u64() == Some(port))
            .count() as u64;
        if flows_on_port > row["connections"].as_u64().expect("connections") {
            eprintln!("{name}: {flows_on_port} flows on the row's port, shared with another row");
            continue;
        }
        let v = verdicts(&from_lab, Some(port));
        let stalled_requests = row["stalled_requests"].as_u64().expect("stalled_requests");
        if row["stalled"] == Value::Bool(true) && row["requests_per_second"].is_number() {
            // Requests in flight (pipeline, concurrent): one stall per connection and round
            // but the first, each holding several replies.
            let n = count(&v, "nagle_delayed_ack", "server");
            assert!(
                n > 0 && n < requests && total(&v) == n,
                "{name}: {n} stalls for {requests} requests: {v:?}"
            );
        } else if row["stalled"] == Value::Bool(true) {
            stalled_rows += 1;
            assert_eq!(row["connections"], 1, "{name}: stalled rows are keep-alive");
            let side = row["held_side"]
                .as_str()
                .expect("held_side of a stalled row");
            let n = count(&v, "nagle_delayed_ack", side);
            // The first exchange is quick-ACKed: about requests - 1 stalls.
            assert!(
                n + 2 >= requests && n < requests,
                "{name}: {n} stalls for {requests} requests: {v:?}"
            );
            // The lab's clock and the capture's see the same requests; a loaded machine may
            // still slow one request by 30 ms outside any hold (the process descheduled), which
            // the lab counts and the capture rightly does not claim. Never more claims than
            // slow requests.
            assert!(
                n <= stalled_requests && n + 1 >= stalled_requests,
                "{name}: one stall per request the lab measured {} ({stalled_requests}): {v:?}; \
                 set apart: {:?}",
                support::stall_rule_text(),
                undecided_on(&from_lab, port)
            );
            assert_eq!(
                total(&v),
                n,
                "{name}: only the held side's Nagle stalls: {v:?}"
            );
        } else {
            assert_eq!(stalled_requests, 0, "{name}: the lab saw no slow request");
            // The batched `nagle` rows: the client's writes paced by ACKs, one event per paced
            // connection, not a stall; no other row is paced.
            let paced = match (variant, row["requests_per_second"].is_number()) {
                ("nagle", true) => count(&v, "nagle_ack_paced", "client"),
                _ => 0,
            };
            if variant == "nagle" && scenario == "concurrent" && paced == 0 {
                // Pacing is proven only from releases within microseconds of their ACK; with
                // tcpdump capturing the same traffic, a loaded machine proves none (the lab's
                // own tests check the paced rows: lab_detector.rs).
                eprintln!("{name}: no paced write proven in this capture: {v:?}");
            }
            assert_eq!(
                total(&v) - paced,
                0,
                "{name}: a clean row must have no stall: {v:?}"
            );
        }
        // Pacing is compared apart: each connection's proof rests on a release within
        // microseconds of its ACK, and two capture sockets stamp the same packet that far
        // apart, so one capture may prove a connection's pacing that the other does not. Both
        // find it only on the client's side of the `nagle` rows, both on the concurrent one.
        let dump = verdicts(&from_tcpdump, Some(port));
        let (paced_dump, paced_lab) = (
            count(&dump, "nagle_ack_paced", "client"),
            count(&v, "nagle_ack_paced", "client"),
        );
        if variant == "nagle" && scenario == "concurrent" {
            // As for the lab's capture above: a machine loaded at that moment may delay every
            // release past the bound, and then neither capture proves the pacing (the kernel's
            // own count does, lab_detector.rs); said, not failed. What must never happen is
            // pacing found where there is none (below).
            if paced_dump == 0 {
                eprintln!("{name}: no paced write proven in tcpdump's capture: {dump:?}");
            }
        } else if variant != "nagle" {
            assert_eq!(paced_dump, 0, "{name}: nothing paced: {dump:?}");
        }
        let without_paced = |m: &BTreeMap<(String, String), u64>| {
            m.iter()
                .filter(|((kind, _), _)| kind != "nagle_ack_paced")
                .map(|(k, n)| (k.clone(), *n))
                .collect::<BTreeMap<_, _>>()
        };
        assert_eq!(
            without_paced(&dump),
            without_paced(&v),
            "{name}: tcpdump's capture of the same traffic gives the same verdicts"
        );
        assert_eq!(
            total(&dump) - paced_dump,
            total(&v) - paced_lab,
            "{name}: paced only on the client's side: {dump:?} {v:?}"
        );
    }
    assert!(
        stalled_rows >= 3,
        "the catalogue has stalled rows ({stalled_rows})"
    );
}

#[test]
fn exit_statuses() {
    let stalled = format!("{FIXTURES}/split_request.pcap");
    let clean = format!("{FIXTURES}/think_time.pcap");
    assert_eq!(run(&["analyze", &stalled]).status.code(), Some(0));
    assert_eq!(
        run(&["analyze", "--fail-on-stall", &stalled]).status.code(),
        Some(1)
    );
    assert_eq!(
        run(&["analyze", "--fail-on-stall", &clean]).status.code(),
        Some(0)
    );
    let missing = run(&["analyze", "/nonexistent/capture.pcap"]);
    assert_eq!(missing.status.code(), Some(2));
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(err.contains("cannot open"), "{err}");
    assert_eq!(
        err.matches("No such file or directory").count(),
        1,
        "the reason once: {err}"
    );
}

#[test]
fn a_file_given_twice_is_read_once() {
    let file = format!("{FIXTURES}/split_request.pcap");
    let once = analyze_json(Path::new(&file));
    let twice = run(&["analyze", "--json", &file, &file]);
    assert_eq!(twice.status.code(), Some(0));
    let err = String::from_utf8_lossy(&twice.stderr);
    assert!(err.contains("more than once"), "{err}");
    let twice: Value = serde_json::from_slice(&twice.stdout).expect("JSON");
    assert_eq!(twice["summary"]["packets"], once["summary"]["packets"]);
    assert_eq!(twice["summary"]["stalls"], once["summary"]["stalls"]);
}

/// Standard input is named so in the report, also when the pictures keep it in a file to read
/// it twice.
#[test]
fn reads_standard_input() {
    let bytes = fs::read(format!("{FIXTURES}/split_request.pcap")).expect("fixture");
    let page = tempfile::NamedTempFile::new().expect("temporary file");
    let html = page.path().to_str().expect("UTF-8 path");
    for extra in [&[][..], &["--html", html][..]] {
        let mut child = Command::new(BIN)
            .args(["analyze", "--json"])
            .args(extra)
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run tcpstall");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(&bytes)
            .expect("feed stdin");
        let out = child.wait_with_output().expect("wait");
        assert_eq!(out.status.code(), Some(0));
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(v["summary"]["stalls"]["nagle_delayed_ack"], 9);
        assert_eq!(v["summary"]["files"][0], "standard input", "{extra:?}");
    }
}

#[test]
fn text_report_names_the_pattern_and_the_fixes() {
    let out = run(&[
        "analyze",
        "--flows",
        &format!("{FIXTURES}/split_response.pcap"),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("9 nagle_delayed_ack"), "{text}");
    assert!(
        text.contains("the server writes the response in 2 writes (143 B, then 127 B)"),
        "{text}"
    );
    assert!(
        text.contains("1. write the response in one call on the server"),
        "{text}"
    );
    assert!(
        text.contains("2. set TCP_NODELAY on the server's socket"),
        "{text}"
    );
    assert!(
        text.contains("3. set TCP_QUICKACK on the client's socket"),
        "{text}"
    );
    // For the side that owns only the client: the lasting cap, said as a condition on the
    // client's host (the capture may come from elsewhere).
    assert!(
        text.contains(
            "4. if the server cannot be changed, cap the client's delayed ACK on Linux with \
             TCP_DELACK_MAX_US (6.13+): tcpstall fix PID --delack-max 5ms on the client's host \
             (lasting; costs more ACKs)"
        ),
        "{text}"
    );
    // Where neither program is in reach: the route the client's host uses to the server.
    assert!(
        text.contains(
            "5. if neither end's program can be changed, on the client's host, for every \
             connection of its route to the server: tcpstall fix --route 127.0.0.1 --quickack"
        ),
        "{text}"
    );
    assert!(
        text.contains("loopback"),
        "--flows shows the capture position: {text}"
    );
}

/// The delayed-ACK cap is a fix for Nagle held by a Linux peer's delayed ACK only: not for a
/// peer whose 200 ms delay names Windows, nor for the cork timer, an RTO or a zero window.
#[test]
fn the_delack_cap_is_offered_only_for_a_linux_delayed_ack() {
    let text = |fixture: &str| {
        let out = run(&["analyze", &format!("{FIXTURES}/{fixture}")]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let split = text("split_request.pcap");
    assert!(
        split.contains("4. if the client cannot be changed, cap the server's delayed ACK"),
        "{split}"
    );
    // cork.pcap and rto.pcap claim nothing (their claims are set apart): no fix offered.
    for fixture in [
        "windows_peer.pcap",
        "zero_window.pcap",
        "cork_tail.pcap",
        "rto_lost.pcap",
    ] {
        let report = text(fixture);
        assert!(report.contains("fix: 1."), "{fixture}: {report}");
        assert!(!report.contains("TCP_DELACK_MAX_US"), "{fixture}: {report}");
    }
    // The server ACKs like Windows: its own switches, not Linux's TCP_QUICKACK.
    let windows = text("windows_peer.pcap");
    assert!(
        windows.contains("SIO_TCP_SET_ACK_FREQUENCY") && !windows.contains("TCP_QUICKACK"),
        "{windows}"
    );
}

/// The committed fixture `name`.pcap rewritten as pcapng by editcap, in `dir`.
fn to_pcapng(dir: &Scratch, name: &str) -> PathBuf {
    let ng = dir.path(&format!("{name}.pcapng"));
    let status = Command::new("editcap")
        .args(["-F", "pcapng"])
        .arg(format!("{FIXTURES}/{name}.pcap"))
        .arg(&ng)
        .status()
        .expect("editcap comes with tshark (scripts/install-deps)");
    assert!(status.success());
    ng
}

#[test]
fn pcapng_gives_the_same_verdicts() {
    let dir = Scratch::new("pcapng");
    let ng = to_pcapng(&dir, "split_response");
    let a = analyze_json(&ng);
    let b = analyze_json(Path::new(&format!("{FIXTURES}/split_response.pcap")));
    assert_eq!(a["events"], b["events"]);
}

#[test]
fn damaged_input() {
    let dir = Scratch::new("damaged");
    let good = fs::read(format!("{FIXTURES}/split_request.pcap")).expect("fixture");

    // Cut inside the last record: what comes before is analysed, with a warning.
    let cut = dir.path("cut.pcap");
    fs::write(&cut, &good[..good.len() - 30]).expect("write");
    let out = run(&["analyze", "--json", cut.to_str().unwrap_or_default()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("warning"),
        "a warning for the cut record"
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(v["summary"]["stalls"]["nagle_delayed_ack"].as_u64() >= Some(8));

    // Not a capture, empty, a directory: exit 2 with the reason.
    let garbage = dir.path("garbage.pcap");
    fs::write(&garbage, b"GET / HTTP/1.1\r\nHost: example\r\n\r\n").expect("write");
    let empty = dir.path("empty.pcap");
    fs::write(&empty, b"").expect("write");
    for (file, reason) in [
        (garbage.as_path(), "not a pcap or pcapng"),
        (empty.as_path(), "empty"),
        (dir.0.as_path(), "directory"),
    ] {
        let out = run(&["analyze", file.to_str().unwrap_or_default()]);
        assert_eq!(out.status.code(), Some(2), "{}", file.display());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(reason), "{}: {err}", file.display());
        assert!(!err.contains("panicked"), "{err}");
    }

    // Records in reverse order: time runs backwards; analysed without a panic, no stall made up.
    let (_, records) = pcap_records(&good);
    let mut reversed = good[..24].to_vec();
    for r in records.iter().rev() {
        reversed.extend_from_slice(r);
    }
    let backwards = dir.path("backwards.pcap");
    fs::write(&backwards, &reversed).expect("write");
    let out = run(&["analyze", "--json", backwards.to_str().unwrap_or_default()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["summary"]["packets"], records.len());
    assert_eq!(
        v["summary"]["stalls"]["nagle_delayed_ack"], 0,
        "reversed time has no Nagle hold"
    );

    // A pcapng cut inside its section header, a pcap header followed by bytes that are no
    // record: nothing readable, exit 2 with the reason.
    let ng = to_pcapng(&dir, "split_request");
    let ng_cut = dir.path("cut.pcapng");
    fs::write(&ng_cut, &fs::read(&ng).expect("pcapng")[..20]).expect("write");
    let mut header_and_junk = good[..24].to_vec();
    header_and_junk.extend_from_slice(&[0xff; 100]);
    let junk = dir.path("junk.pcap");
    fs::write(&junk, &header_and_junk).expect("write");
    for (file, reason) in [
        (
            &ng_cut,
            "truncated capture: the pcapng section header block needs",
        ),
        (&junk, "no packet could be read: absurd record length"),
    ] {
        let out = run(&["analyze", file.to_str().unwrap_or_default()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{}: {err}", file.display());
        assert!(err.contains(reason), "{}: {err}", file.display());
    }

    // One packet stamped an hour ahead: the warning names the jump without blaming the
    // packet after it.
    let (_, records) = pcap_records(&good);
    let mut jumped = good[..24].to_vec();
    for (i, r) in records.iter().enumerate() {
        let mut r = r.to_vec();
        if i == 9 {
            let sec = u32::from_le_bytes([r[0], r[1], r[2], r[3]]) + 3600;
            r[..4].copy_from_slice(&sec.to_le_bytes());
        }
        jumped.extend_from_slice(&r);
    }
    let jump = dir.path("jump.pcap");
    fs::write(&jump, &jumped).expect("write");
    let out = run(&["analyze", "--json", jump.to_str().unwrap_or_default()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("packet 11: 3599.") && err.contains(" s earlier than packet 10 ("),
        "{err}"
    );
    assert!(!err.contains("goes backwards"), "{err}");

    // Random bytes after a valid header: warnings or an error, never a panic.
    let mut noisy = good[..24].to_vec();
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        noisy.push(x as u8);
    }
    let noise = dir.path("noise.pcap");
    fs::write(&noise, &noisy).expect("write");
    let out = run(&["analyze", noise.to_str().unwrap_or_default()]);
    assert!(matches!(out.status.code(), Some(0 | 2)));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
}

/// The flows of a JSON analysis, by label.
fn flow_labels(v: &Value) -> Vec<String> {
    v["flows"]
        .as_array()
        .map(|flows| {
            flows
                .iter()
                .filter_map(|f| f["flow"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_damaged_file_between_good_ones_loses_only_itself() {
    let dir = Scratch::new("between");
    let first = format!("{FIXTURES}/split_response.pcap");
    let second = format!("{FIXTURES}/cork.pcap");
    let mut expected = flow_labels(&analyze_json(Path::new(&first)));
    expected.extend(flow_labels(&analyze_json(Path::new(&second))));
    assert_eq!(
        expected.len(),
        2,
        "each fixture holds one flow: {expected:?}"
    );
    let garbage = dir.path("garbage.pcap");
    fs::write(&garbage, b"GET / HTTP/1.1\r\nHost: example\r\n\r\n").expect("write");
    let empty = dir.path("empty.pcap");
    fs::write(&empty, b"").expect("write");
    let html = dir.path("report.html");
    for (bad, reason) in [
        (garbage.to_str().unwrap_or_default(), "not a pcap or pcapng"),
        (empty.to_str().unwrap_or_default(), "empty"),
        ("/dev/zero", "not a pcap or pcapng"),
    ] {
        for format in ["--json", "--flows", "--html"] {
            let mut args = vec!["analyze", format];
            if format == "--html" {
                args.push(html.to_str().unwrap_or_default());
            }
            args.extend([first.as_str(), bad, second.as_str()]);
            let out = run(&args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert!(
                err.contains(&format!("cannot analyse {bad}: ")) && err.contains(reason),
                "{args:?}: the bad file and why: {err}"
            );
            let reported = match format {
                "--json" => {
                    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
                    assert_eq!(v["summary"]["unreadable"][0]["file"], bad, "{v}");
                    assert_eq!(v["summary"]["files"].as_array().map(Vec::len), Some(2));
                    flow_labels(&v).join(" ")
                }
                "--flows" => String::from_utf8_lossy(&out.stdout).into_owned(),
                _ => fs::read_to_string(&html).expect("the HTML report is written"),
            };
            for flow in &expected {
                assert!(
                    reported.contains(flow.as_str()),
                    "{args:?}: {flow} in {reported}"
                );
            }
            let _ = fs::remove_file(&html);
        }
    }
    // Two bad files: each named; none readable: an error, no report.
    let out = run(&[
        "analyze",
        "--json",
        garbage.to_str().unwrap_or_default(),
        "/dev/zero",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("garbage.pcap") && err.contains("/dev/zero"),
        "{err}"
    );
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn workers_do_not_change_the_output() {
    let files: Vec<String> = FIXTURE_NAMES
        .iter()
        .map(|n| format!("{FIXTURES}/{n}.pcap"))
        .collect();
    let outputs: Vec<Vec<u8>> = ["1", "2", "3"]
        .iter()
        .map(|workers| {
            let mut args = vec!["analyze", "--json", "--minor", "--workers", workers];
            args.extend(files.iter().map(String::as_str));
            let out = run(&args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.stdout
        })
        .collect();
    let v: Value = serde_json::from_slice(&outputs[0]).expect("JSON");
    assert_eq!(
        v["summary"]["files"].as_array().map(Vec::len),
        Some(files.len())
    );
    assert!(
        v["summary"]["stall_total"].as_u64() > Some(20),
        "several files' stalls together"
    );
    assert_eq!(outputs[0], outputs[1], "1 and 2 detector threads");
    assert_eq!(outputs[0], outputs[2], "1 and 3 detector threads");
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Waits for the server to listen on `port`, read from the socket table: a probe connection
/// would leave packets of its own in the capture that starts next.
fn wait_listening(port: u16) {
    support::wait_for_socket(port, support::tcp_state::LISTEN, "the server");
}

/// Ten keep-alive GETs on one connection with curl, captured by tcpdump, then analysed.
fn capture_keep_alive_gets(dir: &Scratch, name: &str, port: u16) -> Value {
    wait_listening(port);
    let file = dir.path(&format!("{name}.pcap"));
    let dump = Tcpdump::start(&file, &["tcp", "port", &port.to_string()]);
    let url = format!("http://127.0.0.1:{port}/index.html");
    let mut curl = Command::new("curl");
    curl.args(["-s", "--max-time", "20"]);
    for _ in 0..10 {
        curl.args(["-o", "/dev/null", &url]);
    }
    let status = curl
        .status()
        .expect("curl must be installed (scripts/install-deps)");
    dump.stop();
    assert!(status.success(), "{name}: curl failed");
    analyze_json(&file)
}

/// Real servers: CPython's http.server writes headers and body apart (CPython issue 108736),
/// nginx does too with `sendfile on; tcp_nodelay off`, and not with its default
/// `tcp_nodelay on`.
#[test]
fn real_servers_on_keep_alive() {
    let dir = Scratch::new("servers");
    fs::write(dir.path("index.html"), "x".repeat(300)).expect("write index.html");

    let port = free_port();
    let script = "import http.server, sys\n\
        class H(http.server.SimpleHTTPRequestHandler):\n    protocol_version = 'HTTP/1.1'\n    \
        def log_message(self, *a): pass\n\
        http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n";
    let python = KillOnDrop(
        Command::new("python3")
            .args(["-c", script, &port.to_string()])
            .current_dir(&dir.0)
            .spawn()
            .expect("python3"),
    );
    let v = verdicts(&capture_keep_alive_gets(&dir, "python", port), None);
    drop(python);
    assert_eq!(
        count(&v, "nagle_delayed_ack", "server"),
        9,
        "CPython http.server: {v:?}"
    );
    assert_eq!(total(&v), 9, "{v:?}");

    for (nodelay, stalls) in [("on", 0), ("off", 9)] {
        let port = free_port();
        let nginx = support::nginx_static(&dir.0, port, nodelay);
        let v = verdicts(
            &capture_keep_alive_gets(&dir, &format!("nginx-{nodelay}"), port),
            None,
        );
        drop(nginx);
        assert_eq!(
            count(&v, "nagle_delayed_ack", "server"),
            stalls,
            "nginx tcp_nodelay {nodelay}: {v:?}"
        );
        assert_eq!(total(&v), stalls, "nginx tcp_nodelay {nodelay}: {v:?}");
    }
}

/// `tcpdump -w - | tcpstall analyze -`, stopped with Ctrl-C (SIGINT to the whole pipeline, as a
/// terminal sends it): the report of what was captured still comes out.
#[test]
fn live_pipe_from_tcpdump_stopped_by_interrupt() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::CommandExt;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    // tee keeps a copy of what reaches the analysis, so the test can wait for the connection's
    // close to have gone through before it interrupts.
    let scratch = Scratch::new("live-pipe");
    let copy = scratch.path("copy.pcap");
    let pipeline = format!(
        "tcpdump -i lo -s 128 --immediate-mode -U -w - tcp port {port} | tee {} | {BIN} analyze --json -",
        copy.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &pipeline])
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh");
    let group = nix::unistd::Pid::from_raw(-(child.id() as i32));
    wait_for_listening(&mut child);

    // Echo server; the client writes each request in two parts: 4 of 5 turns stall.
    let server = std::thread::spawn(move || {
        let (conn, _) = listener.accept().expect("accept");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let mut conn = conn;
        for _ in 0..5 {
            let mut line = String::new();
            reader.read_line(&mut line).expect("read request");
            conn.write_all(line.as_bytes()).expect("answer");
        }
    });
    {
        let mut client = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        client
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let mut reader = BufReader::new(client.try_clone().expect("clone"));
        for _ in 0..5 {
            client.write_all(b"hello ").expect("write");
            client.write_all(b"world\r\n").expect("write");
            let mut line = String::new();
            reader.read_line(&mut line).expect("read answer");
        }
    }
    server.join().expect("server");
    assert!(
        support::wait_until(Duration::from_secs(10), || all_closed(&copy, None)),
        "the connection's close did not pass through the pipe within 10 s"
    );
    let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGINT);
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = nix::sys::signal::kill(group, nix::sys::signal::Signal::SIGKILL);
            let _ = child.wait();
            panic!("the pipeline did not end within 10 s of Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let v: Value = serde_json::from_slice(&out.stdout).expect("a JSON report after Ctrl-C");
    let stalls = verdicts(&v, Some(u64::from(port)));
    assert_eq!(
        count(&stalls, "nagle_delayed_ack", "client"),
        4,
        "{stalls:?}"
    );
}

/// Capture time in seconds of the 1-based `packet` of a little-endian microsecond pcap.
fn record_time(bytes: &[u8], packet: usize) -> f64 {
    let (_, records) = pcap_records(bytes);
    let r = records[packet - 1];
    let field = |i: usize| f64::from(u32::from_le_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]));
    field(0) + field(4) / 1e6
}

/// Packet numbers (1-based) of the SYN segments of a capture, and of those without ACK.
fn syn_packets(file: &Path) -> (Vec<u64>, Vec<u64>) {
    let (mut syns, mut client_syns) = (Vec::new(), Vec::new());
    let input = fs::File::open(file).expect("open capture");
    tcpstall::capture::for_each_segment(
        input,
        |seg| {
            use tcpstall::decode::flags;
            if seg.has(flags::SYN) {
                syns.push(seg.packet_number);
                if !seg.has(flags::ACK) {
                    client_syns.push(seg.packet_number);
                }
            }
        },
        |_| {},
    )
    .expect("readable capture");
    (syns, client_syns)
}

/// A copy of a little-endian pcap without the given packets (1-based numbers).
fn without_packets(bytes: &[u8], drop: &[u64]) -> Vec<u8> {
    let (header, records) = pcap_records(bytes);
    let mut out = header.to_vec();
    for (i, r) in records.iter().enumerate() {
        if !drop.contains(&(i as u64 + 1)) {
            out.extend_from_slice(r);
        }
    }
    out
}

/// A capture that starts mid-flow (handshake cut off) with the server on a high port, above
/// the client's (as a server on a port the kernel picked): client and server are still told
/// apart, the stalls are found on the right side, and the report says the client was guessed.
#[test]
fn mid_flow_capture_with_server_on_high_port() {
    let dir = Scratch::new("midflow");
    let original = Path::new(FIXTURES).join("split_response.pcap");
    let whole = analyze_json(&original);
    let (client, server) = (
        whole["flows"][0]["client"].clone(),
        whole["flows"][0]["server"].clone(),
    );
    let port = |v: &Value| {
        v.as_str()
            .and_then(|s| s.rsplit(':').next())
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(0)
    };
    assert!(
        port(&server) > port(&client) && port(&client) >= 32768,
        "the fixture's server port is ephemeral and above the client's: {client} {server}"
    );
    let (syns, _) = syn_packets(&original);
    assert_eq!(syns.len(), 2);
    let cut = dir.path("midflow.pcap");
    fs::write(
        &cut,
        without_packets(&fs::read(&original).expect("fixture"), &syns),
    )
    .expect("write");
    let v = analyze_json(&cut);
    assert_eq!(v["flows"][0]["client"], client, "{}", v["flows"][0]);
    assert_eq!(v["flows"][0]["server"], server);
    assert_eq!(v["flows"][0]["client_guess"], "first_data");
    assert_eq!(
        verdicts(&v, None),
        verdicts(&whole, None),
        "the same stalls, held by the server"
    );
    let text = String::from_utf8_lossy(&run(&["analyze", cut.to_str().unwrap_or_default()]).stdout)
        .to_string();
    assert!(
        text.contains("capture starts mid-flow: client guessed as the side that sent data first"),
        "{text}"
    );
    assert!(text.contains("MSS assumed"), "{text}");
}

/// The lab's memcached rows (the reply's first write is 1400 B, MSS 1460) with the handshake
/// cut off, and with only the client's SYN cut off: the stalls of the value-1400 and
/// value-2400 rows are all still found, with the MSS assumed or taken from the SYN-ACK.
#[test]
fn memcached_rows_without_handshake() {
    let dir = Scratch::new("memcached-cut");
    let pcap = dir.path("memcached.pcap");
    let lab = lab_captured(
        &[
            "--scenario",
            "memcached",
            "--variant",
            "value-1400,value-2400",
            "--requests",
            "20",
        ],
        &pcap,
    );
    let rows = lab["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{lab}");
    let bytes = fs::read(&pcap).expect("capture");
    let (syns, client_syns) = syn_packets(&pcap);
    assert_eq!(syns.len(), 4, "two handshakes");
    for (name, drop) in [("no-syn", &syns), ("no-client-syn", &client_syns)] {
        let file = dir.path(&format!("{name}.pcap"));
        fs::write(&file, without_packets(&bytes, drop)).expect("write");
        let v = analyze_json(&file);
        for row in rows {
            let port = row["server_port"].as_u64().expect("server_port");
            let stalls = verdicts(&v, Some(port));
            assert_eq!(
                count(&stalls, "nagle_delayed_ack", "server"),
                19,
                "{name} {}: {stalls:?}",
                row["variant"]
            );
            assert_eq!(total(&stalls), 19, "{name}: {stalls:?}");
            assert_eq!(
                row["stalled_requests"], 19,
                "the lab measured 19 slow requests"
            );
        }
    }
}

/// Runs `lab ARGS --json --capture PCAP`; its report.
fn lab_captured(args: &[&str], pcap: &Path) -> Value {
    let out = Command::new(BIN)
        .arg("lab")
        .args(args)
        .args(["--json", "--capture"])
        .arg(pcap)
        .output()
        .expect("run tcpstall lab");
    assert!(
        out.status.success(),
        "lab failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("lab --json")
}

/// Splits a little-endian pcap into its file header and records.
fn pcap_records(bytes: &[u8]) -> (&[u8], Vec<&[u8]>) {
    let mut records = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        let field =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        let end = (at + 16 + field(at + 8) as usize).min(bytes.len());
        records.push(&bytes[at..end]);
        at = end;
    }
    (&bytes[..24], records)
}

/// A snap length that cuts the TCP options (window scale, timestamps) still shows the stall;
/// a packet missing from the capture is reported as a gap rather than guessed around.
#[test]
fn cut_options_and_missing_packets() {
    let dir = Scratch::new("cut");
    let good = fs::read(format!("{FIXTURES}/split_response.pcap")).expect("fixture");
    let (header, records) = pcap_records(&good);

    let mut snap60 = header.to_vec();
    snap60[16..20].copy_from_slice(&60u32.to_le_bytes());
    for r in &records {
        let keep = r.len().min(16 + 60);
        let mut rec = r[..keep].to_vec();
        rec[8..12].copy_from_slice(&((keep - 16) as u32).to_le_bytes());
        snap60.extend_from_slice(&rec);
    }
    let file = dir.path("snap60.pcap");
    fs::write(&file, &snap60).expect("write");
    let v = analyze_json(&file);
    assert_eq!(
        v["summary"]["stalls"]["nagle_delayed_ack"], 9,
        "{}",
        v["summary"]
    );

    // Drop the first response's header segment (packet 6: the server's first data).
    let mut gap = header.to_vec();
    for (i, r) in records.iter().enumerate() {
        if i != 5 {
            gap.extend_from_slice(r);
        }
    }
    let file = dir.path("gap.pcap");
    fs::write(&file, &gap).expect("write");
    let v = analyze_json(&file);
    assert_eq!(
        v["summary"]["flows_with_capture_gaps"], 1,
        "{}",
        v["summary"]
    );
    let text = run(&["analyze", file.to_str().unwrap_or_default()]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("data in the capture (sequence gaps)"));
}

/// memcached answers a GET in one `sendmsg` (header, value and END together): no stall on a
/// keep-alive connection, even for the 1400-4000 B values of the 002 source.
#[test]
fn real_memcached_is_clean() {
    use std::io::Read;
    let dir = Scratch::new("memcached");
    let port = free_port();
    let _memcached = KillOnDrop(
        Command::new("memcached")
            .args([
                "-l",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-U",
                "0",
                "-u",
                "root",
            ])
            .spawn()
            .expect("memcached must be installed (scripts/install-deps)"),
    );
    wait_listening(port);
    let file = dir.path("memcached.pcap");
    let dump = Tcpdump::start(&file, &["tcp", "port", &port.to_string()]);
    {
        let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let value = "v".repeat(2400);
        conn.write_all(format!("set k 0 0 {}\r\n{value}\r\n", value.len()).as_bytes())
            .expect("set");
        let mut buf = vec![0u8; 65536];
        let n = conn.read(&mut buf).expect("STORED");
        assert_eq!(&buf[..n], b"STORED\r\n");
        let answer = format!("VALUE k 0 {}\r\n{value}\r\nEND\r\n", value.len()).len();
        for _ in 0..10 {
            conn.write_all(b"get k\r\n").expect("get");
            let mut got = 0;
            while got < answer {
                let n = conn.read(&mut buf).expect("read answer");
                assert!(n > 0, "memcached closed the connection");
                got += n;
            }
        }
    }
    dump.stop();
    let v = analyze_json(&file);
    assert_eq!(v["summary"]["flows"], 1);
    assert_eq!(v["summary"]["stall_total"], 0, "{}", v["summary"]);
}

/// A redis-server on a free loopback port, for as long as the guard lives.
fn redis_server() -> (KillOnDrop, u16) {
    let port = free_port();
    let server = KillOnDrop(
        Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/install-deps)"),
    );
    wait_listening(port);
    (server, port)
}

/// A pipelining client without TCP_NODELAY, as a raw socket speaking RESP: each batch writes
/// `depth` SET commands one `sendall` each, then reads the replies; bounded in count and by a
/// 10 s socket timeout.
const PIPELINING_CLIENT: &str = r#"
import socket, sys
port, depth, batches, nodelay = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
s = socket.create_connection(("127.0.0.1", port), timeout=10)
if nodelay:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
cmd = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n"
for _ in range(batches):
    for _ in range(depth):
        s.sendall(cmd)
    got = b""
    while got.count(b"\r\n") < depth:
        data = s.recv(65536)
        if not data:
            sys.exit("redis closed the connection")
        got += data
s.close()
"#;

/// Runs `command` to success, within its own bounds.
fn succeed(command: &mut Command) {
    let out = command
        .output()
        .expect("the command runs (installed: scripts/install-deps)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs [`PIPELINING_CLIENT`] against `port`.
fn pipeline_redis(port: u16, depth: u32, batches: u32, nodelay: bool) {
    succeed(
        Command::new("python3")
            .args(["-c", PIPELINING_CLIENT, &port.to_string()])
            .args([depth.to_string(), batches.to_string()])
            .arg(if nodelay { "1" } else { "0" }),
    );
}

/// Captures the traffic to `port` on loopback while `traffic` runs, and analyses it.
fn capture_analyze(dir: &Scratch, name: &str, port: u16, traffic: impl FnOnce()) -> Value {
    let file = dir.path(&format!("{name}.pcap"));
    let dump = Tcpdump::start(&file, &["tcp", "port", &port.to_string()]);
    traffic();
    dump.stop();
    analyze_json(&file)
}

/// The flows of `v` to `server_port` that carried more than a handshake.
fn flows_to(v: &Value, server_port: u16) -> Vec<&Value> {
    v["flows"]
        .as_array()
        .map(|flows| {
            flows
                .iter()
                .filter(|f| f["server_port"] == server_port && f["packets"].as_u64() > Some(3))
                .collect()
        })
        .unwrap_or_default()
}

/// A client pipelining 16 SETs per batch, each its own write, without TCP_NODELAY, against a
/// real redis-server: the first command of a batch leaves, the rest wait for the ACK that
/// redis's first reply carries. The client's writes are paced by ACKs, and said so with their
/// cost; nothing of it is a 40 ms stall.
#[test]
fn pipelining_redis_client_without_nodelay_is_ack_paced() {
    let _serial = support::serial();
    let dir = Scratch::new("redis-pipeline");
    let (_redis, port) = redis_server();
    let pipelined = || {
        capture_analyze(&dir, "pipeline", port, || {
            pipeline_redis(port, 16, 200, false)
        })
    };
    let mut v = pipelined();
    let proven = |v: &Value| {
        flows_to(v, port)
            .first()
            .and_then(|f| f["nagle_ack_paced"].as_array())
            .is_some_and(|p| !p.is_empty())
    };
    if !proven(&v) {
        // The proof rests on releases within microseconds of their ACK: a machine loaded at
        // that moment delays them past the bound and proves no pacing (ACCURACY.md). Once
        // more before failing; pacing found where there is none fails at once (below).
        eprintln!(
            "no pacing proven in the first capture, once more: {}",
            v["summary"]
        );
        v = pipelined();
    }
    let flows = flows_to(&v, port);
    assert_eq!(flows.len(), 1, "{}", v["summary"]);
    let paced = &flows[0]["nagle_ack_paced"];
    assert_eq!(paced[0]["held_side"], "client", "{}", flows[0]);
    assert_eq!(paced.as_array().map(Vec::len), Some(1), "{paced}");
    let holds = paced[0]["holds"].as_u64().unwrap_or(0);
    // Paced from 17 holds, or from 3 slow ones (a loaded machine's round trips).
    assert!(holds >= 3, "{paced}");
    let (lost, sum, span) = (
        paced[0]["time_lost_ms"].as_f64().unwrap_or(f64::MAX),
        paced[0]["delay_sum_ms"].as_f64().unwrap_or(0.0),
        paced[0]["span_ms"].as_f64().unwrap_or(0.0),
    );
    assert!(lost > 0.0 && lost <= sum && lost <= span, "{paced}");
    assert!(
        paced[0]["bytes_per_s_without_estimate"].as_f64() > paced[0]["bytes_per_s"].as_f64(),
        "{paced}"
    );
    assert_eq!(v["summary"]["stalls"]["nagle_ack_paced"], 1);
    assert_eq!(v["summary"]["stall_total"], 0, "{}", v["summary"]);
    let event = v["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["kind"] == "nagle_ack_paced"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(event["held_side"], "client", "{event}");
    assert!(event["nagle_ack_paced"]["holds"].as_u64() >= Some(17));
    // The text report names the pattern and the fix.
    let text = run(&[
        "analyze",
        dir.path("pipeline.pcap").to_str().unwrap_or_default(),
    ]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("nagle_ack_paced"), "{text}");
    assert!(text.contains("set TCP_NODELAY on the client"), "{text}");
    // The same client asking one command at a time answers each reply: no pacing.
    let v = capture_analyze(&dir, "one-at-a-time", port, || {
        pipeline_redis(port, 1, 400, false)
    });
    assert_eq!(
        v["summary"]["stalls"]["nagle_ack_paced"], 0,
        "{}",
        v["summary"]
    );
}

/// redis-benchmark pipelining 16 requests: hiredis writes each pipeline in one write and sets
/// TCP_NODELAY, so nothing waits for an ACK: no pacing on any of its connections, and no stall.
#[test]
fn redis_benchmark_pipelined_is_not_ack_paced() {
    let _serial = support::serial();
    let dir = Scratch::new("redis-benchmark");
    let (_redis, port) = redis_server();
    let v = capture_analyze(&dir, "benchmark", port, || {
        succeed(
            Command::new("timeout")
                .args(["60", "redis-benchmark", "-h", "127.0.0.1"])
                .args([
                    "-p",
                    &port.to_string(),
                    "-P",
                    "16",
                    "-n",
                    "20000",
                    "-c",
                    "4",
                ])
                .args(["-t", "set,get", "-q"]),
        )
    });
    assert!(flows_to(&v, port).len() >= 4, "{}", v["summary"]);
    assert_eq!(
        v["summary"]["stalls"]["nagle_ack_paced"], 0,
        "{}",
        v["summary"]
    );
    assert_eq!(v["summary"]["stall_total"], 0, "{}", v["summary"]);
}

/// A bulk sender writing 64 KiB at a time: limited by the receiver's window (a 4 KiB
/// SO_RCVBUF, read 4 KiB at a time) or by nothing but the path. Whatever waits waits for the
/// window or the congestion window, never for the ACK of a small segment: no pacing.
#[test]
fn bulk_transfers_are_not_ack_paced() {
    const BULK: &str = r#"
import socket, sys, threading
rcvbuf, total = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket()
if rcvbuf:
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
ls.bind(("127.0.0.1", int(sys.argv[3])))
ls.listen(1)
def serve():
    c, _ = ls.accept()
    c.settimeout(20)
    got = 0
    while got < total:
        data = c.recv(4096)
        if not data:
            break
        got += len(data)
    c.close()
t = threading.Thread(target=serve)
t.start()
s = socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=20)
chunk, sent = b"x" * 65536, 0
while sent < total:
    s.sendall(chunk[: min(len(chunk), total - sent)])
    sent += min(len(chunk), total - sent)
s.shutdown(socket.SHUT_WR)
t.join()
s.close()
"#;
    let dir = Scratch::new("bulk");
    for (rcvbuf, total) in [(4096, 4_000_000), (0, 20_000_000)] {
        let port = free_port();
        let v = capture_analyze(&dir, &format!("bulk-{rcvbuf}"), port, || {
            succeed(
                Command::new("python3")
                    .args(["-c", BULK, &rcvbuf.to_string(), &total.to_string()])
                    .arg(port.to_string()),
            )
        });
        let flows = flows_to(&v, port);
        assert_eq!(flows.len(), 1, "{}", v["summary"]);
        // The capture holds the transfer. A loaded machine has lost a few of its segments
        // (the flow then counts a capture gap, and the resends as retransmissions): the
        // detector must claim nothing all the same.
        let seen = flows[0]["bytes_client_to_server"].as_u64().unwrap_or(0);
        let gaps = flows[0]["capture_gaps"].as_u64().unwrap_or(0);
        assert!(
            seen >= total || (gaps > 0 && seen >= total / 10 * 9),
            "{}",
            flows[0]
        );
        assert_eq!(
            v["summary"]["stalls"]["nagle_ack_paced"], 0,
            "rcvbuf {rcvbuf}: {}",
            flows[0]
        );
        assert!(flows[0]["nagle_ack_paced"].is_null(), "{}", flows[0]);
    }
}
/// A real capture of the lab's split writes on loopback (Nagle holds released by 40 ms delayed
/// ACKs, each released segment microseconds after its ACK), rewritten with its timestamps cut
/// to whole milliseconds and to tens of them, as a coarse capture clock stamps them. Every
/// hold is still claimed from the original; at 1 ms each is proven or set apart as
/// `coarse_timestamps` (a release within the 1 ms allowance may straddle a tick); at 10 ms no
/// release can be told from a segment sent 9 ms later, so none is proven.
#[test]
fn coarse_timestamps_prove_no_stall_they_cannot_time() {
    let dir = Scratch::new("coarse");
    let pcap = dir.path("split.pcap");
    lab_captured(
        &[
            "--scenario",
            "echo,http",
            "--variant",
            "split",
            "--requests",
            "10",
        ],
        &pcap,
    );
    let original = analyze_json(&pcap);
    let held = original["summary"]["stalls"]["nagle_delayed_ack"]
        .as_u64()
        .expect("count");
    assert!(held >= 10, "{}", original["summary"]);
    assert_eq!(coarse_undecided(&original), 0, "{}", original["summary"]);

    let bytes = fs::read(&pcap).expect("capture");
    let (header, records) = pcap_records(&bytes);
    // The lab writes nanosecond pcap: a record's second field is nanoseconds.
    assert_eq!(&header[..4], &0xa1b2_3c4d_u32.to_le_bytes());
    for (tick_ms, name) in [(1u32, "ms"), (10, "10ms")] {
        let mut coarse = header.to_vec();
        for r in &records {
            let mut rec = r.to_vec();
            let nanos = u32::from_le_bytes([r[4], r[5], r[6], r[7]]);
            let tick = tick_ms * 1_000_000;
            rec[4..8].copy_from_slice(&(nanos / tick * tick).to_le_bytes());
            coarse.extend_from_slice(&rec);
        }
        let file = dir.path(&format!("split-{name}.pcap"));
        fs::write(&file, &coarse).expect("write");
        let v = analyze_json(&file);
        let proven = v["summary"]["stalls"]["nagle_delayed_ack"]
            .as_u64()
            .expect("count");
        let stalls: u64 = ["cork_timer", "rto", "zero_window"]
            .iter()
            .map(|k| v["summary"]["stalls"][k].as_u64().expect("count"))
            .sum();
        assert_eq!(stalls, 0, "{name}: {}", v["summary"]);
        if tick_ms == 1 {
            assert_eq!(
                proven + coarse_undecided(&v),
                held,
                "{name}: {}",
                v["summary"]
            );
            assert!(proven > 0, "{name}: {}", v["summary"]);
        } else {
            assert_eq!(proven, 0, "{name}: {}", v["summary"]);
            assert!(coarse_undecided(&v) > 0, "{name}: {}", v["summary"]);
        }
    }
}

/// Claims `analyze --json` set apart for coarse timestamps.
fn coarse_undecided(v: &Value) -> u64 {
    v["summary"]["undecided"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|u| u["reason"] == "coarse_timestamps")
                .map(|u| u["count"].as_u64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0)
}

/// The report's prose fits the terminal (`COLUMNS` here), its continuations indented under
/// their text; into a pipe each finding stays on one line, for grep.
#[test]
fn the_text_report_fits_the_terminal_and_stays_whole_in_a_pipe() {
    let file = Path::new(FIXTURES).join("split_response.pcap");
    let run = |columns: Option<&str>| {
        let mut command = Command::new(BIN);
        command.arg("analyze").arg(&file).env_remove("COLUMNS");
        if let Some(c) = columns {
            command.env("COLUMNS", c);
        }
        let out = command.output().expect("tcpstall runs");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout).expect("UTF-8")
    };
    let piped = run(None);
    let fitted = run(Some("60"));
    assert!(
        piped.lines().any(|l| l.chars().count() > 100),
        "a finding on one line: {piped}"
    );
    for line in fitted.lines() {
        assert!(line.chars().count() <= 60, "{line:?} in\n{fitted}");
    }
    let words = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(words(&fitted), words(&piped), "the same words, only broken");
    assert!(
        fitted.lines().any(|l| l.starts_with("          ")),
        "a fix continues under its text: {fitted}"
    );
}
