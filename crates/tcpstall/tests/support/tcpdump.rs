//! tcpdump writing a capture for a test: started once it says it listens, stopped (SIGINT, so
//! it writes what it holds) only after the file shows every connection in it closed, instead
//! of after a fixed wait. `-U` makes tcpdump write each packet as it takes it, so the file
//! read while it runs says what has reached it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use tcpstall::decode::{flags, Segment};
use tcpstall_core::units::SeqNumber;

/// How long a stop waits for the connections' closes to reach the file.
const CLOSES_WITHIN: Duration = Duration::from_secs(5);

/// A running tcpdump, stopped when dropped (also when the test fails).
pub struct Tcpdump {
    child: Child,
    file: PathBuf,
}

impl Tcpdump {
    /// tcpdump on `lo` writing `file`, packets matching `filter` (tcpdump's words).
    pub fn start(file: &Path, filter: &[&str]) -> Tcpdump {
        Tcpdump::start_on(None, "lo", file, filter)
    }

    /// tcpdump on `interface`, inside network namespace `ns` when given.
    pub fn start_on(ns: Option<&str>, interface: &str, file: &Path, filter: &[&str]) -> Tcpdump {
        let mut command = super::command_in(ns, "tcpdump");
        command
            // Headers only (a VXLAN packet's outer and inner ones fit), and a kernel buffer
            // of 32 MiB, not 2: a loaded machine must not drop the bursts of the tests.
            .args([
                "-i",
                interface,
                "-s",
                "160",
                "-B",
                "32768",
                "--immediate-mode",
                "-U",
                "-w",
            ])
            .arg(file)
            .args(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .expect("tcpdump must be installed (scripts/install-deps) and the test run as root");
        wait_for_listening(&mut child);
        Tcpdump {
            child,
            file: file.to_path_buf(),
        }
    }

    /// Stops it once its file holds a connection and every connection in it has closed (or
    /// after 5 s, for a test that leaves one open: the test's own checks then say what is
    /// missing).
    pub fn stop(mut self) {
        self.await_closes(None);
        self.interrupt();
    }

    /// [`Tcpdump::stop`] counting only the connections on one of `ports`: a capture of all of
    /// loopback also holds other tests' connections, which may stay open.
    pub fn stop_after_ports(mut self, ports: &[u16]) {
        self.await_closes(Some(ports));
        self.interrupt();
    }

    /// Stops it at once, for a test whose connections may still be open and that needs no
    /// more of them.
    pub fn stop_now(mut self) {
        self.interrupt();
    }

    fn await_closes(&self, ports: Option<&[u16]>) {
        super::wait_until(CLOSES_WITHIN, || all_closed(&self.file, ports));
    }

    fn interrupt(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Tcpdump {
    fn drop(&mut self) {
        self.interrupt();
    }
}

/// Returns once `child` (tcpdump, or a pipeline starting with it) says on stderr that it
/// listens; its stderr is drained afterwards so that it never blocks on it.
pub fn wait_for_listening(child: &mut Child) {
    let stderr = child.stderr.take().expect("tcpdump's stderr is piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(10)).is_err() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("tcpdump did not start listening within 10 s (needs root and tcpdump)");
    }
}

/// One direction of a connection: where its FIN ends, how far it has been acknowledged.
#[derive(Default)]
struct Direction {
    fin_end: Option<SeqNumber>,
    acked: Option<SeqNumber>,
}

/// Whether the capture `file` holds a connection (on one of `ports`, when given) and every
/// such connection has closed: a reset, or both FINs sent and acknowledged. A connection whose
/// handshake was never answered is not waited for. tcpdump may lag behind the traffic, so a
/// file without any connection yet is not done.
pub fn all_closed(file: &Path, ports: Option<&[u16]>) -> bool {
    let Ok(input) = std::fs::File::open(file) else {
        return false;
    };
    type End = (IpAddr, u16);
    let mut connections: HashMap<(End, End), (bool, [Direction; 2])> = HashMap::new();
    let read = tcpstall::capture::for_each_segment(
        input,
        |seg: &Segment| {
            if ports.is_some_and(|p| !p.contains(&seg.src_port) && !p.contains(&seg.dst_port)) {
                return;
            }
            let (from, to) = ((seg.src, seg.src_port), (seg.dst, seg.dst_port));
            let (key, index) = if from <= to {
                ((from, to), 0)
            } else {
                ((to, from), 1)
            };
            let (reset, directions) = connections.entry(key).or_default();
            *reset |= seg.has(flags::RST);
            if seg.has(flags::FIN) {
                directions[index].fin_end = Some(seg.seq + seg.seq_len());
            }
            if seg.has(flags::ACK) {
                let acked = &mut directions[1 - index].acked;
                if acked.map_or(true, |a| seg.ack > a) {
                    *acked = Some(seg.ack);
                }
            }
        },
        |_| {},
    );
    // An empty file (no packet yet, or only the header): nothing to wait for is not proven.
    if read.is_err() || connections.is_empty() {
        return false;
    }
    connections.values().all(|(reset, [a, b])| {
        let closed = |d: &Direction| matches!((d.fin_end, d.acked), (Some(end), Some(acked)) if acked >= end);
        let answered = a.acked.is_some() && b.acked.is_some();
        *reset || !answered || (closed(a) && closed(b))
    })
}
