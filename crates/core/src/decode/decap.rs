//! The decapsulation state of one reader, and what it tells about a packet: the tunnels and
//! overlays whose inner packets are the connections to analyse, the depth bound, and the
//! outermost tunnel's endpoints ([`Outer`]), kept apart as context, never part of the segment,
//! so the flow key is the inner 4-tuple. Each header is read in a file of its own beside this
//! one (`ethernet.rs`, `ip_payload.rs`, `gre.rs`, `udp_overlays.rs`, `mpls.rs`, `ppp.rs`,
//! `ipsec.rs`, `llc.rs`, `wireless.rs`), as methods of [`Decap`].
//!
//! Written here rather than through etherparse: etherparse 0.21 slices Ethernet, VLAN, MACsec,
//! IP (IP-in-IP only as one more IP header) and the transports, but knows none of VXLAN,
//! Geneve, GRE, ERSPAN, MPLS or PPPoE, and decoding through it would also give up this
//! decoder's in-place writing of the segment. Every header here is a few fixed fields.

use std::net::IpAddr;

use super::{Decoded, Segment};

/// Tunnels nested deeper than this are refused: a crafted capture (GRE in GRE in GRE...)
/// must not make the decoder recurse without end. Real stacks are 2 or 3 deep.
pub const MAX_NESTING: u8 = 8;

use super::numbers::{GENEVE_PORT, VXLAN_PORT};

/// The kind of tunnel a segment was carried in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TunnelKind {
    /// VXLAN (RFC 7348) or VXLAN-GPE.
    Vxlan,
    /// Geneve (RFC 8926).
    Geneve,
    /// GRE (RFC 2784, RFC 2890), PPTP's enhanced GRE, ERSPAN and WCCP included.
    Gre,
    /// IPv4 or IPv6 directly in IPv4 or IPv6 (RFC 2003, RFC 4213, RFC 2473).
    IpInIp,
    /// MPLS in IP or UDP (RFC 4023, RFC 7510).
    Mpls,
    /// GTP-U (3GPP TS 29.281).
    GtpU,
    /// AYIYA, "anything in anything" over UDP (IPv6 tunnel brokers).
    Ayiya,
    /// CAPWAP data, from a wireless access point to its controller (RFC 5415).
    Capwap,
}

impl TunnelKind {
    /// The name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            TunnelKind::Vxlan => "vxlan",
            TunnelKind::Geneve => "geneve",
            TunnelKind::Gre => "gre",
            TunnelKind::IpInIp => "ipip",
            TunnelKind::Mpls => "mpls",
            TunnelKind::GtpU => "gtpu",
            TunnelKind::Ayiya => "ayiya",
            TunnelKind::Capwap => "capwap",
        }
    }
}

/// The outermost IP tunnel a segment arrived in: context for a flow, never part of its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Outer {
    /// What the tunnel is.
    pub kind: TunnelKind,
    /// The tunnel's source endpoint (outer IP source).
    pub src: IpAddr,
    /// The tunnel's destination endpoint (outer IP destination).
    pub dst: IpAddr,
}

/// Which UDP ports carry overlays, beyond the IANA ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DecapConfig {
    /// More UDP ports read as VXLAN (e.g. 8472, the Linux kernel's and flannel's old default).
    pub vxlan_ports: Vec<u16>,
    /// More UDP ports read as Geneve.
    pub geneve_ports: Vec<u16>,
}

/// The decapsulation state of one reader: which ports carry what, how deep the packet being
/// decoded is nested, and the outer endpoints found in it.
#[derive(Debug, Clone)]
pub struct Decap {
    /// UDP ports read as VXLAN.
    pub(super) vxlan_ports: Vec<u16>,
    /// UDP ports read as Geneve.
    pub(super) geneve_ports: Vec<u16>,
    depth: u8,
    outer: Option<Outer>,
    /// The wire length handed on to the IP decoder is its packet's own, from an
    /// encapsulation's header (PPPoE's LENGTH), not the capture's: an IP length beyond it
    /// counts the frame's padding. Taken by the IP decoder.
    pub(super) length_exact: bool,
}

