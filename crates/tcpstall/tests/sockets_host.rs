//! `tcpstall sockets --all` from the kernel's socket iterator (BPF `iter/tcp`): sockets opened
//! with and without TCP_NODELAY and TCP_CORK, a write Nagle holds (its peer's ACKs dropped by
//! a netfilter rule, so the hold lasts), real servers (redis-server sets TCP_NODELAY on its
//! clients, Python's http.server does not), and the same sockets read per process.
//!
//! Each test runs in a network namespace of its own (the iterator reads the namespace tcpstall
//! runs in). The live tests need root (CAP_BPF + CAP_PERFMON) and a kernel that loads the
//! iterator; where it does not they say why and pass without checking.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{command_in, spawn_printing_port, KillOnDrop, Netns};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

macro_rules! require_kernel {
    () => {
        let probe = ["sockets", "--all", "--source", "kernel", "--json"];
        if let Some(why) = support::bpf_unavailable(BIN, &probe) {
            support::skip(format!(
                "the kernel's socket iterator cannot run here: {why}"
            ));
            return;
        }
    };
}

/// `tcpstall sockets ARGS --json` inside `ns`: the rows.
fn sockets_in(ns: &Netns, args: &[&str]) -> Vec<Value> {
    support::sockets_json(Some(&ns.0), args)
}

fn port_of(addr: &Value) -> u16 {
    addr.as_str()
        .and_then(|a| a.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(0)
}

fn row_with_local_port(rows: &[Value], port: u16) -> &Value {
    rows.iter()
        .find(|r| port_of(&r["local"]) == port)
        .unwrap_or_else(|| panic!("no socket with local port {port}: {rows:?}"))
}

/// A Python process in the namespace holding: a listener (Nagle on), a connection whose
/// client sets TCP_NODELAY, one whose client sets TCP_CORK, and a plain one that, on `go`,
/// writes 10 bytes twice (the second waits for the ACK of the first: Nagle).
struct Holder {
    child: KillOnDrop,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    /// listen, nodelay client, cork client, plain client (local ports).
    ports: [u16; 4],
}

const HOLDER: &str = r#"
import socket, sys, json
L = socket.socket(); L.bind(("127.0.0.1", 0)); L.listen(8)
lp = L.getsockname()[1]
def pair(opt):
    c = socket.socket()
    if opt: c.setsockopt(socket.IPPROTO_TCP, opt, 1)
    c.connect(("127.0.0.1", lp)); s, _ = L.accept()
    return c, s
nd, nds = pair(socket.TCP_NODELAY)
ck, cks = pair(socket.TCP_CORK)
pl, pls = pair(0)
print(json.dumps([lp, nd.getsockname()[1], ck.getsockname()[1], pl.getsockname()[1]]), flush=True)
sys.stdin.readline()
pl.send(b"a" * 10); pl.send(b"b" * 10)
print("written", flush=True)
sys.stdin.readline()
"#;

impl Holder {
    fn start(ns: &Netns) -> Holder {
        let mut child = command_in(Some(&ns.0), "python3")
            .args(["-c", HOLDER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the ports");
        let ports: Vec<u16> = serde_json::from_str(&line).expect("JSON ports");
        Holder {
            child: KillOnDrop(child),
            stdin,
            stdout,
            ports: ports.try_into().expect("four ports"),
        }
    }

    /// Makes the plain client write twice; returns once it has.
    fn write_twice(&mut self) {
        writeln!(self.stdin, "go").expect("go");
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("written");
        assert_eq!(line.trim(), "written");
    }

    fn pid(&self) -> u64 {
        u64::from(self.child.0.id())
    }
}

#[test]
fn options_and_a_nagle_hold_show_per_socket_with_their_owner() {
    require_kernel!();
    let ns = Netns::new("sk");
    // No tail-loss probe: it would send the held bytes (tcp_send_loss_probe ignores Nagle).
    ns.run(&["sysctl", "-qw", "net.ipv4.tcp_early_retrans=0"], true);
    let mut holder = Holder::start(&ns);
    let [listen, nodelay, cork, plain] = holder.ports;
    // The server's ACKs are dropped: the plain client's first segment stays unacknowledged.
    ns.run(&["nft", "add", "table", "inet", "tcpstall"], true);
    ns.run(
        &[
            "nft",
            "add chain inet tcpstall out { type filter hook output priority 0; }",
        ],
        true,
    );
    let rule = format!("add rule inet tcpstall out tcp sport {listen} tcp dport {plain} drop");
    ns.run(&["nft", &rule], true);
    holder.write_twice();
    let rows = sockets_in(&ns, &["--all"]);
    let pid = holder.pid();
    for port in [listen, nodelay, cork, plain] {
        let row = row_with_local_port(&rows, port);
        assert_eq!(row["pid"].as_u64(), Some(pid), "{row}");
        assert_eq!(row["command"], "python3", "{row}");
        assert!(row["kernel"].is_object(), "{row}");
    }
    let flags = |port| {
        let row = row_with_local_port(&rows, port);
        (row["nodelay"].clone(), row["cork"].clone())
    };
    assert_eq!(flags(listen), (false.into(), false.into()));
    assert_eq!(flags(nodelay), (true.into(), false.into()));
    assert_eq!(flags(cork), (false.into(), true.into()));
    assert_eq!(flags(plain), (false.into(), false.into()));
    assert_eq!(row_with_local_port(&rows, listen)["state"], "LISTEN");
    let held = row_with_local_port(&rows, plain);
    assert_eq!(
        held["kernel"]["unsent"], 10,
        "the second write waits: {held}"
    );
    assert!(held["kernel"]["packets_out"].as_u64() >= Some(1), "{held}");
    assert_eq!(held["held_now"], true, "{held}");
    // The connections that wrote nothing hold nothing.
    assert_eq!(row_with_local_port(&rows, nodelay)["kernel"]["unsent"], 0);
    // The text table says it too.
    let out = command_in(Some(&ns.0), BIN)
        .args(["sockets", "--all", "--port", &plain.to_string()])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("held now: pid {pid}")) && l.contains("Nagle")),
        "{text}"
    );
}

