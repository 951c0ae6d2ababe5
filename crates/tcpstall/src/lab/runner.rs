//! Runs one catalogue row on real sockets and measures it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::client::{ClientConfig, Connection};
use super::expect::{Geometry, RowSizes, SegmentRules, WireOutcome};
use super::explain::{Explanation, PathNote};
use super::path::{own_packet_share, pushed_packet_share, PathEnds};
use super::scenarios::Variant;
use super::server::{Server, ServerConfig, ServerNodelay};
use super::workload::Exchange;
use crate::exchange::notes::{describe_io, ErrorTally};
use crate::host::kernel::{tcpext_counter, tcpext_counter_in};
use crate::latency::{stall_threshold_ms, LatencySummary};
pub(crate) use crate::report::model::lab::RowResult;
use crate::Side;

/// Knobs of a run that apply to every row.
#[derive(Debug, Clone)]
pub(crate) struct RunSettings {
    /// Requests per row (stream: ignored, see `stream_connections` and `stream_writes`).
    pub requests: usize,
    /// Payload size replacing each row's own, in bytes.
    pub size: Option<usize>,
    /// TCP_MAXSEG on both ends replacing each row's own.
    pub mss: Option<u32>,
    /// Stream: connections per row.
    pub stream_connections: usize,
    /// Stream: writes per connection.
    pub stream_writes: usize,
    /// Stream: connections running at once.
    pub stream_parallel: usize,
    /// No row runs longer than this.
    pub row_timeout: Duration,
    /// The emulated path of `lab --rtt`; `None`: loopback.
    pub path: Option<PathEnds>,
    /// What the kernel adds to every segment, read once for the run.
    pub segments: SegmentRules,
    /// The delayed-ACK cap of the `delack-max` rows ([`lab_delack_cap`]); `None` when the
    /// kernel lacks TCP_DELACK_MAX_US, and those rows are left out.
    pub delack_cap: Option<Duration>,
    /// `lab --peer`: a user-space stack plays one end of every row.
    pub peer: Option<std::sync::Arc<crate::peer::Peer>>,
    /// The `rto_min` the `route-delack-max` rows put on a route ([`lab_route_rto_min`]);
    /// `None` when the kernel does not cap the delayed ACK by it, and those rows are left out.
    pub route_rto_min: Option<Duration>,
}

/// The `rto_min` the `route-delack-max` rows set: the smallest `fix --route --delack-max`
/// takes, the first millisecond over one jiffy; `None` before Linux 6.7, where `rto_min` does
/// not cap the delayed ACK (`tcp_delack_max`).
pub(crate) fn lab_route_rto_min(kernel: &crate::host::kernel::KernelFacts) -> Option<Duration> {
    let since = crate::tcp_rules::DELACK_FOLLOWS_RTO_MIN_SINCE;
    (kernel.release_at_least(since) != Some(false)).then(|| {
        let hz = kernel.hz.unwrap_or(100);
        Duration::from_millis(crate::tcp_rules::route_rto_min_floor_ms(hz).into())
    })
}

/// Puts the row's route metric on the ACKing side's route to its peer, in the lab's own
/// namespace, until the returned guard is dropped; `None` for other rows. The rows reach
/// here only over the lab's path (`--rtt`): the host's routes are never changed.
fn route_fix_on(
    variant: &Variant,
    settings: &RunSettings,
) -> anyhow::Result<Option<crate::route::RouteOverride>> {
    use crate::lab::scenarios::RouteLever;
    use crate::route::{RouteChange, RouteOverride};
    let (Some(fix), Some(path)) = (variant.route_fix, settings.path.as_ref()) else {
        return Ok(None);
    };
    let (namespace, peer) = match fix.side {
        Side::Client => (&path.client, path.server_addr),
        Side::Server => (&path.server, crate::host::netns::CLIENT_ADDR),
    };
    let change = match (fix.lever, settings.route_rto_min) {
        (RouteLever::QuickAck, _) => RouteChange::QuickAck,
        (RouteLever::DelackMax, Some(rto_min)) => RouteChange::DelackMax(rto_min),
        (RouteLever::DelackMax, None) => anyhow::bail!(
            "this kernel does not cap the delayed ACK by a route's rto_min (Linux 6.7 or later)"
        ),
    };
    RouteOverride::set(namespace, peer.into(), change).map(Some)
}

