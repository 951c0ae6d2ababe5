//! Writes a large, realistic pcap of request/response traffic for `scripts/bench-analyze`:
//! thousands of keep-alive connections running side by side (handshake, turns, FIN close),
//! Ethernet + IPv4 + TCP with timestamps, full payloads, and stalls mixed in at known places.
//!
//! Usage: `cargo run --release --example gen-capture -- [--vxlan] OUT.pcap [PACKETS]` (default
//! 1,000,000). Prints the planted stalls on stderr as `planted <kind> <count>`: the ground truth.
//! `--vxlan` writes the same traffic with every frame inside VXLAN (outer Ethernet, IPv4, UDP
//! to port 4789, VNI 42), as captured on a container host's physical interface: the benchmark
//! of decapsulation.
//!
//! `--flows N --open|--closed OUT.pcap`: instead, N clean connections of one turn each (the
//! memory an analysis needs per connection, `scripts/bench-analyze --per-flow`): `--open`
//! starts one every 10 µs and closes none, so all N are open at the capture's end; `--closed`
//! starts one every millisecond and closes each with FINs, so about 2,000 are open at once
//! (a closed flow leaves the table 2 s after its close).
//!
//! `--concurrent N OUT.pcap`: N connections open at once (`scripts/bench-analyze --concurrent`):
//! one starts every microsecond, each with a handshake and three turns (a tenth of them split
//! responses, so two planted stalls each), and none closes before the last has opened: all
//! close with FINs, in the order they opened, from 200 ms after the last one's start. Written
//! headers only (snap length 128 B, as `tcpdump -s 128`), so a million connections take 3 GB.
//!
//! Connection kinds (share of connections):
//! - clean (70 %): request, quick ACK, response, ACK; 0.2-3 ms think time between turns;
//! - split response (10 %): header and body written apart, the body waits for the client's
//!   delayed ACK (40-44 ms) from the second turn on;
//! - split request (8 %): the client's second write waits for the server's delayed ACK;
//! - think time (8 %): whole writes, 40-45 ms pauses between turns: not a stall;
//! - cork (2 %): each response a full segment at once, then its partial tail 204-212 ms late
//!   on the cork timer;
//! - loss (2 %): one response per connection is lost after the capture point and resent
//!   after 204-230 ms.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

use etherparse::{PacketBuilder, TcpOptionElement};
use tcpstall::capture::pcap_writer::{PcapWriter, LINKTYPE_ETHERNET};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const MSS: u16 = 1460;
/// A full segment's payload: the MSS less the timestamp option.
const FULL_SEGMENT: u16 = MSS - 12;

/// xorshift64*: a deterministic generator, so every run writes the same file.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Clean,
    SplitResponse,
    SplitRequest,
    ThinkTime,
    Cork,
    Loss,
}

/// One packet of a connection, in the order it is sent.
#[derive(Clone, Copy)]
struct Pkt {
    ts_ns: u64,
    from_client: bool,
    flags: u8,
    seq: u32,
    ack: u32,
    len: u16,
}

const SYN: u8 = 1;
const FIN: u8 = 2;
const PSH: u8 = 4;

struct Conn {
    id: u32,
    packets: Vec<Pkt>,
}

fn push(p: &mut Vec<Pkt>, ts_ns: u64, from_client: bool, flags: u8, seq: u32, ack: u32, len: u16) {
    p.push(Pkt {
        ts_ns,
        from_client,
        flags,
        seq,
        ack,
        len,
    });
}

/// How many turns a connection takes, and whether it ends with FINs.
#[derive(Clone, Copy)]
struct Shape {
    /// `None`: 20 to 60, drawn.
    turns: Option<u64>,
    close: bool,
    /// The close waits until this time at least.
    close_at: u64,
}

