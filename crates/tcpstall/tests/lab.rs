//! `tcpstall lab` end to end: the built binary on real loopback sockets, its JSON checked
//! against what Linux must do, its capture read back by tcpdump and tshark.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

mod support;

use support::{lab, stall_rule_text, NO_STALL_MAX_MS, STALL_MIN_MS};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn lab_json(args: &[&str]) -> Value {
    support::lab_report(args)
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

/// What Linux must do with each row, pinned here rather than read from the binary's own
/// `expected_stall`, so that a wrong catalogue fails the test: the split writes stall (the
/// second write waits in tcp_nagle_check for the delayed ACK of the first), every fix does not.
const ECHO: &[(&str, bool)] = &[
    ("split", true),
    ("single", false),
    ("writev", false),
    ("nodelay", false),
    ("flush", true),
    ("cork", false),
    ("msg_more", false),
    ("quickack", false),
    ("delack-max", false),
    ("short", false),
];
const HTTP: &[(&str, bool)] = &[
    ("split", true),
    ("single", false),
    ("nodelay", false),
    ("delack-max", false),
    ("short", false),
];
/// MSS 1460 (1448 B of payload): the reply is cut after 1400 B; a rest below one MSS is held,
/// a rest starting with a full segment is not, and a reply under 1400 B is one write.
const MEMCACHED: &[(&str, bool)] = &[
    ("value-100", false),
    ("value-1400", true),
    ("value-2400", true),
    ("value-4000", false),
    ("quickack-1400", false),
    ("delack-max-1400", false),
    ("nodelay-1400", false),
];
const INHERIT: &[(&str, bool)] = &[("nodelay-listener", false), ("quickack-listener", true)];

/// Exactly the rows of `expected`, each stalled (p50 >= 30 ms) or not (p50 < 10 ms) as pinned
/// there, without errors, and the lab's own verdict and expectation agree. A `delack-max` row
/// is not stalled but still held for about its cap: its p50 is only below the stall rule.
fn assert_stalls(rows: &[Value], expected: &[(&str, bool)]) {
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    let pinned: Vec<&str> = expected.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, pinned, "the rows run");
    for (row, (_, stalls)) in rows.iter().zip(expected) {
        let p50 = row["p50_ms"].as_f64().unwrap();
        assert!(
            row["errors"].is_null(),
            "{}: errors {}",
            name(row),
            row["errors"]
        );
        if *stalls {
            assert!(
                p50 >= STALL_MIN_MS,
                "{} must stall, p50 {p50} ms",
                name(row)
            );
        } else {
            let capped = is_delack_max(row);
            let max = if capped {
                STALL_MIN_MS
            } else {
                NO_STALL_MAX_MS
            };
            assert!(p50 < max, "{} must not stall, p50 {p50} ms", name(row));
        }
        assert_eq!(row["stalled"].as_bool(), Some(*stalls), "{}", name(row));
        assert_eq!(
            row["expected_stall"].as_bool(),
            Some(*stalls),
            "{}: expectation",
            name(row)
        );
    }
}

/// A row whose ACKing side caps its delayed ACK (`delack-max`, `delack-max-1400`).
fn is_delack_max(row: &Value) -> bool {
    row["variant"]
        .as_str()
        .is_some_and(|v| v.starts_with("delack-max"))
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
    assert_stalls(&rows, ECHO);
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
    assert_stalls(&rows, HTTP);
    assert!(variant(&rows, "split")["stalled"].as_bool().unwrap());
    assert_eq!(variant(&rows, "split")["held_side"], "server");
    assert!(!variant(&rows, "short")["stalled"].as_bool().unwrap());
    assert_eq!(variant(&rows, "short")["stalled_requests"], 0);
}

#[test]
fn memcached_cut_stalls_only_when_the_rest_is_below_one_mss() {
    let rows = rows(&lab_json(&["--scenario", "memcached", "--requests", "6"]));
    assert_stalls(&rows, MEMCACHED);
    assert!(rows.iter().all(|r| r["mss"] == 1460));
}

