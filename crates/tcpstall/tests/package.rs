//! The Debian package: `scripts/build-deb` makes it from the release build, `dpkg -i` installs
//! it, its files are where Debian puts them (binary, manual pages, completions, the
//! tcpstall-watch@.service unit and its settings, the alerting rules), `systemd-analyze verify`
//! passes the unit, the installed binary runs, and `dpkg -r` / `dpkg --purge` take everything
//! away again. The service is checked statically: it is not started.
//!
//! Needs root and dpkg; skipped, with the reason, otherwise, and when a tcpstall package is
//! already installed on this host (the test does not replace it).

mod support;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::python_http::PythonServer;
use support::Collected;

const PACKAGE: &str = "tcpstall";
const UNIT: &str = "/lib/systemd/system/tcpstall-watch@.service";
const SETTINGS: &str = "/etc/default/tcpstall-watch";

/// Every file the package installs, but its conffile.
fn installed_files() -> Vec<String> {
    let mut files = vec![
        "/usr/bin/tcpstall".to_string(),
        "/usr/share/man/man1/tcpstall.1.gz".to_string(),
        "/usr/share/bash-completion/completions/tcpstall".to_string(),
        "/usr/share/zsh/vendor-completions/_tcpstall".to_string(),
        "/usr/share/fish/vendor_completions.d/tcpstall.fish".to_string(),
        UNIT.to_string(),
        "/usr/share/tcpstall/prometheus/tcpstall-rules.yml".to_string(),
        "/usr/share/tcpstall/prometheus/tcpstall-rules.test.yml".to_string(),
        "/usr/share/doc/tcpstall/README.md".to_string(),
    ];
    for verb in [
        "lab", "analyze", "sockets", "fix", "trace", "probe", "watch",
    ] {
        files.push(format!("/usr/share/man/man1/tcpstall-{verb}.1.gz"));
    }
    files
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether dpkg has the package installed (or half-installed, or its conffiles left).
fn dpkg_knows_package() -> bool {
    let out = run("dpkg-query", &["-W", "-f=${Status}", PACKAGE]);
    out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("not-installed")
}

/// The reason to skip, if any.
fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (dpkg -i)".into());
    }
    for tool in ["dpkg", "dpkg-deb", "dpkg-query", "systemd-analyze"] {
        if Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            return Some(format!("{tool} is missing (scripts/install-deps)"));
        }
    }
    if dpkg_knows_package() {
        return Some("a tcpstall package is already installed here; the test leaves it be".into());
    }
    None
}

/// The installed package, purged when the test ends, passing or failing.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("dpkg")
            .args(["--purge", PACKAGE])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[test]
