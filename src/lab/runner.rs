//! Runs one catalogue row on real sockets and measures it.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::client::{http_get_request, ClientConfig, Connection};
use super::explain::{self, expected_stall, split_writer, Geometry};
use super::framing::{self, FrameEnd};
use super::measure::{stall_threshold_ms, LatencySummary};
use super::notes::{describe_io, ErrorTally};
use super::path::{own_packet_share, PathEnds};
use super::scenarios::{ConnectionMode, Variant, Workload};
use super::server::{Protocol, Server, ServerConfig, ServerNodelay};
use super::write::WriteStrategy;
use crate::kernel::{tcpext_counter, tcpext_counter_in};

/// Knobs of a run that apply to every row.
#[derive(Debug, Clone)]
pub struct RunSettings {
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
    /// `lab --peer`: a user-space stack plays one end of every row.
    pub peer: Option<std::sync::Arc<crate::peer::Peer>>,
}

/// One measured row: the stable keys of `lab --json` and the lab's own additions.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Scenario name.
    pub scenario: &'static str,
    /// Variant name; a name ending in the catalogue's size (`value-1400`) shows the size in
    /// use instead (`value-2400` with `--size 2400`).
    pub variant: String,
    /// Requests completed (stream: writes).
    pub requests: usize,
    /// Median latency (stream: from a write to its last byte reaching the receiver).
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// Largest latency.
    pub max_ms: f64,
    /// Data segments of both ends per request (`tcpi_data_segs_out` deltas).
    pub segments_per_request: f64,
    /// p50 at or above `stall_threshold_ms`.
    pub stalled: bool,
    /// The p50 from which the row counts as stalled: the round trips its exchange needs
    /// without any timer, times the path's RTT, plus 30 ms (see
    /// [`super::measure::stall_threshold_ms`]); 30 ms on loopback.
    pub stall_threshold_ms: f64,
    /// Round-trip time of the emulated path (`lab --rtt`); absent on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_rtt_ms: Option<f64>,
    /// What Linux is expected to do, from the catalogue.
    pub expected_stall: bool,
    /// Why, from the kernel's rules.
    pub explanation: String,
    /// Requests that took at least the stall threshold: with a capture, the number of
    /// Nagle × delayed-ACK events an analyzer should find in this row's flows.
    pub stalled_requests: usize,
    /// Which end's write Nagle holds when the row stalls as expected: `client` (the
    /// connection's initiator) or `server`, as in `analyze --json`; absent when no stall is
    /// expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_side: Option<Side>,
    /// The server's port: a flow to this port in a capture belongs to this row.
    pub server_port: u16,
    /// TCP connections the row opened.
    pub connections: usize,
    /// Payload size, in bytes.
    pub size: usize,
    /// Bytes of the two writes of the row's message as the split variants write it (echo
    /// request, HTTP or memcached reply; a second part of 0: one write). The other variants
    /// send the same bytes their own way.
    pub message_parts: [usize; 2],
    /// Payload bytes of a full segment in effect (MSS minus TCP options), the size the
    /// message's parts are measured against.
    pub payload_mss: usize,
    /// TCP_MAXSEG set on both ends, if any.
    pub mss: Option<u32>,
    /// Data segments the clients sent.
    pub client_data_segments: u64,
    /// Data segments the server sent.
    pub server_data_segments: u64,
    /// Stream: data segments per write, at most 1 (1 = every write left as its own segment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_segment_share: Option<f64>,
    /// Stream over an emulated path: share of writes that left as a packet of their own (one
    /// whole write, nothing merged), counted on the path as document 001 counted in Wireshark.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_packet_share: Option<f64>,
    /// Stream: change of TcpExt TCPAutoCorking during the row (system-wide counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autocorking_delta: Option<u64>,
    /// Inherit: the option read on the accepted socket before anything was set on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited: Option<bool>,
    /// What went wrong (timeouts, resets), if anything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// An end of a lab connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The connection's initiator.
    Client,
    /// The end that accepted it.
    Server,
}

