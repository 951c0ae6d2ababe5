//! The socket's clock and held bytes where Linux's are missing (Windows, macOS): the time each
//! read returns, taken in user space, stands for the kernel's receive timestamp; the bytes the
//! kernel still holds after a write are unknown (no TCP_INFO `tcpi_notsent_bytes`), and so is
//! TCP_QUICKACK, the confirming re-run's way to send our ACKs at once.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::Duration;

use super::{now_ns, timed_out, SocketFigures, SocketMode};

/// What the socket-only view sees, in the report's words.
pub(crate) const VIEW: &str = "when its reads returned (times taken in user space: this \
                               system gives no kernel receive timestamps) and no TCP_INFO, so \
                               not the bytes the kernel held of its own writes";

/// What an evidence line's time of a read is.
pub(crate) const READ_STAMP: &str = "read (time it returned)";

/// Where the socket-only view is named among what was looked at.
pub(crate) const LOOKED: &str = "this connection's socket (the times its reads returned)";

/// How to get the packets' view instead.
pub(crate) const FULLER_VIEW: &str = "For the packets, capture them (Wireshark, tcpdump) and \
                                      read the capture with `tcpstall analyze`, or run the \
                                      probe on Linux";

/// Why `mode` cannot be applied here, when it cannot.
pub(crate) fn cannot_apply(mode: SocketMode) -> Option<&'static str> {
    mode.quickack.then_some(
        "the re-run that tests whether the answers wait for our delayed ACK sends the probe's \
         ACKs at once with TCP_QUICKACK, which only Linux has",
    )
}

/// Nothing to ask for: the reads are timed when they return.
pub(super) fn stamp_receives(_stream: &TcpStream) -> io::Result<()> {
    Ok(())
}

/// Reads into `buf` within `time_left` (SO_RCVTIMEO): the bytes, and the time the read
/// returned (ns since the Unix epoch).
pub(super) fn read_stamped(
    mut stream: &TcpStream,
    buf: &mut [u8],
    time_left: &dyn Fn() -> io::Result<Option<Duration>>,
) -> io::Result<(usize, u64)> {
    stream.set_read_timeout(time_left()?)?;
    loop {
        match stream.read(buf) {
            Ok(bytes) => return Ok((bytes, now_ns())),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(timed_out(err)),
        }
    }
}

/// TCP_QUICKACK is Linux's; [`cannot_apply`] keeps the re-run that needs it from starting.
pub(super) fn quick_ack(_stream: &TcpStream) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "TCP_QUICKACK is Linux's",
    ))
}

/// Unknown here.
pub(super) fn held_bytes(_stream: &TcpStream) -> Option<u32> {
    None
}

/// Unknown here.
pub(super) fn figures(_stream: &TcpStream) -> Option<SocketFigures> {
    None
}
