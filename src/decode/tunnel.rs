//! Decapsulation: the tunnels and overlays whose inner packets are the connections to analyse.
//!
//! VXLAN and Geneve (the overlays of container and cloud hosts), GRE (with its key, sequence
//! and checksum fields, ERSPAN I/II/III mirroring and WCCP redirection), IP-in-IP and IPv6
//! in IPv4 or IPv6, MPLS label stacks and PPPoE sessions. A TCP segment found inside is the
//! inner connection's; the outermost tunnel's endpoints are kept apart as [`Outer`] context,
//! never part of the segment, so the flow key is the inner 4-tuple.
//!
//! Written here rather than through etherparse: etherparse 0.21 slices Ethernet, VLAN, MACsec,
//! IP (IP-in-IP only as one more IP header) and the transports, but knows none of VXLAN,
//! Geneve, GRE, ERSPAN, MPLS or PPPoE, and decoding through it would also give up this
//! decoder's in-place writing of the segment. Every header here is a few fixed fields.

use std::net::IpAddr;

use super::{decode_ip, decode_ipv4, decode_ipv6, decode_tcp, Decoded, PacketMeta, Segment};

/// Tunnels nested deeper than this are refused: a crafted capture (GRE in GRE in GRE...)
/// must not make the decoder recurse without end. Real stacks are 2 or 3 deep.
pub const MAX_NESTING: u8 = 8;

use super::numbers::*;
pub use super::numbers::{GENEVE_PORT, GTP_U_PORT, MPLS_UDP_PORT, VXLAN_GPE_PORT, VXLAN_PORT};

/// The kind of tunnel a segment was carried in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN (RFC 7348) or VXLAN-GPE.
    Vxlan,
    /// Geneve (RFC 8926).
    Geneve,
    /// GRE (RFC 2784, RFC 2890), PPTP's enhanced GRE, ERSPAN and WCCP included.
    Gre,
    /// IPv4 or IPv6 directly in IPv4 or IPv6 (RFC 2003, RFC 4213, RFC 2473).
    IpInIp,
    /// MPLS in IP or UDP (RFC 4023, RFC 7510).
    Mpls,
    /// GTP-U (3GPP TS 29.281).
    GtpU,
    /// AYIYA, "anything in anything" over UDP (IPv6 tunnel brokers).
    Ayiya,
    /// CAPWAP data, from a wireless access point to its controller (RFC 5415).
    Capwap,
}

impl TunnelKind {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Geneve => "geneve",
            TunnelKind::Gre => "gre",
            TunnelKind::IpInIp => "ipip",
            TunnelKind::Mpls => "mpls",
            TunnelKind::GtpU => "gtpu",
            TunnelKind::Ayiya => "ayiya",
            TunnelKind::Capwap => "capwap",
        }
    }
}

/// The outermost IP tunnel a segment arrived in: context for a flow, never part of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outer {
    /// What the tunnel is.
    pub kind: TunnelKind,
    /// The tunnel's source endpoint (outer IP source).
    pub src: IpAddr,
    /// The tunnel's destination endpoint (outer IP destination).
    pub dst: IpAddr,
}

/// Which UDP ports carry overlays, beyond the IANA ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecapConfig {
    /// More UDP ports read as VXLAN (e.g. 8472, the Linux kernel's and flannel's old default).
    pub vxlan_ports: Vec<u16>,
    /// More UDP ports read as Geneve.
    pub geneve_ports: Vec<u16>,
}

/// The decapsulation state of one reader: which ports carry what, how deep the packet being
/// decoded is nested, and the outer endpoints found in it.
#[derive(Debug, Clone)]
pub struct Decap {
    vxlan_ports: Vec<u16>,
    geneve_ports: Vec<u16>,
    depth: u8,
    outer: Option<Outer>,
}

impl Default for Decap {
    fn default() -> Self {
        Decap::new(&DecapConfig::default())
    }
}

/// What a UDP port pair is decoded as.
enum UdpOverlay {
    Vxlan,
    VxlanGpe,
    Geneve,
    Mpls,
    GtpU,
    Gre,
    Ayiya,
    Capwap,
}

impl Decap {
    /// A decapsulator reading the IANA ports and those of `config`.
    pub fn new(config: &DecapConfig) -> Decap {
        let mut vxlan_ports = vec![VXLAN_PORT];
        vxlan_ports.extend(&config.vxlan_ports);
        let mut geneve_ports = vec![GENEVE_PORT];
        geneve_ports.extend(&config.geneve_ports);
        Decap {
            vxlan_ports,
            geneve_ports,
            depth: 0,
            outer: None,
        }
    }

    /// The outermost tunnel of the packet just decoded, cleared for the next packet.
    #[inline(always)]
    pub fn take_outer(&mut self) -> Option<Outer> {
        if self.outer.is_some() {
            self.outer.take()
        } else {
            None
        }
    }

