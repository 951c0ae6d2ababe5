//! The static (musl) binary on a host with nothing else: every verb runs its basic case in a
//! mount namespace whose root holds only the binary, a fixture capture, and the kernel's /proc,
//! /sys and /dev bind-mounted (no /lib, no /usr/lib, no libpcap, no shell). The servers it
//! meets run outside that root, on loopback.
//!
//! The binary is `TCPSTALL_STATIC_BIN` when set, else the one `scripts/build-static` makes
//! (run here, a no-op when up to date; `scripts/test` has it optimised at level 1,
//! `TCPSTALL_STATIC_OPT_LEVEL`) when the Rust target x86_64-unknown-linux-musl and
//! musl-gcc are installed (scripts/install-deps installs both). Without either, or without
//! root (mount namespaces, chroot, captures, ptrace), each test says why and passes unchecked.

mod support;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::Value;
use support::python_http::PythonServer;
use support::Collected;

const MUSL: &str = "x86_64-unknown-linux-musl";
const FIXTURE: &str = "split_response.pcap";

/// The static binary, built once for every test of this file; `Err` says why there is none.
fn static_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(find_or_build).clone()
}

fn find_or_build() -> Result<PathBuf, String> {
    if let Some(given) = std::env::var_os("TCPSTALL_STATIC_BIN") {
        let path = PathBuf::from(given);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "TCPSTALL_STATIC_BIN={} is not a file",
                path.display()
            ))
        };
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespace, chroot, captures, ptrace)".into());
    }
    let has_target = support::has_rust_target(MUSL);
    if !has_target {
        return Err(format!(
            "the Rust target {MUSL} is not installed (scripts/install-deps, or `rustup target add {MUSL}`)"
        ));
    }
    if Command::new("musl-gcc").arg("--version").output().is_err() {
        return Err(
            "musl-gcc is missing (apt-get install musl-tools, or scripts/install-deps)".into(),
        );
    }
    eprintln!("building the static binary with scripts/build-static (minutes the first time)");
    Ok(support::build_with_script("build-static", &[MUSL]))
}

/// The static binary, or `None` after saying why the test is skipped.
fn binary_or_skip(test: &str) -> Option<PathBuf> {
    match static_binary() {
        Ok(path) => Some(path),
        Err(why) => {
            support::skip(format!("{test}: no static binary to test: {why}"));
            None
        }
    }
}

/// A directory made to be a root: the binary as /tcpstall, the fixture, empty /proc, /sys and
/// /dev to mount the kernel's on. Removed when dropped.
struct Root {
    dir: PathBuf,
}

/// The tests of this file run one at a time: each starts servers or captures on loopback.
static SERIAL: Mutex<()> = Mutex::new(());

