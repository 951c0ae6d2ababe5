//! PPP (RFC 1661), PPPoE sessions (RFC 2516) and Cisco HDLC: a protocol field or an EtherType
//! names the network layer.

use super::numbers::*;
use super::{decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};

impl Decap {
    /// A PPPoE session packet (RFC 2516 §4): 6 bytes, then a PPP protocol field. Its LENGTH
    /// field bounds the PPP frame: Ethernet pads a short one, and the padding is no data.
    pub(super) fn pppoe(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match (data.get(4..6), data.get(6..), wire_len.checked_sub(6)) {
            (Some(length), Some(ppp), Some(len)) => {
                let length = u32::from(u16::from_be_bytes([length[0], length[1]]));
                // Zero is no length: such a session carries nothing.
                let len = if length == 0 { len } else { len.min(length) };
                let ppp = ppp.get(..len as usize).unwrap_or(ppp);
                self.length_exact = length != 0;
                let decoded = self.ppp(ppp, len, meta, out);
                self.length_exact = false;
                decoded
            }
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

/// Cisco HDLC: address, control, then an Ethertype.
pub(super) fn cisco_hdlc(
    frame: &[u8],
    wire_len: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    match frame.get(2..4) {
        Some(t) => decap.ethertype(
            u16::from_be_bytes([t[0], t[1]]),
            &frame[4..],
            wire_len.saturating_sub(4),
            meta,
            out,
        ),
        None => Decoded::Undecodable("Cisco HDLC header cut short"),
    }
}
