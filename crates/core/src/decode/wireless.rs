//! Wi-Fi: 802.11 data frames (IEEE 802.11-2020 §9.2-9.3), with the radio headers capture
//! tools put in front of them (radiotap, PPI), and as tunnels carry them from access points to
//! their controllers (Aruba's GRE, CAPWAP). IP comes after the frame's LLC/SNAP header.

use super::{Decap, Decoded, PacketMeta, Segment};

/// Frame control, duration, three addresses and sequence control.
const HEADER: usize = 24;
/// The frame type of data frames (frame control bits 2-3).
const TYPE_DATA: u8 = 2;
/// Frame control flags (second byte).
const TO_DS: u8 = 0x01;
const FROM_DS: u8 = 0x02;
const PROTECTED: u8 = 0x40;
const ORDER: u8 = 0x80;
/// `LINKTYPE_IEEE802_11`, the frame PPI most often wraps.
const PPI_DLT_80211: u32 = 105;

impl Decap {
    /// An 802.11 frame: data frames are read to their LLC payload (the first subframe of an
    /// A-MSDU); management and control frames carry no TCP; protected ones cannot be read.
    pub fn ieee80211(
        &mut self,
        frame: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let (Some(&fc), Some(&flags)) = (frame.first(), frame.get(1)) else {
            return Decoded::Undecodable("802.11 header cut short");
        };
        if (fc >> 2) & 0x3 != TYPE_DATA {
            return Decoded::NotTcp;
        }
        let subtype = fc >> 4;
        // Subtypes with bit 2 set are null-function frames: no body.
        if subtype & 0x4 != 0 {
            return Decoded::NotTcp;
        }
        if flags & PROTECTED != 0 {
            return Decoded::Opaque("encrypted (protected 802.11 frame)");
        }
        let qos = subtype & 0x8 != 0;
        let mut len = HEADER;
        if flags & (TO_DS | FROM_DS) == TO_DS | FROM_DS {
            len += 6; // the fourth address, between access points
        }
        let mut amsdu = false;
        if qos {
            // QoS control: bit 7 of its first byte flags an A-MSDU.
            amsdu = frame.get(len).is_some_and(|b| b & 0x80 != 0);
            len += 2;
            if flags & ORDER != 0 {
                len += 4; // HT control
            }
        }
        if amsdu {
            // Subframe: destination, source, length, then the LLC frame.
            len += 14;
        }
        match frame.get(len..) {
            Some(llc) => self.llc(llc, wire_len.saturating_sub(len as u32), meta, out),
            None => Decoded::Undecodable("802.11 header cut short"),
        }
    }

    /// A radiotap header (its length in bytes 2-3, little-endian), then an 802.11 frame.
    pub fn radiotap(
        &mut self,
        frame: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        match frame.get(2..4) {
            Some(l) => {
                let len = usize::from(u16::from_le_bytes([l[0], l[1]]));
                match frame.get(len..) {
                    Some(inner) => {
                        self.ieee80211(inner, wire_len.saturating_sub(len as u32), meta, out)
                    }
                    None => Decoded::Undecodable("radiotap header cut short"),
                }
            }
            None => Decoded::Undecodable("radiotap header cut short"),
        }
    }

    /// A PPI header (length in bytes 2-3 and the wrapped link type in bytes 4-7,
    /// little-endian), then an 802.11 frame.
    pub fn ppi(
        &mut self,
        frame: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let Some(h) = frame.get(..8) else {
            return Decoded::Undecodable("PPI header cut short");
        };
        let len = usize::from(u16::from_le_bytes([h[2], h[3]]));
        if u32::from_le_bytes([h[4], h[5], h[6], h[7]]) != PPI_DLT_80211 {
            return Decoded::Unsupported("PPI wrapping a link type other than 802.11");
        }
        match frame.get(len..) {
            Some(inner) => self.ieee80211(inner, wire_len.saturating_sub(len as u32), meta, out),
            None => Decoded::Undecodable("PPI header cut short"),
        }
    }

