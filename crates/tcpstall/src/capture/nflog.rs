//! Live capture from netfilter's log (`-i nflog:GROUP`, as tcpdump names it): the packets a
//! firewall rule sends to an NFLOG group (`nft ... log group N`, `iptables -j NFLOG
//! --nflog-group N`), read from a netfilter netlink socket (nfnetlink_log,
//! `include/uapi/linux/netfilter/nfnetlink_log.h`). Each message is one packet from its IP
//! header on; no link layer. Binding to a group needs CAP_NET_ADMIN.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use netlink_sys::{Socket, SocketAddr as NetlinkAddr};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::live::OpenError;

/// `NETLINK_NETFILTER`.
const NETLINK_NETFILTER: isize = 12;
/// `NFNL_SUBSYS_ULOG`: the log subsystem's messages are `(4 << 8) | type`.
const SUBSYS_ULOG: u16 = 4 << 8;
const MSG_PACKET: u16 = 0;
const MSG_CONFIG: u16 = 1;
const CFG_CMD: u16 = 1;
const CFG_MODE: u16 = 2;
const CFG_QTHRESH: u16 = 5;
const CFG_CMD_BIND: u8 = 1;
const COPY_PACKET: u8 = 2;
const ATTR_TIMESTAMP: u16 = 3;
const ATTR_PAYLOAD: u16 = 9;
/// `NLMSG_ERROR`, the kernel's answer to a request with `NLM_F_ACK`.
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
/// Attribute types carry two flag bits on top (`NLA_TYPE_MASK`).
const ATTR_TYPE_MASK: u16 = 0x3fff;

/// One logged packet.
#[derive(Debug, Clone, Copy)]
pub struct LoggedPacket<'a> {
    /// The packet from its IP header on (maybe cut at the copy range).
    pub data: &'a [u8],
    /// `ETH_P_IP` or `ETH_P_IPV6`, from the message's address family.
    pub protocol: u16,
    /// When the packet was logged, ns since the Unix epoch: the kernel's receive time where the
    /// packet has one, the time of reading otherwise. A locally sent TCP packet carries its
    /// departure time on the monotonic clock instead (EDT pacing, `tcp_wstamp_ns`), which
    /// is told apart by being far from the realtime clock.
    pub ts_ns: u64,
}

/// A netlink socket bound to one NFLOG group.
#[derive(Debug)]
pub struct NflogSocket {
    socket: Socket,
    group: u16,
    buffer: Vec<u8>,
}

