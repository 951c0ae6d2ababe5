//! Link layers: finding the IP header inside a captured frame.
//!
//! Link-type numbers are the `LINKTYPE_*` values of <https://www.tcpdump.org/linktypes.html>,
//! which pcap and pcapng files carry.

use super::arcnet::arcnet;
use super::juniper::{juniper_header_len, Juniper};
use super::numbers::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::ppp::cisco_hdlc;
use super::{decode_ip, decode_ipv4, decode_ipv6, Decap, Decoded, PacketMeta, Segment};
use crate::decode::ethernet_payload;

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
    /// PPP, from its address and control bytes or its protocol field (`LINKTYPE_PPP`, 9).
    Ppp,
    /// PPP in HDLC-like framing (RFC 1662), or Cisco HDLC on the same link
    /// (`LINKTYPE_PPP_HDLC`, 50).
    PppHdlc,
    /// PPPoE without its Ethernet header (`LINKTYPE_PPP_ETHER`, 51).
    PppEther,
    /// Cisco HDLC: address, control, then an Ethertype (`LINKTYPE_C_HDLC`, 104).
    CiscoHdlc,
    /// ARCnet with the RFC 1051 or RFC 1201 header (`LINKTYPE_ARCNET_BSD`, 7).
    ArcnetBsd,
    /// ARCnet as Linux captures it, with a 2-byte offset field (`LINKTYPE_ARCNET_LINUX`, 129).
    ArcnetLinux,
    /// IP over InfiniBand (RFC 4391) as Linux captures it, a 44-byte header
    /// (`LINKTYPE_IPOIB`, 242).
    IpOverInfiniband,
    /// Solaris ipnet: a 24-byte header with the address family (`LINKTYPE_IPNET`, 226).
    Ipnet,
    /// Juniper routers' captures, their pseudo-header then Ethernet (`LINKTYPE_JUNIPER_ETHER`,
    /// 178). Variants without fields, one per frame kind: the common link types' dispatch
    /// stays one byte compare.
    JuniperEthernet,
    /// Juniper pseudo-header, a cookie, then Ethernet (`LINKTYPE_JUNIPER_PPPOE`, 167).
    JuniperPppoe,
    /// Juniper pseudo-header, then PPP (`LINKTYPE_JUNIPER_PPP`, 179).
    JuniperPpp,
    /// 802.11 frames (`LINKTYPE_IEEE802_11`, 105).
    Ieee80211,
    /// 802.11 behind a radiotap header (`LINKTYPE_IEEE802_11_RADIOTAP`, 127).
    Radiotap,
    /// 802.11 behind a PPI header (`LINKTYPE_PPI`, 192).
    Ppi,
    /// FDDI: frame control, two addresses, then LLC (`LINKTYPE_FDDI`, 10).
    Fddi,
    /// Linux netfilter's log (`LINKTYPE_NFLOG`, 239): TLVs, one of them the IP packet.
    Nflog,
    /// SLIP with libpcap's 16-byte pseudo-header (`LINKTYPE_SLIP`, 8).
    Slip,
    /// Ethernet with a Broadcom switch tag before the EtherType (`LINKTYPE_DSA_TAG_BRCM`, 281).
    DsaBrcm,
    /// A Broadcom switch tag before the Ethernet header (`LINKTYPE_DSA_TAG_BRCM_PREPEND`, 282).
    DsaBrcmPrepend,
    /// Ethernet with a Marvell DSA tag (`LINKTYPE_DSA_TAG_DSA`, 284).
    DsaMarvell,
    /// Ethernet with a Marvell EtherType DSA tag (`LINKTYPE_DSA_TAG_EDSA`, 285).
    DsaMarvellEdsa,
    /// Juniper pseudo-header, then Cisco HDLC (`LINKTYPE_JUNIPER_CHDLC`, 183).
    JuniperCiscoHdlc,
}

impl LinkType {
    /// The link type of a `LINKTYPE_*` number, or `None` when it is not one this crate reads.
    pub fn from_code(code: u32) -> Option<LinkType> {
        Some(match code {
            0 => LinkType::Null,
            1 => LinkType::Ethernet,
            8 => LinkType::Slip,
            10 => LinkType::Fddi,
            105 => LinkType::Ieee80211,
            127 => LinkType::Radiotap,
            192 => LinkType::Ppi,
            239 => LinkType::Nflog,
            281 => LinkType::DsaBrcm,
            282 => LinkType::DsaBrcmPrepend,
            284 => LinkType::DsaMarvell,
            285 => LinkType::DsaMarvellEdsa,
            7 => LinkType::ArcnetBsd,
            9 => LinkType::Ppp,
            12 | 14 | 101 => LinkType::RawIp,
            50 => LinkType::PppHdlc,
            51 => LinkType::PppEther,
            104 => LinkType::CiscoHdlc,
            108 => LinkType::Loop,
            113 => LinkType::LinuxSll,
            129 => LinkType::ArcnetLinux,
            167 => LinkType::JuniperPppoe,
            178 => LinkType::JuniperEthernet,
            179 => LinkType::JuniperPpp,
            183 => LinkType::JuniperCiscoHdlc,
            226 => LinkType::Ipnet,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            242 => LinkType::IpOverInfiniband,
            276 => LinkType::LinuxSll2,
            _ => return None,
        })
    }

