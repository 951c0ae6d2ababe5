//! `tcpstall probe` against real servers started here and stopped after (even when a test
//! fails): CPython's http.server with keep-alive (header and body in two writes: a stall,
//! the server to blame, and QUICKACK re-armed removes it), the same behind TLS, nginx,
//! memcached and redis-server (clean), a line server, and servers that misbehave. Verdicts,
//! culprits and confirmations are asserted, not timings. Every target is on loopback.
//!
//! Run as root the probe captures its own packets; the `*_without_capture` tests drop
//! CAP_NET_RAW with setpriv to cover the socket-only diagnosis.

mod support;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{self_signed, spawn_printing_port, KillOnDrop};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
}

/// A directory removed when the test ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("tcpstall-probe-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server child and its port.
struct Server {
    _child: KillOnDrop,
    port: u16,
}

/// Starts a Python server that prints its port on its first line.
fn python_server(script: &str, args: &[&str]) -> Server {
    let (child, port) = spawn_printing_port(
        Command::new("python3").arg(fixture(script)).args(args),
        script,
    );
    Server {
        _child: child,
        port,
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Starts a server that takes its port on the command line (`make` builds the command for a
/// port), and waits until it accepts; a port taken meanwhile by another program is retried.
fn listening_server(make: impl Fn(u16) -> Command) -> Server {
    for _ in 0..3 {
        let port = free_port();
        let mut child = KillOnDrop(
            make(port)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("the server program is installed (scripts/install-deps)"),
        );
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Server {
                    _child: child,
                    port,
                };
            }
            if child.0.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("the server did not start listening");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// How the probe is run.
#[derive(Clone, Copy, PartialEq)]
enum Privilege {
    /// As the test runs (root: with a capture).
    AsIs,
    /// Without CAP_NET_RAW, so without a capture.
    NoNetRaw,
}

fn run_probe(privilege: Privilege, args: &[&str]) -> Output {
    let mut command = match privilege {
        Privilege::AsIs => Command::new(BIN),
        Privilege::NoNetRaw => support::without_net_raw(BIN),
    };
    command
        .arg("probe")
        .args(args)
        .output()
        .expect("tcpstall runs")
}

/// `probe --json ARGS`: exit status, the JSON (null when none was printed), stderr.
fn probe_json(privilege: Privilege, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = run_probe(privilege, &all);
    let json = if out.stdout.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!(
                "probe --json prints JSON ({err}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    };
    (
        out.status.code().unwrap_or(-1),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn url(scheme: &str, port: u16) -> String {
    match scheme {
        "http" | "https" => format!("{scheme}://127.0.0.1:{port}/index.html"),
        _ => format!("{scheme}://127.0.0.1:{port}"),
    }
}

/// A directory with a small file for http.server to serve.
fn web_root() -> TempDir {
    let dir = TempDir::new(&format!("www-{}", free_port()));
    std::fs::write(dir.0.join("index.html"), "hello from http.server\n").expect("write a file");
    dir
}

/// The evidence source the run must have used: a capture as root, the socket otherwise.
fn expected_source(privilege: Privilege) -> &'static str {
    if privilege == Privilege::AsIs && is_root() {
        "capture"
    } else {
        "socket"
    }
}

fn assert_server_stall_confirmed(v: &Value, privilege: Privilege) {
    assert_eq!(v["verdict"], "stall", "{v}");
    assert_eq!(v["culprit"], "server", "{v}");
    assert!(v["stalls"]["nagle_delayed_ack"].as_u64() >= Some(1), "{v}");
    assert!(
        v["evidence"]["delay_ms"].as_f64() >= Some(support::STALL_MIN_MS),
        "{v}"
    );
    assert_eq!(v["evidence"]["held_side"], "server", "{v}");
    assert_eq!(
        v["confirmed"], true,
        "QUICKACK re-armed must remove the stall: {v}"
    );
    assert_eq!(v["confirmation"]["remedy"], "quickack", "{v}");
    assert_eq!(v["evidence_source"], expected_source(privilege), "{v}");
    assert!(!v["advice"].as_array().expect("advice").is_empty(), "{v}");
}

fn assert_clean(v: &Value) {
    assert_eq!(v["verdict"], "clean", "{v}");
    assert_eq!(v["culprit"], Value::Null, "{v}");
    assert_eq!(v["confirmed"], Value::Null, "{v}");
    assert_eq!(v["stalls"]["nagle_delayed_ack"], 0, "{v}");
    assert_eq!(v["requests"], 20, "{v}");
}

/// Probes CPython's keep-alive http.server: a stall, the server to blame, confirmed. Returns
/// the report and the server's pid.
fn probe_http_server(privilege: Privilege) -> (Value, u32) {
    let root = web_root();
    let server = python_server("probe/http_server.py", &[root.0.to_str().unwrap()]);
    let (code, v, err) = probe_json(privilege, &[&url("http", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_server_stall_confirmed(&v, privilege);
    (v, server._child.0.id())
}

#[test]
fn http_server_keep_alive_stalls_and_quickack_removes_it() {
    let (v, pid) = probe_http_server(Privilege::AsIs);
    assert_eq!(v["requests"], 20, "{v}");
    // The server is on this host: the live fix names its pid, as `watch` names owners.
    let fix = format!("tcpstall fix {pid} --port");
    let advice = v["advice"].as_array().cloned().unwrap_or_default();
    assert!(
        advice
            .iter()
            .any(|a| a.as_str().unwrap_or("").contains(&fix)),
        "{v}"
    );
    if is_root() {
        let hop = v["hop"].as_str().unwrap_or("");
        assert!(hop.contains(&format!("pid {pid} (python3)")), "{v}");
        assert!(hop.contains(&fix) && !hop.contains("PID"), "{v}");
        // The detector saw the header and body as two writes of the server.
        assert!(
            v["evidence"]["held_writes"].as_array().map_or(0, Vec::len) >= 2,
            "{v}"
        );
        assert!(v["hop"].as_str().unwrap_or("").contains("this host"), "{v}");
        // The stalled turn: our request, the server's first part, our delayed ACK, the release.
        let segments = v["evidence"]["segments"].as_array().expect("segments");
        let last = segments.last().expect("a segment");
        assert_eq!(last["from"], "server", "{v}");
        assert!(
            last["what"].as_str().unwrap_or("").starts_with("released"),
            "{v}"
        );
        assert!(
            segments
                .iter()
                .any(|s| s["from"] == "client" && s["bytes"] == 0),
            "{v}"
        );
    }
}

#[test]
fn http_server_stall_without_capture() {
    let (v, _) = probe_http_server(Privilege::NoNetRaw);
    let notes = v["notes"].to_string();
    assert!(notes.contains("weaker diagnosis"), "{v}");
    // No capture, yet the server's address is known: the route fix names it.
    let advice = v["advice"].to_string();
    assert!(
        advice.contains("tcpstall fix --route 127.0.0.1 --quickack"),
        "{advice}"
    );
    assert!(!advice.contains("<the server's address>"), "{advice}");
}

#[test]
fn fail_on_stall_exits_1_and_text_names_the_culprit() {
    let server = python_server("process/split_server.py", &[]);
    let out = run_probe(
        Privilege::AsIs,
        &[
            "--fail-on-stall",
            "--requests",
            "8",
            &url("http", server.port),
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("verdict: stall"), "{text}");
    assert!(text.contains("culprit: server"), "{text}");
    assert!(text.contains("confirmed: the stall vanished"), "{text}");
    let single = python_server("process/split_server.py", &["--single-write"]);
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &["--fail-on-stall", &url("http", single.port)],
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
}

#[test]
fn split_server_without_capture() {
    let server = python_server("process/split_server.py", &[]);
    let (code, v, err) = probe_json(Privilege::NoNetRaw, &[&url("http", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_server_stall_confirmed(&v, Privilege::NoNetRaw);
    let single = python_server("process/split_server.py", &["--single-write"]);
    let (code, v, err) = probe_json(Privilege::NoNetRaw, &[&url("http", single.port)]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
}

#[test]
fn https_stalls_the_same_way_and_an_untrusted_certificate_is_a_clear_error() {
    let root = web_root();
    let (cert, key) = self_signed(&root.0);
    let server = python_server(
        "probe/http_server.py",
        &[
            root.0.to_str().unwrap(),
            "--tls",
            cert.to_str().unwrap(),
            key.to_str().unwrap(),
        ],
    );
    let (code, v, err) = probe_json(Privilege::AsIs, &["--insecure", &url("https", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_server_stall_confirmed(&v, Privilege::AsIs);

    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("https", server.port)]);
    assert_eq!(code, 2, "{v}");
    assert!(
        err.contains("certificate") && err.contains("--insecure"),
        "{err}"
    );
}

/// nginx answering `hello from nginx` on a free port, keep-alive, in one process
/// (master_process off: killing it at the end leaves no worker behind); `tls` serves https
/// with that certificate and key and those protocols (`TLSv1.2`, `TLSv1.3`); `directives` go
/// into the server block.
fn nginx(dir: &TempDir, tls: Option<(&Path, &Path, &str)>, directives: &str) -> Server {
    let prefix = dir.0.clone();
    let ssl = tls.map_or(String::new(), |(cert, key, protocols)| {
        format!(
            " ssl; ssl_certificate {}; ssl_certificate_key {}; ssl_protocols {protocols}",
            cert.display(),
            key.display()
        )
    });
    listening_server(|port| {
        let conf = prefix.join(format!("nginx-{port}.conf"));
        let p = prefix.display();
        std::fs::write(
            &conf,
            format!(
                "daemon off; master_process off; worker_processes 1; pid {p}/nginx-{port}.pid; error_log {p}/error.log;\n\
                 events {{ worker_connections 64; }}\n\
                 http {{ access_log off; client_body_temp_path {p}/body; proxy_temp_path {p}/proxy;\n\
                 fastcgi_temp_path {p}/fastcgi; uwsgi_temp_path {p}/uwsgi; scgi_temp_path {p}/scgi;\n\
                 server {{ listen 127.0.0.1:{port}{ssl}; {directives} location / {{ return 200 \"hello from nginx\\n\"; }} }} }}\n"
            ),
        )
        .expect("write the nginx configuration");
        let mut c = Command::new("nginx");
        c.arg("-c").arg(&conf).arg("-p").arg(&prefix);
        c
    })
}

#[test]
fn http_error_answers_are_errors_not_clean() {
    // A 404 from http.server, and nginx's 400 to `http://` sent to its TLS port: said with
    // status and count, exit 2 (also with --fail-on-stall); on the TLS port, https:// is named.
    let root = web_root();
    let server = python_server("probe/http_server.py", &[root.0.to_str().unwrap()]);
    let missing = format!("http://127.0.0.1:{}/no-such-file", server.port);
    let (code, v, err) = probe_json(Privilege::AsIs, &["--fail-on-stall", &missing]);
    assert_eq!(code, 2, "{v} {err}");
    assert_eq!(v["verdict"], "error", "{v}");
    assert_eq!(v["http_errors"][0]["status"], 404, "{v}");
    assert_eq!(v["http_errors"][0]["count"], 20, "{v}");
    assert!(err.contains("404"), "{err}");
    let out = run_probe(Privilege::AsIs, &["--requests", "3", &missing]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(!text.contains("verdict: clean"), "{text}");
    assert!(text.contains("verdict: error"), "{text}");

    let dir = TempDir::new(&format!("nginx-tls-{}", free_port()));
    let (cert, key) = self_signed(&dir.0);
    let tls = nginx(&dir, Some((&cert, &key, "TLSv1.2 TLSv1.3")), "");
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &["--requests", "3", "--fail-on-stall", &url("http", tls.port)],
    );
    assert_eq!(code, 2, "{v} {err}");
    assert_eq!(v["verdict"], "error", "{v}");
    assert_eq!(v["http_errors"][0]["status"], 400, "{v}");
    assert!(
        v["notes"]
            .to_string()
            .contains(&format!("https://127.0.0.1:{}/index.html", tls.port)),
        "{v}"
    );
}

#[test]
fn nginx_is_clean() {
    let dir = TempDir::new(&format!("nginx-{}", free_port()));
    let server = nginx(&dir, None, "");
    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("http", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
}

/// `probe --insecure --connections C --requests R --fail-on-stall` of the https server on
/// `port`, which must succeed with a run whose every request was answered quickly: clean,
/// nobody to blame, and the note that the server closes its connections only when `closes`.
fn assert_https_clean(port: u16, connections: u16, requests: u64, closes: bool) -> Value {
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &[
            "--insecure",
            "--connections",
            &connections.to_string(),
            "--requests",
            &requests.to_string(),
            "--fail-on-stall",
            &url("https", port),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["verdict"], "clean", "{v}");
    assert_eq!(v["culprit"], Value::Null, "{v}");
    assert_eq!(v["stalls"]["nagle_delayed_ack"], 0, "{v}");
    assert_eq!(v["requests"], requests, "{v}");
    assert_eq!(
        v["evidence_source"],
        expected_source(Privilege::AsIs),
        "{v}"
    );
    let notes = v["notes"].to_string();
    assert_eq!(notes.contains("closed the connection"), closes, "{v}");
    v
}

#[test]
fn the_probes_own_tls_handshake_is_no_stall_of_nginx() {
    // The handshake's records written one by one would let Nagle hold our own key exchange
    // and Finished until nginx's delayed ACK, outside any timed request.
    let dir = TempDir::new(&format!("nginx-tls-{}", free_port()));
    let (cert, key) = self_signed(&dir.0);
    for protocols in ["TLSv1.2", "TLSv1.3"] {
        let server = nginx(&dir, Some((&cert, &key, protocols)), "");
        assert_https_clean(server.port, 1, 10, false);
        // Four connections the probe opened itself, kept alive: nothing the server forced.
        let v = assert_https_clean(server.port, 4, 4, false);
        assert_eq!(v["connections"], 4, "{v}");
    }
    // A connection per request, each resuming the first one's TLS 1.2 session: our Finished
    // is the last flight, and the request must not wait behind it for nginx's delayed ACK.
    let server = nginx(
        &dir,
        Some((&cert, &key, "TLSv1.2")),
        "keepalive_requests 1;",
    );
    let v = assert_https_clean(server.port, 1, 10, true);
    assert_eq!(v["connections"], 10, "{v}");
}

#[test]
fn openssl_s_server_closing_after_each_answer_is_clean() {
    // `s_server -www` (TLS 1.3) answers each request on its own connection and closes it: a
    // handshake before every request, and the note that the server closes its connections.
    let dir = TempDir::new(&format!("s_server-{}", free_port()));
    let (cert, key) = self_signed(&dir.0);
    let server = listening_server(|port| {
        let mut c = Command::new("openssl");
        c.args(["s_server", "-quiet", "-www", "-tls1_3", "-accept"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key);
        c
    });
    let v = assert_https_clean(server.port, 1, 5, true);
    assert_eq!(v["connections"], 5, "{v}");
}

#[test]
fn a_split_request_is_the_clients_own_stall() {
    // The server answers in one write once the whole request is in; our head and body go in
    // two writes, and Nagle holds the body until the server's delayed ACK of the head.
    let server = python_server("process/split_server.py", &["--single-write"]);
    for privilege in [Privilege::AsIs, Privilege::NoNetRaw] {
        let (code, v, err) = probe_json(
            privilege,
            &[
                "--method",
                "POST",
                "--body-size",
                "2000",
                "--split-request",
                &url("http", server.port),
            ],
        );
        assert_eq!(code, 0, "{err}");
        assert_eq!(v["verdict"], "stall", "{v}");
        assert_eq!(v["culprit"], "client", "{v}");
        assert_eq!(v["evidence_source"], expected_source(privilege), "{v}");
        assert_eq!(v["confirmation"]["remedy"], "nodelay", "{v}");
        assert_eq!(v["confirmed"], true, "{v}");
    }
}

#[test]
fn memcached_is_clean() {
    let server = listening_server(|port| {
        let mut c = Command::new("memcached");
        c.args([
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-u",
            "nobody",
            "-p",
            &port.to_string(),
        ]);
        c
    });
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &["--size", "4000", &url("memcached", server.port)],
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
}

/// A redis-server on a free loopback port.
fn redis_server() -> Server {
    redis_server_with(&[])
}

/// A redis-server on a free loopback port, with these options besides.
fn redis_server_with(options: &[&str]) -> Server {
    listening_server(|port| {
        let mut c = Command::new("redis-server");
        c.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(options);
        c
    })
}

#[test]
fn redis_is_clean() {
    let server = redis_server();
    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("redis", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    let (code, v, err) = probe_json(Privilege::NoNetRaw, &[&url("redis", server.port)]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    assert_eq!(v["evidence_source"], "socket", "{v}");
}

/// A password, as redis-server and http.server are given it, and as the URL writes it.
const PASSWORD: &str = "pa@ss:w rd";
const PASSWORD_IN_URL: &str = "pa%40ss%3Aw%20rd";

/// Neither spelling of [`PASSWORD`] appears in `text` (`what` names it for the failure).
fn assert_password_hidden(what: &str, text: &str) {
    for secret in [PASSWORD, PASSWORD_IN_URL, "pa@ss", "pa%40ss"] {
        assert!(!text.contains(secret), "{what} shows the password: {text}");
    }
}

/// `redis-cli` against `port` as `user` (empty: the password alone): the reply of `args`.
fn redis_cli(port: u16, user: &str, args: &[&str]) -> String {
    let mut c = Command::new("redis-cli");
    c.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .env("REDISCLI_AUTH", PASSWORD);
    if !user.is_empty() {
        c.args(["--user", user]);
    }
    let out = c.args(args).output().expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A redis-server with `requirepass`: without the password the probe stops (exit 2) saying
/// how to give it, a wrong one is said refused; given as `redis://:PASSWORD@…/3` (percent-
/// encoded), every request is answered, its SET landed in database 3, and the password is in
/// no report, text, JSON, page or error.
#[test]
fn a_redis_password_is_sent_selects_the_database_and_is_never_shown() {
    let server = redis_server_with(&["--requirepass", PASSWORD]);
    let port = server.port;
    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("redis", port)]);
    assert_eq!((code, &v), (2, &Value::Null), "{err}");
    assert!(err.contains("needs a password"), "{err}");
    assert!(
        err.contains(&format!("redis://:PASSWORD@127.0.0.1:{port}")),
        "{err}"
    );
    assert!(!err.contains("malformed"), "{err}");

    let wrong = format!("redis://:not-{PASSWORD_IN_URL}@127.0.0.1:{port}");
    let (code, _, err) = probe_json(Privilege::AsIs, &[&wrong]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("refused the credentials") && err.contains("WRONGPASS"),
        "{err}"
    );
    assert_password_hidden("the error", &err);

    let target = format!("redis://:{PASSWORD_IN_URL}@127.0.0.1:{port}/3");
    let shown = format!("redis://:***@127.0.0.1:{port}/3");
    let (code, v, err) = probe_json(Privilege::AsIs, &[&target]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    assert_eq!(v["target"], shown.as_str(), "{v}");
    assert_password_hidden("the JSON", &v.to_string());
    assert_password_hidden("stderr", &err);
    assert_eq!(
        redis_cli(port, "", &["-n", "3", "EXISTS", "tcpstall:probe"]),
        "1"
    );
    assert_eq!(
        redis_cli(port, "", &["-n", "0", "EXISTS", "tcpstall:probe"]),
        "0"
    );

    let page = std::env::temp_dir().join(format!("tcpstall-auth-{}.html", std::process::id()));
    let path = page.to_str().expect("utf-8 path");
    let out = run_probe(Privilege::NoNetRaw, &["--html", path, &target]);
    let html = std::fs::read_to_string(&page).expect("the page is written");
    let _ = std::fs::remove_file(&page);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&shown), "{text}");
    assert_password_hidden("the text report", &text);
    assert_password_hidden("stderr", &String::from_utf8_lossy(&out.stderr));
    assert!(
        unescape(&html).contains(&shown),
        "the page names the target"
    );
    assert_password_hidden("the page", &html);
    assert_password_hidden("the page", &unescape(&html));

    // The password from the environment, off the command line other users see in `ps`.
    let out = Command::new(BIN)
        .args(["probe", "--json", &url("redis", port)])
        .env("TCPSTALL_PASSWORD", PASSWORD)
        .output()
        .expect("tcpstall runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("probe --json prints JSON");
    assert_clean(&v);
    assert_eq!(
        v["target"],
        format!("redis://:***@127.0.0.1:{port}").as_str(),
        "{v}"
    );
    assert_password_hidden("the JSON", &v.to_string());
    assert_password_hidden("stderr", &String::from_utf8_lossy(&out.stderr));
}

/// ACL users (redis 6+, `AUTH user password`): the default user off, `alice` may SET and GET
/// the probe's key, `bob` only GET. alice's probe is answered; a wrong password, no
/// credentials and bob's missing permission are each said for what they are.
#[test]
fn redis_acl_users_authenticate_and_their_refusals_are_said() {
    let alice = format!(">{PASSWORD}");
    let server = redis_server_with(&[
        "--user",
        "default",
        "off",
        "--user",
        "alice",
        "on",
        &alice,
        "~tcpstall:*",
        "+set",
        "+get",
        "--user",
        "bob",
        "on",
        ">bob",
        "~*",
        "+get",
    ]);
    let port = server.port;
    let target = format!("redis://alice:{PASSWORD_IN_URL}@127.0.0.1:{port}");
    let (code, v, err) = probe_json(Privilege::AsIs, &[&target]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    assert_eq!(
        v["target"],
        format!("redis://alice:***@127.0.0.1:{port}").as_str()
    );
    assert_password_hidden("the JSON", &v.to_string());

    let (code, _, err) = probe_json(
        Privilege::AsIs,
        &[&format!("redis://alice:x@127.0.0.1:{port}")],
    );
    assert_eq!(code, 2);
    assert!(err.contains("refused the credentials"), "{err}");
    let (code, _, err) = probe_json(Privilege::AsIs, &[&url("redis", port)]);
    assert_eq!(code, 2);
    assert!(err.contains("needs a password"), "{err}");
    let (code, _, err) = probe_json(
        Privilege::AsIs,
        &[&format!("redis://bob:bob@127.0.0.1:{port}")],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("NOPERM") && err.contains("SET") && err.contains("ACL SETUSER"),
        "{err}"
    );
    // alice may only SET and GET: her probe's value (--size 100) is there.
    assert_eq!(
        redis_cli(port, "alice", &["GET", "tcpstall:probe"]),
        "v".repeat(100)
    );
}

/// `rediss://`: RESP over TLS to redis-server's own TLS port (Debian's redis-server is built
/// with TLS), the password and a database given: answered, clean (the TLS handshake and the
/// AUTH, SELECT and SET before the timed requests are not counted); without --insecure the
/// self-signed certificate is the clear error it is for https; `redis://` to that port is
/// told to write `rediss://`.
#[test]
fn rediss_speaks_resp_over_tls_with_credentials() {
    let dir = TempDir::new(&format!("rediss-{}", free_port()));
    let (cert, key) = self_signed(&dir.0);
    let server = listening_server(|port| {
        let mut c = Command::new("redis-server");
        c.args(["--port", "0", "--tls-port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--tls-cert-file")
            .arg(&cert)
            .arg("--tls-key-file")
            .arg(&key)
            .args(["--tls-auth-clients", "no", "--requirepass", PASSWORD]);
        c
    });
    let target = format!("rediss://:{PASSWORD_IN_URL}@127.0.0.1:{}/2", server.port);
    let (code, v, err) = probe_json(Privilege::AsIs, &["--insecure", &target]);
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    assert_eq!(
        v["target"],
        format!("rediss://:***@127.0.0.1:{}/2", server.port).as_str()
    );
    assert_password_hidden("the JSON", &v.to_string());

    let (code, _, err) = probe_json(Privilege::AsIs, &[&target]);
    assert_eq!(code, 2);
    assert!(
        err.contains("certificate") && err.contains("--insecure"),
        "{err}"
    );
    assert_password_hidden("the error", &err);
    // RESP in the clear to the TLS port: redis-server drops it without a word.
    let plain = target.replacen("rediss", "redis", 1);
    let (code, _, err) = probe_json(Privilege::AsIs, &[&plain]);
    assert_eq!(code, 2);
    assert!(
        err.contains("if the port speaks TLS, write rediss://"),
        "{err}"
    );
    assert_password_hidden("the error", &err);
}

/// HTTP Basic: http.server answering 401 unless the request carries the user and password.
/// Without credentials the report says the server wants them and how to write them; wrong
/// ones are said refused; the right ones, percent-encoded in the URL, reach the file (and its
/// keep-alive stall, which the 401s, written in one call, do not have).
#[test]
fn http_basic_credentials_from_the_url() {
    let root = web_root();
    let pair = format!("tc@user:{PASSWORD}");
    let server = python_server(
        "probe/http_server.py",
        &[root.0.to_str().unwrap(), "--basic", &pair],
    );
    let port = server.port;
    let notes = |v: &Value| v["notes"].to_string();
    // A 401 is an error answer: said, and exit 2, also with --fail-on-stall.
    let (code, v, err) = probe_json(Privilege::AsIs, &["--fail-on-stall", &url("http", port)]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["verdict"], "error", "{v}");
    assert_eq!(v["http_errors"][0]["status"], 401, "{v}");
    assert_eq!(v["http_errors"][0]["count"], 20, "{v}");
    assert!(err.contains("401"), "{err}");
    assert!(notes(&v).contains("wants credentials"), "{v}");
    assert!(
        notes(&v).contains(&format!("http://USER:PASSWORD@127.0.0.1:{port}/index.html")),
        "{v}"
    );
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &[&format!(
            "http://tc%40user:wrong@127.0.0.1:{port}/index.html"
        )],
    );
    assert_eq!(code, 2, "{err}");
    assert_eq!(v["verdict"], "error", "{v}");
    assert!(notes(&v).contains("refused the credentials"), "{v}");

    let _serial = support::serial();
    let target = format!("http://tc%40user:{PASSWORD_IN_URL}@127.0.0.1:{port}/index.html");
    let (code, v, err) = probe_json(Privilege::AsIs, &[&target]);
    assert_eq!(code, 0, "{err}");
    assert!(!notes(&v).contains("401"), "{v}");
    assert_server_stall_confirmed(&v, Privilege::AsIs);
    assert_eq!(
        v["target"],
        format!("http://tc%40user:***@127.0.0.1:{port}/index.html").as_str()
    );
    assert_password_hidden("the JSON", &v.to_string());
    assert_password_hidden("stderr", &err);
}

/// The pipelining probes' load: 16 requests a batch, 100 batches, on four connections from one
/// thread (with one, whether the kernel holds at all depends on whether redis answers the
/// first command before the next is written: scheduling).
const PIPELINING: [&str; 6] = [
    "--pipeline",
    "16",
    "--connections",
    "4",
    "--requests",
    "100",
];

/// A pipelining probe against redis (16 GETs a batch on each of 4 connections, each its own
/// write, no TCP_NODELAY): with a capture the detector finds the probe's own writes paced by ACKs; without one the
/// socket sees most of the later writes kept back by the kernel. Either way the TCP_NODELAY
/// re-run answers as many requests and its throughput is reported (gain or loss, as measured).
#[test]
fn pipelining_probe_against_redis_finds_its_writes_paced() {
    let _serial = support::serial();
    let server = redis_server();
    let target = url("redis", server.port);
    let args = [PIPELINING.as_slice(), &[target.as_str()]].concat();
    let (code, v, err) = probe_json(Privilege::AsIs, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (v["pipeline"].as_u64(), v["requests"].as_u64()),
        (Some(16), Some(100)),
        "{v}"
    );
    assert_eq!(v["stalls"]["nagle_delayed_ack"], 0, "{v}");
    let paced = &v["ack_paced"];
    if is_root() {
        assert_eq!(v["evidence_source"], "capture", "{v}");
        // The kernel kept most later writes back (TCP_INFO after each write).
        assert!(
            paced["held_writes"].as_u64().unwrap_or(0) * 2 > 1500,
            "{paced}"
        );
        // On loopback the capture proves a hold only when its release leaves within the
        // softirq bound of the ACK; a release the kernel runs from the socket's backlog (the
        // probe still inside its next write) is not proven, so how many holds a run proves
        // varies. Whatever is claimed is the probe's side, never redis's (TCP_NODELAY).
        let sides = paced["sides"].as_array().expect("sides");
        for side in sides {
            assert_eq!(side["held_side"], "client", "{paced}");
            assert!(side["holds"].as_u64() >= Some(17), "{paced}");
        }
        if !sides.is_empty() {
            assert!(v["stalls"]["nagle_ack_paced"].as_u64() >= Some(1), "{v}");
            assert!(
                paced["requests_per_s_without_estimate"].as_f64()
                    > paced["requests_per_s"].as_f64()
            );
        }
        // With TCP_NODELAY the probe's writes leave at once: none is paced.
        assert_eq!(paced["nodelay"]["paced_connections"], 0, "{paced}");
    }
    assert_eq!(paced["nodelay"]["requests"], 1600, "{paced}");
    assert!(paced["nodelay_gain_percent"].is_number(), "{paced}");
    // Without CAP_NET_RAW: the socket's view.
    let (code, v, err) = probe_json(Privilege::NoNetRaw, &args);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["evidence_source"], "socket", "{v}");
    let paced = &v["ack_paced"];
    let (held, later) = (
        paced["held_writes"].as_u64(),
        paced["later_writes"].as_u64(),
    );
    assert_eq!(later, Some(1500), "{paced}");
    assert!(held.unwrap_or(0) * 2 > 1500, "{paced}");
    assert_eq!(paced["nodelay"]["requests"], 1600, "{paced}");
    // Text: the pacing, the re-run.
    let out = run_probe(Privilege::AsIs, &args);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("100 of 100 batches of 16 = 1600 requests answered")
            && text.contains("ACK pacing:")
            && text.contains("TCP_NODELAY re-run: 100 batches of 16 = 1600 requests"),
        "{text}"
    );
}

#[test]
fn line_protocol_is_clean_and_needs_send_and_until() {
    let server = python_server("probe/bad_server.py", &["pong"]);
    let target = url("tcp", server.port);
    let (code, v, err) = probe_json(
        Privilege::AsIs,
        &["--send", "PING\\n", "--until", "\\r\\n", &target],
    );
    assert_eq!(code, 0, "{err}");
    assert_clean(&v);
    let (code, _, err) = probe_json(Privilege::AsIs, &[&target]);
    assert_eq!(code, 2);
    assert!(err.contains("--send") && err.contains("--until"), "{err}");
    let (code, _, err) = probe_json(Privilege::AsIs, &["--send", "\\q", "--until", "x", &target]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown escape"), "{err}");
}

/// Undoes the page's HTML escaping of text.
fn unescape(html: &str) -> String {
    [
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&#x27;", "'"),
        ("&#x2f;", "/"),
        ("&amp;", "&"),
    ]
    .iter()
    .fold(html.to_string(), |text, (from, to)| text.replace(from, to))
}

/// The pipelining probe's page shows the pacing as its text report does, line for line: the
/// paced side's holds and time lost (with a capture), the throughput and its estimate, said to
/// be one, and the TCP_NODELAY re-run; the text escaped, no markup of its own.
#[test]
fn pipelining_probe_page_shows_the_pacing() {
    let _serial = support::serial();
    let server = redis_server();
    let target = url("redis", server.port);
    let page = std::env::temp_dir().join(format!("tcpstall-paced-{}.html", std::process::id()));
    let path = page.to_str().expect("utf-8 path");
    let args = [PIPELINING.as_slice(), &["--html", path, &target]].concat();
    let out = run_probe(Privilege::AsIs, &args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let html = std::fs::read_to_string(&page).expect("the page is written");
    let _ = std::fs::remove_file(&page);
    let section = html
        .split_once("<section id=\"pacing\">")
        .and_then(|(_, rest)| rest.split_once("</section>"))
        .map(|(section, _)| section)
        .unwrap_or_else(|| panic!("no pacing section in the page:\n{html}"));
    assert!(
        section.contains("<h2>Writes paced by ACKs (batches of 16)</h2>"),
        "{section}"
    );
    let items: Vec<&str> = section
        .split("<li>")
        .skip(1)
        .filter_map(|item| item.split_once("</li>").map(|(line, _)| line))
        .collect();
    for item in &items {
        assert!(!item.contains(['<', '>', '\'']), "not escaped: {item}");
    }
    // The same lines as the text report's `ACK pacing` block.
    let lines: Vec<String> = items.iter().map(|item| unescape(item)).collect();
    let report: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("ACK pacing"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(lines, report, "{text}");
    let line = |start: &str| {
        lines
            .iter()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start:?} in {lines:?}"))
            .clone()
    };
    let rerun = line("TCP_NODELAY re-run: ");
    assert!(
        rerun.starts_with("TCP_NODELAY re-run: 100 batches of 16 = 1600 requests, "),
        "{rerun}"
    );
    assert!(rerun.contains(" %"), "the measured change: {rerun}");
    // The socket's count is always there; the capture's proven holds when a run proves any
    // (see the test above).
    assert!(
        line("socket: ").contains(" writes after a batch's first were kept back"),
        "{lines:?}"
    );
    let proven = lines
        .iter()
        .any(|l| l.starts_with("nagle_ack_paced: the probe's own pipelined writes"));
    if is_root() && proven {
        let paced = line("nagle_ack_paced: the probe's own pipelined writes");
        let holds: u64 = paced
            .split(" small segment at least ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no hold count: {paced}"));
        // Paced from 17 holds, or from 3 slow ones (a loaded machine's round trips).
        assert!(holds >= 3, "{paced}");
        assert!(
            paced.ends_with(" ms in all (the holds the capture proves)"),
            "{paced}"
        );
        let rate = line("throughput ");
        assert!(rate.contains("(estimate: "), "{rate}");
        let figures: Vec<f64> = rate
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .take(2)
            .collect();
        assert!(
            figures.len() == 2 && figures[1] > figures[0],
            "the estimate without the holds is higher: {rate}"
        );
    }
}

#[test]
fn refused_connection_is_a_clear_error() {
    let port = free_port();
    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("http", port)]);
    assert_eq!(code, 2);
    assert_eq!(v, Value::Null);
    assert!(
        err.contains("refused") && err.contains("nothing listens"),
        "{err}"
    );
}

#[test]
fn a_host_that_drops_the_syn_times_out_within_the_timeout() {
    // A listener whose accept queue is full drops further SYNs (`tcp_conn_request`), as an
    // unreachable host or a firewall does.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.listen(0).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let _queued: Vec<TcpStream> = (0..2)
        .filter_map(|_| {
            TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(300))
                .ok()
        })
        .collect();
    let started = Instant::now();
    let (code, _, err) = probe_json(Privilege::AsIs, &["--timeout", "0.5", &url("http", port)]);
    assert_eq!(code, 2);
    assert!(err.contains("no answer to the connection attempt"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_server_closing_mid_reply_keeps_the_partial_results() {
    let server = python_server("probe/bad_server.py", &["close-mid", "3"]);
    let (code, v, err) = probe_json(Privilege::AsIs, &[&url("http", server.port)]);
    assert_eq!(code, 2, "{v}");
    assert_eq!(v["requests"], 3, "the answered requests are reported: {v}");
    assert!(err.contains("middle of the reply"), "{err}");
    assert!(
        v["errors"][0].as_str().unwrap_or("").contains("request 4"),
        "{v}"
    );
}

#[test]
fn a_malformed_reply_is_a_clear_error() {
    let server = python_server("probe/bad_server.py", &["garbage"]);
    let (code, _, err) = probe_json(Privilege::AsIs, &[&url("http", server.port)]);
    assert_eq!(code, 2);
    assert!(
        err.contains("malformed reply") && err.contains("SSH-2.0"),
        "{err}"
    );
    let (code, _, err) = probe_json(Privilege::AsIs, &[&url("redis", server.port)]);
    assert_eq!(code, 2);
    assert!(err.contains("malformed reply"), "{err}");
}

#[test]
fn a_server_that_never_answers_times_out() {
    let server = python_server("probe/bad_server.py", &["silent"]);
    let started = Instant::now();
    let (code, _, err) = probe_json(
        Privilege::AsIs,
        &["--timeout", "0.5", &url("http", server.port)],
    );
    assert_eq!(code, 2);
    assert!(err.contains("no complete answer within 0.5 s"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_server_that_stops_answering_ends_the_probe_within_the_timeout_with_a_capture() {
    support::require_root("the probe's capture of its own packets (CAP_NET_RAW)");
    // The connection abandoned on the timeout never gets the server's FIN: the capture must
    // not wait for it after the request has given up.
    for answered in [0u64, 2] {
        let server = python_server("probe/bad_server.py", &["silent", &answered.to_string()]);
        let started = Instant::now();
        let (code, v, err) = probe_json(
            Privilege::AsIs,
            &["--timeout", "1", &url("http", server.port)],
        );
        let took = started.elapsed();
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("no complete answer within 1.0 s"), "{err}");
        assert!(
            took < Duration::from_millis(1500),
            "the error came {took:?} after the start, more than the 1 s timeout + 0.5 s: {err}"
        );
        if answered > 0 {
            assert_eq!(v["requests"], answered, "{v}");
            assert_eq!(v["evidence_source"], "capture", "{v}");
        }
    }
}

#[test]
fn a_hold_behind_a_relay_is_placed_behind_the_server() {
    // The split server's body waits for the relay's delayed ACK on the relay's own connection:
    // our ACKs, however quick, cannot release it.
    let upstream = python_server("process/split_server.py", &[]);
    let relay = python_server("probe/relay.py", &[&upstream.port.to_string()]);
    for privilege in [Privilege::AsIs, Privilege::NoNetRaw] {
        let (code, v, err) = probe_json(privilege, &[&url("http", relay.port)]);
        assert_eq!(code, 0, "{err}");
        assert_ne!(
            v["confirmed"], true,
            "QUICKACK cannot remove a hold upstream: {v}"
        );
        let hop = v["hop"].as_str().unwrap_or("");
        assert!(hop.contains("behind the server"), "{v}");
    }
}
