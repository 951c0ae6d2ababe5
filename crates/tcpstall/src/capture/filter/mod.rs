//! Capture filters in tcpdump's syntax (pcap-filter(7)), compiled to the classic BPF program
//! a packet socket runs in the kernel (`SO_ATTACH_FILTER`), so that packets the user did not
//! ask for are never copied.
//!
//! Two compilers, one result: the host's libpcap, loaded at run time ([`libpcap`]), reads the
//! whole language exactly as tcpdump does; where there is none (a minimal host, the static
//! binary), tcpstall compiles the expressions people use with a capture of TCP itself
//! ([`expr`], [`codegen`]): hosts, networks, ports and port ranges, `tcp`/`udp`, `ip`/`ip6`,
//! `vlan`, `and`/`or`/`not`. The two are held to the same answers on real packets in the tests.
//! `TCPSTALL_NO_LIBPCAP=1` uses the built-in compiler even where libpcap is installed.

mod codegen;
mod expr;
pub(crate) mod interpret;
mod libpcap;
pub(crate) mod program;

/// How the frames a packet socket hands over begin, which decides the offsets a filter reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// An Ethernet header (Ethernet devices and `lo`, `SOCK_RAW`).
    Ethernet,
    /// The IP header (TUN, WireGuard and other layer-3 devices).
    RawIp,
    /// The network header, the protocol in the socket address (`SOCK_DGRAM`: `-i any`).
    Cooked,
    /// 802.11 frames (a monitor interface without radio headers).
    Ieee80211,
    /// 802.11 frames behind a radiotap header (a monitor interface).
    Radiotap,
}

impl Framing {
    /// The framing of a `LINKTYPE_*` a live capture socket produces (`SOCK_RAW`): Ethernet,
    /// else the IP header first.
    pub(crate) fn of_linktype(linktype: u32) -> Framing {
        if linktype == super::pcap_writer::LINKTYPE_ETHERNET {
            Framing::Ethernet
        } else {
            Framing::RawIp
        }
    }

    /// 802.11 frames, whose headers vary in length: only libpcap's compiler reads them.
    pub fn is_wireless(self) -> bool {
        matches!(self, Framing::Ieee80211 | Framing::Radiotap)
    }
}

impl Framing {
    /// The `DLT_*` libpcap compiles for: for cooked sockets the Linux cooked header, whose
    /// fields are then mapped to the kernel's ancillary loads ([`uncook`]).
    fn dlt(self) -> i32 {
        match self {
            Framing::Ethernet => 1,    // DLT_EN10MB
            Framing::RawIp => 12,      // DLT_RAW
            Framing::Cooked => 113,    // DLT_LINUX_SLL
            Framing::Ieee80211 => 105, // DLT_IEEE802_11
            Framing::Radiotap => 127,  // DLT_IEEE802_11_RADIO
        }
    }
}

/// A filter ready to attach.
#[derive(Debug, Clone)]
pub struct CompiledFilter {
    /// The classic BPF program.
    pub program: Vec<libc::sock_filter>,
}

/// What the built-in compiler takes, for the messages that send a user there.
pub const BUILTIN_SYNTAX: &str = "[src|dst] host ADDR, [src|dst] net ADDR/LEN, \
    [tcp|udp] [src|dst] port N, portrange N-M, tcp, udp, ip, ip6, vlan [ID], joined by \
    and/or/not and parentheses";

/// Why a filter cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// Not valid tcpdump syntax (libpcap's word).
    #[error(
        "bad capture filter `{filter}`: {reason}; the filter uses tcpdump's syntax \
         (pcap-filter(7)), e.g. `tcp port 8080` or `host 127.0.0.1 and port 6379`"
    )]
    Invalid {
        /// The filter as given.
        filter: String,
        /// libpcap's message.
        reason: String,
    },
    /// Beyond the built-in compiler, and libpcap is not on this host.
    #[error(
        "capture filter `{filter}` needs libpcap, which is not in use here ({reason}), or \
         the filter written with what tcpstall compiles itself: {BUILTIN_SYNTAX}"
    )]
    NeedsLibpcap {
        /// The filter as given.
        filter: String,
        /// What the built-in compiler could not take.
        reason: String,
    },
    /// Reads link-layer fields that a cooked (`-i any`) capture does not have.
    #[error(
        "capture filter `{filter}` reads link-layer header fields, which `-i any` does not \
         see: capture on one interface (`-i eth0`) for such a filter"
    )]
    LinkLayerOnAny {
        /// The filter as given.
        filter: String,
    },
    /// Too many tests for classic BPF's 8-bit jumps.
    #[error("capture filter `{filter}` is too long for the built-in compiler: shorten it")]
    TooLong {
        /// The filter as given.
        filter: String,
    },
}

