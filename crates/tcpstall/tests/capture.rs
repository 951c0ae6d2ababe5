//! Reading real captures: every fixture in tests/fixtures/capture was written by tcpdump,
//! dumpcap, tshark or mergecap (see its make-fixtures script), and the segments decoded here
//! are checked field by field against tshark's own reading of the same file.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
    assert_reads_like_tshark_at(&fixture(name))
}

/// Reads a capture and checks every segment against tshark's reading of it.
fn assert_reads_like_tshark_at(path: &Path) -> CaptureStats {
    let name = path.display();
    let path = path.to_path_buf();
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
        stats.skipped.not_tcp >= 1,
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
    assert_eq!(stats.skipped.undecodable, 0);
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

/// Start offsets of the records of a little-endian pcap file, to damage chosen packets.
fn pcap_record_offsets(bytes: &[u8]) -> Vec<usize> {
    let mut offsets = Vec::new();
    let mut at = 24;
    while at + 16 <= bytes.len() {
        offsets.push(at);
        let caplen = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        at += 16 + caplen as usize;
    }
    offsets
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    fs::read(fixture(name)).expect("fixture reads")
}

#[test]
fn empty_input_is_an_error_that_says_so() {
    let (result, segments, _) = read_all(&[][..]);
    let error = result.expect_err("empty input");
    assert!(matches!(error, CaptureError::Empty), "{error}");
    assert!(error.to_string().contains("empty"));
    assert!(segments.is_empty());
}

#[test]
fn garbage_is_not_a_capture() {
    let (result, _, _) = read_all(&b"<html><body>not a capture</body></html>"[..]);
    let message = result.expect_err("garbage").to_string();
    assert!(message.contains("not a pcap or pcapng file"), "{message}");
    assert!(message.contains("3c 68 74 6d"), "{message}");
}

#[test]
fn missing_file_error_names_the_file() {
    let path = Path::new("/nonexistent/capture-missing.pcap");
    let message = open_input(path).err().expect("missing file").to_string();
    assert!(
        message.contains("/nonexistent/capture-missing.pcap"),
        "{message}"
    );
}

#[test]
fn unsupported_link_type_is_named() {
    let mut bytes = fixture_bytes("lo-ethernet.pcap");
    bytes[20..24].copy_from_slice(&147u32.to_le_bytes());
    let message = read_all(&bytes[..]).0.expect_err("USER0").to_string();
    assert!(message.contains("unsupported link type 147"), "{message}");
    assert!(message.contains("USER0"), "{message}");
}

/// Offsets where a record or block of a little-endian pcap or pcapng file starts or the
/// file ends: the places a cut leaves no partial record behind.
fn record_boundaries(bytes: &[u8]) -> Vec<usize> {
    let mut boundaries = Vec::new();
    if bytes.starts_with(&0x0a0d_0d0au32.to_le_bytes()) {
        let mut at = 0;
        while at < bytes.len() {
            boundaries.push(at);
            at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        }
    } else {
        boundaries.push(24);
        boundaries.extend(pcap_record_offsets(bytes));
    }
    boundaries.push(bytes.len());
    boundaries
}

/// End of the first packet record or block of a little-endian pcap or pcapng file.
fn first_packet_end(bytes: &[u8]) -> usize {
    if bytes.starts_with(&0x0a0d_0d0au32.to_le_bytes()) {
        let mut at = 0;
        loop {
            let block_type = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
            at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
            if matches!(block_type, 2 | 3 | 6) {
                return at;
            }
        }
    }
    pcap_record_offsets(bytes)
        .get(1)
        .copied()
        .unwrap_or(bytes.len())
}

/// Cutting a file anywhere never panics: a cut inside the file header, or anywhere before
/// the first packet is whole, is an error (nothing can be read); anywhere else the segments
/// of the whole records come out, and a cut inside a record or block ends with one
/// "truncated" warning.
#[test]
fn truncated_at_every_offset() {
    for name in [
        "lo-ethernet.pcap",
        "lo-ipv6.pcapng",
        "multi-interface.pcapng",
    ] {
        let bytes = fixture_bytes(name);
        let boundaries = record_boundaries(&bytes);
        let (_, all, _) = read_all(&bytes[..]);
        let first_packet = first_packet_end(&bytes);
        for cut in 0..bytes.len() {
            let (result, segments, warnings) = read_all(&bytes[..cut]);
            assert!(
                segments.len() <= all.len() && segments[..] == all[..segments.len()],
                "{name} cut at {cut}: segments are not a prefix of the whole file's"
            );
            let pcap_header_cut = !name.ends_with(".pcapng") && cut < 24;
            let before_first_packet = cut < first_packet && !boundaries.contains(&cut);
            if cut < 4 || pcap_header_cut || before_first_packet {
                let err = result.expect_err(&format!("{name} cut at {cut}: an error expected"));
                if cut >= 4 {
                    assert!(
                        err.to_string().contains("truncated"),
                        "{name} cut at {cut}: {err}"
                    );
                }
                assert!(warnings.is_empty(), "{name} cut at {cut}: {warnings:?}");
                continue;
            }
            assert!(result.is_ok(), "{name} cut at {cut}: {result:?}");
            if boundaries.contains(&cut) {
                assert!(warnings.is_empty(), "{name} cut at {cut}: {warnings:?}");
            } else {
                assert_eq!(warnings.len(), 1, "{name} cut at {cut}: {warnings:?}");
                assert!(warnings[0].message.contains("truncated"), "{}", warnings[0]);
            }
        }
    }
}

#[test]
fn truncated_record_warning_names_the_packet() {
    let bytes = fixture_bytes("lo-ethernet.pcap");
    let offsets = pcap_record_offsets(&bytes);
    let cut = offsets[9] + 30;
    let (result, segments, warnings) = read_all(&bytes[..cut]);
    let stats = result.expect("partly readable");
    assert_eq!(stats.packets, 9);
    assert_eq!(segments.len(), 9);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].packet_number, 10);
    let text = warnings[0].to_string();
    assert!(
        text.contains("truncated capture: packet 10's record header says"),
        "{text}"
    );
}

