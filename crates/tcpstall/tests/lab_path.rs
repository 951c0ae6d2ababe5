//! `tcpstall lab --rtt`: the catalogue over an emulated path (two network namespaces joined by
//! TUN devices and a delaying relay), run as the built binary. These tests need root
//! (CAP_NET_ADMIN and CAP_SYS_ADMIN) and fail with a message saying so without it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;
use support::{lab, namespaces_of, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// The path's round-trip time in these tests.
const RTT_MS: f64 = 20.0;

fn require_root() {
    support::require_root(
        "tests/lab_path.rs needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN create and enter network \
         namespaces)",
    );
}

fn lab_json(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json", "--rtt", "20"];
    all.extend_from_slice(args);
    let out = lab(&all);
    assert!(
        out.status.success(),
        "tcpstall lab {all:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("lab --json prints JSON");
    assert_eq!(report["path"]["rtt_ms"].as_f64(), Some(RTT_MS));
    let rows = report["rows"].as_array().expect("rows").clone();
    for row in &rows {
        assert!(row["errors"].is_null(), "{}: {}", name(row), row["errors"]);
        assert_eq!(row["path_rtt_ms"].as_f64(), Some(RTT_MS));
    }
    rows
}

/// `tcpstall analyze --json FILE`, which must succeed.
fn analyze_json(pcap: &std::path::Path) -> Value {
    let analyzed = Command::new(BIN)
        .arg("analyze")
        .arg("--json")
        .arg(pcap)
        .output()
        .expect("tcpstall analyze runs");
    assert!(
        analyzed.status.success(),
        "{}",
        String::from_utf8_lossy(&analyzed.stderr)
    );
    serde_json::from_slice(&analyzed.stdout).expect("analyze JSON")
}

fn name(row: &Value) -> String {
    format!("{}/{}", row["scenario"], row["variant"])
}

fn row<'a>(rows: &'a [Value], variant: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["variant"] == variant)
        .unwrap_or_else(|| panic!("no row {variant}"))
}

fn p50(row: &Value) -> f64 {
    row["p50_ms"].as_f64().expect("p50_ms")
}

#[test]
fn echo_split_costs_the_timer_on_top_of_the_path_and_the_fixes_do_not() {
    let _serial = support::serial();
    require_root();
    let rows = lab_json(&[
        "--scenario",
        "echo",
        "--variant",
        "split,single,nodelay,quickack",
        "--requests",
        "8",
    ]);
    let split = row(&rows, "split");
    assert!(
        p50(split) >= RTT_MS + support::STALL_MIN_MS,
        "split p50 {} ms over a {RTT_MS} ms path",
        p50(split)
    );
    assert_eq!(split["stalled"], true);
    for fix in ["single", "nodelay"] {
        let r = row(&rows, fix);
        assert!(p50(r) < RTT_MS + 10.0, "{fix} p50 {} ms", p50(r));
        assert_eq!(r["stalled"], false, "{fix}");
    }
    // QUICKACK removes the timer but not the round trip: `world` still waits for the ACK of
    // `hello `, so the request costs two RTTs, no more.
    let quickack = row(&rows, "quickack");
    assert!(
        p50(quickack) < 2.0 * RTT_MS + 10.0,
        "quickack p50 {} ms",
        p50(quickack)
    );
    assert_eq!(quickack["stalled"], false);
    assert!(
        p50(split) >= p50(quickack) + support::STALL_MIN_MS,
        "the timer shows on top"
    );
}

#[test]
fn stream_merges_writes_over_a_path() {
    let _serial = support::serial();
    require_root();
    // A sender descheduled for a round trip inside its write loop (a loaded machine) meets
    // the first ACK early and pushes more: the row is run once more before it fails.
    let merged = || -> Result<(), String> {
        let rows = lab_json(&[
            "--scenario",
            "stream",
            "--variant",
            "nagle-0ms",
            "--connections",
            "10",
        ]);
        let nagle = row(&rows, "nagle-0ms");
        let share = |key: &str| nagle[key].as_f64().expect(key);
        // Document 001's measure: writes that left as a packet of their own. With Nagle on,
        // the writes made while the first segment is unacknowledged (one RTT) leave merged.
        let (alone, segments) = (share("own_packet_share"), share("own_segment_share"));
        // Counted as document 001 counted, packets pushed over data packets: ten 1200 B
        // writes make 9 packets (the first write, 7 full segments, the tail), of which Linux
        // pushes the first and the tail: its 22.22 %.
        let pushed = share("pushed_packet_share");
        if alone < 1.0 && segments < 1.0 && (pushed - 2.0 / 9.0).abs() < 0.02 {
            Ok(())
        } else {
            Err(format!(
                "nagle-0ms: writes sent alone {alone}, data segments per write {segments}, \
                 packets pushed {pushed} (want < 1, < 1, 2/9)"
            ))
        }
    };
    if let Err(first) = merged() {
        eprintln!("{first}; once more");
        if let Err(second) = merged() {
            panic!("{second} (first run: {first})");
        }
    }

    // Behind a 10 Mbit/s bottleneck the packets wait in the sender's qdisc, charged to the
    // socket: autocorking merges back-to-back writes even with TCP_NODELAY.
    let rows = lab_json(&[
        "--rate",
        "10",
        "--scenario",
        "stream",
        "--variant",
        "nodelay-0ms",
        "--connections",
        "10",
    ]);
    let nodelay = row(&rows, "nodelay-0ms");
    let corked = nodelay["autocorking_delta"].as_u64().expect("autocorking");
    assert!(corked > 0, "autocorking delta {corked}");
    let alone = nodelay["own_packet_share"]
        .as_f64()
        .expect("own_packet_share");
    assert!(
        alone < 1.0,
        "nodelay-0ms share of writes sent alone {alone}"
    );
}

