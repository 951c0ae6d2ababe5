//! `tcpstall probe` through a real proxy (haproxy, nginx) in front of an application server:
//! CPython's http.server with keep-alive writes each answer's header and body apart, so the
//! body waits for the *proxy's* delayed ACK on the proxy's own connection, and the proxy hands
//! the probe the whole answer at once. The probe must blame the hop behind the server
//! (`culprit: upstream`), name the backend process when it is on this host, and find the same
//! proxy in front of a backend with TCP_NODELAY clean. Over plain HTTP and TLS at the proxy, on
//! loopback and with the backend in a network namespace of its own (its address seen from the
//! proxy's host; probed from a third namespace, only the timing tells); then the fixes it names,
//! applied with `tcpstall fix`. Every server is stopped when its test ends, failing or not.
//!
//! Needs haproxy and nginx (`scripts/install-deps`) and root: the probe captures the proxy's
//! connections, and the namespaces are created here. Without them the tests say so and skip.

mod support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{command_in, spawn_printing_port, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Requests per probe: enough past the first (never held: a new connection starts in quick-ACK
/// mode) for the timer's mode to show.
const REQUESTS: &str = "16";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether the test can run: root, and the proxies installed. Says why not on stderr.
fn ready(test: &str) -> bool {
    if !is_root() {
        support::skip(format!(
            "{test}: needs root (capture of the proxy's connections, namespaces)"
        ));
        return false;
    }
    for program in ["haproxy", "nginx"] {
        let found = Command::new(program)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok();
        if !found {
            support::skip(format!(
                "{test}: {program} is not installed (scripts/install-deps)"
            ));
            return false;
        }
    }
    true
}

/// A directory removed when the test ends, with a file for the backend to serve.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "tcpstall-proxy-{}-{name}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("www")).expect("create a temporary directory");
        std::fs::write(dir.join("www/index.html"), "hello from behind the proxy\n")
            .expect("write a file");
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The application server: http.server with keep-alive, splitting its answers or (nodelay)
/// not, on `bind`, in `ns` when given.
struct Backend {
    child: KillOnDrop,
    address: String,
}

fn backend(scratch: &Scratch, nodelay: bool, ns: Option<&str>, bind: &str) -> Backend {
    backend_with(scratch, nodelay, ns, bind, &[])
}

/// [`backend`] with more arguments for the fixture (`--think`).
fn backend_with(
    scratch: &Scratch,
    nodelay: bool,
    ns: Option<&str>,
    bind: &str,
    more: &[&str],
) -> Backend {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/probe/http_server.py");
    let mut command = command_in(ns, "python3");
    command.arg(script).arg(scratch.path("www"));
    command.args(["--bind", bind]);
    if nodelay {
        command.arg("--nodelay");
    }
    command.args(more);
    let (child, port) = spawn_printing_port(&mut command, "the backend (python3 http_server.py)");
    Backend {
        child,
        address: format!("{bind}:{port}"),
    }
}

/// Which proxy, and how it is set up.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Proxy {
    /// haproxy's defaults (keep-alive to the server, connections reused).
    Haproxy,
    /// haproxy with `option http-no-delay`: it forwards each part at once.
    HaproxyNoDelay,
    /// nginx `proxy_pass` to an `upstream` with `keepalive`.
    Nginx,
}

/// A proxy listening on 127.0.0.1:port, in `ns` when given.
struct RunningProxy {
    _child: KillOnDrop,
    port: u16,
}

/// A self-signed certificate for 127.0.0.1: (certificate, key, both in one file for haproxy).
fn self_signed(scratch: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let (cert, key) = support::self_signed(&scratch.0);
    let both = scratch.path("both.pem");
    let mut pem = std::fs::read(&cert).expect("read the certificate");
    pem.extend(std::fs::read(&key).expect("read the key"));
    std::fs::write(&both, pem).expect("write the combined PEM");
    (cert, key, both)
}

/// The proxy's configuration file for `port` in front of `upstream`.
fn proxy_config(
    kind: Proxy,
    scratch: &Scratch,
    listen: SocketAddr,
    upstream: &str,
    tls: bool,
) -> PathBuf {
    let dir = scratch.0.display();
    let (cert, key, both) = if tls {
        self_signed(scratch)
    } else {
        Default::default()
    };
    let (file, text) = match kind {
        Proxy::Haproxy | Proxy::HaproxyNoDelay => {
            let ssl = if tls {
                format!(" ssl crt {}", both.display())
            } else {
                String::new()
            };
            let option = if kind == Proxy::HaproxyNoDelay {
                "  option http-no-delay\n"
            } else {
                ""
            };
            (
                "haproxy.cfg",
                format!(
                    "global\n  maxconn 64\n\
                     defaults\n  mode http\n  timeout connect 2s\n  timeout client 10s\n  \
                     timeout server 10s\n\
                     frontend front\n  bind {listen}{ssl}\n  default_backend app\n\
                     backend app\n{option}  server app {upstream}\n"
                ),
            )
        }
        Proxy::Nginx => {
            let listen = if tls {
                format!(
                    "listen {listen} ssl; ssl_certificate {}; ssl_certificate_key {};",
                    cert.display(),
                    key.display()
                )
            } else {
                format!("listen {listen};")
            };
            (
                "nginx.conf",
                format!(
                    "daemon off; master_process off; worker_processes 1; pid {dir}/nginx.pid; \
                     error_log {dir}/error.log;\n\
                     events {{ worker_connections 64; }}\n\
                     http {{ access_log off; client_body_temp_path {dir}/body; \
                     proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi; \
                     uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;\n\
                     upstream app {{ server {upstream}; keepalive 8; }}\n\
                     server {{ {listen} location / {{ proxy_pass http://app; \
                     proxy_http_version 1.1; proxy_set_header Connection \"\"; }} }} }}\n"
                ),
            )
        }
    };
    let path = scratch.path(file);
    std::fs::write(&path, text).expect("write the proxy's configuration");
    path
}

/// Whether something listens on 127.0.0.1:port in `ns` (or here).
fn listening(ns: Option<&str>, port: u16) -> bool {
    match ns {
        None => TcpStream::connect(("127.0.0.1", port)).is_ok(),
        Some(_) => command_in(ns, "ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .is_ok_and(|out| !out.stdout.is_empty()),
    }
}

/// Starts `kind` in front of `upstream` and waits until it listens.
fn proxy(
    kind: Proxy,
    scratch: &Scratch,
    upstream: &str,
    tls: bool,
    ns: Option<&str>,
) -> RunningProxy {
    let port = free_port();
    // In a namespace of its own the proxy is reached from the others too; here, only locally.
    let address = if ns.is_some() {
        [0, 0, 0, 0]
    } else {
        [127, 0, 0, 1]
    };
    let config = proxy_config(kind, scratch, (address, port).into(), upstream, tls);
    let mut command = match kind {
        Proxy::Haproxy | Proxy::HaproxyNoDelay => {
            let mut c = command_in(ns, "haproxy");
            c.arg("-db").arg("-f").arg(&config);
            c
        }
        Proxy::Nginx => {
            let mut c = command_in(ns, "nginx");
            c.arg("-c").arg(&config).arg("-p").arg(&scratch.0);
            c
        }
    };
    let mut child = KillOnDrop(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the proxy is installed (scripts/install-deps)"),
    );
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if listening(ns, port) {
            return RunningProxy {
                _child: child,
                port,
            };
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!(
                "{kind:?} exited at start ({status}); configuration {}",
                config.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("{kind:?} did not listen on port {port} within 10 s");
}

/// `tcpstall probe --json ARGS URL`, in `ns` when given, optionally without CAP_NET_RAW:
/// (exit status, the JSON).
fn probe(ns: Option<&str>, no_net_raw: bool, args: &[&str], url: &str) -> (i32, Value) {
    let mut command = command_in(ns, if no_net_raw { "setpriv" } else { BIN });
    if no_net_raw {
        command.args(["--inh-caps=-net_raw", "--bounding-set=-net_raw", BIN]);
    }
    let out = command
        .args(["probe", "--json", "--requests", REQUESTS])
        .args(args)
        .arg(url)
        .output()
        .expect("tcpstall runs");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "probe --json prints JSON ({err}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

fn url(tls: bool, port: u16) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://127.0.0.1:{port}/index.html")
}

/// The stall behind the server, as every report of it must say it.
fn assert_upstream(v: &Value) {
    assert_eq!(v["verdict"], "stall", "{v}");
    assert_eq!(v["culprit"], "upstream", "{v}");
    assert!(v["p50_ms"].as_f64() >= Some(support::STALL_MIN_MS), "{v}");
    let hop = v["hop"].as_str().unwrap_or("");
    assert!(hop.contains("behind the server"), "{v}");
    let why = v["explanation"].as_str().unwrap_or("");
    assert!(!why.contains("client's delayed ACK"), "{v}");
    // The proxy's delayed ACK (named when the proxy is on this host) releases it.
    assert!(
        why.contains("delayed ACK of the proxy") || why.contains("that of the"),
        "{v}"
    );
    // Our quick ACKs cannot reach that hop: the confirmation says what it tested and what not.
    assert_eq!(v["confirmed"], Value::Null, "{v}");
    assert!(v["confirmation"]["tested"].is_string(), "{v}");
    assert!(v["confirmation"]["untested"].is_string(), "{v}");
    assert!(
        !v["upstream"]["fix"].as_array().expect("fix").is_empty(),
        "{v}"
    );
    assert_eq!(v["upstream"]["peer_stack"], "linux", "{v}");
}

/// Proxy on loopback in front of a splitting backend here: the backend named, with its writes.
fn stall_named_on_loopback(kind: Proxy, tls: bool) {
    let scratch = Scratch::new(&format!("{kind:?}-{tls}"));
    let app = backend(&scratch, false, None, "127.0.0.1");
    let front = proxy(kind, &scratch, &app.address, tls, None);
    let args: &[&str] = if tls {
        &["--insecure", "--fail-on-stall"]
    } else {
        &["--fail-on-stall"]
    };
    let (code, v) = probe(None, false, args, &url(tls, front.port));
    assert_eq!(
        code, 1,
        "--fail-on-stall exits 1 on a stall behind the server: {v}"
    );
    assert_upstream(&v);
    let up = &v["upstream"];
    assert_eq!(up["backend"]["pid"], app.child.0.id(), "{v}");
    assert_eq!(up["backend"]["command"], "python3", "{v}");
    assert_eq!(up["backend"]["runtime"]["name"], "CPython", "{v}");
    assert!(
        v["advice"]
            .to_string()
            .contains("for good, in the program (CPython"),
        "the backend's own switch: {v}"
    );
    assert_eq!(up["address"], app.address.as_str(), "{v}");
    assert!(up["writes"].as_array().map_or(0, Vec::len) >= 2, "{v}");
    let proxy_command = if kind == Proxy::Nginx {
        "nginx"
    } else {
        "haproxy"
    };
    assert_eq!(up["proxy"]["command"], proxy_command, "{v}");
    let fix = up["fix"].to_string();
    assert!(
        fix.contains(&format!("tcpstall fix {}", app.child.0.id())),
        "{v}"
    );
    assert!(fix.contains("--delack-max"), "{v}");
}

/// The same proxy in front of a backend with TCP_NODELAY: nothing waits.
fn clean_with_nodelay_backend(kind: Proxy, tls: bool) {
    let scratch = Scratch::new(&format!("{kind:?}-{tls}-nodelay"));
    let app = backend(&scratch, true, None, "127.0.0.1");
    let front = proxy(kind, &scratch, &app.address, tls, None);
    let args: &[&str] = if tls {
        &["--insecure", "--fail-on-stall"]
    } else {
        &["--fail-on-stall"]
    };
    let (code, v) = probe(None, false, args, &url(tls, front.port));
    assert_eq!(v["upstream"], Value::Null, "{v}");
    assert!(v["p50_ms"].as_f64() < Some(20.0), "{v}");
    if tls {
        // The TLS handshake's last flight may be held once by the probe's own Nagle (the
        // handshake's, not the answers'): what matters is that nothing is blamed behind.
        assert_ne!(v["culprit"], "upstream", "{v}");
    } else {
        assert_eq!(code, 0, "{v}");
        assert_eq!(v["verdict"], "clean", "{v}");
        assert_eq!(v["culprit"], Value::Null, "{v}");
    }
}

/// `kind` in front of a splitting backend (a stall upstream, the backend named), then in front
/// of a NODELAY one (clean); skipped, with the reason, when `test` cannot run here.
fn split_then_nodelay(test: &str, kind: Proxy, tls: bool) {
    if ready(test) {
        stall_named_on_loopback(kind, tls);
        clean_with_nodelay_backend(kind, tls);
    }
}

#[test]
fn haproxy_in_front_of_a_splitting_backend_is_a_stall_upstream() {
    let _serial = support::serial();
    split_then_nodelay("haproxy over http", Proxy::Haproxy, false);
}

#[test]
fn haproxy_with_tls_at_the_proxy() {
    let _serial = support::serial();
    split_then_nodelay("haproxy over https", Proxy::Haproxy, true);
}

#[test]
fn nginx_keepalive_upstream_is_a_stall_upstream() {
    let _serial = support::serial();
    split_then_nodelay("nginx over http", Proxy::Nginx, false);
}

#[test]
fn nginx_with_tls_at_the_proxy() {
    let _serial = support::serial();
    split_then_nodelay("nginx over https", Proxy::Nginx, true);
}

#[test]
fn haproxy_http_no_delay_blames_the_proxys_ack_not_ours() {
    let _serial = support::serial();
    // haproxy forwards the header at once: our connection sees the answer in two parts, our
    // delayed ACK between them. The release still waits for the proxy's ACK upstream.
    if ready("haproxy_http_no_delay_blames_the_proxys_ack_not_ours") {
        stall_named_on_loopback(Proxy::HaproxyNoDelay, false);
    }
}

/// `tcpstall fix ARGS --yes`, which must succeed unless the kernel refuses the option: whether
/// it was applied.
fn fix(args: &[&str]) -> bool {
    let out = Command::new(BIN)
        .arg("fix")
        .args(args)
        .arg("--yes")
        .output()
        .expect("tcpstall runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("lacks TCP_DELACK_MAX_US") {
        eprintln!("fix {args:?} not applied: this kernel has no TCP_DELACK_MAX_US ({stderr})");
        return false;
    }
    assert!(out.status.success(), "fix {args:?}: {stderr}");
    true
}

#[test]
fn the_fixes_the_probe_names_remove_the_stall() {
    let _serial = support::serial();
    if !ready("the_fixes_the_probe_names_remove_the_stall") {
        return;
    }
    let scratch = Scratch::new("fixes");
    let app = backend(&scratch, false, None, "127.0.0.1");
    let front = proxy(Proxy::Haproxy, &scratch, &app.address, false, None);
    let target = url(false, front.port);
    let (_, v) = probe(None, false, &[], &target);
    assert_upstream(&v);
    let (proxy_pid, backend_pid) = (
        v["upstream"]["proxy"]["pid"].to_string(),
        v["upstream"]["backend"]["pid"].to_string(),
    );
    let port = app.address.rsplit(':').next().expect("a port").to_string();
    // The proxy's upstream connections ACK within the cap (8 ms at HZ=250) instead of 40 ms.
    if fix(&[&proxy_pid, "--port", &port, "--delack-max", "5ms"]) {
        let (_, v) = probe(None, false, &[], &target);
        assert_eq!(v["culprit"], Value::Null, "{v}");
        assert!(v["p50_ms"].as_f64() < Some(support::STALL_MIN_MS), "{v}");
    }
    // TCP_NODELAY on the backend: nothing waits.
    assert!(fix(&[&backend_pid, "--port", &port]));
    let (code, v) = probe(None, false, &["--fail-on-stall"], &target);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["verdict"], "clean", "{v}");
    assert!(v["p50_ms"].as_f64() < Some(10.0), "{v}");
}

#[test]
fn without_capture_the_timing_alone_tells() {
    let _serial = support::serial();
    if !ready("without_capture_the_timing_alone_tells") {
        return;
    }
    let scratch = Scratch::new("no-net-raw");
    let app = backend(&scratch, false, None, "127.0.0.1");
    let front = proxy(Proxy::Haproxy, &scratch, &app.address, false, None);
    let (code, v) = probe(None, true, &["--fail-on-stall"], &url(false, front.port));
    // A timer's shape with no hold seen (no capture of the proxy's connection behind it): no
    // stall claimed, the suspect named, and what would settle it.
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["evidence_source"], "socket", "{v}");
    assert_eq!(v["verdict"], "undecided", "{v}");
    assert_eq!(v["culprit"], Value::Null, "{v}");
    assert!(
        v["hop"]
            .as_str()
            .unwrap_or("")
            .contains("behind the server"),
        "{v}"
    );
    assert_eq!(v["upstream"]["backend"], Value::Null, "{v}");
    assert_eq!(v["upstream"]["timer"]["stack"], "linux", "{v}");
    let settle = v["undecided"].as_str().unwrap_or("");
    assert!(
        settle.contains("CAP_NET_RAW") && settle.contains("watch --kernel"),
        "{v}"
    );
}

#[test]
fn a_backend_taking_its_own_time_is_not_a_timer() {
    let _serial = support::serial();
    // Slow answers, but spread over 33-70 ms like work, not on a delayed-ACK timer; and one
    // 45 ms answer among quick ones. Neither is blamed behind the server.
    if !ready("a_backend_taking_its_own_time_is_not_a_timer") {
        return;
    }
    for think in [
        "0,35,52,41,60,38,70,47,33,55,64,36",
        "0,0,0,0,0,45,0,0,0,0,0,0",
    ] {
        let scratch = Scratch::new("think");
        let app = backend_with(&scratch, true, None, "127.0.0.1", &["--think", think]);
        let front = proxy(Proxy::Haproxy, &scratch, &app.address, false, None);
        let (code, v) = probe(None, false, &["--fail-on-stall"], &url(false, front.port));
        assert_eq!(code, 0, "{v}");
        // Slow (p50 over a stall's worth) or not, never a stall.
        let slow = v["p50_ms"].as_f64() >= Some(support::STALL_MIN_MS);
        assert_eq!(v["verdict"], if slow { "slow" } else { "clean" }, "{v}");
        assert_eq!(v["culprit"], Value::Null, "{v}");
        assert_eq!(v["upstream"], Value::Null, "{v}");
    }
}

/// Three network namespaces in a row, deleted on drop: the client's, joined by a veth pair
/// (10.213.8.1 and .2) to the proxy's, joined by another (10.213.7.1 and .2) to the backend's.
struct Namespaces {
    client: String,
    proxy: String,
    backend: String,
}

/// The proxy's address seen from the client's namespace.
const PROXY_FROM_CLIENT: &str = "10.213.8.2";
/// The backend's address in its namespace.
const BACKEND_ADDRESS: &str = "10.213.7.2";

impl Namespaces {
    fn create(tag: &str) -> Namespaces {
        let id = std::process::id();
        let name = |role: &str| format!("tcpstall-px{role}-{tag}-{id}");
        let ns = Namespaces {
            client: name("c"),
            proxy: name("p"),
            backend: name("b"),
        };
        let run = |args: &[&str]| {
            let out = Command::new("ip")
                .args(args)
                .output()
                .expect("ip runs (iproute2)");
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        // Each made before it is configured, so that a half-made set-up is removed too.
        for name in [&ns.client, &ns.proxy, &ns.backend] {
            run(&["netns", "add", name]);
            run(&["-n", name, "link", "set", "lo", "up"]);
        }
        let (c, p, b) = (ns.client.as_str(), ns.proxy.as_str(), ns.backend.as_str());
        for (near, near_veth, near_ip, far, far_veth, far_ip) in [
            (c, "veth2", "10.213.8.1/24", p, "veth3", "10.213.8.2/24"),
            (p, "veth0", "10.213.7.1/24", b, "veth1", "10.213.7.2/24"),
        ] {
            run(&[
                "-n", near, "link", "add", near_veth, "type", "veth", "peer", "name", far_veth,
                "netns", far,
            ]);
            for (name, veth, ip) in [(near, near_veth, near_ip), (far, far_veth, far_ip)] {
                run(&["-n", name, "addr", "add", ip, "dev", veth]);
                run(&["-n", name, "link", "set", veth, "up"]);
            }
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in [&self.client, &self.proxy, &self.backend] {
            let _ = Command::new("ip").args(["netns", "delete", name]).output();
        }
    }
}

#[test]
fn a_backend_in_another_namespace_seen_from_the_proxy_and_from_afar() {
    let _serial = support::serial();
    if !ready("a_backend_in_another_namespace_seen_from_the_proxy_and_from_afar") {
        return;
    }
    for kind in [Proxy::Haproxy, Proxy::Nginx] {
        let scratch = Scratch::new(&format!("{kind:?}-netns"));
        // Declared before the servers, so dropped after them: they stop before their
        // namespaces go.
        let ns = Namespaces::create(if kind == Proxy::Nginx { "n" } else { "h" });
        let app = backend(&scratch, false, Some(&ns.backend), BACKEND_ADDRESS);
        let front = proxy(kind, &scratch, &app.address, false, Some(&ns.proxy));
        let proxy_command = if kind == Proxy::Nginx {
            "nginx"
        } else {
            "haproxy"
        };

        // On the proxy's host: the hold is seen on the proxy's connection leaving by its
        // interface, the backend named by its address (its process is not on this host).
        let (code, v) = probe(Some(&ns.proxy), false, &[], &url(false, front.port));
        assert_eq!(code, 0, "{v}");
        assert_upstream(&v);
        let up = &v["upstream"];
        assert_eq!(up["proxy"]["command"], proxy_command, "{v}");
        assert_eq!(up["address"], app.address.as_str(), "{v}");
        assert_eq!(up["backend"], Value::Null, "{v}");
        assert!(up["writes"].as_array().map_or(0, Vec::len) >= 2, "{v}");

        // From another host: the proxy is remote too, only the timing tells, which proves no
        // hold: undecided, the suspect named, and where to look to settle it.
        let remote = format!("http://{PROXY_FROM_CLIENT}:{}/index.html", front.port);
        let (code, v) = probe(Some(&ns.client), false, &["--fail-on-stall"], &remote);
        assert_eq!(code, 0, "{v}");
        // A busy host may spread the waits off the timer's shape: then it is slow, still no
        // stall.
        assert_eq!(v["culprit"], Value::Null, "{v}");
        assert_ne!(v["verdict"], "stall", "{v}");
        if v["verdict"] == "undecided" {
            assert!(
                v["hop"]
                    .as_str()
                    .unwrap_or("")
                    .contains("behind the server"),
                "{v}"
            );
            assert!(
                v["undecided"]
                    .as_str()
                    .unwrap_or("")
                    .contains("on the server's host"),
                "{v}"
            );
            let up = &v["upstream"];
            assert_eq!(up["proxy"], Value::Null, "{v}");
            assert_eq!(up["backend"], Value::Null, "{v}");
            assert_eq!(up["timer"]["stack"], "linux", "{v}");
            assert!(up["unwatched"].is_string(), "{v}");
        } else {
            assert_eq!(v["verdict"], "slow", "{v}");
        }
        drop(front);
        drop(app);
    }
}
