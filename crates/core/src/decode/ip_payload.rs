//! What an IP packet carries when it is not TCP itself: IP in IP, GRE, MPLS, the UDP overlays,
//! IPsec's headers; or nothing of interest.

use std::net::IpAddr;

use super::numbers::*;
use super::udp_overlays::UdpOverlay;
use super::{decode_ipv4, decode_ipv6, Decap, Decoded, Outer, PacketMeta, Segment, TunnelKind};

impl Decap {
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
            0 => match super::offloaded_len(wire_len) {
                Some(len) => len,
                None => return Decoded::Undecodable(super::OFFLOAD_TOO_LONG),
            },
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
}
