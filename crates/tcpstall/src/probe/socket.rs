//! The probe's own TCP socket, as a typical client keeps it (Nagle on, the kernel's delayed
//! ACK, one connection kept alive), instrumented from inside: every read carries the kernel's
//! receive timestamp (SO_TIMESTAMPNS, the time the first byte read reached the socket), every
//! write is followed by a TCP_INFO look at bytes the kernel is still holding.

use std::io::{self, IoSliceMut, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, MsgFlags};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use crate::host::sockopt as tcp;

/// Bytes that reached the socket, as one read returned them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Kernel receive time of the first byte read (CLOCK_REALTIME, ns since the Unix epoch).
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

pub(crate) use crate::capture::live::now_ns;
use crate::capture::live::{kernel_timestamp_ns, receive_timestamps};

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
        receive_timestamps(&stream)?;
        stream.set_write_timeout(Some(timeout))?;
        if mode.nodelay {
            tcp::set_nodelay(stream.as_fd(), true)?;
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

    /// The kernel's TCP_INFO for the connection now.
    pub fn tcp_info(&self) -> io::Result<tcp::TcpInfo> {
        tcp::tcp_info(self.stream.as_fd())
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

    /// Waits until the socket has something to read (data, its end, an error), until the
    /// deadline at most. poll(2) rather than SO_RCVTIMEO: the kernel keeps the socket's
    /// timeout on its timer wheel, which ends a 5 s wait as much as 64 jiffies (256 ms at
    /// HZ=250) late, while poll's high-resolution timer ends it on time.
    fn wait_readable(&self) -> io::Result<()> {
        while let Some(left) = self.time_left()? {
            let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
            let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, timeout) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no data before the deadline",
                    ))
                }
                Ok(_) => return Ok(()),
                Err(nix::errno::Errno::EINTR) => continue,
                Err(err) => return Err(err.into()),
            }
        }
        Ok(())
    }
}

/// Timeouts of SO_SNDTIMEO come back as EAGAIN: call them what they are.
fn timed_out(err: io::Error) -> io::Error {
    if err.kind() == io::ErrorKind::WouldBlock {
        io::Error::new(io::ErrorKind::TimedOut, "no data before the deadline")
    } else {
        err
    }
}

impl Read for ProbeSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.wait_readable()?;
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = loop {
            match socket::recvmsg::<()>(
                self.stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            ) {
                Ok(msg) => break msg,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(err) => return Err(timed_out(err.into())),
            }
        };
        let bytes = msg.bytes;
        let ts_ns = kernel_timestamp_ns(&msg).unwrap_or_else(now_ns);
        if bytes > 0 {
            self.arrivals.push(Arrival { ts_ns, bytes });
            if self.mode.quickack {
                // Sends the ACK the kernel was delaying now, and leaves ping-pong mode for
                // this turn (`do_tcp_setsockopt` TCP_QUICKACK → `tcp_cleanup_rbuf`).
                tcp::set_quickack(self.stream.as_fd(), true)?;
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
            tcp::tcp_info(self.stream.as_fd())
                .ok()
                .map(|info| info.notsent_bytes)
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
