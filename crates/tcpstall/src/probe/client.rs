//! The request loop: `--connections` kept-alive connections, each on its own thread, sending
//! the dialogue's request and reading the whole reply, every step bounded by the per-request
//! timeout and the run's deadline. What went wrong ends that connection's share and is kept
//! with everything measured before it.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::dialogue::{Dialogue, Exchange};
use super::http;
use super::reply::{excerpt, Parsed, Reply};
use super::socket::{now_ns, Arrival, ProbeSocket, Sent, SocketFigures, SocketMode};
use super::tls::{self, ClientConfig, TlsStream};

/// Read buffer per call.
const READ_CHUNK: usize = 64 * 1024;
/// Largest reply kept in memory (an `UntilClose` body or a huge value).
const MAX_REPLY: usize = 64 << 20;

/// Where and how to connect.
#[derive(Clone)]
pub struct Plan {
    /// The target's addresses, tried in order.
    pub addrs: Vec<SocketAddr>,
    /// Host name (TLS server name, messages).
    pub host: String,
    /// TLS configuration for `https://`, and whether `--insecure` was given.
    pub tls: Option<(Arc<ClientConfig>, bool)>,
    /// Bound on each connect, handshake and request.
    pub timeout: Duration,
    /// Bound on the whole run.
    pub deadline: Instant,
    /// Socket options of the run.
    pub mode: SocketMode,
}

/// One request and its reply, as the probe's socket saw them.
#[derive(Debug, Clone)]
pub struct Turn {
    /// Index of the connection (in [`RunLog::connections`]).
    pub connection: usize,
    /// A per-connection setup exchange (memcached `set`, redis `AUTH`, `SELECT`, `SET`), not a
    /// timed request.
    pub setup: bool,
    /// Realtime clock just before the first write, ns.
    pub start_ns: u64,
    /// First write to the reply's last byte read.
    pub latency: Duration,
    /// The writes.
    pub sent: Vec<Sent>,
    /// The reads.
    pub arrivals: Vec<Arrival>,
    /// HTTP status code of the reply.
    pub http_status: Option<u16>,
    /// HTTP 401: the scheme its `WWW-Authenticate` asks for (`Basic`, `Bearer`, …).
    pub auth_scheme: Option<String>,
    /// An HTTP 400 whose text names HTTPS (nginx: "The plain HTTP request was sent to HTTPS
    /// port"): the port speaks TLS.
    pub https_port: bool,
}

/// One connection.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    /// The probe's local port.
    pub local_port: u16,
    /// The server's address.
    pub remote: Option<SocketAddr>,
    /// Time of the TCP handshake (connect call), the first round trip measured.
    pub connect: Duration,
    /// TCP_INFO at the end (RTT, delayed-ACK timeout, retransmissions).
    pub info_at_end: Option<SocketFigures>,
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct RunLog {
    /// Every turn, per connection in order.
    pub turns: Vec<Turn>,
    /// Every connection opened.
    pub connections: Vec<Connection>,
    /// What ended a connection's share early, one line each.
    pub errors: Vec<String>,
    /// Answers after which the server closed the connection (the next request, if any,
    /// needed a new one): connections the probe opened itself, one per `--connections`,
    /// are not counted.
    pub closed_by_server: usize,
    /// Kept-alive connections the server closed after an answer without saying so (no
    /// `Connection: close`): the next request found them closed and went again on a new
    /// connection, as curl and http.client do.
    pub reconnects: usize,
}

impl RunLog {
    /// Timed requests (setup exchanges left out).
    pub fn requests(&self) -> impl Iterator<Item = &Turn> {
        self.turns.iter().filter(|t| !t.setup)
    }

    fn absorb(&mut self, mut other: RunLog) {
        let base = self.connections.len();
        for turn in &mut other.turns {
            turn.connection += base;
        }
        self.turns.extend(other.turns);
        self.connections.extend(other.connections);
        self.errors.extend(other.errors);
        self.closed_by_server += other.closed_by_server;
        self.reconnects += other.reconnects;
    }
}

/// Runs `requests` requests over `connections` connections in parallel; `on_bound` hears each
/// local port before its SYN leaves.
pub fn run(
    plan: &Plan,
    dialogue: &Dialogue,
    requests: usize,
    connections: usize,
    on_bound: &(dyn Fn(u16) + Sync),
) -> RunLog {
    let connections = connections.clamp(1, requests.max(1));
    let shares: Vec<usize> = (0..connections)
        .map(|i| requests / connections + usize::from(i < requests % connections))
        .collect();
    let logs: Vec<RunLog> = std::thread::scope(|scope| {
        let workers: Vec<_> = shares
            .iter()
            .map(|&share| scope.spawn(move || worker(plan, dialogue, share, on_bound)))
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join().unwrap_or_else(|_| RunLog {
                    errors: vec!["a request thread panicked".to_string()],
                    ..RunLog::default()
                })
            })
            .collect()
    });
    let mut all = RunLog::default();
    for log in logs {
        all.absorb(log);
    }
    all
}

