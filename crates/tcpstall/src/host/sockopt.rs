//! TCP socket options read and written by the lab, `sockets` and `fix`: one place for the
//! `getsockopt`/`setsockopt` calls and for the kernel's `struct tcp_info`.
//!
//! Every function takes a borrowed fd, so it works the same on the lab's own sockets and on a
//! socket duplicated from another process with `pidfd_getfd` (same socket, same options).

use std::io;
use std::mem::{size_of, MaybeUninit};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

fn get_int(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: value and len point to live locals of the sizes the kernel is told.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

fn set_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: value is a live local of the size the kernel is told.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// TCP_NODELAY: true when Nagle's algorithm is off (`tp->nonagle & TCP_NAGLE_OFF`).
pub fn nodelay(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).map(|v| v != 0)
}

/// Sets TCP_NODELAY; switching it on also pushes any segment Nagle holds (`tcp_push_pending_frames`).
pub fn set_nodelay(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, on.into())
}

/// TCP_CORK: true when partial segments are held until uncorked or the 200 ms cork timer.
pub fn cork(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK).map(|v| v != 0)
}

/// Sets TCP_CORK; switching it off sends what was held (`__tcp_sock_set_cork`).
pub fn set_cork(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_CORK, on.into())
}

/// TCP_QUICKACK as the kernel reports it: `!inet_csk_in_pingpong_mode(sk)`, i.e. true while the
/// socket is not in interactive (ping-pong) mode and so would ACK at once.
pub fn quickack(fd: BorrowedFd<'_>) -> io::Result<bool> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK).map(|v| v != 0)
}

/// Sets TCP_QUICKACK; `true` leaves ping-pong mode and sends a pending ACK now. Not sticky: the
/// next request/response turn re-enters ping-pong mode, so it must be re-armed after each read.
pub fn set_quickack(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_QUICKACK, on.into())
}

/// TCP_MAXSEG: the MSS the socket uses (after the handshake) or will announce (before it).
pub fn maxseg(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG).map(|v| v.max(0) as u32)
}

/// Sets TCP_MAXSEG before connect/listen, to emulate a smaller MTU on loopback.
pub fn set_maxseg(fd: BorrowedFd<'_>, mss: u32) -> io::Result<()> {
    let mss = libc::c_int::try_from(mss)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "MSS out of range"))?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, mss)
}

/// `TCP_DELACK_MAX_US` (include/uapi/linux/tcp.h, Linux 6.13+): a lasting per-socket cap on the
/// delayed-ACK timeout, in microseconds (`tcp_delack_max()` in `tcp_output.c`). Not in libc yet.
pub const TCP_DELACK_MAX_US: libc::c_int = 46;

/// The socket's delayed-ACK cap (`TCP_DELACK_MAX_US`); `ENOPROTOOPT` on kernels without it.
pub fn delack_max(fd: BorrowedFd<'_>) -> io::Result<Duration> {
    get_int(fd, libc::IPPROTO_TCP, TCP_DELACK_MAX_US)
        .map(|us| Duration::from_micros(us.max(0) as u64))
}

/// Caps the socket's delayed ACK at `max` (`TCP_DELACK_MAX_US`). The kernel keeps it in
/// jiffies, rounding up, and refuses values outside its range with `EINVAL` (measured on
/// 6.18 at HZ=250: 4001 µs to 200 ms accepted, 4001 µs kept as 8000 µs); read back what it
/// kept with [`delack_max`].
pub fn set_delack_max(fd: BorrowedFd<'_>, max: Duration) -> io::Result<()> {
    let us = libc::c_int::try_from(max.as_micros())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "delayed-ACK cap out of range"))?;
    set_int(fd, libc::IPPROTO_TCP, TCP_DELACK_MAX_US, us)
}

