//! `watch --metrics ADDR`: the run's counters as a Prometheus scrape target (the text
//! exposition format, through the `prometheus` crate), served by a small HTTP handler on a std
//! listener bound only where the user said: one thread polling every connection, each request
//! bounded in size and time, the connections bounded in number.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::detect::{StallEvent, StallKind};
use crate::flow::Side;
use crate::host::owner::LookupCosts;
use crate::report::model::watch::Owner;

/// Distinct (command, container, pod_uid, namespace, pod) label sets of `process_stalls_total`
/// at most: the stalls of further owners are counted under `other` in all five labels (a
/// pod's names follow its UID, adding no series of their own), so a host running
/// thousands of short-lived containers keeps a bounded number of series.
pub const OWNER_LABEL_SETS: usize = 64;

/// The value of the owner labels past [`OWNER_LABEL_SETS`].
pub const OTHER: &str = "other";

/// Upper bounds of the delay histogram, seconds: the delayed-ACK floor (40 ms) and its jiffy
/// rounding, macOS/FreeBSD's 100 ms, the 200 ms-class timers (delayed-ACK maximum, cork/probe
/// timer, minimum RTO) and their doublings.
const DELAY_BUCKETS: [f64; 12] = [
    0.01, 0.02, 0.035, 0.045, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.0,
];

/// How long a scraper may take to send its whole request (not each read: a byte every few
/// seconds does not keep a connection open).
const REQUEST_DEADLINE: Duration = Duration::from_secs(5);

/// How long a scraper may take to receive its answer.
const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// The most a request line and its headers may take; a longer request is closed unanswered.
const MAX_REQUEST: usize = 8192;

/// Connections held at once (at most 8 KiB of request each, one thread for all). A new one
/// past it takes the place of the oldest connection still short of its request, from the
/// address holding most of them ([`Server::evict`]): silent or slow clients, however many,
/// do not keep a scraper out.
const MAX_CONNECTIONS: usize = 256;

/// Every metric of a run. Updating is lock-free (atomics); the registry is gathered by the
/// HTTP thread when scraped.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    stalls: IntCounterVec,
    delay: HistogramVec,
    packets: IntCounter,
    tcp_segments: IntCounter,
    kernel_dropped: IntCounter,
    interface_dropped: IntCounter,
    untracked: IntCounter,
    active_flows: IntGauge,
    flows_ended: IntCounter,
    printer_backlog: IntGauge,
    unprinted: IntCounter,
    /// `watch --kernel`'s holds: started, short (by how short), ended without their ACK.
    kernel_holds: IntCounter,
    kernel_short_holds: IntCounterVec,
    kernel_holds_ended: IntCounterVec,
    /// 1, labelled with where the stalls come from and the version.
    info: IntGaugeVec,
    /// Stalls by the process (and container) owning the socket, counted where the owner is
    /// found.
    owner_stalls: OwnerStalls,
    /// What finding the owners cost, counted where they are found.
    owner_costs: OwnerCosts,
    /// Last totals seen, so the counters advance by the difference.
    seen: [AtomicU64; 5],
    /// The same for the kernel's hold counters, in [`KernelTotals`] order.
    seen_kernel: [AtomicU64; 6],
}

/// `watch --kernel`'s hold counters at one moment (the kernel's own, and the short holds
/// read from its ring), written into the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelTotals {
    /// Holds that began.
    pub holds: u64,
    /// Released by their ACK in under 1 ms: counted in the kernel (recorded too with
    /// `--minor`, and then not counted in `minor`).
    pub short: u64,
    /// Released by their ACK from 1 ms to the stall threshold (30 ms): `nagle_minor`.
    pub minor: u64,
    /// Ended by a later write that sent everything.
    pub by_write: u64,
    /// Ended by close() (the FIN pushed the bytes).
    pub by_close: u64,
    /// Ended by a reset or abort.
    pub by_reset: u64,
}

/// Totals of a run at one moment, written into the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Packets captured.
    pub packets: u64,
    /// TCP segments decoded.
    pub tcp_segments: u64,
    /// Dropped by the kernel (capture buffer full).
    pub kernel_dropped: u64,
    /// Dropped by the interface or driver.
    pub interface_dropped: u64,
    /// Flows in the detector now.
    pub active_flows: u64,
    /// Segments not followed: `--max-flows` flows were followed already.
    pub untracked_segments: u64,
}

