//! The runtime and framework of a stalling server named, and its fix given in the program's
//! own terms, against real runtimes from Debian's packages: CPython's http.server, the JDK's
//! HttpServer, Perl's HTTP::Daemon, Ruby's WEBrick, Erlang/OTP's inets httpd, Node's http module
//! and a Go program built with Debian's Go. Each test probes the server as it ships (a stall of
//! at least a delayed ACK), applies the fix the probe printed, word for word (a handler
//! attribute, a JVM or VM flag, a line after accept, a call), starts the server again and
//! probes it clean.

mod support;

use std::process::Command;

use serde_json::Value;
use support::process::{fixture, json_of, tcpstall, BIN};
use support::{skip, spawn_printing_port, KillOnDrop, Scratch, NO_STALL_MAX_MS, STALL_MIN_MS};

/// `tcpstall probe --json --requests 20 http://127.0.0.1:PORT/`, whatever its exit status.
fn probe(port: u16) -> Value {
    let out = Command::new(BIN)
        .args(["probe", "--json", "--requests", "20"])
        .arg(format!("http://127.0.0.1:{port}/"))
        .output()
        .expect("tcpstall runs");
    json_of(&out)
}

/// Whether `program --version` (or `-version`) runs: the runtime is installed.
fn installed(program: &str, version_flag: &str) -> bool {
    Command::new(program)
        .arg(version_flag)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What `program ARGS` prints (a runtime's own word for its version), trimmed.
fn version_said(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect("runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The JVM's `java.version` property, as `java -XshowSettings:properties` prints it.
fn java_version() -> String {
    let out = Command::new("java")
        .args(["-XshowSettings:properties", "-version"])
        .output()
        .expect("java runs");
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.trim().strip_prefix("java.version = ").map(str::to_string))
        .unwrap_or_default()
}

/// The probe of a server as it ships: it stalls, its runtime and framework are named, and
/// the advice gives that runtime's fix and the live fix with `--yes` for scripts. Returns
/// the fix to apply.
fn stalls_and_names(
    port: u16,
    pid: u32,
    (name, framework): (&str, Option<&str>),
    said: Option<&str>,
) -> String {
    let report = probe(port);
    let p50 = report["p50_ms"].as_f64().expect("p50_ms");
    assert!(p50 >= STALL_MIN_MS, "{name} should stall first: {report:#}");
    let runtime = &report["runtime"];
    assert_eq!(runtime["name"], name, "{report:#}");
    assert_eq!(runtime["framework"].as_str(), framework, "{report:#}");
    // `None`: a runtime whose version tcpstall does not read (Node.js keeps it only in its
    // executable's text).
    if let Some(said) = said {
        assert!(
            runtime["version"].as_str().is_some_and(|v| !v.is_empty()
                && !said.is_empty()
                && (said.starts_with(v) || v.starts_with(said))),
            "{name}'s version, which it says is {said}: {runtime}"
        );
    }
    let fix = runtime["fix"].as_str().expect("runtime.fix").to_string();
    let advice: Vec<&str> = report["advice"]
        .as_array()
        .expect("advice")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        advice
            .iter()
            .any(|a| a.contains(&fix) && a.contains(framework.unwrap_or(name))),
        "the advice gives {name}'s own fix {fix:?}: {advice:#?}"
    );
    let live = format!("tcpstall fix {pid} --port {port}");
    assert!(
        advice
            .iter()
            .any(|a| a.contains(&live) && a.contains("--yes")),
        "the live fix, with --yes for scripts: {advice:#?}"
    );
    fix
}

/// The listening socket of `tcpstall sockets PID --json`.
fn listener_of(pid: &str) -> Value {
    let sockets = json_of(&tcpstall(&["sockets", pid, "--json"]));
    sockets
        .as_array()
        .expect("an array")
        .iter()
        .find(|s| s["listening"] == true)
        .unwrap_or_else(|| panic!("no listener: {sockets:#}"))
        .clone()
}

/// `sockets PID` and `fix PID --port N --dry-run` name the same runtime and give the same fix.
fn sockets_and_fix_name(pid: u32, port: u16, name: &str, fix: &str) {
    let pid = pid.to_string();
    let port = port.to_string();
    let listener = listener_of(&pid);
    assert_eq!(listener["runtime"]["name"], name, "{listener:#}");
    assert_eq!(listener["runtime"]["fix"], fix, "{listener:#}");
    let text = String::from_utf8_lossy(&tcpstall(&["sockets", &pid]).stdout).into_owned();
    assert!(
        text.contains(&format!("runtime: pid {pid}: ")) && text.contains(fix),
        "{text}"
    );
    assert!(text.contains("add --yes when not at a terminal"), "{text}");
    let plan = json_of(&tcpstall(&[
        "fix",
        &pid,
        "--port",
        &port,
        "--dry-run",
        "--json",
    ]));
    assert_eq!(plan["runtime"]["name"], name, "{plan:#}");
    assert_eq!(plan["runtime"]["fix"], fix, "{plan:#}");
}

/// The probe of the server with the fix applied: no stall.
fn clean_after_fix(port: u16, name: &str, fix: &str) {
    let report = probe(port);
    let p50 = report["p50_ms"].as_f64().expect("p50_ms");
    assert!(
        p50 < NO_STALL_MAX_MS,
        "{name} with {fix:?} should not stall: {report:#}"
    );
    assert_eq!(report["verdict"], "clean", "{report:#}");
}

/// A script server: `interpreter` running fixture `source` with `marker` replaced by `line`
/// (written to `dir/name`), and the port it prints.
fn script_server(
    interpreter: &str,
    source: &str,
    (marker, line): (&str, &str),
    dir: &Scratch,
    name: &str,
) -> (KillOnDrop, u16) {
    let source = fixture(&format!("../runtimes/{source}"));
    let text = std::fs::read_to_string(&source).expect("fixture");
    assert!(
        text.contains(marker),
        "{} has no {marker:?}",
        source.display()
    );
    let path = dir.path(name);
    std::fs::write(&path, text.replace(marker, line)).expect("write the server");
    spawn_printing_port(Command::new(interpreter).arg(path), interpreter)
}

/// The http.server fixture with `fix` in its handler class.
fn python_server(dir: &Scratch, fix: &str) -> (KillOnDrop, u16) {
    script_server(
        "python3",
        "http_server.py",
        ("pass  # FIX", fix),
        dir,
        "s.py",
    )
}

#[test]
fn cpython_http_server_named_and_its_handler_attribute_removes_the_stall() {
    // Latency measured: one test at a time.
    let _serial = support::serial();
    if !installed("python3", "--version") {
        return skip("python3 is not installed (scripts/install-deps)");
    }
    let dir = Scratch::new("runtime-python");
    let start = |fix| python_server(&dir, fix);
    let (server, port) = start("pass");
    let said = version_said(
        "python3",
        &["-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
    );
    let fix = stalls_and_names(
        port,
        server.0.id(),
        ("CPython", Some("http.server")),
        Some(&said),
    );
    // The probe's page shows them too.
    let page = dir.path("probe.html");
    let out = tcpstall(&[
        "probe",
        "--requests",
        "10",
        "--html",
        page.to_str().expect("a UTF-8 path"),
        &format!("http://127.0.0.1:{port}/"),
    ]);
    let html = std::fs::read_to_string(&page).unwrap_or_else(|_| {
        panic!("no page: {}", String::from_utf8_lossy(&out.stderr));
    });
    // minijinja escapes the apostrophe.
    assert!(
        html.contains("the server&#x27;s runtime: CPython 3."),
        "{html}"
    );
    assert!(html.contains(&fix), "the page gives {fix:?}");
    sockets_and_fix_name(server.0.id(), port, "CPython", &fix);
    drop(server);
    let (_fixed, port) = start(&fix);
    clean_after_fix(port, "CPython's http.server", &fix);
}

#[test]
fn jdk_http_server_named_and_its_system_property_removes_the_stall() {
    // Latency measured: one test at a time.
    let _serial = support::serial();
    if !installed("javac", "-version") || !installed("java", "-version") {
        return skip("javac and java are not installed (default-jdk-headless)");
    }
    let dir = Scratch::new("runtime-java");
    let compiled = Command::new("javac")
        .arg("-d")
        .arg(&dir.0)
        .arg(fixture("../runtimes/HttpServerMain.java"))
        .status()
        .expect("javac runs");
    assert!(compiled.success(), "javac compiles the server");
    let start = |options: &[&str]| -> (KillOnDrop, u16) {
        let mut java = Command::new("java");
        java.args(options)
            .arg("-cp")
            .arg(&dir.0)
            .arg("HttpServerMain");
        spawn_printing_port(&mut java, "the JDK's HttpServer")
    };
    let (server, port) = start(&[]);
    let said = java_version();
    let fix = stalls_and_names(
        port,
        server.0.id(),
        ("Java (JVM)", Some("com.sun.net.httpserver")),
        Some(&said),
    );
    sockets_and_fix_name(server.0.id(), port, "Java (JVM)", &fix);
    assert!(fix.starts_with("-D"), "a JVM option: {fix}");
    drop(server);
    let (_fixed, port) = start(&[&fix]);
    clean_after_fix(port, "the JDK's HttpServer", &fix);
}

#[test]
fn erlang_inets_httpd_named_and_its_vm_flag_removes_the_stall() {
    // Latency measured: one test at a time.
    let _serial = support::serial();
    let loads = Command::new("erl")
        .args(["-noshell", "-eval", "ok = application:load(inets), halt()."])
        .status()
        .is_ok_and(|s| s.success());
    if !loads {
        return skip("erl and inets are not installed (erlang-base, erlang-inets)");
    }
    let dir = Scratch::new("runtime-erlang");
    std::fs::write(dir.path("index.html"), [b'x'; 200]).expect("the page");
    let eval = std::fs::read_to_string(fixture("../runtimes/inets_httpd.eval")).expect("fixture");
    // The flags as a shell would pass them: the fix is written for the erl command line.
    let start = |flags: &str| {
        let mut erl = Command::new("sh");
        erl.args([
            "-c",
            &format!("exec erl {flags} -noshell -eval \"$0\""),
            &eval,
        ])
        .env("DOCROOT", &dir.0);
        spawn_printing_port(&mut erl, "erl with inets httpd")
    };
    let (server, port) = start("");
    let said = version_said(
        "erl",
        &[
            "-noshell",
            "-eval",
            "io:format(\"~s\", [erlang:system_info(otp_release)]), halt().",
        ],
    );
    let fix = stalls_and_names(
        port,
        server.0.id(),
        ("Erlang/OTP", Some("inets")),
        Some(&said),
    );
    sockets_and_fix_name(server.0.id(), port, "Erlang/OTP", &fix);
    drop(server);
    let (_fixed, port) = start(&fix);
    clean_after_fix(port, "Erlang's inets httpd", &fix);
}

/// A server written in a scripting language whose fix is a line in its code.
struct LineFixed {
    /// The interpreter, and the arguments that load the framework (to skip without it).
    interpreter: &'static str,
    loads_framework: &'static [&'static str],
    /// What to install when it does not load.
    package: &'static str,
    /// The fixture, and its file name's extension.
    source: &'static str,
    extension: &'static str,
    /// The runtime's and framework's names as tcpstall gives them.
    names: (&'static str, &'static str),
    /// The arguments that make the interpreter print its version.
    says_version: &'static [&'static str],
}

impl LineFixed {
    /// Probes the server as it ships (a stall, the runtime and its fix named), then with the
    /// fix's line put at the fixture's `# FIX` (clean).
    fn check(&self) {
        // Latency measured: one test at a time.
        let _serial = support::serial();
        let loads = Command::new(self.interpreter)
            .args(self.loads_framework)
            .status()
            .is_ok_and(|s| s.success());
        if !loads {
            return skip(format!(
                "{} is not installed ({})",
                self.names.1, self.package
            ));
        }
        let dir = Scratch::new(&format!("runtime-{}", self.interpreter));
        let file = format!("s.{}", self.extension);
        let start = |fix| script_server(self.interpreter, self.source, ("# FIX", fix), &dir, &file);
        let (server, port) = start("# as shipped");
        let said = version_said(self.interpreter, self.says_version);
        let fix = stalls_and_names(
            port,
            server.0.id(),
            (self.names.0, Some(self.names.1)),
            Some(&said),
        );
        sockets_and_fix_name(server.0.id(), port, self.names.0, &fix);
        drop(server);
        let (_fixed, port) = start(&fix);
        clean_after_fix(port, self.names.1, &fix);
    }
}

#[test]
fn perl_http_daemon_named_and_its_setsockopt_line_removes_the_stall() {
    LineFixed {
        interpreter: "perl",
        loads_framework: &["-MHTTP::Daemon", "-e1"],
        package: "libhttp-daemon-perl",
        source: "http_daemon.pl",
        extension: "pl",
        names: ("Perl", "HTTP::Daemon"),
        says_version: &["-e", "printf '%vd', $^V"],
    }
    .check();
}

#[test]
fn ruby_webrick_named_and_its_setsockopt_line_removes_the_stall() {
    LineFixed {
        interpreter: "ruby",
        loads_framework: &["-rwebrick", "-e", "nil"],
        package: "ruby-webrick",
        source: "webrick_server.rb",
        extension: "rb",
        names: ("Ruby", "WEBrick"),
        says_version: &["-e", "print RUBY_VERSION"],
    }
    .check();
}

#[test]
fn trace_names_the_runtime_of_a_process_with_write_write_reads() {
    let _serial = support::serial();
    if !installed("python3", "--version") {
        return skip("python3 is not installed (scripts/install-deps)");
    }
    let dir = Scratch::new("runtime-trace");
    let (server, port) = python_server(&dir, "pass");
    let pid = server.0.id().to_string();
    let check = ["trace", "-p", &pid, "--duration", "0.2", "--json"];
    if let Some(why) = support::bpf_unavailable(BIN, &check) {
        return skip(why);
    }
    let trace = support::Collected::new(
        Command::new(BIN)
            .args(["trace", "-p", &pid, "--duration", "4", "--json"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("tcpstall runs"),
    );
    trace.stderr_until(
        "never stopped",
        std::time::Duration::from_secs(15),
        "trace -p",
    );
    probe(port);
    let (status, stdout, stderr) = trace.finish(std::time::Duration::from_secs(20), "trace -p");
    assert!(status.success(), "{stderr:?}");
    let report: Value = serde_json::from_str(&stdout).expect("trace --json");
    let held: Vec<&Value> = report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .filter(|s| s["write_write_read"].as_u64().is_some_and(|n| n > 0))
        .collect();
    assert!(!held.is_empty(), "{report:#}");
    for socket in held {
        assert_eq!(socket["runtime"]["name"], "CPython", "{socket:#}");
        assert_eq!(
            socket["runtime"]["fix"], "disable_nagle_algorithm = True",
            "{socket:#}"
        );
    }
}

#[test]
fn a_node_server_without_no_delay_is_named_and_its_option_removes_the_stall() {
    // Latency measured: one test at a time.
    let _serial = support::serial();
    if !installed("node", "--version") {
        return skip("node is not installed (nodejs)");
    }
    let dir = Scratch::new("runtime-node");
    let shipped = "http.createServer({ noDelay: false }, handler)";
    let start =
        |create: &str| script_server("node", "http_server.js", ("CREATE", create), &dir, "s.js");
    let (server, port) = start(shipped);
    let fix = stalls_and_names(port, server.0.id(), ("Node.js", None), None);
    sockets_and_fix_name(server.0.id(), port, "Node.js", &fix);
    assert!(fix.starts_with("http.createServer("), "{fix}");
    drop(server);
    // The fix is the whole call, handler included: it replaces the server's own, word for word.
    let (_fixed, port) = start(&fix);
    clean_after_fix(port, "Node's http server", &fix);
}

/// Debian's Go (golang-go), else the first `go` on the path.
fn go_command() -> Option<&'static str> {
    ["/usr/bin/go", "go"]
        .into_iter()
        .find(|go| installed(go, "version"))
}

#[test]
fn a_go_server_that_switched_nagle_on_is_named_and_removing_the_call_removes_the_stall() {
    // Latency measured: one test at a time.
    let _serial = support::serial();
    let Some(go) = go_command() else {
        return skip("go is not installed (golang-go)");
    };
    let dir = Scratch::new("runtime-go");
    let source = std::fs::read_to_string(fixture("../runtimes/go_server.go")).expect("fixture");
    let marker = "c.SetNoDelay(false) // FIX";
    assert!(source.contains(marker), "go_server.go has no {marker:?}");
    // Builds the fixture with `line` in place of the marker; starts it.
    let start = |line: &str, name: &str| -> (KillOnDrop, u16) {
        let program = dir.path(name);
        let file = dir.path(&format!("{name}.go"));
        std::fs::write(&file, source.replace(marker, line)).expect("write the server");
        let built = Command::new(go)
            .arg("build")
            .arg("-o")
            .arg(&program)
            .arg(&file)
            // The toolchain installed, never one fetched for a newer go.mod.
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "")
            .current_dir(&dir.0)
            .status()
            .expect("go runs");
        assert!(built.success(), "go build {}", file.display());
        spawn_printing_port(&mut Command::new(&program), "the Go server")
    };
    let (server, port) = start(marker, "server");
    let said = version_said(go, &["env", "GOVERSION"]);
    let said = said.trim_start_matches("go");
    let fix = stalls_and_names(port, server.0.id(), ("Go", None), Some(said));
    sockets_and_fix_name(server.0.id(), port, "Go", &fix);
    // The fix, word for word: "remove SetNoDelay(false)".
    let removed = fix
        .strip_prefix("remove ")
        .unwrap_or_else(|| panic!("Go's fix removes a call: {fix}"));
    assert!(
        marker.starts_with(&format!("c.{removed}")),
        "{fix} / {marker}"
    );
    drop(server);
    let (_fixed, port) = start("// SetNoDelay(false) removed", "fixed");
    clean_after_fix(port, "the Go server", &fix);
}
