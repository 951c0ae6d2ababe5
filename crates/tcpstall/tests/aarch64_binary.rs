//! The aarch64 static binary, built here by `scripts/build-static aarch64-unknown-linux-musl`
//! (clang, Debian's musl-dev:arm64, rust-lld) and run under qemu-user
//! (`qemu-aarch64-static`): it reports the same version, reads every fixture capture (and a
//! tenth of the public corpus, when present) into the same output as this host's binary, byte
//! for byte, and its lab measures the 40 ms stall on loopback and its detector names it. Its
//! Debian package is arm64.
//!
//! Without qemu-user, the Rust target or root (the script installs the C headers as root),
//! each test says why and is counted skipped.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const AARCH64: &str = "aarch64-unknown-linux-musl";
const QEMU: &str = "qemu-aarch64-static";

/// The aarch64 binary, built once for every test of this file; `Err` says why there is none.
fn aarch64_binary() -> Result<PathBuf, String> {
    static BINARY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BINARY.get_or_init(find_or_build).clone()
}

fn find_or_build() -> Result<PathBuf, String> {
    if Command::new(QEMU).arg("--version").output().is_err() {
        return Err(format!(
            "{QEMU} is missing (apt-get install qemu-user-static, or scripts/install-deps)"
        ));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 && !Path::new("/usr/include/aarch64-linux-musl").is_dir() {
        return Err("musl-dev:arm64 is not installed and only root may install it".into());
    }
    let has_target = support::has_rust_target(AARCH64);
    let has_rustup = Command::new("rustup").arg("--version").output().is_ok();
    if !has_target && !has_rustup {
        return Err(format!(
            "the Rust target {AARCH64} is not installed and there is no rustup to add it"
        ));
    }
    eprintln!(
        "building the aarch64 static binary with scripts/build-static (minutes the first time)"
    );
    Ok(support::build_with_script("build-static", &[AARCH64]))
}

/// The aarch64 binary, or `None` after saying why the test is skipped.
fn binary_or_skip(test: &str) -> Option<PathBuf> {
    match aarch64_binary() {
        Ok(path) => Some(path),
        Err(why) => {
            support::skip(format!("{test}: no aarch64 binary to run: {why}"));
            None
        }
    }
}

/// `BINARY ARGS` under qemu-user, to its end.
fn under_qemu(binary: &Path, args: &[&str]) -> Output {
    Command::new(QEMU)
        .arg(binary)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("qemu-aarch64-static runs")
}

/// This host's binary, `tcpstall ARGS`, to its end.
fn native(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tcpstall"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs")
}

#[test]
fn aarch64_binary_is_static_and_reports_the_same_version() {
    let Some(binary) = binary_or_skip("aarch64_binary_is_static_and_reports_the_same_version")
    else {
        return;
    };
    let bytes = std::fs::read(&binary).expect("the aarch64 binary reads");
    let elf = object::File::parse(&*bytes).expect("the aarch64 binary is an ELF file");
    use object::{Object, ObjectSection};
    assert_eq!(elf.architecture(), object::Architecture::Aarch64);
    assert!(
        elf.section_by_name(".interp").is_none(),
        "a static binary names no program interpreter"
    );
    assert!(elf.sections().any(|s| s.name() == Ok(".text")));
    let arm = under_qemu(&binary, &["--version"]);
    assert!(arm.status.success(), "{arm:?}");
    assert_eq!(
        String::from_utf8_lossy(&arm.stdout),
        String::from_utf8_lossy(&native(&["--version"]).stdout)
    );
}

/// The captures compared: every fixture of the repository, and every tenth file of the public
/// corpus when it is beside the repository.
fn captures() -> Vec<PathBuf> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut files = Vec::new();
    for dir in ["analyze", "capture"] {
        for entry in std::fs::read_dir(fixtures.join(dir)).expect("fixtures directory") {
            let path = entry.expect("directory entry").path();
            if path
                .extension()
                .is_some_and(|e| e == "pcap" || e == "pcapng")
            {
                files.push(path);
            }
        }
    }
    let corpus = support::corpus_dir();
    if corpus.is_dir() {
        let mut all = Vec::new();
        let mut pending = vec![corpus];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    pending.push(path);
                } else if !path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("README"))
                {
                    all.push(path);
                }
            }
        }
        all.sort();
        files.extend(all.into_iter().step_by(10));
    }
    files.sort();
    files
}

