//! The lab's servers: one listener on 127.0.0.1 (or, on an emulated path, the server
//! namespace's address) port 0 (the kernel picks a free port), one
//! thread per accepted connection, every wait bounded by a read timeout and a deadline.
//! Dropping a [`Server`] stops it, so a failing test never leaves one running.

use std::io::{self, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use socket2::{Domain, Socket, Type};

use crate::exchange::framing::{self, MessageReader};
use crate::exchange::notes::describe_io;
use crate::exchange::protocol::reply_to;
use crate::exchange::protocol::Protocol;
use crate::exchange::write::WriteStrategy;
use crate::exchange::ServerReport;
use crate::host::netns::NetNs;
use crate::host::sockopt;

/// Who sets TCP_NODELAY on the server side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerNodelay {
    /// Nagle stays on.
    Off,
    /// Set on every accepted socket (what nginx does for keep-alive connections).
    Accepted,
    /// Set on the listening socket only; whether accepted sockets inherit it is the question.
    Listener,
}

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// What it speaks.
    pub protocol: Protocol,
    /// How it writes the parts of a reply.
    pub reply: WriteStrategy,
    /// TCP_MAXSEG on the listener (accepted sockets inherit it), to emulate a smaller MTU.
    pub mss: Option<u32>,
    /// Where TCP_NODELAY is set.
    pub nodelay: ServerNodelay,
    /// TCP_QUICKACK value set on the listener, to see whether accepted sockets keep it.
    pub listener_quickack: Option<bool>,
    /// Re-arm TCP_QUICKACK after every read on accepted sockets.
    pub quickack_rearm: bool,
    /// TCP_DELACK_MAX_US set once on every accepted socket.
    pub delack_max: Option<Duration>,
    /// Bound of each wait for data.
    pub read_timeout: Duration,
    /// Nothing runs past this instant.
    pub deadline: Instant,
    /// The address to listen on.
    pub bind: Ipv4Addr,
    /// The port to listen on (0: the kernel picks a free one).
    pub port: u16,
    /// The namespace of an emulated path (`lab --rtt`) to listen in; `None`: this process's.
    pub namespace: Option<NetNs>,
}

impl ServerConfig {
    /// A plain server: replies in one write, Nagle on, no option set.
    pub fn new(protocol: Protocol, deadline: Instant) -> ServerConfig {
        ServerConfig {
            protocol,
            reply: WriteStrategy::Single,
            mss: None,
            nodelay: ServerNodelay::Off,
            listener_quickack: None,
            quickack_rearm: false,
            delack_max: None,
            read_timeout: Duration::from_secs(2),
            deadline,
            bind: Ipv4Addr::LOCALHOST,
            port: 0,
            namespace: None,
        }
    }
}

/// A running lab server. Stops when [`Server::stop`] is called or when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<ServerReport>>,
    acceptor: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