/// The filter a watch runs: TCP only (the kernel drops the rest before copying it), and the
/// user's filter within that.
pub fn effective_filter(user: &str) -> String {
    if user.trim().is_empty() {
        "tcp".to_string()
    } else {
        format!("tcp and ({user})")
    }
}

/// Compiles `user` (tcpdump syntax, may be empty), within TCP, for frames of `framing`; the
/// program keeps the first `keep` bytes of a matching packet.
pub fn compile(user: &str, framing: Framing, keep: u32) -> Result<CompiledFilter, FilterError> {
    let skip_libpcap = std::env::var_os("TCPSTALL_NO_LIBPCAP").is_some_and(|v| v != "0");
    compile_with(user, framing, keep, !skip_libpcap).map_err(|err| match err {
        FilterError::NeedsLibpcap { filter, reason } if skip_libpcap => FilterError::NeedsLibpcap {
            filter,
            reason: reason.replace(
                LIBPCAP_NOT_USED,
                "libpcap was turned off by TCPSTALL_NO_LIBPCAP: unset it to let libpcap compile \
                 the filter",
            ),
        },
        err => err,
    })
}

/// Why libpcap did not compile a filter when it was not asked to.
const LIBPCAP_NOT_USED: &str = "libpcap not used";

/// [`compile`], with libpcap tried first only when `use_libpcap`.
fn compile_with(
    user: &str,
    framing: Framing,
    keep: u32,
    use_libpcap: bool,
) -> Result<CompiledFilter, FilterError> {
    let full = effective_filter(user);
    // libpcap compiles `vlan` for a dead handle as a tag inside the frame, but Linux strips
    // the tag before the tap: the built-in compiler reads the kernel's tag metadata instead,
    // as libpcap does for its own live captures.
    let vlan = full
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| w == "vlan");
    let use_libpcap = use_libpcap && !(vlan && expr::parse(&full).is_ok());
    let missing = if !use_libpcap {
        LIBPCAP_NOT_USED.to_string()
    } else {
        let snaplen = i32::try_from(keep).unwrap_or(i32::MAX);
        match libpcap::compile(&full, framing.dlt(), snaplen) {
            Ok(mut program) => {
                if framing == Framing::Cooked && !uncook(&mut program) {
                    return Err(FilterError::LinkLayerOnAny {
                        filter: user.to_string(),
                    });
                }
                return Ok(CompiledFilter { program });
            }
            Err(libpcap::LibpcapError::Rejected(reason)) => {
                return Err(FilterError::Invalid {
                    filter: user.to_string(),
                    reason,
                })
            }
            Err(libpcap::LibpcapError::Missing(reason)) => format!(
                "{reason}: install it (`apt install libpcap0.8`, `dnf install libpcap`, `apk add \
                 libpcap`)"
            ),
        }
    };
    if framing.is_wireless() {
        // TCP itself is judged after decoding; the kernel keeps every frame.
        if user.trim().is_empty() {
            return Ok(CompiledFilter {
                program: vec![libc::sock_filter {
                    code: (libc::BPF_RET | libc::BPF_K) as u16,
                    jt: 0,
                    jf: 0,
                    k: keep,
                }],
            });
        }
        return Err(FilterError::NeedsLibpcap {
            filter: user.to_string(),
            reason: format!(
                "802.11 frames' headers vary in length, which only libpcap's compiler reads; \
                 {missing}"
            ),
        });
    }
    let parsed = expr::parse(&full).map_err(|unsupported| FilterError::NeedsLibpcap {
        filter: user.to_string(),
        reason: format!("{} is not compiled without it; {missing}", unsupported.0),
    })?;
    codegen::compile(parsed.as_ref(), framing, keep)
        .map(|program| CompiledFilter { program })
        .ok_or_else(|| FilterError::TooLong {
            filter: user.to_string(),
        })
}

/// Whether libpcap can be loaded on this host (the whole filter language is then available).
#[cfg(test)]
fn libpcap_available() -> bool {
    libpcap::available()
}