#[test]
fn absurd_record_length_stops_with_a_warning() {
    let mut bytes = fixture_bytes("lo-ethernet.pcap");
    let at = pcap_record_offsets(&bytes)[4];
    bytes[at + 8..at + 12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let (result, segments, warnings) = read_all(&bytes[..]);
    assert!(result.is_ok());
    assert_eq!(segments.len(), 4);
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].packet_number, 5);
    assert!(warnings[0].message.contains("absurd"), "{}", warnings[0]);
}

/// A record length far beyond the snap length is named as such, not as a file cut short.
#[test]
fn record_length_beyond_the_snap_length_is_absurd() {
    let mut bytes = fixture_bytes("lo-ethernet.pcap");
    bytes[16..20].copy_from_slice(&65535u32.to_le_bytes());
    let at = pcap_record_offsets(&bytes)[4];
    bytes[at + 8..at + 12].copy_from_slice(&5_000_000u32.to_le_bytes());
    let (result, segments, warnings) = read_all(&bytes[..]);
    assert!(result.is_ok());
    assert_eq!(segments.len(), 4);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].packet_number, 5);
    let text = warnings[0].to_string();
    assert!(
        text.contains("absurd record length") && text.contains("snap length (65535)"),
        "{text}"
    );
    assert!(!text.contains("truncated"), "{text}");
    // In the first record there is nothing before it to read: an error.
    let at = pcap_record_offsets(&bytes)[0];
    bytes[at + 8..at + 12].copy_from_slice(&5_000_000u32.to_le_bytes());
    let err = read_all(&bytes[..]).0.expect_err("nothing readable");
    assert!(err.to_string().contains("absurd record length"), "{err}");
}

#[test]
fn timestamps_going_backwards_are_warned_about() {
    let mut bytes = fixture_bytes("lo-ethernet.pcap");
    let offsets = pcap_record_offsets(&bytes);
    let previous_sec = u32::from_le_bytes(bytes[offsets[2]..offsets[2] + 4].try_into().unwrap());
    let at = offsets[3];
    bytes[at..at + 4].copy_from_slice(&(previous_sec - 1).to_le_bytes());
    let (result, segments, warnings) = read_all(&bytes[..]);
    assert_eq!(result.expect("readable").packets, segments.len() as u64 + 1);
    let backwards: Vec<_> = warnings
        .iter()
        .filter(|w| w.message.contains("backwards"))
        .collect();
    assert_eq!(backwards.len(), 1, "{warnings:?}");
    assert_eq!(backwards[0].packet_number, 4);
    assert!(
        backwards[0].message.contains("earlier than packet 3"),
        "{}",
        backwards[0]
    );
}

