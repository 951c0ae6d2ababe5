//! The kernel's answers on real servers, checked against the capture of the same traffic:
//! nginx (`sendfile on`: headers by writev, the body by sendfile) with `tcp_nodelay off`,
//! whose keep-alive answers after the first wait for the client's delayed ACK, and with
//! `tcp_nodelay on` (set on each connection as it turns keep-alive), which holds nothing;
//! memcached, which sets TCP_NODELAY on its sockets and answers a `get` in one sendmsg. For each,
//! during one run of keep-alive requests: `watch --kernel` against `watch -i lo` on the
//! server's port, `trace -p` on the server's process, and `sockets --all` (the kernel's socket
//! iterator) against `sockets PID` (the process's own descriptors) while the client's
//! connection is open.
//!
//! The tests need root (CAP_BPF + CAP_PERFMON) and a kernel that loads the BPF programs; where
//! it does not they say why and pass without checking.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{Collected, KillOnDrop, Scratch};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Requests per keep-alive connection: the first answer is not held (a new connection's
/// receiver is in quick-ACK mode), a held one after it waits ~40 ms.
const REQUESTS: usize = 10;

/// How long each observer runs: long enough for all three to start one after the other and
/// for the requests to end.
const OBSERVE_S: &str = "8";

/// Skips the calling test (with a message) where the kernel cannot be watched or iterated.
macro_rules! require_kernel {
    () => {
        for probe in [
            &["watch", "--kernel", "--json", "--duration", "0.1"][..],
            &["sockets", "--all", "--source", "kernel", "--json"][..],
        ] {
            if let Some(why) = support::bpf_unavailable(BIN, probe) {
                support::skip(format!("{probe:?} cannot run here: {why}"));
                return;
            }
        }
    };
}

/// A port free on loopback now (the kernel's choice for a socket bound to port 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// nginx serving a 300-byte file on `port` ([`support::nginx_static`]), once it listens.
fn nginx(dir: &Scratch, port: u16, nodelay: &str) -> KillOnDrop {
    std::fs::write(dir.0.join("index.html"), "x".repeat(300)).expect("write index.html");
    let server = support::nginx_static(&dir.0, port, nodelay);
    support::wait_for_socket(port, support::tcp_state::LISTEN, "nginx");
    server
}

