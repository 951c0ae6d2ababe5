//! `tcpstall watch` on loopback during real stalls: Python's http.server with HTTP/1.1
//! keep-alive (header and body written apart, CPython issue 108736) driven by a keep-alive
//! client here, and the lab's own split-writing server; bad input; the Prometheus endpoint
//! scraped by curl and checked by promtool.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::python_http::PythonServer;
use support::{first_line_within, Collected, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Keep-alive requests per run: the first is never held (a new connection starts in quick-ACK
/// mode), the later ones are, ~40 ms each.
const REQUESTS: usize = 8;

/// The metrics series of the server's Nagle stalls.
const STALLS_SERIES: &str =
    "tcpstall_watch_stalls_total{held_side=\"server\",kind=\"nagle_delayed_ack\"}";

fn require_root(what: &str) {
    support::require_root(&format!("{what} needs root (CAP_NET_RAW)"));
}

/// A running `tcpstall watch`, its standard output collected by a thread.
struct Watch {
    run: Collected,
    /// The metrics address it announced, if any.
    metrics: Option<String>,
}

impl Watch {
    /// Starts `watch` with `args` and waits until it says the capture is open.
    fn start(args: &[&str]) -> Watch {
        Watch::start_under(&[], args)
    }

    /// [`Watch::start`] under `wrapper` (e.g. setpriv and its options) when not empty.
    fn start_under(wrapper: &[&str], args: &[&str]) -> Watch {
        let mut command = match wrapper.split_first() {
            Some((program, options)) => {
                let mut c = Command::new(program);
                c.args(options).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        let run = Collected::new(
            command
                .arg("watch")
                .args(args)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("the tcpstall binary runs"),
        );
        let mut metrics = None;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = run
                .stderr
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("watch {args:?} did not start within 15 s"));
            if let Some(rest) = line.strip_prefix("tcpstall: metrics at http://") {
                metrics = rest.strip_suffix("/metrics").map(str::to_string);
            }
            if line.starts_with("tcpstall: watching") {
                break;
            }
            assert!(!line.contains("error"), "watch {args:?}: {line}");
        }
        Watch { run, metrics }
    }

    /// Starts `watch` on loopback's `port` with metrics on a free port; the metrics' address.
    fn with_metrics(port: u16) -> (Watch, String) {
        Watch::with_metrics_and(port, &[])
    }

    /// [`Watch::with_metrics`], with `options` added before the filter.
    fn with_metrics_and(port: u16, options: &[&str]) -> (Watch, String) {
        let filter = format!("port {port}");
        let mut args = vec!["-i", "lo", "--metrics", "127.0.0.1:0"];
        args.extend_from_slice(options);
        args.push(&filter);
        let watch = Watch::start(&args);
        let addr = watch
            .metrics
            .clone()
            .expect("the metrics address is announced");
        (watch, addr)
    }

    /// Waits up to `limit` for the run to end by itself; its status, stdout and stderr.
    fn wait(self, limit: Duration) -> (ExitStatus, String, String) {
        let (status, stdout, stderr) = self.run.finish(limit, "watch");
        (status, stdout, stderr.join("\n"))
    }

    /// Sends SIGTERM, as a service manager stops it.
    fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends `signal` (SIGINT: Ctrl-C).
    fn signal(&self, signal: libc::c_int) {
        support::signal(self.run.child.0.id(), signal).expect("signal sent to our child");
    }
}

fn watch_output(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("watch")
        .args(args)
        .output()
        .expect("the tcpstall binary runs")
}

#[test]
fn a_python_server_stall_is_printed_with_its_process_and_fix() {
    require_root("live capture");
    let server = PythonServer::start();
    let filter = format!("tcp port {}", server.port);
    let watch = Watch::start(&["-i", "lo", "--duration", "4", &filter]);
    server.requests(REQUESTS);
    // --duration ends the run by itself.
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}\n{stdout}");
    let pid = server.pid();
    let owner = format!("pid {pid} (python3)");
    let stall = stdout
        .split("\n\n")
        .next()
        .unwrap_or_default()
        .lines()
        .collect::<Vec<_>>();
    let first = stall
        .iter()
        .position(|l| l.contains("nagle_delayed_ack"))
        .unwrap_or_else(|| panic!("no stall printed:\n{stdout}"));
    assert!(stall[first].contains("held: server"), "{stdout}");
    let block = stall[first..].join("\n");
    assert!(block.contains(&owner), "owner {owner} not named:\n{stdout}");
    assert!(block.contains("TCP_NODELAY off"), "{stdout}");
    assert!(
        block.contains(&format!("fix: tcpstall fix {pid} --port {}", server.port)),
        "{stdout}"
    );
    // Its runtime, and the fix in its terms; the live fix says what a script adds.
    assert!(block.contains("runtime: CPython 3."), "{stdout}");
    assert!(block.contains("http.server"), "{stdout}");
    assert!(block.contains("disable_nagle_algorithm = True"), "{stdout}");
    assert!(
        block.contains("add --yes when not at a terminal"),
        "{stdout}"
    );
    // The summary names the process too, with its fix in its runtime's terms.
    assert!(stdout.contains("processes:"), "{stdout}");
    let summary = stdout.split("processes:").nth(1).unwrap_or_default();
    assert!(
        summary.contains("for good, in the program (CPython 3."),
        "{stdout}"
    );
    assert!(stdout.contains("dropped: 0 by the kernel"), "{stdout}");
}

#[test]
fn stalls_and_summary_fit_a_narrow_terminal() {
    require_root("live capture");
    let server = PythonServer::start();
    let filter = format!("tcp port {}", server.port);
    // COLUMNS stands for the terminal's width (72 columns) as a shell exports it.
    let watch = Watch::start_under(
        &["env", "COLUMNS=72"],
        &["-i", "lo", "--duration", "4", &filter],
    );
    server.requests(REQUESTS);
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}\n{stdout}");
    assert!(
        stdout.contains("nagle_delayed_ack"),
        "no stall printed:\n{stdout}"
    );
    let pid = server.pid();
    assert!(
        stdout.contains(&format!("fix: tcpstall fix {pid} --port {}", server.port)),
        "{stdout}"
    );
    for line in stdout.lines() {
        assert!(
            line.chars().count() <= 72,
            "a line wider than the 72 columns of COLUMNS:\n{line}\n\n{stdout}"
        );
    }
    // Broken between words, nothing lost: the summary still names the process.
    assert!(stdout.contains("processes:"), "{stdout}");
}

