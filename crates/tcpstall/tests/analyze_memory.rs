//! `analyze` of a capture of many connections: memory follows the connections open at once,
//! not every connection of the capture (the flows retired past a bound go to a temporary file),
//! and the reports are the same byte for byte whether the flows stayed in memory or not.
//!
//! The captures are written here, packet by packet: short HTTP-like exchanges, one starting
//! every millisecond, each closed by the client's RST; every 997th connection gets a late
//! duplicate ACK 3 s after its close, which rejoins it (`continued`, joined in the report).

mod support;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/analyze");

/// The variable that sets how many retired flows `analyze` keeps in memory.
const IN_MEMORY_VAR: &str = "TCPSTALL_FLOWS_IN_MEMORY";

/// One Ethernet + IPv4 + TCP frame from `src` to `dst`.
fn frame(
    src: ([u8; 4], u16),
    dst: ([u8; 4], u16),
    seq: u32,
    ack: u32,
    flags: u8,
    payload: usize,
) -> Vec<u8> {
    let mut f = Vec::with_capacity(54 + payload);
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00]);
    let total = (20 + 20 + payload) as u16;
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    ip[12..16].copy_from_slice(&src.0);
    ip[16..20].copy_from_slice(&dst.0);
    let mut sum: u32 = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f.extend_from_slice(&ip);
    let mut tcp = [0u8; 20];
    tcp[0..2].copy_from_slice(&src.1.to_be_bytes());
    tcp[2..4].copy_from_slice(&dst.1.to_be_bytes());
    tcp[4..8].copy_from_slice(&seq.to_be_bytes());
    tcp[8..12].copy_from_slice(&ack.to_be_bytes());
    tcp[12] = 5 << 4;
    tcp[13] = flags;
    tcp[14..16].copy_from_slice(&65535u16.to_be_bytes());
    f.extend_from_slice(&tcp);
    f.resize(54 + payload, b'x');
    f
}

const SYN: u8 = 0x02;
const ACK: u8 = 0x10;
const PSH_ACK: u8 = 0x18;
const SYN_ACK: u8 = 0x12;
const RST: u8 = 0x04;

/// Appends one pcap record of `frame` captured `us` microseconds after the epoch.
fn record(out: &mut impl Write, us: u64, frame: &[u8]) {
    let mut header = Vec::with_capacity(16);
    header.extend_from_slice(&((us / 1_000_000) as u32).to_le_bytes());
    header.extend_from_slice(&((us % 1_000_000) as u32).to_le_bytes());
    header.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    header.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    out.write_all(&header).expect("write");
    out.write_all(frame).expect("write");
}

/// Writes a pcap of `connections` short connections, one starting every millisecond, each
/// from its own client address.
fn write_capture(path: &Path, connections: u32) {
    let mut out = BufWriter::new(fs::File::create(path).expect("create the capture"));
    // pcap, microseconds, Ethernet.
    let mut header = Vec::new();
    header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&[0; 8]);
    header.extend_from_slice(&65535u32.to_le_bytes());
    header.extend_from_slice(&1u32.to_le_bytes());
    out.write_all(&header).expect("write");
    let server = ([10, 0, 0, 2], 80);
    // Late ACKs waiting for their time, in time order.
    let mut late: std::collections::VecDeque<(u64, Vec<u8>)> = Default::default();
    for i in 0..connections {
        let start = 1_000_000 + u64::from(i) * 1_000;
        while late.front().is_some_and(|(at, _)| *at <= start) {
            let (at, frame) = late.pop_front().expect("a late packet");
            record(&mut out, at, &frame);
        }
        let client = ([10, 1 + (i >> 16) as u8, (i >> 8) as u8, i as u8], 40_000);
        let (c, s) = (1000u32, 5000u32);
        for (offset, frame) in [
            (0, frame(client, server, c, 0, SYN, 0)),
            (50, frame(server, client, s, c + 1, SYN_ACK, 0)),
            (100, frame(client, server, c + 1, s + 1, ACK, 0)),
            (120, frame(client, server, c + 1, s + 1, PSH_ACK, 100)),
            (300, frame(server, client, s + 1, c + 101, PSH_ACK, 200)),
            (400, frame(client, server, c + 101, s + 201, RST, 0)),
        ] {
            record(&mut out, start + offset, &frame);
        }
        if i % 997 == 0 {
            // A late duplicate ACK past the close's grace: the connection rejoined.
            let ack = frame(server, client, s + 201, c + 101, ACK, 0);
            late.push_back((start + 3_000_000, ack));
        }
    }
    for (at, frame) in late {
        record(&mut out, at, &frame);
    }
    out.flush().expect("flush");
}

/// Runs `analyze ARGS` under `/usr/bin/time`, with `in_memory` flows kept in memory when
/// given; returns its standard output and its peak resident memory in KiB. (time's own child
/// is measured: a child forked from this test would count the test's memory too.)
fn analyze(args: &[&str], in_memory: Option<&str>) -> (Vec<u8>, u64) {
    let mut command = Command::new("/usr/bin/time");
    command
        .args(["-f", "maxrss %M", BIN, "analyze"])
        .args(args)
        .stdin(Stdio::null());
    match in_memory {
        Some(n) => command.env(IN_MEMORY_VAR, n),
        None => command.env_remove(IN_MEMORY_VAR),
    };
    let out = command
        .output()
        .expect("/usr/bin/time runs (apt-get install time, or scripts/install-deps)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "analyze {args:?}: {}\n{stderr}",
        out.status
    );
    let rss = stderr
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("maxrss "))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak memory from /usr/bin/time: {stderr}"));
    (out.stdout, rss)
}