/// memcached on `port`, TCP only.
fn memcached(port: u16) -> KillOnDrop {
    let server = Command::new("memcached")
        .args(["-l", "127.0.0.1", "-U", "0", "-u", "nobody", "-p"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(KillOnDrop)
        .expect("memcached must be installed (scripts/install-deps)");
    support::wait_for_socket(port, support::tcp_state::LISTEN, "memcached");
    server
}

/// A client on one keep-alive connection: `script` (Python, with `c` the connected socket and
/// `rd(end)` reading up to a reply ending in `end`) runs its requests, then the client says
/// `done` and keeps the connection open until killed. Returns once it said it.
fn client(port: u16, script: &str) -> KillOnDrop {
    let program = format!(
        "import socket, sys, time\n\
         c = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n\
         def rd(end):\n    b = b''\n    while not b.endswith(end):\n        \
         r = c.recv(65536)\n        if not r: raise SystemExit('closed')\n        b += r\n    \
         return b\n\
         {script}\nprint('done', flush=True)\ntime.sleep(30)\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &program])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().expect("stdout");
    let child = KillOnDrop(child);
    let line = support::first_line_within(stdout, Duration::from_secs(20));
    assert_eq!(line.as_deref().map(str::trim), Some("done"), "the client");
    child
}

/// `tcpstall ARGS`, its stderr read until it says `ready`.
fn observer(args: &[&str], ready: &str) -> Collected {
    let child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tcpstall binary runs");
    let run = Collected::new(child);
    run.stderr_until(ready, Duration::from_secs(20), &format!("{args:?}"));
    run
}

/// Waits for `run` to end by its `--duration`; its stdout.
fn output(run: Collected, what: &str) -> String {
    let (status, stdout, stderr) = run.finish(Duration::from_secs(30), what);
    assert!(status.success(), "{what}: {status}: {stderr:?}");
    stdout
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect()
}

/// What each path said of one server's traffic on `port`.
struct Observed {
    /// `watch --kernel` events with this server port (all kinds).
    kernel: Vec<Value>,
    /// `watch -i lo 'tcp port PORT'` events (a capture keeps no process).
    capture: Vec<Value>,
    /// `trace -p`'s sockets local to `port`.
    traced: Vec<Value>,
    /// `sockets --all`'s established rows of the server's pid on `port`.
    all: Vec<Value>,
    /// `sockets PID --source proc`'s rows, likewise.
    own: Vec<Value>,
}

/// Runs the three observers on `server` (listening on `port`) around `traffic` (which returns
/// a client whose connection stays open) and reads both kinds of socket rows while it is;
/// `minor`: both watches report the holds under the stall threshold too.
fn observe(server: u32, port: u16, minor: bool, traffic: impl FnOnce() -> KillOnDrop) -> Observed {
    let filter = format!("tcp port {port}");
    let watch = |source: &[&str]| {
        let mut args = vec!["watch", "--json", "--duration", OBSERVE_S];
        args.extend_from_slice(source);
        if minor {
            args.push("--minor");
        }
        observer(&args, "tcpstall: watching")
    };
    let pid = server.to_string();
    let kernel = watch(&["--kernel"]);
    let capture = watch(&["-i", "lo", &filter]);
    let trace = observer(
        &["trace", "-p", &pid, "--duration", OBSERVE_S, "--json"],
        "through the kernel's tracepoints",
    );
    let open = traffic();
    let established = |rows: Vec<Value>| -> Vec<Value> {
        rows.iter()
            .filter(|r| {
                r["pid"].as_u64() == Some(u64::from(server))
                    && r["state"] == "ESTABLISHED"
                    && r["local"] == format!("127.0.0.1:{port}").as_str()
            })
            .cloned()
            .collect()
    };
    let all = established(support::sockets_json(
        None,
        &["--all", "--source", "kernel"],
    ));
    let own = established(support::sockets_json(None, &[&pid, "--source", "proc"]));
    drop(open);
    let on_port = |e: &Value| e["server_port"] == port;
    let kernel: Vec<Value> = json_lines(&output(kernel, "watch --kernel"))
        .into_iter()
        .filter(on_port)
        .collect();
    let capture: Vec<Value> = json_lines(&output(capture, "watch -i lo"))
        .into_iter()
        .filter(on_port)
        .collect();
    let report: Value =
        serde_json::from_str(&output(trace, "trace -p")).expect("trace -p prints JSON");
    assert_eq!(report["method"], "tracepoints", "{report}");
    let traced = report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .filter(|s| s["local"] == format!("127.0.0.1:{port}").as_str())
        .cloned()
        .collect();
    Observed {
        kernel,
        capture,
        traced,
        all,
        own,
    }
}

/// The one socket `trace -p` followed on the server's port, its figures said.
fn traced_socket<'a>(seen: &'a Observed, what: &str) -> &'a Value {
    assert_eq!(seen.traced.len(), 1, "{what}: {:?}", seen.traced);
    let s = &seen.traced[0];
    eprintln!(
        "{what}: trace -p: sends {}, write_write_read {}, waits_over_30ms {}, kernel_holds {}, \
         example {}",
        s["sends"], s["write_write_read"], s["waits_over_30ms"], s["kernel_holds"], s["example"]
    );
    s
}

fn stalls(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["kind"] == "nagle_delayed_ack")
        .collect()
}

/// The one established socket of the server both socket readers show, with the same options.
fn assert_one_socket_alike(seen: &Observed, nodelay: bool, what: &str) {
    assert_eq!(seen.all.len(), 1, "{what}: sockets --all: {:?}", seen.all);
    assert_eq!(seen.own.len(), 1, "{what}: sockets PID: {:?}", seen.own);
    let (k, p) = (&seen.all[0], &seen.own[0]);
    for key in ["inode", "remote", "nodelay", "cork", "can_stall"] {
        assert_eq!(k[key], p[key], "{what}: {key}: kernel {k}\nper process {p}");
    }
    assert_eq!(k["nodelay"], nodelay, "{what}: {k}");
}

fn http_gets(n: usize) -> String {
    format!(
        "for _ in range({n}):\n    \
         c.sendall(b'GET /index.html HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); rd(b'x' * 300)\n"
    )
}

