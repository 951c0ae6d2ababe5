//! `tcpstall fix --route`: real routes in network namespaces these tests create (and delete,
//! passing or failing), a real server that stalls (CPython's `http.server`, which writes each
//! response's header and body apart), and the route put back byte for byte. They need root
//! (CAP_NET_ADMIN for the routes, CAP_SYS_ADMIN to enter the namespaces) and are skipped,
//! saying so, without it.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod support;
use support::KillOnDrop;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");
/// The server's port inside each namespace.
const PORT: u16 = 8000;
/// Requests per measured connection; the first two are left out of the median (a new
/// connection starts in quick-ACK mode, `tcp_incr_quickack`).
const REQUESTS: usize = 14;

/// Whether the tests may run; says why not when they may not.
fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        support::skip(format!(
            "{test}: tests/route.rs needs root (CAP_NET_ADMIN to change routes, \
             CAP_SYS_ADMIN to enter network namespaces): `sudo cargo test --test route`"
        ));
    }
    root
}

/// A network namespace made for one test, deleted when the test ends, passing or failing.
struct Namespace(String);

impl Namespace {
    fn new(role: &str) -> Namespace {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "tcpstall-route-test-{}-{}-{role}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Namespace(name);
        ip(&["netns", "add", &ns.0]);
        ns.ip(&["link", "set", "lo", "up"]);
        ns
    }

    /// `ip -n NS ARGS`, which must succeed.
    fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", self.0.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Every route of the namespace, both families, as `ip -d route show table all` prints them.
    fn routes(&self) -> String {
        self.ip(&["-d", "route", "show", "table", "all"])
            + &self.ip(&["-d", "-6", "route", "show", "table", "all"])
    }

    /// `http.server` on `addr`:PORT inside the namespace, serving a 6-byte file; killed when
    /// dropped.
    fn http_server(&self, addr: IpAddr, dir: &std::path::Path) -> KillOnDrop {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.0, "python3", "-m", "http.server"])
            .args(["--protocol", "HTTP/1.1", "--bind", &addr.to_string()])
            .arg("--directory")
            .arg(dir)
            .arg(PORT.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("python3 runs (scripts/install-deps installs it)");
        KillOnDrop(child)
    }

    /// Runs `work` on a thread inside the namespace.
    fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        let file = std::fs::File::open(format!("/run/netns/{}", self.0)).expect("namespace file");
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                        .expect("setns into the test's namespace");
                    work()
                })
                .join()
                .expect("the namespace thread ends")
        })
    }

    /// `tcpstall fix --route DEST --netns NS ARGS`.
    fn fix(&self, dest: &str, args: &[&str]) -> Output {
        Command::new(BIN)
            .args(["fix", "--route", dest, "--netns", &self.0])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("the tcpstall binary runs")
    }

    /// Like [`Namespace::fix`], which must succeed.
    fn fix_ok(&self, dest: &str, args: &[&str]) -> String {
        stdout_of(
            self.fix(dest, args),
            &format!("fix --route {dest} {args:?}"),
        )
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // The state files tcpstall kept for this namespace's routes (named by its inode).
        if let Ok(meta) = std::fs::metadata(format!("/run/netns/{}", self.0)) {
            use std::os::unix::fs::MetadataExt;
            let prefix = format!("netns{}-", meta.ino());
            for entry in std::fs::read_dir("/run/tcpstall/routes")
                .into_iter()
                .flatten()
                .flatten()
            {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.0])
            .output();
    }
}

/// `ip ARGS`, which must succeed; its standard output.
fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("ip runs (iproute2)");
    stdout_of(out, &format!("ip {args:?}"))
}

/// The standard output of `what`, which must have succeeded.
fn stdout_of(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory with the file the server serves.
fn www() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("index.html"), "hello\n").expect("index.html");
    dir
}