/// The cap the `delack-max` rows set: the smallest this kernel accepts (probed on a scratch
/// socket), rounded up to a whole millisecond as a user would ask for it. `ENOPROTOOPT`
/// before Linux 6.13.
pub(crate) fn lab_delack_cap() -> std::io::Result<Duration> {
    let (floor, _) = crate::host::sockopt::delack_max_range()?;
    Ok(Duration::from_millis(
        floor.as_micros().div_ceil(1000) as u64
    ))
}

/// Runs `variant`; `watch_port` is called with the server's port before the first connect:
/// every connection of the row goes to that port, in a capture as on the sockets.
pub(crate) fn run_variant(
    variant: &Variant,
    settings: &RunSettings,
    watch_port: &dyn Fn(u16),
) -> anyhow::Result<RowResult> {
    let sizes = settings
        .segments
        .sizes_of(variant, settings.size, settings.mss);
    let deadline = Instant::now() + settings.row_timeout;
    let path = settings.path.as_ref();
    let server = start_server(variant, settings, &sizes, deadline)?;
    let addr = server.addr();
    watch_port(addr.port());
    let client = client_config(variant, settings, sizes.mss)?;
    let _route = route_fix_on(variant, settings)?;
    let corking_before = autocorking_count(path);
    let row = RowContext {
        variant,
        settings,
        rounds: batched_rounds(
            settings.requests,
            WireOutcome::of(variant, &sizes).detector_kind(variant),
        ),
        size: sizes.size,
        addr,
        client: &client,
        deadline,
    };
    let outcome = client_side(&row);
    let corking_after = autocorking_count(path);
    let report = server.stop();
    let run = RowRun {
        outcome,
        report,
        port: addr.port(),
        corking: (corking_before, corking_after),
    };
    Ok(row_result(variant, settings, &sizes, run))
}

/// Starts the row's server: the peer's when it plays the server (`lab --peer-side server`),
/// else the kernel's, with the row's delayed-ACK cap on the server's side.
fn start_server(
    variant: &Variant,
    settings: &RunSettings,
    sizes: &RowSizes,
    deadline: Instant,
) -> anyhow::Result<RowServer> {
    let (size, mss) = (sizes.size, sizes.mss);
    let server_cap = delack_max_on(variant, settings, Side::Server)?;
    Ok(match settings.peer.as_deref() {
        Some(peer) if peer.side == crate::peer::PeerSide::Server => {
            let job = crate::peer::server::ServerJob {
                protocol: (variant.workload.protocol)(size),
                reply: variant.server_reply,
                options: crate::peer::stack::ConnOptions {
                    nodelay: variant.server_nodelay != ServerNodelay::Off,
                },
                deadline,
            };
            RowServer::Peer(
                peer.start_server(job, variant.server_quickack, server_cap, mss)
                    .context("cannot start the peer's server")?,
            )
        }
        _ => RowServer::Kernel(
            Server::start(server_config(
                variant,
                size,
                mss,
                deadline,
                settings.path.as_ref(),
                server_cap,
            ))
            .context("cannot start the lab server")?,
        ),
    })
}

/// The client sockets' setup in `variant`'s run: its options, its delayed-ACK cap on the
/// client's side, in the client's namespace over an emulated path.
fn client_config(
    variant: &Variant,
    settings: &RunSettings,
    mss: Option<u32>,
) -> anyhow::Result<ClientConfig> {
    Ok(ClientConfig {
        mss,
        nodelay: variant.client_nodelay,
        quickack_rearm: variant.client_quickack,
        delack_max: delack_max_on(variant, settings, Side::Client)?,
        namespace: settings.path.as_ref().map(|p| p.client.clone()),
        ..ClientConfig::default()
    })
}

/// Runs the client side of a row: on the peer's stack when it plays the client, else on
/// kernel sockets.
fn client_side(row: &RowContext<'_>) -> ClientOutcome {
    match row.settings.peer.as_deref() {
        Some(peer) if peer.side == crate::peer::PeerSide::Client => peer_client(peer, row),
        _ => run_client(row),
    }
}

