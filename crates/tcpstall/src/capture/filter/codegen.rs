//! Classic BPF (`Documentation/networking/filter.rst`) for a parsed filter expression, on the
//! frames a Linux packet socket hands over: an Ethernet header, a bare IP packet (TUN), or the
//! network header of a cooked (`SOCK_DGRAM`, `-i any`) socket, whose protocol is the
//! ancillary load `SKF_AD_PROTOCOL`. Linux strips 802.1Q tags before the tap
//! (`skb_vlan_untag`), so IP follows the Ethernet header and `vlan` is the ancillary
//! `SKF_AD_VLAN_TAG*` loads, as libpcap compiles it for a live Linux capture.
//!
//! Each test jumps straight to the true or false branch of its parent (short-circuit code):
//! the labels are resolved once the program is laid out; every jump goes forward.

use std::net::IpAddr;

use super::expr::{Direction, Expr, Primitive, Transport};
use super::program::{Label, Program};
use super::Framing;
use crate::decode::numbers::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

/// Width of a load.
#[derive(Debug, Clone, Copy)]
enum Width {
    Byte,
    Half,
    Word,
}

/// Where a load's offset counts from.
#[derive(Debug, Clone, Copy)]
enum Base {
    /// The start of the IP header.
    Network,
    /// The start of an IPv4 packet's transport header (after the variable IP header).
    Transport4,
    /// An ancillary value of the packet (`SKF_AD_OFF + n`).
    Ancillary(i32),
}

/// How a loaded value is compared.
#[derive(Debug, Clone, Copy)]
enum Compare {
    Equal,
    AtLeast,
    Above,
}

/// One comparison of a packet field.
#[derive(Debug, Clone, Copy)]
struct Test {
    base: Base,
    offset: u32,
    width: Width,
    mask: Option<u32>,
    compare: Compare,
    value: u32,
}

/// Boolean structure over tests: what the primitives expand to.
#[derive(Debug, Clone)]
enum Node {
    Test(Test),
    /// The IP version of the packet: 4 or 6 (framing-dependent code).
    Version(u8),
    Not(Box<Node>),
    And(Vec<Node>),
    Or(Vec<Node>),
}

struct Emitter {
    program: Program,
    framing: Framing,
}

impl Emitter {
    /// Offset of the IP header in a frame of this framing.
    fn network_offset(&self) -> u32 {
        match self.framing {
            Framing::Ethernet => 14,
            // 802.11 is left to libpcap (`filter::compile`); never compiled here.
            Framing::RawIp | Framing::Cooked | Framing::Ieee80211 | Framing::Radiotap => 0,
        }
    }

    fn node(&mut self, node: &Node, on_true: Label, on_false: Label) {
        match node {
            Node::Test(test) => self.test(test, on_true, on_false),
            Node::Version(version) => self.version(*version, on_true, on_false),
            Node::Not(inner) => self.node(inner, on_false, on_true),
            Node::And(parts) | Node::Or(parts) => {
                let is_and = matches!(node, Node::And(_));
                for (i, part) in parts.iter().enumerate() {
                    if i + 1 == parts.len() {
                        self.node(part, on_true, on_false);
                    } else {
                        let next = self.program.label();
                        if is_and {
                            self.node(part, next, on_false);
                        } else {
                            self.node(part, on_true, next);
                        }
                        self.program.place(next);
                    }
                }
                if parts.is_empty() {
                    // An empty `and` holds, an empty `or` does not.
                    self.program.jump(if is_and { on_true } else { on_false });
                }
            }
        }
    }

