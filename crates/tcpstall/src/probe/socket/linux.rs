//! The socket's clock and held bytes on Linux: the kernel's receive timestamp of each read
//! (SO_TIMESTAMPNS, the time the first byte read reached the socket) and TCP_INFO's
//! `tcpi_notsent_bytes` after each write.

use std::io::{self, IoSliceMut};
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{self, MsgFlags};

use super::{now_ns, timed_out, SocketFigures, SocketMode};
use crate::capture::stamps::{kernel_timestamp_ns, receive_timestamps};
use crate::host::sockopt as tcp;

/// What the socket-only view sees, in the report's words.
pub(crate) const VIEW: &str =
    "when bytes reached its own socket (kernel receive timestamps) and TCP_INFO";

/// What an evidence line's time of a read is.
pub(crate) const READ_STAMP: &str = "read (kernel receive time)";

/// Where the socket-only view is named among what was looked at.
pub(crate) const LOOKED: &str = "this connection's socket (receive times, TCP_INFO)";

/// How to get the packets' view instead.
pub(crate) const FULLER_VIEW: &str = "Run as root, or grant the capability once: sudo \
                                      setcap cap_net_raw+ep $(command -v tcpstall)";

/// Every socket mode applies here.
pub(crate) fn cannot_apply(_mode: SocketMode) -> Option<&'static str> {
    None
}

/// Asks the kernel to stamp each read with its receive time.
pub(super) fn stamp_receives(stream: &TcpStream) -> io::Result<()> {
    receive_timestamps(stream)?;
    crate::capture::stamps::keep_arrival_stamps();
    Ok(())
}

/// Waits until the socket has something to read (data, its end, an error), until the
/// deadline at most. poll(2) rather than SO_RCVTIMEO: the kernel keeps the socket's timeout on
/// its timer wheel, which ends a 5 s wait as much as 64 jiffies (256 ms at HZ=250) late, while
/// poll's high-resolution timer ends it on time.
fn wait_readable(
    stream: &TcpStream,
    time_left: &dyn Fn() -> io::Result<Option<Duration>>,
) -> io::Result<()> {
    while let Some(left) = time_left()? {
        let ms = i32::try_from(left.as_micros().div_ceil(1000)).unwrap_or(i32::MAX);
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::POLLIN)];
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

/// Reads into `buf` within `time_left`: the bytes, and the kernel's receive time of the first
/// (CLOCK_REALTIME, ns since the Unix epoch; now, when the kernel gave none).
pub(super) fn read_stamped(
    stream: &TcpStream,
    buf: &mut [u8],
    time_left: &dyn Fn() -> io::Result<Option<Duration>>,
) -> io::Result<(usize, u64)> {
    wait_readable(stream, time_left)?;
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = loop {
        match socket::recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::empty(),
        ) {
            Ok(msg) => break msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(err) => return Err(timed_out(err.into())),
        }
    };
    Ok((msg.bytes, kernel_timestamp_ns(&msg).unwrap_or_else(now_ns)))
}

/// Sends the ACK the kernel is delaying now (TCP_QUICKACK).
pub(super) fn quick_ack(stream: &TcpStream) -> io::Result<()> {
    tcp::set_quickack(stream.as_fd(), true)
}

/// Bytes the kernel has not sent yet (`tcpi_notsent_bytes`): Nagle, a cork or a closed window
/// is holding them. `None` when TCP_INFO cannot be read.
pub(super) fn held_bytes(stream: &TcpStream) -> Option<u32> {
    tcp::tcp_info(stream.as_fd())
        .ok()
        .map(|info| info.notsent_bytes)
}

/// TCP_INFO's round trip and retransmissions.
pub(super) fn figures(stream: &TcpStream) -> Option<SocketFigures> {
    tcp::tcp_info(stream.as_fd())
        .ok()
        .map(|info| SocketFigures {
            min_rtt: info.min_rtt,
            total_retrans: info.total_retrans,
        })
}
