//! `sockets` and `fix` on the servers people run: a master and its workers (nginx with
//! `tcp_nodelay off`), a server that dropped root (`memcached -u nobody`), tcpstall holding only
//! part of the privileges it needs (setpriv), a client opening a connection per request amid
//! thousands of TIME_WAIT entries, and the delayed-ACK cap for the side that cannot change the
//! writer. Every server is stopped when its test ends, passing or failing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod support;

use support::process::{fixture, json_ok, sockets_json, tcpstall, NobodyBinary, SplitServer};
use support::serial;
use support::KillOnDrop;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn median_ms(times: &[f64]) -> f64 {
    let mut sorted = times.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    sorted[sorted.len() / 2]
}

/// A port free on 127.0.0.1 a moment ago, for servers that take their port as an argument.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// Waits (bounded) until something accepts connections on 127.0.0.1:`port`.
fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The children of `pid` (from each process's parent field in /proc/PID/stat).
fn children_of(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if parent == Some(pid) {
            children.push(child);
        }
    }
    children.sort_unstable();
    children
}

/// nginx as a master and two workers with `tcp_nodelay off`, on 127.0.0.1, configured in a
/// temporary directory. Dropping it stops the master (fast shutdown, which ends the workers),
/// then kills whatever is left, then removes the directory.
struct Nginx {
    master: Child,
    workers: Vec<u32>,
    dir: PathBuf,
    port: u16,
}

impl Nginx {
    fn start() -> Nginx {
        let dir = std::env::temp_dir().join(format!("tcpstall-nginx-{}", std::process::id()));
        let html = dir.join("html");
        std::fs::create_dir_all(&html).expect("temp dir");
        use std::os::unix::fs::PermissionsExt;
        for path in [&dir, &html] {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
        std::fs::write(html.join("index.html"), "hello from nginx\n").expect("page");
        let port = free_port();
        let d = dir.display();
        // sendfile: the header goes by writev, the page by sendfile, two sends of one
        // response: the second waits for the client's delayed ACK of the first (Nagle).
        let config = format!(
            "daemon off;\nmaster_process on;\nworker_processes 2;\npid {d}/nginx.pid;\n\
             error_log {d}/error.log;\nevents {{ worker_connections 64; }}\nhttp {{\n\
             access_log off;\nclient_body_temp_path {d}/body;\nproxy_temp_path {d}/proxy;\n\
             fastcgi_temp_path {d}/fastcgi;\nuwsgi_temp_path {d}/uwsgi;\n\
             scgi_temp_path {d}/scgi;\ntcp_nodelay off;\nsendfile on;\n\
             keepalive_requests 100000;\nserver {{ listen 127.0.0.1:{port}; root {d}/html; }}\n}}\n"
        );
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config).expect("config");
        let master = Command::new("nginx")
            .arg("-e")
            .arg(dir.join("error.log"))
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .spawn()
            .expect("nginx runs (nginx-light, scripts/install-deps)");
        let mut nginx = Nginx {
            master,
            workers: Vec::new(),
            dir,
            port,
        };
        wait_listening(port, "nginx");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            nginx.workers = children_of(nginx.master.id());
            if nginx.workers.len() == 2 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "nginx started {:?}",
                nginx.workers
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        nginx
    }