    fn version(&mut self, version: u8, on_true: Label, on_false: Label) {
        let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
        let ethertype = u32::from(if version == 4 {
            ETHERTYPE_IPV4
        } else {
            ETHERTYPE_IPV6
        });
        match self.framing {
            Framing::Ethernet => {
                self.program
                    .op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS, 12);
                self.program.branch(jeq, ethertype, on_true, on_false);
            }
            Framing::Cooked => {
                // skb->protocol, in host order (`bpf_anc_helper`, BPF_S_ANC_PROTOCOL).
                self.program.op(
                    libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
                    (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32,
                );
                self.program.branch(jeq, ethertype, on_true, on_false);
            }
            Framing::RawIp | Framing::Ieee80211 | Framing::Radiotap => {
                self.program
                    .op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0);
                self.program
                    .op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0xf0);
                self.program
                    .branch(jeq, u32::from(version) << 4, on_true, on_false);
            }
        }
    }

    fn test(&mut self, test: &Test, on_true: Label, on_false: Label) {
        let width = match test.width {
            Width::Byte => libc::BPF_B,
            Width::Half => libc::BPF_H,
            Width::Word => libc::BPF_W,
        };
        match test.base {
            Base::Network => self.program.op(
                libc::BPF_LD | width | libc::BPF_ABS,
                self.network_offset() + test.offset,
            ),
            Base::Transport4 => {
                // X = 4 * (first byte of the IP header & 0xf): the IPv4 header's length.
                self.program.op(
                    libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH,
                    self.network_offset(),
                );
                self.program.op(
                    libc::BPF_LD | width | libc::BPF_IND,
                    self.network_offset() + test.offset,
                );
            }
            Base::Ancillary(n) => self.program.op(
                libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
                (libc::SKF_AD_OFF + n) as u32,
            ),
        }
        if let Some(mask) = test.mask {
            self.program
                .op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, mask);
        }
        let compare = match test.compare {
            Compare::Equal => libc::BPF_JEQ,
            Compare::AtLeast => libc::BPF_JGE,
            Compare::Above => libc::BPF_JGT,
        };
        self.program.branch(
            libc::BPF_JMP | compare | libc::BPF_K,
            test.value,
            on_true,
            on_false,
        );
    }
}

/// The program for `expr` (every packet for `None`): it returns `keep` (the bytes to copy) for
/// a packet that matches, 0 otherwise. `None` when the expression is too long for classic
/// BPF's 8-bit jumps.
pub(crate) fn compile(
    expr: Option<&Expr>,
    framing: Framing,
    keep: u32,
) -> Option<Vec<libc::sock_filter>> {
    let mut emitter = Emitter {
        program: Program::default(),
        framing,
    };
    let (accept, reject) = (emitter.program.label(), emitter.program.label());
    if let Some(expr) = expr {
        emitter.node(&lower(expr), accept, reject);
    }
    emitter.program.place(accept);
    emitter.program.op(libc::BPF_RET | libc::BPF_K, keep);
    emitter.program.place(reject);
    emitter.program.op(libc::BPF_RET | libc::BPF_K, 0);
    emitter.program.finish()
}

fn lower(expr: &Expr) -> Node {
    match expr {
        Expr::Primitive(p) => primitive(p),
        Expr::Not(e) => Node::Not(Box::new(lower(e))),
        Expr::And(a, b) => Node::And(vec![lower(a), lower(b)]),
        Expr::Or(a, b) => Node::Or(vec![lower(a), lower(b)]),
    }
}

fn field(base: Base, offset: u32, width: Width, value: u32) -> Node {
    Node::Test(Test {
        base,
        offset,
        width,
        mask: None,
        compare: Compare::Equal,
        value,
    })
}

/// IPv4 protocol / IPv6 next header offsets (RFC 791, RFC 8200). Like libpcap, IPv6
/// extension headers are not walked: `tcp` on IPv6 means the fixed header's next header.
const IPV4_PROTOCOL: u32 = 9;
const IPV6_NEXT_HEADER: u32 = 6;
const IPV6_HEADER: u32 = 40;

fn protocol_is(version: u8, protocol: u8) -> Node {
    let offset = if version == 4 {
        IPV4_PROTOCOL
    } else {
        IPV6_NEXT_HEADER
    };
    field(Base::Network, offset, Width::Byte, u32::from(protocol))
}

fn either(direction: Direction, src: Node, dst: Node) -> Node {
    match direction {
        Direction::Src => src,
        Direction::Dst => dst,
        Direction::Either => Node::Or(vec![src, dst]),
    }
}