/// Builds one connection's packets: returns them and the stalls planted per kind.
fn connection(
    id: u32,
    start_ns: u64,
    (kind, shape): (Kind, Shape),
    rng: &mut Rng,
    planted: &mut [u64; 3],
) -> Conn {
    let mut p = Vec::new();
    let mut t = start_ns;
    let (mut c, mut s) = (rng.next() as u32, rng.next() as u32);
    let rtt = rng.range(20, 80) * US; // capture on the client host: the server is one RTT away
    (c, s, t) = both_ways(&mut p, SYN, (c, s, t), rtt);
    let turns = shape.turns.unwrap_or_else(|| rng.range(20, 60));
    let lost_turn = match turns {
        0..=2 => u64::MAX,
        _ => rng.range(2, turns - 1),
    };
    for turn in 0..turns {
        t += 100 * US;
        let req = rng.range(60, 400) as u16;
        let resp = rng.range(200, 1400) as u16;
        let first = turn == 0; // quick-ACK mode: the first exchange never stalls
        match kind {
            Kind::SplitRequest => {
                let head = req / 3;
                push(&mut p, t, true, PSH, c, s, head);
                c = c.wrapping_add(u32::from(head));
                t += rtt
                    + if first {
                        20 * US
                    } else {
                        rng.range(40_100, 44_000) * US
                    };
                push(&mut p, t, false, 0, s, c, 0);
                t += 15 * US;
                push(&mut p, t, true, PSH, c, s, req - head);
                c = c.wrapping_add(u32::from(req - head));
                if !first {
                    planted[0] += 1;
                }
            }
            _ => {
                push(&mut p, t, true, PSH, c, s, req);
                c = c.wrapping_add(u32::from(req));
            }
        }
        // The server answers.
        t += rtt;
        match kind {
            Kind::SplitResponse => {
                let head = 143;
                push(&mut p, t, false, PSH, s, c, head);
                s = s.wrapping_add(u32::from(head));
                t += if first {
                    30 * US
                } else {
                    rng.range(40_100, 44_000) * US
                };
                push(&mut p, t, true, 0, c, s, 0);
                t += rtt + 10 * US;
                push(&mut p, t, false, PSH, s, c, resp - head);
                s = s.wrapping_add(u32::from(resp - head));
                if !first {
                    planted[0] += 1;
                }
            }
            Kind::Cork => {
                // A corked writer's full segment leaves at once (`tcp_write_xmit` sends full
                // segments even when corked); its partial tail waits for the cork timer.
                push(&mut p, t, false, 0, s, c, 0);
                t += 30 * US;
                push(&mut p, t, false, 0, s, c, FULL_SEGMENT);
                s = s.wrapping_add(u32::from(FULL_SEGMENT));
                push(&mut p, t + rtt, true, 0, c, s, 0);
                t += rng.range(204_000, 212_000) * US;
                push(&mut p, t, false, PSH, s, c, resp);
                s = s.wrapping_add(u32::from(resp));
                planted[1] += 1;
            }
            Kind::Loss if turn == lost_turn => {
                // Seen near the server: the response leaves, is lost on the path, and the
                // retransmission timer resends it; then the client ACKs.
                push(&mut p, t, false, PSH, s, c, resp);
                t += rng.range(204_000, 230_000) * US;
                push(&mut p, t, false, PSH, s, c, resp);
                s = s.wrapping_add(u32::from(resp));
                t += rtt;
                push(&mut p, t, true, 0, c, s, 0);
                planted[2] += 1;
            }
            _ => {
                push(&mut p, t, false, 0, s, c, 0);
                t += 30 * US;
                push(&mut p, t, false, PSH, s, c, resp);
                s = s.wrapping_add(u32::from(resp));
            }
        }
        t += 20 * US;
        push(&mut p, t, true, 0, c, s, 0);
        t += match kind {
            Kind::ThinkTime => rng.range(40_000, 45_000) * US,
            _ => rng.range(200, 3_000) * US,
        };
    }
    if shape.close {
        both_ways(&mut p, FIN, (c, s, t.max(shape.close_at)), rtt);
    }
    Conn { id, packets: p }
}

/// The client's SYN or FIN, the server's one RTT later, and the client's ACK of it; the
/// sequence numbers and the time after them. (A client SYN's ACK field is not written.)
fn both_ways(p: &mut Vec<Pkt>, flag: u8, (c, s, t): (u32, u32, u64), rtt: u64) -> (u32, u32, u64) {
    push(p, t, true, flag, c, s, 0);
    let c = c.wrapping_add(1);
    push(p, t + rtt, false, flag, s, c, 0);
    let s = s.wrapping_add(1);
    let t = t + rtt + 10 * US;
    push(p, t, true, 0, c, s, 0);
    (c, s, t)
}