    /// Runs `inner` one level deeper, refusing past [`MAX_NESTING`]; records the outer
    /// endpoints when this is the outermost IP tunnel.
    fn nested(
        &mut self,
        outer: Option<Outer>,
        inner: impl FnOnce(&mut Decap) -> Decoded<()>,
    ) -> Decoded<()> {
        if self.depth >= MAX_NESTING {
            return Decoded::Undecodable("tunnels nested more than 8 deep");
        }
        if self.outer.is_none() {
            self.outer = outer;
        }
        self.depth += 1;
        let decoded = inner(self);
        self.depth -= 1;
        decoded
    }

    /// The payload of an IPv4 packet whose protocol is not TCP: a tunnel, or
    /// [`Decoded::NotTcp`]. `packet` starts at the IPv4 header, already checked by
    /// [`decode_ipv4`] (version, header length of 20 or more, at least 20 bytes captured).
    #[cold]
    #[inline(never)]
    pub(super) fn ipv4_payload(
        &mut self,
        packet: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let header_len = usize::from(packet[0] & 0x0f) * 4;
        // Non-first fragments carry no transport header: not followed, counted as before.
        if u16::from_be_bytes([packet[6], packet[7]]) & 0x1fff != 0 {
            return Decoded::NotTcp;
        }
        let total_len = match u16::from_be_bytes([packet[2], packet[3]]) {
            0 => wire_len,
            n => u32::from(n),
        };
        let Some(payload_len) = total_len.checked_sub(header_len as u32) else {
            return Decoded::NotTcp;
        };
        let Some(payload) = packet.get(header_len..) else {
            return Decoded::NotTcp;
        };
        let src = IpAddr::from([packet[12], packet[13], packet[14], packet[15]]);
        let dst = IpAddr::from([packet[16], packet[17], packet[18], packet[19]]);
        self.ip_payload(packet[9], payload, payload_len, src, dst, meta, out)
    }

