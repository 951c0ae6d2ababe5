//! Runs one catalogue row on real sockets and measures it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use super::client::{http_get_request, ClientConfig, Connection, HttpClient};
use super::framing;
use super::measure::{is_stalled, LatencySummary};
use super::scenarios::{ConnectionMode, Expectation, Variant, Workload};
use super::server::{Protocol, Server, ServerConfig, ServerNodelay, MEMCACHED_FIRST_WRITE_CAP};
use crate::kernel::tcpext_counter;

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
}

/// One measured row: the stable keys of `lab --json` and the lab's own additions.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Scenario name.
    pub scenario: &'static str,
    /// Variant name.
    pub variant: &'static str,
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
    /// p50 at or above [`super::measure::STALL_THRESHOLD_MS`].
    pub stalled: bool,
    /// What Linux is expected to do, from the catalogue.
    pub expected_stall: bool,
    /// Why, from the kernel's rules.
    pub explanation: String,
    /// The server's port: a flow to this port in a capture belongs to this row.
    pub server_port: u16,
    /// TCP connections the row opened.
    pub connections: usize,
    /// Payload size, in bytes.
    pub size: usize,
    /// TCP_MAXSEG set on both ends, if any.
    pub mss: Option<u32>,
    /// Data segments the clients sent.
    pub client_data_segments: u64,
    /// Data segments the server sent.
    pub server_data_segments: u64,
    /// Stream: data segments per write, at most 1 (1 = every write left as its own segment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_segment_share: Option<f64>,
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

/// Bytes of a memcached reply to `get k` with a `value_len`-byte value.
pub fn memcached_reply_len(value_len: usize) -> usize {
    format!("VALUE k 0 {value_len}\r\n").len() + value_len + b"\r\nEND\r\n".len()
}

/// Whether Linux stalls the row, from the catalogue and the kernel rules.
pub fn expected_stall(variant: &Variant, size: usize, mss: Option<u32>) -> bool {
    match variant.expected {
        Expectation::Stall => true,
        Expectation::NoStall => false,
        Expectation::MemcachedCut => {
            // The rest is held (Minshall: the 1400 B segment is sub-MSS and unacknowledged)
            // unless it contains a full segment, whose arrival makes the client ACK at once
            // (`__tcp_ack_snd_check`: more than one MSS unacknowledged). MSS <= 1400: the first
            // write is no sub-MSS segment, or already more than one MSS.
            let reply = memcached_reply_len(size);
            let mss = mss.unwrap_or(65_483) as usize;
            mss > MEMCACHED_FIRST_WRITE_CAP
                && reply > MEMCACHED_FIRST_WRITE_CAP
                && reply - MEMCACHED_FIRST_WRITE_CAP < mss
        }
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
    let server = Server::start(ServerConfig {
        reply: variant.server_reply,
        mss,
        nodelay: variant.server_nodelay,
        listener_quickack: variant.listener_quickack,
        quickack_rearm: variant.server_quickack,
        ..ServerConfig::new(protocol, deadline)
    })
    .context("cannot start the lab server on 127.0.0.1")?;
    let addr = server.addr();
    watch_port(addr.port());
    let client = ClientConfig {
        mss,
        nodelay: variant.client_nodelay,
        quickack_rearm: variant.client_quickack,
        ..ClientConfig::default()
    };
    let corking_before = tcpext_counter("TCPAutoCorking");
    let mut outcome = if variant.workload == Workload::Stream {
        run_stream(variant, settings, size, addr, &client, deadline)
    } else {
        run_requests(variant, settings, size, addr, &client, deadline)
    };
    let corking_after = tcpext_counter("TCPAutoCorking");
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
    outcome.errors.extend(report.errors);
    let summary = LatencySummary::of(&latencies);
    let requests = outcome.requests.max(1) as f64;
    let stalled = is_stalled(summary.p50_ms);
    let expected = expected_stall(variant, size, mss);
    let explanation = if stalled == expected {
        variant.explanation.to_string()
    } else {
        format!(
            "UNEXPECTED on this kernel; catalogue says: {}",
            variant.explanation
        )
    };
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
        variant: variant.name,
        requests: outcome.requests,
        p50_ms: summary.p50_ms,
        p99_ms: summary.p99_ms,
        max_ms: summary.max_ms,
        segments_per_request: (outcome.client_segments + report.data_segs_out) as f64 / requests,
        stalled,
        expected_stall: expected,
        explanation,
        server_port: addr.port(),
        connections: outcome.connections,
        size,
        mss,
        client_data_segments: outcome.client_segments,
        server_data_segments: report.data_segs_out,
        own_segment_share: is_stream.then(|| (outcome.client_segments as f64 / requests).min(1.0)),
        autocorking_delta: if is_stream {
            corking_before
                .zip(corking_after)
                .map(|(before, after)| after.saturating_sub(before))
        } else {
            None
        },
        inherited,
        errors: outcome.errors,
    })
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
    errors: Vec<String>,
}