/// Maps a program compiled for the Linux cooked header onto a cooked socket's frames, which
/// start at the network header: the header's packet type and protocol become the kernel's
/// ancillary loads, later offsets move back by the header's 16 bytes (libpcap does the same
/// for its own cooked captures, `fix_offset` in pcap-linux.c). `false` when the program reads
/// another field of the header (a link-layer address), which the socket does not have.
fn uncook(program: &mut [libc::sock_filter]) -> bool {
    const SLL_HEADER: u32 = 16;
    for insn in program.iter_mut() {
        let class = u32::from(insn.code) & 0x07;
        let mode = u32::from(insn.code) & 0xe0;
        let loads = class == libc::BPF_LD || class == libc::BPF_LDX;
        if !(loads && matches!(mode, libc::BPF_ABS | libc::BPF_IND | libc::BPF_MSH)) {
            continue;
        }
        if (insn.k as i32) < 0 {
            continue; // already an ancillary load
        }
        insn.k = match insn.k {
            k if k >= SLL_HEADER => k - SLL_HEADER,
            0 => (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32,
            14 => (libc::SKF_AD_OFF + libc::SKF_AD_PROTOCOL) as u32,
            _ => return false,
        };
    }
    true
}

/// `program` behind a prologue that drops the copy of each packet leaving `lo` (interface
/// `loopback_ifindex`): on `lo` every packet passes the tap twice, leaving and arriving, and
/// only the arriving one is kept, as libpcap does.
pub fn drop_loopback_outgoing(
    program: &[libc::sock_filter],
    loopback_ifindex: u32,
) -> Vec<libc::sock_filter> {
    let mut out = program::Program::default();
    let (from_lo, dropped, rest) = (out.label(), out.label(), out.label());
    let ancillary = |field: i32| (libc::SKF_AD_OFF + field) as u32;
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let load = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
    out.op(load, ancillary(libc::SKF_AD_PKTTYPE));
    out.branch(jeq, u32::from(libc::PACKET_OUTGOING), from_lo, rest);
    out.place(from_lo);
    out.op(load, ancillary(libc::SKF_AD_IFINDEX));
    out.branch(jeq, loopback_ifindex, dropped, rest);
    out.place(dropped);
    out.ret(0);
    out.place(rest);
    out.append(program);
    // Two conditional jumps of at most 3 instructions: always resolved.
    out.finish()
        .expect("the prologue's jumps are shorter than 256 instructions")
}

#[cfg(test)]
mod tests {
    use super::interpret::{run, Packet};
    use super::*;
    use crate::decode::numbers::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
    use etherparse::PacketBuilder;

    const KEEP: u32 = 200;

    /// A varied set of frames (Ethernet framing), each with its EtherType.
    fn frames() -> Vec<(Vec<u8>, u16)> {
        let mac = ([1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1]);
        let mut out = Vec::new();
        let v4 = |s: [u8; 4], d: [u8; 4]| PacketBuilder::ethernet2(mac.0, mac.1).ipv4(s, d, 64);
        let v6 = |s: [u8; 16], d: [u8; 16]| PacketBuilder::ethernet2(mac.0, mac.1).ipv6(s, d, 64);
        let push = |builder: etherparse::PacketBuilderStep<etherparse::TcpHeader>,
                    out: &mut Vec<(Vec<u8>, u16)>,
                    ethertype: u16| {
            let mut frame = Vec::new();
            builder.write(&mut frame, b"payload").unwrap();
            out.push((frame, ethertype));
        };
        let hosts4 = [
            [10, 0, 0, 1],
            [10, 0, 0, 2],
            [10, 1, 9, 9],
            [192, 168, 1, 5],
        ];
        let mut local6 = [0u8; 16];
        local6[15] = 1;
        let mut ula = [0u8; 16];
        ula[0] = 0xfd;
        ula[15] = 7;
        let ports = [(1234, 80), (80, 40000), (443, 8080), (8081, 22), (53, 53)];
        for (i, (sport, dport)) in ports.into_iter().enumerate() {
            let (s, d) = (hosts4[i % 4], hosts4[(i + 1) % 4]);
            push(
                v4(s, d).tcp(sport, dport, 1, 1000),
                &mut out,
                ETHERTYPE_IPV4,
            );
            push(
                v6(local6, ula).tcp(sport, dport, 1, 1000),
                &mut out,
                ETHERTYPE_IPV6,
            );
            push(
                v6(ula, local6).tcp(dport, sport, 1, 1000),
                &mut out,
                ETHERTYPE_IPV6,
            );
            let mut frame = Vec::new();
            v4(d, s).udp(sport, dport).write(&mut frame, b"x").unwrap();
            out.push((frame, ETHERTYPE_IPV4));
        }
        // A non-first IPv4 fragment of a TCP segment: no ports in it.
        let mut fragment = Vec::new();
        v4(hosts4[0], hosts4[1])
            .tcp(80, 80, 1, 1000)
            .write(&mut fragment, b"payload")
            .unwrap();
        fragment[14 + 6] = 0x00;
        fragment[14 + 7] = 0x10;
        out.push((fragment, ETHERTYPE_IPV4));
        // An IPv4 header with options (IHL 6): the ports move by 4 bytes.
        let mut options = Vec::new();
        v4(hosts4[2], hosts4[3])
            .tcp(5000, 80, 1, 1000)
            .write(&mut options, b"payload")
            .unwrap();
        options[14] = 0x46;
        options.splice(34..34, [1, 1, 1, 0]);
        out.push((options, ETHERTYPE_IPV4));
        // ARP: no IP at all.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        out.push((arp, 0x0806));
        out
    }

    fn packet(frame: &[u8], ethertype: u16, framing: Framing, vlan: Option<u16>) -> Packet<'_> {
        Packet {
            data: match framing {
                Framing::Ethernet => frame,
                _ => &frame[14..],
            },
            protocol: ethertype,
            pkttype: 0,
            ifindex: 2,
            vlan_tci: vlan,
        }
    }

    const EXPRESSIONS: &[&str] = &[
        "",
        "port 80",
        "tcp port 80",
        "udp port 53",
        "src port 1234",
        "dst port 80",
        "tcp dst portrange 8000-8081",
        "portrange 40-443",
        "host 10.0.0.1",
        "src host 10.0.0.1",
        "dst host 10.0.0.2",
        "host 10.1.9.9",
        "net 10.0.0.0/8",
        "src net 10.1.0.0 mask 255.255.0.0",
        "net 192.168.1.0/24 or net 10.0.0.2/31",
        "host ::1",
        "dst host fd00::7",
        "net fd00::/8",
        "src net ::/127",
        "ip",
        "ip6",
        "tcp",
        "udp",
        "not port 80",
        "port 80 or port 443",
        "host 10.0.0.1 and (port 80 or port 8080)",
        "!(src net 10.0.0.0/24) && dst portrange 1-1024",
        "ip6 and port 443",
        "port 80 and not host 10.0.0.9",
        "not (tcp or udp) or ip6 and src port 80 or dst port 22",
    ];

    fn builtin(expression: &str, framing: Framing) -> Vec<libc::sock_filter> {
        let parsed = expr::parse(&effective_filter(expression)).expect(expression);
        codegen::compile(parsed.as_ref(), framing, KEEP).expect(expression)
    }

    /// The built-in compiler against libpcap's, packet by packet, in every framing.
    #[test]
    fn builtin_agrees_with_libpcap() {
        if !libpcap_available() {
            eprintln!("libpcap is not installed: the comparison needs it (scripts/install-deps)");
            return;
        }
        let frames = frames();
        let mut compared = 0;
        for framing in [Framing::Ethernet, Framing::Cooked, Framing::RawIp] {
            for expression in EXPRESSIONS {
                let ours = builtin(expression, framing);
                let mut theirs = match libpcap::compile(
                    &effective_filter(expression),
                    framing.dlt(),
                    KEEP as i32,
                ) {
                    Ok(program) => program,
                    // libpcap refuses a filter it proves empty (`tcp and udp`): ours keeps
                    // nothing either.
                    Err(libpcap::LibpcapError::Rejected(reason))
                        if reason.contains("rejects all packets") =>
                    {
                        vec![libc::sock_filter {
                            code: (libc::BPF_RET | libc::BPF_K) as u16,
                            jt: 0,
                            jf: 0,
                            k: 0,
                        }]
                    }
                    Err(e) => panic!("{expression}: {e:?}"),
                };
                if framing == Framing::Cooked {
                    assert!(uncook(&mut theirs), "{expression}");
                }
                for (frame, ethertype) in &frames {
                    if framing == Framing::RawIp && *ethertype == 0x0806 {
                        continue; // a TUN device carries no ARP
                    }
                    let p = packet(frame, *ethertype, framing, None);
                    assert_eq!(
                        run(&ours, &p),
                        run(&theirs, &p),
                        "`{expression}` on {framing:?} frame {frame:02x?}"
                    );
                    compared += 1;
                }
            }
        }
        assert!(compared > 2000, "{compared}");
    }

    /// What each expression keeps, without libpcap: spot checks of the semantics.
    #[test]
    fn builtin_semantics() {
        let frames = frames();
        let kept = |expression: &str, framing: Framing, vlan: Option<u16>| -> usize {
            let program = builtin(expression, framing);
            frames
                .iter()
                .filter(|(f, e)| run(&program, &packet(f, *e, framing, vlan)) == KEEP)
                .count()
        };
        for framing in [Framing::Ethernet, Framing::Cooked] {
            // 15 TCP segments, one a non-first fragment; the rest is UDP and ARP.
            assert_eq!(kept("", framing, None), 17, "{framing:?}");
            assert_eq!(kept("udp", framing, None), 0, "only TCP is ever kept");
            // Port 80: 3 + 3 (v4, v6 both ways) + the options frame; not the fragment.
            assert_eq!(kept("port 80", framing, None), 7, "{framing:?}");
            assert_eq!(kept("ip6", framing, None), 10);
            assert_eq!(kept("vlan", framing, None), 0);
            assert_eq!(kept("vlan", framing, Some(100)), 17);
            assert_eq!(
                kept("vlan 100", framing, Some(0x2064)),
                17,
                "PCP bits ignored"
            );
            assert_eq!(kept("vlan 101", framing, Some(100)), 0);
        }
    }

    #[test]
    fn loopback_outgoing_copies_are_dropped() {
        let program = drop_loopback_outgoing(&builtin("", Framing::Ethernet), 2);
        let frames = frames();
        let (frame, ethertype) = &frames[0];
        let mut p = packet(frame, *ethertype, Framing::Ethernet, None);
        assert_eq!(run(&program, &p), KEEP);
        p.pkttype = libc::PACKET_OUTGOING;
        assert_eq!(run(&program, &p), 0, "leaving lo");
        p.ifindex = 7;
        assert_eq!(run(&program, &p), KEEP, "leaving another interface");
    }

    #[test]
    fn errors_say_what_to_do() {
        let err = compile_with(
            "ether host 00:11:22:33:44:55",
            Framing::Ethernet,
            KEEP,
            false,
        )
        .expect_err("needs libpcap");
        let text = err.to_string();
        assert!(
            text.contains(LIBPCAP_NOT_USED) && text.contains("portrange"),
            "{text}"
        );
        if libpcap_available() {
            let err = compile("port eighty", Framing::Ethernet, KEEP).expect_err("bad");
            assert!(err.to_string().contains("pcap-filter"), "{err}");
        }
    }

    /// A monitor interface's frames: libpcap reads the radiotap and 802.11 headers to TCP;
    /// the built-in compiler keeps every frame for an empty filter and refuses any other.
    #[test]
    fn wireless_frames_are_left_to_libpcap() {
        let (frame, _) = &frames()[0];
        let mut wireless = vec![0, 0, 8, 0, 0, 0, 0, 0, 0x08, 0x01];
        wireless.extend_from_slice(&[0; 22]);
        wireless.extend_from_slice(&[0xaa, 0xaa, 0x03, 0, 0, 0, 0x08, 0x00]);
        wireless.extend_from_slice(&frame[14..]);
        let p = Packet {
            data: &wireless,
            protocol: 0,
            pkttype: 0,
            ifindex: 2,
            vlan_tci: None,
        };
        let all = compile_with("", Framing::Radiotap, KEEP, false).expect("empty filter");
        assert_eq!(run(&all.program, &p), KEEP);
        let err = compile_with("port 80", Framing::Radiotap, KEEP, false).expect_err("refused");
        assert!(err.to_string().contains("802.11"), "{err}");
        if libpcap_available() {
            let ours = compile_with("port 80", Framing::Radiotap, KEEP, true).expect("libpcap");
            assert_eq!(run(&ours.program, &p), KEEP);
            let other = compile_with("port 81", Framing::Radiotap, KEEP, true).expect("libpcap");
            assert_eq!(run(&other.program, &p), 0);
        }
    }

    /// A cooked capture's packet type and protocol become ancillary loads; a link-layer
    /// address, which a cooked socket does not have, refuses the program.
    #[test]
    fn cooked_programs_read_the_kernels_metadata() {
        if !libpcap_available() {
            return;
        }
        let mut program = libpcap::compile("inbound and tcp", Framing::Cooked.dlt(), KEEP as i32)
            .expect("libpcap compiles it");
        assert!(uncook(&mut program));
        let frames = frames();
        let (frame, ethertype) = &frames[0];
        let mut p = packet(frame, *ethertype, Framing::Cooked, None);
        assert_eq!(run(&program, &p), KEEP);
        p.pkttype = libc::PACKET_OUTGOING;
        assert_eq!(run(&program, &p), 0);
        let mut address = vec![libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 6,
        }];
        assert!(!uncook(&mut address));
    }
}
