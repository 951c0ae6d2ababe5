//! What the process tests (tests/process.rs, tests/process_tree.rs) share: the fixtures of
//! tests/fixtures/process, the binary run and its JSON read, the Python split server, and the
//! binary copied where the `nobody` user can run it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::KillOnDrop;

/// The tcpstall binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// tests/fixtures/process/`name`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/process")
        .join(name)
}

/// `tcpstall ARGS`, run to its end with nothing on its standard input.
pub fn tcpstall(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs")
}

/// The JSON on stdout, whatever the exit status.
pub fn json_of(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "stdout is not JSON ({err}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// The JSON on stdout of a run that must have succeeded.
pub fn json_ok(output: &Output) -> Value {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    json_of(output)
}

/// `tcpstall sockets PID --json`, which must succeed: one object per socket.
pub fn sockets_json(pid: u32) -> Vec<Value> {
    let out = tcpstall(&["sockets", &pid.to_string(), "--json"]);
    json_ok(&out).as_array().expect("an array").clone()
}

/// The Python keep-alive HTTP server that writes header and body in two calls
/// (tests/fixtures/process/split_server.py), killed when dropped.
pub struct SplitServer {
    pub child: KillOnDrop,
    pub port: u16,
}

impl SplitServer {
    /// Starts it with `args` (`--single-write`: header and body in one call).
    pub fn start(args: &[&str]) -> SplitServer {
        let mut command = Command::new("python3");
        command.arg(fixture("split_server.py")).args(args);
        let (child, port) = super::spawn_printing_port(&mut command, "the python3 split server");
        SplitServer { child, port }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Its address on loopback.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Whether it has not exited.
    pub fn still_running(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }
}

/// Our binary where the `nobody` user can run it, removed with the guard.
pub struct NobodyBinary(PathBuf);

impl NobodyBinary {
    /// Copies the binary to a directory of its own that everyone may read.
    pub fn new() -> NobodyBinary {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "tcpstall-nobody-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let copy = dir.join("tcpstall");
        std::fs::copy(BIN, &copy).expect("copy binary");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        NobodyBinary(copy)
    }

    /// Runs the binary as nobody with exactly the capabilities `caps` (e.g. "+sys_ptrace",
    /// "" for none), ambient so that they survive exec (setpriv).
    pub fn run(&self, caps: &str, args: &[&str]) -> Output {
        let mut command = Command::new("setpriv");
        command.args(["--reuid=65534", "--regid=65534", "--clear-groups"]);
        if caps.is_empty() {
            command.arg("--inh-caps=-all");
        } else {
            command.args([
                format!("--inh-caps=-all,{caps}"),
                format!("--ambient-caps={caps}"),
            ]);
        }
        command
            .arg(&self.0)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("setpriv runs (util-linux)")
    }
}

impl Drop for NobodyBinary {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
