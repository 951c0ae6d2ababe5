//! What `tcpstall probe` hands its renderers ([`crate::report::probe`], the probe page of
//! [`crate::report::html`]): the run, its diagnosis, the confirmation re-run and what was found
//! behind the server, plain data the probe fills in.

use std::net::SocketAddr;

use super::latency::LatencySummary;
pub use super::Runtime;
use crate::detect::{KindCounts, StallEvent, StallKind};
use crate::flow::Side;
use crate::tcp_rules::DelackTimer;

/// Everything a probe found, for the renderers.
#[derive(Debug, Clone)]
pub struct ProbeReport {
    /// The target, as a URL.
    pub target: String,
    /// Timed requests answered.
    pub requests: usize,
    /// Requests asked for.
    pub requests_asked: usize,
    /// Connections opened.
    pub connections: usize,
    /// Kept-alive connections the server closed after an answer without `Connection: close`:
    /// the next request went again on a new connection.
    pub reconnects: usize,
    /// The run was cut short by Ctrl-C (SIGINT): the figures are those so far.
    pub interrupted: bool,
    /// HTTP answers with an error status (400 and up): (status, count), commonest first.
    pub http_errors: Vec<(u16, usize)>,
    /// Latency of the answered requests.
    pub latency: LatencySummary,
    /// The diagnosis.
    pub diagnosis: Diagnosis,
    /// The confirmation re-run, when the diagnosis has a client-side remedy.
    pub confirmation: Option<Confirmation>,
    /// Handshake time of the first connection (the connect call), ms.
    pub connect_ms: Option<f64>,
    /// The first connection's lowest RTT (TCP_INFO `tcpi_min_rtt`), ms: the path without timers.
    pub min_rtt_ms: Option<f64>,
    /// Retransmissions over all connections (TCP_INFO); `None` where the system gives no
    /// TCP_INFO.
    pub retransmissions: Option<u64>,
    /// Remarks that qualify the result.
    pub notes: Vec<String>,
    /// What went wrong; the results above are what was measured before.
    pub errors: Vec<String>,
    /// Writes paced by ACKs, and the TCP_NODELAY re-run's throughput.
    pub ack_paced: AckPaced,
    /// Requests in each timed exchange (`--pipeline`).
    pub pipeline: usize,
    /// Every connection's connect time: percentiles, and the connects that waited for a SYN
    /// resend (the request latencies start after the connect and leave them out).
    pub connect_times: Option<ConnectTimes>,
}

/// The connect times of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConnectTimes {
    /// Connects timed.
    pub connects: usize,
    /// Their percentiles.
    pub latency: LatencySummary,
    /// Connects that took at least the initial SYN timeout (1 s on Linux): their SYN, or the
    /// server's SYN-ACK, was resent.
    pub waited_for_syn: usize,
    /// The time those connects took, ms, all of them.
    pub waited_ms: f64,
}

/// The server's listening socket over the run, when the server is on this host
/// (`sock_diag`, and the TcpExt counters of its network namespace).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenQueue {
    /// The listening process.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// The address it listens on.
    pub address: SocketAddr,
    /// The backlog the kernel keeps for it: what it passed to `listen()`, capped by
    /// `net.core.somaxconn`.
    pub backlog: u32,
    /// Connections waiting for `accept()` before the run, at most during it (sampled), after.
    pub queued: [u32; 3],
    /// `net.core.somaxconn`, when readable.
    pub somaxconn: Option<u64>,
    /// Rise of `TcpExt: ListenOverflows` in the server's namespace during the run, when
    /// readable (every listener of the namespace counts there).
    pub overflows: Option<u64>,
    /// Rise of `TcpExt: ListenDrops` likewise.
    pub drops: Option<u64>,
    /// The run's timer waits are put on the overflowing queue.
    pub blamed: bool,
}

/// One side's writes paced by ACKs over the probe's connections (from the capture).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacedSide {
    /// Whose writes waited.
    pub held: Side,
    /// Connections whose writes of that side were paced.
    pub connections: usize,
    /// Holds, all those connections.
    pub holds: u64,
    /// The holds' time, each connection's union summed.
    pub time_lost: std::time::Duration,
}

/// The writes paced by ACKs in a probe's run (`--pipeline`, `--connections`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AckPaced {
    /// Paced sides found by the detector (empty without a capture, or when none was).
    pub sides: Vec<PacedSide>,
    /// Writes after the first of a batch that the kernel kept back (`tcpi_notsent_bytes` > 0
    /// right after the write), and all such writes: the socket's view, with or without a
    /// capture.
    pub held_writes: (u64, u64),
    /// Requests per second over the run: answered requests over the time from the first
    /// request to the last answer.
    pub requests_per_s: Option<f64>,
    /// Estimate without the probe's holds: requests over that time less each connection's
    /// share of the holds' time (the time lost divided by the connections). An upper bound:
    /// it ignores what the holds saved (requests gathered into fewer segments).
    pub estimate_per_s: Option<f64>,
    /// The TCP_NODELAY re-run, when the probe's own writes were paced or kept back.
    pub nodelay: Option<NoDelayRun>,
    /// Requests per batch (`--pipeline`).
    pub pipeline: usize,
}

