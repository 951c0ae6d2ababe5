//! ARCnet (RFC 1051, RFC 1201), as BSD and Linux capture it.

use super::link::{LinkType, Payload};
use super::numbers::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::Decoded;

/// The ARCnet header's length and what follows it (tcpdump's print-arcnet.c). The BSD header
/// is source, destination and type; Linux puts a 2-byte offset before the type. The old
/// RFC 1051 types end there; the RFC 1201 ones add a split flag and a sequence number, and an
/// exception frame (flag 0xff) repeats type, flag and sequence number.
pub(super) fn arcnet(link: LinkType, frame: &[u8]) -> Result<(usize, Payload), Decoded<()>> {
    const IP_RFC1051: u8 = 240;
    const ARP_RFC1051: u8 = 241;
    const DIAGNOSE: u8 = 0x80;
    const IP_RFC1201: u8 = 212;
    const IPV6: u8 = 0xc4;
    let type_at = if link == LinkType::ArcnetLinux { 4 } else { 2 };
    let Some(&arc_type) = frame.get(type_at) else {
        return Err(Decoded::Undecodable("ARCnet header cut short"));
    };
    let rfc1051 = matches!(arc_type, IP_RFC1051 | ARP_RFC1051 | DIAGNOSE);
    let (header_len, split_flag) = if rfc1051 {
        (type_at + 1, 0)
    } else {
        let Some(&flag) = frame.get(type_at + 1) else {
            return Err(Decoded::Undecodable("ARCnet header cut short"));
        };
        match (link, flag) {
            (LinkType::ArcnetBsd, 0xff) => match frame.get(type_at + 5) {
                Some(&real_flag) => (type_at + 8, real_flag),
                None => return Err(Decoded::Undecodable("ARCnet exception header cut short")),
            },
            _ => (type_at + 4, flag),
        }
    };
    // Split packets (RFC 1201 §2.1): only the first piece (odd flag) holds the IP header.
    if link == LinkType::ArcnetBsd && split_flag != 0 && split_flag & 1 == 0 {
        return Ok((header_len, Payload::LinkFragment));
    }
    let payload = match arc_type {
        IP_RFC1051 | IP_RFC1201 => Payload::Ethertype(ETHERTYPE_IPV4),
        IPV6 => Payload::Ethertype(ETHERTYPE_IPV6),
        _ => Payload::Ethertype(0),
    };
    Ok((header_len, payload))
}
