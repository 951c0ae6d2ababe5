//! The peer's network device: a TUN device in the peer's namespace that smoltcp owns (the
//! kernel has no address on it), with the profile's [`AckPolicy`] between the socket and the
//! wire. smoltcp's own `TunTapInterface` panics on an I/O error; this one drops the packet, as
//! a wire would, and counts it.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::time::Instant;

use etherparse::{SlicedPacket, TransportSlice};
use smoltcp::phy::{self, Device, DeviceCapabilities, Medium};

use super::ack_policy::{AckPolicy, FlowKey, SegmentShape, Verdict};

/// MTU of the peer's TUN device: the lab path's Ethernet-sized one.
pub const PEER_MTU: usize = 1500;

/// A TUN device with the ACK policy on its way out.
pub struct PolicyTun {
    tun: File,
    policy: AckPolicy,
    /// Packets the TUN device refused (lost, as on a wire).
    pub dropped: u64,
}

impl PolicyTun {
    /// Wraps an open TUN device (raw IP, no packet-information header).
    pub fn new(tun: File, policy: AckPolicy) -> io::Result<PolicyTun> {
        let flags = nix::fcntl::fcntl(tun.as_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(tun.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
        Ok(PolicyTun {
            tun,
            policy,
            dropped: 0,
        })
    }

    /// The ACK policy, for its timers and counters.
    pub fn policy(&self) -> &AckPolicy {
        &self.policy
    }

    /// Sends the held ACKs whose timer fired by `now`.
    pub fn send_due(&mut self, now: Instant) {
        for packet in self.policy.take_due(now) {
            send(&mut self.tun, &packet, &mut self.dropped);
        }
    }

    /// The descriptor, to poll.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.tun.as_fd()
    }
}

fn send(tun: &mut File, packet: &[u8], dropped: &mut u64) {
    if tun.write(packet).is_err() {
        *dropped += 1;
    }
}

/// The TCP flow and shape of an IPv4 packet; `outgoing` says which port is the peer's.
pub fn tcp_shape(packet: &[u8], outgoing: bool) -> Option<(FlowKey, SegmentShape)> {
    let Ok(SlicedPacket {
        transport: Some(TransportSlice::Tcp(tcp)),
        ..
    }) = SlicedPacket::from_ip(packet)
    else {
        return None;
    };
    let flow = if outgoing {
        (tcp.source_port(), tcp.destination_port())
    } else {
        (tcp.destination_port(), tcp.source_port())
    };
    Some((
        flow,
        SegmentShape {
            payload: tcp.payload().len(),
            control: tcp.syn() || tcp.fin() || tcp.rst(),
            ack: tcp.ack(),
        },
    ))
}

impl Device for PolicyTun {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(
        &mut self,
        _timestamp: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let mut buffer = vec![0; PEER_MTU];
        let len = self.tun.read(&mut buffer).ok()?;
        buffer.truncate(len);
        if let Some((flow, shape)) = tcp_shape(&buffer, false) {
            self.policy.on_received(flow, shape, Instant::now());
        }
        Some((RxToken { buffer }, TxToken { device: self }))
    }

    fn transmit(&mut self, _timestamp: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        Some(TxToken { device: self })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ip;
        caps.max_transmission_unit = PEER_MTU;
        caps
    }
}

/// A packet received from the TUN device.
pub struct RxToken {
    buffer: Vec<u8>,
}

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(&self.buffer)
    }
}

/// A packet on its way out, through the ACK policy.
pub struct TxToken<'a> {
    device: &'a mut PolicyTun,
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buffer = vec![0; len];
        let result = f(&mut buffer);
        let verdict = match tcp_shape(&buffer, true) {
            Some((flow, shape)) => self
                .device
                .policy
                .on_send(flow, shape, &buffer, Instant::now()),
            None => Verdict::Send,
        };
        if verdict == Verdict::Send {
            send(&mut self.device.tun, &buffer, &mut self.device.dropped);
        }
        result
    }
}
