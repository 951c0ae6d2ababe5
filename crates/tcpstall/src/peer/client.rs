//! The catalogue's client logic over the peer's stack: request/response turns (echo, HTTP,
//! memcached) and the stream's one-way writes, each bounded in count and time.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use super::stack::{ConnOptions, PeerStack};
use crate::exchange::framing::FrameEnd;
use crate::exchange::write::WriteStrategy;

/// A request/response row, as the peer's client runs it.
#[derive(Debug, Clone)]
pub struct RequestJob {
    /// The server (the real kernel's).
    pub server: SocketAddrV4,
    /// The request's parts.
    pub parts: Vec<Vec<u8>>,
    /// How the parts are written.
    pub write: WriteStrategy,
    /// Where a reply ends.
    pub reply_end: FrameEnd,
    /// Replies to each turn's request: 1, or the requests in flight of a pipeline row (each
    /// part a request, each answered apart).
    pub replies: usize,
    /// Turns to make.
    pub requests: usize,
    /// A new connection per request.
    pub per_request: bool,
    /// Socket options.
    pub options: ConnOptions,
    /// No request starts after this.
    pub deadline: Instant,
}

/// A stream row: one-way writes with a pause.
#[derive(Debug, Clone)]
pub struct StreamJob {
    /// The server (the real kernel's sink).
    pub server: SocketAddrV4,
    /// One write's bytes.
    pub payload: Vec<u8>,
    /// Connections, one after another.
    pub connections: usize,
    /// Writes per connection.
    pub writes: usize,
    /// Pause between writes.
    pub pause: Duration,
    /// Socket options.
    pub options: ConnOptions,
    /// No connection starts after this.
    pub deadline: Instant,
}

/// What the peer's client measured.
#[derive(Debug, Default)]
pub struct ClientRun {
    /// Requests completed (stream: writes made).
    pub requests: usize,
    /// Connections opened.
    pub connections: usize,
    /// Data segments the peer sent.
    pub data_segments: u64,
    /// Request latencies, from the turn's first write to the reply's last byte.
    pub latencies: Vec<Duration>,
    /// Time spent in turns, for a request rate.
    pub busy: Duration,
    /// Stream: per local port, when each write was made.
    pub stream_writes: Vec<(u16, Vec<Instant>)>,
    /// What went wrong.
    pub errors: Vec<String>,
}

/// Grace after the row's deadline for closing connections cleanly.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// Writes one message's parts with `strategy`: separate writes leave as separate segments
/// when Nagle lets them; the gathering strategies hand over one buffer. TCP_CORK and MSG_MORE
/// have no Windows or macOS equivalent on a socket; they are taken as one write, their effect.
pub fn write_message(
    stack: &mut PeerStack,
    handle: smoltcp::iface::SocketHandle,
    strategy: WriteStrategy,
    parts: &[Vec<u8>],
    deadline: Instant,
) -> std::io::Result<()> {
    match strategy {
        WriteStrategy::Split | WriteStrategy::BufferedFlush => parts
            .iter()
            .try_for_each(|part| stack.write(handle, part, deadline)),
        WriteStrategy::Single
        | WriteStrategy::Writev
        | WriteStrategy::CorkUncork
        | WriteStrategy::MsgMore => stack.write(handle, &parts.concat(), deadline),
    }
}

/// Runs a request/response row.
pub fn run_requests(stack: &mut PeerStack, job: &RequestJob) -> ClientRun {
    let mut run = ClientRun::default();
    let mut connection = None;
    let mut buf = Vec::new();
    let mut turns = 0;
    while turns < job.requests && Instant::now() < job.deadline {
        turns += 1;
        let handle = match connection {
            Some(handle) => handle,
            None => match stack.connect(job.server, job.options, job.deadline) {
                Ok(handle) => {
                    run.connections += 1;
                    buf.clear();
                    connection = Some(handle);
                    handle
                }
                Err(err) => {
                    run.errors.push(err.to_string());
                    break;
                }
            },
        };
        let start = Instant::now();
        let mut turn = write_message(stack, handle, job.write, &job.parts, job.deadline);
        for _ in 0..job.replies.max(1) {
            match turn
                .and_then(|()| stack.read_message(handle, &mut buf, job.reply_end, job.deadline))
            {
                Ok(len) => {
                    run.latencies.push(start.elapsed());
                    run.requests += 1;
                    buf.drain(..len);
                    turn = Ok(());
                }
                Err(err) => {
                    turn = Err(err);
                    break;
                }
            }
        }
        run.busy += start.elapsed();
        if let Err(err) = turn {
            run.errors
                .push(format!("request {}: {err}", run.requests + 1));
            break;
        }
        if job.per_request {
            close(stack, &mut connection, &mut run, job.deadline);
        }
    }
    close(stack, &mut connection, &mut run, job.deadline);
    run
}

/// Runs a stream row, one connection after another.
pub fn run_stream(stack: &mut PeerStack, job: &StreamJob) -> ClientRun {
    let mut run = ClientRun::default();
    while run.connections < job.connections && Instant::now() < job.deadline {
        let handle = match stack.connect(job.server, job.options, job.deadline) {
            Ok(handle) => handle,
            Err(err) => {
                run.errors.push(err.to_string());
                break;
            }
        };
        run.connections += 1;
        let port = stack.local_port(handle).unwrap_or(0);
        let mut writes = Vec::with_capacity(job.writes);
        for index in 0..job.writes {
            if Instant::now() >= job.deadline {
                break;
            }
            if index > 0 && !job.pause.is_zero() {
                stack.idle(job.pause);
            }
            writes.push(Instant::now());
            if let Err(err) = stack.write(handle, &job.payload, job.deadline) {
                run.errors.push(format!("stream write: {err}"));
                break;
            }
        }
        run.requests += writes.len();
        run.stream_writes.push((port, writes));
        let mut connection = Some(handle);
        close(stack, &mut connection, &mut run, job.deadline);
    }
    run
}

/// Counts the connection's data segments and closes it.
fn close(
    stack: &mut PeerStack,
    connection: &mut Option<smoltcp::iface::SocketHandle>,
    run: &mut ClientRun,
    deadline: Instant,
) {
    if let Some(handle) = connection.take() {
        let limit = deadline.max(Instant::now()) + CLOSE_GRACE;
        if let Err(err) = stack.wait_until_acked(handle, limit) {
            run.errors.push(err.to_string());
        }
        run.data_segments += u64::from(stack.data_segments_out(handle));
        stack.close(handle, Instant::now() + CLOSE_GRACE);
    }
}
