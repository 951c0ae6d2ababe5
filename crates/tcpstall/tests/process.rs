//! `sockets`, `fix` and `trace` against real processes: a Python keep-alive HTTP server that
//! writes header and body in two calls (tests/fixtures/process/split_server.py), the lab's
//! keep-alive client, and a Python client doing write-write-read or single writes.

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tcpstall::lab::client::{ClientConfig, HttpClient};

mod support;

use support::process::{
    fixture, json_of, json_ok, sockets_json, tcpstall, NobodyBinary, SplitServer, BIN,
};
use support::serial;
use support::KillOnDrop;

/// The lab's keep-alive HTTP client: each request in one write, the response read in full.
struct Client(HttpClient);

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let config = ClientConfig {
            timeout: Duration::from_secs(5),
            ..ClientConfig::default()
        };
        Client(HttpClient::connect(addr, &config).expect("connect"))
    }

    fn local(&self) -> String {
        self.0.local_addr().expect("local address").to_string()
    }

    /// One request/response turn; its duration.
    fn request(&mut self) -> Duration {
        self.0.get("/", false).expect("request answered")
    }

    /// `count` requests; the durations of all but the first two (the first turns of a
    /// connection get quick ACKs before ping-pong mode starts).
    fn steady_requests(&mut self, count: usize) -> Vec<Duration> {
        let all: Vec<Duration> = (0..count).map(|_| self.request()).collect();
        all[2..].to_vec()
    }
}

fn median_ms(times: &[Duration]) -> f64 {
    let mut ms: Vec<f64> = times.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    ms.sort_by(|a, b| a.total_cmp(b));
    ms[ms.len() / 2]
}

fn find<'a>(sockets: &'a [Value], key: &str, value: &str) -> &'a Value {
    sockets
        .iter()
        .find(|s| s[key].as_str() == Some(value))
        .unwrap_or_else(|| panic!("no socket with {key} = {value} in {sockets:#?}"))
}

#[test]
fn fix_switches_nodelay_on_and_new_connections_stop_stalling() {
    let _serial = serial();
    let mut server = SplitServer::start(&[]);
    let pid = server.pid();
    let mut before = Client::connect(server.addr());
    let stalled = before.steady_requests(8);
    assert!(
        median_ms(&stalled) >= support::STALL_MIN_MS,
        "header and body in two writes should stall on the delayed ACK: {stalled:?}"
    );

    let sockets = sockets_json(pid);
    let listener = sockets
        .iter()
        .find(|s| s["listening"] == true)
        .expect("the listener is shown");
    assert_eq!(listener["nodelay"], false);
    assert_eq!(listener["can_stall"], true);
    let accepted = find(&sockets, "remote", &before.local());
    assert_eq!(accepted["state"], "ESTABLISHED");
    assert_eq!(accepted["nodelay"], false);
    assert_eq!(accepted["cork"], false);
    assert_eq!(accepted["can_stall"], true);
    assert!(accepted["fd"].as_i64().is_some_and(|fd| fd >= 0));

    let out = tcpstall(&["fix", &pid.to_string(), "--yes", "--json"]);
    let report = json_ok(&out);
    assert_eq!(report["applied"], true);
    assert_eq!(report["listener_nodelay_inherited"], true);
    let fixed = report["sockets"].as_array().expect("sockets");
    assert!(fixed.len() >= 2, "{report:#}");
    for socket in fixed {
        assert_eq!(socket["nodelay_before"], false, "{socket}");
        assert_eq!(socket["nodelay_after"], true, "{socket}");
    }

    let mut after = Client::connect(server.addr());
    let fast = after.steady_requests(8);
    assert!(
        median_ms(&fast) < 10.0,
        "a connection accepted after fix inherits TCP_NODELAY and should not stall: {fast:?}"
    );
    let fast_old = before.steady_requests(6);
    eprintln!(
        "median request: {:.1} ms before fix, {:.2} ms on a new connection after, {:.2} ms on the fixed one",
        median_ms(&stalled),
        median_ms(&fast),
        median_ms(&fast_old)
    );
    assert!(
        median_ms(&fast_old) < 10.0,
        "the connection fixed live should not stall any more: {fast_old:?}"
    );
    assert!(server.still_running(), "fix must not disturb the server");

    let sockets = sockets_json(pid);
    assert_eq!(find(&sockets, "remote", &after.local())["nodelay"], true);
    assert_eq!(find(&sockets, "remote", &before.local())["nodelay"], true);
    assert_eq!(
        sockets
            .iter()
            .find(|s| s["listening"] == true)
            .expect("listener")["nodelay"],
        true
    );
}

