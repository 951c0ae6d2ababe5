//! MPLS label stacks (RFC 3032), in Ethernet, IP or UDP: what follows the bottom label.

use super::{decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};

impl Decap {
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
}