#[test]
fn the_kernels_rows_agree_with_each_processs_own() {
    require_kernel!();
    let ns = Netns::new("sa");
    let holder = Holder::start(&ns);
    let pid = holder.pid().to_string();
    let kernel = sockets_in(&ns, &[&pid, "--source", "kernel"]);
    let per_process = sockets_in(&ns, &[&pid, "--source", "proc"]);
    assert_eq!(
        kernel.len(),
        per_process.len(),
        "{kernel:?}\n{per_process:?}"
    );
    assert_eq!(
        kernel.len(),
        7,
        "a listener and three connections, both ends"
    );
    for p in &per_process {
        let k = kernel
            .iter()
            .find(|k| k["inode"] == p["inode"])
            .unwrap_or_else(|| panic!("{p} missing from the kernel's rows"));
        for key in [
            "pid",
            "fd",
            "local",
            "remote",
            "state",
            "nodelay",
            "cork",
            "quickack",
            "holders",
            "delack_max_us",
            "can_stall",
        ] {
            assert_eq!(k[key], p[key], "{key}: kernel {k}\nper process {p}");
        }
        if p["state"] != "LISTEN" {
            for key in [
                "unacked",
                "notsent_bytes",
                "snd_mss",
                "data_segs_out",
                "data_segs_in",
            ] {
                assert_eq!(
                    k["tcp_info"][key], p["tcp_info"][key],
                    "{key}: kernel {k}\nper process {p}"
                );
            }
        }
    }
}

