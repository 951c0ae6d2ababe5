//! `tcpstall probe` against the lab's own servers (`lab --serve`), one catalogue row at a
//! time. The rows and what a probe must find come from `lab --list --json`, not from names
//! written here: a row whose server stalls a typical client (`typical_client_stall`: the
//! server writes its answer in two sub-MSS writes and the client delays its ACK) must be a
//! `stall` with the server to blame, confirmed by the probe's QUICKACK re-run; every other row
//! must be `clean`. Verdicts, culprits and confirmations are asserted, not timings; every
//! server listens on 127.0.0.1 and is killed when its test ends.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{first_line_within, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Timed requests per probe: enough for a keep-alive median past the first, quick-ACKed turn.
const REQUESTS: &str = "8";

/// One row of `lab --list --json`, with what the probe needs to meet its server.
#[derive(Debug)]
struct Row {
    scenario: String,
    variant: String,
    size: u64,
    expected_stall: bool,
    held_side: Option<String>,
    protocol: String,
    typical_client_stall: bool,
    requests_in_flight: u64,
}

impl Row {
    fn name(&self) -> String {
        format!("{}/{}", self.scenario, self.variant)
    }
}

fn text(v: &Value, key: &str) -> String {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("lab --list --json: `{key}` is a string in {v}"))
        .to_string()
}

fn flag(v: &Value, key: &str) -> bool {
    v[key]
        .as_bool()
        .unwrap_or_else(|| panic!("lab --list --json: `{key}` is a boolean in {v}"))
}

