//! The hops behind a server on this host, watched while the probe runs: a capture of every TCP
//! segment on `lo` and the other interfaces, fed to the detector `analyze` uses, keeping the
//! holds on connections of the process that owns the listening socket (the proxy); a hold
//! released within a slow request's time names the backend (its process, as `watch` finds it,
//! when it is on this host; its address otherwise), its writes and whose ACK released them.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::RunLog;
use super::upstream::{baseline, round_trip, HeldUpstream, Process, MIN_REPEATS};
use crate::capture::live::{CaptureOptions, LiveCapture, OpenError, PacketSocket, PortFilter};
use crate::detect::{Detector, DetectorConfig, StallEvent};
use crate::flow::{Endpoint, Side};
use crate::host::owner::OwnerLookup;
use crate::host::procfs::{self, TcpState};
use crate::host::runtime::runtime_of;
use crate::report::model::probe::Backend;
use crate::tcp_rules;

/// How often the proxy's sockets are listed while the probe runs: a connection with a hold on
/// it lives at least the delayed ACK's 40 ms, so even one the proxy opens for a single request
/// and closes after is listed.
const SNAPSHOT_EVERY: Duration = Duration::from_millis(20);

/// Slack after a request's end within which a release upstream still counts as its own: the
/// proxy passes the answer on within microseconds on one host.
const MATCH_SLACK_NS: u64 = 2_000_000;

/// Matches the held writes on the proxy's connections to the slow requests of `log`.
pub fn held_behind(watched: &HopCapture, log: &RunLog) -> Option<HeldUpstream> {
    let latencies: Vec<Duration> = log.requests().map(|t| t.latency).collect();
    let (base, _) = baseline(&latencies, round_trip(log))?;
    let slow_from = base + tcp_rules::STALL_THRESHOLD;
    let slow: Vec<(u64, u64)> = log
        .requests()
        .filter(|t| t.latency >= slow_from)
        .map(|t| {
            let end = t.start_ns + t.latency.as_nanos() as u64 + MATCH_SLACK_NS;
            (t.start_ns, end)
        })
        .collect();
    // Each slow request's latest hold released within its time.
    let mut holds: Vec<&StallEvent> = slow
        .iter()
        .filter_map(|(start, end)| {
            watched
                .events
                .iter()
                .rev()
                .find(|e| (*start..=*end).contains(&e.ts_ns.as_nanos()))
        })
        .collect();
    let matched = holds.len();
    if matched == 0 || matched < MIN_REPEATS.min(slow.len()) {
        return None;
    }
    // The hold of median delay speaks for them: a busy host stretches one now and then, and
    // its ACK delay would name the wrong stack.
    holds.sort_by_key(|e| e.finding.delay_ns.as_nanos());
    let example = holds[matched / 2].clone();
    let backend = OwnerLookup::new()
        .owner_of(&example)
        .ok()
        .filter(|o| o.side == Side::Server)
        .map(|o| Backend {
            process: Process {
                pid: o.pid,
                command: o.command,
                runtime: runtime_of(o.pid),
            },
            nodelay: o.nodelay,
        });
    Some(HeldUpstream {
        address: SocketAddr::new(example.server.addr, example.server.port),
        backend,
        example,
        matched,
        slow: slow.len(),
    })
}

/// A capture of the hops behind a server on this host while the probe runs.
pub struct HopWatch {
    /// `lo` first, then the other interfaces the proxy's connections upstream may leave by.
    captures: Vec<LiveCapture<Detector>>,
    sockets: Arc<Mutex<HashSet<SocketAddr>>>,
    lister: Lister,
}