#[test]
fn listener_nodelay_is_inherited_and_quickack_is_not_lasting() {
    let rows = rows(&lab_json(&["--scenario", "inherit", "--requests", "6"]));
    assert_stalls(&rows, INHERIT);
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
    assert_stalls(&rows, &[("nagle-0ms", false), ("nodelay-5ms", false)]);
    for row in &rows {
        assert_eq!(row["requests"], 20, "{}", name(row));
        assert_eq!(row["connections"], 4);
        let share = row["own_segment_share"].as_f64().unwrap();
        assert!(share > 0.0 && share <= 1.0, "{}: share {share}", name(row));
        assert!(row["autocorking_delta"].is_u64());
        assert_eq!(row["server_data_segments"], 0, "the receiver sends no data");
    }
}

/// Payload bytes of a full segment for TCP_MAXSEG `mss` (loopback's 65495 when unset): the
/// timestamps option, on unless net.ipv4.tcp_timestamps=0, takes 12 bytes.
fn payload_mss(mss: Option<u64>) -> u64 {
    let timestamps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_timestamps")
        .map(|v| v.trim() != "0")
        .unwrap_or(true);
    mss.unwrap_or(65_495) - if timestamps { 12 } else { 0 }
}

fn require_root(what: &str) {
    support::require_root(&format!("{what} needs root (CAP_NET_RAW)"));
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
        "echo,memcached",
        "--variant",
        "split,single,short,value-4000",
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
    let mut data_packets_per_port: HashMap<u16, u64> = HashMap::new();
    let mut payload_per_port: HashMap<u16, Vec<u64>> = HashMap::new();
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
            *data_packets_per_port.entry(port).or_default() += 1;
            payload_per_port
                .entry(port)
                .or_default()
                .push(u64::from(len));
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
        // A loopback capture holds the sender's GSO packets: one packet may carry several
        // segments. Split each at the payload MSS as the NIC would; TCP_INFO counts those.
        let mss = payload_mss(row["mss"].as_u64());
        let segments: u64 = payload_per_port[&port]
            .iter()
            .map(|len| len.div_ceil(mss))
            .sum();
        assert_eq!(segments, json_segments, "{}", name(row));
        assert!(data_packets_per_port[&port] <= segments, "{}", name(row));
    }
    // Split: `hello `, `world\r\n` and the reply; single: request and reply.
    let r = requests as u64;
    let split = variant(&rows, "split")["server_port"].as_u64().unwrap() as u16;
    let single = variant(&rows, "single")["server_port"].as_u64().unwrap() as u16;
    let short = variant(&rows, "short")["server_port"].as_u64().unwrap() as u16;
    assert_eq!(data_packets_per_port[&split], 3 * r);
    assert_eq!(data_packets_per_port[&single], 2 * r);
    assert_eq!(flows_per_port[&short].len() as u64, r);
    // memcached value-4000 at MSS 1460 (1448 B of payload): `get k\r\n` (7 B), then a
    // 4023 B reply written as 1400 B and 2623 B, which leaves as 1448 B + 1175 B: four
    // segments per request, though GSO may carry the last two in one captured packet.
    let m4 = variant(&rows, "value-4000");
    let m4_port = m4["server_port"].as_u64().unwrap() as u16;
    assert_eq!(m4["client_data_segments"], r);
    assert_eq!(m4["server_data_segments"], 3 * r);
    let bytes: u64 = payload_per_port[&m4_port].iter().sum();
    assert_eq!(
        bytes,
        r * (7 + 16 + 4000 + 7),
        "payload bytes of value-4000"
    );

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
            "3",
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
        &[
            "unknown variant `writev`",
            "split, single, nodelay, delack-max, route-quickack, route-delack-max, short",
        ],
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
    assert!(text.contains(&stall_rule_text()));
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
    use tcpstall::latency::LatencySummary;

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
        assert_stalls(&rows, &[("split", stalls)]);
        assert_eq!(rows[0]["message_parts"][1], size.parse::<u64>().unwrap());
    }
}

/// The first request of a connection is always quick-ACKed, so with fewer than 3 requests
/// the median of a keep-alive row is a request that cannot stall: refused, with the reason.
/// Short connections (every request is a first one) run with any count; 3 requests are
/// enough for a split row to show its stall.
#[test]
fn too_few_requests_for_keep_alive_rows_are_refused() {
    for requests in ["1", "2"] {
        assert_error(
            &[
                "--scenario",
                "echo,http",
                "--variant",
                "split",
                "--requests",
                requests,
            ],
            &[
                "too few for keep-alive rows",
                "quick-ACK mode",
                "--requests 3",
            ],
        );
    }
    let rows = rows(&lab_json(&[
        "--scenario",
        "echo,http",
        "--variant",
        "short",
        "--requests",
        "1",
    ]));
    assert_eq!(rows.len(), 2);
    let rows_3 = self::rows(&lab_json(&[
        "--scenario",
        "echo",
        "--variant",
        "split,single",
        "--requests",
        "3",
    ]));
    assert_stalls(&rows_3, &[("split", true), ("single", false)]);
}