#[test]
fn aarch64_analyze_matches_this_hosts_byte_for_byte() {
    let Some(binary) = binary_or_skip("aarch64_analyze_matches_this_hosts_byte_for_byte") else {
        return;
    };
    let files = captures();
    assert!(files.len() >= 30, "fixtures found: {}", files.len());
    let mut differing = Vec::new();
    for file in &files {
        let path = file.to_str().expect("UTF-8 fixture path");
        for args in [vec!["analyze", "--json", path], vec!["analyze", path]] {
            let arm = under_qemu(&binary, &args);
            let here = native(&args);
            if arm.status.code() != here.status.code()
                || arm.stdout != here.stdout
                || arm.stderr != here.stderr
            {
                differing.push(format!("{args:?}: {:?} vs {:?}", arm.status, here.status));
            }
        }
    }
    assert!(
        differing.is_empty(),
        "{} of {} runs differ on aarch64: {differing:#?}",
        differing.len(),
        files.len() * 2
    );
}

#[test]
fn aarch64_lab_measures_the_stall_on_loopback() {
    let Some(binary) = binary_or_skip("aarch64_lab_measures_the_stall_on_loopback") else {
        return;
    };
    let out = under_qemu(
        &binary,
        &[
            "lab",
            "--json",
            "--scenario",
            "echo",
            "--variant",
            "split,single",
            "--requests",
            "10",
        ],
    );
    assert!(
        out.status.success(),
        "lab under qemu: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("lab --json");
    let rows = report["rows"].as_array().expect("rows").clone();
    let split = support::lab_row(&rows, "echo", "split");
    let single = support::lab_row(&rows, "echo", "single");
    let p50 = |row: &serde_json::Value| row["p50_ms"].as_f64().expect("p50_ms");
    assert!(
        p50(split) >= support::STALL_MIN_MS && split["stalled"] == true,
        "{split}"
    );
    assert!(
        p50(single) < support::NO_STALL_MAX_MS && single["stalled"] == false,
        "{single}"
    );
    // Its detector, on its own capture of loopback (as root: CAP_NET_RAW), names the stall
    // on the split row only.
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let found = |row: &serde_json::Value| {
            row["detector"]["stalls"]["nagle_delayed_ack"]
                .as_u64()
                .unwrap_or_else(|| panic!("the detector's column: {row}"))
        };
        assert!(found(split) >= 1, "{split}");
        assert_eq!(split["detector"]["held_side"], "client", "{split}");
        assert_eq!(found(single), 0, "{single}");
    }
}

#[test]
fn aarch64_debian_package_is_arm64() {
    let Some(binary) = binary_or_skip("aarch64_debian_package_is_arm64") else {
        return;
    };
    let deb = support::build_with_script("build-deb", &["--static", AARCH64]);
    let field = |name: &str| {
        let out = Command::new("dpkg-deb")
            .arg("-f")
            .arg(&deb)
            .arg(name)
            .output()
            .expect("dpkg-deb runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(field("Architecture"), "arm64");
    assert_eq!(field("Depends"), "", "a static binary depends on nothing");
    let scratch = support::Scratch::new("aarch64-deb");
    let status = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&scratch.0)
        .status()
        .expect("dpkg-deb -x runs");
    assert!(status.success());
    // The packaged binary (cargo-deb may strip it further): an aarch64 static one that runs.
    let packaged = scratch.path("usr/bin/tcpstall");
    let bytes = std::fs::read(&packaged).expect("the package holds /usr/bin/tcpstall");
    use object::Object;
    let elf = object::File::parse(&*bytes).expect("the packaged binary is an ELF file");
    assert_eq!(elf.architecture(), object::Architecture::Aarch64);
    let version = under_qemu(&packaged, &["--version"]);
    assert!(version.status.success(), "{version:?}");
    assert_eq!(
        version.stdout,
        under_qemu(&binary, &["--version"]).stdout,
        "the package holds the binary scripts/build-static made"
    );
    assert!(scratch
        .path("usr/share/man/man1/tcpstall-analyze.1.gz")
        .is_file());
}
