//! The one TCP segment type every source produces (capture files, live capture, the lab's own
//! capture) and the flow table consumes.
//!
//! Lengths come from the IP headers, never from the captured bytes: a snap-length-truncated
//! packet still tells how much payload it carried. Captures taken on the sending host show
//! TSO/GSO super-packets, so `payload_len` may exceed the MSS.

use std::net::IpAddr;

use crate::units::{SeqNumber, Timestamp};
mod arcnet;
mod decap;
mod ethernet;
mod gre;
mod ip_payload;
mod ipsec;
mod juniper;
pub mod link;
mod llc;
mod mpls;
mod nflog;
pub mod numbers;
mod ppp;
mod udp_overlays;
mod wireless;
use numbers::IPPROTO_TCP;

pub use decap::{Decap, DecapConfig, Outer, OuterByFlow, TunnelKind};
pub use ethernet::ethernet_payload;

/// TCP header flag bits, as in the header's 13th byte (RFC 9293 §3.1, RFC 3168 for ECE/CWR).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced.
    pub const CWR: u8 = 0x80;
}

/// One TCP segment as seen on the wire, decoded from any link type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Capture time.
    pub ts_ns: Timestamp,
    /// 1-based number of the packet in its capture, for warnings that point at it.
    pub packet_number: u64,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number of the first payload byte (of the SYN when SYN is set).
    pub seq: SeqNumber,
    /// Acknowledgment number (meaningful when `flags::ACK` is set).
    pub ack: SeqNumber,
    /// Header flags, bits of [`flags`].
    pub flags: u8,
    /// Receive window as carried in the header, before window scaling (RFC 7323 §2.3).
    pub window: u16,
    /// Payload bytes, from the IP total/payload length minus the IP and TCP headers.
    pub payload_len: u32,
    /// MSS option (SYN only).
    pub mss: Option<u16>,
    /// Window-scale shift option (SYN only).
    pub window_scale: Option<u8>,
    /// Timestamps option (TSval, TSecr), RFC 7323 §3.
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks are present (RFC 2018): the receiver saw a hole.
    pub has_sack: bool,
    /// The first SACK block (left edge, right edge), RFC 2018 §3: a D-SACK when it lies at or
    /// below the acknowledgment number (RFC 2883 §4).
    pub first_sack: Option<(SeqNumber, SeqNumber)>,
    /// IPv4 TTL or IPv6 hop limit as captured; 0 when not known (a tunnel's inner segment).
    pub ttl: u8,
    /// IPv4 identification (RFC 791); 0 for IPv6 and when not known. A sender numbers its
    /// packets upward (Linux per socket, `ip_select_ident_segs`; Windows per host): a resend
    /// is a new packet with a newer number, a copy keeps the original's.
    pub ip_id: u16,
}

impl Segment {
    /// True when any of `bits` is set.
    pub fn has(&self, bits: u8) -> bool {
        self.flags & bits != 0
    }

    /// A pure ACK: no payload, no SYN, FIN or RST.
    pub fn is_pure_ack(&self) -> bool {
        self.payload_len == 0
            && self.has(flags::ACK)
            && !self.has(flags::SYN | flags::FIN | flags::RST)
    }

    /// The D-SACK block (RFC 2883 §4: a first SACK block at or below the cumulative ACK):
    /// bytes the receiver got twice.
    pub fn dsack(&self) -> Option<(SeqNumber, SeqNumber)> {
        self.first_sack
            .filter(|&(_, right)| self.has(flags::ACK) && right <= self.ack)
    }

    /// Sequence space the segment occupies: payload plus one for SYN and one for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload_len + u32::from(self.has(flags::SYN)) + u32::from(self.has(flags::FIN))
    }

    /// A placeholder for a segment about to be decoded in place (see [`decode_ip`]).
    pub const UNSET: Segment = Segment {
        ts_ns: Timestamp::from_nanos(0),
        packet_number: 0,
        src: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        dst: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        src_port: 0,
        dst_port: 0,
        seq: SeqNumber(0),
        ack: SeqNumber(0),
        flags: 0,
        window: 0,
        payload_len: 0,
        mss: None,
        window_scale: None,
        timestamps: None,
        has_sack: false,
        first_sack: None,
        ttl: 0,
        ip_id: 0,
    };
}

