//! The flow state driven by scripted segments: handshake, ACK and data steps, and the client
//! guess, each checked against the sequence arithmetic of RFC 9293 and the kernel's rules.

use super::connection::FlowState;
use super::guess::client_by_ports;
use super::testing::{Wire, MS};
use super::*;
use crate::decode::Segment;

/// Runs `segments` through a flow table as the detector does, and returns the flows in order
/// of first appearance (retired ones included).
fn flows_after(segments: &[Segment]) -> Vec<Flow> {
    let mut table = FlowTable::default();
    let mut flows = Vec::new();
    for (ordinal, seg) in segments.iter().enumerate() {
        let lookup = table.lookup(seg, HashedKey::of(seg), ordinal as u64, |old| {
            flows.push(old)
        });
        lookup.flow.update(seg, lookup.side, ordinal as u64);
    }
    table.drain(|f| flows.push(f));
    flows
}

/// The one flow of `segments`.
fn flow_after(segments: &[Segment]) -> Flow {
    let mut flows = flows_after(segments);
    assert_eq!(flows.len(), 1, "one flow expected");
    flows.remove(0)
}

fn us(t: u64) -> Timestamp {
    Timestamp::from_nanos(t * 1000)
}

/// ISNs, MSS per direction (each side's SYN limits what the *peer* sends, and its own), window scaling
/// (not applied to the SYNs' own windows, RFC 7323 §2.2) and the near-side RTTs.
#[test]
fn handshake_learns_isn_mss_window_scale_and_rtts() {
    let mut w = Wire::handshake_between(100, 300, 1460);
    w.segments[1].mss = Some(1400); // the server announces a smaller MSS
    let f = flow_after(&w.segments);
    let (c, s) = (f.dir(Side::Client), f.dir(Side::Server));
    assert_eq!((c.isn, s.isn), (SeqNumber(1000), SeqNumber(90_000)));
    // The server's own 1400 limits its sending too: the smaller SYN's MSS is in effect.
    assert_eq!((c.mss, s.mss), (1400, 1400));
    assert_eq!(
        (c.mss_source, s.mss_source),
        (MssSource::Syn, MssSource::Syn)
    );
    assert!(f.scaling);
    assert_eq!(s.window, 512, "the SYN-ACK's window is not scaled");
    assert_eq!(c.window, 512 << 7, "the handshake's ACK is");
    assert_eq!(c.near_rtt, Some(Span::from_micros(100)));
    assert_eq!(s.near_rtt, Some(Span::from_micros(300)));
    assert_eq!(f.state, FlowState::Established);
    assert_eq!(f.client_guess, ClientGuess::Syn);
    assert_eq!((c.snd_nxt, s.snd_nxt), (SeqNumber(1001), SeqNumber(90_001)));
}

/// Without the SYN, the SYN-ACK's receiver is the client, and the server's announced MSS
/// stands in for its own; without a window scale from both SYNs, windows stay unscaled.
#[test]
fn handshake_seen_from_the_syn_ack() {
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 10);
    w.segments.remove(0);
    let f = flow_after(&w.segments);
    assert_eq!(f.client_guess, ClientGuess::SynAck);
    assert_eq!(f.client.port, 40000);
    assert_eq!(f.dir(Side::Client).mss_source, MssSource::Syn);
    assert_eq!(f.dir(Side::Server).mss_source, MssSource::OwnSyn);
    assert!(!f.scaling);
    assert_eq!(f.dir(Side::Client).window, 512);
}

/// The ACK step: a partial ACK moves SND.UNA and leaves the rest in flight; a duplicate ACK
/// moves nothing; the window is scaled by the receiver's announced shift.
#[test]
fn ack_step_advances_snd_una_once() {
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 100).data(true, 1_010, 200);
    w.ack(false, 1_100).last().ack = SeqNumber(1101); // the first 100 bytes
    w.last().window = 100;
    let mut partial = w.segments.clone();
    let f = flow_after(&partial);
    let c = f.dir(Side::Client);
    assert_eq!(c.snd_una, SeqNumber(1101));
    assert_eq!(c.in_flight(), 200);
    assert_eq!(f.dir(Side::Server).window, 100 << 7);
    let prev = f.prev.expect("a previous packet");
    assert!(prev.advanced_una && prev.pure_ack);
    assert_eq!(prev.una_before, SeqNumber(1001));

    // The same ACK again: a duplicate, SND.UNA stays.
    let mut dup = *partial.last().expect("the ACK");
    dup.ts_ns = us(1_200);
    partial.push(dup);
    let f = flow_after(&partial);
    let prev = f.prev.expect("a previous packet");
    assert!(!prev.advanced_una);
    assert_eq!(prev.una_before, SeqNumber(1101));
    assert_eq!(f.dir(Side::Client).snd_una, SeqNumber(1101));
    assert_eq!(f.dir(Side::Client).in_flight(), 200);
}