/// `--size` replaces memcached's value sizes: value-100 ... value-4000 become one row named by
/// the size in use, and the table shows that size.
#[test]
fn memcached_size_names_the_rows_by_the_value_in_use() {
    let rows = rows(&lab_json(&[
        "--scenario",
        "memcached",
        "--size",
        "2400",
        "--requests",
        "6",
    ]));
    // 1400 B then 1023 B: both below the 1448 B payload of MSS 1460, so the rest is held.
    assert_stalls(
        &rows,
        &[
            ("value-2400", true),
            ("quickack-2400", false),
            ("delack-max-2400", false),
            ("nodelay-2400", false),
        ],
    );
    for row in &rows {
        assert_eq!(row["size"], 2400, "{}", name(row));
    }
    let text = lab(&[
        "--scenario",
        "memcached",
        "--variant",
        "value-100",
        "--size",
        "2400",
        "--requests",
        "3",
    ]);
    assert!(text.status.success());
    let table = String::from_utf8_lossy(&text.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("memcached"))
        .expect("a memcached row");
    assert!(
        line.contains("value-2400") && line.contains(" 2400 "),
        "{line}"
    );
    assert!(!line.contains("one write"), "{line}");
}

/// Whatever --mss says, a row's explanation follows the writes it makes: at MSS 88 the 1400 B
/// first write of memcached is many full segments and nothing waits for a timer.
#[test]
fn small_mss_rows_do_not_stall_and_say_why() {
    let rows = rows(&lab_json(&[
        "--scenario",
        "memcached",
        "--variant",
        "value-1400",
        "--mss",
        "88",
        "--requests",
        "6",
    ]));
    assert_stalls(&rows, &[("value-1400", false)]);
    let why = rows[0]["explanation"].as_str().unwrap();
    assert!(why.contains("fills at least one 76 B segment"), "{why}");
    assert!(!why.contains("waits in tcp_nagle_check"), "{why}");
}