/// Round trips a row's request needs when no timer fires: one, plus one when Nagle holds the
/// second part of a split message until the first is acknowledged (`tcp_nagle_check`, the
/// Minshall rule: a sub-MSS first segment still unacknowledged), even when that ACK comes at
/// once. Over an RTT this is what separates a quick-ACKed split (2 RTT) from a stall
/// (2 RTT + the delayed-ACK timer).
pub fn round_trips(variant: &Variant, size: usize, mss: Option<u32>) -> u32 {
    let (strategy, nagle_on) = match variant.workload {
        Workload::Stream => return 1,
        // The server closes after its reply: tcp_send_fin pushes what Nagle held
        // (`__tcp_push_pending_frames` with TCP_NAGLE_OFF), together with the FIN.
        Workload::Http if variant.connections == ConnectionMode::PerRequest => return 1,
        Workload::Echo => (variant.client_write, !variant.client_nodelay),
        Workload::Http | Workload::Memcached => (
            variant.server_reply,
            variant.server_nodelay == ServerNodelay::Off,
        ),
    };
    let splits = matches!(
        strategy,
        WriteStrategy::Split | WriteStrategy::BufferedFlush
    );
    let g = Geometry::of(variant, size, mss);
    if splits && nagle_on && g.first < g.mss && g.second > 0 {
        2
    } else {
        1
    }
}

/// What a row costs over an emulated path, for its explanation.
pub fn path_note(variant: &Variant, size: usize, mss: Option<u32>) -> &'static str {
    if variant.workload == Workload::Stream {
        return "over a path the ACK of a sub-MSS segment takes an RTT, and with Nagle the writes \
                made meanwhile leave merged into full segments; with --rate, packets wait in the \
                tbf qdisc still charged to the socket, so autocorking (tcp_should_autocork) merges \
                writes even with TCP_NODELAY";
    }
    match (
        round_trips(variant, size, mss),
        expected_stall(variant, size, mss),
    ) {
        (2, true) => {
            "over a path: 2 RTT + the delayed-ACK timer (the first part's ACK waits \
                      for the timer, then the tail and the reply each cross the path)"
        }
        (2, false) => {
            "over a path: 2 RTT, no timer: the tail still waits for the first part's \
                       ACK, sent at once, to cross the path"
        }
        _ => "over a path: 1 RTT, nothing held",
    }
}

/// The two parts of the echo line of `size` bytes: for 13, `hello ` and `world\r\n`.
pub fn echo_parts(size: usize) -> (Vec<u8>, Vec<u8>) {
    let text: Vec<u8> = b"hello world "
        .iter()
        .copied()
        .cycle()
        .take(size.saturating_sub(2))
        .collect();
    let head_len = (size.div_ceil(2))
        .saturating_sub(1)
        .clamp(1, text.len().max(1));
    let mut body = text[head_len.min(text.len())..].to_vec();
    body.extend_from_slice(b"\r\n");
    (text[..head_len.min(text.len())].to_vec(), body)
}

