//! Overlays over UDP, told by their ports: VXLAN and VXLAN-GPE, Geneve, GTP-U, AYIYA (and the
//! dispatch to GRE in UDP, MPLS in UDP and CAPWAP, read in their own files).

use super::numbers::*;
use super::{decode_ip, decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};

impl Decap {
    /// The overlay a UDP datagram carries, by its destination port first (the tunnel's
    /// well-known port; the source port is a flow hash in VXLAN and Geneve), then its source.
    pub(super) fn udp_overlay(&self, src_port: u16, dst_port: u16) -> Option<UdpOverlay> {
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

    /// AYIYA: 8 bytes (identity length as a power of two, signature length in 4-byte words,
    /// the next header, an epoch), the identity, the signature, then the packet.
    pub(super) fn ayiya(
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
    pub(super) fn vxlan(
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
    pub(super) fn vxlan_gpe(
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
    pub(super) fn geneve(
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
    pub(super) fn gtp_u(
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
}

/// What a UDP port pair is decoded as.
pub(super) enum UdpOverlay {
    Vxlan,
    VxlanGpe,
    Geneve,
    Mpls,
    GtpU,
    Gre,
    Ayiya,
    Capwap,
}