/// A zero window closes the sender's way, a window update reopens it, the sender's next data
/// finds it open.
#[test]
fn ack_step_tracks_the_peer_window() {
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 1000).ack_window(false, 1_100, 0);
    assert_eq!(
        flow_after(&w.segments).dir(Side::Client).peer_window,
        PeerWindow::Closed { since: us(1_100) }
    );
    w.ack_window(false, 300_000, 64);
    assert_eq!(
        flow_after(&w.segments).dir(Side::Client).peer_window,
        PeerWindow::Reopened {
            since: us(1_100),
            at: us(300_000)
        }
    );
    w.data(true, 300_010, 1000);
    assert_eq!(
        flow_after(&w.segments).dir(Side::Client).peer_window,
        PeerWindow::Open
    );
}

/// The data step judges "small" as `tcp_minshall_update` does (`len % mss`, against the MSS
/// less the 12-byte timestamp option): a GSO super-packet of 2623 B at 1448 B segments ends
/// in a partial segment and becomes `snd_sml`; one of 2896 B does not.
#[test]
fn data_step_judges_sub_mss_by_the_remainder() {
    let ts = Some((1, 1));
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 2896).last().timestamps = ts;
    let f = flow_after(&w.segments);
    assert!(!f.dir(Side::Client).last_data_small);

    w.data(true, 1_010, 2623).last().timestamps = ts;
    let f = flow_after(&w.segments);
    let c = f.dir(Side::Client);
    assert!(c.last_data_small);
    assert_eq!(c.snd_sml, SeqNumber(1001 + 2896 + 2623));
    assert_eq!(c.snd_sml, c.snd_nxt);

    // A full segment after it leaves `snd_sml` where the partial one ended.
    w.data(true, 1_020, 1448).last().timestamps = ts;
    let c = flow_after(&w.segments).dir(Side::Client).clone();
    assert!(!c.last_data_small);
    assert_eq!(c.snd_sml, SeqNumber(1001 + 2896 + 2623));

    // Without timestamps the whole MSS is payload: 1448 B is short of 1460.
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 1448);
    assert!(flow_after(&w.segments).dir(Side::Client).last_data_small);
}

/// Data below the highest sequence number sent is a retransmission: counted, not added to
/// the bytes, the turn or SND.NXT. Data beyond it is a gap in the capture.
#[test]
fn data_step_tells_retransmissions_and_gaps() {
    let mut w = Wire::handshake(30, 1460);
    w.data(true, 1_000, 100)
        .data(true, 1_010, 100)
        .retransmit(true, 200_000, 100);
    let f = flow_after(&w.segments);
    let c = f.dir(Side::Client);
    assert_eq!((c.retransmissions, c.gaps, c.bytes), (1, 0, 200));
    assert_eq!(c.snd_nxt, SeqNumber(1201));
    assert_eq!(c.burst.recorded(), &[100, 100]);
    assert_eq!(c.last_data, us(1_010), "a resend is not new data");

    w.client_seq += 500; // the capture missed 500 bytes
    w.data(true, 300_000, 100);
    let c = flow_after(&w.segments).dir(Side::Client).clone();
    assert_eq!((c.retransmissions, c.gaps, c.bytes), (1, 1, 300));
    assert_eq!(c.snd_nxt, SeqNumber(1801));
}

/// A connection whose sequence numbers wrap past 2^32 mid-stream: new data stays new, a
/// resend across the wrap is still a resend, and the ACK covering it all leaves nothing in
/// flight.
#[test]
fn sequence_numbers_wrap_around_2_pow_32() {
    let isn = u32::MAX - 150;
    let mut w = Wire::handshake_from(10, 30, 1460, (isn, 7));
    w.data(true, 1_000, 100)
        .data(true, 1_010, 100) // crosses 2^32
        .data(true, 1_020, 100);
    let f = flow_after(&w.segments);
    let c = f.dir(Side::Client);
    assert_eq!((c.retransmissions, c.gaps, c.bytes), (0, 0, 300));
    assert_eq!(c.snd_nxt, SeqNumber(150));
    assert_eq!(c.snd_nxt - c.isn, 301);

    w.retransmit(true, 250_000, 200); // the two segments around the wrap
    w.ack(false, 260_000);
    let f = flow_after(&w.segments);
    let c = f.dir(Side::Client);
    assert_eq!((c.retransmissions, c.bytes), (1, 300));
    assert_eq!(c.snd_una, SeqNumber(150));
    assert_eq!(c.in_flight(), 0);
}

