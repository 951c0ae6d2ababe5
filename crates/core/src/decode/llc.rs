//! IEEE 802.2 LLC with a SNAP header (RFC 1042): how IP rides on 802.3 length frames, FDDI and
//! 802.11. Only SNAP carries IP; other LLC frames (spanning tree, NetBIOS...) are not TCP.

use super::{Decap, Decoded, PacketMeta, Segment};

/// DSAP, SSAP and control of a SNAP frame; then a 3-byte OUI and the EtherType.
const SNAP: [u8; 3] = [0xaa, 0xaa, 0x03];

/// Bytes of the LLC and SNAP headers before the payload.
pub const LLC_SNAP_LEN: usize = 8;

/// The EtherType a SNAP header names, `None` for other LLC frames; `Err` when the header is
/// cut short.
pub fn snap_ethertype(llc: &[u8]) -> Result<Option<u16>, Decoded<()>> {
    match llc.get(..LLC_SNAP_LEN) {
        Some(h) if h[..3] == SNAP => Ok(Some(u16::from_be_bytes([h[6], h[7]]))),
        Some(_) => Ok(None),
        None if llc.len() >= 3 && llc[..3] != SNAP => Ok(None),
        None => Err(Decoded::Undecodable("LLC/SNAP header cut short")),
    }
}

impl Decap {
    /// An LLC frame: its SNAP payload followed by EtherType.
    pub fn llc(
        &mut self,
        llc: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match snap_ethertype(llc) {
            Ok(Some(ethertype)) => self.ethertype(
                ethertype,
                &llc[LLC_SNAP_LEN..],
                wire_len.saturating_sub(LLC_SNAP_LEN as u32),
                meta,
                out,
            ),
            Ok(None) => Decoded::NotTcp,
            Err(decoded) => decoded,
        }
    }
}