/// Runs `variant`; `watch_port` is called with the server's port before the first connect.
pub fn run_variant(
    variant: &Variant,
    settings: &RunSettings,
    watch_port: &dyn Fn(u16),
) -> anyhow::Result<Row> {
    let size = settings.size.unwrap_or(variant.size);
    let mss = settings.mss.or(variant.mss);
    let deadline = Instant::now() + settings.row_timeout;
    let protocol = match variant.workload {
        Workload::Echo => Protocol::Echo,
        Workload::Http => Protocol::Http { body_len: size },
        Workload::Memcached => Protocol::Memcached { value_len: size },
        Workload::Stream => Protocol::Sink { chunk: size },
    };
    let path = settings.path.as_ref();
    let server = Server::start(ServerConfig {
        bind: path.map_or(Ipv4Addr::LOCALHOST, |p| p.server_addr),
        namespace: path.map(|p| p.server.clone()),
        reply: variant.server_reply,
        mss,
        nodelay: variant.server_nodelay,
        listener_quickack: variant.listener_quickack,
        quickack_rearm: variant.server_quickack,
        ..ServerConfig::new(protocol, deadline)
    })
    .context("cannot start the lab server")?;
    let addr = server.addr();
    watch_port(addr.port());
    let client = ClientConfig {
        mss,
        nodelay: variant.client_nodelay,
        quickack_rearm: variant.client_quickack,
        namespace: path.map(|p| p.client.clone()),
        ..ClientConfig::default()
    };
    let corking_before = autocorking_count(path);
    let row = RowContext {
        variant,
        settings,
        size,
        addr,
        client: &client,
        deadline,
    };
    let mut outcome = match settings.peer.as_deref() {
        Some(peer) if peer.side == crate::peer::PeerSide::Client => peer_client(peer, &row),
        _ => run_client(&row),
    };
    let corking_after = autocorking_count(path);
    let report = server.stop();
    let mut latencies = outcome.latencies;
    if variant.workload == Workload::Stream {
        latencies = stream_latencies(&outcome.stream_writes, &report.arrivals);
        outcome.requests = outcome.stream_writes.iter().map(|(_, w)| w.len()).sum();
        if latencies.len() < outcome.requests {
            outcome.errors.push(format!(
                "the server saw {} of {} writes arrive",
                latencies.len(),
                outcome.requests
            ));
        }
    }
    outcome.errors.merge(report.errors);
    let summary = LatencySummary::of(&latencies);
    let requests = outcome.requests.max(1) as f64;
    let rtt = path.map_or(Duration::ZERO, |p| p.shape.rtt);
    let threshold = stall_threshold_ms(round_trips(variant, size, mss), rtt);
    let stalled = summary.p50_ms >= threshold;
    let expected = expected_stall(variant, size, mss);
    let geometry = Geometry::of(variant, size, mss);
    let mut explanation = explain::explanation(variant, size, mss);
    if path.is_some() {
        explanation = format!("{explanation}; {}", path_note(variant, size, mss));
    }
    if stalled != expected {
        explanation = format!("UNEXPECTED on this kernel; the kernel rules say: {explanation}");
    }
    let is_stream = variant.workload == Workload::Stream;
    let inherited = match (variant.server_nodelay, variant.listener_quickack) {
        (ServerNodelay::Listener, _) => report.accepted_nodelay,
        // The accepted socket reads TCP_QUICKACK as !pingpong: equal to the listener's value
        // means the setting was carried over.
        (_, Some(on)) => report.accepted_quickack.map(|q| q == on),
        _ => None,
    };
    Ok(Row {
        scenario: variant.scenario.name(),
        variant: explain::row_name(variant, settings.size),
        requests: outcome.requests,
        p50_ms: summary.p50_ms,
        p99_ms: summary.p99_ms,
        max_ms: summary.max_ms,
        segments_per_request: (outcome.client_segments + report.data_segs_out) as f64 / requests,
        stalled,
        stall_threshold_ms: threshold,
        path_rtt_ms: path.map(|p| p.shape.rtt.as_secs_f64() * 1000.0),
        expected_stall: expected,
        explanation,
        stalled_requests: latencies
            .iter()
            .filter(|l| l.as_secs_f64() * 1000.0 >= threshold)
            .count(),
        held_side: if expected {
            split_writer(variant)
        } else {
            None
        },
        server_port: addr.port(),
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
            .map(|ends| own_packet_share(&ends.segments, addr.port(), size, outcome.requests)),
        autocorking_delta: if is_stream {
            corking_before
                .zip(corking_after)
                .map(|(before, after)| after.saturating_sub(before))
        } else {
            None
        },
        inherited,
        errors: outcome.errors.lines(),
    })
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
    errors: ErrorTally,
}