impl Default for Decap {
    fn default() -> Self {
        Decap::new(&DecapConfig::default())
    }
}

impl Decap {
    /// A decapsulator reading the IANA ports and those of `config`.
    pub fn new(config: &DecapConfig) -> Decap {
        let mut vxlan_ports = vec![VXLAN_PORT];
        vxlan_ports.extend(&config.vxlan_ports);
        let mut geneve_ports = vec![GENEVE_PORT];
        geneve_ports.extend(&config.geneve_ports);
        Decap {
            vxlan_ports,
            geneve_ports,
            depth: 0,
            length_exact: false,
            outer: None,
        }
    }

    /// The outermost tunnel of the packet just decoded, cleared for the next packet.
    #[inline(always)]
    pub fn take_outer(&mut self) -> Option<Outer> {
        if self.outer.is_some() {
            self.outer.take()
        } else {
            None
        }
    }

    /// Runs `inner` one level deeper, refusing past [`MAX_NESTING`]; records the outer
    /// endpoints when this is the outermost IP tunnel.
    pub(super) fn nested(
        &mut self,
        outer: Option<Outer>,
        inner: impl FnOnce(&mut Decap) -> Decoded<()>,
    ) -> Decoded<()> {
        if self.depth >= MAX_NESTING {
            return Decoded::Undecodable("tunnels nested more than 8 deep");
        }
        if self.outer.is_none() {
            self.outer = outer;
        }
        self.depth += 1;
        let decoded = inner(self);
        self.depth -= 1;
        decoded
    }
}

/// The outer tunnel of each tunnelled connection, by its inner endpoints (either order):
/// what `--flows` and the JSON flow's `outer` report. The first tunnel seen for a
/// connection is kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OuterByFlow(rustc_hash::FxHashMap<[(IpAddr, u16); 2], Outer>);

impl OuterByFlow {
    fn key(a: (IpAddr, u16), b: (IpAddr, u16)) -> [(IpAddr, u16); 2] {
        if a <= b {
            [a, b]
        } else {
            [b, a]
        }
    }

    /// Notes that `segment` came in `outer`.
    pub fn record(&mut self, segment: &Segment, outer: Outer) {
        let key = Self::key(
            (segment.src, segment.src_port),
            (segment.dst, segment.dst_port),
        );
        self.0.entry(key).or_insert(outer);
    }

    /// The tunnel of the connection between `a` and `b`, if it came in one.
    pub fn get(&self, a: (IpAddr, u16), b: (IpAddr, u16)) -> Option<&Outer> {
        if self.0.is_empty() {
            return None;
        }
        self.0.get(&Self::key(a, b))
    }
}

impl std::fmt::Display for Outer {
    /// `vxlan 192.0.2.1>192.0.2.2`: the tunnel and its endpoints, source first.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}>{}", self.kind.name(), self.src, self.dst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{decode_ip, PacketMeta};
    use etherparse::PacketBuilder;

    const META: PacketMeta = PacketMeta {
        ts_ns: 1,
        packet_number: 1,
    };

