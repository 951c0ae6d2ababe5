//! The numbers that name what follows a header, in one table: EtherTypes (IEEE 802), IP
//! protocol numbers and well-known UDP ports (IANA), PPP protocol numbers (RFC 1661 §2).

/// UDP port of VXLAN (RFC 7348 §5; IANA `vxlan`).
pub const VXLAN_PORT: u16 = 4789;
/// UDP port of VXLAN-GPE (draft-ietf-nvo3-vxlan-gpe; IANA `vxlan-gpe`).
pub const VXLAN_GPE_PORT: u16 = 4790;
/// UDP port of Geneve (RFC 8926 §3.3; IANA `geneve`).
pub const GENEVE_PORT: u16 = 6081;
/// UDP port of MPLS-in-UDP (RFC 7510 §3; IANA `mpls-udp`).
pub const MPLS_UDP_PORT: u16 = 6635;
/// UDP port of GTP-U, the mobile core's user plane (3GPP TS 29.281; IANA `gtp-user`).
pub const GTP_U_PORT: u16 = 2152;

/// UDP port of GRE in UDP (RFC 8086 §3; IANA `gre-in-udp`).
pub const GRE_IN_UDP_PORT: u16 = 4754;
/// UDP port of AYIYA, "anything in anything" (IANA `ayiya`).
pub const AYIYA_PORT: u16 = 5072;
/// UDP port of CAPWAP data, wireless controllers' tunnels (RFC 5415 §15.8).
pub const CAPWAP_DATA_PORT: u16 = 5247;

/// IPv4 in IP (RFC 2003).
pub const IPPROTO_IPIP: u8 = 4;
/// UDP (RFC 768).
pub const IPPROTO_UDP: u8 = 17;
/// IPv6 in IP (RFC 4213).
pub const IPPROTO_IPV6: u8 = 41;
/// GRE (RFC 2784).
pub const IPPROTO_GRE: u8 = 47;
/// IPsec Encapsulating Security Payload (RFC 4303): encrypted.
pub const IPPROTO_ESP: u8 = 50;
/// IPsec Authentication Header (RFC 4302): authenticated, readable.
pub const IPPROTO_AH: u8 = 51;
/// IP Payload Compression (RFC 3173).
pub const IPPROTO_IPCOMP: u8 = 108;
/// MPLS in IP (RFC 4023 §3).
pub const IPPROTO_MPLS: u8 = 137;

/// EtherType of IPv4 (IEEE 802 numbers; also GRE's protocol type and SLL's protocol).
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// An 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// An 802.1ad service tag (QinQ).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// The service tag's pre-standard value.
pub const ETHERTYPE_QINQ_OLD: u16 = 0x9100;
/// 802.1ah provider backbone bridging: a 4-byte I-TAG, then the customer's frame.
pub const ETHERTYPE_PBB: u16 = 0x88e7;
/// Cisco VN-Tag (802.1Qbh): a 4-byte tag, then the EtherType.
pub const ETHERTYPE_VNTAG: u16 = 0x8926;
/// Cisco FabricPath: a 2-byte FTag/TTL, then the classic Ethernet frame.
pub const ETHERTYPE_FABRICPATH: u16 = 0x8903;
/// MACsec (IEEE 802.1AE): the SecTAG, then the frame's EtherType, or its encryption.
pub const ETHERTYPE_MACSEC: u16 = 0x88e5;
/// MPLS unicast (RFC 3032).
pub const ETHERTYPE_MPLS: u16 = 0x8847;
/// MPLS multicast.
pub const ETHERTYPE_MPLS_MULTICAST: u16 = 0x8848;
/// PPPoE session stage (RFC 2516).
pub const ETHERTYPE_PPPOE_SESSION: u16 = 0x8864;
/// Transparent Ethernet bridging: an Ethernet frame follows (GRE NVGRE, Geneve).
pub const ETHERTYPE_TEB: u16 = 0x6558;
/// ERSPAN type I and II (GRE protocol type).
pub const ETHERTYPE_ERSPAN_I_II: u16 = 0x88be;
/// ERSPAN type III.
pub const ETHERTYPE_ERSPAN_III: u16 = 0x22eb;
/// WCCP redirection over GRE.
pub const ETHERTYPE_WCCP: u16 = 0x883e;
/// PPP, as PPTP's enhanced GRE carries it (RFC 2637 §4.1).
pub const ETHERTYPE_PPP: u16 = 0x880b;

/// GRE protocol types of Aruba's access-point tunnels (0x8200 to 0x8350 in steps of 0x10):
/// an 802.11 frame follows.
pub const GRE_ARUBA: std::ops::RangeInclusive<u16> = 0x8200..=0x8350;

/// PPP protocol number of IPv4 (RFC 1332).
pub const PPP_IPV4: u16 = 0x0021;
/// PPP protocol number of IPv6 (RFC 5072).
pub const PPP_IPV6: u16 = 0x0057;
/// PPP protocol number of MPLS (RFC 3032).
pub const PPP_MPLS: u16 = 0x0281;
/// TCP (RFC 9293).
pub const IPPROTO_TCP: u8 = 6;
