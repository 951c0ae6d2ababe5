//! Linux netfilter's log (`LINKTYPE_NFLOG`, what `tcpdump -i nflog:N` captures): a 4-byte
//! header (address family, version, group), then type-length-value attributes padded to 4
//! bytes, one of them (`NFULA_PAYLOAD`) the packet from its IP header on. The attributes'
//! lengths and types are in the capturing host's byte order (libpcap's `nflog.h`).

use super::{decode_ip, decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};

/// `NFULA_PAYLOAD` (include/uapi/linux/netfilter/nfnetlink_log.h).
const NFULA_PAYLOAD: u16 = 9;
/// Linux address families.
const AF_INET: u8 = 2;
const AF_INET6: u8 = 10;

/// The packet an NFLOG record carries.
pub fn decode(
    frame: &[u8],
    orig_len: u32,
    meta: PacketMeta,
    out: &mut Segment,
    decap: &mut Decap,
) -> Decoded<()> {
    let Some(&family) = frame.first() else {
        return Decoded::Undecodable("NFLOG header cut short");
    };
    // Little-endian hosts write most captures; a length that does not fit says otherwise.
    let payload = payload(frame, u16::from_le_bytes).or_else(|| payload(frame, u16::from_be_bytes));
    let Some((offset, len)) = payload else {
        return Decoded::NotTcp;
    };
    let packet = &frame[offset..];
    let wire_len = u32::try_from(len)
        .unwrap_or(u32::MAX)
        .min(orig_len.saturating_sub(offset as u32));
    match family {
        AF_INET => decode_ipv4(packet, wire_len, meta, out, decap),
        AF_INET6 => decode_ipv6(packet, wire_len, meta, out, decap),
        _ => decode_ip(packet, wire_len, meta, out, decap),
    }
}

/// Where the payload attribute's value starts and its length, reading the attributes'
/// lengths and types with `read`; `None` when there is none or the attributes do not fit.
fn payload(frame: &[u8], read: fn([u8; 2]) -> u16) -> Option<(usize, usize)> {
    let mut at = 4;
    while let Some(tlv) = frame.get(at..at + 4) {
        let len = usize::from(read([tlv[0], tlv[1]]));
        let kind = read([tlv[2], tlv[3]]);
        if len < 4 {
            return None;
        }
        if kind == NFULA_PAYLOAD {
            // The value may be cut by the snap length; the length says how long it was.
            return (at + 4 <= frame.len()).then_some((at + 4, len - 4));
        }
        at += len.div_ceil(4) * 4;
    }
    None
}