/// Mid-flow, the ports tell the client: a port below the ephemeral range is the server's;
/// two ports on the same side of it leave the larger as the client's, and two ephemeral
/// ports leave the question open until the first data.
#[test]
fn client_guessed_from_ports() {
    let g = client_by_ports(40_000, 80);
    assert!(g.src_is_client && !g.open);
    assert_eq!(g.guess, ClientGuess::ServicePort);
    let g = client_by_ports(80, 40_000);
    assert!(!g.src_is_client);
    let g = client_by_ports(8080, 5432);
    assert!(g.src_is_client && !g.open);
    assert_eq!(g.guess, ClientGuess::EphemeralPort);
    let g = client_by_ports(40_000, 50_000);
    assert!(!g.src_is_client && g.open);

    // A capture that starts with the server's data: the service port still names it.
    let mut w = Wire::handshake(30, 1460);
    w.data(false, 1_000, 10).data(true, 1_100, 10);
    w.segments.drain(..3);
    let f = flow_after(&w.segments);
    assert_eq!(f.client_guess, ClientGuess::ServicePort);
    assert_eq!((f.client.port, f.server.port), (40000, 80));
    assert_eq!(
        f.dir(Side::Server).isn,
        SeqNumber(90_000),
        "first seq less one"
    );
}

/// Both ports ephemeral, the server's the larger: taken as the client until the first data
/// shows who speaks first; the roles, and each side's state, swap with the guess.
#[test]
fn client_guess_settled_by_first_data() {
    let mut w = Wire::handshake(30, 1460);
    w.ack(false, 900)
        .data(true, 1_000, 80)
        .data(false, 1_100, 148);
    w.segments.drain(..3);
    for seg in &mut w.segments {
        for port in [&mut seg.src_port, &mut seg.dst_port] {
            *port = if *port == 80 { 50_000 } else { 40_000 };
        }
    }
    // Before any data: the larger port is taken as the client's.
    let f = flow_after(&w.segments[..1]);
    assert_eq!(f.client_guess, ClientGuess::EphemeralPort);
    assert_eq!(f.client.port, 50_000);
    let f = flow_after(&w.segments);
    assert_eq!(f.client_guess, ClientGuess::FirstData);
    assert_eq!((f.client.port, f.server.port), (40_000, 50_000));
    assert_eq!(f.dir(Side::Client).bytes, 80);
    assert_eq!(f.dir(Side::Server).bytes, 148);
    assert_eq!(
        f.dir(Side::Server).packets,
        2,
        "the pure ACK moved with its side"
    );
    assert_eq!(f.turns.requests, 1);
}

/// A SYN with another ISN on a 4-tuple in use is a new connection (port reuse): the old flow
/// is retired, the new one starts clean.
#[test]
fn port_reuse_starts_a_new_flow() {
    let mut first = Wire::handshake(30, 1460);
    first.data(true, 1_000, 10);
    let mut second = Wire::handshake_from(10, 30, 1460, (777_000, 5));
    for seg in &mut second.segments {
        seg.ts_ns += MS * 5;
    }
    let segments: Vec<Segment> = first
        .segments
        .iter()
        .chain(&second.segments)
        .copied()
        .collect();
    let flows = flows_after(&segments);
    assert_eq!(flows.len(), 2);
    assert_eq!(flows[1].dir(Side::Client).isn, SeqNumber(777_000));
    assert_eq!(flows[1].dir(Side::Client).bytes, 0);
    assert_eq!(flows[1].id, 4);
}

/// An answer times a leg only when it acknowledges the whole of the packet before it: two
/// segments that crossed on the path (the server's data sent before the client's second
/// request arrived) time nothing. And an answer far below the handshake's leg needs a second
/// to corroborate it.
#[test]
fn legs_refined_by_valid_answers_only() {
    let server_leg = |w: &Wire| flow_after(&w.segments).dir(Side::Server).near_rtt;
    // Handshake: 7.88 ms to the server.
    let mut w = Wire::handshake_between(10, 7_880, 1448);
    w.data(true, 20_000, 100).data(true, 20_010, 50);
    // The server's answer to the first request only, 1.57 ms after the second.
    w.data(false, 21_580, 200);
    w.last().ack = w.last().ack - 50;
    assert_eq!(server_leg(&w), Some(MS * 7_880 / 1_000));
    // One answer of 1.5 ms covering the request: far below the handshake's, alone.
    let mut w = Wire::handshake_between(10, 7_880, 1448);
    w.data(true, 20_000, 100).data(false, 21_500, 200);
    assert_eq!(server_leg(&w), Some(MS * 7_880 / 1_000));
    // A second one corroborates it: the larger of the two is taken.
    w.data(true, 30_000, 100).data(false, 31_600, 200);
    assert_eq!(server_leg(&w), Some(Span::from_micros(1_600)));
    // An answer a little quicker than the handshake's is taken at once.
    let mut w = Wire::handshake_between(10, 7_880, 1448);
    w.data(true, 20_000, 100).data(false, 27_000, 200);
    assert_eq!(server_leg(&w), Some(MS * 7));
}

