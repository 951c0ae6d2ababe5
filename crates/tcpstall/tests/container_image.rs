//! The OCI image (packaging/container/Containerfile, scripts/build-image): built offline from
//! the static binary, unpacked with umoci, and its root filesystem run the way a runtime would
//! run it, without one (a runtime needs cgroup and rlimit settings a test machine may refuse):
//! a mount namespace, the kernel's /proc, /sys and /dev bound in, chroot, then the image's
//! own user and command, or uid 0 holding only the capabilities the DaemonSet
//! (packaging/kubernetes/tcpstall.yaml) grants, set by capsh. Inside: `--version`, `analyze`
//! of a fixture as the image's user with no capability, and `watch` on lo for a bounded time
//! finding a real stall of python3 http.server, with the manifest's capabilities.
//!
//! Needs root, buildah or podman, umoci, capsh and the static build's toolchain (scripts/
//! install-deps installs them all); `TCPSTALL_STATIC_BIN` names a static binary already
//! built. Without them each test says why and passes unchecked.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use support::python_http::PythonServer;
use support::Collected;

const FIXTURE: &str = "split_response.pcap";

/// The image unpacked: its root filesystem and runtime configuration.
struct Bundle {
    dir: PathBuf,
    config: Value,
}

impl Bundle {
    fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs")
    }

    /// The image's user (uid, gid) and command (entrypoint + cmd).
    fn user_and_args(&self) -> ((u64, u64), Vec<String>) {
        let process = &self.config["process"];
        let uid = process["user"]["uid"].as_u64().expect("uid");
        let gid = process["user"]["gid"].as_u64().expect("gid");
        let args = process["args"]
            .as_array()
            .expect("args")
            .iter()
            .map(|a| a.as_str().expect("an argument").to_string())
            .collect();
        ((uid, gid), args)
    }
}

fn tool(name: &str, arg: &str) -> bool {
    Command::new(name)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds and unpacks the image once for every test; `Err` says why it cannot be.
fn bundle() -> Result<&'static Bundle, String> {
    static BUNDLE: OnceLock<Result<Bundle, String>> = OnceLock::new();
    BUNDLE
        .get_or_init(build_and_unpack)
        .as_ref()
        .map_err(Clone::clone)
}

fn build_and_unpack() -> Result<Bundle, String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (mount namespace, chroot, capabilities, captures)".into());
    }
    if !tool("buildah", "--version") && !tool("podman", "--version") {
        return Err("neither buildah nor podman is installed (scripts/install-deps)".into());
    }
    for (name, arg) in [("umoci", "--version"), ("capsh", "--help")] {
        if !tool(name, arg) {
            return Err(format!("{name} is missing (scripts/install-deps)"));
        }
    }
    let mut args = Vec::new();
    let given = std::env::var("TCPSTALL_STATIC_BIN").ok();
    if let Some(bin) = &given {
        args = vec!["--binary", bin.as_str()];
    } else if !tool("musl-gcc", "--version") {
        return Err("musl-gcc is missing for the static build (scripts/install-deps)".into());
    }
    let archive = support::build_with_script("build-image", &args);
    let work = std::env::temp_dir().join(format!("tcpstall-image-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let layout = work.join("layout");
    std::fs::create_dir_all(&layout).expect("layout directory");
    let untar = Command::new("tar")
        .arg("-xf")
        .arg(&archive)
        .arg("-C")
        .arg(&layout)
        .status()
        .expect("tar runs");
    assert!(untar.success(), "{} does not unpack", archive.display());
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).expect("index.json"))
            .expect("index.json is JSON");
    let tag = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        .as_str()
        .expect("the archive's tag")
        .to_string();
    let dir = work.join("bundle");
    let out = Command::new("umoci")
        .arg("unpack")
        .arg("--image")
        .arg(format!("{}:{tag}", layout.display()))
        .arg(&dir)
        .output()
        .expect("umoci runs");
    assert!(
        out.status.success(),
        "umoci unpack: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).expect("config.json"))
            .expect("config.json is JSON");
    let bundle = Bundle { dir, config };
    // The image holds the binary and nothing else.
    let files: Vec<String> = walk(&bundle.rootfs());
    assert_eq!(files, ["usr/bin/tcpstall"], "the image's files");
    // What a runtime makes: mount points, and a place for the fixture.
    for d in ["proc", "sys", "dev", "data"] {
        std::fs::create_dir_all(bundle.rootfs().join(d)).expect("mount point");
    }
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/analyze")
            .join(FIXTURE),
        bundle.rootfs().join("data").join(FIXTURE),
    )
    .expect("the fixture copied in");
    Ok(bundle)
}