fn frame(conn: u32, pkt: &Pkt, buf: &mut Vec<u8>, payload: &[u8]) -> Result<(), String> {
    let client_ip = [10, 2, (conn >> 8) as u8, conn as u8];
    let server_ip = [10, 1, 0, 1 + (conn % 8) as u8];
    let client_port = 20_000 + (conn % 40_000) as u16;
    let server_port = 8000 + (conn % 8) as u16;
    let (src, dst, sp, dp) = if pkt.from_client {
        (client_ip, server_ip, client_port, server_port)
    } else {
        (server_ip, client_ip, server_port, client_port)
    };
    let ts = (pkt.ts_ns / MS) as u32;
    let mut b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .tcp(sp, dp, pkt.seq, 502);
    let options: &[TcpOptionElement] = if pkt.flags & SYN != 0 {
        b = b.syn();
        &[
            TcpOptionElement::MaximumSegmentSize(MSS),
            TcpOptionElement::Noop,
            TcpOptionElement::WindowScale(7),
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(ts, ts.wrapping_sub(1)),
        ]
    } else {
        &[
            TcpOptionElement::Noop,
            TcpOptionElement::Noop,
            TcpOptionElement::Timestamp(ts, ts.wrapping_sub(1)),
        ]
    };
    if !(pkt.flags & SYN != 0 && pkt.from_client) {
        b = b.ack(pkt.ack);
    }
    if pkt.flags & FIN != 0 {
        b = b.fin();
    }
    if pkt.flags & PSH != 0 {
        b = b.psh();
    }
    let b = b
        .options(options)
        .map_err(|e| format!("TCP options: {e}"))?;
    buf.clear();
    b.write(buf, &payload[..usize::from(pkt.len)])
        .map_err(|e| format!("building a packet: {e}"))
}

/// Wraps the Ethernet frame in `inner` into VXLAN (RFC 7348 §5) from the client's node to the
/// server's, written into `buf`.
fn vxlan_frame(
    conn: u32,
    from_client: bool,
    inner: &[u8],
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let client_node = [192, 0, 2, 1];
    let server_node = [192, 0, 2, 10 + (conn % 8) as u8];
    let (src, dst) = if from_client {
        (client_node, server_node)
    } else {
        (server_node, client_node)
    };
    // The source port is a hash of the inner flow, as Linux's vxlan driver picks it.
    let src_port = 49_152 + (conn % 16_384) as u16;
    let mut payload = Vec::with_capacity(8 + inner.len());
    payload.extend_from_slice(&[0x08, 0, 0, 0, 0, 0, 42, 0]);
    payload.extend_from_slice(inner);
    buf.clear();
    PacketBuilder::ethernet2([2, 0, 0, 0, 1, 1], [2, 0, 0, 0, 1, 2])
        .ipv4(src, dst, 64)
        .udp(src_port, 4789)
        .write(buf, &payload)
        .map_err(|e| format!("building a VXLAN packet: {e}"))
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().collect();
    let mut flag = |name: &str| {
        let given = args.iter().any(|a| a == name);
        args.retain(|a| a != name);
        given
    };
    let (vxlan, open, closed) = (flag("--vxlan"), flag("--open"), flag("--closed"));
    let flows = match args.iter().position(|a| a == "--flows") {
        None => None,
        Some(at) => match args.get(at + 1).map(|n| n.parse::<u32>()) {
            Some(Ok(n)) if open != closed => {
                args.drain(at..at + 2);
                Some(Flows::OneTurn(n, open))
            }
            _ => {
                eprintln!("gen-capture: --flows N takes a whole number and --open or --closed");
                return ExitCode::from(2);
            }
        },
    };
    let flows = match args.iter().position(|a| a == "--concurrent") {
        None => flows,
        Some(at) => match args.get(at + 1).map(|n| n.parse::<u32>()) {
            Some(Ok(n)) if flows.is_none() => {
                args.drain(at..at + 2);
                Some(Flows::Concurrent(n))
            }
            _ => {
                eprintln!("gen-capture: --concurrent N takes a whole number, without --flows");
                return ExitCode::from(2);
            }
        },
    };
    let Some(out) = args.get(1) else {
        eprintln!("usage: gen-capture [--vxlan] OUT.pcap [PACKETS]");
        eprintln!("       gen-capture --flows N --open|--closed OUT.pcap");
        eprintln!("       gen-capture --concurrent N OUT.pcap");
        return ExitCode::from(2);
    };
    let target: u64 = match args.get(2).map(|s| s.parse()) {
        None => 1_000_000,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("gen-capture: PACKETS must be a whole number");
            return ExitCode::from(2);
        }
    };
    match generate(out, target, vxlan, flows) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen-capture: {e}");
            ExitCode::from(2)
        }
    }
}

