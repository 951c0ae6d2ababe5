//! Precision and recall of `analyze` per stall kind, against the hand-labelled set in
//! `tests/accuracy/labels.tsv` (how it was made: `tests/accuracy/README.md`), over the public
//! capture corpus (`TCPSTALL_CORPUS`: tcpdump's, zeek's and libpcap's test captures).
//!
//! A claim (an event of `analyze --json --minor`) matches a label of the same file, kind and
//! held flow (`src:port>dst:port`, the held side first) when its `packet` is the label's frame,
//! or else lies within the label's `frames` span (the episode: A to B for a Nagle hold, the
//! original transmission to the last resend for a timeout or a SYN, the zero window to the data after it);
//! `nagle_ack_paced`, one event per flow side, matches on file, kind and flow alone. Per kind:
//! precision = claims on `real` labels / claims on `real` or `false` labels; recall = `real`
//! labels claimed / `real` labels. The test fails when a kind falls below its minimum in
//! `tests/accuracy/thresholds.tsv`, or when a labelled file has a claim no label matches
//! (it prints the line to add, to be judged from the packets).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest one file may take (debug build, two cores shared with the rest of the suite).
const PER_FILE: Duration = Duration::from_secs(120);

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/accuracy")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One line of labels.tsv.
struct Label {
    file: String,
    kind: String,
    frame: u64,
    flow: String,
    label: String,
    span: (u64, u64),
}

fn labels() -> Vec<Label> {
    let mut out = Vec::new();
    for (n, line) in data("labels.tsv").lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert!(f.len() >= 6, "labels.tsv line {}: 6 or 7 columns", n + 1);
        let frame: u64 = f[2]
            .parse()
            .unwrap_or_else(|_| panic!("labels.tsv line {}: frame {:?}", n + 1, f[2]));
        assert!(
            matches!(f[4], "real" | "false" | "unsure"),
            "labels.tsv line {}: label {:?} is not real, false or unsure",
            n + 1,
            f[4]
        );
        let span = f
            .get(6)
            .and_then(|s| s.split_once('-'))
            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
            .unwrap_or((frame, frame));
        out.push(Label {
            file: f[0].to_string(),
            kind: f[1].to_string(),
            frame,
            flow: f[3].to_string(),
            label: f[4].to_string(),
            span,
        });
    }
    out
}

/// Per kind: minimum precision and recall, in percent.
fn thresholds() -> BTreeMap<String, (f64, f64)> {
    let mut out = BTreeMap::new();
    for line in data("thresholds.tsv").lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split('\t').collect();
        assert!(
            f.len() >= 3,
            "thresholds.tsv: kind, precision, recall: {line:?}"
        );
        let p = f[1].parse().expect("thresholds.tsv precision");
        let r = f[2].parse().expect("thresholds.tsv recall");
        out.insert(f[0].to_string(), (p, r));
    }
    out
}

/// One claim: kind, packet, held flow.
struct Claim {
    kind: String,
    packet: u64,
    flow: String,
}

fn claims(json: &str) -> Result<Vec<Claim>, String> {
    let v: serde_json::Value = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut ends = BTreeMap::new();
    for f in v["flows"].as_array().into_iter().flatten() {
        let id = f["flow_id"].as_u64().ok_or("flow without flow_id")?;
        let c = f["client"].as_str().ok_or("flow without client")?;
        let s = f["server"].as_str().ok_or("flow without server")?;
        ends.insert(id, (c.to_string(), s.to_string()));
    }
    let mut out = Vec::new();
    for e in v["events"].as_array().into_iter().flatten() {
        let id = e["flow_id"].as_u64().ok_or("event without flow_id")?;
        let (c, s) = ends.get(&id).ok_or("event of an unknown flow")?;
        let flow = if e["held_side"] == "server" {
            format!("{s}>{c}")
        } else {
            format!("{c}>{s}")
        };
        out.push(Claim {
            kind: e["kind"].as_str().ok_or("event without kind")?.to_string(),
            packet: e["packet"].as_u64().ok_or("event without packet")?,
            flow,
        });
    }
    Ok(out)
}

/// The label a claim lands on: same file, kind and flow; its frame, else the nearest label
/// whose span holds the packet; any frame for the per-flow `nagle_ack_paced`.
fn matching<'a>(labels: &[&'a Label], c: &Claim) -> Option<&'a Label> {
    let same: Vec<&&Label> = labels
        .iter()
        .filter(|l| l.kind == c.kind && l.flow == c.flow)
        .collect();
    if c.kind == "nagle_ack_paced" {
        return same.first().map(|l| **l);
    }
    if let Some(l) = same.iter().find(|l| l.frame == c.packet) {
        return Some(l);
    }
    same.iter()
        .filter(|l| l.span.0 <= c.packet && c.packet <= l.span.1)
        .min_by_key(|l| l.frame.abs_diff(c.packet))
        .map(|l| **l)
}