/// A row's run, over: what both ends measured.
struct RowRun {
    /// The client side's.
    outcome: ClientOutcome,
    /// The server's, once stopped.
    report: crate::exchange::ServerReport,
    /// The server's port.
    port: u16,
    /// TcpExt TCPAutoCorking of the clients' namespace before and after the client side ran.
    corking: (Option<u64>, Option<u64>),
}

/// The row's result: its latencies against the stall threshold, explained by the kernel rules,
/// with what the kernel says of its segments.
fn row_result(
    variant: &Variant,
    settings: &RunSettings,
    sizes: &RowSizes,
    run: RowRun,
) -> RowResult {
    let RowRun {
        mut outcome,
        report,
        port,
        corking: (corking_before, corking_after),
    } = run;
    let (size, mss) = (sizes.size, sizes.mss);
    let path = settings.path.as_ref();
    let is_stream = variant.workload.is_one_way();
    let latencies = latencies_of(variant, &mut outcome, &report.arrivals);
    let inherited = inherited(variant, &report);
    outcome.errors.merge(report.errors);
    let summary = LatencySummary::of(&latencies);
    let requests = outcome.requests.max(1) as f64;
    let rtt = path.map_or(Duration::ZERO, |p| p.shape.rtt);
    let geometry = Geometry::of(variant, sizes);
    let expected = WireOutcome::of(variant, sizes);
    let threshold = stall_threshold_ms(expected.round_trips(), rtt);
    let stalled = summary.p50_ms >= threshold;
    let explanation = explanation(variant, settings, geometry, &expected, stalled);
    RowResult {
        scenario: variant.scenario.name(),
        variant: variant.name_in_run(settings.size),
        requests: outcome.requests,
        p50_ms: summary.p50_ms,
        p99_ms: summary.p99_ms,
        max_ms: summary.max_ms,
        segments_per_request: (outcome.client_segments + report.data_segs_out) as f64 / requests,
        stalled,
        stall_threshold_ms: threshold,
        path_rtt_ms: path.map(|p| p.shape.rtt.as_secs_f64() * 1000.0),
        expected_stall: expected.stalls(),
        explanation,
        stalled_requests: latencies
            .iter()
            .filter(|l| l.as_secs_f64() * 1000.0 >= threshold)
            .count(),
        held_side: expected.held_side(),
        detector: None,
        expected_detector_kind: expected.detector_kind(variant),
        detector_kind_checked: expected.detector_kind(variant).and_then(|kind| {
            let (depth, connections) = variant.workload.batches().unwrap_or((1, 1));
            let rounds = outcome.requests / (depth * connections).max(1);
            super::own_traffic::kind_checked(kind, rounds)
        }),
        server_port: port,
        connections: outcome.connections,
        size,
        message_parts: [geometry.first, geometry.second],
        payload_mss: geometry.mss,
        mss,
        client_data_segments: outcome.client_segments,
        server_data_segments: report.data_segs_out,
        own_segment_share: is_stream.then(|| (outcome.client_segments as f64 / requests).min(1.0)),
        own_packet_share: path
            .filter(|_| is_stream)
            .map(|ends| own_packet_share(&ends.segments, port, size, outcome.requests)),
        pushed_packet_share: path
            .filter(|_| is_stream)
            .map(|ends| pushed_packet_share(&ends.segments, port)),
        autocorking_delta: if is_stream {
            corking_before
                .zip(corking_after)
                .map(|(before, after)| after.saturating_sub(before))
        } else {
            None
        },
        requests_per_second: outcome
            .busy
            .filter(|busy| !busy.is_zero())
            .map(|busy| outcome.requests as f64 / busy.as_secs_f64()),
        throughput_lost: None,
        inherited,
        errors: outcome.errors.lines(),
    }
}