#[test]
fn json_lines_carry_analyze_keys_and_the_owner() {
    require_root("live capture");
    let server = PythonServer::start();
    let filter = format!("port {}", server.port);
    let watch = Watch::start(&["-i", "lo", "--json", "--duration", "4", &filter]);
    server.requests(REQUESTS);
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (summary, events) = lines.split_last().expect("a summary line");
    assert!(!events.is_empty(), "no events:\n{stdout}");
    for e in events {
        for key in [
            "kind",
            "flow",
            "time",
            "delay_ms",
            "held_side",
            "ack_side",
            "pid",
            "command",
        ] {
            assert!(e.get(key).is_some(), "{key} missing in {e}");
        }
    }
    let pid = u64::from(server.pid());
    let held = events
        .iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack" && e["held_side"] == "server")
        .collect::<Vec<_>>();
    assert!(!held.is_empty(), "{stdout}");
    for e in &held {
        assert_eq!(e["pid"].as_u64(), Some(pid), "{e}");
        assert_eq!(e["command"], "python3", "{e}");
        assert_eq!(e["runtime"]["name"], "CPython", "{e}");
        assert_eq!(e["runtime"]["framework"], "http.server", "{e}");
        assert_eq!(e["ack_side"], "client", "{e}");
        assert!(
            e["delay_ms"]
                .as_f64()
                .is_some_and(|d| d >= support::STALL_MIN_MS),
            "{e}"
        );
    }
    let s = &summary["summary"];
    assert!(s["packets"].as_u64().is_some_and(|p| p > 0), "{summary}");
    assert_eq!(s["dropped"].as_u64(), Some(0), "{summary}");
    assert_eq!(
        s["stalls"]["nagle_delayed_ack"].as_u64(),
        Some(
            events
                .iter()
                .filter(|e| e["kind"] == "nagle_delayed_ack")
                .count() as u64
        ),
        "{summary}"
    );
    assert_eq!(s["owners"][0]["pid"].as_u64(), Some(pid), "{summary}");
    assert_eq!(s["owners"][0]["runtime"]["name"], "CPython", "{summary}");
}