/// What one network-layer packet turned out to be. `T` is what a TCP segment yields: the
/// [`Segment`], or `()` from the decoders that write it into the caller's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded<T = Segment> {
    /// A TCP segment.
    Tcp(T),
    /// A well-formed packet of another protocol (UDP, ICMP, ARP...), skipped silently.
    NotTcp,
    /// A non-first IP fragment: it carries no TCP header, and fragments are not reassembled.
    Fragment,
    /// A packet that cannot be read as TCP, with the reason.
    Undecodable(&'static str),
    /// A payload that cannot be seen into, named: encrypted (IPsec ESP, protected 802.11) or
    /// compressed (IPComp).
    Opaque(&'static str),
    /// An encapsulation tcpstall does not read, named.
    Unsupported(&'static str),
}

/// Smallest TCP header, without options (RFC 9293 §3.1).
const TCP_MIN_HEADER: usize = 20;

/// Where a packet was captured, passed along so a decoded segment can point back to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketMeta {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// 1-based number of the packet in its capture.
    pub packet_number: u64,
}

/// Decodes an IPv4 or IPv6 packet (chosen by the version nibble) down to its TCP header.
///
/// `packet` holds the captured bytes from the IP header on, possibly cut short by the snap
/// length. `wire_len` is how long the IP packet was on the wire (the frame's original length
/// minus the link header): it stands in for the IP length field only when that field is zero,
/// which Linux writes for TSO/GSO super-packets above 64 KiB and IPv6 jumbograms.
///
/// A TCP segment is written into `out` (left as it was otherwise): decoding in place lets a
/// reader fill its output buffer without building the segment elsewhere and copying it.
///
/// Tunnels are followed through `decap` (see [`tunnel`]): the segment is then the inner one,
/// and `decap` holds the outer endpoints until [`Decap::take_outer`].
pub fn decode_ip(
    packet: &[u8],
    wire_len: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    match packet.first().map(|b| b >> 4) {
        Some(4) => decode_ipv4(packet, wire_len, meta, out, decap),
        Some(6) => decode_ipv6(packet, wire_len, meta, out, decap),
        Some(_) => Decoded::Undecodable("IP version is neither 4 nor 6"),
        None => Decoded::Undecodable("no IP header captured"),
    }
}

/// The largest segment a sender's offload hands the capture in one piece: the kernel's
/// `GSO_MAX_SIZE` (512 KiB, BIG TCP), which writes an IPv4 total length of 0 for it
/// (`iph_set_totlen`).
const OFFLOAD_MAX: u32 = 512 << 10;

/// Why an IPv4 packet with total length 0 is not read.
const OFFLOAD_TOO_LONG: &str =
    "IPv4 total length 0 (an offloaded segment) with a wire length past 512 KiB";

/// The length of an IPv4 packet whose total length field is 0 (segmentation offload, BIG
/// TCP): its wire length, when an offloaded segment can be that long.
fn offloaded_len(wire_len: u32) -> Option<u32> {
    (wire_len <= OFFLOAD_MAX).then_some(wire_len)
}

/// Decodes an IPv4 packet (RFC 791 §3.1) into `out`, as [`decode_ip`].
#[inline(always)]
pub fn decode_ipv4(
    packet: &[u8],
    wire_len: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    if packet.len() < 20 {
        return Decoded::Undecodable("IPv4 header cut short by the snap length");
    }
    if packet[0] >> 4 != 4 {
        return Decoded::Undecodable("link header says IPv4 but the version field is not 4");
    }
    let header_len = usize::from(packet[0] & 0x0f) * 4;
    if header_len < 20 {
        return Decoded::Undecodable("IPv4 header length below 20 bytes");
    }
    if packet[9] != IPPROTO_TCP {
        // Out of line: a tunnel, or another protocol.
        return decap.ipv4_payload(packet, wire_len, meta, out);
    }
    // Fragment offset in 8-byte units; only the first fragment holds the TCP header.
    if u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff != 0 {
        return Decoded::Fragment;
    }
    // Beyond the frame a capture cut short, the header is trusted (the next segment's
    // sequence number agrees); beyond an encapsulation's own length, it counts padding.
    let length_exact = std::mem::take(&mut decap.length_exact);
    let total_len = match u16::from_be_bytes([packet[2], packet[3]]) {
        0 => match offloaded_len(wire_len) {
            Some(len) => len,
            None => return Decoded::Undecodable(OFFLOAD_TOO_LONG),
        },
        n if length_exact => u32::from(n).min(wire_len),
        n => u32::from(n),
    };
    if (total_len as usize) < header_len {
        return Decoded::Undecodable("IPv4 total length smaller than its header");
    }
    let src = std::net::Ipv4Addr::new(packet[12], packet[13], packet[14], packet[15]);
    let dst = std::net::Ipv4Addr::new(packet[16], packet[17], packet[18], packet[19]);
    let Some(tcp) = packet.get(header_len..) else {
        return Decoded::Undecodable("IPv4 options cut short by the snap length");
    };
    decode_tcp(
        tcp,
        total_len - header_len as u32,
        IpAddr::V4(src),
        IpAddr::V4(dst),
        meta,
        (packet[8], u16::from_be_bytes([packet[4], packet[5]])),
        out,
    )
}

/// Decodes an IPv6 packet (RFC 8200 §3), walking its extension headers (RFC 8200 §4) to TCP,
/// into `out`, as [`decode_ip`].
pub fn decode_ipv6(
    packet: &[u8],
    wire_len: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    const FIXED_HEADER: usize = 40;
    if packet.len() < FIXED_HEADER {
        return Decoded::Undecodable("IPv6 header cut short by the snap length");
    }
    if packet[0] >> 4 != 6 {
        return Decoded::Undecodable("link header says IPv6 but the version field is not 6");
    }
    // Payload length excludes the fixed header; zero means a jumbogram (RFC 2675) or a
    // GSO super-packet, whose size only the frame length tells.
    // Within an encapsulation's own length, as for IPv4's total length.
    let length_exact = std::mem::take(&mut decap.length_exact);
    let mut remaining = match u16::from_be_bytes([packet[4], packet[5]]) {
        0 => wire_len.saturating_sub(FIXED_HEADER as u32),
        n if length_exact => u32::from(n).min(wire_len.saturating_sub(FIXED_HEADER as u32)),
        n => u32::from(n),
    };
    let mut next_header = packet[6];
    let mut offset = FIXED_HEADER;
    loop {
        let ext_len = match next_header {
            IPPROTO_TCP => break,
            // Hop-by-hop, routing, destination options, mobility, HIP, shim6: length in 8-byte
            // units not counting the first 8 (RFC 8200 §4.3-4.6).
            0 | 43 | 60 | 135 | 139 | 140 => match packet.get(offset + 1) {
                Some(&units) => (usize::from(units) + 1) * 8,
                None => return Decoded::Undecodable("IPv6 extension header cut short"),
            },
            // Fragment header (RFC 8200 §4.5): fixed 8 bytes; a non-zero offset means a
            // non-first fragment without the TCP header.
            44 => match packet.get(offset + 2..offset + 4) {
                Some(b) if u16::from_be_bytes([b[0], b[1]]) & 0xfff8 != 0 => {
                    return Decoded::Fragment
                }
                Some(_) => 8,
                None => return Decoded::Undecodable("IPv6 fragment header cut short"),
            },
            // Authentication header (RFC 4302 §2.2): length in 4-byte units minus 2.
            51 => match packet.get(offset + 1) {
                Some(&units) => (usize::from(units) + 2) * 4,
                None => return Decoded::Undecodable("IPv6 authentication header cut short"),
            },
            other => return ipv6_payload(packet, offset, other, remaining, meta, out, decap),
        };
        let Some(&following) = packet.get(offset) else {
            return Decoded::Undecodable("IPv6 extension header cut short");
        };
        if ext_len as u32 > remaining {
            return Decoded::Undecodable("IPv6 extension headers longer than the payload");
        }
        next_header = following;
        offset += ext_len;
        remaining -= ext_len as u32;
    }
    let Some(tcp) = packet.get(offset..) else {
        return Decoded::Undecodable("IPv6 extension header cut short");
    };
    let mut src = [0u8; 16];
    let mut dst = [0u8; 16];
    src.copy_from_slice(&packet[8..24]);
    dst.copy_from_slice(&packet[24..40]);
    decode_tcp(
        tcp,
        remaining,
        IpAddr::from(src),
        IpAddr::from(dst),
        meta,
        (packet[7], 0),
        out,
    )
}

/// The payload of an IPv6 packet from `offset` on, of protocol `next_header` (not TCP): a
/// tunnel, or [`Decoded::NotTcp`].
#[cold]
#[inline(never)]
fn ipv6_payload(
    packet: &[u8],
    offset: usize,
    next_header: u8,
    remaining: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    let (Some(payload), Ok(src), Ok(dst)) = (
        packet.get(offset..),
        <[u8; 16]>::try_from(&packet[8..24]),
        <[u8; 16]>::try_from(&packet[24..40]),
    ) else {
        return Decoded::NotTcp;
    };
    let (src, dst) = (IpAddr::from(src), IpAddr::from(dst));
    decap.ip_payload(next_header, payload, remaining, src, dst, meta, out)
}

/// Decodes a TCP header (RFC 9293 §3.1). `segment_len` is the TCP header plus payload length
/// given by the IP header; `tcp` holds the captured bytes from the TCP header on. The segment
/// is written into `out`, as [`decode_ip`]. `(ttl, ip_id)` are the IP header's TTL or hop limit
/// and its IPv4 identification (each 0 when not known; the identification always for IPv6).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn decode_tcp(
    tcp: &[u8],
    segment_len: u32,
    src: IpAddr,
    dst: IpAddr,
    meta: PacketMeta,
    (ttl, ip_id): (u8, u16),
    out: &mut Segment,
) -> Decoded<()> {
    if tcp.len() < TCP_MIN_HEADER {
        return Decoded::Undecodable("TCP header cut short by the snap length");
    }
    let header_len = usize::from(tcp[12] >> 4) * 4;
    if header_len < TCP_MIN_HEADER {
        return Decoded::Undecodable("TCP data offset below 5 words");
    }
    if segment_len < header_len as u32 {
        return Decoded::Undecodable("IP length smaller than the TCP header");
    }
    // Options cut by the snap length are read as far as they were captured: a partial
    // option fails the length check in `parse_tcp_options` and ends the walk.
    let captured_header = &tcp[..header_len.min(tcp.len())];
    let options = parse_tcp_options(&captured_header[TCP_MIN_HEADER..]);
    // Written whole from values in hand: filling the options into a segment in memory and
    // then copying it out stalled the reader (a load overlapping recent narrower stores
    // cannot be forwarded from them).
    *out = Segment {
        ts_ns: Timestamp::from_nanos(meta.ts_ns),
        packet_number: meta.packet_number,
        src,
        dst,
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        seq: SeqNumber(u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])),
        ack: SeqNumber(u32::from_be_bytes([tcp[8], tcp[9], tcp[10], tcp[11]])),
        flags: tcp[13],
        window: u16::from_be_bytes([tcp[14], tcp[15]]),
        payload_len: segment_len - header_len as u32,
        mss: options.mss,
        window_scale: options.window_scale,
        timestamps: options.timestamps,
        has_sack: options.first_sack.is_some(),
        first_sack: options.first_sack,
        ttl,
        ip_id,
    };
    Decoded::Tcp(())
}