/// The row's latencies: the client's request turns, or for the stream each write's delivery
/// (from the server's `arrivals`), the stream's request count then being its writes, and the
/// writes that never arrived noted.
fn latencies_of(
    variant: &Variant,
    outcome: &mut ClientOutcome,
    arrivals: &std::collections::HashMap<u16, Vec<Instant>>,
) -> Vec<Duration> {
    if !variant.workload.is_one_way() {
        return std::mem::take(&mut outcome.latencies);
    }
    let latencies = stream_latencies(&outcome.stream_writes, arrivals);
    outcome.requests = outcome.stream_writes.iter().map(|(_, w)| w.len()).sum();
    if latencies.len() < outcome.requests {
        outcome.errors.push(format!(
            "the server saw {} of {} writes arrive",
            latencies.len(),
            outcome.requests
        ));
    }
    latencies
}

/// The row's explanation by the kernel rules, with the caps it ran with, the path's part and
/// its lost segment; marked UNEXPECTED when the row's stall disagrees with them.
fn explanation(
    variant: &Variant,
    settings: &RunSettings,
    geometry: Geometry,
    expected: &WireOutcome,
    stalled: bool,
) -> String {
    let path = settings.path.as_ref();
    let mut explanation = Explanation::of(variant, geometry).to_string();
    if let (Some(_), Some(max)) = (variant.delack_cap, settings.delack_cap) {
        explanation = format!("{explanation}; cap {} ms on this kernel", max.as_millis());
    }
    let route_capped = variant.route_fix.map(|fix| fix.lever)
        == Some(crate::lab::scenarios::RouteLever::DelackMax);
    if let (true, Some(rto_min)) = (route_capped, settings.route_rto_min) {
        explanation = format!("{explanation}; rto_min {} ms here", rto_min.as_millis());
    }
    if path.is_some() {
        explanation = format!("{explanation}; {}", PathNote::of(variant, expected));
    }
    if let Some(lost) = path.and_then(|p| p.shape.lose_segment) {
        explanation = format!(
            "the path lost data segment {lost} of each connection (client to server), and its \
             repair adds to these times; {explanation}"
        );
    }
    if stalled != expected.stalls() {
        explanation = format!("UNEXPECTED on this kernel; the kernel rules say: {explanation}");
    }
    explanation
}

/// Whether the accepted socket carried over the listener's setting the row is about
/// (TCP_NODELAY or TCP_QUICKACK); `None` for the other rows.
fn inherited(variant: &Variant, report: &crate::exchange::ServerReport) -> Option<bool> {
    match (variant.server_nodelay, variant.listener_quickack) {
        (ServerNodelay::Listener, _) => report.accepted_nodelay,
        // The accepted socket reads TCP_QUICKACK as !pingpong: equal to the listener's value
        // means the setting was carried over.
        (_, Some(on)) => report.accepted_quickack.map(|q| q == on),
        _ => None,
    }
}

/// The variant every batched row's rate is compared with: the same scenario with TCP_NODELAY.
const RATE_REFERENCE: &str = "nodelay";