#[test]
fn metrics_are_scraped_by_curl_and_pass_promtool() {
    require_root("live capture");
    let server = PythonServer::start();
    let (watch, addr) = Watch::with_metrics(server.port);
    server.requests(REQUESTS);
    // The counters are brought up to date every half second.
    support::scrape_until(&addr, Duration::from_secs(10), |text| {
        support::series_value(text, STALLS_SERIES) >= 1
    });
    let scrape = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-i"])
        .arg(format!("http://{addr}/metrics"))
        .output()
        .expect("curl runs");
    assert!(scrape.status.success(), "{scrape:?}");
    let response = String::from_utf8(scrape.stdout).expect("UTF-8");
    let (head, body) = response.split_once("\r\n\r\n").expect("HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let stalls = body
        .lines()
        .find(|l| l.starts_with(STALLS_SERIES))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no stall counter:\n{body}"));
    assert!(stalls >= 1, "{body}");
    assert!(
        body.contains("tcpstall_watch_stall_delay_seconds_bucket{kind=\"nagle_delayed_ack\""),
        "{body}"
    );
    for name in [
        "tcpstall_watch_packets_total",
        "tcpstall_watch_kernel_dropped_packets_total",
        "tcpstall_watch_active_flows",
    ] {
        assert!(body.contains(name), "{name} missing:\n{body}");
    }
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus) runs");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(body.as_bytes())
        .expect("to promtool");
    let checked = promtool.wait_with_output().expect("promtool ends");
    assert!(
        checked.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // Only /metrics is served.
    let other = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "10",
        ])
        .arg(format!("http://{addr}/other"))
        .output()
        .expect("curl runs");
    assert_eq!(String::from_utf8_lossy(&other.stdout), "404");
    watch.terminate();
    let (status, _, stderr) = watch.wait(Duration::from_secs(10));
    assert!(status.success(), "SIGTERM ends it with a summary: {stderr}");
}

/// The value of a series in a scrape: a metric's name, with its labels in the exposition's
/// order when it has any.
fn metric(body: &str, name: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{body}"))
}

