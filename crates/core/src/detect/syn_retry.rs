//! A connect that waited for its SYN to be resent: the client's SYN went unanswered (no
//! SYN-ACK came back past the capture point) until its retransmission timer sent it again,
//! [`tcp_rules::TIMEOUT_INIT`] (1 s on Linux) after the first, doubling after that
//! (`tcp_retransmit_timer` on a SYN_SENT socket; `TCPSynRetrans`). The SYN was dropped: by
//! the server's listener, whose accept queue was full (`tcp_conn_request`:
//! `sk_acceptq_is_full`, [`tcp_rules::LISTEN_OVERFLOWS`]) or whose SYN queue was, or on the
//! path. The capture cannot tell which; the server's counters can (`probe` reads them when
//! the server is on its host).
//!
//! Its own kind rather than a cause of `rto`: no data waited (the whole connection did, before
//! it existed), its timer starts at 1 s rather than the RTO's 200 ms floor, and its fix is the
//! server's listen queue as often as the path.

use super::{
    Finding, Holder, KindInfo, Obligation, Proof, Release, Rule, StallEvent, StallKind, MIN_STALL,
};
use crate::decode::{flags, Segment};
use crate::flow::{Flow, Side, Span};
use crate::tcp_rules;

/// A SYN resent by the client's timer, no SYN-ACK seen in between.
pub const KIND: KindInfo = KindInfo {
    name: "syn_retry",
    is_stall: true,
    holder: Holder::Loss,
    release: Release::OwnTimer,
    // A SYN is resent by its timer alone (no duplicate ACK can trigger it): its timing, and
    // the client's packets, prove it.
    proof: Proof::Timing,
    rule: Some(Rule {
        rank: 25,
        judges: Rule::SYN,
        check,
    }),
    obligations: &[
        Obligation {
            name: "syn_refused",
            text:
                "nothing may have refused the SYN: a new SYN after the server's RST is the client \
               retrying a refused connect, not its SYN timer",
            holds: |flow, _, _, _| !flow.syn_refused,
        },
        Obligation {
            name: "packet_captured_twice",
            text:
                "the SYN must be a new packet: it carries the IPv4 identification of one already \
               seen (a new transmission numbers upward), so it is the same SYN captured twice \
               or replayed",
            holds: |flow, side, seg, _| !flow.dir(side).copy_of_earlier(seg),
        },
    ],
    margin: Some(|_, _, _, finding| margin(finding)),
    timer_episode: true,
    aside: None,
    column: "syn",
    page_column: "syn retry",
    gap: "{held}'s SYN unanswered until its retransmission timer",
    explain,
    fixes: |_, _| {
        vec![
            super::rto::ACCEPT_QUEUE_FIX.to_string(),
            "if the server's ListenOverflows did not rise: its SYN queue \
             (net.ipv4.tcp_max_syn_backlog, TcpExtListenDrops), a firewall, or packet loss on \
             the path dropped the SYN"
                .to_string(),
        ]
    },
};

fn explain(event: &StallEvent) -> String {
    let ms = event.finding.delay_ns.as_millis_f64();
    let times = if event.backoffs > 0 {
        format!(" ({} resends)", event.backoffs + 1)
    } else {
        String::new()
    };
    format!(
        "the client's connect waited {ms:.1} ms for its SYN to be resent{times}, with no SYN-ACK \
         seen in between: the SYN was dropped, by the server's listener (its accept or SYN queue \
         full) or on the path"
    )
}

/// The least wait a SYN timer is taken for: [`tcp_rules::RTO_MIN`], below any stack's
/// initial timeout (1 s on Linux, RFC 6298 §2.1; 3 s on older stacks, RFC 1122). A SYN
/// repeated sooner is a copy (one packet captured on several VLANs) or a scanner's.
const FLOOR: Span = Span::from_duration(tcp_rules::RTO_MIN);

/// Checks whether `seg` from `side` is the client's SYN resent with no SYN-ACK since the last.
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    let delay = resend_delay(flow, side, seg)?;
    (delay >= FLOOR.max(MIN_STALL)).then(|| Finding::own_timer(StallKind::SynRetry, side, delay))
}

/// Time since the client's previous SYN, when `seg` resends it with no SYN-ACK seen since.
fn resend_delay(flow: &Flow, side: Side, seg: &Segment) -> Option<Span> {
    let client_syn = seg.has(flags::SYN) && !seg.has(flags::ACK);
    if side != Side::Client || !client_syn || seg.seq != flow.dir(side).isn {
        return None;
    }
    let last = flow.syn_at?;
    if flow.syn_ack_at.is_some_and(|a| a >= last) {
        return None; // answered: the SYN-ACK was lost after the capture point, not the SYN
    }
    Some(seg.ts_ns.since(last))
}

/// How far the resend clears the rule's threshold.
pub fn margin(finding: &Finding) -> Span {
    finding.delay_ns - FLOOR.max(MIN_STALL)
}