/// The TCP_NODELAY re-run of a pipelining probe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoDelayRun {
    /// Batches (timed exchanges) answered.
    pub batches: usize,
    /// Requests answered.
    pub requests: usize,
    /// Requests per second.
    pub requests_per_s: Option<f64>,
    /// Its connections still paced on the probe's side (capture only).
    pub paced_connections: Option<usize>,
}

impl AckPaced {
    /// The probe's own writes were paced (the detector, from the capture) or kept back by the
    /// kernel in most batches (the socket, with or without a capture): a TCP_NODELAY re-run
    /// tests it.
    pub fn own_writes_held(&self) -> bool {
        let (held, all) = self.held_writes;
        self.sides.iter().any(|s| s.held == Side::Client) || (all > 0 && held * 2 > all)
    }

    /// The re-run's gain in requests per second, percent (negative: a loss).
    pub fn gain_percent(&self) -> Option<f64> {
        let before = self.requests_per_s?;
        let after = self.nodelay?.requests_per_s?;
        (before > 0.0).then(|| (after / before - 1.0) * 100.0)
    }
}

/// Where the evidence comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A capture of the probe's own traffic on this interface, through the detector.
    Capture {
        /// The interface.
        interface: String,
        /// Packets the kernel dropped from the capture's buffer.
        dropped: u64,
    },
    /// The probe's own socket only; the reason the capture was not possible.
    Socket {
        /// Why no capture.
        reason: String,
    },
}

/// One line of a stalled turn: a segment (capture) or a read/write (socket).
#[derive(Debug, Clone, PartialEq)]
pub struct EvidenceLine {
    /// Milliseconds since the first line.
    pub offset_ms: f64,
    /// Who sent it.
    pub from: Side,
    /// Payload bytes (0 for a pure ACK).
    pub bytes: u32,
    /// What it is, in words.
    pub what: String,
}

/// Who to change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Culprit {
    /// The probe's own request pattern.
    Client,
    /// The server at the far end of the probe's connection.
    Server,
    /// A connection behind the server (a proxy's to its application server): its writer's
    /// hold waits for the proxy's delayed ACK, out of the probe's reach.
    Upstream,
}

impl Culprit {
    /// Stable name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Culprit::Client => "client",
            Culprit::Server => "server",
            Culprit::Upstream => "upstream",
        }
    }
}

impl From<Side> for Culprit {
    fn from(side: Side) -> Culprit {
        match side {
            Side::Client => Culprit::Client,
            Side::Server => Culprit::Server,
        }
    }
}

/// The diagnosis of a run.
#[derive(Debug, Clone)]
pub struct Diagnosis {
    /// Evidence source.
    pub source: Source,
    /// Stalls per kind.
    pub counts: KindCounts,
    /// The pattern that explains the run: the latest stall of the commonest kind and side.
    pub example: Option<Stall>,
    /// Who holds the write; `None` when clean or when the network is to blame.
    pub culprit: Option<Culprit>,
    /// One sentence naming the pattern.
    pub explanation: Option<String>,
    /// The stalled turn, segment by segment.
    pub evidence: Vec<EvidenceLine>,
    /// Where the held write sits, as far as the evidence tells.
    pub hop: Option<String>,
    /// What to change, best first.
    pub advice: Vec<String>,
    /// The stall behind the server, when the run points there.
    pub upstream: Option<Upstream>,
    /// The server's listening socket and its accept queue, when the server is on this host.
    pub listen_queue: Option<ListenQueue>,
    /// Why the run is `undecided`: a wait in a timer's shape behind a server the probe cannot
    /// see into, and what would settle it.
    pub undecided: Option<String>,
    /// The requests were slow with no hold seen anywhere: the server's own time.
    pub server_time: Option<ServerTime>,
    /// When more than one cause struck: all of them, in order of the time they cost, the
    /// first the one `explanation`, `hop` and the first advice speak of; empty for one cause.
    pub causes: Vec<Cause>,
    /// The time the stalls of the example's kind and side cost, ms.
    pub lost_ms: f64,
    /// The runtime of the server's process on this host, when tcpstall knows its fix.
    pub runtime: Option<Runtime>,
    /// The confirming re-run needs what this system lacks (a note says what), so none ran.
    pub confirmation_not_run: bool,
}