impl Metrics {
    /// The metrics, named `tcpstall_watch_*`, every stall series present from the start (at 0)
    /// so that a rate over it is defined before the first stall.
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new_custom(Some("tcpstall_watch".into()), None)?;
        let stalls = IntCounterVec::new(
            Opts::new(
                "stalls_total",
                "Stalls found, by kind and by the side whose data waited",
            ),
            &["kind", "held_side"],
        )?;
        let delay = HistogramVec::new(
            HistogramOpts::new(
                "stall_delay_seconds",
                "How long the data of a stall waited, by kind",
            )
            .buckets(DELAY_BUCKETS.to_vec()),
            &["kind"],
        )?;
        for kind in StallKind::ALL.into_iter().filter(|k| k.is_reported()) {
            for side in [Side::Client, Side::Server] {
                stalls.with_label_values(&[kind.name(), side.name()]);
            }
            delay.with_label_values(&[kind.name()]);
        }
        let counter = |name: &str, help: &str| IntCounter::new(name, help);
        let kernel_short_holds = IntCounterVec::new(
            Opts::new(
                "kernel_short_holds_total",
                "watch --kernel: Nagle holds released by their ACK under the stall threshold, \
                 by bound (1ms: counted in the kernel only; stall_threshold: 1 ms to 30 ms, \
                 nagle_minor)",
            ),
            &["below"],
        )?;
        let kernel_holds_ended = IntCounterVec::new(
            Opts::new(
                "kernel_holds_ended_total",
                "watch --kernel: Nagle holds ended without their ACK, by what ended them \
                 (write: a later write sent everything; close: the FIN carried them; reset)",
            ),
            &["by"],
        )?;
        for below in ["1ms", "stall_threshold"] {
            kernel_short_holds.with_label_values(&[below]);
        }
        for by in ["write", "close", "reset"] {
            kernel_holds_ended.with_label_values(&[by]);
        }
        let owner_stalls = OwnerStalls {
            counter: IntCounterVec::new(
                Opts::new(
                    "process_stalls_total",
                    "Stalls whose socket's owner was found, by kind, held side, the owner's \
                     command, container (first 12 digits of its id; empty outside containers) \
                     and pod UID, namespace and name (empty outside Kubernetes, the names \
                     empty where the node does not show them); past 64 distinct owners, \
                     under \"other\"",
                ),
                &[
                    "kind",
                    "held_side",
                    "command",
                    "container",
                    "pod_uid",
                    "namespace",
                    "pod",
                ],
            )?,
            label_sets: Arc::default(),
        };
        let labelled = |name: &str, help: &str, label: &str, values: [&str; 2]| {
            let counter = IntCounterVec::new(Opts::new(name, help), &[label])?;
            for value in values {
                counter.with_label_values(&[value]);
            }
            Ok::<_, prometheus::Error>(counter)
        };
        let owner_costs = OwnerCosts {
            lookups: labelled(
                "owner_lookups_total",
                "Stalls whose socket's owner was looked up: remembered for the flow (cached), \
                 or searched",
                "result",
                ["cached", "searched"],
            )?,
            socket_queries: labelled(
                "owner_socket_queries_total",
                "Sockets looked up by the owner searches: one exact sock_diag query by the \
                 flow's addresses, or a read of the whole /proc/net/tcp tables (netlink \
                 refused)",
                "via",
                ["sock_diag", "proc_net_tcp"],
            )?,
            fd_reads: labelled(
                "owner_fd_reads_total",
                "/proc/PID/fd reads of the owner searches: one recent owner's (process), or \
                 every process's (all, at most twice a second)",
                "scope",
                ["process", "all"],
            )?,
        };
        let info = IntGaugeVec::new(
            Opts::new(
                "info",
                "Always 1: where this watch finds its stalls (source: capture, or kernel for \
                 watch --kernel) and tcpstall's version",
            ),
            &["source", "version"],
        )?;
        let metrics = Metrics {
            info,
            owner_stalls,
            owner_costs,
            kernel_holds: counter(
                "kernel_holds_total",
                "watch --kernel: Nagle holds that began (a write left bytes waiting)",
            )?,
            kernel_short_holds,
            kernel_holds_ended,
            packets: counter("packets_total", "Packets captured")?,
            tcp_segments: counter(
                "tcp_segments_total",
                "TCP segments decoded and fed to the detector",
            )?,
            kernel_dropped: counter(
                "kernel_dropped_packets_total",
                "Packets the kernel dropped because the capture buffer was full (pcap_stats ps_drop); \
                 watch --kernel: holds lost because its ring was full",
            )?,
            interface_dropped: counter(
                "interface_dropped_packets_total",
                "Packets dropped by the interface or its driver (pcap_stats ps_ifdrop)",
            )?,
            untracked: counter(
                "untracked_packets_total",
                "TCP segments of connections not followed: --max-flows were followed already",
            )?,
            active_flows: IntGauge::new("active_flows", "TCP flows the detector follows now")?,
            flows_ended: counter(
                "flows_ended_total",
                "TCP flows retired: closed, or idle past the timeout",
            )?,
            printer_backlog: IntGauge::new(
                "printer_backlog",
                "Stalls waiting to be printed (their processes being named)",
            )?,
            unprinted: counter(
                "stalls_unprinted_total",
                "Stalls counted but not printed: the printer was 4096 behind (the capture never \
                 waits for it)",
            )?,
            stalls,
            delay,
            registry,
            seen: Default::default(),
            seen_kernel: Default::default(),
        };
        let r = &metrics.registry;
        r.register(Box::new(metrics.stalls.clone()))?;
        r.register(Box::new(metrics.delay.clone()))?;
        r.register(Box::new(metrics.owner_stalls.counter.clone()))?;
        for c in [
            &metrics.owner_costs.lookups,
            &metrics.owner_costs.socket_queries,
            &metrics.owner_costs.fd_reads,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(metrics.info.clone()))?;
        for c in [
            &metrics.packets,
            &metrics.tcp_segments,
            &metrics.kernel_dropped,
            &metrics.interface_dropped,
            &metrics.untracked,
            &metrics.flows_ended,
            &metrics.unprinted,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(metrics.active_flows.clone()))?;
        r.register(Box::new(metrics.printer_backlog.clone()))?;
        r.register(Box::new(metrics.kernel_holds.clone()))?;
        r.register(Box::new(metrics.kernel_short_holds.clone()))?;
        r.register(Box::new(metrics.kernel_holds_ended.clone()))?;
        Ok(metrics)
    }

    /// Counts one stall, or one flow side found paced by ACKs (its delay: the holds' time so
    /// far); minor Nagle holds are not counted.
    pub fn record_stall(&self, event: &StallEvent) {
        self.stall_counters().record(event);
    }

    /// The stall counters, for the thread that settles claims by their socket.
    pub fn stall_counters(&self) -> StallCounters {
        StallCounters {
            stalls: self.stalls.clone(),
            delay: self.delay.clone(),
        }
    }

    /// Says where the stalls come from: `capture` or `kernel` (`tcpstall_watch_info`).
    pub fn set_source(&self, source: &str) {
        self.info
            .with_label_values(&[source, env!("CARGO_PKG_VERSION")])
            .set(1);
    }

    /// The per-owner stall counter, for the thread that finds the owners.
    pub fn owner_stalls(&self) -> OwnerStalls {
        self.owner_stalls.clone()
    }

    /// The owner searches' cost counters, for the thread that finds the owners.
    pub fn owner_costs(&self) -> OwnerCosts {
        self.owner_costs.clone()
    }

    /// Counts `n` flows retired.
    pub fn flows_ended(&self, n: u64) {
        self.flows_ended.inc_by(n);
    }

    /// Brings the packet, drop and flow figures to `totals`.
    pub fn update(&self, totals: Totals) {
        use std::sync::atomic::Ordering::Relaxed;
        let advance = |i: usize, counter: &IntCounter, now: u64| {
            let before = self.seen[i].swap(now, Relaxed);
            counter.inc_by(now.saturating_sub(before));
        };
        advance(0, &self.packets, totals.packets);
        advance(1, &self.tcp_segments, totals.tcp_segments);
        advance(2, &self.kernel_dropped, totals.kernel_dropped);
        advance(3, &self.interface_dropped, totals.interface_dropped);
        advance(4, &self.untracked, totals.untracked_segments);
        self.active_flows
            .set(i64::try_from(totals.active_flows).unwrap_or(i64::MAX));
    }

    /// The printer's backlog now and the stalls left unprinted so far.
    pub fn printer(&self, backlog: usize, unprinted: u64) {
        self.printer_backlog
            .set(i64::try_from(backlog).unwrap_or(i64::MAX));
        self.unprinted
            .inc_by(unprinted.saturating_sub(self.unprinted.get()));
    }

    /// Brings `watch --kernel`'s hold counters to `totals`.
    pub fn update_kernel(&self, totals: KernelTotals) {
        use std::sync::atomic::Ordering::Relaxed;
        let advance = |i: usize, counter: &IntCounter, now: u64| {
            let before = self.seen_kernel[i].swap(now, Relaxed);
            counter.inc_by(now.saturating_sub(before));
        };
        let short = |below: &str| self.kernel_short_holds.with_label_values(&[below]);
        let ended = |by: &str| self.kernel_holds_ended.with_label_values(&[by]);
        advance(0, &self.kernel_holds, totals.holds);
        advance(1, &short("1ms"), totals.short);
        advance(2, &short("stall_threshold"), totals.minor);
        advance(3, &ended("write"), totals.by_write);
        advance(4, &ended("close"), totals.by_close);
        advance(5, &ended("reset"), totals.by_reset);
    }

    /// The exposition, as a scrape returns it.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding gathered families into memory fails only on invalid families, which
        // registration already refused.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// `tcpstall_watch_stalls_total` and the delay histogram, shared with the printing thread.