/// A stall's owner is searched once per flow, by one exact `sock_diag` lookup of the socket
/// and one read of the processes' fds; the connection's later stalls read nothing, and the
/// whole socket tables are never read: the metrics count the work where it is done.
#[test]
fn the_stalls_of_one_connection_cost_one_owner_search() {
    require_root("live capture");
    let server = PythonServer::start();
    let (watch, addr) = Watch::with_metrics(server.port);
    let _connection = server.requests_kept_open(12);
    let stalls_series = STALLS_SERIES;
    let cached_series = "tcpstall_watch_owner_lookups_total{result=\"cached\"}";
    let searched_series = "tcpstall_watch_owner_lookups_total{result=\"searched\"}";
    // The capture counts a stall at once, the printer its owner's lookup once printed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (stalls, cached, searched, body) = loop {
        let body = support::scrape(&addr);
        let stalls = metric(&body, stalls_series);
        let (cached, searched) = (metric(&body, cached_series), metric(&body, searched_series));
        if (stalls >= 5 && cached + searched >= stalls) || Instant::now() > deadline {
            break (stalls, cached, searched, body);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(stalls >= 5, "{stalls} stalls of 12 held requests:\n{body}");
    assert_eq!(searched, 1, "one connection, one search:\n{body}");
    assert!(
        cached + 1 >= stalls,
        "{cached} cached for {stalls} stalls:\n{body}"
    );
    let queries = metric(
        &body,
        "tcpstall_watch_owner_socket_queries_total{via=\"sock_diag\"}",
    );
    assert!(
        (1..=2).contains(&queries),
        "{queries} sock_diag queries:\n{body}"
    );
    assert_eq!(
        metric(
            &body,
            "tcpstall_watch_owner_socket_queries_total{via=\"proc_net_tcp\"}"
        ),
        0,
        "{body}"
    );
    assert!(
        metric(&body, "tcpstall_watch_owner_fd_reads_total{scope=\"all\"}") <= 1,
        "{body}"
    );
    watch.terminate();
    let (status, _, stderr) = watch.wait(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
}

#[test]
fn closed_flows_leave_the_detector_by_the_clock() {
    require_root("live capture");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (watch, addr) = Watch::with_metrics(port);
    const CONNECTIONS: u64 = 3000;
    for _ in 0..CONNECTIONS {
        let client = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        drop(client);
        drop(server);
    }
    // Closed flows retire 2 s after their FIN, by the clock: no packet comes after the
    // last close, and the metric still falls.
    let deadline = Instant::now() + Duration::from_secs(8);
    let (ended, active, body) = loop {
        std::thread::sleep(Duration::from_millis(500));
        let body = support::scrape(&addr);
        let ended = metric(&body, "tcpstall_watch_flows_ended_total");
        let active = metric(&body, "tcpstall_watch_active_flows");
        if active == 0 || Instant::now() > deadline {
            break (ended, active, body);
        }
    };
    assert_eq!(
        active, 0,
        "flows still followed long after their close:\n{body}"
    );
    assert_eq!(ended, CONNECTIONS, "{body}");
    watch.terminate();
    let (status, stdout, _) = watch.wait(Duration::from_secs(10));
    assert!(status.success());
    assert!(
        stdout.contains(&format!("flows: {CONNECTIONS} (0 active)")),
        "{stdout}"
    );
}

#[test]
fn the_lab_server_is_named_during_a_lab_run() {
    require_root("live capture");
    let watch = Watch::start(&["-i", "lo", "--json"]);
    let lab = Command::new(BIN)
        .args(["lab", "--scenario", "http", "--variant", "split", "--json"])
        .args(["--requests", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tcpstall binary runs");
    let lab_pid = u64::from(lab.id());
    let lab = lab.wait_with_output().expect("lab ends");
    assert!(lab.status.success(), "{lab:?}");
    let table: Value = serde_json::from_slice(&lab.stdout).expect("lab JSON");
    assert_eq!(table["rows"][0]["stalled"], true, "{table}");
    // Ctrl-C ends it with the summary line, after what the kernel had captured is read.
    watch.signal(libc::SIGINT);
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|l| l.starts_with("{\"summary\":")),
        "{stdout}"
    );
    let lab_events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["pid"].as_u64() == Some(lab_pid))
        .collect();
    assert!(
        !lab_events.is_empty(),
        "no stall named pid {lab_pid}:\n{stdout}"
    );
    for e in &lab_events {
        assert_eq!(e["command"], "tcpstall", "{e}");
        assert_eq!(e["kind"], "nagle_delayed_ack", "{e}");
        assert_eq!(e["held_side"], "server", "{e}");
    }
    // The same count as the lab's own, from its latencies, on the lab's server port.
    let row = &table["rows"][0];
    let on_port = lab_events
        .iter()
        .filter(|e| e["server_port"] == row["server_port"])
        .count();
    assert_eq!(
        Some(on_port as u64),
        row["stalled_requests"].as_u64(),
        "watch and lab disagree: {row}\n{stdout}"
    );
}

/// A line server that answers each `q` line with 100 bytes ~200 ms later: `cork` sets
/// TCP_CORK on the connection and never clears it (the kernel's probe timer sends each
/// answer), `sleep` waits 200 ms before writing. The wire looks the same.
const TIMER_SERVER: &str = r#"
import socket, sys, time
mode = sys.argv[1]
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
if mode == "cork":
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
buf = b""
while True:
    data = conn.recv(100)
    if not data:
        break
    buf += data
    while b"\n" in buf:
        _, buf = buf.split(b"\n", 1)
        if mode == "sleep":
            time.sleep(0.2)
        conn.send(b"a" * 99 + b"\n")
"#;

/// Runs the timer server in `mode` under `watch --json` and returns the server's pid, the
/// cork-timer events and the claims printed undecided.
fn cork_timer_events(mode: &str) -> (u64, Vec<Value>, Vec<Value>) {
    require_root("live capture");
    let mut child = Command::new("python3")
        .args(["-c", TIMER_SERVER, mode])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let server = KillOnDrop(child);
    let port: u16 = first_line_within(stdout, Duration::from_secs(10))
        .and_then(|l| l.trim().parse().ok())
        .expect("the server prints its port");
    let filter = format!("port {port}");
    let watch = Watch::start(&["-i", "lo", "--json", &filter]);
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    for _ in 0..4 {
        writer.write_all(b"q\n").expect("request");
        let mut line = String::new();
        reader.read_line(&mut line).expect("answer");
        assert_eq!(line.len(), 100);
    }
    watch.terminate();
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    let events = lines
        .iter()
        .filter(|e| e["kind"] == "cork_timer")
        .cloned()
        .collect();
    let undecided = lines
        .iter()
        .filter_map(|e| e.get("undecided"))
        .cloned()
        .collect();
    (u64::from(server.0.id()), events, undecided)
}

#[test]
fn a_cork_timer_gap_is_settled_by_tcp_cork_on_the_socket() {
    // Each answer leaves whole: the wire cannot tell the timer from the writer's 200 ms, the
    // socket's TCP_CORK can.
    let (pid, events, _) = cork_timer_events("cork");
    assert!(!events.is_empty(), "no cork_timer event");
    for e in &events {
        assert_eq!(e["held_side"], "server", "{e}");
        assert_eq!(e["pid"].as_u64(), Some(pid), "{e}");
        assert_eq!(e["cork"], true, "{e}");
        assert_eq!(e["cork_confirmed"], true, "{e}");
    }
}

#[test]
fn a_server_pausing_200ms_is_told_apart_by_tcp_cork_clear() {
    let (pid, events, undecided) = cork_timer_events("sleep");
    assert!(
        events.is_empty(),
        "a pause claimed as the cork timer: {events:?}"
    );
    let named: Vec<&Value> = undecided
        .iter()
        .filter(|e| e["pid"].as_u64() == Some(pid))
        .collect();
    assert!(
        !named.is_empty(),
        "no 200 ms-class claim set apart: {undecided:?}"
    );
    for e in named {
        assert_eq!(e["kind"], "cork_timer", "{e}");
        assert_eq!(e["reason"], "cork_not_a_tail", "{e}");
        assert_eq!(e["cork"], false, "{e}");
        assert_eq!(e["cork_confirmed"], false, "{e}");
    }
}

#[test]
fn a_bad_filter_is_refused_with_exit_2() {
    let out = watch_output(&["-i", "lo", "--duration", "1", "port", "eighty"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad capture filter `port eighty`") && stderr.contains("pcap-filter"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty());
}

#[test]
fn a_missing_interface_is_refused_with_exit_2() {
    let out = watch_output(&["-i", "nosuch0", "--duration", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no network interface named `nosuch0`"),
        "{stderr}"
    );
}

#[test]
fn without_cap_net_raw_the_error_names_it() {
    require_root("switching to nobody with setpriv");
    let out = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", BIN])
        .args(["watch", "-i", "lo", "--duration", "1"])
        .output()
        .expect("setpriv (util-linux) runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("CAP_NET_RAW") && stderr.contains("setcap"),
        "{stderr}"
    );
}

#[test]
fn another_users_socket_is_reported_as_hidden_not_absent() {
    require_root("switching to nobody with setpriv");
    let server = PythonServer::start();
    let filter = format!("port {}", server.port);
    // nobody with CAP_NET_RAW only: it captures, but root's /proc/PID/fd is closed to it.
    let watch = Watch::start_under(
        &[
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--inh-caps=+net_raw",
            "--ambient-caps=+net_raw",
        ],
        &["-i", "lo", "--json", "--duration", "4", &filter],
    );
    // The processes are read again at most once a second: stalls a second apart.
    server.requests(3);
    std::thread::sleep(Duration::from_millis(1300));
    server.requests(3);
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e.get("kind").is_some())
        .collect();
    assert!(!events.is_empty(), "{stdout}");
    // A stall found under a second after the processes were read is deferred (its owner
    // searched at the flow's next stall); once searched, the owner is hidden, never absent.
    for e in &events {
        assert_eq!(e["pid"], Value::Null, "{e}");
        assert!(
            e["owner_hidden"] == true || e["owner_deferred"] == true,
            "{e}"
        );
    }
    assert!(
        events.iter().any(|e| e["owner_hidden"] == true),
        "{events:?}"
    );
}

#[test]
fn a_bad_duration_is_refused() {
    let out = watch_output(&["-i", "lo", "--duration", "-3"]);
    assert_eq!(out.status.code(), Some(2));
    let out = watch_output(&["-i", "lo", "--duration", "0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--duration"), "{stderr}");
}

/// A network namespace with a veth pair in it, made for one test and deleted after.
struct VethNamespace {
    name: String,
}

impl VethNamespace {
    fn create(tag: &str) -> VethNamespace {
        let name = format!("tcpstall-{tag}-{}", std::process::id());
        let ip = |args: &[&str]| {
            let out = Command::new("ip")
                .args(args)
                .output()
                .expect("ip (iproute2) runs");
            assert!(out.status.success(), "ip {args:?}: {out:?}");
        };
        ip(&["netns", "add", &name]);
        let ns = VethNamespace { name };
        ip(&[
            "-n", &ns.name, "link", "add", "va", "type", "veth", "peer", "name", "vb",
        ]);
        for link in ["lo", "va", "vb"] {
            ip(&["-n", &ns.name, "link", "set", link, "up"]);
        }
        ns
    }

    /// Removes the veth pair (both ends go).
    fn delete_veth(&self) {
        let _ = Command::new("ip")
            .args(["-n", &self.name, "link", "del", "va"])
            .status();
    }
}

impl Drop for VethNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

#[test]
fn a_vanished_interface_ends_with_the_summary() {
    require_root("network namespaces and live capture");
    let ns = VethNamespace::create("gone");
    let watch = Watch::start_under(
        &["ip", "netns", "exec", &ns.name],
        &["-i", "va", "--json", "--duration", "20"],
    );
    std::thread::sleep(Duration::from_secs(2));
    ns.delete_veth();
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(10));
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("disappeared"), "{stderr}");
    let summary = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("summary").is_some())
        .unwrap_or_else(|| panic!("no summary line:\n{stdout}"));
    assert!(
        summary["summary"]["duration_s"].as_f64().unwrap_or(0.0) >= 1.5,
        "{summary}"
    );
}