/// The catalogue as `lab --list --json` gives it.
fn catalogue() -> Vec<Row> {
    let out = Command::new(BIN)
        .args(["lab", "--list", "--json"])
        .output()
        .expect("tcpstall runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).expect("lab --list --json is JSON");
    let scenarios = list["scenarios"].as_array().expect("a list of scenarios");
    scenarios
        .iter()
        .flat_map(|scenario| {
            let name = text(scenario, "name");
            let variants = scenario["variants"].as_array().expect("a list of variants");
            variants.iter().map(move |v| Row {
                scenario: name.clone(),
                variant: text(v, "name"),
                size: v["size"].as_u64().expect("a size"),
                expected_stall: flag(v, "expected_stall"),
                held_side: v["held_side"].as_str().map(str::to_string),
                protocol: text(v, "protocol"),
                typical_client_stall: flag(v, "typical_client_stall"),
                requests_in_flight: v["requests_in_flight"].as_u64().expect("a count"),
            })
        })
        .collect()
}

/// A `lab --serve` child, killed when dropped, and the address it printed.
struct Served {
    child: KillOnDrop,
    addr: String,
}

fn serve(scenario: &str, variant: &str, extra: &[&str]) -> Served {
    let mut child = Command::new(BIN)
        .args([
            "lab",
            "--serve",
            "--scenario",
            scenario,
            "--variant",
            variant,
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpstall runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let child = KillOnDrop(child);
    let line = first_line_within(stdout, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("lab --serve {scenario}/{variant} prints its address"));
    let prefix = format!("serving {scenario}/{variant} on ");
    let addr = line
        .trim_end()
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("`{line}` starts with `{prefix}`"))
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{line}");
    Served { child, addr }
}

/// The protocol of a one-way stream's server: it answers nothing, so a probe has no turn to
/// time.
const ONE_WAY: &str = "sink";

/// The probe's arguments for `row`'s server at `addr`.
fn probe_target(row: &Row, addr: &str) -> Vec<String> {
    let size = row.size.to_string();
    match row.protocol.as_str() {
        "http" => vec![format!("http://{addr}/")],
        "memcached" => vec![format!("memcached://{addr}"), "--size".into(), size],
        // The echo server writes back the line it read: one line of the row's size, in one
        // write, as a typical client sends it.
        "echo" => {
            let line = "x".repeat(row.size.saturating_sub(2) as usize);
            vec![
                format!("tcp://{addr}"),
                "--send".into(),
                format!("{line}\\r\\n"),
                "--until".into(),
                "\\n".into(),
            ]
        }
        other => panic!("{}: no probe target for protocol `{other}`", row.name()),
    }
}

/// `probe --json` with bounded requests and time: its JSON, or the reason it gave none.
fn probe(target: &[String]) -> Result<Value, String> {
    let out = Command::new(BIN)
        .args(["probe", "--json", "--requests", REQUESTS])
        .args(["--timeout", "2", "--max-time", "20"])
        .args(target)
        .output()
        .expect("tcpstall runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("probe exited {:?}: {stderr}", out.status.code()));
    }
    serde_json::from_slice(&out.stdout).map_err(|err| format!("probe --json: {err}: {stderr}"))
}

/// What a probe of `row`'s server must report, checked against `v`; the mismatch if any.
fn check(row: &Row, v: &Value) -> Option<String> {
    let (verdict, culprit, confirmed) = if row.typical_client_stall {
        // The server holds the tail of its answer behind the probe's delayed ACK; the
        // probe's QUICKACK re-run must remove the stall.
        ("stall", Value::from("server"), Value::from(true))
    } else {
        ("clean", Value::Null, Value::Null)
    };
    let ok = v["verdict"] == verdict
        && v["culprit"] == culprit
        && v["confirmed"] == confirmed
        && v["requests"].as_u64() == REQUESTS.parse().ok()
        && (row.typical_client_stall || v["stalls"]["nagle_delayed_ack"] == 0)
        && (!row.typical_client_stall || v["evidence"]["held_side"] == "server");
    (!ok).then(|| format!("expected {verdict}/{culprit}/{confirmed}: {v}"))
}

#[test]
fn every_lab_server_meets_the_probe_as_the_catalogue_says() {
    let rows = catalogue();
    // The catalogue's own stalling rows: the server-held ones must stall a typical client;
    // in the client-held ones (echo split, for one: the client writes its line twice) the
    // hold is the client's own, and a probe that writes its request once cannot make the
    // server stall, so those rows' servers must be clean against it. Rows fixed on the
    // client's side (http short, memcached quickack-1400) serve what their stalling row
    // serves: `typical_client_stall` says so, and the probe must find the stall. A row whose
    // server holds replies only behind others in flight (pipeline and concurrent) meets the
    // probe's one request at a time cleanly.
    let server_held: Vec<&Row> = rows
        .iter()
        .filter(|r| r.expected_stall && r.held_side.as_deref() == Some("server"))
        .filter(|r| r.requests_in_flight == 1)
        .collect();
    assert!(
        !server_held.is_empty(),
        "no server-held stall in the catalogue"
    );
    for row in &server_held {
        assert!(row.typical_client_stall, "{} stalls any client", row.name());
    }
    for row in rows
        .iter()
        .filter(|r| r.held_side.as_deref() == Some("client"))
    {
        assert!(
            !row.typical_client_stall,
            "{}: the hold is the client's",
            row.name()
        );
    }
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for row in rows.iter().filter(|r| r.protocol != ONE_WAY) {
        let served = serve(&row.scenario, &row.variant, &["--row-timeout", "60"]);
        let line = match probe(&probe_target(row, &served.addr)) {
            Ok(v) => {
                if let Some(mismatch) = check(row, &v) {
                    failures.push(format!("{}: {mismatch}", row.name()));
                }
                format!(
                    "{:<28} expected_stall={:<5} held={:<6} probe: {} / {} / confirmed {} (p50 {} ms)",
                    row.name(),
                    row.expected_stall,
                    row.held_side.as_deref().unwrap_or("-"),
                    v["verdict"],
                    v["culprit"],
                    v["confirmed"],
                    v["p50_ms"]
                )
            }
            Err(err) => {
                failures.push(format!("{}: {err}", row.name()));
                format!("{:<28} probe failed", row.name())
            }
        };
        table.push(line);
        drop(served);
    }
    eprintln!("{}", table.join("\n"));
    assert!(
        table.len() > server_held.len(),
        "no clean row was probed:\n{}",
        table.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn serve_needs_exactly_one_row() {
    for args in [
        &["--scenario", "http"][..],
        &["--variant", "split"][..],
        &["--scenario", "http", "--variant", "nope"][..],
    ] {
        let out = Command::new(BIN)
            .args(["lab", "--serve"])
            .args(args)
            .stdout(Stdio::null())
            .output()
            .expect("tcpstall runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("tcpstall lab --list") && !stderr.contains("panicked"),
            "{args:?}: {stderr}"
        );
    }
}

/// Waits up to `limit` for the child to end; its exit code.
fn exit_within(child: &mut KillOnDrop, limit: Duration) -> Option<i32> {
    let started = Instant::now();
    while started.elapsed() < limit {
        if let Some(status) = child.0.try_wait().expect("wait for lab --serve") {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn serve_stops_on_sigterm_and_at_its_row_timeout() {
    let mut served = serve("http", "split", &["--row-timeout", "60"]);
    support::signal(served.child.0.id(), libc::SIGTERM).expect("SIGTERM sent to our child");
    assert_eq!(
        exit_within(&mut served.child, Duration::from_secs(5)),
        Some(0)
    );

    let mut bounded = serve("memcached", "value-1400", &["--row-timeout", "1"]);
    assert_eq!(
        exit_within(&mut bounded.child, Duration::from_secs(10)),
        Some(0)
    );
}
