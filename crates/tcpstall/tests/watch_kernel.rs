//! `tcpstall watch --kernel`: Nagle holds seen by BPF programs on the kernel's tracepoints,
//! against the packet capture on the same traffic (Python's http.server with HTTP/1.1
//! keep-alive, which writes header and body apart), a TCP_NODELAY server that never holds,
//! and the lab's split-writing server; holds no ACK ends (the peer's segments dropped by a
//! netfilter rule in a namespace of the test's own): released by the retransmission timer,
//! ended by close or by reset; holds of a fraction of a millisecond, printed with `--minor`;
//! the held write's call site, to its line in C (DWARF) and in JavaScript (Node's perf map).
//! The committed BPF objects (scripts/build-bpf's list) are checked against their sources.
//!
//! The live tests need root (CAP_BPF + CAP_PERFMON) and a kernel that lets BPF programs on
//! its BTF tracepoints load; where it does not they say why and pass without checking.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{call_site, command_in, spawn_printing_port, KillOnDrop, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Keep-alive requests per connection: the first answer is not held (a new connection's
/// receiver is in quick-ACK mode), each later one ~40 ms.
const REQUESTS: usize = 8;

/// Skips the calling test (with a message) where the kernel cannot be watched.
macro_rules! require_kernel {
    () => {
        let probe = ["watch", "--kernel", "--json", "--duration", "0.1"];
        if let Some(why) = support::bpf_unavailable(BIN, &probe) {
            support::skip(format!("watch --kernel cannot run here: {why}"));
            return;
        }
    };
}

/// A `tcpstall watch` running in the background, its standard error in a file polled for the
/// line that says it is ready.
struct Background {
    child: KillOnDrop,
    stderr: PathBuf,
}