    /// An IPv4 TCP segment from 10.0.0.1:40000 to 10.0.0.2:80 with 5 payload bytes.
    fn inner_ipv4() -> Vec<u8> {
        let mut buf = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 7, 1000)
            .write(&mut buf, b"hello")
            .unwrap();
        buf
    }

    /// An IPv4 header around `payload` with protocol `protocol`.
    fn ipv4(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut p = vec![0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, protocol, 0, 0];
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2]);
        p.extend_from_slice(payload);
        p
    }

    /// An IPv6 header around `payload` with next header `next`.
    fn ipv6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        p.extend_from_slice(&[next, 64]);
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        p.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(4));
        p.extend_from_slice(payload);
        p
    }

    fn ethernet(ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn udp(dst_port: u16, payload: &[u8]) -> Vec<u8> {
        let mut u = vec![0xc0, 0x00];
        u.extend_from_slice(&dst_port.to_be_bytes());
        u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        u.extend_from_slice(&[0, 0]);
        u.extend_from_slice(payload);
        u
    }

    fn gre(flags: u16, protocol: u16, extra: usize, payload: &[u8]) -> Vec<u8> {
        let mut g = flags.to_be_bytes().to_vec();
        g.extend_from_slice(&protocol.to_be_bytes());
        g.extend(std::iter::repeat_n(0xaa, extra));
        g.extend_from_slice(payload);
        g
    }

    /// Decodes an outer IPv4 or IPv6 packet; the segment and the outer tunnel.
    fn decode(packet: &[u8], decap: &mut Decap) -> (Decoded<()>, Segment, Option<Outer>) {
        let mut seg = Segment::UNSET;
        let decoded = decode_ip(packet, packet.len() as u32, META, &mut seg, decap);
        (decoded, seg, decap.take_outer())
    }

    fn assert_inner(packet: &[u8], kind: TunnelKind) {
        let (decoded, seg, outer) = decode(packet, &mut Decap::default());
        assert_eq!(decoded, Decoded::Tcp(()), "{kind:?}");
        assert_eq!(
            (seg.src_port, seg.dst_port, seg.payload_len),
            (40000, 80, 5),
            "{kind:?}"
        );
        assert_eq!(seg.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(outer.map(|o| o.kind), Some(kind));
    }

    #[test]
    fn vxlan_and_geneve_with_options() {
        let vxlan = [
            &[0x08, 0, 0, 0, 0, 0, 42, 0][..],
            &ethernet(0x0800, &inner_ipv4()),
        ]
        .concat();
        assert_inner(&ipv4(17, &udp(VXLAN_PORT, &vxlan)), TunnelKind::Vxlan);
        assert_inner(&ipv6(17, &udp(VXLAN_PORT, &vxlan)), TunnelKind::Vxlan);
        // Two option words, protocol IPv4 directly.
        let geneve = [
            &[0x02, 0, 0x08, 0x00, 0, 0, 42, 0, 1, 2, 3, 4, 5, 6, 7, 8][..],
            &inner_ipv4(),
        ]
        .concat();
        assert_inner(&ipv4(17, &udp(GENEVE_PORT, &geneve)), TunnelKind::Geneve);
        // Not a VXLAN port unless asked.
        let on_8472 = ipv4(17, &udp(8472, &vxlan));
        assert_eq!(decode(&on_8472, &mut Decap::default()).0, Decoded::NotTcp);
        let mut extra = Decap::new(&DecapConfig {
            vxlan_ports: vec![8472],
            geneve_ports: vec![],
        });
        assert_eq!(decode(&on_8472, &mut extra).0, Decoded::Tcp(()));
    }

    #[test]
    fn gre_with_its_optional_fields_erspan_and_wccp() {
        let inner = inner_ipv4();
        assert_inner(&ipv4(47, &gre(0, 0x0800, 0, &inner)), TunnelKind::Gre);
        // Checksum, key and sequence: 12 more bytes.
        assert_inner(&ipv4(47, &gre(0xb000, 0x0800, 12, &inner)), TunnelKind::Gre);
        assert_inner(
            &ipv6(47, &gre(0x2000, 0x6558, 4, &ethernet(0x0800, &inner))),
            TunnelKind::Gre,
        );
        let frame = ethernet(0x0800, &inner);
        // ERSPAN I (no sequence, no header), II (sequence, 8 bytes), III (12 bytes).
        assert_inner(&ipv4(47, &gre(0, 0x88be, 0, &frame)), TunnelKind::Gre);
        assert_inner(
            &ipv4(47, &gre(0x1000, 0x88be, 4 + 8, &frame)),
            TunnelKind::Gre,
        );
        let erspan3 = [&[0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0][..], &frame].concat();
        assert_inner(
            &ipv4(47, &gre(0x1000, 0x22eb, 4, &erspan3)),
            TunnelKind::Gre,
        );
        // WCCP with and without the redirect header.
        assert_inner(&ipv4(47, &gre(0, 0x883e, 0, &inner)), TunnelKind::Gre);
        let redirect = [&[0x00, 0x01, 0x02, 0x03][..], &inner].concat();
        assert_inner(&ipv4(47, &gre(0, 0x883e, 0, &redirect)), TunnelKind::Gre);
    }

    #[test]
    fn ip_in_ip_mpls_and_pppoe() {
        let inner = inner_ipv4();
        assert_inner(&ipv4(4, &inner), TunnelKind::IpInIp);
        assert_inner(&ipv6(4, &inner), TunnelKind::IpInIp);
        let inner6 = ipv4(41, &ipv6(41, &ipv6(4, &inner)));
        assert_inner(&inner6, TunnelKind::IpInIp);
        // Two labels, the second bottom of stack; in GRE.
        let mpls = [&[0, 1, 0x20, 64, 0, 2, 0x01, 64][..], &inner].concat();
        assert_inner(&ipv4(47, &gre(0, 0x8847, 0, &mpls)), TunnelKind::Gre);
        assert_inner(&ipv4(137, &mpls), TunnelKind::Mpls);
        // PPPoE session in Ethernet, reached from the link layer: no outer IP.
        let pppoe = [&[0x11, 0, 0, 1, 0, 0, 0x00, 0x21][..], &inner].concat();
        let frame = ethernet(0x8864, &pppoe);
        let mut seg = Segment::UNSET;
        let mut decap = Decap::default();
        assert_eq!(
            decap.ethernet(&frame, frame.len() as u32, META, &mut seg),
            Decoded::Tcp(())
        );
        assert_eq!(seg.dst_port, 80);
        assert_eq!(decap.take_outer(), None);
    }

    /// A pure ACK in PPPoE, padded to Ethernet's minimum after a router wrote the padding
    /// into the IPv4 total length (46 for 40 bytes): the PPPoE LENGTH (42: PPP's 2 and the
    /// 40) and the frame bound it, so the padding is no data (as tshark reads it).
    #[test]
    fn pppoe_padding_counted_in_the_ip_length_is_no_data() {
        let mut ack = Vec::new();
        PacketBuilder::ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(40000, 80, 7, 1000)
            .write(&mut ack, b"")
            .unwrap();
        ack[2..4].copy_from_slice(&46u16.to_be_bytes());
        let session = [&[0x11, 0, 0, 1, 0, 42, 0x00, 0x21][..], &ack, &[0; 6]].concat();
        let frame = ethernet(0x8864, &session);
        let mut seg = Segment::UNSET;
        let decoded = Decap::default().ethernet(&frame, frame.len() as u32, META, &mut seg);
        assert_eq!(decoded, Decoded::Tcp(()));
        assert_eq!((seg.dst_port, seg.payload_len), (80, 0));
    }

    #[test]
    fn nesting_is_bounded() {
        let mut packet = inner_ipv4();
        for _ in 0..(MAX_NESTING as usize + 1) {
            packet = ipv4(4, &packet);
        }
        let mut decap = Decap::default();
        let (decoded, _, _) = decode(&packet, &mut decap);
        assert_eq!(
            decoded,
            Decoded::Undecodable("tunnels nested more than 8 deep")
        );
        // The depth is back to zero for the next packet.
        assert_inner(&ipv4(4, &inner_ipv4()), TunnelKind::IpInIp);
        assert_eq!(decap.depth, 0);
    }

    #[test]
    fn cut_tunnel_headers_are_undecodable_not_panics() {
        let vxlan = [
            &[0x08, 0, 0, 0, 0, 0, 42, 0][..],
            &ethernet(0x0800, &inner_ipv4()),
        ]
        .concat();
        let full = ipv4(17, &udp(VXLAN_PORT, &vxlan));
        for cut in 20..full.len() {
            let mut seg = Segment::UNSET;
            let _ = decode_ip(
                &full[..cut],
                full.len() as u32,
                META,
                &mut seg,
                &mut Decap::default(),
            );
        }
    }
}