/// One connection's share: `share` requests, reconnecting when the server closes after an
/// answer.
fn worker(
    plan: &Plan,
    dialogue: &Dialogue,
    share: usize,
    on_bound: &(dyn Fn(u16) + Sync),
) -> RunLog {
    let mut log = RunLog::default();
    let mut done = 0;
    while done < share {
        if super::interrupted() {
            break;
        }
        if Instant::now() >= plan.deadline {
            log.errors.push(format!(
                "the run's time limit ended it after {done} of {share} requests on a connection"
            ));
            break;
        }
        let mut stream = match open(plan, on_bound) {
            Ok((stream, connection)) => {
                log.connections.push(connection);
                stream
            }
            Err(err) => {
                log.errors.push(format!("{err:#}"));
                break;
            }
        };
        let index = log.connections.len() - 1;
        let mut buf = Vec::with_capacity(READ_CHUNK);
        let mut closed = false;
        let mut failed = false;
        let mut answered_here = 0;
        let exchanges = dialogue
            .setup
            .iter()
            .map(|e| (true, e))
            .chain(std::iter::repeat((false, &dialogue.request)));
        for (setup, exchange) in exchanges {
            if !setup && (done >= share || super::interrupted()) {
                break;
            }
            match turn(&mut stream, exchange, plan, &mut buf) {
                Ok((mut record, close)) => {
                    record.connection = index;
                    record.setup = setup;
                    log.turns.push(record);
                    done += usize::from(!setup);
                    answered_here += 1;
                    if close {
                        closed = true;
                        log.closed_by_server += 1;
                        break;
                    }
                }
                // A kept-alive connection found closed before any byte of the answer: the
                // server closed it after its last answer; a client goes on with a new one
                // (RFC 9112 section 9.3.1: a request may be retried on a new connection).
                Err(err) if err.unanswered_close && answered_here > 0 => {
                    log.reconnects += 1;
                    closed = true;
                    break;
                }
                Err(err) => {
                    log.errors
                        .push(format!("{} {}", what(setup, done), err.text));
                    failed = true;
                    break;
                }
            }
        }
        let info = stream.socket().figures();
        log.connections[index].info_at_end = info;
        stream.close();
        if failed || (!closed && done < share) || super::interrupted() {
            break;
        }
    }
    log
}

fn what(setup: bool, done: usize) -> String {
    if setup {
        "setup exchange:".to_string()
    } else {
        format!("request {}:", done + 1)
    }
}

/// Connects to the first address that answers, then runs the TLS handshake for `https://`.
fn open(plan: &Plan, on_bound: &(dyn Fn(u16) + Sync)) -> anyhow::Result<(Stream, Connection)> {
    let mut last_error = None;
    for &addr in &plan.addrs {
        let started = Instant::now();
        let timeout = plan
            .timeout
            .min(plan.deadline.saturating_duration_since(started))
            .max(Duration::from_millis(1));
        match ProbeSocket::connect(addr, timeout, plan.mode, on_bound) {
            Ok(mut socket) => {
                let connection = Connection {
                    local_port: socket.local_port(),
                    remote: Some(addr),
                    connect: started.elapsed(),
                    info_at_end: None,
                };
                socket.set_deadline(plan.deadline.min(Instant::now() + plan.timeout));
                let stream = match &plan.tls {
                    Some((config, insecure)) => Stream::Tls(Box::new(tls::handshake(
                        config, &plan.host, socket, *insecure,
                    )?)),
                    None => Stream::Plain(socket),
                };
                return Ok((stream, connection));
            }
            Err(err) => last_error = Some((addr, err)),
        }
    }
    Err(match last_error {
        Some((addr, err)) => connect_error(addr, &err, plan.timeout),
        None => anyhow::anyhow!("{} resolved to no address", plan.host),
    })
}

/// A connect failure in words, with what to check.
fn connect_error(addr: SocketAddr, err: &io::Error, timeout: Duration) -> anyhow::Error {
    use io::ErrorKind::*;
    match err.kind() {
        ConnectionRefused => anyhow::anyhow!(
            "connection to {addr} refused: nothing listens on port {} (is the server running, \
             on that address?)",
            addr.port()
        ),
        TimedOut | WouldBlock => anyhow::anyhow!(
            "no answer to the connection attempt to {addr} within {:.1} s: the host is down, \
             unreachable, or a firewall drops the SYN",
            timeout.as_secs_f64()
        ),
        HostUnreachable | NetworkUnreachable => {
            anyhow::anyhow!("{addr} is unreachable ({err}): check the address and the route")
        }
        _ => anyhow::anyhow!("cannot connect to {addr}: {err}"),
    }
}