/// The range of `TCP_DELACK_MAX_US` this kernel accepts, probed on a scratch socket: the
/// smallest and largest values it takes (`do_tcp_setsockopt` refuses a value outside
/// `TCP_TIMEOUT_MIN`..`TCP_DELACK_MAX` jiffies with `EINVAL`, so both depend on HZ).
/// `ENOPROTOOPT` when the kernel lacks the option (before Linux 6.13).
pub fn delack_max_range() -> io::Result<(Duration, Duration)> {
    let scratch = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let fd = std::os::fd::AsFd::as_fd(&scratch);
    let accepts = |us: u32| -> io::Result<bool> {
        match set_delack_max(fd, Duration::from_micros(u64::from(us))) {
            Ok(()) => Ok(true),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(err) => Err(err),
        }
    };
    // The kernel's default cap (TCP_DELACK_MAX, 200 ms) is always accepted; from it, a binary
    // search each way (about 20 setsockopt calls on the scratch socket).
    let default_us = crate::tcp_rules::DELACK_MAX.as_micros() as u32;
    if !accepts(default_us)? {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the kernel refuses TCP_DELACK_MAX_US at its own default of 200 ms",
        ));
    }
    let (mut refused, mut taken) = (0u32, default_us);
    while taken - refused > 1 {
        let mid = refused + (taken - refused) / 2;
        if accepts(mid)? {
            taken = mid;
        } else {
            refused = mid;
        }
    }
    let floor = taken;
    let (mut taken, mut refused) = (default_us, 60_000_000u32);
    if accepts(refused)? {
        taken = refused;
    } else {
        while refused - taken > 1 {
            let mid = taken + (refused - taken) / 2;
            if accepts(mid)? {
                taken = mid;
            } else {
                refused = mid;
            }
        }
    }
    Ok((
        Duration::from_micros(u64::from(floor)),
        Duration::from_micros(u64::from(taken)),
    ))
}

/// What the kernel keeps when asked to cap the delayed ACK at `max` (it counts in jiffies,
/// rounding up), set and read back on a scratch socket.
pub fn delack_max_kept(max: Duration) -> io::Result<Duration> {
    let scratch = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    let fd = std::os::fd::AsFd::as_fd(&scratch);
    set_delack_max(fd, max)?;
    delack_max(fd)
}

/// The part of the kernel's `struct tcp_info` (include/uapi/linux/tcp.h) that tcpstall reads,
/// laid out exactly as the kernel writes it. Times are in microseconds unless named otherwise.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpInfo {
    /// TCP state (`TCP_ESTABLISHED` = 1, ...).
    pub state: u8,
    /// Congestion-avoidance state.
    pub ca_state: u8,
    /// Retransmissions of the head segment in a row.
    pub retransmits: u8,
    /// Zero-window probes sent without answer.
    pub probes: u8,
    /// Exponential backoff count of the RTO.
    pub backoff: u8,
    /// Negotiated options (TCPI_OPT_*).
    pub options: u8,
    /// Send and receive window scale, 4 bits each.
    pub wscale: u8,
    /// Delivery-rate and fastopen flags.
    pub flags: u8,
    /// Retransmission timeout.
    pub rto: u32,
    /// Delayed-ACK timeout currently predicted (`icsk_ack.ato`).
    pub ato: u32,
    /// MSS used for sending.
    pub snd_mss: u32,
    /// MSS estimated for receiving.
    pub rcv_mss: u32,
    /// Segments sent and not yet acknowledged (`packets_out`).
    pub unacked: u32,
    /// Segments SACKed.
    pub sacked: u32,
    /// Segments considered lost.
    pub lost: u32,
    /// Segments retransmitted and in flight.
    pub retrans: u32,
    /// Unused since Linux 4.15.
    pub fackets: u32,
    /// Milliseconds since the last data was sent.
    pub last_data_sent: u32,
    /// Not remembered by the kernel.
    pub last_ack_sent: u32,
    /// Milliseconds since the last data was received.
    pub last_data_recv: u32,
    /// Milliseconds since the last ACK was received.
    pub last_ack_recv: u32,
    /// Path MTU.
    pub pmtu: u32,
    /// Receive slow-start threshold.
    pub rcv_ssthresh: u32,
    /// Smoothed RTT.
    pub rtt: u32,
    /// RTT variance.
    pub rttvar: u32,
    /// Send slow-start threshold.
    pub snd_ssthresh: u32,
    /// Congestion window, in segments.
    pub snd_cwnd: u32,
    /// Advertised MSS.
    pub advmss: u32,
    /// Reordering metric.
    pub reordering: u32,
    /// Receiver-side RTT estimate.
    pub rcv_rtt: u32,
    /// Receive buffer space estimate.
    pub rcv_space: u32,
    /// Retransmissions over the connection's life.
    pub total_retrans: u32,
    /// Pacing rate, bytes per second.
    pub pacing_rate: u64,
    /// Maximum pacing rate.
    pub max_pacing_rate: u64,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Segments sent, pure ACKs included.
    pub segs_out: u32,
    /// Segments received.
    pub segs_in: u32,
    /// Bytes written by the application and not yet sent.
    pub notsent_bytes: u32,
    /// Minimum RTT seen.
    pub min_rtt: u32,
    /// Segments received with data.
    pub data_segs_in: u32,
    /// Segments sent with data (retransmissions included).
    pub data_segs_out: u32,
}