    /// Decodes one captured frame down to its TCP segment, following tunnels on the IANA
    /// ports.
    ///
    /// `frame` holds the captured bytes (maybe cut by the snap length), `orig_len` the frame's
    /// length on the wire.
    pub fn decode(self, frame: &[u8], orig_len: u32, meta: PacketMeta) -> Decoded {
        let mut segment = Segment::UNSET;
        match self.decode_into(frame, orig_len, meta, &mut segment, &mut Decap::default()) {
            Decoded::Tcp(()) => Decoded::Tcp(segment),
            Decoded::NotTcp => Decoded::NotTcp,
            Decoded::Fragment => Decoded::Fragment,
            Decoded::Undecodable(reason) => Decoded::Undecodable(reason),
            Decoded::Opaque(what) => Decoded::Opaque(what),
            Decoded::Unsupported(what) => Decoded::Unsupported(what),
        }
    }

    /// [`LinkType::decode`], writing a TCP segment into `out` (see [`decode_ip`]) and
    /// following tunnels through `decap`.
    pub fn decode_into(
        self,
        frame: &[u8],
        orig_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
        decap: &mut Decap,
    ) -> Decoded<()> {
        let (network, offset) = match self {
            LinkType::Ethernet => match ethernet_payload(frame) {
                Ok((ethertype, offset)) => (Network::from_ethertype(ethertype), offset),
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
            _ => return self.decode_uncommon(frame, orig_len, meta, out, decap),
        };
        let packet = frame.get(offset..).unwrap_or_default();
        let wire_len = orig_len.saturating_sub(offset as u32);
        match network {
            Network::Ipv4 => decode_ipv4(packet, wire_len, meta, out, decap),
            Network::Ipv6 => decode_ipv6(packet, wire_len, meta, out, decap),
            Network::IpByVersion => decode_ip(packet, wire_len, meta, out, decap),
            Network::Ethertype(ethertype) => {
                decap.ethertype(ethertype, packet, wire_len, meta, out)
            }
            Network::Other => Decoded::NotTcp,
        }
    }

    /// The link types seen less often, out of the common types' way. Their framing is
    /// written here: pcap-parser reads the file blocks but no link header, and etherparse
    /// 0.21 knows Ethernet and Linux cooked headers only.
    #[cold]
    #[inline(never)]
    fn decode_uncommon(
        self,
        frame: &[u8],
        orig_len: u32,
        meta: PacketMeta,
        out: &mut Segment,
        decap: &mut Decap,
    ) -> Decoded<()> {
        let (header_len, what) = match self {
            // Cisco HDLC's address byte is 0x0f (unicast) or 0x8f (broadcast); PPP's is 0xff
            // or absent (tcpdump's ppp_hdlc_if_print tells them apart the same way). Routers
            // write either under both link types.
            LinkType::Ppp | LinkType::PppHdlc => match frame.first() {
                Some(0x0f | 0x8f) => return cisco_hdlc(frame, orig_len, meta, out, decap),
                _ => return decap.ppp(frame, orig_len, meta, out),
            },
            // The 6-byte PPPoE session header (RFC 2516 §4), then PPP.
            LinkType::PppEther => (6, Payload::Ppp),
            LinkType::CiscoHdlc => return cisco_hdlc(frame, orig_len, meta, out, decap),
            LinkType::ArcnetBsd | LinkType::ArcnetLinux => match arcnet(self, frame) {
                Ok(found) => found,
                Err(decoded) => return decoded,
            },
            // 20-byte destination and 20-byte source hardware addresses, the Ethertype, 2
            // reserved bytes (tcpdump's print-ipoib.c; RFC 4391 §6 has the last 4 alone).
            LinkType::IpOverInfiniband => match frame.get(40..42) {
                Some(t) => (44, Payload::Ethertype(u16::from_be_bytes([t[0], t[1]]))),
                None => return Decoded::Undecodable("IP over InfiniBand header cut short"),
            },
            // Version, address family (Solaris AF_INET 2, AF_INET6 26), then 22 bytes of
            // lengths, interface indexes and zones.
            LinkType::Ipnet => match frame.get(1) {
                Some(2) => (24, Payload::Ethertype(ETHERTYPE_IPV4)),
                Some(26) => (24, Payload::Ethertype(ETHERTYPE_IPV6)),
                Some(_) => return Decoded::NotTcp,
                None => return Decoded::Undecodable("ipnet header cut short"),
            },
            LinkType::JuniperEthernet
            | LinkType::JuniperPppoe
            | LinkType::JuniperPpp
            | LinkType::JuniperCiscoHdlc => {
                match juniper_header_len(frame, self == LinkType::JuniperPppoe) {
                    Ok(Juniper::NoL2(len)) => (len, Payload::IpByVersion),
                    Ok(Juniper::Frame(len)) => (
                        len,
                        match self {
                            LinkType::JuniperPpp => Payload::Ppp,
                            LinkType::JuniperCiscoHdlc => Payload::CiscoHdlc,
                            _ => Payload::Ethernet,
                        },
                    ),
                    Err(decoded) => return decoded,
                }
            }
            LinkType::Ieee80211 => (0, Payload::Ieee80211),
            LinkType::Radiotap => (0, Payload::Radiotap),
            LinkType::Ppi => (0, Payload::Ppi),
            LinkType::Fddi => (13, Payload::Llc),
            LinkType::Nflog => return super::nflog::decode(frame, orig_len, meta, out, decap),
            // libpcap's pseudo-header: direction, then 15 bytes of the compressed header.
            LinkType::Slip => match frame.get(16) {
                Some(b) if b >> 4 == 4 || b >> 4 == 6 => (16, Payload::IpByVersion),
                Some(_) => return Decoded::Unsupported("Van Jacobson compressed SLIP"),
                None => return Decoded::Undecodable("SLIP header cut short"),
            },
            // The switch's tag between the addresses and the EtherType: 4 bytes, 8 for EDSA.
            LinkType::DsaBrcm | LinkType::DsaMarvell => (0, Payload::EthernetTagged(4)),
            LinkType::DsaMarvellEdsa => (0, Payload::EthernetTagged(8)),
            LinkType::DsaBrcmPrepend => (4, Payload::Ethernet),
            _ => return Decoded::NotTcp,
        };
        let Some(inner) = frame.get(header_len..) else {
            return Decoded::Undecodable("link header cut short");
        };
        let wire_len = orig_len.saturating_sub(header_len as u32);
        match what {
            Payload::Ethertype(ethertype) => decap.ethertype(ethertype, inner, wire_len, meta, out),
            Payload::Ethernet => decap.ethernet(inner, wire_len, meta, out),
            Payload::Ppp => decap.ppp(inner, wire_len, meta, out),
            Payload::CiscoHdlc => cisco_hdlc(inner, wire_len, meta, out, decap),
            Payload::IpByVersion => decode_ip(inner, wire_len, meta, out, decap),
            Payload::LinkFragment => Decoded::Fragment,
            Payload::Llc => decap.llc(inner, wire_len, meta, out),
            Payload::Ieee80211 => decap.ieee80211(inner, wire_len, meta, out),
            Payload::Radiotap => decap.radiotap(inner, wire_len, meta, out),
            Payload::Ppi => decap.ppi(inner, wire_len, meta, out),
            Payload::EthernetTagged(tag) => match inner.get(12 + tag..14 + tag) {
                Some(t) => decap.ethertype(
                    u16::from_be_bytes([t[0], t[1]]),
                    &inner[14 + tag..],
                    wire_len.saturating_sub((14 + tag) as u32),
                    meta,
                    out,
                ),
                None => Decoded::Undecodable("switch tag header cut short"),
            },
        }
    }
}

/// What follows an uncommon link header.
pub(super) enum Payload {
    Ethertype(u16),
    Ethernet,
    Ppp,
    CiscoHdlc,
    IpByVersion,
    /// A non-first piece of a frame the link layer fragmented (ARCnet, RFC 1201 §2.1).
    LinkFragment,
    /// 802.2 LLC (SNAP for IP).
    Llc,
    /// An 802.11 frame, bare or behind a radio header.
    Ieee80211,
    Radiotap,
    Ppi,
    /// Ethernet addresses, a switch tag of this many bytes, then the EtherType.
    EthernetTagged(usize),
}

/// The protocol a link header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Network {
    Ipv4,
    Ipv6,
    /// Raw IP: the version nibble tells.
    IpByVersion,
    /// Another Ethertype, which may carry IP further in (MPLS, PPPoE).
    Ethertype(u16),
    /// ARP, LLDP, or anything else without TCP.
    Other,
}

impl Network {
    #[inline(always)]
    fn from_ethertype(ethertype: u16) -> Network {
        match ethertype {
            ETHERTYPE_IPV4 => Network::Ipv4,
            ETHERTYPE_IPV6 => Network::Ipv6,
            other => Network::Ethertype(other),
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
