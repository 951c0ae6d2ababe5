//! `tcpstall lab --rtt --peer`: one end of each row is the user-space stack behaving like
//! another system, the other the real kernel, over the emulated path; run as the built binary.
//! These tests need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and say so without it.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod support;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// The path's round-trip time in these tests.
const RTT_MS: f64 = 20.0;

fn require_root() {
    support::require_root("tests/lab_peer.rs needs root (network namespaces and TUN devices)");
}

/// Runs `tcpstall lab --json --rtt 20 ARGS`; returns its rows, each checked error-free.
fn lab_rows(args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--rtt", "20"];
    all.extend_from_slice(args);
    support::lab_rows(&all)
}

use support::{lab_row as row, row_name as name};

fn p50(row: &Value) -> f64 {
    row["p50_ms"].as_f64().expect("p50_ms")
}

/// p50 less the round trips the row needs without any timer: what a timer added.
fn wait_beyond_path(row: &Value) -> f64 {
    let threshold = row["stall_threshold_ms"].as_f64().expect("threshold");
    // The threshold is round trips x RTT + the stall threshold.
    p50(row) - (threshold - support::STALL_MIN_MS)
}

#[test]
fn windows_client_waits_200_ms_for_memcached_value_1400_and_its_ack_fix_does_not() {
    require_root();
    let _serial = support::serial();
    let rows = lab_rows(&[
        "--peer",
        "windows",
        "--scenario",
        "memcached",
        "--variant",
        "value-1400,quickack-1400",
        "--requests",
        "6",
    ]);
    let held = row(&rows, "memcached", "value-1400");
    assert!(
        wait_beyond_path(held) >= 150.0,
        "value-1400 with a Windows client: p50 {} ms over a {RTT_MS} ms path",
        p50(held)
    );
    assert_eq!(held["stalled"], true);
    let fixed = row(&rows, "memcached", "quickack-1400");
    assert!(
        wait_beyond_path(fixed) < 10.0,
        "quickack-1400 (TcpAckFrequency=1) p50 {} ms",
        p50(fixed)
    );
    assert_eq!(fixed["stalled"], false);
}

#[test]
fn windows_server_holds_the_echo_ack_200_ms_and_client_nodelay_avoids_it() {
    require_root();
    let _serial = support::serial();
    // Document 000 on Windows: the server is the side that delays its ACK.
    let rows = lab_rows(&[
        "--peer",
        "windows",
        "--peer-side",
        "server",
        "--scenario",
        "echo",
        "--variant",
        "split,nodelay",
        "--requests",
        "4",
    ]);
    let split = row(&rows, "echo", "split");
    assert!(
        wait_beyond_path(split) >= 150.0,
        "echo split against a Windows server: p50 {} ms",
        p50(split)
    );
    let nodelay = row(&rows, "echo", "nodelay");
    assert!(
        wait_beyond_path(nodelay) < 10.0,
        "echo nodelay against a Windows server: p50 {} ms",
        p50(nodelay)
    );
}

#[test]
fn linux_profile_agrees_with_the_kernel_on_every_echo_and_http_row_on_either_side() {
    require_root();
    let _serial = support::serial();
    let args = ["--scenario", "echo,http", "--requests", "10"];
    let kernel = lab_rows(&args);
    for side in ["client", "server"] {
        let mut with_peer = vec!["--peer", "linux", "--peer-side", side];
        with_peer.extend_from_slice(&args);
        let peer = lab_rows(&with_peer);
        // A route row whose route is on the peer's side is left out: the user-space stack
        // has no kernel route to change.
        let same = |k: &&Value| {
            peer.iter()
                .any(|p| p["scenario"] == k["scenario"] && p["variant"] == k["variant"])
        };
        let (kernel_rows, left_out): (Vec<&Value>, Vec<&Value>) = kernel.iter().partition(same);
        assert!(
            left_out.iter().all(|k| k["variant"]
                .as_str()
                .is_some_and(|v| v.starts_with("route-"))),
            "{left_out:?}"
        );
        assert_eq!(kernel_rows.len(), peer.len());
        for k in kernel_rows {
            let p = row(
                &peer,
                k["scenario"].as_str().unwrap_or_default(),
                k["variant"].as_str().unwrap_or_default(),
            );
            assert_eq!(
                k["stalled"],
                p["stalled"],
                "{} with a linux {side}: kernel {k} peer {p}",
                name(k)
            );
            assert!(
                (p50(k) - p50(p)).abs() < 10.0,
                "{} with a linux {side}: kernel p50 {} ms, peer p50 {} ms",
                name(k),
                p50(k),
                p50(p)
            );
        }
    }
}

/// `analyze --json FILE`'s events.
fn analyze_events(pcap: &Path) -> Vec<Value> {
    let out = Command::new(BIN)
        .args(["analyze", "--json"])
        .arg(pcap)
        .output()
        .expect("tcpstall analyze runs");
    assert!(
        out.status.success(),
        "analyze failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("analyze --json prints JSON");
    report["events"].as_array().expect("events").clone()
}

#[test]
fn analyze_names_the_peers_stack_from_its_captured_delayed_ack() {
    require_root();
    let _serial = support::serial();
    let dir = std::env::temp_dir().join(format!("tcpstall-lab-peer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (profile, scenario, variant, stack) in [
        ("windows", "memcached", "value-1400", "windows"),
        ("macos", "http", "split", "macos_bsd"),
    ] {
        let pcap: PathBuf = dir.join(format!("{profile}.pcap"));
        lab_rows(&[
            "--peer",
            profile,
            "--scenario",
            scenario,
            "--variant",
            variant,
            "--requests",
            "8",
            "--capture",
            pcap.to_str().expect("utf-8 path"),
        ]);
        let events = analyze_events(&pcap);
        let delayed: Vec<&Value> = events
            .iter()
            .filter(|e| e["kind"] == "nagle_delayed_ack")
            .collect();
        // The first turn of a connection may not stall; the rest do.
        assert!(
            delayed.len() >= 6,
            "{profile}: {} delayed-ACK stalls in {events:?}",
            delayed.len()
        );
        for event in &delayed {
            assert_eq!(event["ack_side"], "client", "{profile}: {event}");
        }
        let named = delayed.iter().filter(|e| e["peer_stack"] == stack).count();
        // macOS's timer fires 100 to 200 ms after the data: a delay near 200 ms is
        // indistinguishable from Windows', so most, not all, of its stalls are named macOS.
        assert!(
            named * 2 > delayed.len(),
            "{profile}: {named} of {} stalls named {stack}: {delayed:?}",
            delayed.len()
        );
        assert!(
            delayed.iter().all(|e| e["peer_stack"] != "linux"),
            "{profile}: a stall named linux: {delayed:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