/// The TCP options the flow tracker uses.
#[derive(Debug, Clone, Copy, Default)]
struct TcpOptions {
    mss: Option<u16>,
    window_scale: Option<u8>,
    timestamps: Option<(u32, u32)>,
    first_sack: Option<(SeqNumber, SeqNumber)>,
}

/// Reads the TCP options the flow tracker uses; stops at the first malformed option, as
/// Linux's `tcp_parse_options` does.
#[inline(always)]
fn parse_tcp_options(mut options: &[u8]) -> TcpOptions {
    const EOL: u8 = 0;
    const NOP: u8 = 1;
    const MSS: u8 = 2; // RFC 9293 §3.2
    const WINDOW_SCALE: u8 = 3; // RFC 7323 §2.2
    const SACK: u8 = 5; // RFC 2018 §3
    const TIMESTAMPS: u8 = 8; // RFC 7323 §3.2
    let mut found = TcpOptions::default();
    while let Some((&kind, rest)) = options.split_first() {
        match kind {
            EOL => break,
            NOP => {
                options = rest;
                continue;
            }
            _ => {}
        }
        let Some(&len) = rest.first() else { break };
        let len = usize::from(len);
        if len < 2 || len > options.len() {
            break;
        }
        let body = &options[2..len];
        match (kind, body.len()) {
            (MSS, 2) => found.mss = Some(u16::from_be_bytes([body[0], body[1]])),
            (WINDOW_SCALE, 1) => found.window_scale = Some(body[0]),
            (SACK, n) if n >= 8 => {
                let edge = |i: usize| {
                    SeqNumber(u32::from_be_bytes([
                        body[i],
                        body[i + 1],
                        body[i + 2],
                        body[i + 3],
                    ]))
                };
                found.first_sack = Some((edge(0), edge(4)));
            }
            (TIMESTAMPS, 8) => {
                found.timestamps = Some((
                    u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                    u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                ))
            }
            _ => {}
        }
        options = &options[len..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header (20 B, 10.0.0.1 to 10.0.0.2) with the given total length and protocol.
    pub(super) fn ipv4_header(total_len: u16, protocol: u8) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total_len.to_be_bytes());
        p[8] = 64;
        p[9] = protocol;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p
    }

    /// An IPv4 TCP header (20 B IP, 20 B TCP, ACK) with the given total length field.
    fn ipv4_tcp(total_len: u16) -> Vec<u8> {
        let mut p = ipv4_header(total_len, IPPROTO_TCP);
        p.resize(40, 0);
        p[20..22].copy_from_slice(&40000u16.to_be_bytes());
        p[22..24].copy_from_slice(&80u16.to_be_bytes());
        p[32] = 5 << 4;
        p[33] = 0x10;
        p
    }

    /// `packet` decoded: the TCP payload's length, or why not (for the headers' tests).
    pub(super) fn decode(packet: &[u8], wire_len: u32) -> Decoded<u32> {
        let mut out = Segment::UNSET;
        let meta = PacketMeta {
            ts_ns: 1,
            packet_number: 1,
        };
        match decode_ip(packet, wire_len, meta, &mut out, &mut Decap::default()) {
            Decoded::Tcp(()) => Decoded::Tcp(out.payload_len),
            Decoded::NotTcp => Decoded::NotTcp,
            Decoded::Fragment => Decoded::Fragment,
            Decoded::Undecodable(why) => Decoded::Undecodable(why),
            Decoded::Opaque(what) => Decoded::Opaque(what),
            Decoded::Unsupported(what) => Decoded::Unsupported(what),
        }
    }

    /// A total length of 0 is an offloaded segment as long as its wire length, up to the
    /// kernel's largest; past it the record's length is not believed.
    #[test]
    fn an_offloaded_segment_takes_its_wire_length_up_to_gso_max_size() {
        let packet = ipv4_tcp(0);
        assert_eq!(decode(&packet, 100_040), Decoded::Tcp(100_000));
        assert_eq!(decode(&packet, OFFLOAD_MAX), Decoded::Tcp(OFFLOAD_MAX - 40));
        assert_eq!(
            decode(&packet, u32::MAX),
            Decoded::Undecodable(OFFLOAD_TOO_LONG)
        );
        assert_eq!(decode(&ipv4_tcp(1040), u32::MAX), Decoded::Tcp(1000));
    }
}
