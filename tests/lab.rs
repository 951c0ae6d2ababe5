//! `tcpstall lab` end to end: the built binary on real loopback sockets, its JSON checked
//! against what Linux must do, its capture read back by tcpdump and tshark.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

mod support;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// A stalled request waits for the 40 ms delayed-ACK timer; a fixed one takes well under 1 ms.
const STALL_MIN_MS: f64 = 30.0;
const NO_STALL_MAX_MS: f64 = 10.0;

fn lab(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("lab")
        .args(args)
        .output()
        .expect("the tcpstall binary runs")
}

fn lab_json(args: &[&str]) -> Value {
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

fn rows(report: &Value) -> Vec<Value> {
    report["rows"].as_array().expect("rows array").clone()
}

fn name(row: &Value) -> String {
    format!(
        "{}/{}",
        row["scenario"].as_str().unwrap(),
        row["variant"].as_str().unwrap()
    )
}

/// Every row that must stall has p50 >= 30 ms, every fix p50 < 10 ms, and the lab's own
/// verdict agrees.
fn assert_stalls_as_expected(rows: &[Value]) {
    assert!(!rows.is_empty());
    for row in rows {
        let p50 = row["p50_ms"].as_f64().unwrap();
        let expected = row["expected_stall"].as_bool().unwrap();
        assert!(
            row["errors"].is_null(),
            "{}: errors {}",
            name(row),
            row["errors"]
        );
        if expected {
            assert!(
                p50 >= STALL_MIN_MS,
                "{} must stall, p50 {p50} ms",
                name(row)
            );
        } else {
            assert!(
                p50 < NO_STALL_MAX_MS,
                "{} must not stall, p50 {p50} ms",
                name(row)
            );
        }
        assert_eq!(row["stalled"].as_bool(), Some(expected), "{}", name(row));
    }
}

fn variant<'a>(rows: &'a [Value], variant: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["variant"] == variant)
        .unwrap_or_else(|| panic!("no row {variant}"))
}

#[test]
fn echo_split_writes_stall_and_every_fix_does_not() {
    let report = lab_json(&["--scenario", "echo", "--requests", "6"]);
    let rows = rows(&report);
    assert_eq!(rows.len(), 9);
    assert_stalls_as_expected(&rows);
    for stalls in ["split", "flush"] {
        let row = variant(&rows, stalls);
        assert!(row["expected_stall"].as_bool().unwrap());
        assert_eq!(
            row["held_side"], "client",
            "the client writes `hello ` `world`"
        );
        // The first turn runs in quick-ACK mode, every later one waits for the timer.
        assert_eq!(row["stalled_requests"], 5);
    }
    assert!(variant(&rows, "single")["held_side"].is_null());
    // Short connections: one connection per request.
    assert_eq!(variant(&rows, "short")["connections"], 6);
    assert_eq!(variant(&rows, "split")["connections"], 1);
    // Gathered writes leave as one segment: request + reply = 2 per request.
    for one_segment in ["single", "writev", "cork", "msg_more"] {
        let segs = variant(&rows, one_segment)["segments_per_request"]
            .as_f64()
            .unwrap();
        assert!(
            (segs - 2.0).abs() < 1e-9,
            "{one_segment}: {segs} segments per request"
        );
    }
    assert!(report["kernel"]["release"].is_string());
    assert!(report["kernel_summary"]
        .as_str()
        .unwrap()
        .contains("delayed ACK"));
}

#[test]
fn http_header_then_body_stalls_on_keep_alive_only() {
    let rows = rows(&lab_json(&["--scenario", "http", "--requests", "6"]));
    assert_eq!(rows.len(), 4);
    assert_stalls_as_expected(&rows);
    assert!(variant(&rows, "split")["stalled"].as_bool().unwrap());
    assert_eq!(variant(&rows, "split")["held_side"], "server");
    assert!(!variant(&rows, "short")["stalled"].as_bool().unwrap());
    assert_eq!(variant(&rows, "short")["stalled_requests"], 0);
}