/// A client that connects to `port` in `ns`, sends `request` and keeps the connection open
/// until killed; ready once it printed its answer's first line.
fn client(ns: &Netns, port: u16, request: &str) -> KillOnDrop {
    let script = format!(
        "import socket,sys,time\nc=socket.create_connection(('127.0.0.1',{port}))\n\
         c.sendall({request:?}.encode())\nprint(c.recv(100).decode().splitlines()[0],flush=True)\n\
         time.sleep(60)\n"
    );
    let (child, line) = support::spawn_printing_line(
        command_in(Some(&ns.0), "python3").args(["-c", &script]),
        "the python3 client",
    );
    assert!(!line.is_empty(), "no answer on {port}");
    child
}

#[test]
fn real_servers_show_their_own_choices() {
    require_kernel!();
    let ns = Netns::new("sr");
    let redis_port = 16_500 + (std::process::id() % 1000) as u16;
    let redis = command_in(Some(&ns.0), "redis-server")
        .args(["--bind", "127.0.0.1", "--appendonly", "no"])
        .args(["--save", "", "--port"])
        .arg(redis_port.to_string())
        .stdout(Stdio::null())
        .spawn()
        .map(KillOnDrop)
        .expect("redis-server runs (scripts/install-deps)");
    let deadline = Instant::now() + Duration::from_secs(10);
    let listening = || {
        sockets_in(&ns, &["--all"])
            .iter()
            .any(|r| port_of(&r["local"]) == redis_port && r["state"] == "LISTEN")
    };
    while !listening() {
        assert!(Instant::now() < deadline, "redis-server does not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    let http = "import http.server as h\nh.SimpleHTTPRequestHandler.protocol_version='HTTP/1.1'\n\
                s=h.HTTPServer(('127.0.0.1',0),h.SimpleHTTPRequestHandler)\n\
                print(s.server_address[1],flush=True)\ns.serve_forever()\n";
    let (http_server, http_port) = spawn_printing_port(
        command_in(Some(&ns.0), "python3").args(["-c", http]),
        "python3 http.server",
    );
    let _redis_client = client(&ns, redis_port, "PING\r\n");
    // HTTP/1.1 keep-alive: the server answers, then keeps the connection.
    let _http_client = client(&ns, http_port, "HEAD / HTTP/1.1\r\nHost: x\r\n\r\n");
    let rows = sockets_in(&ns, &["--all"]);
    let served = |port: u16, pid: u32| {
        rows.iter()
            .filter(|r| port_of(&r["local"]) == port && r["pid"].as_u64() == Some(u64::from(pid)))
            .collect::<Vec<_>>()
    };
    let redis_rows = served(redis_port, redis.0.id());
    assert!(
        redis_rows
            .iter()
            .any(|r| r["state"] == "ESTABLISHED" && r["nodelay"] == true),
        "redis-server sets TCP_NODELAY on its clients: {redis_rows:?}"
    );
    assert!(redis_rows
        .iter()
        .any(|r| r["state"] == "LISTEN" && r["nodelay"] == false));
    let http_rows = served(http_port, http_server.0.id());
    assert!(
        http_rows
            .iter()
            .any(|r| r["state"] != "LISTEN" && r["nodelay"] == false),
        "http.server leaves Nagle on: {http_rows:?}"
    );
}

#[test]
fn without_privileges_it_says_why_and_reads_each_process_instead() {
    let as_nobody =
        |source: &str| support::as_nobody(BIN, &["sockets", "--all", "--source", source]);
    let Some(auto) = as_nobody("auto") else {
        return;
    };
    let stderr = String::from_utf8_lossy(&auto.stderr);
    assert!(auto.status.success(), "{stderr}");
    assert!(stderr.contains("CAP_BPF and CAP_PERFMON"), "{stderr}");
    assert!(
        stderr.contains("reading each process's sockets instead"),
        "{stderr}"
    );
    let Some(kernel) = as_nobody("kernel") else {
        return;
    };
    assert_eq!(kernel.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&kernel.stderr).contains("CAP_BPF and CAP_PERFMON"));
}