/// Runs the client side of a row: request/response turns (or the stream's one-way writes),
/// bounded by the request count and the row's deadline.
fn run_client(row: &RowContext<'_>) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let per_request = row.variant.connections == ConnectionMode::PerRequest;
    let Some((request, reply_end)) = request_of(row) else {
        return run_stream(row);
    };
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

/// The request's parts, written with the row's strategy, and where the reply ends; `None` for
/// the stream, which has no reply.
fn request_of(row: &RowContext<'_>) -> Option<(Vec<Vec<u8>>, FrameEnd)> {
    let per_request = row.variant.connections == ConnectionMode::PerRequest;
    Some(match row.variant.workload {
        Workload::Echo => {
            let (head, body) = echo_parts(row.size);
            (vec![head, body], framing::line_end)
        }
        Workload::Memcached => (vec![b"get k\r\n".to_vec()], framing::memcached_reply_end),
        Workload::Http => {
            let get = http_get_request(&row.addr.to_string(), "/file", per_request);
            (vec![get.into_bytes()], framing::http_response_end)
        }
        Workload::Stream => return None,
    })
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
    let job = match request_of(row) {
        Some((parts, reply_end)) => ClientJob::Requests(RequestJob {
            server,
            parts,
            write: row.variant.client_write,
            reply_end,
            requests: row.settings.requests,
            per_request: row.variant.connections == ConnectionMode::PerRequest,
            options,
            deadline: row.deadline,
        }),
        None => ClientJob::Stream(StreamJob {
            server,
            payload: vec![b's'; row.size],
            connections: row.settings.stream_connections,
            writes: row.settings.stream_writes,
            pause: Duration::from_millis(row.variant.pause_ms),
            options,
            deadline: row.deadline,
        }),
    };
    let mss = row.settings.mss.or(row.variant.mss);
    match peer.run_client(job, row.variant.client_quickack, mss) {
        Ok(run) => {
            outcome.requests = run.requests;
            outcome.connections = run.connections;
            outcome.client_segments = run.data_segments;
            outcome.latencies = run.latencies;
            outcome.stream_writes = run.stream_writes;
            for error in run.errors {
                outcome.errors.push(error);
            }
            if row.variant.workload != Workload::Stream {
                note_timeout(
                    &mut outcome,
                    row.settings.requests,
                    row.settings.row_timeout,
                );
            }
        }
        Err(err) => outcome.errors.push(format!("the peer: {err}")),
    }
    outcome
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
    let payload = vec![b's'; row.size];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::scenarios::catalogue_row as row;

    #[test]
    fn round_trips_count_the_wait_for_the_first_part_ack() {
        assert_eq!(round_trips(row("echo", "split"), 13, None), 2);
        assert_eq!(round_trips(row("echo", "quickack"), 13, None), 2);
        assert_eq!(round_trips(row("echo", "single"), 13, None), 1);
        assert_eq!(round_trips(row("echo", "nodelay"), 13, None), 1);
        // The server's close pushes the held body with the FIN.
        assert_eq!(round_trips(row("http", "short"), 200, None), 1);
        assert_eq!(
            round_trips(row("memcached", "value-100"), 100, Some(1460)),
            1
        );
        assert_eq!(
            round_trips(row("memcached", "nodelay-1400"), 1400, Some(1460)),
            1
        );
        assert_eq!(
            round_trips(row("memcached", "value-4000"), 4000, Some(1460)),
            2
        );
    }

    #[test]
    fn echo_line_of_13_bytes_is_hello_world() {
        let (head, body) = echo_parts(13);
        assert_eq!((&head[..], &body[..]), (&b"hello "[..], &b"world\r\n"[..]));
        let (head, body) = echo_parts(3);
        assert_eq!(head.len() + body.len(), 3);
    }
}
