//! The probe's own TCP socket, as a typical client keeps it (Nagle on, the system's delayed
//! ACK, one connection kept alive), instrumented from inside: every read carries the time its
//! bytes reached the socket, every write what the kernel is still holding of it, as far as the
//! system tells ([`system`]: on Linux the kernel's receive timestamps and TCP_INFO; elsewhere
//! the time each read returns, and no held bytes).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

// The socket's clock and held bytes, from what each system offers.
#[cfg(target_os = "linux")]
#[path = "socket/linux.rs"]
mod system;
#[cfg(not(target_os = "linux"))]
#[path = "socket/elsewhere.rs"]
mod system;

pub(crate) use self::system::{cannot_apply, FULLER_VIEW, LOOKED, READ_STAMP, VIEW};

/// Bytes that reached the socket, as one read returned them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// When the first byte read reached the socket, ns since the Unix epoch: the kernel's
    /// receive time (CLOCK_REALTIME) on Linux, the read's return elsewhere.
    pub ts_ns: u64,
    /// Bytes the read returned.
    pub bytes: usize,
}

/// One write of the application and what the kernel did with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// When the write returned (CLOCK_REALTIME, ns since the Unix epoch).
    pub ts_ns: u64,
    /// Bytes written.
    pub bytes: usize,
    /// Bytes the kernel had not sent yet right after it (`tcpi_notsent_bytes`): Nagle, a cork
    /// or a closed window is holding them. `None` for a turn's first write (Nagle never holds
    /// it) and when TCP_INFO could not be read.
    pub held: Option<u32>,
}

/// How the socket behaves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SocketMode {
    /// Set TCP_QUICKACK again after every read, so that no ACK of ours is delayed (the
    /// option lasts one turn: the next turn re-enters ping-pong mode, `inet_csk_enter_pingpong_mode`).
    pub quickack: bool,
    /// Set TCP_NODELAY: our own writes are never held by Nagle.
    pub nodelay: bool,
}

/// What the socket's kernel told of the connection at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketFigures {
    /// Smallest round trip seen, µs (`tcpi_min_rtt`).
    pub min_rtt: u32,
    /// Segments retransmitted (`tcpi_total_retrans`).
    pub total_retrans: u32,
}

/// A connected, instrumented TCP socket.
#[derive(Debug)]
pub struct ProbeSocket {
    stream: TcpStream,
    mode: SocketMode,
    /// Reads since the last [`ProbeSocket::take_log`].
    arrivals: Vec<Arrival>,
    /// Writes since the last [`ProbeSocket::take_log`].
    sent: Vec<Sent>,
    /// Reads and writes fail with `TimedOut` from this instant on.
    deadline: Option<Instant>,
}

pub(crate) use crate::capture::now_ns;

impl ProbeSocket {
    /// Binds a socket for `addr`'s family to an ephemeral local port, tells `on_bound` the
    /// port (a capture watches it before the SYN leaves), then connects within `timeout`.
    pub fn connect(
        addr: SocketAddr,
        timeout: Duration,
        mode: SocketMode,
        on_bound: impl FnOnce(u16),
    ) -> io::Result<ProbeSocket> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        let any: SocketAddr = match addr {
            SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        socket.bind(&SockAddr::from(any))?;
        let port = socket
            .local_addr()?
            .as_socket()
            .map_or(0, |local| local.port());
        on_bound(port);
        socket.connect_timeout(&SockAddr::from(addr), timeout)?;
        let stream: TcpStream = socket.into();
        system::stamp_receives(&stream)?;
        stream.set_write_timeout(Some(timeout))?;
        if mode.nodelay {
            stream.set_nodelay(true)?;
        }
        Ok(ProbeSocket {
            stream,
            mode,
            arrivals: Vec::new(),
            sent: Vec::new(),
            deadline: None,
        })
    }

    /// Reads and writes fail with `TimedOut` once `deadline` has passed.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// Local port.
    pub fn local_port(&self) -> u16 {
        self.stream.local_addr().map_or(0, |a| a.port())
    }

    /// What the kernel tells of the connection now, where it tells it.
    pub fn figures(&self) -> Option<SocketFigures> {
        system::figures(&self.stream)
    }

    /// Sends our FIN: the connection ends politely and a capture sees it closed.
    pub fn shutdown(&self) -> io::Result<()> {
        self.stream.shutdown(std::net::Shutdown::Write)
    }

    /// The reads and writes since the last call.
    pub fn take_log(&mut self) -> (Vec<Arrival>, Vec<Sent>) {
        (
            std::mem::take(&mut self.arrivals),
            std::mem::take(&mut self.sent),
        )
    }

    /// What is left before the deadline, looked at before each read (a timeout set once per
    /// request would let a reply trickling in byte by byte outlive the deadline).
    fn time_left(&self) -> io::Result<Option<Duration>> {
        let Some(deadline) = self.deadline else {
            return Ok(None);
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        // A zero timeout would mean "wait for ever".
        Ok(Some(left.max(Duration::from_millis(1))))
    }
}

/// Timeouts of SO_RCVTIMEO and SO_SNDTIMEO come back as EAGAIN (WSAETIMEDOUT on Windows):
/// call them what they are.
fn timed_out(err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "no data before the deadline")
    } else {
        err
    }
}

impl Read for ProbeSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (bytes, ts_ns) = system::read_stamped(&self.stream, buf, &|| self.time_left())?;
        if bytes > 0 {
            self.arrivals.push(Arrival { ts_ns, bytes });
            if self.mode.quickack {
                // Sends the ACK the kernel was delaying now, and leaves ping-pong mode for
                // this turn (`do_tcp_setsockopt` TCP_QUICKACK → `tcp_cleanup_rbuf`).
                system::quick_ack(&self.stream)?;
            }
        }
        Ok(bytes)
    }
}

impl ProbeSocket {
    /// Logs a write of `bytes` that just returned, with what the kernel still holds of it.
    fn log_write(&mut self, bytes: usize) {
        // A turn's first write is never held by Nagle: the previous reply acknowledged our
        // last request, so nothing small is in flight (`tcp_nagle_check`). TCP_INFO is read
        // only after the later ones, which keeps the measured round trip lean.
        let held = if self.sent.is_empty() {
            None
        } else {
            system::held_bytes(&self.stream)
        };
        self.sent.push(Sent {
            ts_ns: now_ns(),
            bytes,
            held,
        });
    }
}

impl Write for ProbeSocket {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // SO_SNDTIMEO stays what connect set (the per-request timeout): a request's writes
        // fit the socket's buffer and do not block, so no system call is spent re-arming it.
        self.time_left()?;
        let bytes = self.stream.write(buf).map_err(timed_out)?;
        self.log_write(bytes);
        Ok(bytes)
    }

    /// One `writev` for all of `bufs`: rustls hands a TLS flight (key exchange, change
    /// cipher spec, Finished) over as several records at once, and a client writes a flight
    /// in one call; record by record, Nagle would hold the later records of our own
    /// handshake until the server's delayed ACK.
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.time_left()?;
        let bytes = self.stream.write_vectored(bufs).map_err(timed_out)?;
        self.log_write(bytes);
        Ok(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