/// Reads TCP_INFO. Older kernels fill fewer fields; the rest stay zero.
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut info = MaybeUninit::<TcpInfo>::zeroed();
    let mut len = size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: info is zeroed storage of the size the kernel is told; every bit pattern is a
    // valid TcpInfo (plain integers), so assume_init is sound whatever the kernel filled.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc == 0 {
        // SAFETY: see above.
        Ok(unsafe { info.assume_init() })
    } else {
        Err(io::Error::last_os_error())
    }
}

/// PACKET_STATISTICS of an AF_PACKET socket: (packets received, packets dropped because the
/// socket's buffer was full) since the last call; reading resets both (`packet_getsockopt`).
pub fn packet_statistics(fd: BorrowedFd<'_>) -> io::Result<(u32, u32)> {
    let mut stats = libc::tpacket_stats {
        tp_packets: 0,
        tp_drops: 0,
    };
    let mut len = size_of::<libc::tpacket_stats>() as libc::socklen_t;
    // SAFETY: stats and len point to live locals of the sizes the kernel is told.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut stats as *mut libc::tpacket_stats).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok((stats.tp_packets, stats.tp_drops))
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn tcp_info_layout_matches_kernel_offsets() {
        // Offsets from include/uapi/linux/tcp.h; a wrong field type would shift these.
        assert_eq!(std::mem::offset_of!(TcpInfo, rto), 8);
        assert_eq!(std::mem::offset_of!(TcpInfo, rtt), 68);
        assert_eq!(std::mem::offset_of!(TcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(TcpInfo, segs_out), 136);
        assert_eq!(std::mem::offset_of!(TcpInfo, data_segs_out), 156);
    }

    #[test]
    fn delack_max_range_is_probed_on_this_kernel() {
        match delack_max_range() {
            Ok((floor, ceiling)) => {
                assert!(
                    floor > Duration::ZERO && floor <= ceiling,
                    "{floor:?} {ceiling:?}"
                );
                let kept = delack_max_kept(floor).expect("the floor is accepted");
                assert!(kept >= floor, "kept {kept:?} below the floor {floor:?}");
                let below = delack_max_kept(floor - Duration::from_micros(1));
                assert_eq!(below.map_err(|e| e.raw_os_error()), Err(Some(libc::EINVAL)));
            }
            Err(err) => assert_eq!(err.raw_os_error(), Some(libc::ENOPROTOOPT), "{err}"),
        }
    }

    #[test]
    fn options_round_trip_on_a_real_socket() -> io::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let stream = TcpStream::connect(listener.local_addr()?)?;
        let fd = stream.as_fd();
        assert!(!nodelay(fd)?);
        set_nodelay(fd, true)?;
        assert!(nodelay(fd)?);
        set_cork(fd, true)?;
        assert!(cork(fd)?);
        set_cork(fd, false)?;
        assert!(!cork(fd)?);
        let info = tcp_info(fd)?;
        assert_eq!(info.state, 1, "TCP_ESTABLISHED");
        assert!(info.snd_mss > 0);
        Ok(())
    }
}