/// Sets each batched row's [`RowResult::throughput_lost`] against its scenario's `nodelay`
/// row of the same run (same path), when that row ran.
pub(crate) fn set_throughput_lost(rows: &mut [RowResult]) {
    let references: Vec<(&'static str, f64)> = rows
        .iter()
        .filter(|r| r.variant == RATE_REFERENCE)
        .filter_map(|r| Some((r.scenario, r.requests_per_second?)))
        .collect();
    for row in rows.iter_mut().filter(|r| r.variant != RATE_REFERENCE) {
        let reference = references.iter().find(|(s, _)| *s == row.scenario);
        if let (Some(&(_, reference)), Some(rate)) = (reference, row.requests_per_second) {
            if reference > 0.0 {
                row.throughput_lost = Some(1.0 - rate / reference);
            }
        }
    }
}

/// The server of `variant` with a `size`-byte payload and TCP_MAXSEG `mss`, as its row runs
/// it: its protocol, its write strategy and socket options (on the emulated `path`, if any).
pub(crate) fn server_config(
    variant: &Variant,
    size: usize,
    mss: Option<u32>,
    deadline: Instant,
    path: Option<&PathEnds>,
    delack_max: Option<Duration>,
) -> ServerConfig {
    ServerConfig {
        bind: path.map_or(Ipv4Addr::LOCALHOST, |p| p.server_addr),
        namespace: path.map(|p| p.server.clone()),
        reply: variant.server_reply,
        mss,
        nodelay: variant.server_nodelay,
        listener_quickack: variant.listener_quickack,
        quickack_rearm: variant.server_quickack,
        delack_max,
        ..ServerConfig::new((variant.workload.protocol)(size), deadline)
    }
}

/// The delayed-ACK cap `side`'s socket sets in `variant`'s run: the run's cap on the side the
/// row names, none elsewhere; an error when the row needs one the kernel cannot give.
pub(crate) fn delack_max_on(
    variant: &Variant,
    settings: &RunSettings,
    side: Side,
) -> anyhow::Result<Option<Duration>> {
    match (variant.delack_cap, settings.delack_cap) {
        (Some(_), None) => anyhow::bail!("this kernel has no TCP_DELACK_MAX_US to cap"),
        (capped, cap) => Ok(cap.filter(|_| capped == Some(side))),
    }
}

/// TcpExt TCPAutoCorking of the clients' network namespace: counters are per namespace, so on
/// an emulated path they are read by a thread inside the client's.
fn autocorking_count(path: Option<&PathEnds>) -> Option<u64> {
    match path {
        None => tcpext_counter("TCPAutoCorking"),
        Some(ends) => ends
            .client
            .run(|| {
                Ok(tcpext_counter_in(
                    "/proc/thread-self/net/netstat",
                    "TCPAutoCorking",
                ))
            })
            .ok()
            .flatten(),
    }
}

/// What the client side of a row needs to run.
#[derive(Clone, Copy)]
struct RowContext<'a> {
    variant: &'a Variant,
    settings: &'a RunSettings,
    /// Rounds a batched row runs ([`batched_rounds`]); `--requests` for the others.
    rounds: usize,
    size: usize,
    addr: SocketAddr,
    client: &'a ClientConfig,
    deadline: Instant,
}

/// What the client side of a row measured.
#[derive(Debug, Default)]
struct ClientOutcome {
    requests: usize,
    connections: usize,
    client_segments: u64,
    latencies: Vec<Duration>,
    /// Stream: per client port, when each write was handed to the kernel.
    stream_writes: Vec<(u16, Vec<Instant>)>,
    /// Batched rows: time spent in rounds, for the request rate.
    busy: Option<Duration>,
    errors: ErrorTally,
}

/// Runs the client side of a row: request/response turns (or the stream's one-way writes),
/// bounded by the request count and the row's deadline.
fn run_client(row: &RowContext<'_>) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let workload = row.variant.workload;
    let per_request = row.variant.per_request();
    let reply_end = match workload.exchange {
        Exchange::Turns { reply_end } => reply_end,
        Exchange::OneWay => return run_stream(row),
        Exchange::Batches {
            reply_end,
            depth,
            connections,
        } => return run_batches(row, reply_end, depth, connections),
    };
    // The request's parts, written with the row's strategy.
    let request = (workload.request)(row.size, &row.addr.to_string(), per_request);
    let mut connection: Option<Connection> = None;
    while outcome.requests < row.settings.requests && Instant::now() < row.deadline {
        if connection.is_none() {
            match Connection::connect(row.addr, row.client) {
                Ok(c) => connection = Some(c),
                Err(err) => {
                    outcome
                        .errors
                        .push(describe_io(&format!("connect to {}", row.addr), &err));
                    break;
                }
            }
            outcome.connections += 1;
        }
        let Some(conn) = connection.as_mut() else {
            break;
        };
        let parts: Vec<&[u8]> = request.iter().map(Vec::as_slice).collect();
        let result = conn.round_trip(row.variant.client_write, &parts, reply_end);
        match result {
            Ok(latency) => {
                outcome.latencies.push(latency);
                outcome.requests += 1;
            }
            Err(err) => {
                outcome
                    .errors
                    .push(format!("request {}: {err}", outcome.requests + 1));
                break;
            }
        }
        if per_request {
            finish_connection(&mut connection, &mut outcome);
        }
    }
    finish_connection(&mut connection, &mut outcome);
    note_timeout(
        &mut outcome,
        row.settings.requests,
        row.settings.row_timeout,
    );
    outcome
}