fn the_package_installs_verifies_runs_and_removes_cleanly() {
    if let Some(why) = skip_reason() {
        support::skip(format!("the Debian package test: {why}"));
        return;
    }
    // The binary the other tests run, packaged as it is: a second release build would cost a
    // minute and test nothing more.
    let deb = support::build_with_script("build-deb", &["--prebuilt"]);
    let deb = deb.to_str().expect("a UTF-8 path");

    // The control fields.
    let fields = run("dpkg-deb", &["-f", deb, "Package", "Version", "Depends"]);
    assert_ok(&fields, "dpkg-deb -f");
    let fields = String::from_utf8_lossy(&fields.stdout).into_owned();
    assert!(fields.contains(&format!("Package: {PACKAGE}")), "{fields}");
    assert!(
        fields.contains(&format!("Version: {}", env!("CARGO_PKG_VERSION"))),
        "{fields}"
    );
    // The package of the host's build depends on the C library only: libpcap is loaded at
    // run time when present.
    assert!(!fields.contains("libpcap"), "{fields}");

    let installed = Installed;
    assert_ok(&run("dpkg", &["-i", deb]), "dpkg -i");
    for file in installed_files().iter().chain([&SETTINGS.to_string()]) {
        assert!(Path::new(file).is_file(), "{file} not installed");
    }
    let listed = run("dpkg", &["-L", PACKAGE]);
    assert_ok(&listed, "dpkg -L");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for file in installed_files() {
        assert!(
            listed.lines().any(|l| l == file),
            "{file} not in dpkg -L:\n{listed}"
        );
    }
    let conffiles = run("dpkg-query", &["-W", "-f=${Conffiles}", PACKAGE]);
    assert!(
        String::from_utf8_lossy(&conffiles.stdout).contains(SETTINGS),
        "{SETTINGS} is not a conffile"
    );

    // The installed binary runs, and the unit's command line is one it accepts.
    let version = run("/usr/bin/tcpstall", &["--version"]);
    assert_ok(&version, "tcpstall --version");
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("tcpstall {}", env!("CARGO_PKG_VERSION"))
    );
    let help = run("/usr/bin/tcpstall", &["watch", "--help"]);
    assert_ok(&help, "tcpstall watch --help");
    let unit = std::fs::read_to_string(UNIT).expect("the unit reads");
    for option in ["--metrics", "--buffered", "-i"] {
        assert!(
            unit.contains(&format!(" {option} ")),
            "{option} not in the unit"
        );
        assert!(
            String::from_utf8_lossy(&help.stdout).contains(option),
            "the unit passes {option}, which watch does not take"
        );
    }
    for capability in ["CAP_NET_RAW", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"] {
        assert!(
            unit.lines()
                .any(|l| l.starts_with("AmbientCapabilities=") && l.contains(capability)),
            "{capability} not granted"
        );
    }

    service_command_as_nobody_names_a_root_process(&unit);

    // systemd reads the unit without a complaint (it checks the binary and the manual page
    // named in Documentation= too).
    let verify = run("systemd-analyze", &["verify", UNIT]);
    assert_ok(&verify, "systemd-analyze verify");
    let complaints = String::from_utf8_lossy(&verify.stderr).into_owned();
    assert!(
        complaints.trim().is_empty(),
        "systemd-analyze verify: {complaints}"
    );

    // Removed: every file goes but the settings, which dpkg keeps until the package is purged.
    assert_ok(&run("dpkg", &["-r", PACKAGE]), "dpkg -r");
    for file in installed_files() {
        assert!(!Path::new(&file).exists(), "{file} left after dpkg -r");
    }
    assert!(
        Path::new(SETTINGS).is_file(),
        "dpkg -r removed the conffile"
    );
    assert_ok(&run("dpkg", &["--purge", PACKAGE]), "dpkg --purge");
    assert!(!Path::new(SETTINGS).exists(), "{SETTINGS} left after purge");
    assert!(!dpkg_knows_package(), "dpkg still knows {PACKAGE}");
    drop(installed);
}

/// The unit's own command line, run as nobody with exactly the unit's ambient capabilities and
/// no new privileges (what systemd would give it), finds a stall of a server run by root and
/// names that server: the capabilities the unit keeps are enough for what it serves.
fn service_command_as_nobody_names_a_root_process(unit: &str) {
    let server = PythonServer::start();
    let value = |key: &str| {
        unit.lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("{key} not in the unit"))
            .to_string()
    };
    let caps = value("AmbientCapabilities=")
        .split_whitespace()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_ascii_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    let port = server.port.to_string();
    let exec_start = value("ExecStart=");
    let mut command_line = Vec::new();
    for word in exec_start.split_whitespace() {
        match word {
            "%I" => command_line.push("lo"),
            "${TCPSTALL_WATCH_METRICS}" => command_line.push("127.0.0.1:0"),
            "$TCPSTALL_WATCH_OPTIONS" => command_line.extend(["--duration", "3", "--json"]),
            "$TCPSTALL_WATCH_FILTER" => command_line.extend(["port", &port]),
            w if w.contains(['$', '%']) => panic!("the unit's {w} is new to this test"),
            w => command_line.push(w),
        }
    }
    let watch = Collected::new(
        Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
            ])
            .arg(format!("--inh-caps=-all,{caps}"))
            .arg(format!("--ambient-caps={caps}"))
            .arg(format!("--bounding-set=-all,{caps}"))
            .args(&command_line)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("setpriv (util-linux) runs"),
    );
    let what = format!("{command_line:?} as nobody");
    let mut said = watch.stderr_until("tcpstall: watching", Duration::from_secs(15), &what);
    server.requests(6);
    let (status, stdout, rest) = watch.finish(Duration::from_secs(20), &what);
    said.extend(rest);
    assert!(
        status.success(),
        "{command_line:?} as nobody: {status}: {said:?}"
    );
    let pid = u64::from(server.pid());
    let named = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .any(|e| e["kind"] == "nagle_delayed_ack" && e["pid"].as_u64() == Some(pid));
    assert!(
        named,
        "the service's command as nobody with {caps} did not name root's server {pid}:\n{stdout}"
    );
}
