//! The catalogue's servers over the peer's stack (`lab --peer-side server`): echo, HTTP and
//! memcached, one connection at a time (the lab's request/response clients use one at a
//! time), on a thread in the peer's namespace that stops when told or at the row's deadline.

use std::io;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use smoltcp::iface::SocketHandle;

use super::client::write_message;
use super::stack::{ConnOptions, PeerStack};
use crate::exchange::framing::{self, FrameEnd};
use crate::exchange::protocol::{reply_to, Protocol};
use crate::exchange::write::WriteStrategy;
use crate::exchange::ServerReport;

/// The port the peer's server listens on (document 003's echo server's).
pub const PEER_SERVER_PORT: u16 = 8000;

/// Longest wait for the server to listen.
const READY_LIMIT: Duration = Duration::from_secs(5);

/// Longest wait before the stop flag is looked at again.
const STOP_CHECK: Duration = Duration::from_millis(20);

/// How the peer's server answers.
#[derive(Debug, Clone, Copy)]
pub struct ServerJob {
    /// What it speaks.
    pub protocol: Protocol,
    /// How it writes a reply's parts.
    pub reply: WriteStrategy,
    /// Socket options of accepted connections.
    pub options: ConnOptions,
    /// Nothing runs past this.
    pub deadline: Instant,
}

/// What the server's thread runs, given the stack it made in the peer's namespace.
pub type ServeFn = Box<dyn FnOnce(io::Result<&mut PeerStack>) + Send>;

/// A running peer server; [`PeerServer::stop`] ends it and returns what it saw.
pub struct PeerServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<ServerReport>>,
    thread: Option<JoinHandle<()>>,
}

impl PeerServer {
    /// Starts serving on `stack`, moved to a thread made by `spawn_in_namespace`.
    pub fn start(
        addr: SocketAddrV4,
        job: ServerJob,
        run: impl FnOnce(ServeFn) -> io::Result<JoinHandle<()>>,
    ) -> io::Result<PeerServer> {
        if matches!(job.protocol, Protocol::Sink { .. }) {
            return Err(io::Error::other(
                "the stream rows have no peer server yet: run them with --peer-side client",
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(ServerReport::default()));
        let (stop_flag, shared) = (stop.clone(), report.clone());
        let (ready, listening) = std::sync::mpsc::channel();
        let thread = run(Box::new(
            move |stack: io::Result<&mut PeerStack>| match stack {
                Ok(stack) => serve(stack, &job, &stop_flag, &shared, &ready),
                Err(err) => note(&shared, format!("cannot start its stack: {err}")),
            },
        ))?;
        // Clients connect only once the port listens: a SYN before would be reset.
        if listening.recv_timeout(READY_LIMIT).is_err() {
            stop.store(true, Ordering::SeqCst);
            let _ = thread.join();
            let why = report
                .lock()
                .ok()
                .and_then(|r| r.errors.lines().into_iter().next())
                .unwrap_or_else(|| "it did not start listening".to_string());
            return Err(io::Error::other(format!("the peer's server: {why}")));
        }
        Ok(PeerServer {
            addr: SocketAddr::V4(addr),
            stop,
            report,
            thread: Some(thread),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving and returns what the server saw.
    pub fn stop(mut self) -> ServerReport {
        self.shutdown();
        self.report.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for PeerServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn note(report: &Mutex<ServerReport>, error: String) {
    if let Ok(mut r) = report.lock() {
        r.errors.push(error);
    }
}

/// Accepts and serves connections one after another until stopped.
fn serve(
    stack: &mut PeerStack,
    job: &ServerJob,
    stop: &AtomicBool,
    report: &Mutex<ServerReport>,
    ready: &std::sync::mpsc::Sender<()>,
) {
    let mut listener = match stack.listen(PEER_SERVER_PORT, job.options) {
        Ok(handle) => handle,
        Err(err) => return note(report, err.to_string()),
    };
    let _ = ready.send(());
    while !stop.load(Ordering::SeqCst) && Instant::now() < job.deadline {
        match stack.accepted(listener, Instant::now() + STOP_CHECK) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(err) => return note(report, format!("peer server: {err}")),
        }
        let connection = listener;
        // The next connection's listener first: a SYN never finds the port closed.
        listener = match stack.listen(PEER_SERVER_PORT, job.options) {
            Ok(handle) => handle,
            Err(err) => return note(report, err.to_string()),
        };
        if let Ok(mut r) = report.lock() {
            r.connections += 1;
        }
        let served = serve_connection(stack, connection, job, stop);
        if let Ok(mut r) = report.lock() {
            r.data_segs_out += u64::from(stack.data_segments_out(connection));
            if let Err(err) = served {
                r.errors.push(format!("peer server connection: {err}"));
            }
        }
        stack.close(connection, Instant::now() + Duration::from_secs(1));
    }
    stack.remove(listener);
}

/// Answers the requests of one connection until the client closes it or `stop` is set.
fn serve_connection(
    stack: &mut PeerStack,
    handle: SocketHandle,
    job: &ServerJob,
    stop: &AtomicBool,
) -> io::Result<()> {
    let request_end: FrameEnd = match job.protocol {
        Protocol::Http { .. } => framing::http_head_end,
        _ => framing::line_end,
    };
    let mut buf = Vec::new();
    loop {
        let len = loop {
            if stop.load(Ordering::SeqCst) || Instant::now() >= job.deadline {
                return Ok(());
            }
            let wait = (Instant::now() + STOP_CHECK).min(job.deadline);
            match stack.read_message(handle, &mut buf, request_end, wait) {
                Ok(len) => break len,
                Err(err) if err.kind() == io::ErrorKind::TimedOut => continue,
                // The client closed between requests: done.
                Err(err) if err.kind() == io::ErrorKind::UnexpectedEof && buf.is_empty() => {
                    return Ok(())
                }
                Err(err) => return Err(err),
            }
        };
        let request: Vec<u8> = buf.drain(..len).collect();
        let (parts, close) = reply_to(job.protocol, &request);
        write_message(stack, handle, job.reply, &parts, job.deadline)?;
        if close {
            return Ok(());
        }
    }
}