/// Runs a batched row: every round, `depth` requests written on each of `connections`
/// connections with the row's strategy, then the replies read as they come, one thread
/// polling every socket (an event loop). A request's latency runs from its round's start to
/// its reply; `busy` is the time spent in rounds, for the rate.
fn run_batches(
    row: &RowContext<'_>,
    reply_end: crate::exchange::framing::FrameEnd,
    depth: usize,
    connections: usize,
) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let request = (row.variant.workload.request)(row.size, &row.addr.to_string(), false);
    let parts: Vec<&[u8]> = request.iter().map(Vec::as_slice).collect();
    let mut conns = Vec::with_capacity(connections);
    for _ in 0..connections {
        match Connection::connect(row.addr, row.client) {
            Ok(conn) => conns.push(conn),
            Err(err) => {
                outcome
                    .errors
                    .push(describe_io(&format!("connect to {}", row.addr), &err));
                break;
            }
        }
    }
    outcome.connections = conns.len();
    let mut busy = Duration::ZERO;
    let mut rounds = 0;
    while outcome.errors.is_empty() && rounds < row.rounds && Instant::now() < row.deadline {
        match batch_round(row, &mut conns, &parts, reply_end, depth) {
            Ok((latencies, took)) => {
                outcome.requests += latencies.len();
                outcome.latencies.extend(latencies);
                busy += took;
            }
            Err(err) => outcome.errors.push(format!("round {}: {err}", rounds + 1)),
        }
        rounds += 1;
    }
    outcome.busy = Some(busy);
    for conn in conns {
        finish_connection(&mut Some(conn), &mut outcome);
    }
    note_timeout(
        &mut outcome,
        row.rounds * depth * connections,
        row.settings.row_timeout,
    );
    outcome
}

/// One round of a batched row: the requests written on every connection, then every reply
/// read; the latency of each reply from the round's start, and the round's duration.
fn batch_round(
    row: &RowContext<'_>,
    conns: &mut [Connection],
    parts: &[&[u8]],
    reply_end: crate::exchange::framing::FrameEnd,
    depth: usize,
) -> std::io::Result<(Vec<Duration>, Duration)> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::io::Read;
    use std::os::fd::AsFd;
    let start = Instant::now();
    for conn in conns.iter_mut() {
        row.variant
            .client_write
            .write_message(conn.stream(), parts)?;
    }
    let mut pending = vec![depth; conns.len()];
    let mut buffers = vec![Vec::new(); conns.len()];
    let mut latencies = Vec::with_capacity(depth * conns.len());
    let mut chunk = vec![0u8; 64 * 1024];
    while pending.iter().any(|&n| n > 0) {
        let left = row
            .deadline
            .saturating_duration_since(Instant::now())
            .min(row.client.timeout);
        let waiting: Vec<usize> = (0..conns.len()).filter(|&i| pending[i] > 0).collect();
        let mut fds: Vec<PollFd<'_>> = waiting
            .iter()
            .map(|&i| PollFd::new(conns[i].as_fd(), PollFlags::POLLIN))
            .collect();
        let timeout =
            PollTimeout::try_from(left.as_millis().min(60_000) as i32).unwrap_or(PollTimeout::ZERO);
        let ready = match poll(&mut fds, timeout) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "{} replies still missing after {} ms",
                        pending.iter().sum::<usize>(),
                        start.elapsed().as_millis()
                    ),
                ))
            }
            Ok(_) => fds
                .iter()
                .map(|fd| fd.revents().is_some_and(|r| !r.is_empty()))
                .collect::<Vec<bool>>(),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(err) => return Err(err.into()),
        };
        drop(fds);
        for (&i, _) in waiting.iter().zip(ready).filter(|(_, r)| *r) {
            let read = conns[i].stream().read(&mut chunk)?;
            if read == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "server closed the connection before replying",
                ));
            }
            let now = Instant::now();
            buffers[i].extend_from_slice(&chunk[..read]);
            while let Some(end) = reply_end(&buffers[i]) {
                buffers[i].drain(..end);
                pending[i] = pending[i].saturating_sub(1);
                latencies.push(now.saturating_duration_since(start));
            }
        }
    }
    Ok((latencies, start.elapsed()))
}

