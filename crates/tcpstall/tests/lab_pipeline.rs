//! `tcpstall lab --scenario pipeline,concurrent`: requests in flight on one connection, and
//! connections sharing one client thread, on loopback and over an emulated path. What Linux
//! must do is pinned here, not read from the binary's own `expected_stall`.

use serde_json::Value;

mod support;

/// A stalled row waits for the 40 ms delayed-ACK timer (the rule's threshold); a clean one
/// takes well under 10 ms on loopback.
const STALL_MIN_MS: f64 = tcpstall::tcp_rules::STALL_THRESHOLD.as_millis() as f64;
const NO_STALL_MAX_MS: f64 = tcpstall::tcp_rules::CLEAN_BOUND.as_millis() as f64;

/// Rounds per row: enough for a median past the first round (quick-ACK mode), few enough to
/// keep each run short.
const ROUNDS: &str = "8";
/// Fewest rounds of the rows the pacing check concerns: three times the holds that make a
/// direction paced (`nagle_ack_paced`), as docs/LAB.md says.
const PACED_ROUNDS: u64 = 3 * (tcpstall::tcp_rules::MAX_QUICKACKS as u64 + 1);

use support::{lab_row as row, lab_rows as rows_of, row_name as name};

fn number(row: &Value, key: &str) -> f64 {
    row[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{}: no {key}", name(row)))
}

/// Requests in flight per connection and connections, per scenario.
fn shape(scenario: &str) -> (u64, u64) {
    match scenario {
        "pipeline" => (16, 1),
        "concurrent" => (4, 16),
        other => panic!("not a batched scenario: {other}"),
    }
}

#[test]
fn loopback_rows_answer_every_request_and_only_the_server_nagle_rows_stall() {
    let _serial = support::serial();
    let rows = rows_of(&["--scenario", "pipeline,concurrent", "--requests", ROUNDS]);
    let names: Vec<String> = rows.iter().map(name).collect();
    assert_eq!(rows.len(), 8, "{names:?}");
    for r in &rows {
        let scenario = r["scenario"].as_str().expect("scenario");
        let variant = r["variant"].as_str().expect("variant");
        let (depth, connections) = shape(scenario);
        let asked: u64 = ROUNDS.parse().expect("a count");
        // All but the timer rows run the rounds their capture's pacing check needs.
        let rounds = match variant {
            "server-nagle" => asked,
            _ => asked.max(PACED_ROUNDS),
        };
        assert_eq!(
            r["requests"].as_u64(),
            Some(rounds * depth * connections),
            "{}",
            name(r)
        );
        assert_eq!(r["connections"].as_u64(), Some(connections), "{}", name(r));
        assert!(number(r, "requests_per_second") > 0.0, "{}", name(r));
        // The rate is compared with the scenario's NODELAY row, not with itself.
        assert_eq!(r["throughput_lost"].is_null(), variant == "nodelay");
        let p50 = number(r, "p50_ms");
        if variant == "server-nagle" {
            // The odd reply waits for the client's delayed ACK in every round but the first.
            assert!(p50 >= STALL_MIN_MS, "{}: p50 {p50} ms", name(r));
            assert_eq!(r["held_side"], "server", "{}", name(r));
            assert_eq!(r["expected_detector_kind"], "nagle_delayed_ack");
            assert!(number(r, "throughput_lost") > 0.5, "{}", name(r));
        } else {
            // On loopback the ACK that paces Nagle comes back within microseconds.
            assert!(p50 < NO_STALL_MAX_MS, "{}: p50 {p50} ms", name(r));
            assert!(r["held_side"].is_null(), "{}", name(r));
        }
        let kind = match variant {
            "nagle" => Value::from("nagle_ack_paced"),
            "server-nagle" => Value::from("nagle_delayed_ack"),
            _ => Value::Null,
        };
        assert_eq!(r["expected_detector_kind"], kind, "{}", name(r));
        assert_eq!(r["stalled"], r["expected_stall"], "{}", name(r));
    }
}

#[test]
fn over_a_path_nagle_costs_a_round_trip_per_batch_and_a_gathering_write_does_not() {
    support::require_root(
        "lab --rtt needs CAP_NET_ADMIN and CAP_SYS_ADMIN (network namespaces, TUN devices)",
    );
    let _serial = support::serial();
    let rtt = 20.0;
    let rows = rows_of(&[
        "--rtt",
        "20",
        "--scenario",
        "pipeline,concurrent",
        "--variant",
        "nagle,nodelay,writev",
        "--requests",
        ROUNDS,
    ]);
    for scenario in ["pipeline", "concurrent"] {
        let nagle = row(&rows, scenario, "nagle");
        let nodelay = row(&rows, scenario, "nodelay");
        let writev = row(&rows, scenario, "writev");
        let p50 = |r: &Value| number(r, "p50_ms");
        let rate = |r: &Value| number(r, "requests_per_second");
        // Every request after the first waits for the first's ACK, which rides on the first
        // reply: one more round trip per batch, no timer.
        assert!(
            rate(nagle) < 0.8 * rate(nodelay) && p50(nagle) >= p50(nodelay) + rtt / 2.0,
            "{scenario}: nagle {} req/s p50 {} ms, nodelay {} req/s p50 {} ms",
            rate(nagle),
            p50(nagle),
            rate(nodelay),
            p50(nodelay)
        );
        assert!(
            p50(nagle) < 2.0 * rtt + STALL_MIN_MS,
            "{scenario}: nagle p50 {} ms waited for a timer",
            p50(nagle)
        );
        assert!(number(nagle, "throughput_lost") > 0.2, "{scenario}");
        // One gathering write: as fast as NODELAY.
        assert!(
            rate(writev) > 0.8 * rate(nodelay) && p50(writev) < p50(nodelay) + rtt / 2.0,
            "{scenario}: writev {} req/s p50 {} ms, nodelay {} req/s p50 {} ms",
            rate(writev),
            p50(writev),
            rate(nodelay),
            p50(nodelay)
        );
        for r in [nagle, nodelay, writev] {
            assert_eq!(r["stalled"], false, "{}", name(r));
        }
    }
}

/// The receiver's side: a Windows-like client ACKs every second segment or on its 200 ms
/// timer. The server holds every reply after the first (Nagle) until that one is ACKed, so
/// the odd reply left alone waits for the 200 ms timer; the client's own Nagle costs one
/// round trip, as the kernel's.
#[test]
fn a_windows_client_leaves_the_odd_reply_to_its_200_ms_timer() {
    support::require_root(
        "lab --rtt --peer needs CAP_NET_ADMIN and CAP_SYS_ADMIN (network namespaces, TUN devices)",
    );
    let _serial = support::serial();
    let rtt = 20.0;
    let rows = rows_of(&[
        "--rtt",
        "20",
        "--peer",
        "windows",
        "--scenario",
        "pipeline",
        "--variant",
        "nagle,server-nagle",
        "--requests",
        "5",
    ]);
    let held = row(&rows, "pipeline", "server-nagle");
    assert!(
        number(held, "p50_ms") >= 2.0 * rtt + 150.0,
        "server-nagle p50 {} ms",
        number(held, "p50_ms")
    );
    let nagle = row(&rows, "pipeline", "nagle");
    assert!(
        number(nagle, "p50_ms") < 2.0 * rtt + STALL_MIN_MS,
        "nagle p50 {} ms",
        number(nagle, "p50_ms")
    );
}
