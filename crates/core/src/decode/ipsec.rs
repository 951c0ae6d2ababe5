//! IPsec's headers that leave the payload readable: the Authentication Header (RFC 4302) and
//! IP payload compression (RFC 3173, DEFLATE); ESP's payload is encrypted and only counted.

use std::net::IpAddr;

use super::numbers::*;
use super::{decode_tcp, Decap, Decoded, PacketMeta, Segment};

impl Decap {
    /// The IPsec Authentication Header (RFC 4302 §2): its next header, its length in 4-byte
    /// words minus 2, then the protected payload, readable.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn authenticated(
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
                decode_tcp(inner, inner_len, src, dst, meta, (0, 0), out)
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
    pub(super) fn ipcomp(
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
            // The buffer is an IP packet's largest: a stream inflating past it is no packet.
            Ok(_) if inflated.len() == inflated.capacity() => {
                return Decoded::Undecodable("IPComp payload inflating past 64 KiB")
            }
            _ => return Decoded::Opaque("compressed (IPComp without its algorithm)"),
        }
        let len = inflated.len() as u32;
        if h[0] == IPPROTO_TCP {
            decode_tcp(&inflated, len, src, dst, meta, (0, 0), out)
        } else {
            self.ip_payload(h[0], &inflated, len, src, dst, meta, out)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const PAST_64_KIB: Decoded<u32> = Decoded::Undecodable("IPComp payload inflating past 64 KiB");

    /// An IPv4 packet carrying IPComp (RFC 3173 §2.2: next header TCP, CPI 2, DEFLATE) whose
    /// payload, a TCP segment of `inflated` bytes (a 20-byte header, zeros after it),
    /// compresses to at most a few kilobytes: raw deflate, as RFC 2394 sends it.
    fn ipcomp_packet(inflated: usize) -> Vec<u8> {
        let mut segment = vec![0u8; inflated];
        segment[0..2].copy_from_slice(&40000u16.to_be_bytes());
        segment[2..4].copy_from_slice(&80u16.to_be_bytes());
        segment[12] = 5 << 4;
        segment[13] = 0x18;
        let mut deflate =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        deflate.write_all(&segment).expect("deflate into memory");
        let compressed = deflate.finish().expect("deflate into memory");
        let total = u16::try_from(20 + 4 + compressed.len()).expect("zeros compress well");
        let mut p = crate::decode::tests::ipv4_header(total, IPPROTO_IPCOMP);
        p.extend_from_slice(&[IPPROTO_TCP, 0, 0, 2]);
        p.extend_from_slice(&compressed);
        p
    }

    /// The packet decoded, captured whole.
    fn decode(packet: &[u8]) -> Decoded<u32> {
        crate::decode::tests::decode(packet, packet.len() as u32)
    }

    /// A valid DEFLATE payload is read up to an IP packet's largest size (65,535 bytes); one
    /// inflating past it is no IP packet and is said so, not taken for another algorithm (the
    /// output buffer, an IP packet's largest, bounds the inflating: a 16 MiB bomb stops there).
    #[test]
    fn ipcomp_inflating_past_64_kib_is_said_so_not_another_algorithm() {
        assert_eq!(decode(&ipcomp_packet(60_000)), Decoded::Tcp(60_000 - 20));
        assert_eq!(
            decode(&ipcomp_packet(usize::from(u16::MAX))),
            Decoded::Tcp(u32::from(u16::MAX) - 20)
        );
        for inflated in [usize::from(u16::MAX) + 1, 70_000, 16 << 20] {
            assert_eq!(decode(&ipcomp_packet(inflated)), PAST_64_KIB, "{inflated}");
        }
    }
}