#[test]
fn non_first_ipv4_fragment_is_skipped_with_a_warning() {
    let mut bytes = fixture_bytes("lo-ethernet.pcap");
    let at = pcap_record_offsets(&bytes)[5];
    // Fragment offset field of the IPv4 header, after the record and Ethernet headers.
    let fragment_field = at + 16 + 14 + 6;
    bytes[fragment_field..fragment_field + 2].copy_from_slice(&[0x00, 0x10]);
    let (result, segments, warnings) = read_all(&bytes[..]);
    let stats = result.expect("readable");
    assert_eq!(stats.skipped.fragments, 1);
    assert!(segments.iter().all(|s| s.packet_number != 6));
    assert_eq!(warnings.len(), 1);
    assert_eq!(warnings[0].packet_number, 6);
}

/// Inserts a block of an unknown type after the interface description of a pcapng file.
#[test]
fn pcapng_unknown_block_is_skipped_with_a_warning() {
    let bytes = fixture_bytes("lo-ipv6.pcapng");
    let shb_len = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let idb_len = u32::from_le_bytes(bytes[shb_len + 4..shb_len + 8].try_into().unwrap()) as usize;
    let insert_at = shb_len + idb_len;
    let mut unknown = Vec::new();
    unknown.extend_from_slice(&0x0000_7777u32.to_le_bytes());
    unknown.extend_from_slice(&20u32.to_le_bytes());
    unknown.extend_from_slice(b"junkjunk");
    unknown.extend_from_slice(&20u32.to_le_bytes());
    let mut damaged = bytes[..insert_at].to_vec();
    damaged.extend_from_slice(&unknown);
    damaged.extend_from_slice(&bytes[insert_at..]);

    let (_, original, _) = read_all(&bytes[..]);
    let (result, segments, warnings) = read_all(&damaged[..]);
    assert!(result.is_ok());
    assert_eq!(segments, original);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].message.contains("unknown type 0x7777"),
        "{}",
        warnings[0]
    );
}

/// The blocks of a little-endian pcapng file: (type, bytes), in order.
fn pcapng_blocks(bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut blocks = Vec::new();
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let block_type = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        blocks.push((block_type, bytes[at..at + len].to_vec()));
        at += len;
    }
    blocks
}

/// A pcapng file of lo-ipv6.pcapng's section header, `interfaces` copies of its interface
/// description (`link(i)` its link type), and its first packet once on each interface
/// `on(i)` gives, then its own packets on interface 0.
fn many_interfaces(
    interfaces: usize,
    link: impl Fn(usize) -> Option<u16>,
    on: impl Iterator<Item = u32>,
) -> (Vec<u8>, usize) {
    let blocks = pcapng_blocks(&fixture_bytes("lo-ipv6.pcapng"));
    let (shb, idb) = (&blocks[0].1, &blocks[1].1);
    assert_eq!((blocks[0].0, blocks[1].0), (0x0a0d_0d0a, 1));
    let packets: Vec<&Vec<u8>> = blocks.iter().filter(|b| b.0 == 6).map(|b| &b.1).collect();
    let mut out = shb.clone();
    for i in 0..interfaces {
        let mut block = idb.clone();
        if let Some(code) = link(i) {
            block[8..10].copy_from_slice(&code.to_le_bytes());
        }
        out.extend_from_slice(&block);
    }
    let mut extra = 0;
    for interface in on {
        let mut block = packets[0].clone();
        block[8..12].copy_from_slice(&interface.to_le_bytes());
        out.extend_from_slice(&block);
        extra += 1;
    }
    for block in &packets {
        out.extend_from_slice(block);
    }
    (out, extra)
}