#[derive(Debug, Clone)]
pub struct StallCounters {
    stalls: IntCounterVec,
    delay: HistogramVec,
}

impl StallCounters {
    /// Counts one stall (minor holds are not).
    pub fn record(&self, event: &StallEvent) {
        let f = &event.finding;
        if !f.kind.is_reported() {
            return;
        }
        self.stalls
            .with_label_values(&[f.kind.name(), f.held_side.name()])
            .inc();
        self.delay
            .with_label_values(&[f.kind.name()])
            .observe(f.delay_ns.as_secs_f64());
    }
}

/// `tcpstall_watch_process_stalls_total`: stalls by owning process and container, its label
/// sets bounded by [`OWNER_LABEL_SETS`].
#[derive(Debug, Clone)]
pub struct OwnerStalls {
    counter: IntCounterVec,
    /// The (command, container, pod_uid, namespace, pod) sets given series so far.
    label_sets: Arc<Mutex<FxHashSet<[String; 5]>>>,
}

impl OwnerStalls {
    /// Counts `event` for `owner`, as [`Metrics::record_stall`] counts it.
    pub fn record(&self, event: &StallEvent, owner: &Owner) {
        let f = &event.finding;
        if !f.kind.is_reported() {
            return;
        }
        let container = owner.container.as_ref();
        let pod = container.and_then(|c| c.pod.as_ref());
        let mut labels = [
            owner.command.clone(),
            container
                .map(|c| c.short_id().to_string())
                .unwrap_or_default(),
            container
                .and_then(|c| c.pod_uid.clone())
                .unwrap_or_default(),
            pod.map(|p| p.namespace.clone()).unwrap_or_default(),
            pod.map(|p| p.pod.clone()).unwrap_or_default(),
        ];
        {
            let mut sets = self
                .label_sets
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if !sets.contains(&labels) {
                if sets.len() < OWNER_LABEL_SETS {
                    sets.insert(labels.clone());
                } else {
                    labels = [OTHER; 5].map(String::from);
                }
            }
        }
        let [command, container, pod_uid, namespace, pod] = &labels;
        self.counter
            .with_label_values(&[
                f.kind.name(),
                f.held_side.name(),
                command,
                container,
                pod_uid,
                namespace,
                pod,
            ])
            .inc();
    }
}