/// Why a turn failed.
struct TurnError {
    /// In words.
    text: String,
    /// The connection was found closed (FIN or reset) before any byte of the answer.
    unanswered_close: bool,
}

impl From<String> for TurnError {
    fn from(text: String) -> TurnError {
        TurnError {
            text,
            unanswered_close: false,
        }
    }
}

/// A closed connection's error kinds, when writing to it or reading from it.
fn closed_kind(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionAborted
    )
}

/// Sends one exchange and reads its whole reply. Returns the turn and whether the server
/// closes the connection after it.
fn turn(
    stream: &mut Stream,
    exchange: &Exchange,
    plan: &Plan,
    buf: &mut Vec<u8>,
) -> Result<(Turn, bool), TurnError> {
    let deadline = plan.deadline.min(Instant::now() + plan.timeout);
    stream.socket().set_deadline(deadline);
    stream.socket().take_log();
    buf.clear();
    let start_ns = now_ns();
    let started = Instant::now();
    for write in &exchange.writes {
        stream
            .write_all(write)
            .and_then(|()| stream.flush())
            .map_err(|err| TurnError {
                text: io_failure("sending the request", &err, 0, plan),
                unanswered_close: closed_kind(&err),
            })?;
    }
    let mut chunk = vec![0u8; READ_CHUNK];
    let close = loop {
        let parsed = exchange
            .reply
            .parse(buf)
            .map_err(|why| TurnError::from(why.describe()))?;
        if let Parsed::Complete { len, close } = parsed {
            if buf.len() > len {
                return Err(format!(
                    "the server sent {} B more than the reply: {}",
                    buf.len() - len,
                    excerpt(&buf[len..])
                )
                .into());
            }
            break close;
        }
        if buf.len() > MAX_REPLY {
            return Err(format!("reply longer than {} MiB", MAX_REPLY >> 20).into());
        }
        let n = match stream.read(&mut chunk) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(err) => {
                return Err(TurnError {
                    text: io_failure("reading the reply", &err, buf.len(), plan),
                    unanswered_close: buf.is_empty() && closed_kind(&err),
                })
            }
        };
        if n == 0 {
            if parsed == Parsed::UntilClose {
                break true;
            }
            return Err(if buf.is_empty() {
                TurnError {
                    text: "the server closed the connection without answering".to_string(),
                    unanswered_close: true,
                }
            } else {
                format!(
                    "the server closed the connection in the middle of the reply, after {} B: {}",
                    buf.len(),
                    excerpt(buf)
                )
                .into()
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let latency = started.elapsed();
    let (arrivals, sent) = stream.socket().take_log();
    let (http_status, auth_scheme) = match exchange.reply {
        Reply::Http { .. } => (http::status(buf), http::auth_scheme(buf)),
        _ => (None, None),
    };
    let https_port =
        http_status == Some(400) && buf.windows(5).any(|w| w.eq_ignore_ascii_case(b"https"));
    Ok((
        Turn {
            connection: 0,
            setup: false,
            start_ns,
            latency,
            sent,
            arrivals,
            http_status,
            auth_scheme,
            https_port,
        },
        close,
    ))
}

/// An I/O error during a request in words.
fn io_failure(doing: &str, err: &io::Error, got: usize, plan: &Plan) -> String {
    match err.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => {
            let limit = if Instant::now() >= plan.deadline {
                "the run's time limit (--max-time)".to_string()
            } else {
                format!("{:.1} s (--timeout)", plan.timeout.as_secs_f64())
            };
            format!("no complete answer within {limit} while {doing}; {got} B of it had come")
        }
        io::ErrorKind::ConnectionReset => {
            format!("the server reset the connection while {doing}, after {got} B of the reply")
        }
        _ => format!("{doing} failed after {got} B of the reply: {err}"),
    }
}

/// The connection, in the clear or inside TLS.
enum Stream {
    Plain(ProbeSocket),
    Tls(Box<TlsStream>),
}

impl Stream {
    fn socket(&mut self) -> &mut ProbeSocket {
        match self {
            Stream::Plain(socket) => socket,
            Stream::Tls(tls) => tls::socket(tls),
        }
    }

    /// Ends the connection politely (TLS close_notify, then our FIN), so that a capture sees
    /// it closed.
    fn close(mut self) {
        if let Stream::Tls(tls) = &mut self {
            tls::close(tls);
        }
        let _ = self.socket().shutdown();
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(socket) => socket.read(buf),
            Stream::Tls(tls) => tls.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Plain(socket) => socket.write(buf),
            Stream::Tls(tls) => tls::write_carrying_handshake(tls, buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Plain(socket) => socket.flush(),
            Stream::Tls(tls) => tls.flush(),
        }
    }
}