fn primitive(p: &Primitive) -> Node {
    match *p {
        Primitive::Ipv4 => Node::Version(4),
        Primitive::Ipv6 => Node::Version(6),
        Primitive::Transport(t) => Node::Or(vec![
            Node::And(vec![Node::Version(4), protocol_is(4, t.number())]),
            Node::And(vec![Node::Version(6), protocol_is(6, t.number())]),
        ]),
        Primitive::Host(direction, addr) => {
            let len = if addr.is_ipv4() { 32 } else { 128 };
            network(direction, addr, len)
        }
        Primitive::Net(direction, addr, len) => network(direction, addr, len),
        Primitive::Port {
            direction,
            transport,
            first,
            last,
        } => ports(direction, transport, first, last),
        Primitive::Vlan(id) => {
            let present = field(
                Base::Ancillary(libc::SKF_AD_VLAN_TAG_PRESENT),
                0,
                Width::Word,
                1,
            );
            match id {
                None => present,
                Some(id) => Node::And(vec![
                    present,
                    Node::Test(Test {
                        base: Base::Ancillary(libc::SKF_AD_VLAN_TAG),
                        offset: 0,
                        width: Width::Word,
                        mask: Some(0x0fff),
                        compare: Compare::Equal,
                        value: u32::from(id),
                    }),
                ]),
            }
        }
    }
}

/// The address fields' prefix of `len` bits equals `addr`'s.
fn network(direction: Direction, addr: IpAddr, len: u8) -> Node {
    let (version, words, src_at, dst_at): (u8, Vec<u32>, u32, u32) = match addr {
        IpAddr::V4(a) => (4, vec![u32::from(a)], 12, 16),
        IpAddr::V6(a) => (
            6,
            a.octets()
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
            8,
            24,
        ),
    };
    let prefix = |at: u32| {
        let mut tests = Vec::new();
        for (i, word) in words.iter().enumerate() {
            let bits = u32::from(len).saturating_sub(32 * i as u32).min(32);
            if bits == 0 {
                break;
            }
            let mask = if bits == 32 {
                u32::MAX
            } else {
                !(u32::MAX >> bits)
            };
            tests.push(Node::Test(Test {
                base: Base::Network,
                offset: at + 4 * i as u32,
                width: Width::Word,
                mask: (bits < 32).then_some(mask),
                compare: Compare::Equal,
                value: word & mask,
            }));
        }
        Node::And(tests)
    };
    Node::And(vec![
        Node::Version(version),
        either(direction, prefix(src_at), prefix(dst_at)),
    ])
}

/// TCP or UDP (or the one named) with a port in `first..=last`; an IPv4 fragment other than
/// the first carries no ports and never matches (as libpcap compiles it).
fn ports(direction: Direction, transport: Option<Transport>, first: u16, last: u16) -> Node {
    let in_range = |base: Base, offset: u32| {
        let at_least = Node::Test(Test {
            base,
            offset,
            width: Width::Half,
            mask: None,
            compare: if first == last {
                Compare::Equal
            } else {
                Compare::AtLeast
            },
            value: u32::from(first),
        });
        if first == last {
            at_least
        } else {
            let above = Node::Test(Test {
                base,
                offset,
                width: Width::Half,
                mask: None,
                compare: Compare::Above,
                value: u32::from(last),
            });
            Node::And(vec![at_least, Node::Not(Box::new(above))])
        }
    };
    let protocols = |version: u8| match transport {
        Some(t) => protocol_is(version, t.number()),
        None => Node::Or(vec![
            protocol_is(version, Transport::Tcp.number()),
            protocol_is(version, Transport::Udp.number()),
        ]),
    };
    let v4 = Node::And(vec![
        Node::Version(4),
        protocols(4),
        // Fragment offset zero (RFC 791: the low 13 bits of bytes 6-7).
        Node::Test(Test {
            base: Base::Network,
            offset: 6,
            width: Width::Half,
            mask: Some(0x1fff),
            compare: Compare::Equal,
            value: 0,
        }),
        either(
            direction,
            in_range(Base::Transport4, 0),
            in_range(Base::Transport4, 2),
        ),
    ]);
    let v6 = Node::And(vec![
        Node::Version(6),
        protocols(6),
        either(
            direction,
            in_range(Base::Network, IPV6_HEADER),
            in_range(Base::Network, IPV6_HEADER + 2),
        ),
    ]);
    Node::Or(vec![v4, v6])
}