impl Background {
    fn start(args: &[&str], tag: &str) -> Background {
        let stderr = std::env::temp_dir().join(format!(
            "tcpstall-watch-kernel-{}-{tag}.err",
            std::process::id()
        ));
        let file = std::fs::File::create(&stderr).expect("stderr file");
        let child = Command::new(BIN)
            .arg("watch")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(file)
            .spawn()
            .expect("the tcpstall binary runs");
        let bg = Background {
            child: KillOnDrop(child),
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while !bg.errors().contains("tcpstall: watching") {
            assert!(
                Instant::now() < deadline,
                "watch {args:?} not ready: {}",
                bg.errors()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        bg
    }

    fn errors(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits for the run to end by its `--duration`; the JSON lines it printed.
    fn lines(self) -> Vec<Value> {
        let errors = self.errors();
        let Background { child, stderr } = self;
        let mut child = child;
        let _ = std::fs::remove_file(stderr);
        let mut out = String::new();
        if let Some(mut pipe) = child.0.stdout.take() {
            use std::io::Read;
            let _ = pipe.read_to_string(&mut out);
        }
        let status = child.0.wait().expect("watch ends");
        assert!(status.success(), "{status}: {errors}\n{out}");
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
            .collect()
    }
}

/// Python's http.server, HTTP/1.1 keep-alive, a 200-byte page; `nodelay` sets TCP_NODELAY on
/// each accepted connection (`StreamRequestHandler.disable_nagle_algorithm`).
fn python_server(nodelay: bool) -> (KillOnDrop, u16) {
    python_server_in(None, nodelay)
}

/// [`python_server`] inside network namespace `ns`, if given.
fn python_server_in(ns: Option<&str>, nodelay: bool) -> (KillOnDrop, u16) {
    let script = format!(
        r#"
import http.server, os, tempfile
d = tempfile.mkdtemp()
open(os.path.join(d, "index.html"), "w").write("x" * 200)
os.chdir(d)
class H(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = {nodelay}
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#,
        nodelay = if nodelay { "True" } else { "False" }
    );
    spawn_printing_port(
        command_in(ns, "python3").args(["-c", &script]),
        "python3 http.server",
    )
}

/// `n` GETs on one keep-alive connection (Python's http.client), each answer read whole.
fn requests(port: u16, n: usize) {
    requests_in(None, port, n);
}

/// [`requests`] inside network namespace `ns`, if given.
fn requests_in(ns: Option<&str>, port: u16, n: usize) {
    let script = format!(
        "import http.client\nc = http.client.HTTPConnection('127.0.0.1', {port}, timeout=5)\n\
         for _ in range({n}):\n    c.request('GET', '/index.html'); c.getresponse().read()\n"
    );
    let status = command_in(ns, "python3")
        .args(["-c", &script])
        .status()
        .expect("python3 runs");
    assert!(status.success(), "the client failed: {status}");
}

fn stalls_on(events: &[Value], port: u16) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack" && e["server_port"] == port)
        .collect()
}

#[test]
fn held_answers_are_caught_with_the_servers_pid_as_the_capture_sees_them() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let (server, port) = python_server(false);
    let filter = format!("tcp port {port}");
    let kernel = Background::start(&["--kernel", "--json", "--duration", "4"], "k");
    let capture = Background::start(&["-i", "lo", "--json", "--duration", "4", &filter], "c");
    requests(port, REQUESTS);
    let (kernel, capture) = (kernel.lines(), capture.lines());
    let (from_kernel, from_capture) = (stalls_on(&kernel, port), stalls_on(&capture, port));
    let ms = |e: &&Value| e["delay_ms"].as_f64().unwrap_or(0.0);
    eprintln!(
        "hold durations, ms: kernel {:?}, capture {:?}",
        from_kernel.iter().map(ms).collect::<Vec<_>>(),
        from_capture.iter().map(ms).collect::<Vec<_>>()
    );
    assert!(
        from_kernel.len() >= REQUESTS - 2,
        "too few holds seen by the kernel: {kernel:?}"
    );
    assert_eq!(
        from_kernel.len(),
        from_capture.len(),
        "kernel and capture disagree:\n{kernel:?}\n{capture:?}"
    );
    let pid = u64::from(server.0.id());
    for (k, c) in from_kernel.iter().zip(&from_capture) {
        assert_eq!(k["pid"].as_u64(), Some(pid), "{k}");
        assert_eq!(k["command"], "python3", "{k}");
        assert_eq!(k["held_side"], "server", "{k}");
        assert_eq!(k["fix"], format!("tcpstall fix {pid} --port {port}"), "{k}");
        assert!(ms(k) >= 30.0, "{k}");
        // The kernel times the hold from the write to the releasing ACK; the capture from
        // the small segment before it to the held one: the same wait within a few ms.
        assert!((ms(k) - ms(c)).abs() < 5.0, "{k}\n{c}");
    }
    let summary = &kernel.last().expect("a summary line")["summary"];
    assert_eq!(summary["interface"], "kernel", "{summary}");
}

#[test]
fn the_metrics_count_the_kernels_holds() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let (_server, port) = python_server(false);
    let kernel = Background::start(
        &[
            "--kernel",
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--duration",
            "4",
        ],
        "m",
    );
    let addr = kernel
        .errors()
        .lines()
        .find_map(|l| {
            l.strip_prefix("tcpstall: metrics at http://")?
                .strip_suffix("/metrics")
                .map(str::to_string)
        })
        .expect("the metrics address announced");
    requests(port, REQUESTS);
    // Read within the run: the holds reach the counters at the next 10 ms poll, the kernel's
    // own counters at the next 500 ms tick.
    let name = r#"tcpstall_watch_stalls_total{held_side="server",kind="nagle_delayed_ack"}"#;
    let body = support::scrape_until(&addr, Duration::from_secs(3), |text| {
        let count = support::series_value(text, name);
        count >= (REQUESTS - 2) as u64
            && support::series_value(text, "tcpstall_watch_kernel_holds_total") >= count
    });
    let value = |name: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{body}"))
    };
    let count = value(name);
    let events = kernel.lines();
    // Other traffic of the host may add its own holds; this server's are among them.
    assert!(
        count >= stalls_on(&events, port).len() as u64 && count >= (REQUESTS - 2) as u64,
        "{count}\n{body}"
    );
    // Every hold began in the kernel's count; the short ones are counted apart.
    assert!(
        value("tcpstall_watch_kernel_holds_total") >= count,
        "{body}"
    );
    for series in [
        r#"tcpstall_watch_kernel_short_holds_total{below="1ms"}"#,
        r#"tcpstall_watch_kernel_short_holds_total{below="stall_threshold"}"#,
        r#"tcpstall_watch_kernel_holds_ended_total{by="close"}"#,
    ] {
        value(series);
    }
}

/// [`support::held_behind_a_drop`] run to its end in network namespace `ns`, per `ending`;
/// the server's port.
fn held_then(ns: &Netns, ending: &str) -> u16 {
    port_printed_by(Some(&ns.0), &support::held_behind_a_drop(ending, false))
}

/// Runs a Python `script` (inside network namespace `ns`, if given) to its end; the port it
/// printed last.
fn port_printed_by(ns: Option<&str>, script: &str) -> u16 {
    let out = command_in(ns, "python3")
        .args(["-c", script])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("the port")
}

#[test]
fn a_hold_released_by_the_retransmission_timer_is_named() {
    require_kernel!();
    let ns = Netns::new("wr");
    // No tail-loss probe: the RTO alone resends.
    ns.run(&["sysctl", "-qw", "net.ipv4.tcp_early_retrans=0"], true);
    let kernel = Background::start(&["--kernel", "--json", "--minor", "--duration", "5"], "r");
    let port = held_then(&ns, "rto");
    let events = kernel.lines();
    let held: Vec<&Value> = events.iter().filter(|e| e["server_port"] == port).collect();
    assert_eq!(held.len(), 1, "{events:?}");
    assert_eq!(held[0]["release"], "rto", "{}", held[0]);
    assert_eq!(held[0]["kind"], "rto", "{}", held[0]);
    assert_eq!(held[0]["held_side"], "client", "{}", held[0]);
    // Held until the drop was lifted, 0.6 s after the writes.
    assert!(held[0]["delay_ms"].as_f64() >= Some(500.0), "{}", held[0]);
}

/// The same held write with the tail-loss probe on (the kernel's default). With one segment
/// out, tcp_schedule_loss_probe arms the probe about 200 ms ahead (2 RTTs plus the minimum
/// RTO, tcp_rto_min_us, for the peer's delayed ACK); tcp_send_loss_probe then sends the held bytes as new data whatever Nagle
/// says (tcp_write_xmit with TCP_NAGLE_OFF) and sets tlp_high_seq. No ACK comes, so the RTO
/// follows, at least TCP_RTO_MIN (200 ms) later: tcp_enter_loss sets the Loss state, clears
/// tlp_high_seq, and the timer resends the small segment. The hold is the probe's, timed by
/// the probe's send, not by the RTO's nor by the ACK after the drop is lifted.
#[test]
fn a_hold_released_by_the_tail_loss_probe_is_named() {
    require_kernel!();
    let ns = Netns::new("wt");
    ns.run(&["sysctl", "-qw", "net.ipv4.tcp_early_retrans=3"], true);
    let kernel = Background::start(&["--kernel", "--json", "--minor", "--duration", "5"], "t");
    let port = held_then(&ns, "rto");
    let events = kernel.lines();
    let held: Vec<&Value> = events.iter().filter(|e| e["server_port"] == port).collect();
    assert_eq!(held.len(), 1, "{events:?}");
    assert_eq!(held[0]["release"], "tlp", "{}", held[0]);
    // A loss-recovery timer's wait, as the RTO's.
    assert_eq!(held[0]["kind"], "rto", "{}", held[0]);
    assert_eq!(held[0]["held_side"], "client", "{}", held[0]);
    // Sent by the probe, before the RTO's resend (at least 200 ms after the probe) and long
    // before the drop was lifted, 0.6 s after the writes.
    let delay = held[0]["delay_ms"].as_f64().unwrap_or(f64::NAN);
    assert!((30.0..400.0).contains(&delay), "{}", held[0]);
}

#[test]
fn a_hold_ended_by_close_or_reset_is_reported_ended_not_lost() {
    require_kernel!();
    for ending in ["close", "reset"] {
        let ns = Netns::new(&format!("w{ending}"));
        let kernel = Background::start(&["--kernel", "--json", "--duration", "4"], ending);
        let port = held_then(&ns, ending);
        let lines = kernel.lines();
        let suffix = format!(":{port}");
        let ended: Vec<&Value> = lines
            .iter()
            .filter(|l| {
                l["ended"]["flow"]
                    .as_str()
                    .is_some_and(|f| f.ends_with(&suffix))
            })
            .collect();
        assert_eq!(ended.len(), 1, "{ending}: {lines:?}");
        let e = &ended[0]["ended"];
        assert_eq!(e["by"], ending, "{e}");
        assert_eq!(e["bytes"], 10, "{e}");
        assert_eq!(e["command"], "python3", "{e}");
        // From the held write to the close, 0.1 s later.
        let ms = e["delay_ms"].as_f64().unwrap_or(0.0);
        assert!((90.0..400.0).contains(&ms), "{e}");
        assert!(
            !lines.iter().any(|l| l["server_port"] == port),
            "{ending}: not a stall: {lines:?}"
        );
    }
}

/// Write-write-read rounds of the short-hold test, on one connection.
const SHORT_ROUNDS: usize = 30;

/// A client's write-write-read, [`SHORT_ROUNDS`] times on one connection, to a server that
/// reads each request 0.2 ms after it arrives (select, then a sleep). Past the quick-ACK
/// start of the connection, and kept out of ping-pong mode (TCP_QUICKACK after each answer),
/// the server acknowledges a small segment when it reads it (tcp_cleanup_rbuf), not at once
/// nor 40 ms later: the client's second write waits that long, well under 1 ms. Returns the
/// server's port.
fn held_briefly() -> u16 {
    let script = format!(
        r#"
import os, select, socket, time
L = socket.socket(); L.bind(("127.0.0.1", 0)); L.listen(1)
port = L.getsockname()[1]
pid = os.fork()
if pid == 0:
    s, _ = L.accept()
    while True:
        select.select([s], [], [], 5)
        time.sleep(0.0002)
        got = b""
        while len(got) < 20:
            d = s.recv(100)
            if not d:
                os._exit(0)
            got += d
        s.send(b"ok")
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
L.close()
c = socket.create_connection(("127.0.0.1", port), timeout=5)
for _ in range({SHORT_ROUNDS}):
    c.send(b"a" * 10); c.send(b"b" * 10); c.recv(10)
    time.sleep(0.005)
c.close()
os.waitpid(pid, 0)
print(port, flush=True)
"#
    );
    port_printed_by(None, &script)
}

#[test]
fn holds_under_a_millisecond_are_printed_with_minor_only() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    for minor in [true, false] {
        let mut args = vec!["--kernel", "--json", "--duration", "2"];
        if minor {
            args.push("--minor");
        }
        let kernel = Background::start(&args, if minor { "short" } else { "short0" });
        let port = held_briefly();
        let events = kernel.lines();
        let on_port: Vec<&Value> = events.iter().filter(|e| e["server_port"] == port).collect();
        if !minor {
            assert!(on_port.is_empty(), "without --minor: {on_port:?}");
            continue;
        }
        let ms = |e: &&Value| e["delay_ms"].as_f64().unwrap_or(f64::MAX);
        eprintln!(
            "short holds, ms: {:?}",
            on_port.iter().map(ms).collect::<Vec<_>>()
        );
        for e in &on_port {
            assert_eq!(e["kind"], "nagle_minor", "{e}");
            assert_eq!(e["held_side"], "client", "{e}");
            assert_eq!(e["release"], "ack", "{e}");
            assert_eq!(e["command"], "python3", "{e}");
        }
        // The first rounds are not held (the server's quick ACKs come before the second
        // write); past them, most are, each for about the server's 0.2 ms.
        let under_1ms = on_port.iter().filter(|e| ms(e) < 1.0).count();
        assert!(
            under_1ms >= SHORT_ROUNDS / 3 && on_port.len() <= SHORT_ROUNDS,
            "{under_1ms} holds under 1 ms: {on_port:?}"
        );
    }
}