/// The server of a row: the kernel's, or the peer's (`lab --peer-side server`).
enum RowServer {
    Kernel(Server),
    Peer(crate::peer::server::PeerServer),
}

impl RowServer {
    fn addr(&self) -> std::net::SocketAddr {
        match self {
            RowServer::Kernel(server) => server.addr(),
            RowServer::Peer(server) => server.addr(),
        }
    }

    fn stop(self) -> crate::exchange::ServerReport {
        match self {
            RowServer::Kernel(server) => server.stop(),
            RowServer::Peer(server) => server.stop(),
        }
    }
}

/// Runs the client side of a row on the peer's user-space stack (`lab --peer`).
fn peer_client(peer: &crate::peer::Peer, row: &RowContext<'_>) -> ClientOutcome {
    use crate::peer::client::{RequestJob, StreamJob};
    use crate::peer::stack::ConnOptions;
    use crate::peer::ClientJob;
    let mut outcome = ClientOutcome::default();
    let std::net::SocketAddr::V4(server) = row.addr else {
        outcome.errors.push("the peer speaks IPv4 only");
        return outcome;
    };
    let options = ConnOptions {
        nodelay: row.variant.client_nodelay,
    };
    let workload = row.variant.workload;
    let per_request = row.variant.per_request();
    let parts = (workload.request)(row.size, &row.addr.to_string(), per_request);
    let turns = |reply_end, replies, requests| {
        ClientJob::Requests(RequestJob {
            server,
            parts: parts.clone(),
            write: row.variant.client_write,
            reply_end,
            replies,
            requests,
            per_request,
            options,
            deadline: row.deadline,
        })
    };
    let job = match workload.exchange {
        Exchange::Turns { reply_end } => turns(reply_end, 1, row.settings.requests),
        // One connection: a pipeline's turns, each answered request by request.
        Exchange::Batches {
            reply_end,
            depth,
            connections: 1,
        } => turns(reply_end, depth, row.rounds),
        Exchange::Batches { .. } => {
            outcome.errors.push(
                "the peer drives one connection at a time; run the concurrent rows without \
                 --peer",
            );
            return outcome;
        }
        Exchange::OneWay => ClientJob::Stream(StreamJob {
            server,
            payload: parts.concat(),
            connections: row.settings.stream_connections,
            writes: row.settings.stream_writes,
            pause: Duration::from_millis(row.variant.pause_ms),
            options,
            deadline: row.deadline,
        }),
    };
    let mss = row.settings.mss.or(row.variant.mss);
    let cap = delack_max_on(row.variant, row.settings, Side::Client).unwrap_or(None);
    match peer.run_client(job, row.variant.client_quickack, cap, mss) {
        Ok(run) => {
            outcome.requests = run.requests;
            outcome.connections = run.connections;
            outcome.client_segments = run.data_segments;
            outcome.latencies = run.latencies;
            outcome.stream_writes = run.stream_writes;
            outcome.busy = workload.batches().map(|_| run.busy);
            for error in run.errors {
                outcome.errors.push(error);
            }
            if !workload.is_one_way() {
                let (depth, rounds) = match workload.batches() {
                    Some((depth, _)) => (depth, row.rounds),
                    None => (1, row.settings.requests),
                };
                note_timeout(&mut outcome, rounds * depth, row.settings.row_timeout);
            }
        }
        Err(err) => outcome.errors.push(format!("the peer: {err}")),
    }
    outcome
}

/// Rounds a batched row runs for `--requests`, its capture expected to show `kind`: the rows
/// the pacing check concerns (`nagle_ack_paced` expected, and their controls, nothing expected)
/// at least what the detector's rule needs to decide
/// ([`super::own_traffic::MIN_PACED_ROUNDS`]); a row waiting for a timer each round is checked
/// per stall, and keeps its count.
fn batched_rounds(requests: usize, kind: Option<&str>) -> usize {
    match kind {
        None | Some(super::expect::ACK_PACED_KIND) => {
            requests.max(super::own_traffic::MIN_PACED_ROUNDS)
        }
        Some(_) => requests,
    }
}