#[test]
fn memcached_cut_stalls_only_when_the_rest_is_below_one_mss() {
    let rows = rows(&lab_json(&["--scenario", "memcached", "--requests", "6"]));
    assert_stalls_as_expected(&rows);
    let stalled: BTreeMap<String, bool> = rows
        .iter()
        .map(|r| {
            (
                r["variant"].as_str().unwrap().to_string(),
                r["stalled"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(!stalled["value-100"], "value-100 must not stall");
    assert!(stalled["value-1400"], "value-1400 must stall");
    assert!(stalled["value-2400"], "value-2400 must stall");
    assert!(!stalled["value-4000"], "value-4000 must not stall");
    assert!(!stalled["quickack-1400"], "quickack-1400 must not stall");
    assert!(!stalled["nodelay-1400"], "nodelay-1400 must not stall");
    assert!(rows.iter().all(|r| r["mss"] == 1460));
}

#[test]
fn listener_nodelay_is_inherited_and_quickack_is_not_lasting() {
    let rows = rows(&lab_json(&["--scenario", "inherit", "--requests", "6"]));
    assert_stalls_as_expected(&rows);
    assert_eq!(variant(&rows, "nodelay-listener")["inherited"], true);
    assert!(variant(&rows, "quickack-listener")["inherited"].is_boolean());
}

#[test]
fn stream_reports_share_of_own_segments_and_autocorking() {
    let rows = rows(&lab_json(&[
        "--scenario",
        "stream",
        "--variant",
        "nagle-0ms,nodelay-5ms",
        "--connections",
        "4",
        "--writes",
        "5",
    ]));
    assert_eq!(rows.len(), 2);
    assert_stalls_as_expected(&rows);
    for row in &rows {
        assert_eq!(row["requests"], 20, "{}", name(row));
        assert_eq!(row["connections"], 4);
        let share = row["own_segment_share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.0, "{}: share {share}", name(row));
        assert!(row["autocorking_delta"].is_u64());
        assert_eq!(row["server_data_segments"], 0, "the receiver sends no data");
    }
}

fn require_root(what: &str) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "{what} needs root (CAP_NET_RAW); run the tests as root"
    );
}

fn temp_path(file: &str) -> PathBuf {
    std::env::temp_dir().join(format!("tcpstall-lab-{}-{file}", std::process::id()))
}

/// Runs a tool on a capture and returns its standard output.
fn read_with(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{tool} is installed by scripts/install-deps: {e}"));
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn capture_is_read_by_tcpdump_and_tshark_with_one_flow_per_connection() {
    require_root("--capture");
    let pcap = temp_path("capture.pcap");
    let pcap_str = pcap.to_str().unwrap();
    let requests = 4;
    let report = lab_json(&[
        "--scenario",
        "echo",
        "--variant",
        "split,single,short",
        "--requests",
        &requests.to_string(),
        "--capture",
        pcap_str,
    ]);
    let rows = rows(&report);
    assert_eq!(report["capture"]["unclosed_flows"], 0);
    assert_eq!(report["capture"]["dropped"], 0);

    let tcpdump = read_with("tcpdump", &["-n", "-r", pcap_str]);
    assert_eq!(
        tcpdump.lines().count() as u64,
        report["capture"]["packets"].as_u64().unwrap()
    );

    // One line per TCP packet: stream index, ports, payload length, analysis flags.
    let fields = read_with(
        "tshark",
        &[
            "-r",
            pcap_str,
            "-T",
            "fields",
            "-E",
            "separator=,",
            "-e",
            "tcp.stream",
            "-e",
            "tcp.srcport",
            "-e",
            "tcp.dstport",
            "-e",
            "tcp.len",
            "-e",
            "tcp.analysis.retransmission",
            "-e",
            "tcp.analysis.duplicate_ack",
        ],
    );
    let mut flows_per_port: HashMap<u16, std::collections::HashSet<u32>> = HashMap::new();
    let mut data_segments_per_port: HashMap<u16, u64> = HashMap::new();
    let ports: Vec<u16> = rows
        .iter()
        .map(|r| r["server_port"].as_u64().unwrap() as u16)
        .collect();
    for line in fields.lines() {
        let f: Vec<&str> = line.split(',').collect();
        let (stream, src, dst, len) = (
            f[0].parse::<u32>().unwrap(),
            f[1].parse::<u16>().unwrap(),
            f[2].parse::<u16>().unwrap(),
            f[3].parse::<u32>().unwrap(),
        );
        // Loopback copies of outgoing packets were skipped: nothing looks retransmitted.
        assert!(
            f[4].is_empty() && f[5].is_empty(),
            "duplicate packet: {line}"
        );
        let port = if ports.contains(&src) { src } else { dst };
        assert!(ports.contains(&port), "packet of a foreign flow: {line}");
        flows_per_port.entry(port).or_default().insert(stream);
        if len > 0 {
            *data_segments_per_port.entry(port).or_default() += 1;
        }
    }
    for row in &rows {
        let port = row["server_port"].as_u64().unwrap() as u16;
        let connections = row["connections"].as_u64().unwrap();
        assert_eq!(
            flows_per_port[&port].len() as u64,
            connections,
            "{}",
            name(row)
        );
        let json_segments = row["client_data_segments"].as_u64().unwrap()
            + row["server_data_segments"].as_u64().unwrap();
        assert_eq!(
            data_segments_per_port[&port],
            json_segments,
            "{}",
            name(row)
        );
    }
    // Split: `hello `, `world\r\n` and the reply; single: request and reply.
    let r = requests as u64;
    let split = variant(&rows, "split")["server_port"].as_u64().unwrap() as u16;
    let single = variant(&rows, "single")["server_port"].as_u64().unwrap() as u16;
    let short = variant(&rows, "short")["server_port"].as_u64().unwrap() as u16;
    assert_eq!(data_segments_per_port[&split], 3 * r);
    assert_eq!(data_segments_per_port[&single], 2 * r);
    assert_eq!(flows_per_port[&short].len() as u64, r);

    // Kernel timestamps show the stall: after the first turn (quick-ACK mode), `world` leaves
    // one delayed-ACK timeout after `hello `.
    let to_split = format!("tcp.dstport=={split} && tcp.len>0");
    let times = read_with(
        "tshark",
        &[
            "-r",
            pcap_str,
            "-Y",
            &to_split,
            "-T",
            "fields",
            "-e",
            "frame.time_epoch",
        ],
    );
    let times: Vec<f64> = times.lines().map(|t| t.trim().parse().unwrap()).collect();
    assert_eq!(times.len() as u64, 2 * r);
    for (turn, pair) in times.chunks(2).enumerate().skip(1) {
        let gap_ms = (pair[1] - pair[0]) * 1000.0;
        assert!(
            gap_ms >= STALL_MIN_MS,
            "turn {turn}: `world` {gap_ms:.3} ms after `hello `"
        );
    }
    let _ = std::fs::remove_file(&pcap);
}

#[test]
fn capture_without_cap_net_raw_names_the_capability() {
    require_root("dropping CAP_NET_RAW with setpriv");
    let pcap = temp_path("nocap.pcap");
    let out = Command::new("setpriv")
        .args(["--bounding-set=-net_raw", "--inh-caps=-net_raw", BIN, "lab"])
        .args([
            "--scenario",
            "echo",
            "--variant",
            "single",
            "--requests",
            "1",
            "--capture",
        ])
        .arg(&pcap)
        .output()
        .expect("setpriv (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(
        stderr.contains("CAP_NET_RAW") && stderr.contains("setcap"),
        "{stderr}"
    );
    assert!(!pcap.exists(), "no file is left behind");
}

fn assert_error(args: &[&str], expect: &[&str]) {
    let out = lab(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    for text in expect {
        assert!(
            stderr.contains(text),
            "{args:?}: `{text}` missing from: {stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn bad_input_is_refused_with_exit_status_2() {
    assert_error(
        &["--scenario", "nosuch"],
        &[
            "unknown scenario `nosuch`",
            "echo, http, memcached, stream, inherit",
        ],
    );
    assert_error(
        &["--scenario", "http", "--variant", "writev"],
        &["unknown variant `writev`", "split, single, nodelay, short"],
    );
    assert_error(
        &["--scenario", "echo", "--size", "2"],
        &["--size 2 is out of range", "3 to"],
    );
    assert_error(&["--size", "0"], &["--size 0 is out of range"]);
    assert_error(&["--mss", "40"], &["--mss 40 is out of range", "88"]);
    assert_error(&["--requests", "0"], &["--requests 0 is out of range"]);
    assert_error(&["--requests", "many"], &["invalid value"]);
}

#[test]
fn list_describes_every_scenario_and_the_stall_rule() {
    let out = lab(&["--list"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for scenario in ["echo:", "http:", "memcached:", "stream:", "inherit:"] {
        assert!(text.contains(scenario), "{scenario} missing from --list");
    }
    assert!(text.contains(">= 30 ms"));
    assert!(text.contains("value-4000"));
}

/// A real server outside the lab: CPython's `http.server` in HTTP/1.1 mode writes the header
/// block and the file in two writes (CPython issue 108736), so the lab's keep-alive client
/// stalls on it, and re-arming TCP_QUICKACK on the client removes the stall.
mod python_http_server {
    use std::net::SocketAddr;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    use tcpstall::lab::client::{ClientConfig, HttpClient};
    use tcpstall::lab::measure::LatencySummary;

    use super::support::{first_line_within, KillOnDrop};

    fn start(dir: &std::path::Path) -> (KillOnDrop, SocketAddr) {
        let mut child = Command::new("python3")
            .args(["-u", "-m", "http.server", "--protocol", "HTTP/1.1"])
            .args(["--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg("0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 is installed by scripts/install-deps");
        let stdout = child.stdout.take().expect("piped stdout");
        let guard = KillOnDrop(child);
        // "Serving HTTP on 127.0.0.1 port 41234 (http://127.0.0.1:41234/) ..."
        let line = first_line_within(stdout, Duration::from_secs(10))
            .expect("http.server announces its port");
        let port: u16 = line
            .split_whitespace()
            .skip_while(|w| *w != "port")
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no port in {line:?}"));
        (guard, SocketAddr::from(([127, 0, 0, 1], port)))
    }

    fn p50_ms(addr: SocketAddr, config: &ClientConfig) -> f64 {
        let mut client = HttpClient::connect(addr, config).expect("connects to http.server");
        let deadline = Instant::now() + Duration::from_secs(10);
        let latencies = client
            .time_gets("/file.txt", 8, deadline)
            .expect("GETs succeed");
        assert_eq!(latencies.len(), 8);
        LatencySummary::of(&latencies).p50_ms
    }

    #[test]
    fn cpython_keep_alive_stalls_and_client_quickack_fixes_it() {
        let dir = std::env::temp_dir().join(format!("tcpstall-lab-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("file.txt"), vec![b'x'; 200]).unwrap();
        let (_server, addr) = start(&dir);
        let plain = p50_ms(addr, &ClientConfig::default());
        let quickack = p50_ms(
            addr,
            &ClientConfig {
                quickack_rearm: true,
                ..ClientConfig::default()
            },
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            plain >= super::STALL_MIN_MS,
            "http.server keep-alive p50 {plain} ms"
        );
        assert!(
            quickack < super::NO_STALL_MAX_MS,
            "with client TCP_QUICKACK p50 {quickack} ms"
        );
    }
}

/// The boundary of the rule, at MSS 1460 (1448 payload bytes with timestamps): a body one byte
/// short of a full segment is held for the delayed ACK; a full-segment body is not.
#[test]
fn http_body_stalls_up_to_one_byte_below_a_full_segment() {
    for (size, stalls) in [("1447", true), ("1448", false)] {
        let rows = rows(&lab_json(&[
            "--scenario",
            "http",
            "--variant",
            "split",
            "--mss",
            "1460",
            "--size",
            size,
            "--requests",
            "6",
        ]));
        assert_stalls_as_expected(&rows);
        assert_eq!(
            rows[0]["stalled"].as_bool(),
            Some(stalls),
            "body of {size} B"
        );
    }
}