impl Server {
    /// Binds the configured address (127.0.0.1 unless on an emulated path), port 0, and
    /// starts accepting.
    pub fn start(config: ServerConfig) -> io::Result<Server> {
        let socket = match &config.namespace {
            Some(ns) => ns.socket(Domain::IPV4, Type::STREAM)?,
            None => Socket::new(Domain::IPV4, Type::STREAM, None)?,
        };
        if let Some(mss) = config.mss {
            sockopt::set_maxseg(socket.as_fd(), mss)?;
        }
        if config.nodelay == ServerNodelay::Listener {
            sockopt::set_nodelay(socket.as_fd(), true)?;
        }
        if let Some(on) = config.listener_quickack {
            sockopt::set_quickack(socket.as_fd(), on)?;
        }
        socket.bind(&SocketAddrV4::new(config.bind, config.port).into())?;
        socket.listen(128)?;
        socket.set_nonblocking(true)?;
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(ServerReport::default()));
        let acceptor = {
            let (stop, report) = (stop.clone(), report.clone());
            std::thread::Builder::new()
                .name(format!("lab-server-{}", addr.port()))
                .spawn(move || accept_loop(listener, config, stop, report))?
        };
        Ok(Server {
            addr,
            stop,
            report,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, waits for the connection handlers (bounded by the read timeout and the
    /// deadline) and returns what the server saw.
    pub fn stop(mut self) -> ServerReport {
        self.shutdown();
        let report = self.report.lock().map(|r| r.clone());
        report.unwrap_or_default()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            if let Ok(handlers) = acceptor.join() {
                for handler in handlers {
                    let _ = handler.join();
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn accept_loop(
    listener: TcpListener,
    config: ServerConfig,
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<ServerReport>>,
) -> Vec<JoinHandle<()>> {
    let mut handlers = Vec::new();
    let mut draining = false;
    let mut backoff = ACCEPT_BACKOFF_MIN;
    while Instant::now() < config.deadline {
        if !draining && stop.load(Ordering::SeqCst) {
            // Connections the kernel completed but not yet accepted may already hold data a
            // client wrote: accept what is queued, then stop.
            draining = true;
        }
        if !draining {
            // Poll with a short timeout so that the stop flag is seen; a connection that
            // arrives wakes the poll at once, so this adds no latency.
            let mut fds = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(20u16)) {
                Ok(0) => continue,
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(err) => {
                    note_error(&report, format!("poll on listener: {err}"));
                    break;
                }
            }
        }
        let (stream, peer) = match listener.accept() {
            Ok(accepted) => {
                backoff = ACCEPT_BACKOFF_MIN;
                accepted
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock && draining => break,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => continue,
            Err(err) => {
                note_error(&report, describe_io("accept", &err));
                if draining {
                    break;
                }
                if lacks_resources(&err) {
                    // The connection stays in the accept queue and the poll above reports it
                    // again at once: without a pause this loop spins until a descriptor is
                    // freed (inet_csk_accept fails the same way each time).
                    let left = config.deadline.saturating_duration_since(Instant::now());
                    std::thread::sleep(backoff.min(left));
                    backoff = (backoff * 2).min(ACCEPT_BACKOFF_MAX);
                }
                continue;
            }
        };
        if let Ok(mut r) = report.lock() {
            r.connections += 1;
            if r.accepted_nodelay.is_none() {
                r.accepted_nodelay = sockopt::nodelay(stream.as_fd()).ok();
                r.accepted_quickack = sockopt::quickack(stream.as_fd()).ok();
            }
        }
        let (config, stop, shared) = (config.clone(), stop.clone(), report.clone());
        let spawned = std::thread::Builder::new()
            .name(format!("lab-conn-{}", peer.port()))
            .spawn(move || {
                let mut arrivals = Vec::new();
                let mut stream = stream;
                let result = serve_connection(&mut stream, &config, &stop, &mut arrivals);
                let segs = sockopt::tcp_info(stream.as_fd()).map(|i| i.data_segs_out);
                if let Ok(mut r) = shared.lock() {
                    r.data_segs_out += u64::from(segs.unwrap_or(0));
                    if !arrivals.is_empty() {
                        r.arrivals.insert(peer.port(), arrivals);
                    }
                    if let Err(err) = result {
                        r.errors
                            .push(describe_io(&format!("server connection from {peer}"), &err));
                    }
                }
            });
        match spawned {
            Ok(handle) => handlers.push(handle),
            Err(err) => note_error(&report, describe_io("spawning a handler", &err)),
        }
    }
    handlers
}

/// First and longest pause after an accept that failed for lack of resources.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(5);
const ACCEPT_BACKOFF_MAX: Duration = Duration::from_millis(200);

/// accept(2) failures that last until something else gives a resource back (a descriptor,
/// memory), as opposed to one connection's failure (ECONNABORTED, EPROTO) worth retrying now.
fn lacks_resources(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

fn note_error(report: &Mutex<ServerReport>, message: String) {
    if let Ok(mut r) = report.lock() {
        r.errors.push(message);
    }
}

fn serve_connection(
    stream: &mut TcpStream,
    config: &ServerConfig,
    stop: &AtomicBool,
    arrivals: &mut Vec<Instant>,
) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(config.read_timeout))?;
    if config.nodelay == ServerNodelay::Accepted {
        sockopt::set_nodelay(stream.as_fd(), true)?;
    }
    if let Some(max) = config.delack_max {
        sockopt::set_delack_max(stream.as_fd(), max)?;
    }
    if let Protocol::Sink { chunk } = config.protocol {
        return sink(stream, chunk.max(1), config, stop, arrivals);
    }
    let mut reader = MessageReader::new(config.quickack_rearm);
    let frame_end = match config.protocol {
        Protocol::Http { .. } => framing::http_head_end,
        _ => framing::line_end,
    };
    while Instant::now() < config.deadline {
        let request = match reader.read_message(stream, frame_end) {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err(err) if is_timeout(&err) && !stop.load(Ordering::SeqCst) => continue,
            Err(err) if is_timeout(&err) => return Ok(()),
            Err(err) => return Err(err),
        };
        match config.protocol {
            Protocol::Memcached { .. } if request.starts_with(b"set ") => {
                // A client that stores its value first (`tcpstall probe memcached://`): take
                // the data block, answer as memcached does, in one write.
                skip_data_block(&mut reader, stream, &request)?;
                stream.write_all(b"STORED\r\n")?;
            }
            _ => {
                let (parts, close) = reply_to(config.protocol, &request);
                let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                config.reply.write_message(stream, &parts)?;
                if close {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Reads the data block of a memcached `set <key> <flags> <exptime> <bytes>` command: its
/// `<bytes>` and the `\r\n` after them.
fn skip_data_block(
    reader: &mut MessageReader,
    stream: &mut TcpStream,
    command: &[u8],
) -> io::Result<()> {
    let bytes = std::str::from_utf8(command)
        .ok()
        .and_then(|line| line.split_whitespace().nth(4)?.parse::<usize>().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "set without a byte count"))?;
    let mut read = 0;
    while read < bytes + 2 {
        match reader.read_message(stream, framing::line_end)? {
            Some(line) => read += line.len(),
            None => return Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
    Ok(())
}

/// Reads a one-way stream to its end, noting when every `chunk` bytes have arrived.
fn sink(
    stream: &mut TcpStream,
    chunk: usize,
    config: &ServerConfig,
    stop: &AtomicBool,
    arrivals: &mut Vec<Instant>,
) -> io::Result<()> {
    use std::io::Read;
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0usize;
    while Instant::now() < config.deadline {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(read) => {
                let now = Instant::now();
                total += read;
                while arrivals.len() < total / chunk {
                    arrivals.push(now);
                }
                if config.quickack_rearm {
                    sockopt::set_quickack(stream.as_fd(), true)?;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) if is_timeout(&err) && !stop.load(Ordering::SeqCst) => {}
            Err(err) if is_timeout(&err) => return Ok(()),
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// A read timeout shows as `WouldBlock` or `TimedOut` depending on the platform.
pub(crate) fn is_timeout(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}
