//! Reading real captures: every fixture in tests/fixtures/capture was written by tcpdump,
//! dumpcap, tshark or mergecap (see its make-fixtures script), and the segments decoded here
//! are checked field by field against tshark's own reading of the same file.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use tcpstall::capture::{
    count_frames, for_each_segment, open_input, CaptureError, CaptureStats, CaptureWarning,
};
use tcpstall::decode::Segment;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/capture")
        .join(name)
}

/// Reads a capture, collecting its segments and warnings.
fn read_all(
    input: impl Read,
) -> (
    Result<CaptureStats, CaptureError>,
    Vec<Segment>,
    Vec<CaptureWarning>,
) {
    let mut segments = Vec::new();
    let mut warnings = Vec::new();
    let result = for_each_segment(input, |s| segments.push(*s), |w| warnings.push(w.clone()));
    (result, segments, warnings)
}

/// One segment as a line of tshark's `-T fields` output, so both readings compare as text.
fn describe(s: &Segment) -> String {
    let or_empty = |v: Option<String>| v.unwrap_or_default();
    [
        s.packet_number.to_string(),
        s.ts_ns.to_string(),
        s.src.to_string(),
        s.dst.to_string(),
        s.src_port.to_string(),
        s.dst_port.to_string(),
        s.seq.to_string(),
        s.ack.to_string(),
        format!("{:#06x}", s.flags),
        s.window.to_string(),
        s.payload_len.to_string(),
        or_empty(s.mss.map(|v| v.to_string())),
        or_empty(s.window_scale.map(|v| v.to_string())),
        or_empty(s.timestamps.map(|(val, _)| val.to_string())),
        or_empty(s.timestamps.map(|(_, ecr)| ecr.to_string())),
        if s.has_sack {
            "sack".to_string()
        } else {
            String::new()
        },
    ]
    .join("\t")
}

/// tshark's reading of the TCP segments of a capture, in the format of [`describe`].
fn tshark_segments(path: &Path) -> Vec<String> {
    let fields = [
        "frame.number",
        "frame.time_epoch",
        "ip.src",
        "ipv6.src",
        "ip.dst",
        "ipv6.dst",
        "tcp.srcport",
        "tcp.dstport",
        "tcp.seq_raw",
        "tcp.ack_raw",
        "tcp.flags",
        "tcp.window_size_value",
        "tcp.len",
        "tcp.options.mss_val",
        "tcp.options.wscale.shift",
        "tcp.options.timestamp.tsval",
        "tcp.options.timestamp.tsecr",
        "tcp.options.sack_le",
    ];
    let mut command = Command::new("tshark");
    command
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(["-Y", "tcp", "-T", "fields", "-E", "separator=/t"]);
    for field in fields {
        command.args(["-e", field]);
    }
    let output = command
        .output()
        .expect("tshark runs (scripts/install-deps installs it)");
    assert!(
        output.status.success(),
        "tshark failed on {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            // A tunnelled packet lists every IP header; TCP rides in the innermost one.
            let last = |s: &str| s.rsplit(',').next().unwrap_or_default().to_string();
            let address = |v4: &str, v6: &str| if v4.is_empty() { last(v6) } else { last(v4) };
            [
                f[0].to_string(),
                f[1].replace('.', "").trim_start_matches('0').to_string(),
                address(f[2], f[3]),
                address(f[4], f[5]),
                f[6].to_string(),
                f[7].to_string(),
                f[8].to_string(),
                f[9].to_string(),
                f[10].to_string(),
                f[11].to_string(),
                f[12].to_string(),
                f[13].to_string(),
                f[14].to_string(),
                f[15].to_string(),
                f[16].to_string(),
                if f[17].is_empty() {
                    String::new()
                } else {
                    "sack".to_string()
                },
            ]
            .join("\t")
        })
        .collect()
}