fn analyze(file: &Path) -> Result<String, String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(["analyze", "--json", "--minor", "--workers", "1"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut out = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let started = Instant::now();
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if started.elapsed() > PER_FILE {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {PER_FILE:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    reader.join().map_err(|_| "reader panicked".to_string())
}

#[derive(Default)]
struct Score {
    labels: [usize; 3],
    claims_real: usize,
    claims_false: usize,
    claims_unsure: usize,
    real_found: BTreeSet<(String, u64, String)>,
}

fn pct(n: usize, d: usize) -> Option<f64> {
    (d > 0).then(|| 100.0 * n as f64 / d as f64)
}

fn show(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |v| format!("{v:.1}"))
}

#[test]
fn claims_match_the_hand_labelled_set_per_kind() {
    let dir = support::corpus_dir();
    assert!(
        dir.is_dir(),
        "no capture corpus at {}: the accuracy set scores claims on it (put it there, or set \
         TCPSTALL_CORPUS to its folder)",
        dir.display()
    );
    let labels = labels();
    let limits = thresholds();
    let mut by_file: BTreeMap<&str, Vec<&Label>> = BTreeMap::new();
    for l in &labels {
        by_file.entry(&l.file).or_default().push(l);
    }
    let files: Vec<&str> = by_file.keys().copied().collect();
    let next = Mutex::new(files.iter());
    let runs = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while let Some(file) = next.lock().map(|mut it| it.next().copied()).ok().flatten() {
                    let r = analyze(&dir.join(file)).and_then(|j| claims(&j));
                    if let Ok(mut v) = runs.lock() {
                        v.push((file, r));
                    }
                }
            });
        }
    });
    let mut runs = runs.into_inner().expect("runs");
    runs.sort_by_key(|(f, _)| *f);

    let mut score: BTreeMap<String, Score> = BTreeMap::new();
    for l in &labels {
        let i = match l.label.as_str() {
            "real" => 0,
            "false" => 1,
            _ => 2,
        };
        score.entry(l.kind.clone()).or_default().labels[i] += 1;
    }
    let mut unlabelled = Vec::new();
    let mut broken = Vec::new();
    for (file, r) in &runs {
        let cs = match r {
            Ok(cs) => cs,
            Err(e) => {
                broken.push(format!("{file}: {e}"));
                continue;
            }
        };
        for c in cs {
            let Some(l) = matching(&by_file[file], c) else {
                unlabelled.push(format!(
                    "{file}\t{}\t{}\t{}\t?\t?\t{}-{}",
                    c.kind, c.packet, c.flow, c.packet, c.packet
                ));
                continue;
            };
            let s = score.entry(c.kind.clone()).or_default();
            match l.label.as_str() {
                "real" => {
                    s.claims_real += 1;
                    s.real_found
                        .insert((l.file.clone(), l.frame, l.flow.clone()));
                }
                "false" => s.claims_false += 1,
                _ => s.claims_unsure += 1,
            }
        }
    }

    println!(
        "{:<18} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} | {:>9} {:>7}",
        "kind", "real", "false", "unsure", "c.real", "c.false", "c.uns", "precision", "recall"
    );
    let mut failures = Vec::new();
    for (kind, s) in &score {
        let precision = pct(s.claims_real, s.claims_real + s.claims_false);
        let recall = pct(s.real_found.len(), s.labels[0]);
        println!(
            "{:<18} {:>6} {:>6} {:>6} | {:>6} {:>6} {:>6} | {:>9} {:>7}",
            kind,
            s.labels[0],
            s.labels[1],
            s.labels[2],
            s.claims_real,
            s.claims_false,
            s.claims_unsure,
            show(precision),
            show(recall)
        );
        let (min_p, min_r) = limits.get(kind).copied().unwrap_or((0.0, 0.0));
        if precision.is_some_and(|p| p + 1e-9 < min_p) {
            failures.push(format!(
                "{kind}: precision {} below {min_p} ({} claims on false labels)",
                show(precision),
                s.claims_false
            ));
        }
        if recall.is_some_and(|r| r + 1e-9 < min_r) {
            failures.push(format!(
                "{kind}: recall {} below {min_r} ({} of {} real labels claimed)",
                show(recall),
                s.real_found.len(),
                s.labels[0]
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "analyze gave no report for labelled files:\n{}",
        broken.join("\n")
    );
    assert!(
        unlabelled.is_empty(),
        "{} claims match no label; judge each from the packets (tests/accuracy/README.md) and \
         add its line to tests/accuracy/labels.tsv with label and reason filled in:\n{}",
        unlabelled.len(),
        unlabelled.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