#[test]
fn watching_goes_on_on_the_other_interfaces() {
    require_root("network namespaces and live capture");
    let ns = VethNamespace::create("others");
    let watch = Watch::start_under(
        &["ip", "netns", "exec", &ns.name],
        &["-i", "va", "-i", "lo", "--duration", "4"],
    );
    std::thread::sleep(Duration::from_secs(1));
    ns.delete_veth();
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(15));
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("interface va disappeared"), "{stderr}");
    assert!(stdout.contains("watched va, lo"), "{stdout}");
}

#[test]
fn without_libpcap_the_common_filters_still_work() {
    require_root("live capture");
    let server = PythonServer::start();
    let filter = format!("tcp port {} and host 127.0.0.1", server.port);
    let watch = Watch::start_under(
        &["env", "TCPSTALL_NO_LIBPCAP=1"],
        &["-i", "lo", "--json", "--duration", "4", &filter],
    );
    server.requests(REQUESTS);
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    let stalls = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == "nagle_delayed_ack" && e["held_side"] == "server")
        .count();
    assert!(
        stalls >= REQUESTS - 3,
        "{stalls} stalls:\n{stdout}\n{stderr}"
    );
}

#[test]
fn without_libpcap_a_filter_beyond_the_builtin_says_what_to_do() {
    let out = Command::new("env")
        .args([
            "TCPSTALL_NO_LIBPCAP=1",
            BIN,
            "watch",
            "-i",
            "lo",
            "--duration",
            "1",
        ])
        .arg("ether host 00:11:22:33:44:55")
        .output()
        .expect("the tcpstall binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("TCPSTALL_NO_LIBPCAP: unset it") && stderr.contains("portrange"),
        "{stderr}"
    );
}