/// The thread listing the proxy's sockets; stopped and joined when dropped.
struct Lister {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Lister {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the hop capture found.
#[derive(Debug, Clone)]
pub struct HopCapture {
    /// Nagle holds of a peer released by a delayed ACK of the proxy, on the proxy's
    /// connections other than the probe's, in capture order.
    pub events: Vec<StallEvent>,
}

impl HopWatch {
    /// Starts watching the connections of `proxy`, the owner of the target's listening socket
    /// ([`listener_owner`]): captures every TCP segment on the interfaces they may use, and
    /// lists the proxy's sockets as it goes. `Err` says why not.
    pub fn start(proxy: &Process) -> Result<HopWatch, String> {
        // A connection to an address of this host goes over `lo`, whatever interface holds
        // the address; so does the proxy's to a backend on this host. One to a backend on
        // another host (or network namespace) leaves by another interface: each one up with an
        // address is watched too, so that the hold is seen from the proxy's side.
        let mut captures = vec![capture_all("lo").map_err(|err| match err {
            OpenError::NoPermission { .. } => "no CAP_NET_RAW to capture".to_string(),
            other => other.to_string(),
        })?];
        captures.extend(
            other_interfaces()
                .iter()
                .filter_map(|name| capture_all(name).ok()),
        );
        let sockets = Arc::new(Mutex::new(HashSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let lister = {
            let (sockets, stop, pid) = (sockets.clone(), stop.clone(), proxy.pid);
            std::thread::Builder::new()
                .name("proxy-sockets".into())
                .spawn(move || {
                    let tree = crate::host::tree::process_tree(pid);
                    loop {
                        let found = connected_sockets(&tree);
                        if let Ok(mut all) = sockets.lock() {
                            all.extend(found);
                        }
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(SNAPSHOT_EVERY);
                    }
                })
                .map_err(|err| format!("cannot start a thread: {err}"))?
        };
        Ok(HopWatch {
            captures,
            sockets,
            lister: Lister {
                stop,
                thread: Some(lister),
            },
        })
    }

    /// Stops the capture (what the kernel queued is read; nothing is waited for) and keeps
    /// the holds on the proxy's connections upstream, the probe's own (`log`) left out.
    pub fn finish(self, log: &RunLog) -> Result<HopCapture, String> {
        // The last listing is made once the requests are done.
        drop(self.lister);
        let mut found = Vec::new();
        for capture in self.captures {
            let finished = capture.stop().map_err(|err| format!("{err:#}"))?;
            found.extend(finished.consumer.finish().events);
        }
        found.sort_by_key(|e| e.ts_ns.as_nanos());
        let sockets = self.sockets.lock().map(|s| s.clone()).unwrap_or_default();
        let ours: HashSet<u16> = log.connections.iter().map(|c| c.local_port).collect();
        let proxy_end = |e: Endpoint| sockets.contains(&plain(SocketAddr::new(e.addr, e.port)));
        let events = found
            .into_iter()
            .filter(|e| {
                e.finding.kind.info().nagle_delayed_ack()
                    && e.finding.held_side == Side::Server
                    && !ours.contains(&e.client.port)
                    && proxy_end(e.client)
            })
            .collect();
        Ok(HopCapture { events })
    }
}

/// Most interfaces besides `lo` watched for the proxy's connections upstream.
const MAX_INTERFACES: usize = 8;

/// A capture of every TCP segment on `interface` into a detector of its own.
fn capture_all(interface: &str) -> Result<LiveCapture<Detector>, OpenError> {
    let socket = PacketSocket::open(interface)?;
    let detector = Detector::new(DetectorConfig {
        keep_minor_events: false,
        keep_turns: false,
        keep_socket_settled: false,
    });
    let options = CaptureOptions {
        ports: PortFilter::All,
        pcap: None,
    };
    LiveCapture::start(socket, options, detector).map_err(|err| OpenError::System {
        interface: interface.to_string(),
        what: "starting the capture",
        error: std::io::Error::other(format!("{err:#}")),
    })
}

/// The interfaces other than `lo` that are up and hold an address, in this network namespace
/// (at most [`MAX_INTERFACES`]).
fn other_interfaces() -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return names;
    };
    for ifaddr in addrs {
        let up = ifaddr.flags.contains(nix::net::if_::InterfaceFlags::IFF_UP);
        let has_ip = ifaddr
            .address
            .is_some_and(|a| a.as_sockaddr_in().is_some() || a.as_sockaddr_in6().is_some());
        let name = ifaddr.interface_name;
        if up && has_ip && name != "lo" && !names.contains(&name) && names.len() < MAX_INTERFACES {
            names.push(name);
        }
    }
    names
}

/// IPv4-mapped IPv6 addresses as IPv4, as procfs and the capture may give either.
fn plain(addr: SocketAddr) -> SocketAddr {
    procfs::unmapped(addr)
}

/// The process owning the socket listening on `target` in this network namespace, when
/// `target` is an address of this host.
pub fn listener_owner(target: SocketAddr) -> Result<Process, String> {
    if !is_local(target.ip()) {
        return Err("the server is not on this host".to_string());
    }
    let me = std::process::id();
    let table = procfs::tcp_table(me).map_err(|err| format!("cannot read the TCP table: {err}"))?;
    let wanted = plain(target);
    let listener = table
        .values()
        .find(|e| {
            e.state == TcpState::Listen
                && e.local.port() == wanted.port()
                && (e.local.ip().is_unspecified() || e.local.ip() == wanted.ip())
        })
        .ok_or_else(|| format!("nothing listens on {target} on this host"))?;
    procfs::process_holding(listener.inode)
        .map_err(|err| format!("cannot list processes: {err}"))?
        .map(|(pid, command)| Process {
            pid,
            command,
            runtime: runtime_of(pid),
        })
        .ok_or_else(|| {
            format!(
                "the process listening on {target} is not visible (another user's: run as root)"
            )
        })
}

/// The local addresses of the connected TCP sockets of the processes `tree`.
fn connected_sockets(tree: &[u32]) -> Vec<SocketAddr> {
    super::behind::connections(tree)
        .into_iter()
        .map(|(local, _)| local)
        .collect()
}

/// Whether `ip` is an address of this host (loopback, or held by an interface).
pub fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::TcpListener::bind(SocketAddr::new(ip, 0)).is_ok()
}