/// `fix PID --undo` puts back what `fix PID` changed: TCP_NODELAY off again on the listener
/// and the connection it was switched on for, the stall back, the record removed; a second
/// undo has nothing to undo. With --delack-max, the cap as it was.
#[test]
fn fix_undo_puts_back_the_options_fix_changed() {
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let pid = server.pid().to_string();
    let mut client = Client::connect(server.addr());
    client.steady_requests(3);
    let nodelay_of = |remote: Option<&str>| -> Value {
        let sockets = sockets_json(server.pid());
        match remote {
            Some(r) => find(&sockets, "remote", r)["nodelay"].clone(),
            None => sockets
                .iter()
                .find(|s| s["listening"] == true)
                .expect("listener")["nodelay"]
                .clone(),
        }
    };
    let local = client.local();
    json_ok(&tcpstall(&["fix", &pid, "--yes", "--json"]));
    assert_eq!(nodelay_of(None), true);
    assert_eq!(nodelay_of(Some(&local)), true);

    let plan = tcpstall(&["fix", &pid, "--undo", "--dry-run"]);
    let text = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(
        plan.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    assert!(text.contains("TCP_NODELAY back off"), "{text}");
    assert_eq!(nodelay_of(None), true, "a dry run changes nothing");

    let undone = json_ok(&tcpstall(&["fix", &pid, "--undo", "--yes", "--json"]));
    assert_eq!(
        undone["undone"].as_array().map(Vec::len),
        Some(2),
        "{undone:#}"
    );
    assert_eq!(nodelay_of(None), false);
    assert_eq!(nodelay_of(Some(&local)), false);
    let stalled = client.steady_requests(6);
    assert!(
        median_ms(&stalled) >= support::STALL_MIN_MS,
        "put back, the connection stalls again: {stalled:?}"
    );
    let again = tcpstall(&["fix", &pid, "--undo", "--yes"]);
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("nothing to undo"), "{stderr}");

    // The delayed-ACK cap, where the kernel has it.
    let delack_of = || find(&sockets_json(server.pid()), "remote", &local)["delack_max_us"].clone();
    let cap_before = delack_of();
    if cap_before.is_null() {
        support::skip("--delack-max: no TCP_DELACK_MAX_US on this kernel");
        return;
    }
    json_ok(&tcpstall(&[
        "fix",
        &pid,
        "--delack-max",
        "5ms",
        "--yes",
        "--json",
    ]));
    assert_ne!(delack_of(), cap_before);
    json_ok(&tcpstall(&["fix", &pid, "--undo", "--yes", "--json"]));
    assert_eq!(delack_of(), cap_before);
}

#[test]
fn fix_without_terminal_or_yes_changes_nothing() {
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let pid = server.pid().to_string();
    let out = tcpstall(&["fix", &pid]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--yes"), "{stderr}");
    let elsewhere = json_ok(&tcpstall(&["fix", &pid, "--port", "1", "--yes", "--json"]));
    assert_eq!(
        elsewhere["sockets"],
        serde_json::json!([]),
        "--port limits the plan"
    );
    assert_eq!(elsewhere["applied"], false);
    let dry = tcpstall(&["fix", &pid, "--dry-run", "--json"]);
    assert_eq!(dry.status.code(), Some(0));
    assert_eq!(json_of(&dry)["applied"], false);
    let sockets = sockets_json(server.pid());
    assert!(
        sockets.iter().all(|s| s["nodelay"] == false),
        "{sockets:#?}"
    );
}

/// `trace --json -- python3 client.py PORT N MODE`: the report and what the client says about
/// its connections (a JSON line on stderr).
fn trace_client(port: u16, requests: usize, mode: &str, extra: &[&str]) -> (Output, Value, Value) {
    let client = fixture("client.py");
    let port = port.to_string();
    let requests = requests.to_string();
    let mut args = vec!["trace", "--json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&[
        "--",
        "python3",
        client.to_str().expect("utf-8 path"),
        &port,
        &requests,
        mode,
    ]);
    let out = tcpstall(&args);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let info_line = stderr
        .lines()
        .find(|l| l.starts_with('['))
        .unwrap_or_else(|| panic!("the client names its connections on stderr: {stderr}"));
    let info: Value = serde_json::from_str(info_line).expect("client info is JSON");
    let report = json_of(&out);
    (out, report, info)
}

fn traced_socket<'a>(report: &'a Value, fd: &Value, local: &Value) -> &'a Value {
    report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .find(|s| s["fd"] == *fd && s["local"] == *local)
        .unwrap_or_else(|| panic!("no traced socket fd {fd} local {local}: {report:#}"))
}