/// A slow answer with no hold seen: the server's own time, with the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTime {
    /// Median latency, ms.
    pub p50_ms: f64,
    /// Quickest request, ms.
    pub quickest_ms: f64,
    /// The path's round trip (TCP_INFO min RTT, else the quickest connect), ms.
    pub round_trip_ms: Option<f64>,
    /// Where the probe looked for a hold and saw none, in words.
    pub looked: String,
}

/// One cause of lost time among several.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// Stable name (`nagle_delayed_ack`, `listen_queue`, …).
    pub kind: String,
    /// How many times it struck.
    pub count: u64,
    /// The time it cost, ms (an estimate where the capture cannot measure it).
    pub lost_ms: f64,
    /// One sentence naming it.
    pub explanation: String,
    /// What to change.
    pub advice: Vec<String>,
}

/// What the confirmation run changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remedy {
    /// TCP_QUICKACK re-armed after every read.
    QuickAck,
    /// TCP_NODELAY on the probe's socket.
    NoDelay,
}

/// The confirmation run's outcome.
#[derive(Debug, Clone)]
pub struct Confirmation {
    /// What was changed.
    pub remedy: Remedy,
    /// Requests answered.
    pub requests: usize,
    /// Stalls of the diagnosed kind and side in the re-run.
    pub stalls: u64,
    /// Requests of the re-run a stall's worth slower than the first run's quickest.
    pub slow: u64,
    /// Median latency of the re-run, ms.
    pub p50_ms: f64,
    /// `Some(true)`: the stall vanished; `Some(false)`: it stayed; `None`: the re-run could
    /// not tell (errors, or too few requests).
    pub confirmed: Option<bool>,
    /// Why `confirmed` is `None`, when it is.
    pub undecided: Option<String>,
    /// What the re-run did test, when the hold is out of its reach.
    pub tested: Option<String>,
    /// What it could not test: the hop it cannot reach.
    pub untested: Option<String>,
}

/// Latencies shaped like a timer: most slow requests one delayed-ACK time above the quickest.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerMode {
    /// Requests judged.
    pub requests: usize,
    /// Requests at least [`crate::tcp_rules::STALL_THRESHOLD`] slower than the quickest.
    pub slow: usize,
    /// Slow requests within the mode.
    pub in_mode: usize,
    /// The quickest request, ms: the path and the server's own time, no timer; the path's
    /// round trip when even the quickest request waited (the probe's `baseline`).
    pub quickest_ms: f64,
    /// `quickest_ms` is the path's round trip (the probe's `round_trip`): no request was free of the wait.
    pub from_round_trip: bool,
    /// How much longer than the round trip the quickest request took, ms.
    pub setup_ms: f64,
    /// The mode's median wait above the quickest, ms.
    pub mode_ms: f64,
    /// The mode's shortest and longest waits above the quickest, ms.
    pub low_ms: f64,
    /// See `low_ms`.
    pub high_ms: f64,
    /// The timer it matches.
    pub timer: DelackTimer,
}

/// A process, by pid and command name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    /// The process id.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// Its language runtime and framework, when tcpstall knows their fix.
    pub runtime: Option<Runtime>,
}

/// The application server behind the proxy, as found on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    /// The process holding the backend's socket.
    pub process: Process,
    /// Its TCP_NODELAY now, when readable.
    pub nodelay: Option<bool>,
}

/// A hold on the proxy's connection upstream that accounts for the slow requests.
#[derive(Debug, Clone)]
pub struct HeldUpstream {
    /// The backend's address (the server end of the proxy's connection).
    pub address: SocketAddr,
    /// The backend process, when it is on this host and visible.
    pub backend: Option<Backend>,
    /// The matching hold of median delay, as the detector saw it: it speaks for the others.
    pub example: StallEvent,
    /// Slow requests with a hold upstream released within their time.
    pub matched: usize,
    /// Slow requests.
    pub slow: usize,
}

/// What was found behind the server, for the report (the JSON `upstream` object).
#[derive(Debug, Clone, Default)]
pub struct Upstream {
    /// The process owning the target's listening socket (the proxy), when on this host.
    pub proxy: Option<Process>,
    /// The hold seen on the proxy's connection upstream, when it could be watched.
    pub held: Option<HeldUpstream>,
    /// The latency shape, when the latencies have it.
    pub timer: Option<TimerMode>,
    /// Why the hop behind the server could not be watched, when it could not.
    pub unwatched: Option<String>,
}

/// One stall of a request.
#[derive(Debug, Clone)]
pub struct Stall {
    /// The cause.
    pub kind: StallKind,
    /// The side whose data waited.
    pub held: Side,
    /// How long it waited, ns.
    pub delay_ns: u64,
    /// The probe's local port (the connection).
    pub local_port: u16,
    /// When the held data was released (capture) or reached the socket, ns since the epoch.
    pub ts_ns: u64,
    /// The detector's event, when a capture found it.
    pub event: Option<StallEvent>,
}