/// `tcpstall_watch_owner_*_total`: what finding the stalls' owners cost.
#[derive(Debug, Clone)]
pub struct OwnerCosts {
    lookups: IntCounterVec,
    socket_queries: IntCounterVec,
    fd_reads: IntCounterVec,
}

impl OwnerCosts {
    /// Brings the counters to `costs`, the owner lookup's totals so far (one thread updates
    /// them: each counter advances by the difference).
    pub fn update(&self, costs: LookupCosts) {
        let advance = |counter: &IntCounterVec, label: &str, total: u64| {
            let counter = counter.with_label_values(&[label]);
            counter.inc_by(total.saturating_sub(counter.get()));
        };
        advance(&self.lookups, "cached", costs.cached);
        advance(&self.lookups, "searched", costs.searched);
        advance(&self.socket_queries, "sock_diag", costs.sock_diag_queries);
        advance(&self.socket_queries, "proc_net_tcp", costs.table_reads);
        advance(&self.fd_reads, "process", costs.process_fd_reads);
        advance(&self.fd_reads, "all", costs.all_fd_reads);
    }
}

/// Binds `addr` (only there) and serves `GET /metrics` from a thread for the rest of the run.
/// Returns the bound address (the port, when 0 was asked).
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).with_context(|| {
        format!(
            "cannot serve metrics on {addr}: is the port in use, or the address not this \
             host's? (--metrics 127.0.0.1:9465 serves on loopback only)"
        )
    })?;
    let bound = listener.local_addr().context("metrics listener address")?;
    listener
        .set_nonblocking(true)
        .context("cannot make the metrics listener non-blocking")?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            Server {
                listener,
                connections: Vec::new(),
            }
            .run(&metrics)
        })
        .context("cannot start the metrics thread")?;
    Ok(bound)
}