/// Interface descriptions are kept up to a bound (memory stays bounded for a file of nothing
/// else); the packets of the ones past it are skipped, said once, and the rest read.
#[test]
fn pcapng_interfaces_past_the_bound_are_not_kept() {
    let (before, original, _) = read_all(&fixture_bytes("lo-ipv6.pcapng")[..]);
    let before = before.expect("the fixture reads");
    let kept = tcpstall::capture::file::MAX_INTERFACES;
    let (bytes, extra) = many_interfaces(kept + 1000, |_| None, [3, kept as u32 + 500].into_iter());
    let (result, segments, warnings) = read_all(&bytes[..]);
    let stats = result.expect("readable");
    let bound: Vec<_> = warnings
        .iter()
        .filter(|w| {
            w.message
                .contains("interface descriptions in one pcapng section")
        })
        .collect();
    assert_eq!(bound.len(), 1, "{warnings:?}");
    assert!(
        warnings.iter().any(|w| w
            .message
            .contains("past the 65536 interface descriptions kept")),
        "{warnings:?}"
    );
    // The packet on interface 3 is read; the one past the bound is not.
    assert_eq!(
        segments.len(),
        original.len() + 1,
        "{warnings:?} {:?}",
        segments.iter().map(|s| s.packet_number).collect::<Vec<_>>()
    );
    assert_eq!(stats.packets, before.packets + extra as u64);
}

/// Thousands of interfaces of distinct unsupported link types: each kind is named up to a
/// bound, the rest counted together, warned about once each: linear time, one line.
#[test]
fn many_unsupported_link_types_are_counted_in_bounded_names() {
    let interfaces = 5000;
    let (bytes, extra) = many_interfaces(
        interfaces,
        // Interface 0 keeps the fixture's own link type: its packets are read.
        |i| (i > 0).then(|| 20_000 + i as u16),
        (1..interfaces as u32).chain(1..interfaces as u32),
    );
    let (result, _, warnings) = read_all(&bytes[..]);
    let stats = result.expect("readable");
    let unsupported = &stats.skipped.unsupported;
    assert_eq!(unsupported.len(), tcpstall::capture::skipped::MAX_NAMED + 1);
    let total: u64 = unsupported.iter().map(|(_, n)| n).sum();
    assert_eq!(total, extra as u64, "{unsupported:?}");
    assert_eq!(
        unsupported.last().map(|(name, _)| name.as_ref()),
        Some(tcpstall::capture::skipped::OTHERS)
    );
    assert!(
        warnings.len() <= unsupported.len() + 2,
        "{} warnings",
        warnings.len()
    );
}

#[test]
fn pcapng_absurd_block_length_stops_with_a_warning() {
    let mut bytes = fixture_bytes("lo-ipv6.pcapng");
    let (_, original, _) = read_all(&bytes[..]);
    // Walk to the 6th packet block and give it an impossible length.
    let mut at = 0;
    let mut packets = 0;
    loop {
        let block_type = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        if block_type == 6 {
            packets += 1;
            if packets == 6 {
                break;
            }
        }
        at += u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    }
    bytes[at + 4..at + 8].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    let (result, segments, warnings) = read_all(&bytes[..]);
    assert!(result.is_ok());
    assert_eq!(segments[..], original[..5]);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].packet_number, 6);
    assert!(warnings[0].message.contains("absurd"), "{}", warnings[0]);
}

/// A real pipe delivers the file in pieces of its own choosing; the result is the same.
#[test]
fn reads_from_a_pipe() {
    let path = fixture("multi-interface.pcapng");
    let mut child = Command::new("cat")
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("cat runs");
    let pipe = child.stdout.take().expect("piped stdout");
    let (result, segments, _) = read_all(pipe);
    assert!(child.wait().expect("cat ends").success());
    let (_, from_file, _) = read_all(open_input(&path).expect("opens"));
    assert!(result.is_ok());
    assert_eq!(segments, from_file);
}

/// One byte per read, the worst a reader may do.
#[test]
fn reads_one_byte_at_a_time() {
    struct OneByte<'a>(&'a [u8]);
    impl Read for OneByte<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            match (self.0.split_first(), buf.first_mut()) {
                (Some((&b, rest)), Some(slot)) => {
                    *slot = b;
                    self.0 = rest;
                    Ok(1)
                }
                _ => Ok(0),
            }
        }
    }
    let bytes = fixture_bytes("two-sections.pcapng");
    let (_, whole, _) = read_all(&bytes[..]);
    let (result, segments, _) = read_all(OneByte(&bytes));
    assert!(result.is_ok());
    assert_eq!(segments, whole);
}

/// Counts heap allocations made by the current thread (tests run on several threads).
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

// SAFETY: forwards every call unchanged to the system allocator.
unsafe impl std::alloc::GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        std::alloc::System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        std::alloc::System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

