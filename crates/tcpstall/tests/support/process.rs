//! What the process tests (tests/process.rs, tests/process_tree.rs, tests/trace_kernel.rs)
//! share: the fixtures of tests/fixtures/process, the binary run and its JSON read, the Python
//! split server, the binary copied where the `nobody` user can run it, and keep-alive clients
//! that idle between requests (with what `trace` must say of them).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use tcpstall::lab::client::{ClientConfig, HttpClient};

use super::{KillOnDrop, NO_STALL_MAX_MS, STALL_MIN_MS};

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

/// How long the idle clients wait after a response: far longer than a delayed ACK.
pub const IDLE: Duration = Duration::from_millis(300);

/// One keep-alive client connection of [`idle_clients`]: its address (the server's socket's
/// remote) and how long each response took to come whole.
pub struct IdleClient {
    pub local: String,
    pub turns: Vec<Duration>,
}

/// The two clients of [`idle_clients`].
pub struct IdleClients {
    /// Every second request sent at once after a response, then [`IDLE`].
    pub burst: IdleClient,
    /// [`IDLE`] after every response.
    pub idle: IdleClient,
}

/// Two keep-alive clients of `addr` run side by side, `rounds` requests each, TCP_NODELAY on,
/// each response read whole before the next request:
/// - `burst` sends every second request at once after the response before it, then idles
///   [`IDLE`]. Sending that soon after receiving puts its ACKs in ping-pong mode (delayed,
///   `tcp_event_data_sent`), so a server writing header and body apart has the body kept back
///   40 ms by Nagle, then the connection idles.
/// - `idle` idles after every response. Data coming after an idle longer than the RTO is ACKed
///   at once (`tcp_event_data_recv` → `tcp_incr_quickack`): nothing is kept back, yet the
///   server's read after its two writes waits 300 ms for the next request.
pub fn idle_clients(addr: SocketAddr, rounds: usize) -> IdleClients {
    let run = move |burst: bool| {
        std::thread::spawn(move || {
            let config = ClientConfig {
                nodelay: true,
                timeout: Duration::from_secs(5),
                ..ClientConfig::default()
            };
            let mut client = HttpClient::connect(addr, &config).expect("connect");
            let local = client.local_addr().expect("local address").to_string();
            let mut turns = Vec::with_capacity(rounds);
            for round in 0..rounds {
                turns.push(client.get("/", false).expect("response"));
                if !burst || round % 2 == 1 {
                    std::thread::sleep(IDLE);
                }
            }
            IdleClient { local, turns }
        })
    };
    let (burst, idle) = (run(true), run(false));
    IdleClients {
        burst: burst.join().expect("burst client"),
        idle: idle.join().expect("idle client"),
    }
}

/// The server's socket of `client`'s connection in a `trace --json` report.
fn server_socket<'a>(report: &'a Value, client: &IdleClient) -> &'a Value {
    report["sockets"]
        .as_array()
        .expect("sockets")
        .iter()
        .find(|s| s["remote"] == client.local.as_str())
        .unwrap_or_else(|| panic!("no socket with remote {}: {report:#}", client.local))
}

fn ms(d: &Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// What `trace` must say of the split server's connections to [`idle_clients`]: the burst
/// client's held bodies counted from the hold itself, its example the hold and not the idle
/// after it; the idle client's 300 ms reads the peer's time, no wait claimed.
pub fn assert_holds_told_from_idle(report: &Value, clients: &IdleClients) {
    // The premises: the burst client saw a body wait for its delayed ACK, the idle one never.
    assert!(
        clients.burst.turns.iter().any(|t| ms(t) >= STALL_MIN_MS),
        "no response to the burst client waited for its delayed ACK: {:?}",
        clients.burst.turns
    );
    // The first response is left out: it includes the server starting a thread for the
    // connection, each of whose system calls stops under a ptrace tracer (tens of ms on a
    // loaded host), and no segment can be kept back then: the header is the connection's first
    // data, ACKed at once (`tcp_event_data_recv` → `tcp_incr_quickack`).
    assert!(
        clients
            .idle
            .turns
            .iter()
            .skip(1)
            .all(|t| ms(t) < STALL_MIN_MS),
        "a response to the idle client waited: {:?}",
        clients.idle.turns
    );

    let held = server_socket(report, &clients.burst);
    assert!(held["waits_over_30ms"].as_u64() >= Some(1), "{held:#}");
    let example = &held["example"];
    let hold = example["hold_ms"].as_f64().unwrap_or(0.0);
    assert!(hold >= STALL_MIN_MS, "the example is a hold: {held:#}");
    assert_eq!(example["hold_is_upper_bound"], false, "{held:#}");
    assert!(
        hold < ms(&IDLE),
        "the example's hold is the delayed ACK's, not the idle after it: {held:#}"
    );

    let idle = server_socket(report, &clients.idle);
    assert!(idle["write_write_read"].as_u64() >= Some(1), "{idle:#}");
    assert_eq!(idle["waits_over_30ms"], 0, "no hold claimed: {idle:#}");
    assert_eq!(idle["unmeasured_holds_over_30ms"], 0, "{idle:#}");
    assert!(
        idle["idle_waits_over_30ms"].as_u64() >= Some(1),
        "the long reads are said to be the peer's time: {idle:#}"
    );
    let hold = idle["example"]["hold_ms"].as_f64().unwrap_or(0.0);
    assert!(hold < NO_STALL_MAX_MS, "{idle:#}");
}