#[test]
fn nginx_without_tcp_nodelay_is_held_alike_by_every_path() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let dir = Scratch::new("nginx-off");
    let port = free_port();
    let server = nginx(&dir, port, "off");
    let pid = server.0.id();
    let seen = observe(pid, port, false, || client(port, &http_gets(REQUESTS)));
    let (kernel, capture) = (stalls(&seen.kernel), stalls(&seen.capture));
    let ms = |e: &&Value| e["delay_ms"].as_f64().unwrap_or(0.0);
    eprintln!(
        "nginx tcp_nodelay off, holds in ms: kernel {:?}, capture {:?}",
        kernel.iter().map(ms).collect::<Vec<_>>(),
        capture.iter().map(ms).collect::<Vec<_>>()
    );
    assert!(
        capture.len() >= REQUESTS - 2,
        "the capture sees the answers after the first held: {:?}",
        seen.capture
    );
    assert!(
        kernel.len().abs_diff(capture.len()) <= 1,
        "kernel and capture disagree:\n{:?}\n{:?}",
        seen.kernel,
        seen.capture
    );
    for e in kernel.iter().chain(&capture) {
        assert_eq!(e["held_side"], "server", "{e}");
        assert!(ms(e) >= support::STALL_MIN_MS, "{e}");
    }
    for e in &kernel {
        assert_eq!(e["pid"].as_u64(), Some(u64::from(pid)), "{e}");
        assert_eq!(e["command"], "nginx", "{e}");
    }
    // trace -p: one connection, its answers written in two (writev, sendfile) before the
    // next request is read; every held one among them.
    let s = traced_socket(&seen, "nginx tcp_nodelay off");
    assert_eq!(s["nodelay"], false, "{s:#}");
    let named = s["write_write_read"].as_u64().unwrap_or(0);
    assert!(
        named as usize >= capture.len() && named as usize <= REQUESTS,
        "{} held by the capture: {s:#}",
        capture.len()
    );
    assert!(s["waits_over_30ms"].as_u64() >= Some(1), "{s:#}");
    assert_eq!(
        s["example"]["writes"].as_array().map(Vec::len),
        Some(2),
        "{s:#}"
    );
    // The kernel saw the body held as sendfile returned.
    assert!(s["kernel_holds"].as_u64() >= Some(1), "{s:#}");
    assert_one_socket_alike(&seen, false, "nginx tcp_nodelay off");
}

#[test]
fn nginx_with_tcp_nodelay_holds_nothing_by_any_path() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let dir = Scratch::new("nginx-on");
    let port = free_port();
    let server = nginx(&dir, port, "on");
    let pid = server.0.id();
    let seen = observe(pid, port, false, || client(port, &http_gets(REQUESTS)));
    assert!(seen.capture.is_empty(), "{:?}", seen.capture);
    assert!(seen.kernel.is_empty(), "{:?}", seen.kernel);
    let s = traced_socket(&seen, "nginx tcp_nodelay on");
    // nginx sets TCP_NODELAY as the connection turns keep-alive (ngx_http_set_keepalive):
    // right after the first answer's sendfile, before it waits, and the setsockopt pushes
    // what Nagle held (tcp_push_pending_frames): no answer waits on Nagle.
    assert_eq!(s["write_write_read"], 0, "{s:#}");
    assert_eq!(s["nodelay"], true, "{s:#}");
    assert_eq!(s["waits_over_30ms"], 0, "{s:#}");
    assert_one_socket_alike(&seen, true, "nginx tcp_nodelay on");
}

#[test]
fn memcached_sets_tcp_nodelay_and_holds_nothing_by_any_path() {
    require_kernel!();
    // Host-wide: another test's holds would be this one's.
    let _serial = support::serial();
    let port = free_port();
    let server = memcached(port);
    let pid = server.0.id();
    // A 1400-byte value: the size the lab's memcached model answers in two writes.
    let script = format!(
        "c.sendall(b'set k 0 0 1400\\r\\n' + b'v' * 1400 + b'\\r\\n'); rd(b'STORED\\r\\n')\n\
         for _ in range({REQUESTS}):\n    c.sendall(b'get k\\r\\n'); rd(b'END\\r\\n')\n"
    );
    let seen = observe(pid, port, true, || client(port, &script));
    // Not even a short hold (--minor): TCP_NODELAY leaves nothing for Nagle to hold.
    assert!(seen.capture.is_empty(), "{:?}", seen.capture);
    assert!(seen.kernel.is_empty(), "{:?}", seen.kernel);
    let s = traced_socket(&seen, "memcached");
    assert_eq!(s["nodelay"], true, "{s:#}");
    assert_eq!(s["write_write_read"], 0, "one sendmsg per answer: {s:#}");
    assert!(s["sends"].as_u64() >= Some(REQUESTS as u64 + 1), "{s:#}");
    assert_eq!(s["waits_over_30ms"], 0, "{s:#}");
    assert_one_socket_alike(&seen, true, "memcached");
}