/// The records of a pcap fixture repeated `times` times, a second later each time.
fn repeated_capture(name: &str, times: u32) -> Vec<u8> {
    let bytes = fixture_bytes(name);
    let offsets = pcap_record_offsets(&bytes);
    let records = &bytes[offsets[0]..];
    let mut out = bytes[..offsets[0]].to_vec();
    for round in 0..times {
        let start = out.len();
        out.extend_from_slice(records);
        for &at in &offsets {
            let at = start + at - offsets[0];
            let sec = u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
            out[at..at + 4].copy_from_slice(&(sec + round).to_le_bytes());
        }
    }
    out
}

/// Reading allocates per file (its buffer), never per packet.
#[test]
fn no_heap_allocation_per_packet() {
    let allocations = |capture: &[u8]| {
        let before = ALLOCATIONS.with(|n| n.get());
        let mut segments = 0u64;
        let stats =
            for_each_segment(capture, |_| segments += 1, |w| panic!("warning {w}")).expect("reads");
        assert_eq!(stats.tcp_segments, segments);
        (ALLOCATIONS.with(|n| n.get()) - before, segments)
    };
    let (once, segments_once) = allocations(&repeated_capture("lo-ethernet.pcap", 1));
    let (many, segments_many) = allocations(&repeated_capture("lo-ethernet.pcap", 50));
    assert_eq!(segments_many, 50 * segments_once);
    assert_eq!(once, many, "allocations grow with the packet count");
}

/// A problem every packet shares is listed a few times, then counted.
#[test]
fn repeated_problems_are_listed_then_counted() {
    let mut bytes = repeated_capture("lo-ethernet.pcap", 50);
    for at in pcap_record_offsets(&bytes) {
        // IP version nibble of every packet set to 5.
        bytes[at + 16 + 14] = 0x55;
    }
    let (result, segments, warnings) = read_all(&bytes[..]);
    let stats = result.expect("readable");
    assert!(segments.is_empty());
    assert_eq!(stats.skipped.undecodable, stats.packets);
    assert!(stats.packets > 1000);
    assert!(warnings.len() <= 25, "{} warnings", warnings.len());
    assert!(warnings
        .iter()
        .any(|w| w.message.contains("counted but not listed")));
}

#[test]
fn sack_blocks_after_a_lost_segment() {
    assert_reads_like_tshark("tun-loss-sack.pcap");
    let (_, segments, _) = read_all(open_input(&fixture("tun-loss-sack.pcap")).expect("opens"));
    assert!(
        segments.iter().any(|s| s.has_sack),
        "the fixture holds SACK blocks"
    );
}

/// The raw-IP capture relabelled with every link-type number that means raw IP; tshark reads
/// each relabelled file as well.
#[test]
fn raw_ip_link_type_numbers() {
    let bytes = fixture_bytes("tun-raw.pcap");
    for code in [12u32, 14, 101, 228] {
        let mut relabelled = bytes.clone();
        relabelled[20..24].copy_from_slice(&code.to_le_bytes());
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("capture-raw-{code}.pcap"));
        fs::write(&path, &relabelled).expect("temporary file writes");
        let stats = assert_reads_like_tshark_at(&path);
        assert!(stats.tcp_segments > 10, "link type {code}");
        fs::remove_file(&path).expect("temporary file removed");
    }
}

#[test]
fn ipv6_extension_headers_before_tcp() {
    let stats = assert_reads_like_tshark("lo-ipv6-ext.pcap");
    // The client's half of the segments carry hop-by-hop and destination options headers.
    assert_eq!(stats.skipped.undecodable, 0);
    assert!(stats.tcp_segments >= 20);
}