/// One keep-alive connection to the server, connected within 10 s of its start.
fn connect(server: SocketAddr) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect_timeout(&server, Duration::from_secs(1)) {
            Ok(stream) => {
                stream
                    .set_read_timeout(Some(Duration::from_secs(2)))
                    .expect("read timeout");
                return stream;
            }
            Err(err) if Instant::now() > deadline => panic!("cannot reach {server}: {err}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// The median of `REQUESTS` requests on `stream` (milliseconds), the first two left out.
fn median_ms(stream: &mut TcpStream) -> f64 {
    let request = b"GET /index.html HTTP/1.1\r\nHost: test\r\n\r\n";
    let mut times = Vec::with_capacity(REQUESTS);
    for _ in 0..REQUESTS {
        let start = Instant::now();
        stream.write_all(request).expect("request sent");
        read_response(stream);
        times.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let mut kept = times.split_off(2);
    kept.sort_by(f64::total_cmp);
    kept[kept.len() / 2]
}

/// Reads one response: the header, then Content-Length bytes of body.
fn read_response(stream: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut chunk)
            .expect("response within the read timeout");
        assert!(n > 0, "the server closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("content-length")
                        .then(|| value.trim().parse().ok())?
                })
                .expect("a Content-Length header");
            if body.len() >= length {
                return;
            }
        }
    }
}

/// The median of a new connection from inside `client` to `server`.
fn new_connection_ms(client: &Namespace, server: SocketAddr) -> f64 {
    client.run(|| median_ms(&mut connect(server)))
}

/// Undoes the change to `dest`'s route and checks that every route is back byte for byte.
fn undo_restores(ns: &Namespace, dest: &str, before: &str) {
    ns.fix_ok(dest, &["--undo", "--yes"]);
    assert_eq!(
        ns.routes(),
        before,
        "--undo restores the route byte for byte"
    );
}

/// The median of one connection to `server` before and after `fix --route DEST --quickack`
/// made while it stays open; the fix's output is checked to contain `shown`.
fn open_connection_across_quickack(
    ns: &Namespace,
    server: SocketAddr,
    dest: &str,
    shown: &str,
) -> (f64, f64) {
    ns.run(|| {
        let mut open = connect(server);
        let first = median_ms(&mut open);
        let out = ns.fix_ok(dest, &["--quickack", "--yes"]);
        assert!(out.contains(shown), "{out}");
        (first, median_ms(&mut open))
    })
}