#[test]
fn trace_names_the_socket_that_writes_twice_before_reading() {
    let _serial = serial();
    let server = SplitServer::start(&["--single-write"]);
    let (out, report, info) = trace_client(server.port, 6, "mixed", &["--fail-on-stall"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "--fail-on-stall exits 1 when found"
    );
    assert_eq!(report["exit_status"], 0);
    let remote = server.addr().to_string();
    let single = &info[0];
    let split = &info[1];
    assert_eq!(split["split"], true);

    let guilty = traced_socket(&report, &split["fd"], &split["local"]);
    assert_eq!(guilty["remote"], remote.as_str());
    assert_eq!(guilty["nodelay"], false);
    assert_eq!(guilty["nodelay_ever_set"], false);
    assert_eq!(guilty["sends"], 12);
    assert!(
        guilty["write_write_read"].as_u64().is_some_and(|n| n >= 5),
        "{guilty:#}"
    );
    // The example is the request header (60 B) then the form body (10 B).
    assert_eq!(
        guilty["example"]["writes"],
        serde_json::json!([60, 10]),
        "{guilty:#}"
    );
    assert!(guilty["fix"].as_str().is_some_and(|f| f.contains("writev")));

    let innocent = traced_socket(&report, &single["fd"], &single["local"]);
    assert_eq!(innocent["remote"], remote.as_str());
    assert_eq!(innocent["sends"], 6);
    assert_eq!(innocent["write_write_read"], 0);
    assert_eq!(report["write_write_read"], guilty["write_write_read"]);
}

#[test]
fn trace_follows_every_way_of_waiting_for_the_reply() {
    let _serial = serial();
    let server = SplitServer::start(&["--single-write"]);
    // Blocking recv, select() then recv, epoll_wait then recv; TCP_QUICKACK on the sender does
    // not help its own split writes.
    for mode in [
        "split-blocking",
        "split-select",
        "split-epoll",
        "split-quickack",
    ] {
        let (_, report, info) = trace_client(server.port, 6, mode, &[]);
        let socket = traced_socket(&report, &info[0]["fd"], &info[0]["local"]);
        let found = socket["write_write_read"].as_u64().unwrap_or(0);
        assert!(found >= 5, "{mode}: {socket:#}");
        // The server's delayed ACK holds the body: the wait after it is the stall itself.
        let long = socket["waits_over_30ms"].as_u64().unwrap_or(0);
        assert!(long >= 4, "{mode}: {socket:#}");
        assert_eq!(
            socket["example"]["writes"],
            serde_json::json!([60, 10]),
            "{mode}"
        );
        assert!(socket["example"]["wait_ms"]
            .as_f64()
            .is_some_and(|ms| ms >= support::STALL_MIN_MS));
    }
}

#[test]
fn trace_follows_replies_read_by_another_thread_or_program() {
    let _serial = serial();
    let server = SplitServer::start(&["--single-write"]);
    // A reader thread already blocked in recv when the request goes out: its return ends the
    // burst, so single writes are clean and split writes are counted once per request.
    let (_, report, info) = trace_client(server.port, 6, "single-reader", &[]);
    let socket = traced_socket(&report, &info[0]["fd"], &info[0]["local"]);
    assert_eq!(socket["sends"], 6, "{socket:#}");
    assert_eq!(socket["write_write_read"], 0, "{socket:#}");
    let (_, report, info) = trace_client(server.port, 6, "split-reader", &[]);
    let socket = traced_socket(&report, &info[0]["fd"], &info[0]["local"]);
    let found = socket["write_write_read"].as_u64().unwrap_or(0);
    assert!((5..=6).contains(&found), "one per request: {socket:#}");
    assert_eq!(
        socket["example"]["writes"],
        serde_json::json!([60, 10]),
        "{socket:#}"
    );
    // Each response read by a new program holding the socket as stdin: still one socket.
    let (_, report, info) = trace_client(server.port, 6, "split-exec", &[]);
    let local = &info[0]["local"];
    let same: Vec<&Value> = report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .filter(|s| s["local"] == *local)
        .collect();
    assert_eq!(same.len(), 1, "one connection, one socket: {report:#}");
    let socket = same[0];
    assert_eq!(socket["sends"], 12, "{socket:#}");
    assert!(
        socket["reads"].as_u64().is_some_and(|n| n >= 6),
        "{socket:#}"
    );
    let found = socket["write_write_read"].as_u64().unwrap_or(0);
    assert!((5..=6).contains(&found), "{socket:#}");
}

#[test]
fn trace_follows_sends_through_a_dup_and_sendmmsg() {
    let _serial = serial();
    let server = SplitServer::start(&["--single-write"]);
    // The header through a dup closed before the read (the socket stays open through its
    // other fd), and two messages of one sendmmsg call (two sends for TCP).
    for mode in ["split-dup", "split-sendmmsg"] {
        let (_, report, info) = trace_client(server.port, 6, mode, &[]);
        let socket = traced_socket(&report, &info[0]["fd"], &info[0]["local"]);
        assert_eq!(socket["sends"], 12, "{mode}: {socket:#}");
        let found = socket["write_write_read"].as_u64().unwrap_or(0);
        assert!(found >= 5, "{mode}: {socket:#}");
        assert_eq!(
            socket["example"]["writes"],
            serde_json::json!([60, 10]),
            "{mode}"
        );
    }
}

/// The traced command starts with the signal state it would have untraced (the Rust runtime
/// ignores SIGPIPE in tcpstall; the tracer installs handlers of its own).
#[test]
fn traced_command_gets_the_signal_state_it_would_have_untraced() {
    let script = "grep -E '^Sig(Ign|Blk)' /proc/self/status";
    let untraced = Command::new("sh")
        .args(["-c", script])
        .output()
        .expect("sh runs");
    let dir = std::env::temp_dir().join(format!("tcpstall-trace-sig-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let report = dir.join("report.txt");
    let traced = Command::new(BIN)
        .args(["trace", "-o"])
        .arg(&report)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs");
    assert_eq!(traced.status.code(), Some(0));
    let untraced = String::from_utf8_lossy(&untraced.stdout);
    assert!(untraced.contains("SigIgn"), "{untraced}");
    assert_eq!(String::from_utf8_lossy(&traced.stdout), untraced);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_of_a_program_that_cannot_start_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("tcpstall-trace-exec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let script = dir.join("missing-interpreter.sh");
    std::fs::write(&script, "#!/nonexistent/interpreter\necho never\n").expect("script");
    let not_elf = dir.join("not-a-program");
    std::fs::write(&not_elf, b"\x7fELF but not really").expect("file");
    for path in [&script, &not_elf] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for (path, reason) in [(&script, "interpreter"), (&not_elf, "Exec format error")] {
        let mut child = KillOnDrop(
            Command::new(BIN)
                .args(["trace", "--"])
                .arg(path)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("tcpstall runs"),
        );
        let (status, stderr) = status_and_stderr(&mut child, &format!("trace of {path:?}"));
        assert_eq!(status, Some(2), "{stderr}");
        assert!(
            stderr.contains("cannot run") && stderr.contains(reason),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Traces a client whose writes cannot stall on Nagle; checks the socket was followed (its
/// sends counted) and nothing was blamed.
fn assert_trace_finds_nothing(mode: &str, sends: u64, nodelay: bool) {
    let server = SplitServer::start(&["--single-write"]);
    let (out, report, info) = trace_client(server.port, 6, mode, &["--fail-on-stall"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{mode}: {stderr}");
    let socket = traced_socket(&report, &info[0]["fd"], &info[0]["local"]);
    assert_eq!(
        socket["sends"], sends,
        "the socket was followed: {socket:#}"
    );
    assert!(
        socket["reads"].as_u64().is_some_and(|n| n >= 6),
        "{socket:#}"
    );
    assert_eq!(socket["nodelay"], nodelay);
    assert_eq!(socket["nodelay_ever_set"], nodelay);
    assert_eq!(socket["write_write_read"], 0);
    assert_eq!(report["write_write_read"], 0);
}

#[test]
fn trace_of_a_single_write_client_finds_nothing() {
    let _serial = serial();
    assert_trace_finds_nothing("single", 6, false);
}

#[test]
fn trace_sees_tcp_nodelay_set_and_does_not_blame_split_writes() {
    let _serial = serial();
    assert_trace_finds_nothing("nodelay-split", 12, true);
}

/// State letter and TracerPid of each thread of `pid`; threads that end while being read (a
/// handler thread whose client left) are skipped.
fn thread_states(pid: u32) -> Vec<(char, String)> {
    let mut states = Vec::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/task")).expect("server threads") {
        let path = entry.expect("thread entry").path();
        let (Ok(stat), Ok(status)) = (
            std::fs::read_to_string(path.join("stat")),
            std::fs::read_to_string(path.join("status")),
        ) else {
            continue;
        };
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.trim().chars().next());
        let tracer = status.lines().find_map(|l| l.strip_prefix("TracerPid:"));
        if let (Some(state), Some(tracer)) = (state, tracer) {
            states.push((state, tracer.trim().to_string()));
        }
    }
    assert!(!states.is_empty(), "the server has threads");
    states
}

#[test]
fn trace_attached_to_a_server_finds_its_split_writes_and_detaches() {
    let _serial = serial();
    let mut server = SplitServer::start(&[]);
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    // The load says when it is under way (its third answer): trace attaches mid-run.
    let (running, under_way) = std::sync::mpsc::channel();
    let load = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut client = Client::connect(addr);
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut done = 0;
            while !stop.load(Ordering::SeqCst) && done < 400 && Instant::now() < deadline {
                client.request();
                done += 1;
                if done == 3 {
                    let _ = running.send(());
                }
            }
            done
        })
    };
    under_way
        .recv_timeout(Duration::from_secs(10))
        .expect("the load answered three requests");
    let pid = server.pid().to_string();
    let out = tcpstall(&[
        "trace",
        "-p",
        &pid,
        "--ptrace",
        "--duration",
        "1.5",
        "--json",
    ]);
    stop.store(true, Ordering::SeqCst);
    let served = load.join().expect("load thread");
    let report = json_ok(&out);
    assert_eq!(report["method"], "ptrace_syscall");
    let port = server.port;
    let guilty = report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .find(|s| s["write_write_read"].as_u64().unwrap_or(0) > 0)
        .unwrap_or_else(|| panic!("the server's header+body writes are found: {report:#}"));
    assert!(guilty["local"]
        .as_str()
        .is_some_and(|l| l.ends_with(&format!(":{port}"))));
    assert_eq!(
        guilty["example"]["writes"].as_array().map(Vec::len),
        Some(2)
    );
    assert!(
        served > 5,
        "the load kept running while traced: {served} requests"
    );

    // Detached: no thread stopped or still traced, and the server answers a new client.
    for (state, tracer) in thread_states(server.pid()) {
        assert!(
            state != 't' && state != 'T',
            "a server thread is left stopped ({state})"
        );
        assert_eq!(tracer, "0", "a server thread is still traced");
    }
    let mut fresh = Client::connect(addr);
    fresh.request();
    assert!(server.still_running());
}

#[test]
fn trace_detaches_on_ctrl_c_and_ends_when_the_target_exits() {
    let _serial = serial();
    let mut server = SplitServer::start(&[]);
    let tracer = attach_ptrace(server.pid());
    let mut client = Client::connect(server.addr());
    client.request();
    let (code, stdout) = interrupt(tracer);
    assert_eq!(code, Some(0));
    let report: Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(report["interrupted"], true);
    for (state, tracer_pid) in thread_states(server.pid()) {
        assert!(state != 't' && state != 'T', "left stopped ({state})");
        assert_eq!(tracer_pid, "0");
    }
    client.request();
    assert!(server.still_running());

    // A target that exits while traced ends the trace early, without error.
    let short = Command::new("python3")
        .args(["-c", "import time; time.sleep(0.5)"])
        .spawn()
        .expect("python3 runs");
    let short = KillOnDrop(short);
    let started = Instant::now();
    let out = tcpstall(&[
        "trace",
        "-p",
        &short.0.id().to_string(),
        "--ptrace",
        "--duration",
        "20",
        "--json",
    ]);
    let report = json_ok(&out);
    assert_eq!(report["interrupted"], false);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "trace outlived its target"
    );
}

/// The socket of `sockets --json` output bound to 127.0.0.1:`port`.
fn socket_on(shown: &Value, port: u16) -> &Value {
    let local = format!("127.0.0.1:{port}");
    shown
        .as_array()
        .expect("array")
        .iter()
        .find(|s| s["local"] == local.as_str())
        .unwrap_or_else(|| panic!("{local} is shown from /proc: {shown:#}"))
}

#[test]
fn without_permission_errors_name_cap_sys_ptrace() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        support::skip("needs root to run the target as root and tcpstall as nobody");
        return;
    }
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let pid = server.pid().to_string();
    let binary = NobodyBinary::new();

    let trace = binary.run("", &["trace", "-p", &pid, "--duration", "1"]);
    let stderr = String::from_utf8_lossy(&trace.stderr);
    assert_eq!(trace.status.code(), Some(2), "{stderr}");
    // The tracepoints first: what they need, then ptrace's refusal.
    assert!(stderr.contains("CAP_BPF and CAP_PERFMON"), "{stderr}");
    assert!(stderr.contains("with ptrace instead"), "{stderr}");
    assert!(stderr.contains("CAP_SYS_PTRACE"), "{stderr}");

    let fix = binary.run("", &["fix", &pid, "--yes"]);
    let stderr = String::from_utf8_lossy(&fix.stderr);
    assert_eq!(fix.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CAP_SYS_PTRACE"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");

    // sockets PID cannot tell the process's sockets from the rest of root's (the host's): it
    // shows none as the process's, says why with the capabilities, and exits 2.
    for format in [&["--json"][..], &[][..]] {
        let sockets = binary.run("", &[&["sockets", &pid][..], format].concat());
        let stderr = String::from_utf8_lossy(&sockets.stderr);
        assert_eq!(sockets.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("CAP_SYS_PTRACE"), "{stderr}");
        assert!(stderr.contains("nothing of that process"), "{stderr}");
        assert!(
            sockets.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&sockets.stdout)
        );
    }

    // --all without permission: the namespace's sockets, owners unknown, and why.
    let all = binary.run("", &["sockets", "--all", "--json"]);
    let stderr = String::from_utf8_lossy(&all.stderr);
    assert_eq!(all.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("not fully readable"), "{stderr}");
    let all = json_of(&all);
    let listener = socket_on(&all, server.port);
    assert!(listener["pid"].is_null(), "{listener:#}");

    // The target was not changed.
    assert!(sockets_json(server.pid())
        .iter()
        .all(|s| s["nodelay"] == false));
}

#[test]
fn missing_process_and_missing_command_are_clear_errors() {
    let mut gone = Command::new("true").spawn().expect("true runs");
    let pid = gone.id().to_string();
    gone.wait().expect("reaped");
    for verb in ["sockets", "fix"] {
        let out = tcpstall(&[verb, &pid, "--yes"][..if verb == "fix" { 3 } else { 2 }]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{verb}: {stderr}");
        assert!(
            stderr.contains(&format!("no process with pid {pid}")),
            "{verb}: {stderr}"
        );
    }
    let out = tcpstall(&["trace", "-p", &pid, "--duration", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process"));
    let out = tcpstall(&["trace", "--", "/nonexistent/program"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("no such file"), "{stderr}");
}

#[test]
fn trace_of_a_path_says_what_is_wrong_with_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("tcpstall-trace-path-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plain = dir.join("plain-file");
    std::fs::write(&plain, "echo never\n").expect("file");
    std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let missing = dir.join("missing");
    let in_path = |name: &str| format!("{}/{name}", dir.display());
    // A path with a slash is that path: no PATH is searched, and the reason is the file's.
    for (path, reason) in [
        (missing.to_string_lossy().into_owned(), "no such file"),
        ("./surely-missing-program".to_string(), "no such file"),
        (plain.to_string_lossy().into_owned(), "not executable"),
        (dir.to_string_lossy().into_owned(), "is a directory"),
    ] {
        let out = tcpstall(&["trace", "--", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert!(
            stderr.contains(&format!("cannot run {path:?}: ")) && stderr.contains(reason),
            "{path}: {stderr}"
        );
        assert!(!stderr.contains("PATH"), "{path}: {stderr}");
    }
    // A bare name is looked up in PATH, and one found there but not runnable is named.
    let out = Command::new(BIN)
        .args(["trace", "--", "plain-file"])
        .env("PATH", dir.as_os_str())
        .output()
        .expect("tcpstall runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&in_path("plain-file")) && stderr.contains("not executable"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Targets no capability would open: a thread id, a zombie, a kernel thread. Each error says
/// what the target is instead of asking for CAP_SYS_PTRACE.
#[test]
fn targets_that_are_not_live_processes_are_named() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (_done, wait) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let _ = tx.send(unsafe { libc::gettid() });
        let _ = wait.recv_timeout(Duration::from_secs(30));
    });
    let tid = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("thread id")
        .to_string();
    let me = std::process::id().to_string();
    let trace_tid = ["trace", "-p", &tid, "--duration", "1"];
    for args in [&["sockets", &tid][..], &["fix", &tid, "--yes"], &trace_tid] {
        let out = tcpstall(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("is a thread of process {me}")),
            "{args:?}: {stderr}"
        );
    }
    drop(_done);
    let _ = thread.join();

    // A child that exited and was not reaped yet.
    let mut zombie = Command::new("true").spawn().expect("true runs");
    let pid = zombie.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .contains("State:\tZ")
    {
        assert!(Instant::now() < deadline, "the child never exited");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid_text = pid.to_string();
    let trace_zombie = ["trace", "-p", &pid_text, "--duration", "1"];
    for args in [&["sockets", &pid_text][..], &trace_zombie] {
        let out = tcpstall(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("zombie"), "{args:?}: {stderr}");
        assert!(!stderr.contains("CAP_SYS_PTRACE"), "{args:?}: {stderr}");
    }
    zombie.wait().expect("reaped");

    // kthreadd, where this pid namespace shows it.
    let kthreadd = std::fs::read_to_string("/proc/2/status").unwrap_or_default();
    if kthreadd.contains("Kthread:\t1") {
        let out = tcpstall(&["trace", "-p", "2", "--duration", "1"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("kernel thread"), "{stderr}");
    }
}

#[test]
fn trace_refuses_a_process_that_already_has_a_tracer() {
    let _serial = serial();
    let target = KillOnDrop(Command::new("sleep").arg("20").spawn().expect("sleep runs"));
    let pid = target.0.id().to_string();
    let (_strace, strace_pid) = support::strace_attached(&pid);
    let out = tcpstall(&["trace", "-p", &pid, "--ptrace", "--duration", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("already traced by pid {strace_pid} (strace)")),
        "{stderr}"
    );
}

#[test]
fn trace_leaves_a_job_control_stopped_process_stopped() {
    let _serial = serial();
    let target = KillOnDrop(Command::new("sleep").arg("20").spawn().expect("sleep runs"));
    let pid = target.0.id();
    support::signal(pid, libc::SIGSTOP).expect("SIGSTOP sent");
    let state = || thread_states(pid).first().map(|(s, _)| *s);
    let deadline = Instant::now() + Duration::from_secs(10);
    while state() != Some('T') {
        assert!(Instant::now() < deadline, "SIGSTOP did not stop the target");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid_text = pid.to_string();
    let out = tcpstall(&["trace", "-p", &pid_text, "--ptrace", "--duration", "0.5"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        thread_states(pid),
        vec![('T', "0".to_string())],
        "still stopped, untraced"
    );
    support::signal(pid, libc::SIGCONT).expect("SIGCONT sent");
    let deadline = Instant::now() + Duration::from_secs(10);
    while state() != Some('S') {
        assert!(
            Instant::now() < deadline,
            "SIGCONT did not resume the target"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `trace -- CMD`: a SIGSTOP sent to the command stops it, as untraced, until SIGCONT.
#[test]
fn a_traced_command_obeys_job_control() {
    let _serial = serial();
    let tracer = KillOnDrop(
        Command::new(BIN)
            .args([
                "trace",
                "-o",
                "/dev/null",
                "--duration",
                "10",
                "--",
                "sleep",
                "8",
            ])
            .stdin(Stdio::null())
            .spawn()
            .expect("tcpstall runs"),
    );
    let tracer_pid = tracer.0.id();
    // The command is the tracer's child, once it has exec'd sleep.
    let deadline = Instant::now() + Duration::from_secs(10);
    let child = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{tracer_pid}/task/{tracer_pid}/children"))
                .unwrap_or_default();
        let sleeping = children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|c| c.trim() == "sleep")
            });
        if let Some(pid) = sleeping {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let state = || thread_states(child).first().map(|(s, _)| *s);
    let wait_for = |wanted: &[char], what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !state().is_some_and(|s| wanted.contains(&s)) {
            assert!(Instant::now() < deadline, "{what}: state {:?}", state());
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // Our tracer's child.
    support::signal(child, libc::SIGSTOP).expect("SIGSTOP sent");
    wait_for(&['t', 'T'], "SIGSTOP did not stop the traced command");
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        state().is_some_and(|s| s == 't' || s == 'T'),
        "the tracer resumed a stopped command: {:?}",
        state()
    );
    support::signal(child, libc::SIGCONT).expect("SIGCONT sent");
    wait_for(&['S', 'R'], "SIGCONT did not resume the traced command");
}

/// `tcpstall trace ARGS` run by sh with standard output redirected by `redirect` (`>&-`...):
/// status and standard error.
fn trace_with_stdout(redirect: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$0\" trace \"$@\" {redirect}"))
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("sh runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A report with nowhere to go is an error before anything runs: standard output closed
/// (`>&-`), or open for reading only; with `--output` it is not needed.
#[test]
fn trace_with_standard_output_closed_says_so() {
    let dir = std::env::temp_dir().join(format!("tcpstall-trace-stdout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let ran = dir.join("ran");
    let ran_text = ran.to_str().expect("UTF-8 path");
    for (redirect, says) in [
        (">&-", "standard output is closed"),
        ("1</dev/null", "standard output is open for reading only"),
    ] {
        let (status, stderr) = trace_with_stdout(redirect, &["--", "touch", ran_text]);
        assert_eq!(status, Some(2), "{redirect}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("--output FILE"),
            "{redirect}: {stderr}"
        );
        assert!(!ran.exists(), "{redirect}: the command ran");
    }
    let report = dir.join("report.txt");
    let report_text = report.to_str().expect("UTF-8 path");
    let (status, stderr) = trace_with_stdout(">&-", &["-o", report_text, "--", "true"]);
    assert_eq!(status, Some(0), "{stderr}");
    let written = std::fs::read_to_string(&report).expect("report written");
    assert!(written.starts_with("traced true for "), "{written}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that closed the pipe before the report came (`| head -0`) took what it wanted:
/// tcpstall ends quietly with 0, as every verb does.
#[test]
fn trace_into_a_pipe_closed_by_its_reader_ends_quietly() {
    let mut child = KillOnDrop(
        Command::new(BIN)
            .args(["trace", "--", "sleep", "0.3"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("tcpstall runs"),
    );
    drop(child.0.stdout.take());
    let (status, stderr) = status_and_stderr(&mut child, "trace into a closed pipe");
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(stderr, "");
}

/// Waits at most 20 s for `child` (`what` names it if it does not end): its exit code and
/// what it wrote on its piped standard error.
fn status_and_stderr(child: &mut KillOnDrop, what: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "{what} did not end");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut err) = child.0.stderr.take() {
        err.read_to_string(&mut stderr).expect("stderr");
    }
    (status.code(), stderr)
}

/// `tcpstall trace -p PID --ptrace --json` for 30 s at most, once attached.
fn attach_ptrace(pid: u32) -> KillOnDrop {
    let tracer = Command::new(BIN)
        .args(["trace", "-p", &pid.to_string(), "--ptrace"])
        .args(["--duration", "30", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("tcpstall runs");
    // Attached: the kernel names the tracer in the target's status (`TracerPid`).
    let deadline = Instant::now() + Duration::from_secs(10);
    let tracer_pid = tracer.id().to_string();
    while std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("TracerPid:").map(|v| v.trim().to_string()))
        })
        != Some(tracer_pid.clone())
    {
        assert!(Instant::now() < deadline, "trace -p {pid} did not attach");
        std::thread::sleep(Duration::from_millis(10));
    }
    KillOnDrop(tracer)
}

/// Sends SIGINT to a running `trace` and waits (at most 10 s) for it to end; its exit code
/// and stdout.
fn interrupt(mut tracer: KillOnDrop) -> (Option<i32>, String) {
    support::interrupt(&tracer.0);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = tracer.0.try_wait().expect("wait tracer") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "trace ignored SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stdout = String::new();
    if let Some(mut out) = tracer.0.stdout.take() {
        out.read_to_string(&mut stdout).expect("report");
    }
    (status.code(), stdout)
}

#[test]
fn trace_of_a_command_times_the_hold_not_the_idle_after_it() {
    let _serial = serial();
    // The split server as the traced command: it prints its port on the standard output it
    // shares with tcpstall, so the report goes to a file.
    let report_file =
        std::env::temp_dir().join(format!("tcpstall-trace-idle-{}.json", std::process::id()));
    let mut command = Command::new(BIN);
    command.args([
        "trace",
        "--ptrace",
        "--json",
        "--duration",
        "30",
        "--output",
    ]);
    command.arg(&report_file);
    command
        .args(["--", "python3"])
        .arg(fixture("split_server.py"));
    let (tracer, port) = support::spawn_printing_port(&mut command, "trace -- split_server.py");
    let clients = support::process::idle_clients(SocketAddr::from(([127, 0, 0, 1], port)), 6);
    assert_eq!(interrupt(tracer).0, Some(0));
    let text = std::fs::read_to_string(&report_file).expect("the report file");
    let _ = std::fs::remove_file(&report_file);
    let report: Value = serde_json::from_str(&text).expect("JSON report");
    assert_eq!(report["method"], "seccomp");
    support::process::assert_holds_told_from_idle(&report, &clients);
}

#[test]
fn trace_attached_with_ptrace_times_the_hold_not_the_idle_after_it() {
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let tracer = attach_ptrace(server.pid());
    let clients = support::process::idle_clients(server.addr(), 6);
    let (code, stdout) = interrupt(tracer);
    assert_eq!(code, Some(0));
    let report: Value = serde_json::from_str(&stdout).expect("JSON report");
    assert_eq!(report["method"], "ptrace_syscall");
    support::process::assert_holds_told_from_idle(&report, &clients);
}

/// A client process holding one idle connection to `addr` (python3, killed when dropped):
/// it prints a line once connected.
fn connected_client(addr: SocketAddr) -> KillOnDrop {
    let script = format!(
        "import socket, time\n\
         s = socket.create_connection(('{}', {}))\n\
         print('connected', flush=True)\n\
         time.sleep(600)\n",
        addr.ip(),
        addr.port()
    );
    let (child, line) = support::spawn_printing_line(
        Command::new("python3").args(["-c", &script]),
        "the python3 client",
    );
    assert_eq!(line, "connected");
    child
}

/// `fix PID --undo` of a client's socket given TCP_NODELAY and then a delayed-ACK cap says
/// both options it puts back, and no word of listeners: the client has none.
#[test]
fn fix_undo_lists_every_option_it_puts_back_and_nothing_else() {
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let client = connected_client(server.addr());
    let pid = client.0.id().to_string();
    let delack_known = sockets_json(client.0.id())
        .iter()
        .any(|s| !s["delack_max_us"].is_null());
    if !delack_known {
        support::skip("no TCP_DELACK_MAX_US on this kernel");
        return;
    }
    // TCP_NODELAY, then the delayed-ACK cap, on the same socket.
    for options in [&[][..], &["--delack-max", "5ms"][..]] {
        let args = [&["fix", pid.as_str(), "--yes", "--json"][..], options].concat();
        json_ok(&tcpstall(&args));
    }
    let plan = tcpstall(&["fix", &pid, "--undo", "--dry-run"]);
    let text = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(plan.status.code(), Some(0), "{text}");
    assert!(text.contains("TCP_NODELAY back off"), "{text}");
    assert!(text.contains("TCP_DELACK_MAX_US back to "), "{text}");
    let undone = tcpstall(&["fix", &pid, "--undo", "--yes"]);
    let text = String::from_utf8_lossy(&undone.stdout);
    assert_eq!(undone.status.code(), Some(0), "{text}");
    assert!(text.contains("TCP_DELACK_MAX_US back to "), "{text}");
    assert!(text.contains("done: 1 socket put back"), "{text}");
    assert!(!text.contains("listener"), "{text}");
}

/// The records of processes gone (no such pid, or the pid taken again: another start time)
/// are removed when `fix` writes a record or `--undo` reads one; a running process's record
/// stays.
#[test]
fn fix_records_of_processes_gone_are_removed_and_live_ones_kept() {
    support::require_root("the records of root live in /run/tcpstall/fixes");
    let _serial = serial();
    let dir = std::path::Path::new("/run/tcpstall/fixes");
    std::fs::create_dir_all(dir).expect("the records' directory");
    let mut exited = Command::new("true").spawn().expect("true runs");
    let gone_pid = exited.id();
    exited.wait().expect("true ends");
    let gone = dir.join(format!("pid{gone_pid}-start1.json"));
    // This test's own pid with a start time it never had: the pid taken again.
    let reused = dir.join(format!("pid{}-start1.json", std::process::id()));
    let stale = r#"{"pid": 1, "start_time": 1, "sockets": []}"#;
    std::fs::write(&gone, stale).expect("a stale record");
    std::fs::write(&reused, stale).expect("a stale record");

    let server = SplitServer::start(&[]);
    let pid = server.pid().to_string();
    let _client = connected_client(server.addr());
    let out = tcpstall(&["fix", &pid, "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!gone.exists(), "{stderr}");
    assert!(!reused.exists(), "{stderr}");
    // At least these two (records left by other runs may go with them).
    assert!(
        stderr.contains(" fix records of processes no longer running"),
        "{stderr}"
    );
    let live: Vec<_> = std::fs::read_dir(dir)
        .expect("the records")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("pid{pid}-start"))
        })
        .collect();
    assert_eq!(live.len(), 1, "the server's record is kept");

    std::fs::write(&gone, stale).expect("a stale record");
    let out = tcpstall(&["fix", &pid, "--undo", "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!gone.exists(), "{stderr}");
    assert!(
        stderr.contains(" of processes no longer running"),
        "{stderr}"
    );
}