impl Root {
    fn make(binary: &Path, test: &str) -> Root {
        let dir = std::env::temp_dir().join(format!(
            "tcpstall-static-root-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("root directory");
        for mount_point in ["proc", "sys", "dev"] {
            std::fs::create_dir(dir.join(mount_point)).expect("mount point");
        }
        std::fs::copy(binary, dir.join("tcpstall")).expect("binary copied into the root");
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/analyze")
            .join(FIXTURE);
        std::fs::copy(fixture, dir.join(FIXTURE)).expect("fixture copied into the root");
        Root { dir }
    }

    /// `/tcpstall ARGS` inside the root, in a mount namespace of its own; killed past `limit`.
    fn run(&self, args: &[&str], limit: Duration) -> Run {
        self.spawn(args).wait(limit)
    }

    /// Starts `/tcpstall ARGS` inside the root, its output collected by threads.
    fn spawn(&self, args: &[&str]) -> Running {
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("no NUL in paths");
        let root = c(&self.dir);
        let mounts: Vec<(CString, CString)> = ["proc", "sys", "dev"]
            .iter()
            .map(|m| (c(&Path::new("/").join(m)), c(&self.dir.join(m))))
            .collect();
        let slash = c(Path::new("/"));
        let mut command = Command::new("/tcpstall");
        command
            .args(args)
            .env_clear()
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: between fork and exec the closure only makes system calls on data prepared
        // before the fork; it allocates nothing and takes no lock.
        unsafe {
            command.pre_exec(move || {
                let check = |rc: libc::c_int| {
                    if rc == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                };
                check(libc::unshare(libc::CLONE_NEWNS))?;
                // Nothing mounted here reaches the host's namespace.
                check(libc::mount(
                    std::ptr::null(),
                    slash.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                for (source, target) in &mounts {
                    check(libc::mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ))?;
                }
                check(libc::chroot(root.as_ptr()))?;
                check(libc::chdir(slash.as_ptr()))
            });
        }
        Running {
            args: args.iter().map(|a| a.to_string()).collect(),
            run: Collected::new(command.spawn().expect("/tcpstall starts inside the root")),
        }
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        // The mounts lived in the children's namespaces and ended with them.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

struct Running {
    args: Vec<String>,
    run: Collected,
}

impl Running {
    /// Waits for the first stderr line containing `needle`, at most `limit`.
    fn wait_for_stderr(&self, needle: &str, limit: Duration) {
        let what = format!("tcpstall {:?}", self.args);
        self.run.stderr_until(needle, limit, &what);
    }

    fn wait(self, limit: Duration) -> Run {
        let what = format!("tcpstall {:?}", self.args);
        let (status, stdout, stderr) = self.run.finish(limit, &what);
        Run {
            args: self.args,
            status,
            stdout,
            stderr: stderr.join("\n"),
        }
    }
}

struct Run {
    args: Vec<String>,
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts exit 0 and returns standard output as JSON.
    fn json(&self) -> Value {
        self.assert_success();
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "tcpstall {:?} printed no JSON ({e}):\n{}",
                self.args, self.stdout
            )
        })
    }

    fn assert_success(&self) {
        assert!(
            self.status.success(),
            "tcpstall {:?} inside the root: {}\nstdout:\n{}\nstderr:\n{}",
            self.args,
            self.status,
            self.stdout,
            self.stderr
        );
    }
}

/// Runs `body` with a root of its own, one test at a time.
fn with_root(test: &str, body: impl FnOnce(&Root)) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(binary) = binary_or_skip(test) else {
        return;
    };
    let root = Root::make(&binary, test);
    body(&root);
}

#[test]
fn the_root_holds_nothing_but_the_binary_and_the_fixture() {
    with_root("root_contents", |root| {
        let mut names: Vec<String> = std::fs::read_dir(&root.dir)
            .expect("root lists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["dev", "proc", FIXTURE, "sys", "tcpstall"]);
        // It runs there: no interpreter, no library to load.
        let run = root.run(&["--version"], Duration::from_secs(10));
        run.assert_success();
        assert!(run.stdout.starts_with("tcpstall "), "{}", run.stdout);
    });
}

#[test]
fn lab_runs_the_echo_scenario() {
    with_root("lab", |root| {
        let report = root
            .run(
                &["lab", "--json", "--scenario", "echo", "--requests", "5"],
                Duration::from_secs(120),
            )
            .json();
        let rows = report["rows"].as_array().expect("rows");
        assert!(!rows.is_empty(), "{report}");
        for row in rows {
            assert_eq!(row["scenario"], "echo", "{row}");
            assert_eq!(row["requests"], 5, "{row}");
            // As root the lab captures its own traffic: the detector agrees with the latency.
            let detector = &row["detector"];
            assert!(detector.is_object(), "no capture inside the root: {row}");
            let found = detector["held_side"].is_string();
            assert_eq!(row["stalled"].as_bool(), Some(found), "{row}");
        }
        // The catalogue's stalling echo row stalls here too.
        assert!(rows.iter().any(|r| r["stalled"] == true), "{report}");
        assert!(report["kernel"].is_object(), "{report}");
    });
}

#[test]
fn analyze_reads_the_fixture_as_the_dynamic_binary_does() {
    with_root("analyze", |root| {
        // The same relative name inside and outside: it is in the report.
        let inside = root.run(&["analyze", "--json", FIXTURE], Duration::from_secs(30));
        let report = inside.json();
        assert!(
            report["summary"]["stalls"]["nagle_delayed_ack"]
                .as_u64()
                .is_some_and(|n| n >= 1),
            "{report}"
        );
        let outside = Command::new(env!("CARGO_BIN_EXE_tcpstall"))
            .args(["analyze", "--json", FIXTURE])
            .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/analyze"))
            .output()
            .expect("the dynamic binary runs");
        assert!(outside.status.success());
        let outside: Value = serde_json::from_slice(&outside.stdout).expect("JSON");
        assert_eq!(
            report, outside,
            "the static and the dynamic binary disagree"
        );
    });
}

#[test]
fn probe_sockets_and_fix_meet_a_server_outside_the_root() {
    with_root("probe_sockets_fix", |root| {
        let server = PythonServer::start();
        let url = format!("http://127.0.0.1:{}/", server.port);
        let probe = root
            .run(
                &["probe", &url, "--requests", "5", "--json"],
                Duration::from_secs(60),
            )
            .json();
        assert_eq!(probe["requests"], 5, "{probe}");
        assert_eq!(probe["evidence_source"], "capture", "{probe}");
        assert_eq!(probe["verdict"], "stall", "{probe}");
        assert_eq!(probe["culprit"], "server", "{probe}");

        let pid = server.pid().to_string();
        let listener = format!("127.0.0.1:{}", server.port);
        let sockets = root
            .run(&["sockets", &pid, "--json"], Duration::from_secs(30))
            .json();
        let listening = sockets
            .as_array()
            .expect("a list of sockets")
            .iter()
            .find(|s| s["local"] == listener.as_str() && s["state"] == "LISTEN")
            .unwrap_or_else(|| panic!("no listener {listener}: {sockets}"));
        assert_eq!(listening["nodelay"], false, "{listening}");

        let fix = root
            .run(
                &["fix", &pid, "--dry-run", "--json"],
                Duration::from_secs(30),
            )
            .json();
        assert_eq!(fix["dry_run"], true, "{fix}");
        assert_eq!(fix["applied"], false, "{fix}");
        let planned = fix["sockets"]
            .as_array()
            .expect("sockets")
            .iter()
            .find(|s| s["local"] == listener.as_str())
            .unwrap_or_else(|| panic!("listener not in the plan: {fix}"));
        assert_eq!(planned["action"], "set_nodelay", "{planned}");
        // A dry run changes nothing: the listener still has Nagle on.
        let after = root
            .run(&["sockets", &pid, "--json"], Duration::from_secs(30))
            .json();
        assert!(
            after
                .as_array()
                .expect("sockets")
                .iter()
                .any(|s| s["local"] == listener.as_str() && s["nodelay"] == false),
            "{after}"
        );
    });
}

#[test]
fn trace_follows_the_binary_inside_the_root() {
    with_root("trace", |root| {
        // ptrace: the static build declares PTRACE_GET_SYSCALL_INFO's structure itself
        // (process/syscall_info.rs), which this run reads at each stop; through the
        // tracepoints `--version` would make no followed syscall.
        let run = root.run(
            &[
                "trace",
                "--ptrace",
                "--json",
                "--",
                "/tcpstall",
                "--version",
            ],
            Duration::from_secs(30),
        );
        run.assert_success();
        // The traced program's own output comes first, then the report.
        let (version, report) = run
            .stdout
            .split_once('\n')
            .unwrap_or_else(|| panic!("{}", run.stdout));
        assert!(version.starts_with("tcpstall "), "{}", run.stdout);
        let report: Value = serde_json::from_str(report).expect("trace --json");
        assert_eq!(report["exit_status"], 0, "{report}");
        assert!(
            report["syscalls"].as_u64().is_some_and(|n| n > 0),
            "{report}"
        );
    });
}

#[test]
fn watch_compiles_its_filter_without_libpcap_and_names_the_server() {
    with_root("watch", |root| {
        let server = PythonServer::start();
        let filter = format!("port {}", server.port);
        let watch = root.spawn(&["watch", "-i", "lo", "--duration", "2", "--json", &filter]);
        watch.wait_for_stderr("tcpstall: watching", Duration::from_secs(15));
        server.requests(6);
        let run = watch.wait(Duration::from_secs(20));
        run.assert_success();
        let lines: Vec<Value> = run
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let (summary, events) = lines.split_last().expect("a summary line");
        let s = &summary["summary"];
        assert_eq!(s["filter"], filter.as_str(), "{summary}");
        assert!(s["packets"].as_u64().is_some_and(|p| p > 0), "{summary}");
        // Keep-alive requests after the first wait for the client's delayed ACK: the owner
        // is found through the host's /proc mounted in the root.
        let pid = u64::from(server.pid());
        assert!(
            events.iter().any(|e| e["kind"] == "nagle_delayed_ack"
                && e["held_side"] == "server"
                && e["pid"].as_u64() == Some(pid)),
            "{}",
            run.stdout
        );

        // There is no libpcap in the root: a filter beyond the built-in compiler is refused
        // with the package to install.
        let refused = root.run(
            &["watch", "-i", "lo", "--duration", "1", "tcp[13] & 2 != 0"],
            Duration::from_secs(15),
        );
        assert_eq!(refused.status.code(), Some(2), "{}", refused.stderr);
        assert!(
            refused.stderr.contains("needs libpcap"),
            "{}",
            refused.stderr
        );
    });
}