#[test]
fn memory_follows_the_open_connections_not_all_of_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (few, many) = (dir.path().join("few.pcap"), dir.path().join("many.pcap"));
    write_capture(&few, 20_000);
    write_capture(&many, 200_000);
    let few = few.to_str().expect("utf-8");
    let many = many.to_str().expect("utf-8");

    let (few_json, few_rss) = analyze(&["--json", few], None);
    let (many_json, many_rss) = analyze(&["--json", many], None);
    let summary = |json: &[u8]| -> serde_json::Value {
        serde_json::from_slice::<serde_json::Value>(json).expect("JSON")["summary"].clone()
    };
    assert_eq!(summary(&few_json)["flows"], 20_000);
    assert_eq!(summary(&many_json)["flows"], 200_000);
    let flows: serde_json::Value = serde_json::from_slice(&many_json).expect("JSON");
    let flows = flows["flows"].as_array().expect("flows[]");
    assert_eq!(
        flows.len(),
        200_000,
        "every flow listed once, its parts joined"
    );
    // Ten times the connections, not ten times the memory. Kept whole in memory (with
    // TCPSTALL_FLOWS_IN_MEMORY past them), 180,000 more flows take some 75 MB more. What does
    // grow is bounded (the tombstones that rejoin retired flows, up to 65,536 a detector, and
    // the retired flows held before they go to the file): 33-41 MB here, depending on how the
    // reading thread and the worker shared the flows. The mark lies between the two.
    const GROWTH_KIB: u64 = 56 * 1024;
    eprintln!("peak RSS: {few_rss} KiB for 20,000 connections, {many_rss} KiB for 200,000");
    assert!(
        many_rss < few_rss + GROWTH_KIB,
        "peak RSS {many_rss} KiB for 200,000 connections against {few_rss} KiB for 20,000"
    );
    let (_, text_rss) = analyze(&[many], None);
    assert!(
        text_rss < few_rss + GROWTH_KIB,
        "the text report: peak RSS {text_rss} KiB for 200,000 connections"
    );
}

#[test]
fn the_reports_are_the_same_whether_the_flows_stay_in_memory_or_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = dir.path().join("joined.pcap");
    write_capture(&capture, 5_000);
    let capture = capture.to_str().expect("utf-8").to_string();
    let mut files: Vec<String> = [
        "split_response",
        "split_request_v6",
        "think_time",
        "cork_tail",
        "rto_lost",
        "windows_peer",
    ]
    .iter()
    .map(|name| format!("{FIXTURES}/{name}.pcap"))
    .collect();
    files.push(capture.clone());
    for file in &files {
        for args in [
            vec!["--json", file.as_str()],
            vec!["--flows", file.as_str()],
            vec!["--json", "--workers", "3", file.as_str()],
        ] {
            let (kept, _) = analyze(&args, None);
            // One flow in memory per thread: every other goes through the temporary file.
            let (spilled, _) = analyze(&args, Some("1"));
            assert!(!kept.is_empty());
            assert!(
                kept == spilled,
                "analyze {args:?} differs with {IN_MEMORY_VAR}=1:\n{}\n---\n{}",
                String::from_utf8_lossy(&kept),
                String::from_utf8_lossy(&spilled)
            );
        }
    }
    // The rejoined connections are in the report, joined: one entry each, continued parts
    // counted once.
    let (json, _) = analyze(&["--json", &capture], Some("1"));
    let json: serde_json::Value = serde_json::from_slice(&json).expect("JSON");
    assert_eq!(json["summary"]["flows"], 5_000);
    let rejoined = json["flows"]
        .as_array()
        .expect("flows[]")
        .iter()
        .filter(|f| f["packets"] == 7)
        .count();
    assert_eq!(
        rejoined,
        5_000usize.div_ceil(997),
        "{rejoined} rejoined connections"
    );
}

#[test]
fn a_bad_bound_is_refused_clearly() {
    let file = format!("{FIXTURES}/split_response.pcap");
    let out = Command::new(BIN)
        .args(["analyze", &file])
        .env(IN_MEMORY_VAR, "none")
        .output()
        .expect("tcpstall runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(IN_MEMORY_VAR) && stderr.contains("unset it"),
        "{stderr}"
    );
}

/// A temporary directory that cannot be written: said once, the flows kept in memory, the
/// report whole and the same.
#[test]
fn an_unwritable_temporary_directory_keeps_the_flows_in_memory() {
    let file = format!("{FIXTURES}/think_time.pcap");
    let whole = Command::new(BIN)
        .args(["analyze", "--json", &file])
        .env_remove(IN_MEMORY_VAR)
        .output()
        .expect("tcpstall runs");
    let missing = tempfile::tempdir().expect("temp dir").path().join("gone");
    let out = Command::new(BIN)
        .args(["analyze", "--json", &file])
        .env(IN_MEMORY_VAR, "1")
        .env("TMPDIR", &missing)
        .output()
        .expect("tcpstall runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), whole.status.code(), "{stderr}");
    assert!(
        stderr.contains("cannot create a temporary file")
            && stderr.contains("kept in memory instead")
            && stderr.matches("warning").count() == 1,
        "{stderr}"
    );
    assert!(out.stdout == whole.stdout, "the same report");
}