#[test]
fn a_nodelay_server_holds_nothing() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let (_server, port) = python_server(true);
    let kernel = Background::start(&["--kernel", "--json", "--minor", "--duration", "2"], "n");
    requests(port, REQUESTS);
    let events = kernel.lines();
    let on_port: Vec<&Value> = events.iter().filter(|e| e["server_port"] == port).collect();
    assert!(
        on_port.is_empty(),
        "holds on a TCP_NODELAY server: {on_port:?}"
    );
}

#[test]
fn a_server_in_another_network_namespace_is_named_by_the_kernel() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let ns = Netns::new("wk");
    let (server, port) = python_server_in(Some(&ns.0), false);
    let kernel = Background::start(&["--kernel", "--json", "--duration", "3"], "ns");
    requests_in(Some(&ns.0), port, REQUESTS);
    let events = kernel.lines();
    let held = stalls_on(&events, port);
    // No capture on this host's interfaces sees this traffic: it never leaves the namespace.
    assert!(held.len() >= REQUESTS - 2, "{events:?}");
    let pid = u64::from(server.0.id());
    for e in &held {
        assert_eq!(e["pid"].as_u64(), Some(pid), "{e}");
        assert_eq!(e["held_side"], "server", "the namespace's listener: {e}");
        assert!(e["fd"].is_null(), "{e}");
        assert_eq!(e["fix"], format!("tcpstall fix {pid} --port {port}"), "{e}");
    }
}