/// tshark's count of the packets in a capture.
fn tshark_packet_count(path: &Path) -> u64 {
    let output = Command::new("tshark")
        .arg("-n")
        .arg("-r")
        .arg(path)
        .args(["-T", "fields", "-e", "frame.number"])
        .output()
        .expect("tshark runs");
    String::from_utf8_lossy(&output.stdout).lines().count() as u64
}

/// Reads a fixture and checks every segment against tshark's reading of it.
fn assert_reads_like_tshark(name: &str) -> CaptureStats {
    let path = fixture(name);
    let input = open_input(&path).expect("fixture opens");
    let (result, segments, warnings) = read_all(input);
    let stats = result.unwrap_or_else(|e| panic!("{name}: {e}"));
    let ours: Vec<String> = segments.iter().map(describe).collect();
    let theirs = tshark_segments(&path);
    assert!(!theirs.is_empty(), "{name}: tshark sees no TCP segment");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "{name}: segment {i} differs (ours, then tshark's)");
    }
    assert_eq!(ours.len(), theirs.len(), "{name}: segment counts differ");
    assert_eq!(
        stats.packets,
        tshark_packet_count(&path),
        "{name}: packet counts differ"
    );
    assert_eq!(stats.tcp_segments, segments.len() as u64);
    assert!(
        warnings.is_empty(),
        "{name}: unexpected warnings {warnings:?}"
    );
    let frames = count_frames(open_input(&path).expect("fixture opens")).expect("frames count");
    assert_eq!(frames, stats.packets, "{name}: count_frames disagrees");
    stats
}

#[test]
fn tcpdump_on_loopback_ethernet() {
    let stats = assert_reads_like_tshark("lo-ethernet.pcap");
    assert!(
        stats.non_tcp >= 1,
        "the fixture's UDP datagram is counted as non-TCP"
    );
}

#[test]
fn tcpdump_nanosecond_timestamps() {
    assert_reads_like_tshark("lo-nano.pcap");
}

#[test]
fn snap_length_cut_packets_keep_their_ip_lengths() {
    let stats = assert_reads_like_tshark("lo-snaplen60.pcap");
    let (_, segments, _) = read_all(open_input(&fixture("lo-snaplen60.pcap")).expect("opens"));
    // The 148-byte responses were cut to 60 captured bytes, yet their length is known.
    assert!(segments.iter().any(|s| s.payload_len == 148));
    assert_eq!(stats.undecodable, 0);
}

#[test]
fn tcpdump_any_linux_cooked_v1() {
    assert_reads_like_tshark("any-sll.pcap");
}

#[test]
fn tcpdump_any_linux_cooked_v2() {
    assert_reads_like_tshark("any-sll2.pcap");
}

#[test]
fn dumpcap_pcapng_ipv6() {
    let (_, segments, _) = read_all(open_input(&fixture("lo-ipv6.pcapng")).expect("opens"));
    assert!(segments.iter().all(|s| s.src.is_ipv6()));
    assert_reads_like_tshark("lo-ipv6.pcapng");
}

#[test]
fn raw_ip_from_a_tun_interface() {
    assert_reads_like_tshark("tun-raw.pcap");
}

#[test]
fn vlan_tagged_ethernet() {
    assert_reads_like_tshark("vlan-8021q.pcap");
    assert_reads_like_tshark("vlan-qinq.pcap");
}

#[test]
fn bsd_null_and_openbsd_loop() {
    assert_reads_like_tshark("null-bsd.pcap");
    assert_reads_like_tshark("loop-openbsd.pcap");
}

#[test]
fn big_endian_pcap_and_pcapng() {
    assert_reads_like_tshark("big-endian-nano.pcap");
    assert_reads_like_tshark("big-endian.pcapng");
}

#[test]
fn pcapng_with_interfaces_of_different_link_types() {
    let stats = assert_reads_like_tshark("multi-interface.pcapng");
    assert!(stats.tcp_segments > 60);
}

#[test]
fn pcapng_sections_of_both_byte_orders() {
    assert_reads_like_tshark("two-sections.pcapng");
}