/// A SYN-SENT client answers a stale ACK with a RST and goes on waiting: its same SYN resent
/// 3 s later, then answered, is one connection.
#[test]
fn same_syn_after_a_stale_ack_and_the_clients_rst_is_one_connection() {
    let w = Wire::handshake(30, 1448);
    let (syn, syn_ack, ack) = (w.segments[0], w.segments[1], w.segments[2]);
    let mut stale = syn_ack;
    stale.flags = crate::decode::flags::ACK;
    stale.ack += 77_777;
    stale.ts_ns = us(100);
    let mut rst = syn;
    rst.flags = crate::decode::flags::RST;
    rst.seq = stale.ack;
    rst.ts_ns = us(150);
    let later = |mut s: Segment| {
        s.ts_ns += MS * 3_000;
        s
    };
    let flows = flows_after(&[syn, stale, rst, later(syn), later(syn_ack), later(ack)]);
    assert_eq!(flows.len(), 1);
}

/// The side the table names from a segment's key (which end of the key sent it) is the side
/// its addresses name: both ways, with the client's end sorting first or second, after the
/// roles swap, for IPv6, and on a connection from a port to itself.
#[test]
fn the_key_names_the_side_the_addresses_name() {
    let ends = [
        ("10.0.0.1", 40000, "10.0.0.2", 80),
        ("10.0.0.2", 40000, "10.0.0.1", 80),
        ("10.0.0.1", 80, "10.0.0.1", 40000),
        ("2001:db8::2", 40000, "2001:db8::1", 443),
        ("127.0.0.1", 7000, "127.0.0.1", 7000),
    ];
    let segment = |src: &str, src_port, dst: &str, dst_port| Segment {
        src: src.parse().expect("an address"),
        dst: dst.parse().expect("an address"),
        src_port,
        dst_port,
        ..Segment::UNSET
    };
    for (a, a_port, b, b_port) in ends {
        let there = segment(a, a_port, b, b_port);
        let back = segment(b, b_port, a, a_port);
        let mut flow = Flow::new(0, &there);
        for _ in 0..2 {
            for seg in [&there, &back] {
                let side = flow.side_of_source(HashedKey::of(seg).source_first);
                assert_eq!(side, flow.side_of(seg), "{a}:{a_port} {b}:{b_port}");
            }
            flow.swap_roles();
        }
    }
}

/// The table's hash spreads the keys of real traffic over the low bits the index probes from:
/// 65,536 connections that differ only in the client's port (loopback) or only in the client's
/// address fill about as many of 65,536 home slots as random numbers would (63 %).
#[test]
fn the_table_hash_spreads_ports_and_addresses() {
    let home = |seg: &Segment| {
        let hash = HashedKey::of(seg).hash();
        (((hash >> 32) ^ hash) & 0xffff) as usize
    };
    let by_port = (0..=u16::MAX).map(|port| Segment {
        src: "127.0.0.1".parse().expect("an address"),
        dst: "127.0.0.1".parse().expect("an address"),
        src_port: port,
        dst_port: 6379,
        ..Segment::UNSET
    });
    let by_address = (0..=u16::MAX).map(|n| Segment {
        src: std::net::IpAddr::from([10, 0, (n >> 8) as u8, n as u8]),
        dst: "10.1.0.1".parse().expect("an address"),
        src_port: 40000,
        dst_port: 443,
        ..Segment::UNSET
    });
    for (what, homes) in [
        ("ports", by_port.map(|s| home(&s)).collect::<Vec<_>>()),
        ("addresses", by_address.map(|s| home(&s)).collect()),
    ] {
        let mut filled = vec![false; 1 << 16];
        for h in homes {
            filled[h] = true;
        }
        let share = filled.iter().filter(|&&f| f).count() as f64 / f64::from(1u32 << 16);
        assert!(share > 0.55, "{what}: {share:.2} of the home slots");
    }
}
