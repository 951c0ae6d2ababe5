//! Claims proven by their packets, on real captures of the public corpus
//! (`TCPSTALL_CORPUS`: tcpdump's, zeek's and libpcap's test captures), read in place: a hold found again that an
//! earlier rule lost, and the same traffic in two files making no timeouts of itself.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn corpus_file(rel: &str) -> Option<PathBuf> {
    let path = support::corpus_dir().join(rel);
    if path.is_file() {
        Some(path)
    } else {
        support::skip(format!(
            "no {} (set TCPSTALL_CORPUS to the corpus)",
            path.display()
        ));
        None
    }
}

fn analyze_json(files: &[&Path]) -> serde_json::Value {
    let out = Command::new(BIN)
        .arg("analyze")
        .arg("--json")
        .args(files)
        .output()
        .expect("tcpstall runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn events<'a>(d: &'a serde_json::Value, kind: &str) -> Vec<&'a serde_json::Value> {
    d["events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["kind"] == kind).collect())
        .unwrap_or_default()
}

/// zeek `dce-rpc/mapi.pcap`, frames 72, 103, 104: a 24 B segment, the peer's pure ACK 196 ms
/// later, 241 B 0.1 ms after it. No handshake: the ACKing side's leg is bounded by its
/// immediate ACK of two segments (0.12 ms), and the held side's leg, timed by an answer only,
/// is an upper bound that cannot call the release too soon.
#[test]
fn mapi_windows_delayed_ack_hold_is_found() {
    let Some(file) = corpus_file("zeek/dce-rpc/mapi.pcap") else {
        return;
    };
    let d = analyze_json(&[&file]);
    let hold = events(&d, "nagle_delayed_ack")
        .into_iter()
        .find(|e| e["packet"] == 104)
        .unwrap_or_else(|| panic!("no Nagle hold at frame 104: {}", d["undecided"]));
    let delay = hold["delay_ms"].as_f64().unwrap_or_default();
    assert!((190.0..200.0).contains(&delay), "{hold}");
    assert_eq!(hold["peer_stack"], "windows");
}

/// The same traffic in two files: the second copy's packets repeat the first's, which is no
/// proof of a resend. No more timeouts than one file has; every event names its file.
#[test]
fn same_traffic_in_two_files_makes_no_timeouts() {
    let Some(file) = corpus_file("zeek/dce-rpc/mapi.pcap") else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("tcpstall-proof-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let copy = dir.join("mapi-again.pcap");
    std::fs::copy(&file, &copy).expect("copy");
    let once = analyze_json(&[&file]);
    let twice = analyze_json(&[&file, &copy]);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        events(&twice, "rto").len(),
        events(&once, "rto").len(),
        "{}",
        twice["undecided"]
    );
    let all = twice["events"].as_array().cloned().unwrap_or_default();
    assert!(!all.is_empty());
    assert!(
        all.iter().all(|e| e["file"].is_string()),
        "events name their file"
    );
    assert!(once["events"]
        .as_array()
        .is_some_and(|e| e.iter().all(|e| e.get("file").is_none())));
}
