//! tcpstall on the systems without Linux's kernel interfaces: Windows and macOS.
//!
//! Windows: `scripts/build-windows` builds tcpstall.exe (at optimisation level 1 under
//! `scripts/test`, TCPSTALL_WINDOWS_OPT_LEVEL), which must be a 64-bit x86 console program
//! (PE32+). Where Wine runs it, `analyze` must answer byte for byte as the Linux binary does on
//! the fixture captures (text, JSON, several files, gzip and zstd, standard input, the HTML
//! report and the annotated capture); `probe` must judge real servers on 127.0.0.1 from its
//! own socket (Wine's sockets are this host's, so the delayed ACK is Linux's 40 ms): the split
//! server's stall found and blamed on the server, the same server writing once clean, its JSON
//! with the keys of Linux's socket-only report, a hold of its own request's body not blamed on
//! the server and owned up to, Ctrl-C ending it with what was answered; and a verb that needs
//! Linux must exit 2 saying so. macOS: `scripts/check-macos` type-checks both targets; nothing can be linked without
//! Apple's SDK.
//!
//! Without the Rust target (and no rustup) or MinGW-w64 (and no root to install it), the
//! Windows test says why and is counted skipped; without Wine, or with a Wine too old for the
//! .exe, the part that runs it is.

mod support;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const WINDOWS: &str = "x86_64-pc-windows-gnu";
const MINGW_GCC: &str = "x86_64-w64-mingw32-gcc";

/// The fixture captures, by file name, in name order.
fn fixtures() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixture_dir())
        .expect("fixture directory")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".pcap"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "fixtures missing: {names:?}");
    names
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/analyze")
}

