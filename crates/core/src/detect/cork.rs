//! TCP_CORK and MSG_MORE: partial segments are held regardless of ACKs (`tcp_nagle_test` with
//! `TCP_NAGLE_CORK`); with nothing in flight the zero-window probe timer
//! (`tcp_check_probe_timer`, `max(RTO, TCP_RTO_MIN)`: 200 ms-class, measured 204-212 ms on
//! loopback) finally sends them.

use super::{Finding, Holder, KindInfo, Obligation, Proof, Release, Rule, StallEvent, StallKind};
use crate::decode::Segment;
use crate::flow::{Flow, Side, Span};
use crate::tcp_rules;

/// The obligation a whole answer cannot meet in a capture; TCP_CORK on the held socket
/// settles it ([`super::evidence::settled_by_socket`]).
pub const NOT_A_TAIL: &str = "cork_not_a_tail";

/// Data held by TCP_CORK or MSG_MORE until the probe timer sent it.
pub const KIND: KindInfo = KindInfo {
    name: "cork_timer",
    is_stall: true,
    holder: Holder::Cork,
    release: Release::OwnTimer,
    proof: Proof::HeldLeg,
    rule: Some(Rule {
        rank: 40,
        judges: Rule::DATA,
        check,
    }),
    obligations: &[
        Obligation {
            name: NOT_A_TAIL,
            text: "the data must be the partial tail of a write whose full segments left at once: \
               a whole answer ~200 ms after the request may be as long spent by its writer \
               (`tcpstall sockets PID` shows TCP_CORK, `tcpstall trace` the writes)",
            holds: |flow, side, _, _| tail_of_write(flow, side),
        },
        Obligation {
            name: "sender_not_linux",
            text: "the sender must be able to cork: its IP TTL (hop limit) is of a Windows host \
               (initial 128), and Windows has neither TCP_CORK nor MSG_MORE",
            holds: |_, _, seg, _| !windows_ttl(seg.ttl),
        },
    ],
    margin: Some(|flow, side, seg, _| margin(flow, side, seg)),
    timer_episode: false,
    aside: None,
    column: "cork",
    page_column: "cork",
    gap: "{held}'s data waits on its timer",
    explain,
    fixes: |held, _| {
        vec![format!(
            "clear TCP_CORK on the {} after the last write (or drop MSG_MORE from the last send)",
            held.name()
        )]
    },
};

/// The partial tail of a write whose full segments left at once was held by the kernel:
/// TCP_CORK or MSG_MORE. An answer that leaves ~200 ms after the request, all in one segment,
/// looks the same on the wire as a server that worked 200 ms before writing.
fn explain(event: &StallEvent) -> String {
    let held = event.finding.held_side.name();
    let peer = event.finding.held_side.peer().name();
    let ms = event.finding.delay_ns.as_millis_f64();
    if event.writes.len() > 1 {
        format!(
            "the {held}'s {} B tail left {ms:.1} ms after the full segments of its write, on the \
             cork timer (TCP_CORK or MSG_MORE left set after the last write)",
            event.released_bytes
        )
    } else {
        format!(
            "the {held}'s {} B answer left {ms:.1} ms after the {peer}'s request with nothing in \
             flight: the TCP_CORK/MSG_MORE timer (~200 ms), or as long spent by the {held} before \
             it wrote; a capture cannot tell them apart (`tcpstall sockets PID` shows TCP_CORK on \
             the socket, `tcpstall trace` the writes)",
            event.released_bytes
        )
    }
}

/// Shortest gap taken for the cork timer ([`tcp_rules::CORK_TIMER_MIN`]).
pub const CORK_MIN: Span = Span::from_duration(tcp_rules::CORK_TIMER_MIN);
/// Longest gap taken for the cork timer on a near-zero RTT path ([`tcp_rules::CORK_TIMER_MAX`]);
/// the path's RTT is added (the RTO grows with it, RFC 6298 §2).
pub const CORK_MAX: Span = Span::from_duration(tcp_rules::CORK_TIMER_MAX);

