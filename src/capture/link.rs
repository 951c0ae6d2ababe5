//! Link layers: finding the IP header inside a captured frame.
//!
//! Link-type numbers are the `LINKTYPE_*` values of <https://www.tcpdump.org/linktypes.html>,
//! which pcap and pcapng files carry.

use crate::decode::{decode_ip, decode_ipv4, decode_ipv6, Decoded, PacketMeta, Segment};

/// A link layer this crate decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II, with any number of 802.1Q / 802.1ad VLAN tags (`LINKTYPE_ETHERNET`, 1).
    Ethernet,
    /// Linux cooked capture v1, `tcpdump -i any` (`LINKTYPE_LINUX_SLL`, 113).
    LinuxSll,
    /// Linux cooked capture v2 (`LINKTYPE_LINUX_SLL2`, 276).
    LinuxSll2,
    /// Raw IP, version from the first nibble (`LINKTYPE_RAW` 101; `DLT_RAW` 12 and 14 in files
    /// written by old libpcap versions on some systems).
    RawIp,
    /// Raw IPv4 (`LINKTYPE_IPV4`, 228).
    Ipv4,
    /// Raw IPv6 (`LINKTYPE_IPV6`, 229).
    Ipv6,
    /// BSD loopback: a 4-byte address family in the capturing host's byte order
    /// (`LINKTYPE_NULL`, 0).
    Null,
    /// OpenBSD loopback: the same 4-byte address family in network byte order
    /// (`LINKTYPE_LOOP`, 108).
    Loop,
}

impl LinkType {
    /// The link type of a `LINKTYPE_*` number, or `None` when it is not one this crate reads.
    pub fn from_code(code: u32) -> Option<LinkType> {
        Some(match code {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::RawIp,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }

    /// Decodes one captured frame down to its TCP segment.
    ///
    /// `frame` holds the captured bytes (maybe cut by the snap length), `orig_len` the frame's
    /// length on the wire.
    pub fn decode(self, frame: &[u8], orig_len: u32, meta: PacketMeta) -> Decoded {
        let mut segment = Segment::UNSET;
        match self.decode_into(frame, orig_len, meta, &mut segment) {
            Decoded::Tcp(()) => Decoded::Tcp(segment),
            Decoded::NotTcp => Decoded::NotTcp,
            Decoded::Fragment => Decoded::Fragment,
            Decoded::Undecodable(reason) => Decoded::Undecodable(reason),
        }
    }

    /// [`LinkType::decode`], writing a TCP segment into `out` (see [`decode_ip`]).
    pub fn decode_into(
        self,
        frame: &[u8],
        orig_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
    ) -> Decoded<()> {
        let (network, offset) = match self {
            LinkType::Ethernet => match ethernet_payload(frame) {
                Ok(found) => found,
                Err(decoded) => return decoded,
            },
            // SLL: packet type, ARPHRD, address length, 8-byte address, then the protocol.
            LinkType::LinuxSll => match frame.get(14..16) {
                Some(p) => (
                    Network::from_ethertype(u16::from_be_bytes([p[0], p[1]])),
                    16,
                ),
                None => return Decoded::Undecodable("Linux cooked header cut short"),
            },
            // SLL2: the protocol comes first, the header is 20 bytes.
            LinkType::LinuxSll2 => match frame.get(0..2) {
                Some(p) if frame.len() >= 20 => (
                    Network::from_ethertype(u16::from_be_bytes([p[0], p[1]])),
                    20,
                ),
                _ => return Decoded::Undecodable("Linux cooked v2 header cut short"),
            },
            LinkType::RawIp => (Network::IpByVersion, 0),
            LinkType::Ipv4 => (Network::Ipv4, 0),
            LinkType::Ipv6 => (Network::Ipv6, 0),
            LinkType::Null | LinkType::Loop => match frame.get(0..4) {
                Some(af) => (
                    Network::from_bsd_family(self, [af[0], af[1], af[2], af[3]]),
                    4,
                ),
                None => return Decoded::Undecodable("loopback header cut short"),
            },
        };
        let packet = frame.get(offset..).unwrap_or_default();
        let wire_len = orig_len.saturating_sub(offset as u32);
        match network {
            Network::Ipv4 => decode_ipv4(packet, wire_len, meta, out),
            Network::Ipv6 => decode_ipv6(packet, wire_len, meta, out),
            Network::IpByVersion => decode_ip(packet, wire_len, meta, out),
            Network::Other => Decoded::NotTcp,
        }
    }
}

/// The protocol a link header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    Ipv4,
    Ipv6,
    /// Raw IP: the version nibble tells.
    IpByVersion,
    /// ARP, LLDP, or anything else without TCP.
    Other,
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// 802.1Q customer VLAN tag.
const ETHERTYPE_VLAN: u16 = 0x8100;
/// 802.1ad service VLAN tag (QinQ outer tag).
const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Pre-standard QinQ outer tag still used by some switches.
const ETHERTYPE_QINQ_OLD: u16 = 0x9100;

impl Network {
    fn from_ethertype(ethertype: u16) -> Network {
        match ethertype {
            ETHERTYPE_IPV4 => Network::Ipv4,
            ETHERTYPE_IPV6 => Network::Ipv6,
            _ => Network::Other,
        }
    }

    /// BSD `AF_INET` is 2 everywhere; `AF_INET6` is 24 (NetBSD, OpenBSD), 28 (FreeBSD) or
    /// 30 (macOS), so a capture from any of them reads here.
    fn from_bsd_family(link: LinkType, bytes: [u8; 4]) -> Network {
        let family = match link {
            LinkType::Loop => u32::from_be_bytes(bytes),
            // DLT_NULL is in the writer's byte order: family numbers are small, so the
            // order whose high half is zero is the right one.
            _ if bytes[0] == 0 && bytes[1] == 0 => u32::from_be_bytes(bytes),
            _ => u32::from_le_bytes(bytes),
        };
        match family {
            2 => Network::Ipv4,
            24 | 28 | 30 => Network::Ipv6,
            _ => Network::Other,
        }
    }
}

/// Finds the network header after an Ethernet header and its VLAN tags.
fn ethernet_payload(frame: &[u8]) -> Result<(Network, usize), Decoded<()>> {
    const TYPE_OFFSET: usize = 12;
    let mut offset = TYPE_OFFSET;
    loop {
        let Some(t) = frame.get(offset..offset + 2) else {
            return Err(Decoded::Undecodable("Ethernet header cut short"));
        };
        match u16::from_be_bytes([t[0], t[1]]) {
            // A tag is 2 bytes of TPID (just read) and 2 of TCI; the inner type follows.
            ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_QINQ_OLD => offset += 4,
            ethertype => return Ok((Network::from_ethertype(ethertype), offset + 2)),
        }
    }
}

/// A readable name for a `LINKTYPE_*` number, for error messages.
pub fn link_type_name(code: u32) -> String {
    match code {
        // Names libpcap gives, for the types that turn up in practice but carry no IP here.
        105 => "IEEE802_11 (Wi-Fi)".to_string(),
        127 => "IEEE802_11_RADIOTAP (Wi-Fi with radiotap)".to_string(),
        147..=162 => format!("USER{} (private use)", code - 147),
        239 => "NFLOG (netfilter log)".to_string(),
        252 => "WIRESHARK_UPPER_PDU".to_string(),
        _ => match i32::try_from(code) {
            Ok(c) => pcap_parser::Linktype(c).to_string(),
            Err(_) => "unknown".to_string(),
        },
    }
}
