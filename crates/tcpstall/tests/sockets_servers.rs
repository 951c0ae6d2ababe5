//! `sockets` against real servers that set TCP_NODELAY after `accept()` (redis-server, nginx
//! with `tcp_nodelay on`), each with a client connected: their listeners keep Nagle on, yet
//! they are not servers that can stall, and the advice is said once per process, not once per
//! listening address.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::KillOnDrop;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// A client connected to `port` within 10 s (the server may still be starting).
fn connect(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .expect("timeout");
                return stream;
            }
            Err(err) => assert!(
                Instant::now() < deadline,
                "nothing listens on {port}: {err}"
            ),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `tcpstall sockets ARGS`: (status, stdout, stderr).
fn sockets(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN)
        .arg("sockets")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The listeners on `port` in `sockets ARGS --json`, which must succeed.
fn listeners(args: &[&str], port: u16) -> Vec<Value> {
    let mut all = args.to_vec();
    all.push("--json");
    let (status, stdout, stderr) = sockets(&all);
    assert_eq!(status, Some(0), "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("sockets JSON");
    let suffix = format!(":{port}");
    let found: Vec<Value> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["state"] == "LISTEN" && r["local"].as_str().unwrap_or("").ends_with(&suffix))
        .cloned()
        .collect();
    assert!(!found.is_empty(), "no listener on {port}: {rows:#}");
    found
}

/// Whether `sockets PID --json` shows the connection `pid` accepted on `port` with
/// TCP_NODELAY on.
fn accepted_nodelay(pid: &str, port: u16) -> bool {
    let (_, stdout, _) = sockets(&[pid, "--json"]);
    let rows: Value = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let suffix = format!(":{port}");
    rows.as_array().into_iter().flatten().any(|r| {
        r["state"] == "ESTABLISHED"
            && r["local"].as_str().unwrap_or("").ends_with(&suffix)
            && r["nodelay"] == true
    })
}

/// Every listener on `port` has Nagle on and is judged unable to stall, with the reason; the
/// accepted connection shows TCP_NODELAY on.
fn assert_settled(args: &[&str], port: u16) {
    for l in listeners(args, port) {
        assert_eq!(l["nodelay"], false, "{l:#}");
        assert_eq!(l["can_stall"], false, "{args:?}: {l:#}");
        let reason = l["can_stall_reason"].as_str().unwrap_or_default();
        assert!(reason.contains("TCP_NODELAY after accept()"), "{l:#}");
    }
}

/// The text: no "can stall" for the server, one line for it saying no fix is needed.
fn assert_said_once(pid: u32, args: &[&str]) {
    let (status, stdout, stderr) = sockets(args);
    assert_eq!(status, Some(0), "{stderr}");
    let about: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(&format!("pid {pid} listening")))
        .collect();
    assert_eq!(
        about.len(),
        1,
        "{args:?}: one line for the server:\n{stdout}"
    );
    assert!(about[0].starts_with("no fix needed:"), "{stdout}");
    assert!(
        !stdout.contains(&format!("can stall: pid {pid} ")),
        "{stdout}"
    );
}

#[test]
fn redis_setting_nodelay_after_accept_is_not_told_to_fix_its_listener() {
    support::require_root("reads redis-server's sockets");
    let port = free_port();
    let redis = KillOnDrop(
        Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "::1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/install-deps)"),
    );
    let mut client = connect(port);
    client.write_all(b"PING\r\n").expect("PING");
    let mut pong = [0u8; 7];
    client.read_exact(&mut pong).expect("PONG");
    let pid = redis.0.id();
    let pid_text = pid.to_string();

    assert_settled(&[&pid_text], port);
    assert_settled(
        &["--all", "--source", "proc", "--port", &port.to_string()],
        port,
    );
    // Two listening addresses (127.0.0.1, ::1), one server: one line.
    assert_eq!(listeners(&[&pid_text], port).len(), 2);
    assert_said_once(pid, &[&pid_text]);
    assert_said_once(pid, &["--all", "--source", "proc"]);
    if support::bpf_unavailable(BIN, &["sockets", "--all", "--source", "kernel", "--json"])
        .is_none()
    {
        assert_settled(&["--all", "--port", &port.to_string()], port);
        assert_said_once(pid, &["--all"]);
    }
}