/// Checks whether `seg`, new data from `side`, left on the cork timer: a partial segment with
/// nothing in flight and no ACK releasing it, ~200 ms after the last activity that could have
/// queued it (the peer's last packet or this side's last data), and in the middle of a turn
/// (see [`continues_turn`]).
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    let me = flow.dir(side);
    if !me.is_new_data(seg) || !me.is_small(seg) {
        return None;
    }
    if me.in_flight() != 0 {
        return None; // Nagle's business, or a released hold
    }
    if !continues_turn(flow, side) {
        return None;
    }
    let t = Timing::of(flow, side, seg);
    // The timer is at least the round trip plus 200 ms ([`tcp_rules::cork_timer_floor`]): a
    // reply one round trip after the request is the path, not the cork timer.
    if t.at_sender < t.floor() || t.gap > t.ceiling() {
        return None;
    }
    Some(Finding::own_timer(StallKind::CorkTimer, side, t.gap))
}

/// How far a cork gap clears the timer's floor and ceiling: a capture clock coarser than this
/// cannot prove it.
pub fn margin(flow: &Flow, side: Side, seg: &Segment) -> Span {
    let t = Timing::of(flow, side, seg);
    (t.at_sender - t.floor()).min(t.ceiling() - t.gap)
}

/// A candidate cork gap and the path it is judged against.
struct Timing {
    /// From the last activity that could have queued the data to the data.
    gap: Span,
    /// The gap as the held side's host saw it.
    at_sender: Span,
    /// Both legs: the round trip between the hosts.
    path_rtt: Span,
}

impl Timing {
    fn of(flow: &Flow, side: Side, seg: &Segment) -> Timing {
        let me = flow.dir(side);
        let peer = flow.dir(side.peer());
        let last_activity = peer.last_seen.max(me.last_data);
        let gap = seg.ts_ns.since(last_activity);
        let path_rtt = me.near_rtt.unwrap_or(Span::ZERO) + peer.near_rtt.unwrap_or(Span::ZERO);
        // The gap as the held side's host saw it: when it counts from the peer's packet, that
        // packet reached the held side half a leg later and the held data took the other half
        // to come back, so the leg to the held side is the path's, not the timer's.
        let at_sender = if peer.last_seen > me.last_data {
            gap - me.near_rtt.unwrap_or(Span::ZERO)
        } else {
            gap
        };
        Timing {
            gap,
            at_sender,
            path_rtt,
        }
    }

    fn floor(&self) -> Span {
        CORK_MIN + self.path_rtt
    }

    /// The probe timer is `max(RTO, TCP_RTO_MIN)` (`tcp_probe0_base`), the RTO about the
    /// round trip plus 200 ms (`__tcp_set_rto`): a round trip more for its variation, no more
    /// (four let a far server's own response time through).
    fn ceiling(&self) -> Span {
        CORK_MAX + self.path_rtt * 2
    }
}

/// The data continues a turn already under way, so the application had written it earlier
/// and the kernel held it. Think time looks the same on the wire (silence, then a small
/// segment with nothing in flight), but starts a turn: a client sending its next request
/// after it read the whole answer. A held segment is either
/// - the partial tail of a write whose full-sized segments already left (`tcp_write_xmit`
///   sends full segments at once even when corked; only the last, partial one waits), or
/// - the server's answer to the client's request that came in since its last data: a server
///   answers when the request arrives, so a 200 ms-class wait there is the timer.
///
/// A client's first data after the server's answer starts a new request: never cork. (A
/// client that corks whole requests is missed, rather than every 200 ms pause flagged.)
fn continues_turn(flow: &Flow, side: Side) -> bool {
    let me = flow.dir(side);
    let peer = flow.dir(side.peer());
    let answers_request = side == Side::Server && peer.bytes > 0 && peer.last_data >= me.last_data;
    tail_of_write(flow, side) || answers_request
}

/// The held data follows full segments of the same write (`tcp_write_xmit` sends full
/// segments at once even when corked; only the last, partial one waits).
fn tail_of_write(flow: &Flow, side: Side) -> bool {
    let me = flow.dir(side);
    me.burst.count > 0 && !me.last_data_small
}