#[test]
fn quickack_and_delack_max_on_the_route_used_for_loopback() {
    if !root_or_skip("quickack_and_delack_max_on_the_route_used_for_loopback") {
        return;
    }
    let ns = Namespace::new("lo");
    let dir = www();
    let server = SocketAddr::from(([127, 0, 0, 1], PORT));
    let _http = ns.http_server(server.ip(), dir.path());
    let before = ns.routes();

    let stalled = new_connection_ms(&ns, server);
    assert!(
        stalled >= support::STALL_MIN_MS,
        "http.server keep-alive stalls: p50 {stalled:.2} ms"
    );

    let plan = ns.fix_ok("127.0.0.1", &["--quickack", "--dry-run"]);
    assert!(
        plan.contains("local 127.0.0.1 dev lo table local"),
        "{plan}"
    );
    assert!(plan.contains("cost: more ACKs"), "{plan}");
    assert_eq!(ns.routes(), before, "a dry run changes nothing");

    // A connection open before the change takes it at its next packet.
    let (open_before, open_after) =
        open_connection_across_quickack(&ns, server, "127.0.0.1", "quickack 1");
    assert!(
        open_before >= support::STALL_MIN_MS,
        "open connection before: {open_before:.2} ms"
    );
    assert!(
        open_after < 10.0,
        "open connection after: {open_after:.2} ms"
    );
    let routes = ns.ip(&["route", "show", "table", "local"]);
    assert!(
        routes.contains("local 127.0.0.1 dev lo proto kernel scope host src 127.0.0.1 quickack 1"),
        "the more specific route of table local is the one changed:\n{routes}"
    );
    let quick = new_connection_ms(&ns, server);
    assert!(quick < 10.0, "quickack 1: p50 {quick:.2} ms");

    undo_restores(&ns, "127.0.0.1", &before);

    let json = ns.fix_ok("127.0.0.1", &["--delack-max", "5ms", "--yes", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(report["applied"], true, "{json}");
    assert_eq!(report["rto_min_ms"], 5, "{json}");
    assert!(
        report["costs"].to_string().contains("retransmission"),
        "{json}"
    );
    let capped = new_connection_ms(&ns, server);
    assert!(
        capped < support::STALL_MIN_MS,
        "rto_min 5ms: p50 {capped:.2} ms"
    );

    undo_restores(&ns, "127.0.0.1", &before);
    let again = new_connection_ms(&ns, server);
    assert!(
        again >= support::STALL_MIN_MS,
        "after --undo it stalls again: p50 {again:.2} ms"
    );
    eprintln!(
        "p50 per request: as made {stalled:.2} ms, quickack 1 {quick:.2} ms, rto_min 5ms \
         {capped:.2} ms, undone {again:.2} ms; open connection {open_before:.2} -> \
         {open_after:.2} ms"
    );

    let nothing = ns.fix("127.0.0.1", &["--undo", "--yes"]);
    assert!(!nothing.status.success());
    assert!(
        String::from_utf8_lossy(&nothing.stderr).contains("nothing to undo"),
        "{}",
        String::from_utf8_lossy(&nothing.stderr)
    );
}

/// Two namespaces joined by a veth pair: the client's end and the server's, addresses given.
fn veth_pair(client: &Namespace, server: &Namespace, client_addr: &str, server_addr: &str) {
    client.ip(&[
        "link", "add", "veth-c", "type", "veth", "peer", "name", "veth-s",
    ]);
    client.ip(&["link", "set", "veth-s", "netns", &server.0]);
    let v6 = client_addr.contains(':');
    for (ns, dev, addr) in [
        (client, "veth-c", client_addr),
        (server, "veth-s", server_addr),
    ] {
        if v6 {
            ns.ip(&["addr", "add", addr, "dev", dev, "nodad"]);
        } else {
            ns.ip(&["addr", "add", addr, "dev", dev]);
        }
        // No link-local address: it would come and add its route while the test compares.
        ns.ip(&["link", "set", dev, "addrgenmode", "none"]);
        ns.ip(&["link", "set", dev, "up"]);
    }
}

#[test]
fn route_in_another_table_behind_a_policy_rule() {
    if !root_or_skip("route_in_another_table_behind_a_policy_rule") {
        return;
    }
    let client = Namespace::new("client");
    let server_ns = Namespace::new("server");
    veth_pair(&client, &server_ns, "10.77.0.1/24", "10.77.0.2/24");
    client.ip(&[
        "route",
        "add",
        "10.77.0.2/32",
        "dev",
        "veth-c",
        "table",
        "100",
    ]);
    client.ip(&[
        "rule",
        "add",
        "to",
        "10.77.0.2",
        "table",
        "100",
        "pref",
        "100",
    ]);
    let dir = www();
    let server = SocketAddr::from(([10, 77, 0, 2], PORT));
    let _http = server_ns.http_server(server.ip(), dir.path());
    let before = client.routes();

    let stalled = new_connection_ms(&client, server);
    assert!(stalled >= support::STALL_MIN_MS, "p50 {stalled:.2} ms");
    let out = client.fix_ok("10.77.0.2", &["--quickack", "--yes"]);
    assert!(out.contains("10.77.0.2 dev veth-c table 100"), "{out}");
    let table_100 = client.ip(&["route", "show", "table", "100"]);
    assert!(table_100.contains("quickack 1"), "{table_100}");
    let main = client.ip(&["route", "show", "table", "main"]);
    assert!(
        !main.contains("quickack"),
        "the main table's route is left alone: {main}"
    );
    let quick = new_connection_ms(&client, server);
    assert!(quick < 10.0, "p50 {quick:.2} ms");

    undo_restores(&client, "10.77.0.2", &before);
    eprintln!("table 100 behind a rule: p50 {stalled:.2} ms -> quickack 1 {quick:.2} ms");
}

#[test]
fn ipv6_route_and_the_local_route_it_cannot_recreate() {
    if !root_or_skip("ipv6_route_and_the_local_route_it_cannot_recreate") {
        return;
    }
    let client = Namespace::new("client6");
    let server_ns = Namespace::new("server6");
    veth_pair(&client, &server_ns, "fd00:77::1/64", "fd00:77::2/64");
    let dir = www();
    let server: SocketAddr = "[fd00:77::2]:8000".parse().expect("address");
    let _http = server_ns.http_server(server.ip(), dir.path());
    let before = client.routes();

    // A connection open before the change takes it at its next packet, on IPv6 too.
    let (stalled, open_after) = open_connection_across_quickack(
        &client,
        server,
        "fd00:77::2",
        "fd00:77::/64 dev veth-c table main",
    );
    assert!(stalled >= support::STALL_MIN_MS, "p50 {stalled:.2} ms");
    assert!(
        open_after < 10.0,
        "open connection after: {open_after:.2} ms"
    );
    let quick = new_connection_ms(&client, server);
    assert!(quick < 10.0, "p50 {quick:.2} ms");
    undo_restores(&client, "fd00:77::2", &before);

    client.fix_ok("fd00:77::2", &["--delack-max", "5ms", "--yes"]);
    let capped = new_connection_ms(&client, server);
    assert!(capped < support::STALL_MIN_MS, "p50 {capped:.2} ms");
    undo_restores(&client, "fd00:77::2", &before);
    eprintln!("IPv6: p50 {stalled:.2} ms -> quickack 1 {quick:.2} ms, rto_min 5ms {capped:.2} ms");

    // ::1's route is the kernel's metric 0 route of a local address: refused, not half-done.
    let refused = client.fix("::1", &["--quickack", "--yes"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("metric 0"), "{said}");
    assert_eq!(client.routes(), before);
}

#[test]
fn refused_without_cap_net_admin() {
    if !root_or_skip("refused_without_cap_net_admin") {
        return;
    }
    let ns = Namespace::new("nocap");
    let before = ns.routes();
    let without_net_admin = |last: &str| {
        Command::new("setpriv")
            .args(["--inh-caps=-all", "--bounding-set=-net_admin", BIN])
            .args([
                "fix",
                "--route",
                "127.0.0.1",
                "--netns",
                &ns.0,
                "--quickack",
                last,
            ])
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs (util-linux)")
    };
    let out = without_net_admin("--yes");
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("CAP_NET_ADMIN"), "{said}");
    assert_eq!(ns.routes(), before, "nothing changed");
    // The dry run needs no CAP_NET_ADMIN: it only reads.
    let dry = without_net_admin("--dry-run");
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
}

/// As user nobody with no capability at all (`setpriv --reuid=nobody --clear-groups
/// --inh-caps=-all`), where /run/tcpstall/routes (root's, mode 0700) cannot be read: the dry
/// run shows the change and writes nothing; the change itself is refused naming CAP_NET_ADMIN.
#[test]
fn as_nobody_the_dry_run_works_and_the_change_names_cap_net_admin() {
    if !root_or_skip("as_nobody_the_dry_run_works_and_the_change_names_cap_net_admin") {
        return;
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create("/run/tcpstall/routes")
            .expect("the state directory");
    }
    let before = host_routes();
    let as_nobody = |last: &str| {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--clear-groups", "--inh-caps=-all", BIN])
            .args(["fix", "--route", "127.0.0.1", "--quickack", last])
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs (util-linux)")
    };
    let dry = as_nobody("--dry-run");
    let stdout = String::from_utf8_lossy(&dry.stdout);
    let stderr = String::from_utf8_lossy(&dry.stderr);
    assert_eq!(dry.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("would become:"), "{stdout}");
    assert!(stdout.contains("nothing written"), "{stdout}");
    assert!(!stdout.contains("kept for --undo in"), "{stdout}");
    let refused = as_nobody("--yes");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CAP_NET_ADMIN"), "{stderr}");
    assert!(!stderr.contains("Permission denied"), "{stderr}");
    assert_eq!(host_routes(), before, "nothing changed");
}

/// A destination no specific route covers falls to the default route: the plan says so, and
/// `--yes` alone does not change it; `--default-route` confirms, and `--undo` puts it back.
#[test]
fn the_default_route_is_changed_only_when_confirmed() {
    if !root_or_skip("the_default_route_is_changed_only_when_confirmed") {
        return;
    }
    let ns = Namespace::new("default");
    let gateway = Namespace::new("gateway");
    veth_pair(&ns, &gateway, "10.98.0.1/24", "10.98.0.2/24");
    ns.ip(&["route", "add", "default", "via", "10.98.0.2"]);
    let before = ns.routes();
    let dest = "198.51.100.7";
    let plan = ns.fix_ok(dest, &["--quickack", "--dry-run"]);
    assert!(plan.contains("default route:"), "{plan}");
    let out = ns.fix(dest, &["--quickack", "--yes"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--default-route"), "{stderr}");
    // The refusal comes first and alone: no plan saying what the route "becomes", nothing
    // "kept for --undo".
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "", "{stdout}");
    assert_eq!(ns.routes(), before, "the default route was left alone");
    ns.fix_ok(dest, &["--quickack", "--yes", "--default-route"]);
    assert!(ns.ip(&["route", "show", "default"]).contains("quickack 1"));
    ns.fix_ok(dest, &["--undo", "--yes"]);
    assert_eq!(ns.routes(), before, "put back");
}

/// The host's routes, both families, every table.
fn host_routes() -> String {
    ip(&["-d", "route", "show", "table", "all"])
        + &ip(&["-d", "-6", "route", "show", "table", "all"])
}

#[test]
fn lab_route_rows_over_its_own_namespaces_and_never_on_the_host() {
    if !root_or_skip("lab_route_rows_over_its_own_namespaces_and_never_on_the_host") {
        return;
    }
    let before = host_routes();
    let rows = support::lab_report(&[
        "--rtt",
        "20",
        "--scenario",
        "http",
        "--variant",
        "split,route-quickack,route-delack-max",
        "--requests",
        "8",
    ]);
    assert_eq!(
        host_routes(),
        before,
        "the lab changes no route of the host"
    );
    let rows = rows["rows"].as_array().expect("rows");
    let p50 = |variant: &str| {
        let row = rows
            .iter()
            .find(|r| r["variant"] == variant)
            .unwrap_or_else(|| panic!("no row {variant}: {rows:?}"));
        assert_eq!(row["stalled"], row["expected_stall"], "{row}");
        row["p50_ms"].as_f64().expect("p50_ms")
    };
    let (split, quick, capped) = (p50("split"), p50("route-quickack"), p50("route-delack-max"));
    // Over a 20 ms path: the split row pays the timer on top of 2 RTT; quickack 1 only the
    // 2 RTT; the capped ACK a few milliseconds more.
    assert!(split >= 70.0, "split p50 {split:.2} ms");
    assert!(quick < 50.0, "route-quickack p50 {quick:.2} ms");
    assert!(capped < split - 20.0, "route-delack-max p50 {capped:.2} ms");

    // On loopback they would change the host's routes: left out, saying so.
    let out = Command::new(BIN)
        .args([
            "lab",
            "--scenario",
            "http",
            "--variant",
            "split,route-quickack",
        ])
        .args(["--requests", "3", "--json"])
        .stdin(Stdio::null())
        .output()
        .expect("the tcpstall binary runs");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("http/route-quickack left out"), "{said}");
    assert!(said.contains("never the host's"), "{said}");
    assert_eq!(host_routes(), before);
}
