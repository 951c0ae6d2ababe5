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
    /// Bytes of options in each of the peer's segments, which smoltcp does not subtract from
    /// the MSS (see [`PolicyTun::new`]).
    option_bytes: u16,
    /// Packets the TUN device refused (lost, as on a wire).
    pub dropped: u64,
}

impl PolicyTun {
    /// Wraps an open TUN device (raw IP, no packet-information header). smoltcp 0.12 cuts
    /// segments at the other end's MSS without subtracting the timestamp option (`dispatch` in
    /// socket/tcp.rs), then drops the 1512-byte packet as too large for the 1500-byte MTU:
    /// with `timestamps`, the MSS option of each SYN it receives is lowered by the option's
    /// 12 bytes on the way in (MSS clamping, as a router does), so that a full segment carries
    /// 1448 B as Linux's (`tcp_current_mss`). The wire and the other end see the SYN unchanged.
    pub fn new(tun: File, policy: AckPolicy, timestamps: bool) -> io::Result<PolicyTun> {
        let option_bytes = if timestamps {
            crate::tcp_rules::TIMESTAMP_OPTION_LEN as u16
        } else {
            0
        };
        let flags = nix::fcntl::fcntl(tun.as_fd(), nix::fcntl::FcntlArg::F_GETFL)?;
        let flags = nix::fcntl::OFlag::from_bits_truncate(flags) | nix::fcntl::OFlag::O_NONBLOCK;
        nix::fcntl::fcntl(tun.as_fd(), nix::fcntl::FcntlArg::F_SETFL(flags))?;
        Ok(PolicyTun {
            tun,
            policy,
            option_bytes,
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

/// Lowers the MSS option of an IPv4 TCP SYN by `by` bytes, updating the checksum
/// incrementally (RFC 1624); any other packet is left alone.
fn clamp_syn_mss(packet: &mut [u8], by: u16) {
    const TCP: u8 = 6;
    const SYN: u8 = 0x02;
    let Some(&first) = packet.first() else { return };
    let ip_len = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || packet.get(9) != Some(&TCP) || packet.len() < ip_len + 20 {
        return;
    }
    let tcp = &mut packet[ip_len..];
    let header_len = usize::from(tcp[12] >> 4) * 4;
    if tcp[13] & SYN == 0 || header_len < 20 || tcp.len() < header_len {
        return;
    }
    let mut at = 20;
    while at < header_len {
        match tcp[at] {
            0 => return,
            1 => at += 1,
            kind => {
                let len = usize::from(*tcp.get(at + 1).unwrap_or(&0));
                if len < 2 || at + len > header_len {
                    return;
                }
                if kind == 2 && len == 4 {
                    let old = u16::from_be_bytes([tcp[at + 2], tcp[at + 3]]);
                    let new = old.saturating_sub(by);
                    tcp[at + 2..at + 4].copy_from_slice(&new.to_be_bytes());
                    let check = u16::from_be_bytes([tcp[16], tcp[17]]);
                    // HC' = ~(~HC + ~m + m')
                    let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
                    while sum > 0xffff {
                        sum = (sum & 0xffff) + (sum >> 16);
                    }
                    tcp[16..18].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                    return;
                }
                at += len;
            }
        }
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
        if self.option_bytes > 0 {
            clamp_syn_mss(&mut buffer, self.option_bytes);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::{PacketBuilder, TcpOptionElement};

    #[test]
    fn a_syns_mss_is_clamped_with_a_valid_checksum() {
        let builder = PacketBuilder::ipv4([169, 254, 77, 2], [169, 254, 77, 1], 64)
            .tcp(8000, 49152, 7, 65535)
            .syn()
            .options(&[TcpOptionElement::MaximumSegmentSize(1460)])
            .expect("options fit");
        let mut packet = Vec::new();
        builder.write(&mut packet, &[]).expect("packet");
        clamp_syn_mss(&mut packet, 12);
        let sliced = SlicedPacket::from_ip(&packet).expect("parses");
        let Some(TransportSlice::Tcp(tcp)) = sliced.transport else {
            panic!("not TCP")
        };
        let header = tcp.to_header();
        assert!(header
            .options
            .elements_iter()
            .any(|o| matches!(o, Ok(TcpOptionElement::MaximumSegmentSize(1448)))));
        let Some(etherparse::NetSlice::Ipv4(ip)) = sliced.net else {
            panic!("not IPv4")
        };
        let expected = header
            .calc_checksum_ipv4(&ip.header().to_header(), tcp.payload())
            .expect("checksum");
        assert_eq!(header.checksum, expected);
    }
}