/// Connections written instead of the default mix.
#[derive(Clone, Copy)]
enum Flows {
    /// That many clean one-turn connections, left open (`true`) or closed as they go.
    OneTurn(u32, bool),
    /// That many connections open at once, closed after the last has opened.
    Concurrent(u32),
}

/// Writes the capture: connections of every kind up to `target` packets, or the connections
/// `flows` says.
fn generate(out: &str, target: u64, vxlan: bool, flows: Option<Flows>) -> Result<(), String> {
    let mut rng = Rng(0x5eed_1234_abcd_9876);
    let mut planted = [0u64; 3];
    let mut conns = Vec::new();
    let mut total = 0u64;
    let base_ns = 1_700_000_000 * 1_000_000_000u64;
    let mut snaplen = 65535;
    if let Some(Flows::Concurrent(count)) = flows {
        snaplen = 128;
        let last_start = base_ns + u64::from(count) * US;
        for id in 0..count {
            let start = base_ns + u64::from(id) * US;
            let kind = match rng.range(0, 9) {
                0 => Kind::SplitResponse,
                _ => Kind::Clean,
            };
            let shape = Shape {
                turns: Some(3),
                close: true,
                close_at: last_start + 200 * MS + u64::from(id) * US,
            };
            conns.push(connection(id, start, (kind, shape), &mut rng, &mut planted));
        }
    }
    if let Some(Flows::OneTurn(count, open)) = flows {
        let (every, shape) = match open {
            true => (
                10 * US,
                Shape {
                    turns: Some(1),
                    close: false,
                    close_at: 0,
                },
            ),
            false => (
                MS,
                Shape {
                    turns: Some(1),
                    close: true,
                    close_at: 0,
                },
            ),
        };
        for id in 0..count {
            let start = base_ns + u64::from(id) * every;
            conns.push(connection(
                id,
                start,
                (Kind::Clean, shape),
                &mut rng,
                &mut planted,
            ));
        }
    }
    while flows.is_none() && total < target {
        let id = conns.len() as u32;
        let kind = match rng.range(0, 99) {
            0..=69 => Kind::Clean,
            70..=79 => Kind::SplitResponse,
            80..=87 => Kind::SplitRequest,
            88..=95 => Kind::ThinkTime,
            96..=97 => Kind::Cork,
            _ => Kind::Loss,
        };
        // About 400 connections open at any time.
        let start = base_ns + u64::from(id) * 150 * US + rng.range(0, 100) * US;
        let shape = Shape {
            turns: None,
            close: true,
            close_at: 0,
        };
        let c = connection(id, start, (kind, shape), &mut rng, &mut planted);
        total += c.packets.len() as u64;
        conns.push(c);
    }
    // Merge the connections in time order.
    let mut heap: BinaryHeap<Reverse<(u64, u32, u32)>> = conns
        .iter()
        .map(|c| Reverse((c.packets[0].ts_ns, c.id, 0)))
        .collect();
    let file = File::create(out).map_err(|e| format!("cannot create {out}: {e}"))?;
    let mut writer = PcapWriter::new(
        BufWriter::with_capacity(1 << 20, file),
        LINKTYPE_ETHERNET,
        snaplen,
    )
    .map_err(|e| format!("writing {out}: {e}"))?;
    let payload = vec![0x61u8; 1500];
    let mut buf = Vec::with_capacity(1600);
    let mut outer = Vec::with_capacity(1700);
    while let Some(Reverse((ts, id, i))) = heap.pop() {
        let conn = &conns[id as usize];
        let pkt = &conn.packets[i as usize];
        frame(id, pkt, &mut buf, &payload)?;
        let written = if vxlan {
            vxlan_frame(id, pkt.from_client, &buf, &mut outer)?;
            &outer
        } else {
            &buf
        };
        let len = written.len() as u32;
        writer
            .write_packet(ts, written, len)
            .map_err(|e| format!("writing {out}: {e}"))?;
        if let Some(next) = conn.packets.get(i as usize + 1) {
            heap.push(Reverse((next.ts_ns, id, i + 1)));
        }
    }
    let packets = writer.packets();
    writer.finish().map_err(|e| format!("writing {out}: {e}"))?;
    eprintln!(
        "wrote {out}: {packets} packets, {} connections",
        conns.len()
    );
    eprintln!("planted nagle_delayed_ack {}", planted[0]);
    eprintln!("planted cork_timer {}", planted[1]);
    eprintln!("planted rto {}", planted[2]);
    Ok(())
}