    /// The payload of an IP packet (IPv4, or IPv6 after its extension headers) whose
    /// protocol is `protocol`; `payload_len` is its length on the wire.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ip_payload(
        &mut self,
        protocol: u8,
        payload: &[u8],
        payload_len: u32,
        src: IpAddr,
        dst: IpAddr,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let outer = |kind| Some(Outer { kind, src, dst });
        match protocol {
            IPPROTO_IPIP => self.nested(outer(TunnelKind::IpInIp), |d| {
                decode_ipv4(payload, payload_len, meta, out, d)
            }),
            IPPROTO_IPV6 => self.nested(outer(TunnelKind::IpInIp), |d| {
                decode_ipv6(payload, payload_len, meta, out, d)
            }),
            IPPROTO_GRE => self.nested(outer(TunnelKind::Gre), |d| {
                d.gre(payload, payload_len, meta, out)
            }),
            IPPROTO_MPLS => self.nested(outer(TunnelKind::Mpls), |d| {
                d.mpls(payload, payload_len, meta, out)
            }),
            IPPROTO_UDP => {
                let Some(udp) = payload.get(..8) else {
                    return Decoded::NotTcp;
                };
                let src_port = u16::from_be_bytes([udp[0], udp[1]]);
                let dst_port = u16::from_be_bytes([udp[2], udp[3]]);
                let Some(overlay) = self.udp_overlay(src_port, dst_port) else {
                    return Decoded::NotTcp;
                };
                let inner = &payload[8..];
                let inner_len = payload_len.saturating_sub(8);
                let kind = match overlay {
                    UdpOverlay::Vxlan | UdpOverlay::VxlanGpe => TunnelKind::Vxlan,
                    UdpOverlay::Geneve => TunnelKind::Geneve,
                    UdpOverlay::Mpls => TunnelKind::Mpls,
                    UdpOverlay::GtpU => TunnelKind::GtpU,
                    UdpOverlay::Gre => TunnelKind::Gre,
                    UdpOverlay::Ayiya => TunnelKind::Ayiya,
                    UdpOverlay::Capwap => TunnelKind::Capwap,
                };
                self.nested(outer(kind), |d| match overlay {
                    UdpOverlay::Vxlan => d.vxlan(inner, inner_len, meta, out),
                    UdpOverlay::VxlanGpe => d.vxlan_gpe(inner, inner_len, meta, out),
                    UdpOverlay::Geneve => d.geneve(inner, inner_len, meta, out),
                    UdpOverlay::Mpls => d.mpls(inner, inner_len, meta, out),
                    UdpOverlay::GtpU => d.gtp_u(inner, inner_len, meta, out),
                    UdpOverlay::Gre => d.gre(inner, inner_len, meta, out),
                    UdpOverlay::Ayiya => d.ayiya(inner, inner_len, meta, out),
                    UdpOverlay::Capwap => d.capwap(inner, inner_len, meta, out),
                })
            }
            IPPROTO_AH => self.nested(None, |d| {
                d.authenticated(payload, payload_len, src, dst, meta, out)
            }),
            IPPROTO_ESP => Decoded::Opaque("encrypted (IPsec ESP)"),
            IPPROTO_IPCOMP => self.nested(None, |d| {
                d.ipcomp(payload, payload_len, src, dst, meta, out)
            }),
            _ => Decoded::NotTcp,
        }
    }

    /// The overlay a UDP datagram carries, by its destination port first (the tunnel's
    /// well-known port; the source port is a flow hash in VXLAN and Geneve), then its source.
    fn udp_overlay(&self, src_port: u16, dst_port: u16) -> Option<UdpOverlay> {
        [dst_port, src_port].into_iter().find_map(|port| {
            if self.vxlan_ports.contains(&port) {
                Some(UdpOverlay::Vxlan)
            } else if self.geneve_ports.contains(&port) {
                Some(UdpOverlay::Geneve)
            } else {
                match port {
                    VXLAN_GPE_PORT => Some(UdpOverlay::VxlanGpe),
                    MPLS_UDP_PORT => Some(UdpOverlay::Mpls),
                    GTP_U_PORT => Some(UdpOverlay::GtpU),
                    GRE_IN_UDP_PORT => Some(UdpOverlay::Gre),
                    AYIYA_PORT => Some(UdpOverlay::Ayiya),
                    CAPWAP_DATA_PORT => Some(UdpOverlay::Capwap),
                    _ => None,
                }
            }
        })
    }

    /// The IPsec Authentication Header (RFC 4302 §2): its next header, its length in 4-byte
    /// words minus 2, then the protected payload, readable.
    #[allow(clippy::too_many_arguments)]
    fn authenticated(
        &mut self,
        payload: &[u8],
        payload_len: u32,
        src: IpAddr,
        dst: IpAddr,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let (Some(&next), Some(&units)) = (payload.first(), payload.get(1)) else {
            return Decoded::Undecodable("IPsec authentication header cut short");
        };
        let len = (usize::from(units) + 2) * 4;
        match (payload.get(len..), payload_len.checked_sub(len as u32)) {
            (Some(inner), Some(inner_len)) if next == IPPROTO_TCP => {
                decode_tcp(inner, inner_len, src, dst, meta, out)
            }
            (Some(inner), Some(inner_len)) => {
                self.ip_payload(next, inner, inner_len, src, dst, meta, out)
            }
            _ => Decoded::Undecodable("IPsec authentication header cut short"),
        }
    }

    /// IP payload compression (RFC 3173 §2.2): next header, flags, the compression parameter
    /// index, then the compressed payload. The CPI names the algorithm only below 256
    /// (RFC 3173 §3.3: 1 OUI, 2 DEFLATE, 3 LZS, 4 LZJH); above, the SA negotiated it, and DEFLATE
    /// (RFC 2394: raw deflate, no zlib header), the common one, is tried, as Wireshark does.
    #[allow(clippy::too_many_arguments)]
    fn ipcomp(
        &mut self,
        payload: &[u8],
        payload_len: u32,
        src: IpAddr,
        dst: IpAddr,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let Some(h) = payload.get(..4) else {
            return Decoded::Undecodable("IPComp header cut short");
        };
        if matches!(u16::from_be_bytes([h[2], h[3]]), 1 | 3 | 4) {
            return Decoded::Opaque("compressed (IPComp with LZS, LZJH or a private algorithm)");
        }
        let Some(compressed) = payload.get(4..payload_len as usize) else {
            // Cut by the snap length: the compressed stream cannot be inflated.
            return Decoded::Opaque("compressed (IPComp, cut by the snap length)");
        };
        let mut inflated = Vec::with_capacity(usize::from(u16::MAX));
        let mut inflater = flate2::Decompress::new(false);
        match inflater.decompress_vec(compressed, &mut inflated, flate2::FlushDecompress::Finish) {
            Ok(flate2::Status::StreamEnd) => {}
            _ => return Decoded::Opaque("compressed (IPComp without its algorithm)"),
        }
        let len = inflated.len() as u32;
        if h[0] == IPPROTO_TCP {
            decode_tcp(&inflated, len, src, dst, meta, out)
        } else {
            self.ip_payload(h[0], &inflated, len, src, dst, meta, out)
        }
    }

    /// AYIYA: 8 bytes (identity length as a power of two, signature length in 4-byte words,
    /// the next header, an epoch), the identity, the signature, then the packet.
    fn ayiya(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let Some(h) = data.get(..8) else {
            return Decoded::Undecodable("AYIYA header cut short");
        };
        let len = 8 + (1usize << (h[0] >> 4)) + usize::from(h[1] >> 4) * 4;
        let (Some(inner), Some(inner_len)) = (data.get(len..), wire_len.checked_sub(len as u32))
        else {
            return Decoded::Undecodable("AYIYA header cut short");
        };
        match h[3] {
            IPPROTO_IPIP => decode_ipv4(inner, inner_len, meta, out, self),
            IPPROTO_IPV6 => decode_ipv6(inner, inner_len, meta, out, self),
            _ => Decoded::NotTcp,
        }
    }

    /// VXLAN (RFC 7348 §5): 8 bytes (flags, 24-bit VNI), then an Ethernet frame.
    fn vxlan(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match (data.get(8..), wire_len.checked_sub(8)) {
            (Some(frame), Some(len)) => self.ethernet(frame, len, meta, out),
            _ => Decoded::Undecodable("VXLAN header cut short"),
        }
    }

    /// VXLAN-GPE: VXLAN's 8 bytes with a next-protocol byte (IPv4 1, IPv6 2, Ethernet 3,
    /// MPLS 5) when its P flag is set; plain VXLAN otherwise.
    fn vxlan_gpe(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let (Some(header), Some(inner), Some(len)) =
            (data.get(..8), data.get(8..), wire_len.checked_sub(8))
        else {
            return Decoded::Undecodable("VXLAN-GPE header cut short");
        };
        const P_FLAG: u8 = 0x04;
        if header[0] & P_FLAG == 0 {
            return self.ethernet(inner, len, meta, out);
        }
        match header[3] {
            1 => decode_ipv4(inner, len, meta, out, self),
            2 => decode_ipv6(inner, len, meta, out, self),
            3 => self.ethernet(inner, len, meta, out),
            5 => self.mpls(inner, len, meta, out),
            _ => Decoded::NotTcp,
        }
    }

    /// Geneve (RFC 8926 §3.4): 8 fixed bytes, options of `Opt Len` 4-byte words, then the
    /// protocol its Protocol Type (an Ethertype) names.
    fn geneve(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let Some(fixed) = data.get(..8) else {
            return Decoded::Undecodable("Geneve header cut short");
        };
        if fixed[0] >> 6 != 0 {
            // Only version 0 is defined; a later one may lay out its header differently.
            return Decoded::NotTcp;
        }
        let header_len = 8 + usize::from(fixed[0] & 0x3f) * 4;
        let ethertype = u16::from_be_bytes([fixed[2], fixed[3]]);
        match (
            data.get(header_len..),
            wire_len.checked_sub(header_len as u32),
        ) {
            (Some(inner), Some(len)) => self.ethertype(ethertype, inner, len, meta, out),
            _ => Decoded::Undecodable("Geneve options cut short"),
        }
    }

    /// GTP-U (3GPP TS 29.281 §5): version 1 G-PDUs carry an IP packet after 8 bytes, 4 more
    /// when any of the E, S, PN flags is set, and the extension headers the E flag chains.
    fn gtp_u(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        const G_PDU: u8 = 255;
        let Some(fixed) = data.get(..8) else {
            return Decoded::Undecodable("GTP-U header cut short");
        };
        if fixed[0] >> 5 != 1 || fixed[0] & 0x10 == 0 || fixed[1] != G_PDU {
            return Decoded::NotTcp;
        }
        let mut offset = 8;
        if fixed[0] & 0x07 != 0 {
            offset = 12;
            let mut next = data.get(11).copied();
            // Extension headers: a length in 4-byte units, the last byte names the next.
            while next.is_some_and(|kind| kind != 0) {
                let Some(&units) = data.get(offset) else {
                    return Decoded::Undecodable("GTP-U extension header cut short");
                };
                if units == 0 {
                    return Decoded::Undecodable("GTP-U extension header of length 0");
                }
                offset += usize::from(units) * 4;
                next = data.get(offset - 1).copied();
                if next.is_none() {
                    return Decoded::Undecodable("GTP-U extension header cut short");
                }
            }
        }
        match (data.get(offset..), wire_len.checked_sub(offset as u32)) {
            (Some(inner), Some(len)) => decode_ip(inner, len, meta, out, self),
            _ => Decoded::Undecodable("GTP-U header cut short"),
        }
    }

    /// GRE (RFC 2784, with RFC 2890's key and sequence number; RFC 1701's routing is refused)
    /// and PPTP's enhanced GRE (version 1, RFC 2637 §4.1).
    fn gre(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        const CHECKSUM: u16 = 0x8000;
        const ROUTING: u16 = 0x4000;
        const KEY: u16 = 0x2000;
        const SEQUENCE: u16 = 0x1000;
        const ACK: u16 = 0x0080;
        let Some(fixed) = data.get(..4) else {
            return Decoded::Undecodable("GRE header cut short");
        };
        let flags = u16::from_be_bytes([fixed[0], fixed[1]]);
        let protocol = u16::from_be_bytes([fixed[2], fixed[3]]);
        let mut header_len = 4;
        match flags & 0x0007 {
            0 => {
                if flags & ROUTING != 0 {
                    return Decoded::NotTcp;
                }
                if flags & CHECKSUM != 0 {
                    header_len += 4;
                }
            }
            1 => {
                if flags & ACK != 0 {
                    header_len += 4;
                }
            }
            _ => return Decoded::NotTcp,
        }
        if flags & KEY != 0 {
            header_len += 4;
        }
        let sequenced = flags & SEQUENCE != 0;
        if sequenced {
            header_len += 4;
        }
        let (Some(inner), Some(len)) = (
            data.get(header_len..),
            wire_len.checked_sub(header_len as u32),
        ) else {
            return Decoded::Undecodable("GRE header cut short");
        };
        match protocol {
            ETHERTYPE_ERSPAN_I_II => {
                // Type I has no sequence number and no ERSPAN header; type II has both, the
                // header 8 bytes (draft-foschiano-erspan-03 §4.1).
                let skip = if sequenced { 8 } else { 0 };
                match (inner.get(skip..), len.checked_sub(skip as u32)) {
                    (Some(frame), Some(len)) => self.ethernet(frame, len, meta, out),
                    _ => Decoded::Undecodable("ERSPAN header cut short"),
                }
            }
            ETHERTYPE_ERSPAN_III => {
                // 12 bytes, and an 8-byte platform-specific subheader when the O flag (the
                // last bit) is set (draft-foschiano-erspan-03 §4.2).
                let Some(&last) = inner.get(11) else {
                    return Decoded::Undecodable("ERSPAN header cut short");
                };
                let skip = if last & 0x01 != 0 { 20 } else { 12 };
                match (inner.get(skip..), len.checked_sub(skip as u32)) {
                    (Some(frame), Some(len)) => self.ethernet(frame, len, meta, out),
                    _ => Decoded::Undecodable("ERSPAN header cut short"),
                }
            }
            ETHERTYPE_WCCP => {
                // IPv4, preceded by a 4-byte WCCP redirect header unless the next byte reads
                // as an IPv4 version (draft-wilson-wrec-wccp-v2-01 §4.12), as tcpdump does.
                let skip = match inner.first() {
                    Some(b) if b >> 4 == 4 => 0,
                    _ => 4,
                };
                match (inner.get(skip..), len.checked_sub(skip as u32)) {
                    (Some(packet), Some(len)) => decode_ipv4(packet, len, meta, out, self),
                    _ => Decoded::Undecodable("WCCP redirect header cut short"),
                }
            }
            ETHERTYPE_PPP => self.ppp(inner, len, meta, out),
            aruba if GRE_ARUBA.contains(&aruba) && aruba & 0xf == 0 => {
                self.ieee80211(inner, len, meta, out)
            }
            other => self.ethertype(other, inner, len, meta, out),
        }
    }

    /// The network layer an Ethertype names.
    pub fn ethertype(
        &mut self,
        ethertype: u16,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match ethertype {
            ETHERTYPE_IPV4 => decode_ipv4(data, wire_len, meta, out, self),
            ETHERTYPE_IPV6 => decode_ipv6(data, wire_len, meta, out, self),
            ETHERTYPE_TEB => self.nested(None, |d| d.ethernet(data, wire_len, meta, out)),
            ETHERTYPE_MPLS | ETHERTYPE_MPLS_MULTICAST => {
                self.nested(None, |d| d.mpls(data, wire_len, meta, out))
            }
            ETHERTYPE_PPPOE_SESSION => self.nested(None, |d| d.pppoe(data, wire_len, meta, out)),
            _ => Decoded::NotTcp,
        }
    }

    /// An Ethernet II frame with any VLAN tags.
    pub fn ethernet(
        &mut self,
        frame: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match ethernet_payload(frame) {
            Ok((ethertype, offset)) => self.ethertype(
                ethertype,
                &frame[offset..],
                wire_len.saturating_sub(offset as u32),
                meta,
                out,
            ),
            Err(decoded) => decoded,
        }
    }

    /// An MPLS label stack (RFC 3032 §2.1): 4-byte entries to the one with the bottom-of-stack
    /// bit, then IPv4 or IPv6 by the version nibble, or an Ethernet pseudowire behind its
    /// control word (RFC 4448 §3) when the nibble is 0.
    pub fn mpls(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let mut offset = 0;
        loop {
            let Some(entry) = data.get(offset..offset + 4) else {
                return Decoded::Undecodable("MPLS label stack cut short");
            };
            offset += 4;
            if entry[2] & 0x01 != 0 {
                break;
            }
        }
        let (inner, len) = (&data[offset..], wire_len.saturating_sub(offset as u32));
        match inner.first().map(|b| b >> 4) {
            Some(4) => decode_ipv4(inner, len, meta, out, self),
            Some(6) => decode_ipv6(inner, len, meta, out, self),
            Some(0) => match (inner.get(4..), len.checked_sub(4)) {
                (Some(frame), Some(len)) => self.ethernet(frame, len, meta, out),
                _ => Decoded::Undecodable("MPLS pseudowire control word cut short"),
            },
            Some(_) => Decoded::NotTcp,
            None => Decoded::Undecodable("nothing captured after the MPLS label stack"),
        }
    }

    /// A PPPoE session packet (RFC 2516 §4): 6 bytes, then a PPP protocol field.
    fn pppoe(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match (data.get(6..), wire_len.checked_sub(6)) {
            (Some(ppp), Some(len)) => self.ppp(ppp, len, meta, out),
            _ => Decoded::Undecodable("PPPoE header cut short"),
        }
    }

    /// A PPP frame (RFC 1661 §2) from its optional address and control bytes (0xff 0x03,
    /// RFC 1662 §3.1) on: a protocol field of 2 bytes, or 1 when compressed (RFC 1661 §6.5:
    /// an odd first byte), then the packet it names.
    pub fn ppp(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let skip = if data.starts_with(&[0xff, 0x03]) {
            2
        } else {
            0
        };
        let (protocol, offset) = match data.get(skip..) {
            Some([first, ..]) if first & 0x01 != 0 => (u16::from(*first), skip + 1),
            Some([first, second, ..]) => (u16::from_be_bytes([*first, *second]), skip + 2),
            _ => return Decoded::Undecodable("PPP header cut short"),
        };
        let (inner, len) = (&data[offset..], wire_len.saturating_sub(offset as u32));
        match protocol {
            PPP_IPV4 => decode_ipv4(inner, len, meta, out, self),
            PPP_IPV6 => decode_ipv6(inner, len, meta, out, self),
            PPP_MPLS => self.nested(None, |d| d.mpls(inner, len, meta, out)),
            _ => Decoded::NotTcp,
        }
    }
}