/// A row cut short is an error: the table still comes out on stdout, the reason goes to stderr
/// with the row's name, and the exit status is 2.
#[test]
fn row_errors_reach_stderr_and_exit_2() {
    // 100 stalled requests need over 4 s; the row timeout stops them after 1 s.
    let out = lab(&[
        "--scenario",
        "echo",
        "--variant",
        "split",
        "--requests",
        "100",
        "--row-timeout",
        "1",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stdout.contains("echo       split"), "{stdout}");
    assert!(
        stderr.contains("echo/split: stopped by the 1 s row timeout"),
        "{stderr}"
    );
}

/// Out of file descriptors, the server's accept fails again and again: the row reports it once
/// with a count and what to do, and the run ends with status 2. Each connection lives at least
/// 45 ms (10 writes 5 ms apart), so the 16 run at once hold 32 descriptors, over the limit of
/// 24 whatever the timing (connections of 3 quick writes sometimes ended before it was hit).
#[test]
fn running_out_of_descriptors_is_one_counted_error() {
    let out = Command::new("sh")
        .args([
            "-c",
            "ulimit -n 24 && exec \"$0\" \"$@\"",
            BIN,
            "lab",
            "--json",
        ])
        .args(["--scenario", "stream", "--variant", "nagle-5ms"])
        .args(["--parallel", "16", "--connections", "32", "--writes", "10"])
        .output()
        .expect("sh runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("too many open files: raise ulimit -n or lower --parallel"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let errors = report["rows"][0]["errors"].as_array().expect("errors");
    assert!(
        errors.len() <= 10,
        "{} error entries: {errors:?}",
        errors.len()
    );
    assert!(stderr.lines().count() <= 12, "{stderr}");
}

#[test]
fn unknown_variant_lists_each_name_once() {
    let out = lab(&["--variant", "bogus"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    let list = stderr
        .split("known variants are ")
        .nth(1)
        .and_then(|rest| rest.split(" (see").next())
        .expect("a list of variants");
    let names: Vec<&str> = list.split(", ").collect();
    let mut unique = names.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(names.len(), unique.len(), "{list}");
    assert!(names.contains(&"split") && names.contains(&"value-4000"));
}

#[test]
fn list_json_is_the_catalogue() {
    let out = lab(&["--list", "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).expect("--list --json prints JSON");
    let scenarios = list["scenarios"].as_array().expect("scenarios");
    let names: Vec<&str> = scenarios
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "echo",
            "http",
            "memcached",
            "stream",
            "inherit",
            "pipeline",
            "concurrent"
        ]
    );
    let echo: Vec<(&str, bool)> = scenarios[0]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap(),
                v["expected_stall"].as_bool().unwrap(),
            )
        })
        .collect();
    // The route rows are listed; a run leaves them out on loopback (tests/route.rs runs them).
    let (route, rest): (Vec<_>, Vec<_>) = echo.iter().partition(|(n, _)| n.starts_with("route-"));
    assert_eq!(rest.into_iter().copied().collect::<Vec<_>>(), ECHO);
    assert_eq!(
        route,
        [&("route-quickack", false), &("route-delack-max", false)]
    );
    assert!(list["stall_rule"]
        .as_str()
        .unwrap()
        .contains(&stall_rule_text()));
}

/// A reader that closes the pipe early (`tcpstall lab | head -1`) ends the run quietly.
#[test]
fn closed_stdout_ends_quietly() {
    use std::process::Stdio;
    let mut child = Command::new(BIN)
        .args(["lab", "--scenario", "echo", "--variant", "single"])
        .args(["--requests", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tcpstall binary runs");
    // Closing the read end now: the lab is still measuring, so every line it writes later
    // meets a closed pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("the run ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(out.status.code(), Some(0));
}

/// The data segments a request costs (`tcpi_data_segs_out` of both ends), pinned row by row
/// as the catalogue states them: a split write is two segments, one write of a message below
/// one MSS is one, a held tail leaves as a segment of its own. The TCP_NODELAY rows are left
/// out: autocorking may merge their parts on a busy machine.
#[test]
fn each_request_costs_the_segments_its_writes_make() {
    let pinned: &[(&str, f64)] = &[
        ("echo/split", 3.0),
        ("echo/single", 2.0),
        ("echo/writev", 2.0),
        ("echo/flush", 3.0),
        ("echo/cork", 2.0),
        ("echo/msg_more", 2.0),
        ("echo/quickack", 3.0),
        ("echo/short", 3.0),
        ("http/split", 3.0),
        ("http/single", 2.0),
        ("http/short", 3.0),
        ("memcached/value-100", 2.0),
        ("memcached/value-1400", 3.0),
        ("memcached/value-2400", 3.0),
        // The 2623 B rest is a full segment that leaves at once and a partial one.
        ("memcached/value-4000", 4.0),
        ("memcached/quickack-1400", 3.0),
        ("inherit/quickack-listener", 3.0),
    ];
    let report = lab_json(&[
        "--scenario",
        "echo,http,memcached,inherit",
        "--variant",
        "split,single,writev,flush,cork,msg_more,quickack,short,value-100,value-1400,\
         value-2400,value-4000,quickack-1400,quickack-listener",
        "--requests",
        "4",
    ]);
    let rows = rows(&report);
    let names: Vec<String> = rows.iter().map(name).collect();
    let expected: Vec<&str> = pinned.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, expected, "the rows run");
    for (row, (_, segments)) in rows.iter().zip(pinned) {
        assert_eq!(
            row["segments_per_request"].as_f64(),
            Some(*segments),
            "{}",
            name(row)
        );
    }
}

/// The head of a 4000 B echo line at MSS 1460 is a GSO super-packet of 1999 B that ends in a
/// partial segment: the tail waits for its ACK, which the server sends at once (more than one
/// MSS unacknowledged), so nothing stalls; head, tail and reply are 2 + 2 + 3 segments.
#[test]
fn a_head_ending_in_a_partial_segment_is_acked_at_once() {
    let rows = rows(&lab_json(&[
        "--scenario",
        "echo",
        "--variant",
        "split",
        "--size",
        "4000",
        "--mss",
        "1460",
        "--requests",
        "6",
    ]));
    assert_stalls(&rows, &[("split", false)]);
    assert_eq!(rows[0]["message_parts"], serde_json::json!([1999, 2001]));
    assert_eq!(rows[0]["segments_per_request"].as_f64(), Some(7.0));
    assert!(rows[0]["held_side"].is_null());
}

/// Over an emulated path the same head (a GSO super-packet ending in a partial segment) costs
/// a second round trip: the tail waits for the head's ACK, which the server sends at once. The
/// row's threshold counts both round trips, so the row is not taken for a stall.
#[test]
fn over_a_path_a_head_ending_in_a_partial_segment_costs_two_round_trips() {
    require_root("lab --rtt");
    const RTT_MS: f64 = 40.0;
    let rows = rows(&lab_json(&[
        "--rtt",
        "40",
        "--scenario",
        "echo",
        "--variant",
        "split,single",
        "--size",
        "4000",
        "--mss",
        "1460",
        "--requests",
        "6",
    ]));
    let split = variant(&rows, "split");
    let p50 = split["p50_ms"].as_f64().unwrap();
    assert!(p50 >= 2.0 * RTT_MS, "split: p50 {p50} ms below 2 RTT");
    assert_eq!(
        split["stall_threshold_ms"].as_f64(),
        Some(2.0 * RTT_MS + STALL_MIN_MS)
    );
    assert_eq!(split["stalled"], false, "split: p50 {p50} ms");
    assert_eq!(split["expected_stall"], false);
    let single = variant(&rows, "single");
    assert_eq!(
        single["stall_threshold_ms"].as_f64(),
        Some(RTT_MS + STALL_MIN_MS)
    );
    assert_eq!(single["stalled"], false);
}

/// TCP_DELACK_MAX_US on the side that ACKs the split message's first part (the fix
/// for the side that cannot change the writer): the hold lasts about the cap, not the 40 ms
/// timer, so the row is no stall while its split row is one; and unlike QUICKACK it is still
/// a hold, so the row is slower than its quickack row. Needs a kernel with the option
/// (Linux 6.13+); on an older one the rows are left out with a note on stderr.
#[test]
fn delack_max_rows_hold_for_the_cap_not_the_timer() {
    let args = [
        "--scenario",
        "echo,http,memcached",
        "--variant",
        "split,quickack,delack-max,value-1400,quickack-1400,delack-max-1400",
        "--requests",
        "10",
    ];
    let mut all = vec!["--json"];
    all.extend_from_slice(&args);
    let out = lab(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("lab --json prints JSON");
    let rows = rows(&report);
    let p50 = |scenario: &str, variant: &str| {
        let row = rows
            .iter()
            .find(|r| r["scenario"] == scenario && r["variant"] == variant)
            .unwrap_or_else(|| {
                panic!(
                    "no row {scenario}/{variant}: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        assert!(row["errors"].is_null(), "{}: {}", name(row), row["errors"]);
        if is_delack_max(row) {
            assert_eq!(row["stalled"], false, "{}", name(row));
            assert_eq!(row["expected_stall"], false, "{}", name(row));
            assert!(row["held_side"].is_null(), "{}", name(row));
            let why = row["explanation"].as_str().unwrap();
            assert!(
                why.contains("TCP_DELACK_MAX_US") && why.contains("ms on this kernel"),
                "{why}"
            );
        }
        row["p50_ms"].as_f64().unwrap()
    };
    let triples = [
        ("echo", "split", Some("quickack"), "delack-max"),
        ("http", "split", None, "delack-max"),
        (
            "memcached",
            "value-1400",
            Some("quickack-1400"),
            "delack-max-1400",
        ),
    ];
    for (scenario, split, quickack, capped) in triples {
        let (split_ms, capped_ms) = (p50(scenario, split), p50(scenario, capped));
        assert!(
            split_ms >= STALL_MIN_MS,
            "{scenario}/{split} must stall, p50 {split_ms} ms"
        );
        assert!(
            capped_ms < STALL_MIN_MS,
            "{scenario}/{capped} must hold for the cap, not the timer: p50 {capped_ms} ms"
        );
        if let Some(quickack) = quickack {
            let quick_ms = p50(scenario, quickack);
            assert!(
                quick_ms < NO_STALL_MAX_MS,
                "{scenario}/{quickack} must not stall, p50 {quick_ms} ms"
            );
        }
    }
}