/// An observed TTL or hop limit from a host whose initial one is 128 (Windows's default):
/// above 64 (Linux, macOS and the BSDs start at 64) and at most 128. 0 is unknown.
pub(crate) fn windows_ttl(ttl: u8) -> bool {
    (65..=128).contains(&ttl)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire};
    use super::super::StallKind;
    use crate::flow::Side;

    /// A whole answer ~200 ms after the request: the timer, or the server's own time. The
    /// packets do not prove the cork: set apart, undecided, with the obligation it fails.
    #[test]
    fn whole_answer_on_the_timer_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40)
            .ack(false, 41_000)
            .data(false, 206_000, 300);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        let claims = a.undecided.claims();
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].kind, StallKind::CorkTimer);
        assert_eq!(claims[0].reason.name(), "cork_not_a_tail");
        assert_eq!(claims[0].packet_number, a.packets);
    }

    /// A client that reads the whole answer, then waits 200 ms before its next request: think
    /// time, whatever the length of the pause.
    #[test]
    fn think_time_of_200ms_is_not_cork() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 60)
            .data(false, 1_100, 60)
            .ack(true, 41_100)
            .data(true, 201_200, 60)
            .data(false, 201_300, 60)
            .data(true, 401_400, 60);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// The partial tail of a corked write leaves on the timer after its full segments.
    #[test]
    fn corked_tail_after_full_segments() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40)
            .data(false, 1_100, 1448)
            .ack(true, 1_200)
            .data(false, 206_000, 300);
        let a = w.analyse();
        assert_single(&a, StallKind::CorkTimer, Side::Server);
        // Full segments left at once, the tail 200 ms later: the kernel held it.
        let text = super::super::verdict::explain(&a.events[0]);
        assert!(
            text.contains("tail left") && text.contains("cork timer"),
            "{text}"
        );
    }

    /// Captured at the client over a 347 ms path: the server's reply arrives one round trip
    /// after the command. The path explains the gap; the timer would be the round trip plus
    /// 200 ms at least.
    #[test]
    fn reply_one_round_trip_later_is_not_cork() {
        let mut w = Wire::handshake_between(10, 347_000, 1448);
        w.data(true, 400_000, 40).data(false, 747_500, 300);
        assert_eq!(w.analyse().stall_count(), 0);
        // A tail after the write's full segment: the timer runs from the ACK's arrival for at
        // least the round trip plus 200 ms (the RTO's floor), and its data takes half a round
        // trip back: it is the timer. Sooner, it is not.
        let tail_at = |t_us: u64| {
            let mut w = Wire::handshake_between(10, 347_000, 1448);
            w.data(true, 400_000, 40)
                .data(false, 747_500, 1448)
                .ack(true, 747_600)
                .data(false, t_us, 300);
            w.analyse()
        };
        assert_single(&tail_at(1_650_000), StallKind::CorkTimer, Side::Server);
        assert_eq!(tail_at(1_300_000).stall_count(), 0);
        // Far beyond the timer given the path (a round trip more than its floor): the
        // writer's own time.
        assert_eq!(tail_at(1_900_000).stall_count(), 0);
    }

    /// The same corked tail from a host with TTL 128 (Windows: no TCP_CORK, no MSG_MORE):
    /// set apart, undecided.
    #[test]
    fn corked_tail_from_windows_ttl_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40)
            .data(false, 1_100, 1448)
            .ack(true, 1_200)
            .data(false, 206_000, 300);
        w.last().ttl = 128;
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        let claims = a.undecided.claims();
        assert_eq!(claims.len(), 1, "{:?}", a.undecided);
        assert_eq!(claims[0].kind, StallKind::CorkTimer);
        assert_eq!(claims[0].reason.name(), "sender_not_linux");
    }

    #[test]
    fn quick_answer_is_not_cork() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40).data(false, 1_200, 300);
        assert_eq!(w.analyse().stall_count(), 0);
    }
}