/// The metrics endpoint: one thread polling the listener and every connection, none of
/// which can hold up another (each socket is non-blocking, each connection has a deadline).
struct Server {
    listener: TcpListener,
    /// In the order they were accepted: the first of an address is its oldest.
    connections: Vec<Connection>,
}

/// One scraper's connection.
struct Connection {
    stream: TcpStream,
    peer: IpAddr,
    /// When it is closed unanswered (reading) or unfinished (answering).
    deadline: Instant,
    state: State,
}

enum State {
    /// The request so far.
    Reading(Vec<u8>),
    /// The response, and how much of it the socket took.
    Answering(Vec<u8>, usize),
}

impl Server {
    fn run(mut self, metrics: &Metrics) {
        loop {
            let now = Instant::now();
            self.connections.retain(|c| c.deadline > now);
            // Woken at the nearest deadline, so that a silent connection's slot is freed then.
            let timeout = self
                .connections
                .iter()
                .map(|c| c.deadline.saturating_duration_since(now) + Duration::from_millis(1))
                .min()
                .map_or(PollTimeout::NONE, |left| {
                    PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX)
                });
            let mut fds = Vec::with_capacity(self.connections.len() + 1);
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
            fds.extend(self.connections.iter().map(|c| {
                let wanted = match c.state {
                    State::Reading(_) => PollFlags::POLLIN,
                    State::Answering(..) => PollFlags::POLLOUT,
                };
                PollFd::new(c.stream.as_fd(), wanted)
            }));
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                // Nothing else is expected of poll(2) on valid fds; not a busy loop if it is.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            let mut ready_connections = ready.iter().skip(1);
            self.connections.retain_mut(|c| {
                !ready_connections.next().copied().unwrap_or(false) || c.progress(metrics)
            });
            if ready.first().copied().unwrap_or(false) {
                self.accept();
            }
        }
    }

    /// Takes every connection waiting in the listener's queue.
    fn accept(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer.ip()),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Interrupted | ErrorKind::ConnectionAborted
                    ) => {}
                // Out of file descriptors (EMFILE, ENFILE): a connection closed makes room;
                // otherwise the listener is left for a moment rather than polled in a loop.
                Err(_) => {
                    if !self.evict() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return;
                }
            }
        }
    }

    /// Keeps a new connection, making room for it when [`MAX_CONNECTIONS`] are open.
    fn admit(&mut self, stream: TcpStream, peer: IpAddr) {
        if stream.set_nonblocking(true).is_err() {
            return;
        }
        if self.connections.len() >= MAX_CONNECTIONS && !self.evict() {
            // Every connection is being answered: this one is closed, for the scraper to retry.
            return;
        }
        self.connections.push(Connection {
            stream,
            peer,
            deadline: Instant::now() + REQUEST_DEADLINE,
            state: State::Reading(Vec::new()),
        });
    }

    /// Closes the oldest connection still short of its request, of the address holding the
    /// most such connections: a client that opens many and sends nothing loses its own first,
    /// and a scraper, which sends its request as it connects, keeps its place. False when
    /// every connection is being answered.
    fn evict(&mut self) -> bool {
        let mut waiting: FxHashMap<IpAddr, usize> = FxHashMap::default();
        for c in &self.connections {
            if matches!(c.state, State::Reading(_)) {
                *waiting.entry(c.peer).or_default() += 1;
            }
        }
        let Some((&peer, _)) = waiting.iter().max_by_key(|(_, n)| **n) else {
            return false;
        };
        match self
            .connections
            .iter()
            .position(|c| c.peer == peer && matches!(c.state, State::Reading(_)))
        {
            Some(oldest) => {
                self.connections.remove(oldest);
                true
            }
            None => false,
        }
    }
}