/// A short-lived client: a warm-up request (the server leaves quick-ACK mode and delays its
/// ACKs, ping-pong), then three requests of two small writes each, whose second waits for the
/// server's delayed ACK; it reads each answer and exits. The server keeps its end open.
const SHORT_LIVED_CLIENT: &str = r#"
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
f = c.makefile("rb")
c.sendall(b"ping\n"); f.readline()
for _ in range(3):
    c.send(b"hello "); c.send(b"world\n"); f.readline()
print(__import__("os").getpid(), flush=True)
"#;

/// A line-echo server that answers each line in one write and keeps the connection open
/// (its socket then waits in CLOSE_WAIT, held by its fd) after the client has gone.
const KEEPING_SERVER: &str = r#"
import socket, time
L = socket.socket(); L.bind(("127.0.0.1", 0)); L.listen(1)
print(L.getsockname()[1], flush=True)
s, _ = L.accept(); f = s.makefile("rb")
for _ in range(4):
    s.sendall(f.readline())
time.sleep(30)
"#;

/// The writer exited before its holds were looked up: its socket has left the table, and
/// only the server's end, still open, is there. The kernel saw the client write, so the
/// client is named, never the server it talked to. watch is stopped while the client runs
/// (its records wait in the kernel's ring), so the lookup comes after the exit.
#[test]
fn a_writer_that_exited_is_named_not_its_peer() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let (server, port) = spawn_printing_port(
        Command::new("python3").args(["-c", KEEPING_SERVER]),
        "the keeping server",
    );
    let kernel = Background::start(&["--kernel", "--json", "--duration", "4"], "x");
    let watch_pid = kernel.child.0.id().to_string();
    let signal = |sig: &str| {
        let status = Command::new("kill")
            .args([sig, &watch_pid])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {sig}");
    };
    signal("-STOP");
    let client = Command::new("python3")
        .args(["-c", SHORT_LIVED_CLIENT, &port.to_string()])
        .output();
    // Never left stopped, whatever the client did.
    signal("-CONT");
    let client = client.expect("python3 runs");
    assert!(client.status.success(), "{client:?}");
    let client_pid: u64 = String::from_utf8_lossy(&client.stdout)
        .trim()
        .parse()
        .expect("the client's pid");
    let events = kernel.lines();
    let held = stalls_on(&events, port);
    assert!(
        !held.is_empty(),
        "no delayed-ACK hold of the client: {events:?}"
    );
    for e in &held {
        assert_eq!(e["held_side"], "client", "{e}");
        assert_eq!(
            e["pid"].as_u64(),
            Some(client_pid),
            "the exited writer: {e}"
        );
        assert_ne!(e["pid"].as_u64(), Some(u64::from(server.0.id())), "{e}");
    }
}