#[test]
fn capture_on_the_server_tun_is_read_by_tshark_and_analyze() {
    let _serial = support::serial();
    require_root();
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap: PathBuf = dir.join("path.pcap");
    let rows = lab_json(&[
        "--scenario",
        "echo,http",
        "--variant",
        "split,single,nodelay",
        "--requests",
        "6",
        "--capture",
        pcap.to_str().expect("utf-8 path"),
    ]);

    let tshark = Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "tcp.srcport",
        ])
        .output()
        .expect("tshark runs (installed by scripts/install-deps)");
    assert!(
        tshark.status.success(),
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
    let packets = String::from_utf8_lossy(&tshark.stdout).lines().count();
    assert!(packets > 0, "tshark read no packets");

    let report = analyze_json(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(report["summary"]["packets"].as_u64(), Some(packets as u64));
    let mut stalls: HashMap<u64, Vec<&Value>> = HashMap::new();
    for event in report["events"].as_array().expect("events") {
        if event["kind"] == "nagle_delayed_ack" {
            let port = event["server_port"].as_u64().expect("server_port");
            stalls.entry(port).or_default().push(event);
        }
    }
    // Under load the relay's delay varies: a release may come back sooner than every round
    // trip the capture timed to the held side. Such a stall is set apart as `path_varied`,
    // never lost in silence: every slow request is a stall found or one set apart.
    let varied: u64 = report["summary"]["undecided"]
        .as_array()
        .expect("undecided")
        .iter()
        .filter(|u| u["reason"] == "path_varied")
        .map(|u| u["count"].as_u64().expect("count"))
        .sum();
    let mut missing = 0;
    for r in &rows {
        let port = r["server_port"].as_u64().expect("server_port");
        let found = stalls.get(&port).map_or(&[][..], Vec::as_slice);
        if r["expected_stall"] == true {
            let stalled = r["stalled_requests"].as_u64().expect("stalled_requests");
            assert!(stalled > 0, "{} measured no stalled request", name(r));
            assert!(
                found.len() as u64 <= stalled && !found.is_empty(),
                "{}: analyze's stalls {} of {stalled}",
                name(r),
                found.len()
            );
            missing += stalled - found.len() as u64;
            for event in found {
                assert_eq!(event["held_side"], r["held_side"], "{}", name(r));
            }
        } else {
            assert!(found.is_empty(), "{}: analyze found {found:?}", name(r));
        }
    }
    assert_eq!(
        missing, varied,
        "slow requests neither found nor set apart: {}",
        report["summary"]
    );
}

/// `--capture-at path`: the relay's copy of each packet halfway through its delay. The
/// capture sits between the hosts (`mid-path`, both legs timed, each about half the round
/// trip, shorter than the whole), and the detector finds the split row's holds from there as from the ends: on the
/// client, released by the server's delayed ACK.
#[test]
fn capture_mid_path_sees_both_legs_and_the_holds() {
    let _serial = support::serial();
    require_root();
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-mid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let pcap = dir.join("mid.pcap");
    let rows = lab_json(&[
        "--scenario",
        "echo",
        "--variant",
        "split,nodelay",
        "--requests",
        "5",
        "--capture-at",
        "path",
        "--capture",
        pcap.to_str().expect("utf-8 path"),
    ]);
    let report = analyze_json(&pcap);
    let _ = std::fs::remove_dir_all(&dir);
    let flows = report["flows"].as_array().expect("flows");
    assert!(!flows.is_empty());
    for flow in flows {
        assert_eq!(flow["capture_position"], "mid-path", "{flow}");
        // Half the round trip each, give or take the relay's wake-ups (a late copy of the SYN
        // shortens the server's leg as the capture times it): timed, and within the path.
        for leg in ["client_rtt_ms", "server_rtt_ms"] {
            let ms = flow["path"][leg].as_f64().expect("a timed leg");
            assert!(ms > 0.0 && ms < RTT_MS, "{leg} {ms} ms: {flow}");
        }
    }
    let split = row(&rows, "split");
    let stalled = split["stalled_requests"]
        .as_u64()
        .expect("stalled_requests");
    assert!(stalled > 0, "{split}");
    assert_eq!(split["detector"]["held_side"], "client", "{split}");
    let found = split["detector"]["stalls"]["nagle_delayed_ack"]
        .as_u64()
        .expect("count");
    assert!(found > 0 && found <= stalled, "{split}");
    assert_eq!(row(&rows, "nodelay")["detector"]["held_side"], Value::Null);
}

/// A real loss on the path (`--lose-segment`: the relay loses one segment of the client's),
/// repaired by the client's own kernel, captured at the client. The tail of a two-segment
/// request (TCP_NODELAY: "hello " and "world\r\n" leave back to back) lost while the server
/// delays its ACK of the head: the kernel's tail-loss probe resends it after about two round
/// trips (`tcp_schedule_loss_probe`), sooner than any retransmission timeout of the path: one
/// loss probe, no `rto` stall. A one-segment request lost: nothing else is out, the probe would
/// wait TCP_RTO_MIN more, and the retransmission timer resends it at 200 ms or later: `rto`.
#[test]
fn a_lost_tail_is_a_loss_probe_and_a_lost_lone_segment_a_timeout() {
    let _serial = support::serial();
    require_root();
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-loss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    // The second request's tail (segment 4), and the second request (segment 2).
    for (variant, lose, probes, timeouts) in [("nodelay", "4", 1, 0), ("single", "2", 0, 1)] {
        let pcap = dir.join(format!("{variant}.pcap"));
        let out = lab(&[
            "--json",
            "--rtt",
            "10",
            "--scenario",
            "echo",
            "--variant",
            variant,
            "--requests",
            "3",
            "--lose-segment",
            lose,
            "--capture-at",
            "client",
            "--capture",
            pcap.to_str().expect("utf-8 path"),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report = analyze_json(&pcap);
        let flow = &report["flows"][0];
        assert_eq!(flow["retransmissions"], 1, "{variant}: {flow}");
        assert_eq!(flow["loss_probes"], probes, "{variant}: {flow}");
        assert_eq!(
            report["summary"]["stalls"]["rto"], timeouts,
            "{variant}: {}",
            report["summary"]
        );
        for event in report["events"].as_array().expect("events") {
            if event["kind"] == "rto" {
                let delay = event["delay_ms"].as_f64().expect("delay_ms");
                assert!(delay >= 200.0, "{variant}: a timeout of {delay} ms");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn namespaces_are_deleted_after_a_failed_run_and_after_ctrl_c() {
    let _serial = support::serial();
    require_root();
    // Fails after the namespaces exist: the capture file cannot be created.
    let out = lab(&[
        "--rtt",
        "20",
        "--scenario",
        "echo",
        "--capture",
        "/nonexistent-dir/x.pcap",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent-dir/x.pcap"));

    // Interrupted in the middle of a row; killed outright if the test fails before it exits.
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args([
                "lab",
                "--rtt",
                "20",
                "--scenario",
                "echo",
                "--requests",
                "1000",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("tcpstall runs"),
    );
    let pid = child.0.id();
    let start = Instant::now();
    while namespaces_of(pid).len() < 3 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        namespaces_of(pid).len(),
        3,
        "the run created its namespaces (client, server, the middle of the path)"
    );
    let _ = support::signal(pid, libc::SIGINT);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "tcpstall did not exit within 10 s of SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(128 + libc::SIGINT));
    assert_eq!(namespaces_of(pid), Vec::<String>::new());
}

#[test]
fn bad_rtt_and_rate_are_refused_clearly() {
    let _serial = support::serial();
    for (args, message) in [
        (&["--rtt", "0"][..], "--rtt 0 is out of range"),
        (&["--rtt", "5000"][..], "--rtt 5000 is out of range"),
        (
            &["--rtt", "20", "--rate", "0"][..],
            "--rate 0 is out of range",
        ),
        (&["--rate", "10"][..], "--rtt"),
    ] {
        let out = lab(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn without_privileges_rtt_names_the_capabilities_and_plain_lab_still_runs() {
    let _serial = support::serial();
    require_root();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                BIN,
                "lab",
            ])
            .args(args)
            .output()
            .expect("setpriv (util-linux) runs")
    };
    let out = as_nobody(&["--rtt", "20"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("CAP_NET_ADMIN") && stderr.contains("CAP_SYS_ADMIN"),
        "{stderr}"
    );
    let out = as_nobody(&[
        "--scenario",
        "echo",
        "--variant",
        "single",
        "--requests",
        "3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