/// The regular files under `root`, relative, sorted.
fn walk(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                let rel = path.strip_prefix(root).expect("under the root");
                found.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// Who runs the command inside the root.
enum As {
    /// The image's own user, with no capability.
    ImageUser,
    /// uid 0 with only these capabilities (names as Kubernetes writes them: `NET_RAW`).
    RootWith(Vec<String>),
}

/// A command running inside the image's root: `args` after the image's entrypoint.
fn spawn(bundle: &Bundle, who: &As, args: &[&str]) -> Collected {
    let ((uid, gid), image_args) = bundle.user_and_args();
    let entrypoint = image_args.first().expect("an entrypoint").clone();
    let root = bundle.rootfs();
    let keep: Vec<String> = match who {
        As::ImageUser => Vec::new(),
        As::RootWith(caps) => caps
            .iter()
            .map(|c| format!("cap_{}", c.to_ascii_lowercase()))
            .collect(),
    };
    // Every capability the kernel has but those kept leaves the bounding set; a process
    // exec'd as uid 0 is then given exactly what is left.
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(40);
    let kept: Vec<u32> = keep.iter().map(|name| cap_number(name)).collect();
    let drop: Vec<String> = (0..=last)
        .filter(|n| !kept.contains(n))
        .map(|n| n.to_string())
        .collect();
    let mut capsh = format!(
        "capsh --chroot={} --drop={}",
        root.display(),
        drop.join(",")
    );
    if let As::ImageUser = who {
        capsh += &format!(" --gid={gid} --groups={gid} --uid={uid}");
    }
    let mounts: String = ["proc", "sys", "dev"]
        .iter()
        .map(|m| format!("mount --rbind /{m} {}/{m} && ", root.display()))
        .collect();
    let script = format!(
        "{mounts}cd {} && exec {capsh} --shell={entrypoint} -- \"$@\"",
        root.display()
    );
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
            "sh",
        ])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Collected::new(command.spawn().expect("unshare runs"))
}

/// The capability's number, from the kernel's list as capsh prints it.
fn cap_number(name: &str) -> u32 {
    let out = Command::new("capsh")
        .arg(format!("--explain={name}"))
        .output()
        .expect("capsh runs");
    let text = String::from_utf8_lossy(&out.stdout);
    // "cap_net_raw (13) [/proc/self/status:CapXXX: 0x0000000000002000]"
    text.split('(')
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("capsh does not know {name}: {text}"))
}

fn run(bundle: &Bundle, who: &As, args: &[&str]) -> Output {
    let (status, stdout, stderr) =
        spawn(bundle, who, args).finish(Duration::from_secs(60), &format!("{args:?}"));
    Output {
        status,
        stdout: stdout.into_bytes(),
        stderr: stderr.join("\n").into_bytes(),
    }
}

fn bundle_or_skip(test: &str) -> Option<&'static Bundle> {
    match bundle() {
        Ok(b) => Some(b),
        Err(why) => {
            support::skip(format!("{test}: no image to run: {why}"));
            None
        }
    }
}

/// The capabilities the DaemonSet adds.
fn manifest_capabilities() -> Vec<String> {
    let manifest = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/kubernetes/tcpstall.yaml"),
    )
    .expect("the manifest reads");
    let line = manifest
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("add: ["))
        .expect("capabilities: add: [...]");
    line["add: [".len()..]
        .trim_end_matches(']')
        .split(',')
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn the_image_runs_as_nobody_and_prints_its_version() {
    let Some(bundle) = bundle_or_skip("version") else {
        return;
    };
    let ((uid, _), args) = bundle.user_and_args();
    assert_eq!(uid, 65534, "the image's user is not nobody");
    assert_eq!(args, ["/usr/bin/tcpstall", "--help"]);
    let out = run(bundle, &As::ImageUser, &["--version"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let version = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        version.trim(),
        format!("tcpstall {}", env!("CARGO_PKG_VERSION")),
        "{version}"
    );
    // Without a capability, the capture refuses with the capability to grant.
    let refused = run(
        bundle,
        &As::ImageUser,
        &["watch", "-i", "lo", "--duration", "1"],
    );
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("CAP_NET_RAW"), "{why}");
}

#[test]
fn analyze_reads_a_capture_as_nobody() {
    let Some(bundle) = bundle_or_skip("analyze") else {
        return;
    };
    let out = run(
        bundle,
        &As::ImageUser,
        &["analyze", "--json", &format!("/data/{FIXTURE}")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("analyze --json");
    assert!(
        report["summary"]["stalls"]["nagle_delayed_ack"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{report}"
    );
}

#[test]
fn watch_finds_a_real_stall_with_the_manifests_capabilities() {
    let Some(bundle) = bundle_or_skip("watch") else {
        return;
    };
    let _serial = support::serial();
    let caps = manifest_capabilities();
    let server = PythonServer::start();
    let filter = format!("port {}", server.port);
    let watch = spawn(
        bundle,
        &As::RootWith(caps.clone()),
        &["watch", "-i", "lo", "--duration", "3", "--json", &filter],
    );
    watch.stderr_until(
        "tcpstall: watching",
        Duration::from_secs(20),
        "watch in the image",
    );
    server.requests(6);
    let (status, stdout, stderr) = watch.finish(Duration::from_secs(30), "watch in the image");
    assert!(
        status.code() == Some(1) || status.success(),
        "{status}: {stderr:?}"
    );
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let pid = u64::from(server.pid());
    assert!(
        events.iter().any(|e| e["kind"] == "nagle_delayed_ack"
            && e["held_side"] == "server"
            && e["pid"].as_u64() == Some(pid)),
        "with {caps:?}:\n{stdout}\n{stderr:?}"
    );
    // The capabilities really were limited: without NET_RAW the same watch is refused.
    let without: Vec<String> = caps.into_iter().filter(|c| c != "NET_RAW").collect();
    let refused = run(
        bundle,
        &As::RootWith(without),
        &["watch", "-i", "lo", "--duration", "1", &filter],
    );
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("CAP_NET_RAW"), "{why}");
}