impl NflogSocket {
    /// Binds to `group`, copying up to `keep` bytes of each packet. The name in errors is
    /// `nflog:GROUP`.
    pub fn open(group: u16, keep: u32) -> Result<NflogSocket, OpenError> {
        let name = format!("nflog:{group}");
        let system = |what: &'static str, error: io::Error| OpenError::System {
            interface: name.clone(),
            what,
            error,
        };
        // NFULA_TIMESTAMP comes only with a packet the kernel stamped (`__build_packet_message`
        // reads skb->tstamp): on arrival, while something keeps receive timestamps on.
        super::stamps::keep_arrival_stamps();
        let netlink =
            Socket::new(NETLINK_NETFILTER).map_err(|e| system("socket(AF_NETLINK)", e))?;
        netlink
            .set_non_blocking(true)
            .map_err(|e| system("socket(AF_NETLINK)", e))?;
        let mut socket = NflogSocket {
            socket: netlink,
            group,
            buffer: vec![0; 1 << 17],
        };
        // A larger receive buffer absorbs bursts (the default drops under load).
        let size: libc::c_int = 8 << 20;
        super::bpf::set_socket_option(
            socket.socket.as_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &size,
        )
        .or_else(|_| {
            super::bpf::set_socket_option(
                socket.socket.as_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &size,
            )
        })
        .map_err(|e| system("SO_RCVBUF", e))?;
        socket
            .configure(&attribute(CFG_CMD, &[CFG_CMD_BIND]))
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EPERM) => OpenError::NoPermission {
                    interface: name.clone(),
                },
                Some(libc::EBUSY) => system(
                    "binding the group (another program, such as tcpdump, reads it)",
                    e,
                ),
                _ => system("binding the group", e),
            })?;
        let mut mode = keep.to_be_bytes().to_vec();
        mode.extend_from_slice(&[COPY_PACKET, 0]);
        // One packet per message: the kernel otherwise batches up to 100 packets or 1 s
        // (NFULNL_QTHRESH_DEFAULT, NFULNL_TIMEOUT_DEFAULT), and the packets that carry no
        // timestamp of their own would be stamped that late.
        let mut config = attribute(CFG_MODE, &mode);
        config.extend(attribute(CFG_QTHRESH, &1u32.to_be_bytes()));
        socket
            .configure(&config)
            .map_err(|e| system("setting the copy mode", e))?;
        Ok(socket)
    }

    /// The name tcpdump gives it, `nflog:GROUP`.
    pub fn name(&self) -> String {
        format!("nflog:{}", self.group)
    }

    /// The socket, to wait on with `poll`.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }

    /// Sends one configuration message for the group and waits for the kernel's answer.
    fn configure(&mut self, attributes: &[u8]) -> io::Result<()> {
        let mut message = header(
            SUBSYS_ULOG | MSG_CONFIG,
            NLM_F_REQUEST | NLM_F_ACK,
            attributes.len(),
        );
        message.extend_from_slice(&[libc::AF_UNSPEC as u8, 0]);
        message.extend_from_slice(&self.group.to_be_bytes());
        message.extend_from_slice(attributes);
        // To the kernel: netlink port 0.
        self.socket.send_to(&message, &NetlinkAddr::new(0, 0), 0)?;
        // The answer comes at once; wait for it a bounded time.
        for _ in 0..10 {
            let mut ready = [PollFd::new(self.socket.as_fd(), PollFlags::POLLIN)];
            if poll(&mut ready, PollTimeout::from(100u8)).unwrap_or(0) <= 0 {
                continue;
            }
            let n = self.receive()?;
            let mut at = 0;
            while let Some((kind, body, next)) = message_at(&self.buffer[..n], at) {
                if kind == NLMSG_ERROR {
                    let code = body
                        .get(..4)
                        .map_or(0, |b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
                    return if code == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::from_raw_os_error(-code))
                    };
                }
                at = next;
            }
        }
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "the kernel did not answer the netfilter log configuration",
        ))
    }

    /// One datagram into the buffer; its length.
    fn receive(&mut self) -> io::Result<usize> {
        self.socket.recv(&mut &mut self.buffer[..], 0)
    }

    /// Hands every packet waiting on the socket to `on_packet`; returns how many there were.
    /// An overrun socket (ENOBUFS: the kernel dropped messages) is counted in `dropped`.
    pub fn drain(
        &mut self,
        dropped: &mut u64,
        mut on_packet: impl FnMut(&LoggedPacket<'_>),
    ) -> io::Result<u64> {
        let mut packets = 0;
        loop {
            let n = match self.receive() {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(packets),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    *dropped += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let now = super::live::now_ns();
            let mut at = 0;
            while let Some((kind, body, next)) = message_at(&self.buffer[..n], at) {
                at = next;
                if kind != SUBSYS_ULOG | MSG_PACKET || body.len() < 4 {
                    continue;
                }
                let protocol = match i32::from(body[0]) {
                    libc::AF_INET => libc::ETH_P_IP as u16,
                    libc::AF_INET6 => libc::ETH_P_IPV6 as u16,
                    _ => continue,
                };
                let (mut data, mut ts_ns) = (None, now);
                for (kind, value) in attributes(&body[4..]) {
                    match kind {
                        ATTR_PAYLOAD => data = Some(value),
                        ATTR_TIMESTAMP if value.len() >= 16 => {
                            let be = |b: &[u8]| u64::from_be_bytes(b.try_into().unwrap_or([0; 8]));
                            let (sec, usec) = (be(&value[..8]), be(&value[8..16]));
                            let logged = sec
                                .saturating_mul(1_000_000_000)
                                .saturating_add(usec * 1000);
                            if now.abs_diff(logged) < 1_000_000_000 {
                                ts_ns = logged;
                            }
                        }
                        _ => {}
                    }
                }
                if let Some(data) = data {
                    packets += 1;
                    on_packet(&LoggedPacket {
                        data,
                        protocol,
                        ts_ns,
                    });
                }
            }
        }
    }
}

/// A netlink message header for a body of `body_len` bytes after the 4-byte nfgenmsg.
fn header(kind: u16, flags: u16, body_len: usize) -> Vec<u8> {
    let len = (16 + 4 + body_len) as u32;
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&[0; 8]); // sequence number, port id
    out
}

/// One netlink attribute, padded to 4 bytes.
fn attribute(kind: u16, value: &[u8]) -> Vec<u8> {
    let len = 4 + value.len();
    let mut out = Vec::with_capacity(len.div_ceil(4) * 4);
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(len.div_ceil(4) * 4, 0);
    out
}

/// The message at `at` in a datagram: its type, its body, where the next one starts.
fn message_at(datagram: &[u8], at: usize) -> Option<(u16, &[u8], usize)> {
    let h = datagram.get(at..at + 16)?;
    let len = u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let kind = u16::from_ne_bytes([h[4], h[5]]);
    if len < 16 {
        return None;
    }
    let body = datagram.get(at + 16..at + len)?;
    Some((kind, body, at + len.div_ceil(4) * 4))
}

/// The attributes of a message body (after its nfgenmsg).
fn attributes(mut rest: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let h = rest.get(..4)?;
        let len = usize::from(u16::from_ne_bytes([h[0], h[1]]));
        let kind = u16::from_ne_bytes([h[2], h[3]]) & ATTR_TYPE_MASK;
        if len < 4 {
            return None;
        }
        let value = rest.get(4..len)?;
        rest = rest.get(len.div_ceil(4) * 4..).unwrap_or_default();
        Some((kind, value))
    })
}