fn run_requests(
    variant: &Variant,
    settings: &RunSettings,
    size: usize,
    addr: SocketAddr,
    client: &ClientConfig,
    deadline: Instant,
) -> ClientOutcome {
    let mut outcome = ClientOutcome::default();
    let (head, body) = echo_parts(size);
    let get = b"get k\r\n".to_vec();
    let per_request = variant.connections == ConnectionMode::PerRequest;
    let mut connection: Option<Connection> = None;
    while outcome.requests < settings.requests && Instant::now() < deadline {
        if connection.is_none() {
            match Connection::connect(addr, client) {
                Ok(c) => connection = Some(c),
                Err(err) => {
                    outcome.errors.push(format!("connect to {addr}: {err}"));
                    break;
                }
            }
            outcome.connections += 1;
        }
        let Some(conn) = connection.as_mut() else {
            break;
        };
        let result = match variant.workload {
            Workload::Echo => {
                conn.round_trip(variant.client_write, &[&head, &body], framing::line_end)
            }
            Workload::Memcached => {
                conn.round_trip(variant.client_write, &[&get], framing::memcached_reply_end)
            }
            Workload::Http => {
                let request = http_get_request(&addr.to_string(), "/file", per_request);
                conn.round_trip(
                    variant.client_write,
                    &[request.as_bytes()],
                    framing::http_response_end,
                )
            }
            Workload::Stream => unreachable!("streams are run by run_stream"),
        };
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
    outcome
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

fn run_stream(
    variant: &Variant,
    settings: &RunSettings,
    size: usize,
    addr: SocketAddr,
    client: &ClientConfig,
    deadline: Instant,
) -> ClientOutcome {
    let next = AtomicUsize::new(0);
    let outcome = Mutex::new(ClientOutcome::default());
    let payload = vec![b's'; size];
    let pause = Duration::from_millis(variant.pause_ms);
    std::thread::scope(|scope| {
        for _ in 0..settings.stream_parallel.max(1) {
            scope.spawn(|| {
                while next.fetch_add(1, Ordering::SeqCst) < settings.stream_connections
                    && Instant::now() < deadline
                {
                    let result =
                        stream_connection(addr, client, &payload, pause, settings, deadline);
                    let Ok(mut o) = outcome.lock() else { return };
                    o.connections += 1;
                    match result {
                        Ok((port, writes, segments)) => {
                            o.client_segments += u64::from(segments);
                            o.stream_writes.push((port, writes));
                        }
                        Err(err) => o.errors.push(format!("stream connection: {err}")),
                    }
                }
            });
        }
    });
    outcome.into_inner().unwrap_or_default()
}

/// One stream connection: `stream_writes` writes of `payload` with `pause` between them.
/// Returns the client port, when each write was made, and the data segments sent.
fn stream_connection(
    addr: SocketAddr,
    client: &ClientConfig,
    payload: &[u8],
    pause: Duration,
    settings: &RunSettings,
    deadline: Instant,
) -> std::io::Result<(u16, Vec<Instant>, u32)> {
    use std::io::Write;
    let mut conn = Connection::connect(addr, client)?;
    let port = conn.stream().local_addr()?.port();
    let mut writes = Vec::with_capacity(settings.stream_writes);
    for index in 0..settings.stream_writes {
        if Instant::now() >= deadline {
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

/// Keep-alive HTTP requests against any loopback HTTP server, timed one by one; bounded by
/// `count` and `deadline`. For other verbs and tests that want the lab's client on a real server.
pub fn time_http_requests(
    addr: SocketAddr,
    config: &ClientConfig,
    count: usize,
    deadline: Instant,
) -> std::io::Result<Vec<Duration>> {
    let mut client = HttpClient::connect(addr, config)?;
    let mut latencies = Vec::with_capacity(count);
    while latencies.len() < count && Instant::now() < deadline {
        latencies.push(client.get("/", false)?);
    }
    Ok(latencies)
}
