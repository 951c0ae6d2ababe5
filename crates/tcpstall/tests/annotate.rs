//! `analyze --annotate FILE`: the captures written back as pcapng with a packet comment on
//! each event's packet and on the peer's packet that released it, read back by tshark (the
//! Debian package scripts/install-deps installs): every packet copied as it was, the comments
//! on the frames the JSON report names, bad destinations refused before any reading.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn fixture(dir: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir)
        .join(name)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpstall-annotate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

fn tcpstall(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(BIN)
        .arg("analyze")
        .args(args)
        .output()
        .expect("tcpstall runs")
}

/// `analyze --json --annotate OUT FILES`, which must succeed (exit 0, or 1 with stalls under
/// `--fail-on-stall`; here 0); the JSON report.
fn annotate(out: &Path, files: &[PathBuf]) -> Value {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["--json".as_ref(), "--annotate".as_ref(), out.as_ref()];
    args.extend(files.iter().map(|f| f.as_os_str()));
    let run = tcpstall(&args);
    assert!(
        run.status.success(),
        "analyze --annotate failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).expect("JSON report")
}

/// tshark's fields of every frame of `file`, one line a frame, tab-separated.
fn tshark_fields(file: &Path, fields: &[&str]) -> Vec<String> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-r")
        .arg(file)
        .args(["-T", "fields", "-E", "occurrence=a"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd
        .stderr(Stdio::null())
        .output()
        .expect("tshark runs (scripts/install-deps)");
    assert!(out.status.success(), "tshark -r {} failed", file.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// What identifies a packet, as tshark decodes it: time, lengths and the TCP header.
const PACKET: &[&str] = &[
    "frame.time_epoch",
    "frame.len",
    "frame.cap_len",
    "ip.src",
    "tcp.srcport",
    "tcp.seq_raw",
    "tcp.ack_raw",
    "tcp.len",
];

/// Frame number → its comment, for the frames of `file` that carry one.
fn comments(file: &Path) -> Vec<(u64, String)> {
    tshark_fields(file, &["frame.number", "frame.comment"])
        .into_iter()
        .filter_map(|line| {
            let (number, comment) = line.split_once('\t')?;
            (!comment.is_empty())
                .then(|| (number.parse().expect("frame number"), comment.to_string()))
        })
        .collect()
}

fn comment_on(comments: &[(u64, String)], frame: u64) -> &str {
    comments
        .iter()
        .find(|(n, _)| *n == frame)
        .map(|(_, c)| c.as_str())
        .unwrap_or_else(|| panic!("no comment on frame {frame}: {comments:?}"))
}

/// A Nagle × delayed-ACK stall on real sockets (the server writing header and body apart):
/// its released segment and the client's delayed ACK that released it carry the comments,
/// at the frames the JSON report names; every other packet is copied unchanged.
#[test]
fn the_held_and_the_releasing_packets_carry_the_comments() {
    let dir = temp_dir("split");
    let input = fixture("analyze", "split_response.pcap");
    let out = dir.join("annotated.pcapng");
    let report = annotate(&out, std::slice::from_ref(&input));
    let events = report["events"].as_array().expect("events");
    let stalls: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack")
        .collect();
    assert!(!stalls.is_empty(), "the fixture holds a stall: {report:#}");

    assert_eq!(
        tshark_fields(&out, PACKET),
        tshark_fields(&input, PACKET),
        "every packet copied as it was"
    );
    let comments = comments(&out);
    for e in &stalls {
        let packet = e["packet"].as_u64().expect("packet");
        let release = e["release_packet"]
            .as_u64()
            .expect("release_packet of a Nagle stall");
        assert!(
            release < packet,
            "the ACK comes before the data it releases: {e}"
        );
        let held = comment_on(&comments, packet);
        assert!(
            held.starts_with("tcpstall nagle_delayed_ack: the server's data waited"),
            "{held}"
        );
        assert!(held.contains(&format!("in frame {release}")), "{held}");
        assert!(held.contains("Fix: "), "{held}");
        let releasing = comment_on(&comments, release);
        assert!(
            releasing.contains("client ACK released the server's data"),
            "{releasing}"
        );
        assert!(
            releasing.contains(&format!("in frame {packet}")),
            "{releasing}"
        );
    }
    // Nothing else is commented.
    let named: std::collections::BTreeSet<u64> = stalls
        .iter()
        .flat_map(|e| [e["packet"].as_u64(), e["release_packet"].as_u64()])
        .flatten()
        .collect();
    let commented: std::collections::BTreeSet<u64> = comments.iter().map(|(n, _)| *n).collect();
    assert_eq!(commented, named);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two captures become two sections of one file: the second's frames follow the first's, and
/// its events' comments are on its own packets, counted after them.
#[test]
fn several_captures_become_sections_numbered_in_order() {
    let dir = temp_dir("two");
    let first = fixture("analyze", "split_response.pcap");
    let second = fixture("analyze", "rto_lost.pcap");
    let out = dir.join("both.pcapng");
    let report = annotate(&out, &[first.clone(), second.clone()]);
    let before = tshark_fields(&first, &["frame.number"]).len() as u64;
    let mut expected = tshark_fields(&first, PACKET);
    expected.extend(tshark_fields(&second, PACKET));
    assert_eq!(tshark_fields(&out, PACKET), expected);

    let comments = comments(&out);
    let rto = report["events"]
        .as_array()
        .expect("events")
        .iter()
        .find(|e| e["kind"] == "rto")
        .unwrap_or_else(|| panic!("rto_lost.pcap holds a timeout: {report:#}"));
    assert_eq!(
        rto["file"].as_str().map(|f| f.ends_with("rto_lost.pcap")),
        Some(true),
        "{rto}"
    );
    assert_eq!(
        rto["release_packet"],
        Value::Null,
        "a timer released it: {rto}"
    );
    let frame = before + rto["packet"].as_u64().expect("packet");
    let comment = comment_on(&comments, frame);
    assert!(comment.starts_with("tcpstall rto:"), "{comment}");
    assert!(comment.contains("own timer"), "{comment}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// pcapng inputs are copied block by block: big-endian sections, several interfaces, several
/// sections; tshark reads the same packets back.
#[test]
fn pcapng_inputs_are_copied_whole() {
    let dir = temp_dir("pcapng");
    for name in [
        "big-endian.pcapng",
        "multi-interface.pcapng",
        "two-sections.pcapng",
    ] {
        let input = fixture("capture", name);
        let out = dir.join(name);
        annotate(&out, std::slice::from_ref(&input));
        assert_eq!(
            tshark_fields(
                &out,
                &["frame.time_epoch", "frame.len", "frame.interface_id"]
            ),
            tshark_fields(
                &input,
                &["frame.time_epoch", "frame.len", "frame.interface_id"]
            ),
            "{name}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Standard input is read twice through a file kept for it: the annotated copy is whole.
#[test]
fn standard_input_is_annotated_too() {
    let dir = temp_dir("stdin");
    let input = fixture("analyze", "split_response.pcap");
    let out = dir.join("from-stdin.pcapng");
    let run = Command::new(BIN)
        .args(["analyze", "--json", "--annotate"])
        .arg(&out)
        .arg("-")
        .stdin(std::fs::File::open(&input).expect("fixture"))
        .output()
        .expect("tcpstall runs");
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(tshark_fields(&out, PACKET), tshark_fields(&input, PACKET));
    assert!(!comments(&out).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A destination that cannot be written is refused before anything is read, with what to do;
/// the capture given as input is never overwritten.
#[test]
fn bad_destinations_are_refused_with_what_to_do() {
    let dir = temp_dir("bad");
    let input = dir.join("input.pcap");
    std::fs::copy(fixture("analyze", "split_response.pcap"), &input).expect("copy");
    let before = std::fs::read(&input).expect("input");
    let cases: [(PathBuf, &str); 3] = [
        (dir.clone(), "that is a directory"),
        (dir.join("missing/out.pcapng"), "does not exist"),
        (input.clone(), "is one of the captures read"),
    ];
    for (destination, says) in cases {
        let run = tcpstall(&[
            "--annotate".as_ref(),
            destination.as_os_str(),
            input.as_os_str(),
        ]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(
            run.status.code(),
            Some(2),
            "{}: {stderr}",
            destination.display()
        );
        assert!(stderr.contains(says), "{}: {stderr}", destination.display());
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(run.stdout.is_empty(), "nothing reported before the check");
    }
    assert_eq!(
        std::fs::read(&input).expect("input"),
        before,
        "the input is untouched"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".tcpstall-annotate")
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temporary file left: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