/// Finds the network header after an Ethernet header and its tags (VLAN, VN-Tag, PBB,
/// FabricPath, MACsec) or LLC/SNAP: the EtherType and its offset in `frame`.
#[inline(always)]
pub fn ethernet_payload(frame: &[u8]) -> Result<(u16, usize), Decoded<()>> {
    const TYPE_OFFSET: usize = 12;
    // The common frame first: IP right after the addresses, out of the tags' way.
    match frame.get(TYPE_OFFSET..TYPE_OFFSET + 2) {
        Some(&[0x08, 0x00]) => Ok((ETHERTYPE_IPV4, TYPE_OFFSET + 2)),
        Some(&[0x86, 0xdd]) => Ok((ETHERTYPE_IPV6, TYPE_OFFSET + 2)),
        _ => tagged_ethernet_payload(frame),
    }
}

/// [`ethernet_payload`] past tags, bridging headers and LLC.
#[cold]
#[inline(never)]
fn tagged_ethernet_payload(frame: &[u8]) -> Result<(u16, usize), Decoded<()>> {
    const TYPE_OFFSET: usize = 12;
    /// Values up to 1500 are an 802.3 frame's length; 1536 and up are EtherTypes.
    const MAX_LENGTH: u16 = 1500;
    let mut offset = TYPE_OFFSET;
    // Bounded: each tag moves on by at least 4 bytes of the frame.
    loop {
        let Some(t) = frame.get(offset..offset + 2) else {
            return Err(Decoded::Undecodable("Ethernet header cut short"));
        };
        match u16::from_be_bytes([t[0], t[1]]) {
            // A tag is 2 bytes of TPID (just read) and 2 of TCI; the inner type follows.
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => offset += 4,
            // VN-Tag: 4 bytes of tag.
            ETHERTYPE_VNTAG => offset += 6,
            // 802.1ah: the I-TAG (4 bytes), then the customer's addresses.
            ETHERTYPE_PBB => offset += 2 + 4 + 12,
            // FabricPath: FTag and TTL (2 bytes), then the classic frame's addresses.
            ETHERTYPE_FABRICPATH => offset += 2 + 2 + 12,
            // MACsec's SecTAG (802.1AE §9.3): TCI/AN, short length, packet number, and the
            // secure channel identifier when the SC bit says so. Integrity-only frames are
            // read; encrypted ones (the E bit) cannot be.
            ETHERTYPE_MACSEC => {
                let Some(&tci) = frame.get(offset + 2) else {
                    return Err(Decoded::Undecodable("MACsec SecTAG cut short"));
                };
                if tci & 0x08 != 0 {
                    return Err(Decoded::Opaque("encrypted (MACsec)"));
                }
                offset += 2 + 6 + if tci & 0x20 != 0 { 8 } else { 0 };
            }
            length if length <= MAX_LENGTH => {
                let llc = frame.get(offset + 2..).unwrap_or_default();
                return match super::llc::snap_ethertype(llc)? {
                    Some(ethertype) => Ok((ethertype, offset + 2 + super::llc::LLC_SNAP_LEN)),
                    None => Err(Decoded::NotTcp),
                };
            }
            ethertype => return Ok((ethertype, offset + 2)),
        }
    }
}

