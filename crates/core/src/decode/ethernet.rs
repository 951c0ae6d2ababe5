//! Ethernet II frames and what may sit between their addresses and the EtherType: 802.1Q and
//! 802.1ad tags, VN-Tag, 802.1ah provider backbone bridging, Cisco FabricPath, MACsec, and
//! 802.3 length frames with LLC/SNAP; then the network layer an EtherType names.

use super::numbers::*;
use super::{decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};

impl Decap {
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
