//! GRE (RFC 2784, RFC 2890), PPTP's enhanced GRE (RFC 2637), and what GRE carries: ERSPAN
//! I/II/III mirrors, WCCP redirects, Aruba's 802.11 tunnels, any EtherType.

use super::numbers::*;
use super::{decode_ipv4, Decap, Decoded, PacketMeta, Segment};

impl Decap {
    /// GRE (RFC 2784, with RFC 2890's key and sequence number; RFC 1701's routing is refused)
    /// and PPTP's enhanced GRE (version 1, RFC 2637 §4.1).
    pub(super) fn gre(
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
}