impl Connection {
    /// Reads what has come of the request, answers it once whole, and writes what the socket
    /// takes of the answer; false when the connection is done with (answered, closed by the
    /// client, a request past [`MAX_REQUEST`]).
    fn progress(&mut self, metrics: &Metrics) -> bool {
        if let State::Reading(head) = &mut self.state {
            match read_head(&mut self.stream, head) {
                Ok(Some(true)) => {
                    let response = respond(head, metrics);
                    // The metrics are written to a Nagle-free socket: a scrape target that
                    // stalled on its own small writes would be a poor advertisement.
                    if self.stream.set_nodelay(true).is_err() {
                        return false;
                    }
                    self.state = State::Answering(response, 0);
                    self.deadline = Instant::now() + ANSWER_DEADLINE;
                }
                Ok(Some(false)) => return true,
                Ok(None) | Err(_) => return false,
            }
        }
        let State::Answering(response, sent) = &mut self.state else {
            return true;
        };
        while let Some(rest) = response.get(*sent..).filter(|r| !r.is_empty()) {
            match self.stream.write(rest) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        false
    }
}

/// Reads what the socket holds of a request into `head`: `Some(true)` once the request line
/// and headers are whole (up to the first empty line), `Some(false)` while they are not,
/// `None` when the client closed or sent more than [`MAX_REQUEST`] bytes without an end.
fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    let mut chunk = [0u8; 1024];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Some(false)),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(chunk.get(..n).unwrap_or_default());
        let tail = head.get(from..).unwrap_or_default();
        if tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n") {
            return Ok(Some(true));
        }
        if head.len() > MAX_REQUEST {
            return Ok(None);
        }
    }
}