/// Whether a connect time shows a SYN resent: at least [`tcp_rules::TIMEOUT_INIT`].
pub fn waited_for_syn_resend(connect: std::time::Duration) -> bool {
    connect >= tcp_rules::TIMEOUT_INIT
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire, MS};
    use super::super::StallKind;
    use crate::flow::{Side, Span};

    /// Moves every segment by a few microseconds: times that are all whole seconds would
    /// look like a coarse capture clock.
    fn off_the_second(w: &mut Wire) {
        for seg in &mut w.segments {
            seg.ts_ns += Span::from_micros(13);
        }
    }

    /// The client's SYN resent 1 s later, then answered: one connect stall of the client,
    /// and the server's leg timed from the SYN it answered.
    #[test]
    fn syn_resent_without_syn_ack_is_a_connect_stall() {
        let mut w = Wire::handshake(30, 1448);
        let syn = w.segments[0];
        let mut rest: Vec<_> = w.segments.drain(1..).collect();
        let mut again = syn;
        again.ts_ns += MS * 1_000;
        for seg in &mut rest {
            seg.ts_ns += MS * 1_000;
        }
        w.segments.push(again);
        w.segments.extend(rest);
        w.data(true, 1_001_000, 80).data(false, 1_001_100, 148);
        off_the_second(&mut w);
        let a = w.analyse();
        assert_single(&a, StallKind::SynRetry, Side::Client);
        assert_eq!(a.events[0].finding.delay_ns, MS * 1_000);
        assert!(a.flows[0].near_rtt_ns[1].is_some_and(|l| l < MS));
        // Resent again after 2 s more: one episode, its delay the whole wait.
        let mut w2 = resent_twice();
        off_the_second(&mut w2);
        let a = w2.analyse();
        assert_single(&a, StallKind::SynRetry, Side::Client);
        assert_eq!(a.events[0].backoffs, 1);
        assert_eq!(a.events[0].finding.delay_ns, MS * 3_000);
    }

    /// A SYN resent after the server's SYN-ACK passed the capture point: the SYN was not the
    /// one dropped. No connect stall is claimed; nor for a SYN repeated 50 ms later, sooner
    /// than any SYN timer (a copy).
    #[test]
    fn syn_resent_after_a_syn_ack_is_not_claimed() {
        let mut w = Wire::handshake(30, 1448);
        let syn = w.segments[0];
        w.segments.truncate(2);
        let mut again = syn;
        again.ts_ns += MS * 1_000;
        w.segments.push(again);
        off_the_second(&mut w);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.undecided.total(), 0);
        let mut w = Wire::handshake(30, 1448);
        let mut copy = w.segments[0];
        copy.ts_ns += MS * 50;
        w.segments.insert(1, copy);
        off_the_second(&mut w);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// A handshake whose SYN was resent 1 s and 3 s after the first, then answered.
    fn resent_twice() -> Wire {
        let mut w = Wire::handshake(30, 1448);
        let syn = w.segments[0];
        let tail: Vec<_> = w.segments.drain(1..).collect();
        for t in [1_000, 3_000] {
            let mut s = syn;
            s.ts_ns += MS * t;
            w.segments.push(s);
        }
        for mut seg in tail {
            seg.ts_ns += MS * 3_000;
            w.segments.push(seg);
        }
        w
    }

    /// Resent twice: the event is where its delay ends, at the last resend, and it starts at
    /// the first SYN, not before the flow.
    #[test]
    fn backed_off_event_ends_at_the_last_resend() {
        let mut w = resent_twice();
        for (i, seg) in w.segments.iter_mut().enumerate() {
            seg.packet_number = i as u64 + 1;
        }
        off_the_second(&mut w);
        let a = w.analyse();
        let e = &a.events[0];
        assert_eq!(e.packet_number, 3, "the last resend");
        assert_eq!(e.ts_ns, w.segments[2].ts_ns);
        assert_eq!(e.ts_ns.since(w.segments[0].ts_ns), e.finding.delay_ns);
    }

    /// The server refused the connect (RST); the client's same SYN a second later is a new
    /// attempt, not its SYN timer: set apart, not claimed.
    #[test]
    fn syn_after_the_servers_rst_is_not_a_resend() {
        let mut w = Wire::handshake(30, 1448);
        let syn = w.segments[0];
        w.segments.truncate(1);
        let mut rst = w.segments[0];
        rst.flags = crate::decode::flags::RST | crate::decode::flags::ACK;
        std::mem::swap(&mut rst.src, &mut rst.dst);
        std::mem::swap(&mut rst.src_port, &mut rst.dst_port);
        rst.seq = crate::flow::SeqNumber(0);
        rst.ack = syn.seq + 1;
        rst.ts_ns += MS / 10;
        w.segments.push(rst);
        let mut again = syn;
        again.ts_ns += MS * 1_000;
        w.segments.push(again);
        off_the_second(&mut w);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.undecided.claims()[0].reason.name(), "syn_refused");
    }

    /// A stale ACK answers the SYN, the client resets it and resends the same SYN 3 s later:
    /// one connection whose connect waited 3 s.
    #[test]
    fn same_syn_after_a_stale_ack_is_a_connect_stall() {
        let w = Wire::handshake(30, 1448);
        let (syn, syn_ack, ack) = (w.segments[0], w.segments[1], w.segments[2]);
        let mut stale = syn_ack;
        stale.flags = crate::decode::flags::ACK;
        stale.ack += 77_777;
        stale.ts_ns = syn.ts_ns + MS / 10;
        let mut rst = syn;
        rst.flags = crate::decode::flags::RST;
        rst.seq = stale.ack;
        rst.ts_ns = syn.ts_ns + MS / 5;
        let later = |mut s: crate::decode::Segment| {
            s.ts_ns += MS * 3_000;
            s
        };
        let mut w = Wire::handshake(30, 1448);
        w.segments = vec![syn, stale, rst, later(syn), later(syn_ack), later(ack)];
        off_the_second(&mut w);
        let a = w.analyse();
        assert_eq!(a.flows.len(), 1);
        assert_single(&a, StallKind::SynRetry, Side::Client);
        assert_eq!(a.events[0].finding.delay_ns, MS * 3_000);
    }
}
