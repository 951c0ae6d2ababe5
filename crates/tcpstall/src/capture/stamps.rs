//! The kernel's receive timestamps: asking for them, reading them, and keeping them stamped
//! as packets arrive rather than as they are read.

use std::net::{Ipv4Addr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{self, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn};

use super::now_ns;

/// Asks the kernel to stamp each message `fd` receives with its receive time: SO_TIMESTAMPNS
/// (nanoseconds), else SO_TIMESTAMP (microseconds) where the first is refused with ENOPROTOOPT,
/// as qemu-user does (it translates only the second; `sock_setsockopt` has both).
pub(crate) fn receive_timestamps<F: AsFd>(fd: &F) -> Result<(), Errno> {
    match socket::setsockopt(fd, sockopt::ReceiveTimestampns, &true) {
        Err(Errno::ENOPROTOOPT) => socket::setsockopt(fd, sockopt::ReceiveTimestamp, &true),
        done => done,
    }
}

/// The kernel's receive time of a message read with [`receive_timestamps`] on
/// (`SCM_TIMESTAMPNS` or `SCM_TIMESTAMP`, ns since the Unix epoch), if it came with one.
pub(crate) fn kernel_timestamp_ns<S>(msg: &nix::sys::socket::RecvMsg<'_, '_, S>) -> Option<u64> {
    msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::ScmTimestampns(ts) => {
                Some(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
            }
            ControlMessageOwned::ScmTimestamp(tv) => {
                Some(tv.tv_sec() as u64 * 1_000_000_000 + tv.tv_usec() as u64 * 1_000)
            }
            _ => None,
        })
    })
}

/// A socket asking for receive timestamps for the rest of the process's life (`None`: it could
/// not be made).
static KEEPS_STAMPS_ON: OnceLock<Option<UdpSocket>> = OnceLock::new();

/// Longest wait for the kernel to start stamping packets on arrival.
const STAMPS_ON_WITHIN: Duration = Duration::from_millis(200);

/// How long a datagram to ourselves waits before it is read: a stamp taken at reading comes
/// this much after the send, one taken on arrival microseconds after it.
const READ_AFTER: Duration = Duration::from_micros(500);

/// Makes sure the kernel stamps every packet as it arrives from now on, not as it is read.
///
/// The first socket that asks for receive timestamps turns them on through deferred work
/// (`net_enable_timestamp` schedules `netstamp_clear`, which enables the static key
/// `netstamp_needed_key`), and the last one to close turns them off the same way. Until that
/// work has run, a packet is stamped only when it is read (`__sock_recv_timestamp`), which a
/// busy machine may do milliseconds later: the first packets of a capture opened on a host
/// where nothing else asks for timestamps (one exchange in ten, measured with every core
/// busy). So one socket keeps asking for them for the process's life, and a datagram it sends
/// itself on 127.0.0.1 tells when they are on: stamped as sent, not as read. Waits at most
/// [`STAMPS_ON_WITHIN`], once per process; where loopback cannot be used, it does not wait.
pub(crate) fn keep_arrival_stamps() {
    KEEPS_STAMPS_ON.get_or_init(|| {
        let keeper = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
        receive_timestamps(&keeper).ok()?;
        wait_until_stamped_on_arrival(&keeper);
        Some(keeper)
    });
}

/// Sends `socket` a datagram until one is stamped on arrival ([`keep_arrival_stamps`]).
fn wait_until_stamped_on_arrival(socket: &UdpSocket) {
    let (Ok(address), Ok(())) = (socket.local_addr(), socket.set_nonblocking(true)) else {
        return;
    };
    let until = Instant::now() + STAMPS_ON_WITHIN;
    while Instant::now() < until {
        let sent = now_ns();
        if socket.send_to(&[0], address).is_err() {
            return;
        }
        std::thread::sleep(READ_AFTER);
        let stamped_on_arrival = datagram_stamp(socket, MsgFlags::MSG_DONTWAIT)
            .is_some_and(|at| at.saturating_sub(sent) < READ_AFTER.as_nanos() as u64 / 2);
        if stamped_on_arrival {
            return;
        }
    }
}

/// Reads one datagram of `socket` (receive timestamps on) and gives the kernel's stamp of it;
/// `None` when nothing could be read or it came unstamped.
fn datagram_stamp(socket: &UdpSocket, flags: MsgFlags) -> Option<u64> {
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
    let msg =
        socket::recvmsg::<SockaddrIn>(socket.as_raw_fd(), &mut iov, Some(&mut cmsg), flags).ok()?;
    kernel_timestamp_ns(&msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram sent right after its socket asks for timestamps, and read 20 ms later,
    /// carries the time it came. Without a socket keeping them on, the kernel would still be
    /// turning them on as it came (the first to ask on a quiet host), and stamp it as read.
    #[test]
    fn a_packet_read_late_carries_the_time_it_came() {
        keep_arrival_stamps();
        let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).expect("a UDP socket on lo");
        receive_timestamps(&socket).expect("SO_TIMESTAMPNS");
        let address = socket.local_addr().expect("its address");
        socket.send_to(b"x", address).expect("sent to itself");
        // On loopback the datagram has arrived when the send returns.
        let sent = now_ns();
        std::thread::sleep(Duration::from_millis(20));
        let stamped =
            datagram_stamp(&socket, MsgFlags::empty()).expect("the datagram, with a timestamp");
        let late_ms = stamped.saturating_sub(sent) as f64 / 1e6;
        assert!(late_ms < 10.0, "stamped {late_ms:.3} ms after it was sent");
    }
}