/// The answer to a request: the exposition for `GET /metrics`, 404 elsewhere.
fn respond(head: &[u8], metrics: &Metrics) -> Vec<u8> {
    let request_line =
        String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default());
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") | ("GET", "/") => ("200 OK", prometheus::TEXT_FORMAT, metrics.render()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "tcpstall watch serves /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_string(),
        ),
    };
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_label_sets_are_capped_and_the_rest_is_other() {
        use crate::detect::testing::Wire;
        use crate::report::model::watch::Container;
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127);
        let analysis = w.analyse();
        let event = &analysis.events[0];
        let m = Metrics::new().expect("metric names are valid");
        let owners = m.owner_stalls();
        for i in 0..OWNER_LABEL_SETS + 10 {
            let owner = Owner {
                side: Side::Server,
                pid: 100 + i as u32,
                command: "server".into(),
                fd: 3,
                port: 80,
                nodelay: None,
                cork: None,
                unreadable: None,
                listener: false,
                container: Some(Container {
                    runtime: "containerd",
                    id: format!("{i:02x}{}", "0".repeat(62)),
                    pod_uid: None,
                    pod: None,
                }),
                runtime: None,
            };
            owners.record(event, &owner);
            owners.record(event, &owner);
        }
        let text = m.render();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("tcpstall_watch_process_stalls_total{"))
            .collect();
        assert_eq!(series.len(), OWNER_LABEL_SETS + 1, "{text}");
        let other = series
            .iter()
            .find(|l| l.contains("container=\"other\""))
            .unwrap_or_else(|| panic!("no other series: {text}"));
        assert!(other.ends_with(" 20"), "{other}");
        assert!(
            series
                .iter()
                .any(|l| l.contains("container=\"010000000000\"") && l.ends_with(" 2")),
            "{text}"
        );
    }

    #[test]
    fn totals_advance_counters_by_difference() {
        let m = Metrics::new().expect("metric names are valid");
        m.update(Totals {
            packets: 10,
            active_flows: 3,
            ..Totals::default()
        });
        m.update(Totals {
            packets: 25,
            kernel_dropped: 2,
            active_flows: 1,
            ..Totals::default()
        });
        let text = m.render();
        assert!(text.contains("tcpstall_watch_packets_total 25"), "{text}");
        assert!(
            text.contains("tcpstall_watch_kernel_dropped_packets_total 2"),
            "{text}"
        );
        assert!(text.contains("tcpstall_watch_active_flows 1"), "{text}");
        assert!(
            text.contains("tcpstall_watch_stalls_total{held_side=\"server\",kind=\"rto\"} 0"),
            "{text}"
        );
    }

    fn scrape(addr: SocketAddr) -> (Duration, String) {
        let started = Instant::now();
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send");
        c.set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut body = String::new();
        let _ = c.read_to_string(&mut body);
        (started.elapsed(), body)
    }

    fn rss_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// More silent connections than the endpoint holds, all from the scraper's own address:
    /// the scrape, sent as it connects, is answered, the oldest silent connections having
    /// been closed to make room.
    #[test]
    fn a_scrape_is_answered_past_hundreds_of_silent_connections() {
        let metrics = Arc::new(Metrics::new().expect("metric names are valid"));
        let addr = serve("127.0.0.1:0".parse().expect("addr"), metrics).expect("serve");
        let silent: Vec<TcpStream> = (0..MAX_CONNECTIONS + 64)
            .map(|_| TcpStream::connect(addr).expect("connect"))
            .collect();
        let (_, body) = scrape(addr);
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(
            body.contains("\ntcpstall_watch_packets_total 0\n"),
            "{body}"
        );
        let mut oldest = &silent[0];
        oldest
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let mut byte = [0u8; 1];
        assert_eq!(
            oldest.read(&mut byte).ok(),
            Some(0),
            "the oldest silent connection was not the one closed"
        );
    }

    #[test]
    fn slow_silent_and_huge_clients_do_not_hold_up_a_scrape() {
        let metrics = Arc::new(Metrics::new().expect("metric names are valid"));
        let addr = serve("127.0.0.1:0".parse().expect("addr"), metrics).expect("serve");
        // Silent: connects and sends nothing.
        let _silent = TcpStream::connect(addr).expect("connect");
        // Slow: a byte every 2 s, for longer than the deadline.
        let slow = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).expect("connect");
            let started = Instant::now();
            for b in b"GET /metrics HTTP/1.1\r\n\r\n" {
                if c.write_all(&[*b]).is_err() || started.elapsed() > Duration::from_secs(12) {
                    return started.elapsed();
                }
                std::thread::sleep(Duration::from_secs(2));
            }
            started.elapsed()
        });
        // Huge: up to 1 GiB without a newline; the server closes it early.
        let huge = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).expect("connect");
            let chunk = vec![b'a'; 1 << 20];
            let mut sent = 0usize;
            let _ = c.write_all(b"GET /");
            while sent < 1 << 30 {
                if c.write_all(&chunk).is_err() {
                    break;
                }
                sent += chunk.len();
            }
            sent
        });
        let before = rss_kib();
        std::thread::sleep(Duration::from_millis(300));
        let (took, body) = scrape(addr);
        assert!(body.contains("200 OK"), "{body}");
        assert!(took < Duration::from_secs(2), "a scrape took {took:?}");
        let sent = huge.join().expect("huge client");
        assert!(
            sent < 1 << 30,
            "the huge request was read to its end ({sent} bytes)"
        );
        assert!(
            rss_kib() < before + 64 * 1024,
            "memory grew from {before} KiB to {} KiB",
            rss_kib()
        );
        let slow = slow.join().expect("slow client");
        assert!(
            slow < Duration::from_secs(12),
            "a client sending a byte every 2 s was kept {slow:?}"
        );
        let (took, body) = scrape(addr);
        assert!(
            body.contains("200 OK") && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