/// A capture compressed by the real tools (gzip, zstd, lz4) reads as the plain file does:
/// the same report, from a file and from standard input.
#[test]
fn compressed_captures_read_as_they_are() {
    let plain =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/analyze/split_response.pcap");
    let dir = tempfile::tempdir().expect("temporary directory");
    let analyze = |path: &Path, stdin: Option<&Path>| -> String {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
        cmd.args(["analyze", "--json"]);
        match stdin {
            Some(file) => cmd.arg("-").stdin(fs::File::open(file).expect("open")),
            None => cmd.arg(path).stdin(Stdio::null()),
        };
        let out = cmd.output().expect("tcpstall runs");
        assert!(out.status.success(), "{}: {out:?}", path.display());
        // The report names the file it read; the rest must be the same.
        let mut report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        report["summary"]["files"] = serde_json::Value::Null;
        report.to_string()
    };
    let expected = analyze(&plain, None);
    assert!(expected.contains("nagle_delayed_ack"), "{expected}");
    for (tool, args, ext) in [
        ("gzip", &["-c"][..], "gz"),
        ("zstd", &["-q", "-c"][..], "zst"),
        ("lz4", &["-q", "-c"][..], "lz4"),
    ] {
        let packed = dir.path().join(format!("split_response.pcap.{ext}"));
        let out = Command::new(tool)
            .args(args)
            .arg(&plain)
            .output()
            .unwrap_or_else(|e| panic!("{tool} runs (scripts/install-deps installs it): {e}"));
        assert!(out.status.success(), "{tool}: {out:?}");
        fs::write(&packed, &out.stdout).expect("write");
        assert_eq!(analyze(&packed, None), expected, "{tool} file");
        assert_eq!(
            analyze(&packed, Some(&packed)),
            expected,
            "{tool} on standard input"
        );
    }
}

/// Reads `path`'s packets, with its warnings, or its error.
fn read_path(path: &Path) -> (Result<CaptureStats, String>, Vec<CaptureWarning>) {
    let input = match open_input(path) {
        Ok(input) => input,
        Err(e) => return (Err(e.to_string()), Vec::new()),
    };
    let (result, _, warnings) = read_all(input);
    (result.map_err(|e| e.to_string()), warnings)
}

/// Compressed copies of a real capture, damaged the ways a killed tcpdump or a cut copy
/// damages them, read as far as they decompress with a warning naming the cut; where tshark
/// reads the same file, the packet counts agree.
#[test]
fn damaged_compressed_captures_read_as_far_as_they_go() {
    use std::io::Write;
    let source = fixture("multi-interface.pcapng");
    let plain = fs::read(&source).expect("fixture");
    let (whole, warnings) = read_path(&source);
    let whole = whole.expect("the fixture reads").packets;
    assert!(warnings.is_empty() && whole > 10);
    let dir = tempfile::tempdir().expect("temp dir");

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).expect("gzip");
    let gzip = gz.finish().expect("gzip");
    // Flushed every 2 KiB, as a compressor fed by `tcpdump -U -w -` flushes: the fixture is
    // smaller than one block otherwise, and half a block decompresses to nothing.
    let mut zs = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("zstd");
    let mut lz = lz4_flex::frame::FrameEncoder::new(Vec::new());
    for chunk in plain.chunks(2048) {
        zs.write_all(chunk).expect("zstd");
        zs.flush().expect("zstd");
        lz.write_all(chunk).expect("lz4");
        lz.flush().expect("lz4");
    }
    let zst = zs.finish().expect("zstd");
    let lz4 = lz.finish().expect("lz4");

    let mut trailing = gzip.clone();
    trailing.extend_from_slice(b"\0\0garbage after the stream");
    let cases: Vec<(&str, Vec<u8>, bool)> = vec![
        ("half.pcapng.gz", gzip[..gzip.len() / 2].to_vec(), true),
        ("no-size.pcapng.gz", gzip[..gzip.len() - 4].to_vec(), false),
        ("trailing.pcapng.gz", trailing, false),
        ("half.pcapng.zst", zst[..zst.len() / 2].to_vec(), true),
        ("half.pcapng.lz4", lz4[..lz4.len() / 2].to_vec(), true),
    ];
    for (name, bytes, cut_inside) in cases {
        let path = dir.path().join(name);
        fs::write(&path, &bytes).expect("write");
        let (result, warnings) = read_path(&path);
        let stats = result.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(stats.packets > 0, "{name}: nothing read");
        if cut_inside {
            assert!(stats.packets < whole, "{name}: {} packets", stats.packets);
        } else {
            assert_eq!(
                stats.packets, whole,
                "{name}: every packet is before the damage"
            );
        }
        assert!(
            warnings
                .iter()
                .any(|w| w.message.contains("stream is cut or damaged")),
            "{name}: no warning names the cut: {warnings:?}"
        );
        // tshark reads gzip; its zstd and LZ4 support depends on how it was built.
        if name.ends_with(".gz") {
            assert_eq!(
                stats.packets,
                tshark_packet_count(&path),
                "{name}: tshark reads another count"
            );
        }
    }
}