    fn pid(&self) -> u32 {
        self.master.id()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = support::signal(self.master.id(), libc::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.master.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for &worker in &self.workers {
            if std::fs::metadata(format!("/proc/{worker}")).is_ok() {
                let _ = support::signal(worker, libc::SIGKILL);
            }
        }
        let _ = self.master.kill();
        let _ = self.master.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A keep-alive HTTP connection of this test: each request in one write, the response read
/// whole (head, then Content-Length bytes).
struct KeepAlive {
    stream: TcpStream,
    buffered: Vec<u8>,
}

impl KeepAlive {
    fn connect(port: u16) -> KeepAlive {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        KeepAlive {
            stream,
            buffered: Vec::new(),
        }
    }

    fn local(&self) -> String {
        self.stream.local_addr().expect("local address").to_string()
    }

    /// One request/response turn, in milliseconds.
    fn request(&mut self) -> f64 {
        let started = Instant::now();
        self.stream
            .write_all(b"GET /index.html HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .expect("request sent");
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = self.buffered.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = self.stream.read(&mut chunk).expect("response");
            assert!(n > 0, "the server closed the connection");
            self.buffered.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&self.buffered[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("Content-Length");
        while self.buffered.len() < head_end + length {
            let n = self.stream.read(&mut chunk).expect("body");
            assert!(n > 0, "the server closed the connection");
            self.buffered.extend_from_slice(&chunk[..n]);
        }
        self.buffered.drain(..head_end + length);
        started.elapsed().as_secs_f64() * 1000.0
    }
}

/// An idle nginx worker (no connection accepted yet) holds only the listener its master made
/// and shares with it: `sockets` and `fix` of the worker name the master as the one to fix,
/// never the worker.
#[test]
fn an_idle_workers_shared_listener_names_the_master_that_made_it() {
    support::require_root("nginx with a master process wants root here");
    let _serial = serial();
    let nginx = Nginx::start();
    let (master, worker) = (nginx.pid(), nginx.workers[0]);
    let table = tcpstall(&["sockets", &worker.to_string()]);
    let text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("tcpstall fix {master}, the process that owns it")),
        "{text}"
    );
    assert!(
        text.contains(&format!("shares with pid {master} (nginx)")),
        "{text}"
    );
    assert!(!text.contains(&format!("tcpstall fix {worker}")), "{text}");
    let listener = sockets_json(worker)
        .into_iter()
        .find(|s| s["listening"] == true)
        .expect("the listener");
    assert_eq!(listener["inherited_from"]["pid"], master, "{listener:#}");

    let plan = tcpstall(&["fix", &worker.to_string(), "--dry-run"]);
    let text = String::from_utf8_lossy(&plan.stdout);
    assert_eq!(plan.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("fix its owner instead: tcpstall fix {master}")),
        "{text}"
    );
    // The master's own view is unchanged: it made the listener, nothing above it holds it.
    let own = sockets_json(master)
        .into_iter()
        .find(|s| s["listening"] == true)
        .expect("the listener");
    assert!(own.get("inherited_from").is_none(), "{own:#}");
}

#[test]
fn fix_of_an_nginx_master_reaches_the_connections_its_workers_hold() {
    if !is_root() {
        support::skip("nginx with a master process wants root here");
        return;
    }
    let _serial = serial();
    let nginx = Nginx::start();
    let master = nginx.pid();
    let mut clients: Vec<KeepAlive> = (0..8).map(|_| KeepAlive::connect(nginx.port)).collect();
    let mut before = Vec::new();
    for client in &mut clients {
        // The first turns of a connection are ACKed at once (quick-ACK mode); then they wait.
        let turns: Vec<f64> = (0..5).map(|_| client.request()).collect();
        before.extend_from_slice(&turns[2..]);
    }
    assert!(
        median_ms(&before) >= support::STALL_MIN_MS,
        "header (writev) and page (sendfile) should stall on the delayed ACK: {before:?}"
    );

    // By default the tree: the listener once, held by the master and both workers; each
    // connection with the worker holding it.
    let shown = sockets_json(master);
    let listener = shown
        .iter()
        .find(|s| s["listening"] == true)
        .expect("the listener");
    let holders: Vec<u64> = listener["holders"]
        .as_array()
        .expect("holders")
        .iter()
        .filter_map(|h| h["pid"].as_u64())
        .collect();
    let mut expected = vec![u64::from(master)];
    expected.extend(nginx.workers.iter().map(|&w| u64::from(w)));
    assert_eq!(holders, expected, "{listener:#}");
    for client in &clients {
        let socket = shown
            .iter()
            .find(|s| s["remote"] == client.local().as_str())
            .unwrap_or_else(|| panic!("{} not shown: {shown:#?}", client.local()));
        let pid = socket["pid"].as_u64().expect("pid") as u32;
        assert!(nginx.workers.contains(&pid), "held by a worker: {socket:#}");
        assert_eq!(socket["nodelay"], false);
    }

    let table = tcpstall(&["sockets", &master.to_string()]);
    let table = String::from_utf8_lossy(&table.stdout);
    let shared = format!(
        "shared: 127.0.0.1:{} LISTEN: one socket held by pid {master} fd ",
        nginx.port
    );
    assert!(table.contains(&shared), "{table}");
    assert!(
        table.contains(&format!(
            "can stall: pid {} fd",
            shown
                .iter()
                .find(|s| s["listening"] == false)
                .and_then(|s| s["pid"].as_u64())
                .expect("a worker's connection")
        )) && !table.contains(&format!("(tcpstall fix {};", nginx.workers[0])),
        "the workers' connections can stall, and fixing the master reaches them: {table}"
    );

    // Restricted to the master, the workers' connections are named, not silently left out.
    let alone = tcpstall(&["fix", &master.to_string(), "--no-tree", "--dry-run"]);
    let stderr = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("8 of them connections, are held by child process"),
        "{stderr}"
    );

    let report = json_ok(&tcpstall(&["fix", &master.to_string(), "--yes", "--json"]));
    assert_eq!(report["applied"], true);
    assert_eq!(
        report["pids"].as_array().map(Vec::len),
        Some(3),
        "{report:#}"
    );

    let shown = sockets_json(master);
    for client in &clients {
        let socket = shown
            .iter()
            .find(|s| s["remote"] == client.local().as_str())
            .expect("still shown");
        assert_eq!(socket["nodelay"], true, "{socket:#}");
    }
    let mut after = Vec::new();
    for client in &mut clients {
        after.extend((0..4).map(|_| client.request()));
    }
    eprintln!(
        "nginx, 8 keep-alive connections: median {:.1} ms before fix, {:.2} ms after",
        median_ms(&before),
        median_ms(&after)
    );
    assert!(
        median_ms(&after) < 10.0,
        "the workers' connections, fixed live, should not stall: {after:?}"
    );
}

/// tests/fixtures/process/paced_client.py, killed when dropped.
struct PacedClient {
    child: KillOnDrop,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl PacedClient {
    fn start(args: &[&str]) -> PacedClient {
        let mut child = Command::new("python3")
            .arg(fixture("paced_client.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("piped"));
        PacedClient {
            child: KillOnDrop(child),
            stdin,
            stdout,
        }
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("client output");
        assert!(!line.is_empty(), "the client ended early");
        line
    }

    /// `count` keep-alive requests; their durations in milliseconds.
    fn requests(&mut self, count: usize) -> Vec<f64> {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{count}").expect("ask the client");
        stdin.flush().expect("flush");
        serde_json::from_str(&self.line()).expect("a JSON list of durations")
    }
}

/// TCP rows in the TIME_WAIT state (st 06) of this network namespace.
fn time_wait_count() -> usize {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|text| {
            text.lines()
                .skip(1)
                .filter(|l| l.split_whitespace().nth(3) == Some("06"))
                .count()
        })
        .sum()
}

#[test]
fn young_sockets_of_a_connection_per_request_client_are_seen() {
    let _serial = serial();
    let server = SplitServer::start(&["--single-write"]);
    let port = server.port.to_string();
    // 4 threads, each a new connection per request; 4,000 connections first, each leaving a
    // TIME_WAIT entry; 60 s at most.
    let mut client = PacedClient::start(&[&port, "per-request", "4", "4000", "60"]);
    assert_eq!(client.line().trim(), "ready");
    let time_wait = time_wait_count();
    assert!(time_wait >= 3000, "only {time_wait} TIME_WAIT entries");
    let runs = 20;
    let mut seen = 0;
    for _ in 0..runs {
        let shown = sockets_json(client.pid());
        if shown
            .iter()
            .any(|s| s["remote"] == format!("127.0.0.1:{port}").as_str())
        {
            seen += 1;
        }
    }
    eprintln!("{seen} of {runs} runs saw the client's connections among {time_wait} TIME_WAIT");
    // The client holds a connection most of the time (about 60% of samples of its
    // /proc/PID/fd, measured); reading the tables before the fds saw none in 20 of 20 runs.
    assert!(
        seen >= runs / 2,
        "the client holds connections most of the time, but only {seen} of {runs} runs saw one"
    );
    drop(client.stdin.take());
    drop(server);
}

#[test]
fn fix_delack_max_on_the_client_ends_the_servers_stall() {
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let port = server.port.to_string();
    let mut client = PacedClient::start(&[&port, "keepalive"]);
    let before = client.requests(12)[2..].to_vec();
    assert!(
        median_ms(&before) >= support::STALL_MIN_MS,
        "header and body in two writes should stall on the client's delayed ACK: {before:?}"
    );
    let pid = client.pid().to_string();
    let kernel_has_it = tcpstall(&["fix", &pid, "--delack-max", "200ms", "--dry-run"]);
    if kernel_has_it.status.code() == Some(2) {
        let stderr = String::from_utf8_lossy(&kernel_has_it.stderr);
        assert!(stderr.contains("lacks TCP_DELACK_MAX_US"), "{stderr}");
        support::skip(format!("{stderr}"));
        return;
    }
    let text = tcpstall(&["sockets", &pid]);
    let table = String::from_utf8_lossy(&text.stdout);
    assert!(
        table.contains(&format!("delayed ACKs: pid {pid}")) && table.contains("--delack-max"),
        "sockets advises the cap on the client: {table}"
    );

    let plan = tcpstall(&["fix", &pid, "--delack-max", "5ms", "--dry-run"]);
    let plan_text = String::from_utf8_lossy(&plan.stdout);
    assert!(plan_text.contains("cap the delayed ACK at"), "{plan_text}");
    assert!(plan_text.contains("cost: more ACKs"), "{plan_text}");

    let report = json_ok(&tcpstall(&[
        "fix",
        &pid,
        "--delack-max",
        "5ms",
        "--yes",
        "--json",
    ]));
    assert_eq!(report["applied"], true);
    let kept = report["delack_max"]["kept_us"].as_u64().expect("kept_us");
    let floor = report["delack_max"]["floor_us"].as_u64().expect("floor_us");
    assert!(kept >= 5000 && kept >= floor, "{report:#}");
    let socket = report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .find(|s| s["remote"] == format!("127.0.0.1:{port}").as_str())
        .expect("the client's connection");
    assert_eq!(socket["action"], "set_delack_max");
    assert_eq!(socket["delack_max_us_after"].as_u64(), Some(kept));

    let after = client.requests(12)[2..].to_vec();
    eprintln!(
        "client capped at {kept} µs: median {:.1} ms before, {:.1} ms after",
        median_ms(&before),
        median_ms(&after)
    );
    assert!(
        median_ms(&after) < support::STALL_MIN_MS,
        "with the delayed ACK capped at {kept} µs the body should wait less: {after:?}"
    );

    // Below the kernel's floor: refused, with the floor named.
    let below = format!("{}us", floor - 1);
    let out = tcpstall(&["fix", &pid, "--delack-max", &below, "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&format!("from {floor} µs")), "{stderr}");
    drop(server);
}

#[test]
fn cap_sys_ptrace_alone_is_told_it_lacks_cap_dac_read_search() {
    if !is_root() {
        support::skip("needs root to run the target as root and tcpstall as nobody");
        return;
    }
    let _serial = serial();
    let server = SplitServer::start(&[]);
    let pid = server.pid().to_string();
    let binary = NobodyBinary::new();

    let fix = binary.run("+sys_ptrace", &["fix", &pid, "--yes"]);
    let stderr = String::from_utf8_lossy(&fix.stderr);
    assert_eq!(fix.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("has CAP_SYS_PTRACE but not CAP_DAC_READ_SEARCH"),
        "{stderr}"
    );
    assert!(!stderr.contains("security module"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    let sockets = binary.run("+sys_ptrace", &["sockets", &pid]);
    let stderr = String::from_utf8_lossy(&sockets.stderr);
    assert!(stderr.contains("CAP_DAC_READ_SEARCH"), "{stderr}");

    // The other half alone: the directory may be read, the ptrace check still refuses.
    let fix = binary.run("+dac_read_search", &["fix", &pid, "--yes"]);
    let stderr = String::from_utf8_lossy(&fix.stderr);
    assert_eq!(fix.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("needs CAP_SYS_PTRACE too"), "{stderr}");

    // With both, the same user nobody reads and fixes root's server.
    let both = "+sys_ptrace,+dac_read_search";
    let out = binary.run(both, &["fix", &pid, "--yes", "--json"]);
    let report = json_ok(&out);
    assert_eq!(report["applied"], true, "{report:#}");
    let listener = sockets_json(server.pid())
        .into_iter()
        .find(|s| s["listening"] == true)
        .expect("listener");
    assert_eq!(listener["nodelay"], true);
}

#[test]
fn a_server_that_dropped_root_is_named_not_dumpable() {
    if !is_root() {
        support::skip("needs root to start memcached as root with -u nobody");
        return;
    }
    let _serial = serial();
    let port = free_port();
    let memcached = KillOnDrop(
        Command::new("memcached")
            .args([
                "-u",
                "nobody",
                "-l",
                "127.0.0.1",
                "-U",
                "0",
                "-t",
                "1",
                "-p",
            ])
            .arg(port.to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("memcached runs (scripts/install-deps)"),
    );
    wait_listening(port, "memcached");
    let pid = memcached.0.id().to_string();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    assert!(status.contains("Uid:\t65534\t65534\t65534"), "{status}");
    let binary = NobodyBinary::new();

    for args in [&["fix", &pid, "--yes"][..], &["sockets", &pid]] {
        let out = binary.run("", args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("not dumpable"), "{args:?}: {stderr}");
        assert!(stderr.contains("like tcpstall"), "{args:?}: {stderr}");
        assert!(
            stderr.contains(
                "run tcpstall as root, or give it CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"
            ),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("or the same user"), "{args:?}: {stderr}");
    }
    let out = binary.run(
        "+sys_ptrace,+dac_read_search",
        &["fix", &pid, "--dry-run", "--json"],
    );
    let report = json_ok(&out);
    assert!(
        report["sockets"]
            .as_array()
            .expect("sockets")
            .iter()
            .any(|s| s["local"] == format!("127.0.0.1:{port}").as_str()),
        "{report:#}"
    );
    drop(memcached);
}

#[test]
fn sockets_of_the_tree_are_addressed_once_each() {
    // A listener this test holds, shared with a child it forks (the child inherits the fd):
    // one socket, two holders, shown once.
    let _serial = serial();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    use std::os::fd::AsRawFd;
    let fd = listener.as_raw_fd();
    // Clear close-on-exec so that the child (sleep) keeps the listener as the same fd.
    // SAFETY: fcntl on an fd this test owns.
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    let child = KillOnDrop(Command::new("sleep").arg("10").spawn().expect("sleep runs"));
    // SAFETY: as above; tcpstall, run next, must not inherit it too.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(5);
    let shown = loop {
        let shown = sockets_json(me);
        let mine: Vec<Value> = shown
            .into_iter()
            .filter(|s| s["local"] == addr.to_string().as_str())
            .collect();
        if mine
            .first()
            .is_some_and(|s| s["holders"].as_array().map(Vec::len) == Some(2))
        {
            break mine;
        }
        assert!(
            Instant::now() < deadline,
            "the child never showed as a holder: {mine:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(shown.len(), 1, "one socket, shown once: {shown:#?}");
    let holders = &shown[0]["holders"];
    assert_eq!(holders[0]["pid"].as_u64(), Some(u64::from(me)));
    assert_eq!(holders[1]["pid"].as_u64(), Some(u64::from(child.0.id())));
    assert_eq!(holders[1]["fd"].as_i64(), Some(i64::from(fd)));
    let alone = tcpstall(&["sockets", &me.to_string(), "--no-tree", "--json"]);
    let alone = json_ok(&alone);
    let mine = alone
        .as_array()
        .expect("array")
        .iter()
        .find(|s| s["local"] == addr.to_string().as_str())
        .expect("still shown");
    assert_eq!(mine["holders"].as_array().map(Vec::len), Some(1));
}