#[test]
fn the_labs_stalls_are_the_kernels() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let kernel = Background::start(&["--kernel", "--json", "--duration", "6"], "l");
    let lab = Command::new(BIN)
        .args(["lab", "--scenario", "http", "--requests", "10", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("the tcpstall binary runs");
    assert!(lab.status.success(), "{lab:?}");
    let table: Value = serde_json::from_slice(&lab.stdout).expect("lab JSON");
    let row = &table["rows"][0];
    assert_eq!(row["stalled"], true, "{table}");
    let port = row["server_port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("the lab's server port");
    let events = kernel.lines();
    let held = stalls_on(&events, port);
    for e in &held {
        assert_eq!(e["held_side"], "server", "{e}");
        assert_eq!(e["command"], "tcpstall", "{e}");
    }
    assert_eq!(
        Some(held.len() as u64),
        row["stalled_requests"].as_u64(),
        "kernel and lab disagree: {row}\n{events:?}"
    );
}

/// Runs the C client's requests (support::call_site) under `watch --kernel --json` with
/// `extra` arguments; the client's events (every kind).
fn call_site_run(extra: &[&str], tag: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let exe = call_site::build(dir.path());
    let (_server, port) = call_site::request_server();
    let mut args = vec!["--kernel", "--json", "--duration", "3"];
    args.extend_from_slice(extra);
    let kernel = Background::start(&args, tag);
    let mut client = call_site::Client::start(&exe, port, REQUESTS);
    client.go();
    let pid = u64::from(client.pid());
    let events = kernel.lines();
    drop(client);
    events
        .into_iter()
        .filter(|e| e["pid"].as_u64() == Some(pid))
        .collect()
}

/// The client's delayed-ACK stalls among `events`, enough of them.
fn delayed_acks(events: Vec<Value>) -> Vec<Value> {
    let stalls: Vec<Value> = events
        .into_iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack")
        .collect();
    assert!(
        stalls.len() >= REQUESTS - 2,
        "too few holds of the client: {stalls:?}"
    );
    stalls
}

#[test]
fn the_held_write_and_the_one_before_are_named_to_their_lines() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let stalls = delayed_acks(call_site_run(&[], "stacks"));
    let mut whole = 0;
    for stall in &stalls {
        assert!(
            stall["delay_ms"].as_f64().is_some_and(|d| d >= 30.0),
            "{stall}"
        );
        whole += usize::from(call_site::assert_both_writes_named(stall));
    }
    // Walked whole from the process's first hold on.
    assert!(whole >= REQUESTS - 3, "{stalls:?}");
}

#[test]
fn a_process_s_first_hold_names_the_line_before_it() {
    require_kernel!();
    let _serial = support::serial();
    // Every hold, the first too, however short.
    let events = call_site_run(&["--minor"], "first-hold");
    let first = events
        .iter()
        .find(|e| e.get("stack").is_some())
        .unwrap_or_else(|| panic!("no hold of the client: {events:?}"));
    assert!(
        !call_site::assert_both_writes_named(first),
        "only the calling line of the write before the first hold: {first}"
    );
    let later = events.iter().filter(|e| e.get("stack").is_some()).skip(1);
    assert!(
        later.clone().all(|e| e["previous_stack_missing"].is_null()),
        "whole stacks after the first hold: {events:?}"
    );
}

#[test]
fn without_stacks_no_stack_is_taken() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    for stall in &delayed_acks(call_site_run(&["--no-stacks"], "no-stacks")) {
        assert!(stall.get("stack").is_none(), "{stall}");
        assert!(stall.get("previous_stack").is_none(), "{stall}");
    }
}