    /// CAPWAP data (RFC 5415 §4.3): a header of HLEN 4-byte words, then the wireless frame in
    /// its native format (the T bit; 802.11 for wireless binding 1) or an Ethernet frame.
    pub fn capwap(
        &mut self,
        data: &[u8],
        wire_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let Some(h) = data.get(..8) else {
            return Decoded::Undecodable("CAPWAP header cut short");
        };
        if h[0] != 0 {
            return Decoded::Unsupported("CAPWAP DTLS (encrypted) or unknown preamble");
        }
        let word = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let len = ((word >> 19) & 0x1f) as usize * 4;
        let native = word & (1 << 8) != 0;
        let fragment = word & (1 << 7) != 0;
        let offset = u16::from_be_bytes([h[6], h[7]]) >> 3;
        if fragment && offset != 0 {
            return Decoded::Fragment;
        }
        let Some(inner) = data.get(len..) else {
            return Decoded::Undecodable("CAPWAP header cut short");
        };
        let inner_len = wire_len.saturating_sub(len as u32);
        match (native, (word >> 9) & 0x1f) {
            (false, _) => self.ethernet(inner, inner_len, meta, out),
            (true, 1) => self.ieee80211(inner, inner_len, meta, out),
            (true, _) => Decoded::Unsupported("CAPWAP with a wireless binding other than 802.11"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Segment;

    fn ipv4_tcp() -> Vec<u8> {
        let mut out = Vec::new();
        etherparse::PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1234, 80, 7, 1000)
            .write(&mut out, b"hello")
            .expect("builds");
        out
    }

    fn llc_snap(payload: &[u8]) -> Vec<u8> {
        let mut out = vec![0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00];
        out.extend_from_slice(payload);
        out
    }

    fn data_frame(flags: u8, qos: bool) -> Vec<u8> {
        let mut out = vec![if qos { 0x88 } else { 0x08 }, flags];
        out.extend_from_slice(&[0; 22]);
        if qos {
            out.extend_from_slice(&[0, 0]);
        }
        out.extend(llc_snap(&ipv4_tcp()));
        out
    }

    fn decode(f: impl FnOnce(&mut Decap, &mut Segment) -> Decoded<()>) -> (Decoded<()>, Segment) {
        let mut out = Segment::UNSET;
        let decoded = f(&mut Decap::default(), &mut out);
        (decoded, out)
    }

    #[test]
    fn data_frames_reach_tcp() {
        let meta = PacketMeta::default();
        for (flags, qos) in [(TO_DS, false), (FROM_DS, true), (0, true)] {
            let frame = data_frame(flags, qos);
            let (decoded, seg) = decode(|d, o| d.ieee80211(&frame, frame.len() as u32, meta, o));
            assert_eq!(decoded, Decoded::Tcp(()), "flags {flags:#x} qos {qos}");
            assert_eq!((seg.src_port, seg.dst_port, seg.payload_len), (1234, 80, 5));
        }
        let protected = data_frame(TO_DS | PROTECTED, false);
        let (decoded, _) = decode(|d, o| d.ieee80211(&protected, 100, meta, o));
        assert!(matches!(decoded, Decoded::Opaque(_)));
        let mut radiotap = vec![0, 0, 8, 0, 0, 0, 0, 0];
        radiotap.extend(data_frame(FROM_DS, false));
        let (decoded, _) = decode(|d, o| d.radiotap(&radiotap, radiotap.len() as u32, meta, o));
        assert_eq!(decoded, Decoded::Tcp(()));
    }

    #[test]
    fn capwap_carries_80211_or_ethernet() {
        let meta = PacketMeta::default();
        // HLEN 2 words, wireless binding 1, T bit set.
        let word: u32 = (2 << 19) | (1 << 9) | (1 << 8);
        let mut packet = word.to_be_bytes().to_vec();
        packet.extend_from_slice(&[0; 4]);
        packet.extend(data_frame(TO_DS, false));
        let (decoded, seg) = decode(|d, o| d.capwap(&packet, packet.len() as u32, meta, o));
        assert_eq!(decoded, Decoded::Tcp(()));
        assert_eq!(seg.dst_port, 80);
        for cut in 0..packet.len() {
            let _ = decode(|d, o| d.capwap(&packet[..cut], cut as u32, meta, o));
        }
    }
}