#[test]
fn nginx_with_tcp_nodelay_on_is_not_told_to_fix_its_listener() {
    support::require_root("reads nginx's sockets");
    let root = std::env::temp_dir().join(format!("tcpstall-sockets-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&root).expect("scratch dir");
    std::fs::write(root.join("index.html"), "hello\n").expect("index.html");
    let port = free_port();
    let nginx = support::nginx_static(&root, port, "on");
    // nginx sets TCP_NODELAY when a connection goes keep-alive: one answered request.
    let mut client = connect(port);
    client
        .write_all(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&answer).contains("hello") {
        let n = client.read(&mut buf).expect("answer");
        assert!(n > 0, "nginx closed the connection");
        answer.extend_from_slice(&buf[..n]);
    }
    let pid = nginx.0.id();
    let pid_text = pid.to_string();
    // nginx sets it after writing the answer the client has read: awaited.
    assert!(
        support::wait_until(Duration::from_secs(10), || accepted_nodelay(
            &pid_text, port
        )),
        "nginx's connection never showed TCP_NODELAY on"
    );
    assert_settled(&[&pid_text], port);
    assert_settled(
        &["--all", "--source", "proc", "--port", &port.to_string()],
        port,
    );
    assert_said_once(pid, &[&pid_text]);
    drop(client);
    drop(nginx);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_server_leaving_nagle_on_after_accept_is_still_told() {
    support::require_root("reads python3's sockets");
    let mut command = Command::new("python3");
    command.arg(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/process/split_server.py"),
    );
    let (server, port) = support::spawn_printing_port(&mut command, "the python3 split server");
    let _client = connect(port);
    // The server has taken the connection once it holds a second socket (the listener and
    // the accepted one).
    let sockets_held = || {
        std::fs::read_dir(format!("/proc/{}/fd", server.0.id()))
            .into_iter()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    };
    assert!(
        support::wait_until(Duration::from_secs(10), || sockets_held() >= 2),
        "the server did not accept within 10 s"
    );
    let pid_text = server.0.id().to_string();
    for l in listeners(&[&pid_text], port) {
        assert_eq!(l["can_stall"], true, "{l:#}");
        assert!(l["can_stall_reason"].is_null(), "{l:#}");
    }
    let (_, stdout, _) = sockets(&[&pid_text]);
    assert!(
        stdout.contains(&format!(
            "can stall: pid {pid_text} listening with Nagle on"
        )),
        "{stdout}"
    );
}

/// `sockets --all` leaves out the TIME_WAIT sockets no process holds, as `ss` does, and says
/// how many; `--time-wait` shows them.
#[test]
fn time_wait_sockets_are_counted_not_listed_unless_asked() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    let client = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let (server, _) = listener.accept().expect("accept");
    let local = client.local_addr().expect("address").to_string();
    // The client closes first: its end waits out 2 MSL in TIME_WAIT, held by no process.
    drop(client);
    let mut rest = Vec::new();
    let mut server = server;
    server.read_to_end(&mut rest).expect("the client's FIN");
    drop(server);
    let client_port: u16 = local
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    support::wait_for_socket(
        client_port,
        support::tcp_state::TIME_WAIT,
        "the client's end",
    );
    let time_wait = |rows: &Value| {
        rows.as_array()
            .expect("rows")
            .iter()
            .any(|r| r["local"] == local.as_str() && r["state"] == "TIME_WAIT")
    };
    // Each process in turn: a socket no process holds is not found at all.
    let (status, stdout, stderr) = sockets(&["--all", "--source", "proc", "--json"]);
    assert_eq!(status, Some(0), "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("JSON");
    assert!(!time_wait(&rows), "proc: {local} TIME_WAIT listed");
    // The kernel's iterator sees every socket of the namespace.
    if support::bpf_unavailable(BIN, &["sockets", "--all", "--source", "kernel", "--json"])
        .is_some()
    {
        support::skip("the kernel's iterator: it cannot run here");
        return;
    }
    let source = "kernel";
    let (status, stdout, stderr) = sockets(&["--all", "--source", source, "--json"]);
    assert_eq!(status, Some(0), "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("JSON");
    assert!(!time_wait(&rows), "{source}: {local} TIME_WAIT listed");
    assert!(stderr.contains("TIME_WAIT socket"), "{source}: {stderr}");
    assert!(stderr.contains("--time-wait shows them"), "{stderr}");
    let (status, stdout, stderr) = sockets(&["--all", "--source", source, "--time-wait", "--json"]);
    assert_eq!(status, Some(0), "{stderr}");
    let rows: Value = serde_json::from_str(&stdout).expect("JSON");
    assert!(
        time_wait(&rows),
        "{source} --time-wait: {local} not listed: {rows:#}"
    );
}