/// Says so when the row timeout cut a row short, so that fewer requests are not mistaken for
/// the whole run.
fn note_timeout(outcome: &mut ClientOutcome, asked: usize, row_timeout: Duration) {
    if outcome.errors.is_empty() && outcome.requests < asked {
        outcome.errors.push(format!(
            "stopped by the {} s row timeout after {} of {asked} requests (raise --row-timeout)",
            row_timeout.as_secs(),
            outcome.requests
        ));
    }
}

/// Adds the connection's segment count and closes it.
fn finish_connection(connection: &mut Option<Connection>, outcome: &mut ClientOutcome) {
    if let Some(conn) = connection.take() {
        let _ = conn.wait_until_acked(Duration::from_secs(1));
        match conn.data_segs_out() {
            Ok(segments) => outcome.client_segments += u64::from(segments),
            Err(err) => outcome.errors.push(format!("TCP_INFO: {err}")),
        }
    }
}

fn run_stream(row: &RowContext<'_>) -> ClientOutcome {
    let next = AtomicUsize::new(0);
    let outcome = Mutex::new(ClientOutcome::default());
    let payload = (row.variant.workload.request)(row.size, &row.addr.to_string(), false).concat();
    let pause = Duration::from_millis(row.variant.pause_ms);
    std::thread::scope(|scope| {
        for _ in 0..row.settings.stream_parallel.max(1) {
            scope.spawn(|| {
                while next.fetch_add(1, Ordering::SeqCst) < row.settings.stream_connections
                    && Instant::now() < row.deadline
                {
                    let result = stream_connection(row, &payload, pause);
                    let Ok(mut o) = outcome.lock() else { return };
                    o.connections += 1;
                    match result {
                        Ok((port, writes, segments)) => {
                            o.client_segments += u64::from(segments);
                            o.stream_writes.push((port, writes));
                        }
                        Err(err) => o.errors.push(describe_io("stream connection", &err)),
                    }
                }
            });
        }
    });
    let mut outcome = outcome.into_inner().unwrap_or_default();
    if outcome.errors.is_empty() && outcome.connections < row.settings.stream_connections {
        outcome.errors.push(format!(
            "stopped by the {} s row timeout after {} of {} connections (raise --row-timeout)",
            row.settings.row_timeout.as_secs(),
            outcome.connections,
            row.settings.stream_connections
        ));
    }
    outcome
}

/// One stream connection: `stream_writes` writes of `payload` with `pause` between them.
/// Returns the client port, when each write was made, and the data segments sent.
fn stream_connection(
    row: &RowContext<'_>,
    payload: &[u8],
    pause: Duration,
) -> std::io::Result<(u16, Vec<Instant>, u32)> {
    use std::io::Write;
    let mut conn = Connection::connect(row.addr, row.client)?;
    let port = conn.stream().local_addr()?.port();
    let mut writes = Vec::with_capacity(row.settings.stream_writes);
    for index in 0..row.settings.stream_writes {
        if Instant::now() >= row.deadline {
            break;
        }
        if index > 0 && !pause.is_zero() {
            std::thread::sleep(pause);
        }
        writes.push(Instant::now());
        conn.stream().write_all(payload)?;
    }
    conn.wait_until_acked(Duration::from_secs(1))?;
    let segments = conn.data_segs_out()?;
    Ok((port, writes, segments))
}

/// Delivery latency of every stream write: from the write to its last byte being read.
fn stream_latencies(
    writes: &[(u16, Vec<Instant>)],
    arrivals: &std::collections::HashMap<u16, Vec<Instant>>,
) -> Vec<Duration> {
    writes
        .iter()
        .filter_map(|(port, sent)| Some((sent, arrivals.get(port)?)))
        .flat_map(|(sent, arrived)| {
            sent.iter()
                .zip(arrived)
                .map(|(s, a)| a.saturating_duration_since(*s))
        })
        .collect()
}