/// The outer tunnel of each tunnelled connection, by its inner endpoints (either order):
/// what `--flows` and the JSON flow's `outer` report. The first tunnel seen for a
/// connection is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OuterByFlow(rustc_hash::FxHashMap<[(IpAddr, u16); 2], Outer>);

impl OuterByFlow {
    fn key(a: (IpAddr, u16), b: (IpAddr, u16)) -> [(IpAddr, u16); 2] {
        if a <= b {
            [a, b]
        } else {
            [b, a]
        }
    }

    /// Notes that `segment` came in `outer`.
    pub fn record(&mut self, segment: &Segment, outer: Outer) {
        let key = Self::key(
            (segment.src, segment.src_port),
            (segment.dst, segment.dst_port),
        );
        self.0.entry(key).or_insert(outer);
    }

    /// The tunnel of the connection between `a` and `b`, if it came in one.
    pub fn get(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<&Outer> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&Self::key(a, b))
    }

    /// Adds the connections of `other` not already known.
    pub fn extend(&mut self, other: OuterByFlow) {
        for (key, outer) in other.0 {
            self.0.entry(key).or_insert(outer);
        }
    }
}

impl std::fmt::Display for Outer {
    /// `vxlan 192.0.2.1>192.0.2.2`: the tunnel and its endpoints, source first.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}>{}", self.kind.name(), self.src, self.dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    const META: PacketMeta = PacketMeta {
        ts_ns: 1,
        packet_number: 1,
    };

    /// An IPv4 TCP segment from 10.0.0.1:40000 to 10.0.0.2:80 with 5 payload bytes.
    fn inner_ipv4() -> Vec<u8> {
        let mut buf = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 7, 1000)
            .write(&mut buf, b"hello")
            .unwrap();
        buf
    }

    /// An IPv4 header around `payload` with protocol `protocol`.
    fn ipv4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        p.extend_from_slice(payload);
        p
    }

    /// An IPv6 header around `payload` with next header `next`.
    fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        p.extend_from_slice(payload);
        p
    }

    fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn udp(dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = vec![0xc0, 0x00];
        u.extend_from_slice(&dst_port.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    fn gre(flags: u16, protocol: u16, extra: usize, payload: &[u8]) -> Vec<u8> {
        let mut g = flags.to_be_bytes().to_vec();
        g.extend_from_slice(&protocol.to_be_bytes());
        g.extend(std::iter::repeat_n(0xaa, extra));
        g.extend_from_slice(payload);
        g
    }

    /// Decodes an outer IPv4 or IPv6 packet; the segment and the outer tunnel.
    fn decode(packet: &[u8], decap: &mut Decap) -> (Decoded<()>, Segment, Option<Outer>) {
        let mut seg = Segment::UNSET;
        let decoded = decode_ip(packet, packet.len() as u32, META, &mut seg, decap);
        (decoded, seg, decap.take_outer())
    }

    fn assert_inner(packet: &[u8], kind: TunnelKind) {
        let (decoded, seg, outer) = decode(packet, &mut Decap::default());
        assert_eq!(decoded, Decoded::Tcp(()), "{kind:?}");
        assert_eq!(
            (seg.src_port, seg.dst_port, seg.payload_len),
            (40000, 80, 5),
            "{kind:?}"
        );
        assert_eq!(seg.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(outer.map(|o| o.kind), Some(kind));
    }

    #[test]
    fn vxlan_and_geneve_with_options() {
        let vxlan = [
            &[0x08, 0, 0, 0, 0, 0, 42, 0][..],
            &ethernet(0x0800, &inner_ipv4()),
        ]
        .concat();
        assert_inner(&ipv4(17, &udp(VXLAN_PORT, &vxlan)), TunnelKind::Vxlan);
        assert_inner(&ipv6(17, &udp(VXLAN_PORT, &vxlan)), TunnelKind::Vxlan);
        // Two option words, protocol IPv4 directly.
        let geneve = [
            &[0x02, 0, 0x08, 0x00, 0, 0, 42, 0, 1, 2, 3, 4, 5, 6, 7, 8][..],
            &inner_ipv4(),
        ]
        .concat();
        assert_inner(&ipv4(17, &udp(GENEVE_PORT, &geneve)), TunnelKind::Geneve);
        // Not a VXLAN port unless asked.
        let on_8472 = ipv4(17, &udp(8472, &vxlan));
        assert_eq!(decode(&on_8472, &mut Decap::default()).0, Decoded::NotTcp);
        let mut extra = Decap::new(&DecapConfig {
            vxlan_ports: vec![8472],
            geneve_ports: vec![],
        });
        assert_eq!(decode(&on_8472, &mut extra).0, Decoded::Tcp(()));
    }

    #[test]
    fn gre_with_its_optional_fields_erspan_and_wccp() {
        let inner = inner_ipv4();
        assert_inner(&ipv4(47, &gre(0, 0x0800, 0, &inner)), TunnelKind::Gre);
        // Checksum, key and sequence: 12 more bytes.
        assert_inner(&ipv4(47, &gre(0xb000, 0x0800, 12, &inner)), TunnelKind::Gre);
        assert_inner(
            &ipv6(47, &gre(0x2000, 0x6558, 4, &ethernet(0x0800, &inner))),
            TunnelKind::Gre,
        );
        let frame = ethernet(0x0800, &inner);
        // ERSPAN I (no sequence, no header), II (sequence, 8 bytes), III (12 bytes).
        assert_inner(&ipv4(47, &gre(0, 0x88be, 0, &frame)), TunnelKind::Gre);
        assert_inner(
            &ipv4(47, &gre(0x1000, 0x88be, 4 + 8, &frame)),
            TunnelKind::Gre,
        );
        let erspan3 = [&[0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..], &frame].concat();
        assert_inner(
            &ipv4(47, &gre(0x1000, 0x22eb, 4, &erspan3)),
            TunnelKind::Gre,
        );
        // WCCP with and without the redirect header.
        assert_inner(&ipv4(47, &gre(0, 0x883e, 0, &inner)), TunnelKind::Gre);
        let redirect = [&[0x00, 0x01, 0x02, 0x03][..], &inner].concat();
        assert_inner(&ipv4(47, &gre(0, 0x883e, 0, &redirect)), TunnelKind::Gre);
    }

    #[test]
    fn ip_in_ip_mpls_and_pppoe() {
        let inner = inner_ipv4();
        assert_inner(&ipv4(4, &inner), TunnelKind::IpInIp);
        assert_inner(&ipv6(4, &inner), TunnelKind::IpInIp);
        let inner6 = ipv4(41, &ipv6(41, &ipv6(4, &inner)));
        assert_inner(&inner6, TunnelKind::IpInIp);
        // Two labels, the second bottom of stack; in GRE.
        let mpls = [&[0, 1, 0x20, 64, 0, 2, 0x01, 64][..], &inner].concat();
        assert_inner(&ipv4(47, &gre(0, 0x8847, 0, &mpls)), TunnelKind::Gre);
        assert_inner(&ipv4(137, &mpls), TunnelKind::Mpls);
        // PPPoE session in Ethernet, reached from the link layer: no outer IP.
        let pppoe = [&[0x11, 0, 0, 1, 0, 0, 0x00, 0x21][..], &inner].concat();
        let frame = ethernet(0x8864, &pppoe);
        let mut seg = Segment::UNSET;
        let mut decap = Decap::default();
        assert_eq!(
            decap.ethernet(&frame, frame.len() as u32, META, &mut seg),
            Decoded::Tcp(())
        );
        assert_eq!(seg.dst_port, 80);
        assert_eq!(decap.take_outer(), None);
    }

    #[test]
    fn nesting_is_bounded() {
        let mut packet = inner_ipv4();
        for _ in 0..(MAX_NESTING as usize + 1) {
            packet = ipv4(4, &packet);
        }
        let mut decap = Decap::default();
        let (decoded, _, _) = decode(&packet, &mut decap);
        assert_eq!(
            decoded,
            Decoded::Undecodable("tunnels nested more than 8 deep")
        );
        // The depth is back to zero for the next packet.
        assert_inner(&ipv4(4, &inner_ipv4()), TunnelKind::IpInIp);
        assert_eq!(decap.depth, 0);
    }

    #[test]
    fn cut_tunnel_headers_are_undecodable_not_panics() {
        let vxlan = [
            &[0x08, 0, 0, 0, 0, 0, 42, 0][..],
            &ethernet(0x0800, &inner_ipv4()),
        ]
        .concat();
        let full = ipv4(17, &udp(VXLAN_PORT, &vxlan));
        for cut in 20..full.len() {
            let mut seg = Segment::UNSET;
            let _ = decode_ip(
                &full[..cut],
                full.len() as u32,
                META,
                &mut seg,
                &mut Decap::default(),
            );
        }
    }
}