/// Why the .exe cannot be built here, if it cannot.
fn windows_toolchain_missing() -> Option<String> {
    let has_target = support::has_rust_target(WINDOWS);
    if !has_target && Command::new("rustup").arg("--version").output().is_err() {
        return Some(format!(
            "the Rust target {WINDOWS} is missing and there is no rustup to add it"
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if Command::new(MINGW_GCC).arg("--version").output().is_err() && !root {
        return Some(format!(
            "{MINGW_GCC} is missing and only root installs it (apt-get install gcc-mingw-w64-x86-64)"
        ));
    }
    None
}

/// The facts of a PE image's headers (Microsoft's "PE Format": the MS-DOS stub's `e_lfanew`
/// at 0x3c, the "PE\0\0" signature, the COFF header, the optional header).
#[derive(Debug, PartialEq)]
struct PeImage {
    /// COFF Machine: 0x8664 is x64 (IMAGE_FILE_MACHINE_AMD64).
    machine: u16,
    /// Optional header Magic: 0x20b is PE32+ (64-bit), 0x10b PE32.
    magic: u16,
    /// Windows subsystem: 3 is the console (IMAGE_SUBSYSTEM_WINDOWS_CUI).
    subsystem: u16,
}

fn pe_image(bytes: &[u8]) -> Option<PeImage> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    if bytes.get(..2)? != b"MZ" {
        return None;
    }
    let pe = usize::try_from(u32_at(0x3c)?).ok()?;
    if bytes.get(pe..pe + 4)? != b"PE\0\0" {
        return None;
    }
    let coff = pe + 4;
    // The optional header follows the 20-byte COFF header; Subsystem is at 68 in it.
    let optional = coff + 20;
    Some(PeImage {
        machine: u16_at(coff)?,
        magic: u16_at(optional)?,
        subsystem: u16_at(optional + 68)?,
    })
}

/// Wine's 64-bit loader: `wine64` on PATH, or where Debian's wine64 package puts it.
fn wine() -> Option<PathBuf> {
    ["wine64", "/usr/lib/wine/wine64"]
        .into_iter()
        .map(PathBuf::from)
        .find(|w| {
            Command::new(w)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

/// A Wine prefix of the test's own, so that no user's is touched or needed.
struct Wine {
    loader: PathBuf,
    prefix: support::Scratch,
}

impl Wine {
    /// A new prefix for `loader`, with the bcryptprimitives.dll of tests/fixtures/wine in its
    /// system32 when this Wine has none (Wine 8; Wine 9 has its own).
    fn new(loader: PathBuf) -> Wine {
        let wine = Wine {
            loader,
            prefix: support::Scratch::new("wine-prefix"),
        };
        // A wineserver kept for the whole test: each run then starts in milliseconds, not in
        // the second a new server takes; ended when the prefix is dropped. It and the services
        // `wineboot --init` starts with the prefix (drive_c, system32, Wine's own DLLs) outlive
        // the command that starts them: their standard streams are null, never a pipe a run's
        // output is read from to its end.
        let kept = wine
            .server()
            .arg("-p")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(
            kept.expect("wineserver runs").success(),
            "wineserver -p failed"
        );
        let init = Command::new(&wine.loader)
            .args(["wineboot", "--init"])
            .env("WINEPREFIX", &wine.prefix.0)
            .env("WINEDEBUG", "-all")
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("wineboot runs");
        assert!(init.success(), "wineboot --init: {init}");
        let system32 = wine.prefix.path("drive_c/windows/system32");
        let dll = system32.join("bcryptprimitives.dll");
        if !dll.exists() {
            let source = fixture_dir().join("../wine/bcryptprimitives.c");
            let built = Command::new(MINGW_GCC)
                .args(["-shared", "-O2", "-o"])
                .arg(&dll)
                .arg(&source)
                .arg("-ladvapi32")
                .output()
                .expect("MinGW-w64's gcc runs");
            assert!(built.status.success(), "bcryptprimitives.dll: {built:?}");
        }
        wine
    }

    /// The prefix's wineserver, to be given its option: `wineserver` beside the loader
    /// (Debian's /usr/lib/wine) or on PATH.
    fn server(&self) -> Command {
        let beside = self.loader.with_file_name("wineserver");
        let mut command = Command::new(if beside.is_file() {
            beside
        } else {
            PathBuf::from("wineserver")
        });
        command.env("WINEPREFIX", &self.prefix.0);
        command
    }

    /// `EXE ARGS` under Wine in `dir`, `stdin` as its standard input. A run that ends with
    /// status 1 and prints nothing at all is Wine's own failure to start the program (seen once
    /// in about a hundred runs; analyze and probe exit 1 only with --fail-on-stall, and always
    /// print): it is run again, at most twice.
    fn run(&self, exe: &Path, dir: &Path, args: &[&str], stdin: Option<&Path>) -> Output {
        let mut out = self.run_once(exe, dir, args, stdin);
        for _ in 0..2 {
            if out.status.code() != Some(1) || !out.stdout.is_empty() || !out.stderr.is_empty() {
                break;
            }
            eprintln!("wine ended {args:?} with status 1 and no output: run again");
            out = self.run_once(exe, dir, args, stdin);
        }
        out
    }

    /// `EXE ARGS` under Wine in `dir`, its output piped, to be started.
    fn command(&self, exe: &Path, dir: &Path, args: &[&str]) -> Command {
        let mut command = Command::new(&self.loader);
        command
            .arg(exe)
            .args(args)
            .current_dir(dir)
            .env("WINEPREFIX", &self.prefix.0)
            // Only the loader's errors: a DLL the .exe needs and Wine lacks is named.
            .env("WINEDEBUG", "-all,err+module")
            // No Mono or Gecko installer dialogue on the prefix's first start.
            .env("WINEDLLOVERRIDES", "mscoree,mshtml=")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        command
    }

    fn run_once(&self, exe: &Path, dir: &Path, args: &[&str], stdin: Option<&Path>) -> Output {
        let mut command = self.command(exe, dir, args);
        match stdin {
            Some(file) => command.stdin(std::fs::File::open(file).expect("stdin file")),
            None => command.stdin(Stdio::null()),
        };
        command.output().expect("wine runs")
    }
}

impl Drop for Wine {
    fn drop(&mut self) {
        // Ends the prefix's wineserver and the programs it still runs, before the prefix goes.
        let _ = self.server().arg("-k").status();
    }
}

/// `tcpstall ARGS` of this build (Linux) in `dir`.
fn linux(dir: &Path, args: &[&str], stdin: Option<&Path>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tcpstall"));
    command.args(args).current_dir(dir);
    match stdin {
        Some(file) => command.stdin(std::fs::File::open(file).expect("stdin file")),
        None => command.stdin(Stdio::null()),
    };
    command.output().expect("tcpstall runs")
}

/// The split server of tests/fixtures/process (header and body in two writes, Nagle on; one
/// write with `--single-write`), on 127.0.0.1: it, its URL and its port.
fn split_server(args: &[&str]) -> (support::KillOnDrop, String, u16) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/process/split_server.py");
    let (child, port) = support::spawn_printing_port(
        Command::new("python3").arg(script).args(args),
        "split_server.py",
    );
    (child, format!("http://127.0.0.1:{port}/"), port)
}

/// The report of a `probe --json` run, which must have ended with 0.
fn probe_report(out: &Output, what: &str) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{what}: probe --json prints JSON ({err}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Asserts that `a` and `b` have the same keys wherever both hold an object at the same
/// place (`at`), arrays compared by their first elements: one system's null for what it does
/// not look at (the server's runtime on this host) stands beside the other's object.
fn assert_same_keys(a: &Value, b: &Value, at: &str) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys =
                |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<BTreeSet<_>>();
            assert_eq!(keys(x), keys(y), "keys of {at}");
            for (key, inner) in x {
                assert_same_keys(inner, &y[key], &format!("{at}.{key}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            if let (Some(p), Some(q)) = (x.first(), y.first()) {
                assert_same_keys(p, q, &format!("{at}[]"));
            }
        }
        _ => {}
    }
}

/// `tcpstall.exe probe` under Wine against the split server: the server's stall from the
/// socket's own view, and clean once the server writes its answer at once; the p50s go to the
/// log beside Linux's from its socket alone.
fn probe_from_its_own_socket(wine: &Wine, exe: &Path, dir: &Path) {
    let (_split, split_url, split_port) = split_server(&[]);
    let args = ["probe", "--json", split_url.as_str()];
    let stalled = probe_report(&wine.run(exe, dir, &args, None), "split server");
    assert_eq!(stalled["verdict"], "stall", "{stalled}");
    assert_eq!(stalled["culprit"], "server", "{stalled}");
    assert_eq!(stalled["evidence_source"], "socket", "{stalled}");
    assert_eq!(stalled["evidence"]["held_side"], "server", "{stalled}");
    assert!(
        stalled["stalls"]["nagle_delayed_ack"].as_u64() >= Some(1),
        "{stalled}"
    );
    assert!(
        stalled["p50_ms"].as_f64() >= Some(support::STALL_MIN_MS),
        "{stalled}"
    );
    assert_eq!(stalled["requests"], 20, "{stalled}");
    // No TCP_QUICKACK on Windows: the confirming re-run is not made, and the report says why.
    assert_eq!(stalled["confirmed"], Value::Null, "{stalled}");
    assert_eq!(stalled["confirmation"], Value::Null, "{stalled}");
    assert_eq!(stalled["retransmissions"], Value::Null, "{stalled}");
    let notes = stalled["notes"].to_string();
    assert!(
        notes.contains("weaker diagnosis") && notes.contains("times taken in user space"),
        "{stalled}"
    );
    assert!(
        notes.contains("confirmation not run") && notes.contains("TCP_QUICKACK"),
        "{stalled}"
    );
    // The server's hold waits for this host's delayed ACK: the client's fixes are Windows's
    // (its per-socket ACK frequency, the interface's registry value), never Linux's options.
    let advice = stalled["advice"].to_string();
    assert!(
        advice.contains("SIO_TCP_SET_ACK_FREQUENCY") && advice.contains("TcpAckFrequency"),
        "{stalled}"
    );
    assert!(
        !advice.contains("TCP_QUICKACK") && !advice.contains("TCP_DELACK_MAX_US"),
        "{stalled}"
    );

    // The same keys as Linux's report from its socket alone, against the same server.
    let linux = support::without_net_raw(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs");
    let on_linux = probe_report(&linux, "split server, Linux");
    assert_eq!(on_linux["evidence_source"], "socket", "{on_linux}");
    assert_same_keys(&stalled, &on_linux, "the report");

    // The text report says the same, and the page is written.
    let page = "probe.html";
    let text_args = [
        "probe",
        "--requests",
        "8",
        "--html",
        page,
        split_url.as_str(),
    ];
    let text = wine.run(exe, dir, &text_args, None);
    let said = String::from_utf8_lossy(&text.stdout);
    assert!(
        said.contains("verdict: stall") && said.contains("culprit: server"),
        "{said}"
    );
    assert!(said.contains("note: confirmation not run"), "{said}");
    assert!(!said.contains("this stall is another kind"), "{said}");
    let html = std::fs::read_to_string(dir.join(page)).expect("the probe's page is written");
    assert!(html.contains("the server holds"), "{html}");

    // Ctrl-C (Wine hands SIGINT to the program as the console's Ctrl-C) once the server has
    // answered some (about 93 bytes each): what was answered, exit 130.
    let child = wine
        .command(
            exe,
            dir,
            &["probe", "--json", "--requests", "200", split_url.as_str()],
        )
        .stdin(Stdio::null())
        .spawn()
        .expect("wine runs");
    support::wait_for_bytes_sent(split_port, 500, "the split server");
    support::interrupt(&child);
    let stopped = child.wait_with_output().expect("wait for the probe");
    assert_eq!(
        stopped.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&stopped.stderr)
    );
    let cut: Value = serde_json::from_slice(&stopped.stdout).expect("JSON after Ctrl-C");
    assert_eq!(cut["interrupted"], true, "{cut}");
    assert!(
        (1..200).contains(&cut["requests"].as_u64().unwrap_or(0)),
        "{cut}"
    );

    let (_single, single_url, _) = split_server(&["--single-write"]);
    let args = ["probe", "--json", single_url.as_str()];
    let clean = probe_report(&wine.run(exe, dir, &args, None), "single-write server");
    assert_eq!(clean["verdict"], "clean", "{clean}");
    assert_eq!(clean["culprit"], Value::Null, "{clean}");
    assert_eq!(clean["stalls"]["nagle_delayed_ack"], 0, "{clean}");
    assert_eq!(clean["requests"], 20, "{clean}");
    assert!(
        clean["p50_ms"].as_f64() < Some(support::NO_STALL_MAX_MS),
        "{clean}"
    );

    // A request written in two parts whose body Nagle holds: without TCP_INFO the socket cannot
    // see its own hold; the report must not blame the server, and must say what it cannot see.
    let split_request = [
        "probe",
        "--json",
        "--method",
        "POST",
        "--body-size",
        "2000",
        "--split-request",
        single_url.as_str(),
    ];
    let own = probe_report(&wine.run(exe, dir, &split_request, None), "split request");
    assert_ne!(own["culprit"], "server", "{own}");
    assert!(
        own["notes"]
            .to_string()
            .contains("does not tell whether the kernel held the later ones"),
        "{own}"
    );
    eprintln!(
        "probe under Wine: split server p50 {} ms (Linux, socket only: {} ms), single write p50 {} ms",
        stalled["p50_ms"], on_linux["p50_ms"], clean["p50_ms"]
    );
}

#[test]
fn windows_exe_is_a_console_program_analyzes_and_probes_as_linux_does() {
    if let Some(why) = windows_toolchain_missing() {
        support::skip(format!("no Windows build: {why}"));
        return;
    }
    eprintln!("building tcpstall.exe with scripts/build-windows (minutes the first time)");
    let exe = support::build_with_script("build-windows", &[]);
    let bytes = std::fs::read(&exe).expect("the .exe reads");
    assert_eq!(
        pe_image(&bytes),
        Some(PeImage {
            machine: 0x8664,
            magic: 0x20b,
            subsystem: 3
        }),
        "{} is not a 64-bit x86 console program",
        exe.display()
    );

    let Some(loader) = wine() else {
        support::skip("built and checked tcpstall.exe, but did not run it: no Wine (wine64)");
        return;
    };
    let wine = Wine::new(loader);
    let fixtures_dir = fixture_dir();
    let version = wine.run(&exe, &fixtures_dir, &["--version"], None);
    if !version.status.success() {
        // A DLL or function the .exe imports that this Wine has not, past the one stood in for.
        support::skip(format!(
            "built and checked tcpstall.exe, but Wine cannot run it ({}): {}",
            version.status,
            String::from_utf8_lossy(&version.stderr)
                .lines()
                .find(|l| l.contains("not found"))
                .unwrap_or("no reason given")
                .trim()
        ));
        return;
    }
    let same = |args: &[&str], stdin: Option<&Path>| {
        let on_linux = linux(&fixtures_dir, args, stdin);
        let on_windows = wine.run(&exe, &fixtures_dir, args, stdin);
        assert_eq!(
            on_windows.status.code(),
            on_linux.status.code(),
            "{args:?}: exit status; Windows said {}",
            String::from_utf8_lossy(&on_windows.stderr)
        );
        assert!(
            on_windows.stdout == on_linux.stdout,
            "{args:?}: Windows wrote\n{}\nLinux wrote\n{}",
            String::from_utf8_lossy(&on_windows.stdout),
            String::from_utf8_lossy(&on_linux.stdout)
        );
        on_linux
    };
    let names = fixtures();
    for name in &names {
        let out = same(&["analyze", "--json", name], None);
        assert!(out.status.success(), "{name}: analyze failed on Linux");
    }
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    same(&[&["analyze", "--flows"][..], &all].concat(), None);
    same(
        &["analyze", "--json", "-"],
        Some(&fixtures_dir.join(&names[0])),
    );

    // Compressed captures, and the files the reports write, in a directory of the test's own.
    let scratch = support::Scratch::new("other-systems");
    let capture = std::fs::read(fixtures_dir.join("split_response.pcap")).expect("fixture");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&capture).expect("gzip");
    std::fs::write(scratch.path("c.pcap.gz"), gz.finish().expect("gzip")).expect("write");
    std::fs::write(
        scratch.path("c.pcap.zst"),
        zstd::encode_all(&capture[..], 3).expect("zstd"),
    )
    .expect("write");
    for (args, file) in [
        (["analyze", "--json", "c.pcap.gz"].as_slice(), None),
        (["analyze", "--json", "c.pcap.zst"].as_slice(), None),
        (
            ["analyze", "--html", "w.html", "c.pcap.zst"].as_slice(),
            Some("w.html"),
        ),
        (
            ["analyze", "--annotate", "w.pcapng", "c.pcap.gz"].as_slice(),
            Some("w.pcapng"),
        ),
    ] {
        let on_linux = linux(&scratch.0, args, None);
        let from_linux = file.map(|f| std::fs::read(scratch.path(f)).expect("Linux's file"));
        let on_windows = wine.run(&exe, &scratch.0, args, None);
        assert_eq!(on_windows.stdout, on_linux.stdout, "{args:?}: output");
        assert!(on_windows.status.success(), "{args:?}: {on_windows:?}");
        if let (Some(f), Some(linux_file)) = (file, from_linux) {
            let windows_file = std::fs::read(scratch.path(f)).expect("Windows's file");
            assert!(windows_file == linux_file, "{args:?}: {f} differs");
        }
    }

    probe_from_its_own_socket(&wine, &exe, &scratch.0);

    // Every verb's options and help are Linux's; one that needs Linux parses its options, then
    // says so and exits 2.
    for verb in [
        "analyze", "lab", "probe", "sockets", "fix", "trace", "watch",
    ] {
        same(&[verb, "--help"], None);
    }
    let lab = wine.run(&exe, &scratch.0, &["lab", "--scenario", "echo"], None);
    let said = String::from_utf8_lossy(&lab.stderr);
    assert_eq!(lab.status.code(), Some(2), "{said}");
    assert!(
        said.contains("tcpstall lab needs Linux") && said.contains("tcpstall analyze"),
        "{said}"
    );
    let wrong = wine.run(&exe, &scratch.0, &["lab", "--requests", "0"], None);
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("--requests 0 is out of range"),
        "lab's options are not checked as on Linux: {wrong:?}"
    );
}

#[test]
fn macos_targets_type_check() {
    let out = support::script("check-macos")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("scripts/check-macos runs");
    let said = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(2) && said.contains("check-macos:") && !said.contains("error[") {
        // The script's own exit 2: a target or libzstd-dev it could not install.
        support::skip(format!(
            "macOS not checked: {}",
            said.lines().last().unwrap_or_default()
        ));
        return;
    }
    assert!(out.status.success(), "scripts/check-macos failed:\n{said}");
}