/// Keep-alive requests to CPython's http.server (header and body written apart), server and
/// client in one process: `python3 - PORT REQUESTS`.
const SPLIT_SERVER_AND_CLIENT: &str = r#"
import http.client, http.server, sys, threading
port, n = int(sys.argv[1]), int(sys.argv[2])
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "6")
        self.end_headers()
        self.wfile.write(b"hello\n")
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
threading.Thread(target=srv.serve_forever, daemon=True).start()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
for _ in range(n):
    c.request("GET", "/")
    c.getresponse().read()
"#;

#[test]
fn netfilters_log_is_watched_as_an_interface() {
    require_root("network namespaces, nftables and the netfilter log");
    let ns = VethNamespace::create("nflog");
    let port = "8000";
    let nft = |rule: &str| {
        let out = Command::new("ip")
            .args(["netns", "exec", &ns.name, "nft", rule])
            .output()
            .expect("nft (nftables) runs; scripts/install-deps installs it");
        assert!(out.status.success(), "nft {rule}: {out:?}");
    };
    nft("add table inet tcpstall");
    nft("add chain inet tcpstall out { type filter hook output priority 0 ; }");
    nft(&format!(
        "add rule inet tcpstall out tcp sport {port} log group 7"
    ));
    nft(&format!(
        "add rule inet tcpstall out tcp dport {port} log group 7"
    ));
    let watch = Watch::start_under(
        &["ip", "netns", "exec", &ns.name],
        &[
            "-i",
            "nflog:7",
            "--json",
            "--duration",
            "4",
            &format!("port {port}"),
        ],
    );
    let mut client = Command::new("ip")
        .args(["netns", "exec", &ns.name, "python3", "-", port, "8"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    client
        .stdin
        .take()
        .expect("stdin")
        .write_all(SPLIT_SERVER_AND_CLIENT.as_bytes())
        .expect("script written");
    assert!(client.wait().expect("client ends").success());
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(20));
    assert!(status.success(), "{status}: {stderr}");
    let lines: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let stalls = lines
        .iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack" && e["held_side"] == "server")
        .count();
    assert!(
        stalls >= 4,
        "{stalls} stalls from nflog:7:\n{stdout}\n{stderr}"
    );
}

#[test]
fn connections_past_max_flows_are_counted_not_followed() {
    require_root("live capture");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    const FOLLOWED: u64 = 5;
    const CONNECTIONS: u64 = 20;
    let followed = FOLLOWED.to_string();
    let (watch, addr) = Watch::with_metrics_and(port, &["--json", "--max-flows", &followed]);
    // All stay open, each after a small exchange, so the table stays at its bound.
    let mut open = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut client = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        client.write_all(b"ping").expect("request");
        let mut got = [0u8; 4];
        std::io::Read::read_exact(&mut server, &mut got).expect("request read");
        server.write_all(b"pong").expect("answer");
        std::io::Read::read_exact(&mut client, &mut got).expect("answer read");
        open.push((client, server));
    }
    let said = watch.run.stderr_until(
        "the --max-flows bound",
        Duration::from_secs(5),
        "watch's notice of its bound",
    );
    // An exporter's scraper sees them too.
    let body = support::scrape_until(&addr, Duration::from_secs(5), |body| {
        metric(body, "tcpstall_watch_untracked_packets_total") > 0
    });
    assert!(
        metric(&body, "tcpstall_watch_untracked_packets_total") > 0,
        "{body}"
    );
    assert_eq!(
        metric(&body, "tcpstall_watch_active_flows"),
        FOLLOWED,
        "{body}"
    );
    watch.terminate();
    let (status, stdout, stderr) = watch.wait(Duration::from_secs(10));
    assert!(status.success(), "{stderr}");
    drop(open);
    let summary: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("summary").cloned())
        .unwrap_or_else(|| panic!("no summary line in {stdout}"));
    assert_eq!(summary["active_flows"], FOLLOWED, "{summary}\n{said:?}");
    assert_eq!(
        summary["untracked_connections"],
        CONNECTIONS - FOLLOWED,
        "{summary}"
    );
    // Handshake, request and answer, and their ACKs: several packets a connection.
    let segments = summary["untracked_segments"].as_u64().unwrap_or(0);
    assert!(segments >= 4 * (CONNECTIONS - FOLLOWED), "{summary}");
}