#[test]
fn without_privileges_the_error_names_the_capabilities() {
    let Some(out) = support::as_nobody(BIN, &["watch", "--kernel", "--duration", "1"]) else {
        return;
    };
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CAP_BPF and CAP_PERFMON (or root)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tcpstall watch"),
        "the capture is offered: {stderr}"
    );
}

#[test]
fn the_committed_objects_are_built_from_their_source() {
    let objects = support::bpf_objects();
    assert!(
        objects.iter().any(|(name, _)| name == "nagle"),
        "{objects:?}"
    );
    for (name, _) in &objects {
        support::assert_bpf_object_fresh(name);
    }
}

#[test]
fn a_node_servers_held_write_is_named_to_its_javascript_line_by_the_perf_map() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    if Command::new("node").arg("--version").output().is_err() {
        return support::skip("node is not installed (nodejs)");
    }
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/runtimes/http_server.js");
    let text = std::fs::read_to_string(fixture)
        .expect("fixture")
        .replace("CREATE", "http.createServer({ noDelay: false }, handler)");
    // The JIT names the arrow function that ends each answer by its file, line and column.
    let line = 1 + text
        .lines()
        .position(|l| l.contains("setImmediate("))
        .expect("the fixture's setImmediate line");
    let dir = support::Scratch::new("watch-kernel-node");
    let script = dir.path("held_answer.js");
    std::fs::write(&script, &text).expect("write the server");
    // --perf-basic-prof: V8 writes /tmp/perf-PID.map, the symbols of its JIT code, and an
    // isolate-*-v8.log in its working directory (the scratch one, not the source tree);
    // --interpreted-frames-native-stack: interpreted functions get frames of their own there.
    let (server, port) = spawn_printing_port(
        Command::new("node")
            .args(["--perf-basic-prof", "--interpreted-frames-native-stack"])
            .arg(&script)
            .current_dir(&dir.0),
        "node",
    );
    let perf_map = PathBuf::from(format!("/tmp/perf-{}.map", server.0.id()));
    let kernel = Background::start(&["--kernel", "--json", "--duration", "4"], "node");
    requests(port, REQUESTS);
    let events = kernel.lines();
    drop(server);
    let _ = std::fs::remove_file(&perf_map);
    let held = stalls_on(&events, port);
    assert!(!held.is_empty(), "no hold of the node server: {events:?}");
    let wanted = format!("held_answer.js:{line}:");
    let named = |e: &&&Value| {
        e["stack"].as_array().is_some_and(|frames| {
            frames.iter().any(|f| {
                f["function"]
                    .as_str()
                    .is_some_and(|name| name.starts_with("JS:") && name.contains(&wanted))
            })
        })
    };
    assert!(
        held.iter().any(|e| named(&e)),
        "no frame of the held write names {wanted}: {held:#?}"
    );
}
