//! Nagle's algorithm (RFC 896, RFC 1122 §4.2.3.4) holding a small segment until an ACK.
//!
//! Linux uses Minshall's variant (`tcp_nagle_check` → `tcp_minshall_check`): a partial segment
//! waits only while an earlier *sub-MSS* segment is unacknowledged (`snd_sml` above
//! `snd_una`). The wire shows a held segment B leaving right after the peer's pure ACK that
//! covered the small segment A. Whether that ACK was delayed (`tcp_send_delayed_ack`: 40 ms to
//! 200 ms on Linux, ~200 ms on Windows) decides between a real stall and a one-RTT hold.

use super::verdict::{delack_cap_fix, held_address, message, route_fix, sizes};
use super::{
    Finding, Holder, KindInfo, Obligation, PeerStack, Proof, Release, Rule, StallEvent, StallKind,
};
use crate::decode::Segment;
use crate::flow::{Flow, Side, Span};
use crate::tcp_rules;

/// A Nagle hold released by the peer's delayed ACK: 40 ms or more a turn.
pub const KIND: KindInfo = KindInfo {
    name: "nagle_delayed_ack",
    is_stall: true,
    holder: Holder::Nagle,
    release: Release::DelayedAck,
    proof: Proof::HeldLeg,
    // Also finds [`super::nagle_minor`]: one check, the ACK's delay decides.
    rule: Some(Rule {
        rank: 30,
        judges: Rule::DATA,
        check,
    }),
    obligations: &[HOLD[0], HOLD[1], HOLD[2], PEER_LEG],
    margin: Some(|flow, side, _, finding| margin(flow, side, finding)),
    timer_episode: false,
    aside: None,
    column: "nagle",
    page_column: "nagle×delack",
    gap: "{held} holds data until {peer}'s delayed ACK",
    explain: |event| explain_hold(event, "delayed "),
    fixes: |held, example| hold_fixes(held, example, true),
};

/// What the packets must show for any Nagle hold, delayed ACK or not (`tcp_nagle_check`,
/// `tcp_minshall_check`).
pub(super) const HOLD: [Obligation; 3] = [
    Obligation {
        name: "held_segment_full",
        text: "the released segment must be below one full segment: Nagle never holds a full \
               one (a full or larger segment leaving on the peer's ACK waited for the send \
               buffer or the window, through that ACK's delay; TCP_NODELAY cannot help it). \
               With no SYN to give the MSS, one the size of the largest the side sent before \
               may be full: a sender cuts its data there",
        holds: |flow, side, seg, _| {
            let me = flow.dir(side);
            me.below_mss(seg) && !me.repeats_largest(seg)
        },
    },
    Obligation {
        name: "held_side_nagle_off",
        text: "the held side must behave as Nagle on: it sent a sub-MSS segment while another \
               of its sub-MSS segments was unacknowledged, which Nagle forbids (it runs with \
               TCP_NODELAY; its waits are not Nagle's)",
        holds: |flow, side, _, _| !flow.dir(side).nagle_off,
    },
    Obligation {
        name: "ack_not_of_the_small_segment",
        text: "the peer's ACK must acknowledge exactly the end of the small segment it released",
        holds: |flow, side, _, _| {
            let me = flow.dir(side);
            flow.prev.and_then(|p| p.ack) == Some(me.snd_nxt) && me.snd_sml == me.snd_nxt
        },
    },
];

/// A delayed ACK is told from the path only when the leg to the ACKing side is timed, or is
/// no path at all: both ends on one host's loopback (RFC 1122 §3.2.1.3).
const PEER_LEG: Obligation = Obligation {
    name: "ack_delay_unmeasured",
    text: "the round trip to the ACKing side must be timed, so that the ACK's delay is not the \
           path's",
    holds: |flow, side, _, _| flow.dir(side.peer()).ack_leg().is_some() || flow.on_loopback(),
};

/// The sentence of a Nagle hold; `ack` qualifies the peer's ACK that released it.
pub(super) fn explain_hold(event: &StallEvent, ack: &str) -> String {
    let f = &event.finding;
    let held = f.held_side.name();
    let peer = f.held_side.peer().name();
    let ms = f.delay_ns.as_millis_f64();
    let w = &event.writes;
    let what = if w.len() >= 2 {
        format!(
            "the {held} writes the {} in {} writes ({}); the last waits for the {peer}'s {ack}ACK",
            message(f.held_side),
            w.len(),
            sizes(w),
        )
    } else {
        format!(
            "the {held}'s {} B write waits for the {peer}'s {ack}ACK of its previous small segment",
            event.released_bytes,
        )
    };
    match event.peer_stack {
        Some(stack) => format!("{what} ({ms:.1} ms; {peer} looks {})", stack.describe()),
        None => format!("{what} ({ms:.1} ms)"),
    }
}

/// The fixes of a Nagle hold of the `held` side; `delayed` when a delayed ACK released it.
pub(super) fn hold_fixes(held: Side, example: Option<&StallEvent>, delayed: bool) -> Vec<String> {
    let peer = example.and_then(|e| e.peer_stack);
    hold_fixes_for(held, peer, example.map(held_address), delayed)
}

/// The fixes of a Nagle hold of `held`, whose peer runs `peer` (None: not known, its fixes are
/// Linux's, the common server), `held_addr` the held side's address when known: the held
/// side's own fixes, then the peer's switches for ACKing at once, each as that peer's system
/// offers it (`delayed`: the hold waited for a delayed ACK, which a cap on it shortens). The
/// probe, which knows its own system, gives it for the holds of the server it talks to.
pub fn hold_fixes_for(
    held: Side,
    peer: Option<PeerStack>,
    held_addr: Option<std::net::IpAddr>,
    delayed: bool,
) -> Vec<String> {
    let h = held.name();
    let p = held.peer().name();
    let mut fixes = vec![
        format!(
            "write the {} in one call on the {h} (one buffer, or writev/sendmsg)",
            message(held)
        ),
        format!("set TCP_NODELAY on the {h}'s socket"),
    ];
    // Linux's options are of no use to a peer whose delay names another stack: Windows and
    // macOS have no TCP_QUICKACK and no per-route cap.
    let linux_peer = matches!(
        peer,
        None | Some(PeerStack::Linux | PeerStack::Unknown | PeerStack::Ambiguous)
    );
    if linux_peer {
        fixes.push(format!(
            "set TCP_QUICKACK on the {p}'s socket, again after every read"
        ));
    }
    if peer == Some(PeerStack::Windows) {
        // mstcpip.h's per-socket control code (Windows 10 and later): an ACK for every
        // segment, on that socket only.
        fixes.push(format!(
            "set SIO_TCP_SET_ACK_FREQUENCY to 1 on the {p}'s socket (WSAIoctl; that socket \
             then ACKs every segment at once)"
        ));
    }
    // A minor hold waited for an ordinary ACK: a cap on the delayed ACK changes nothing.
    let ambiguous = peer == Some(PeerStack::Ambiguous);
    let if_linux = if ambiguous {
        " and the peer runs Linux"
    } else {
        ""
    };
    if delayed && linux_peer {
        fixes.push(format!(
            "if the {h} cannot be changed{if_linux}, {}",
            delack_cap_fix(p)
        ));
        fixes.extend(route_fix(p, h, held_addr));
    }
    if delayed && matches!(peer, Some(PeerStack::Windows | PeerStack::Ambiguous)) {
        fixes.push(format!(
            "if the {p} runs Windows: TcpAckFrequency = 1 on its interface (registry, \
             Tcpip\\Parameters\\Interfaces\\{{GUID}}; every connection of the interface ACKs \
             at once)"
        ));
    }
    if delayed && peer == Some(PeerStack::MacOsBsd) {
        // XNU's and FreeBSD's switch for the whole host (`tcp_delack_enabled`).
        fixes.push(format!(
            "if the {p} runs macOS or BSD: sysctl net.inet.tcp.delayed_ack=0 (every connection \
             of the host ACKs at once)"
        ));
    }
    fixes
}

/// An ACK that took at least this long after the small segment (path RTT removed) was a delayed
/// ACK ([`tcp_rules::STALL_THRESHOLD`]: `TCP_DELACK_MIN` less a margin for rounding down).
pub const DELAYED_ACK_MIN: Span = Span::from_duration(tcp_rules::STALL_THRESHOLD);
/// What ended a Nagle hold, where the source sees the release itself (the kernel's hooks) or
/// infers it (a capture, the probe's own socket).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldEnd {
    /// The peer's ACK of the small segment in flight (`tcp_nagle_check` satisfied).
    PeerAck,
    /// The sender's own loss-recovery timer (tail-loss probe or retransmission timeout) sent
    /// the data: the ACK never came.
    LossTimer,
}

/// The kind of a Nagle hold: the one rule every source of holds classifies with (`analyze`'s
/// capture, `watch --kernel`'s hooks, `probe`'s socket). `ack_delay` is how long the ACK took
/// beyond the path's round trip: at least [`DELAYED_ACK_MIN`] and it was a delayed ACK (or a
/// loss timer's wait), sooner an ordinary ACK, a minor hold.
pub fn hold_kind(ack_delay: Span, end: HoldEnd) -> StallKind {
    match end {
        _ if ack_delay < DELAYED_ACK_MIN => StallKind::NagleMinor,
        HoldEnd::LossTimer => StallKind::Rto,
        HoldEnd::PeerAck => StallKind::NagleDelayedAck,
    }
}

/// Clock and scheduling slack when a release is judged against the path
/// ([`tcp_rules::PATH_SLACK`]).
const PATH_SLACK: Span = Span::from_duration(tcp_rules::PATH_SLACK);

/// Checks whether `seg`, new data from `side`, is a Nagle hold released by the peer's ACK
/// (Linux `tcp_nagle_check` holding it, `tcp_send_delayed_ack` or the peer's own timer
/// releasing it; the conditions below).
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    let me = flow.dir(side);
    let prev = flow.prev?;
    // 1. B is new data, and the last data segment A before it was sub-MSS.
    if !me.is_new_data(seg) || !me.last_data_small {
        return None;
    }
    // 2. The packet just before B is the peer's pure ACK that covered A and advanced snd_una
    //    (A was unacknowledged before it), with the window open. Data from the peer instead
    //    means the application answered, not Nagle.
    if prev.side != side.peer() || !prev.pure_ack || !prev.advanced_una || prev.window == 0 {
        return None;
    }
    // A sender that had filled the peer's window waited for the window, not for Nagle.
    if prev.window_limited {
        return None;
    }
    let ack = prev.ack?;
    if !(me.snd_sml <= ack && prev.una_before < me.snd_sml) {
        return None;
    }
    // A must be the last thing this side sent before the ACK (no data in between).
    if me.last_data > prev.at {
        return None;
    }
    // 3. B follows the ACK closely: at once on the sender, one near-side RTT elsewhere. And
    //    not sooner than that ACK can reach B's sender and B come back to the capture point:
    //    a release the path makes impossible was something else's doing (the sender's own
    //    next write, another connection's close), not this ACK's.
    let release = seg.ts_ns.since(prev.at);
    // 4. How long the ACK took after A, minus the round trip from the capture point to the
    //    peer: the peer's ACK delay.
    let ack_after_a = prev.at.since(me.last_data);
    let peer_near = flow.dir(side.peer()).ack_leg().unwrap_or(Span::ZERO);
    let ack_delay = ack_after_a - peer_near;
    let delay = seg.ts_ns.since(me.last_data);
    let kind = hold_kind(ack_delay, HoldEnd::PeerAck);
    if release > release_allowance(flow, side, kind) {
        return None;
    }
    // A stall released sooner than the leg by less than a quarter of it is a claim the
    // capture cannot settle (evidence.rs sets it apart); a minor hold so released is taken,
    // the path varying as RACK allows (RFC 8985 §6.2); any release sooner still is not the
    // ACK's doing.
    if let Some(near) = me.measured_leg() {
        if release + PATH_SLACK + near / 4 < near {
            return None;
        }
    }
    Some(Finding {
        kind,
        held_side: side,
        ack_side: Some(side.peer()),
        delay_ns: delay,
        ack_delay_ns: Some(ack_delay),
        release_ns: Some(release),
    })
}

/// How far a Nagle stall's timing clears the rule's thresholds (the ACK's delay above
/// [`DELAYED_ACK_MIN`], the release within the follow allowance and not sooner than the leg to
/// the held side): a capture clock coarser than this cannot prove it.
pub fn margin(flow: &Flow, side: Side, finding: &Finding) -> Span {
    let ack_delay = finding.ack_delay_ns.unwrap_or(Span::ZERO);
    (ack_delay - DELAYED_ACK_MIN).min(release_margin(flow, side, finding))
}

/// How far a Nagle release clears its bounds: within [`release_allowance`] after the ACK, and
/// not sooner than the leg to the held side. A minor hold claims no stall, yet is proven only
/// by this timing: a clock coarser than it proves no hold.
pub fn release_margin(flow: &Flow, side: Side, finding: &Finding) -> Span {
    let release = finding.release_ns.unwrap_or(Span::ZERO);
    let mut margin = release_allowance(flow, side, finding.kind) - release;
    if let Some(near) = flow.dir(side).measured_leg() {
        margin = margin.min(release + PATH_SLACK - near);
    }
    margin
}

/// How soon after the ACK that releases it a held segment of `kind` reaches the capture
/// point: one round trip to the held side and slack. A stall is allowed half a leg more for
/// the path's variation ([`Flow::follow_allowance`]); a minor hold, which claims no stall, the
/// leg and the clock's slack alone, so that a sender's own next write a little later is not
/// taken for a release. Between two loopback addresses there is no path (a leg timed by
/// answers holds the writer's own time): the held segment leaves in the ACK's softirq
/// (`tcp_rcv_established` → `tcp_data_snd_check`), within the slack.
fn release_allowance(flow: &Flow, side: Side, kind: StallKind) -> Span {
    if flow.on_loopback() {
        PATH_SLACK
    } else if kind == StallKind::NagleMinor {
        flow.dir(side).near_rtt.unwrap_or(Span::ZERO) + PATH_SLACK
    } else {
        flow.follow_allowance(side)
    }
}

/// Whether the data came back sooner after the ACK than the round trip to the held side, by
/// more than the clock's slack: the leg is the quickest of a few samples (the handshake, the
/// quickest answers), each late by whatever queueing and scheduling added to it, so a later
/// round trip may be quicker than all of them; or something else released the data. A
/// quarter of the leg sooner is still taken as the path varying (RACK allows a quarter of the
/// minimum RTT for it, RFC 8985 §6.2 `reo_wnd`) and set apart, undecided; sooner still,
/// [`check`] rejects the release.
pub fn released_before_the_leg(flow: &Flow, side: Side, finding: &Finding) -> bool {
    let release = finding.release_ns.unwrap_or(Span::ZERO);
    flow.dir(side)
        .measured_leg()
        .is_some_and(|near| release + PATH_SLACK < near)
}

#[cfg(test)]
mod tests {
    use super::super::evidence::Reason;
    use super::super::testing::{assert_single, Wire, MS};
    use super::super::{PeerStack, StallKind};
    use super::{hold_kind, HoldEnd, DELAYED_ACK_MIN};
    use crate::flow::Side;
    use crate::units::Span;

    #[test]
    fn a_hold_is_minor_below_the_delayed_ack_and_a_timer_makes_it_a_timeout() {
        let below = DELAYED_ACK_MIN - Span::from_nanos(1);
        for end in [HoldEnd::PeerAck, HoldEnd::LossTimer] {
            assert_eq!(hold_kind(below, end), StallKind::NagleMinor);
        }
        assert_eq!(
            hold_kind(DELAYED_ACK_MIN, HoldEnd::PeerAck),
            StallKind::NagleDelayedAck
        );
        assert_eq!(
            hold_kind(DELAYED_ACK_MIN, HoldEnd::LossTimer),
            StallKind::Rto
        );
    }

    /// Keep-alive request/response where the server writes header then body: the body waits
    /// for the client's delayed ACK (the 004 source's `ab -k` case).
    #[test]
    fn split_response_held_until_delayed_ack() {
        let mut w = Wire::handshake(30, 1448);
        w.segments[0].timestamps = Some((1, 0)); // the client's SYN: Linux's options
        w.data(true, 1_000, 80) // request
            .data(false, 1_100, 148) // header
            .ack(true, 41_100) // client's delayed ACK, 40 ms
            .data(false, 41_130, 127); // body, released
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleDelayedAck), 1);
        let e = &a.events[0];
        assert_eq!(e.finding.held_side, Side::Server);
        assert_eq!(e.finding.ack_side, Some(Side::Client));
        assert_eq!(e.writes, vec![148, 127]);
        assert_eq!(e.peer_stack, Some(PeerStack::Linux));
        assert!(e.finding.delay_ns >= MS * 40);
    }

    #[test]
    fn windows_peer_named_from_200ms() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 6)
            .ack(false, 201_000)
            .data(true, 201_050, 7);
        let a = w.analyse();
        assert_single(&a, StallKind::NagleDelayedAck, Side::Client);
        assert_eq!(a.events[0].peer_stack, Some(PeerStack::Windows));
    }

    /// One RTT hold (ACK not delayed) is minor, not a stall.
    #[test]
    fn quick_ack_release_is_minor() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 6)
            .ack(false, 1_040)
            .data(true, 1_060, 7);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.counts.get(StallKind::NagleMinor), 1);
    }

    /// Think time: the next write comes 5 ms after the ACK, not at once.
    #[test]
    fn write_after_pause_is_not_nagle() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 6)
            .ack(false, 41_000)
            .data(true, 46_000, 6);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// A request answered by data: the next request is the application's turn, not Nagle.
    #[test]
    fn request_after_response_is_not_nagle() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 13)
            .data(false, 1_100, 13)
            .ack(true, 41_100);
        w.data(false, 41_150, 13);
        // the server's second write follows the client's ACK of *its* data: that is a hold
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleDelayedAck), 1);
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 13)
            .data(false, 1_100, 13)
            .data(true, 45_000, 13);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// Captured on the receiver (the server host, 30 ms from the client): the held request
    /// part arrives one RTT after the server's delayed ACK left.
    #[test]
    fn captured_on_the_receiver() {
        let mut w = Wire::handshake_between(30_000, 10, 1448);
        w.segments[1].timestamps = Some((1, 1)); // the server's SYN-ACK: Linux's options
        w.data(true, 100_000, 6)
            .ack(false, 140_100)
            .data(true, 170_150, 7);
        let a = w.analyse();
        assert_single(&a, StallKind::NagleDelayedAck, Side::Client);
        assert_eq!(a.events[0].peer_stack, Some(PeerStack::Linux));
        assert_eq!(a.flows[0].capture_position(), "server host");
    }

    /// Captured mid-path, 20 ms from the client and 30 ms from the server: the ACK shows up
    /// 30 + 40 ms after A; the peer's delay is still named 40 ms.
    #[test]
    fn captured_mid_path() {
        let mut w = Wire::handshake_between(20_000, 30_000, 1448);
        w.data(true, 100_000, 6)
            .ack(false, 170_500)
            .data(true, 190_600, 7);
        let a = w.analyse();
        assert_single(&a, StallKind::NagleDelayedAck, Side::Client);
        let ack_delay = a.events[0].finding.ack_delay_ns.unwrap_or_default();
        assert!((MS * 39..=MS * 42).contains(&ack_delay), "{ack_delay:?}");
        assert_eq!(a.flows[0].capture_position(), "mid-path");
    }

    /// Captured at the client, 88 ms from the server: the server's second segment arrives
    /// 70 ms after the client's ACK, sooner than that ACK can reach the server and the segment
    /// come back as timed so far: the path got quicker, or something else released it. Set
    /// apart, undecided. 1 ms after the ACK, it cannot be the ACK's doing at all.
    #[test]
    fn release_sooner_than_the_path_allows_is_not_nagle() {
        let released_after = |t_us: u64| {
            let mut w = Wire::handshake_between(10, 88_000, 1448);
            w.data(true, 100_000, 20)
                .data(false, 188_000, 30)
                .ack(true, 228_000)
                .data(false, 228_000 + t_us, 30);
            w.analyse()
        };
        let a = released_after(70_000);
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.counts.get(StallKind::NagleMinor), 0);
        assert_eq!(
            a.undecided.entries(),
            &[(StallKind::NagleDelayedAck, Reason::PathVaried, 1)]
        );
        let a = released_after(1_000);
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.undecided.total(), 0);
        // One round trip after the ACK, it is the ACK's doing.
        let mut w = Wire::handshake_between(10, 88_000, 1448);
        w.data(true, 100_000, 20)
            .data(false, 188_000, 30)
            .ack(true, 228_000)
            .data(false, 316_500, 30);
        let a = w.analyse();
        assert_single(&a, StallKind::NagleDelayedAck, Side::Server);
        assert_eq!(a.events[0].finding.release_ns, Some(MS * 88 + MS / 2));
    }

    /// SYNs announcing 1460 and 1452, timestamps on: the server sends at most 1452 - 12 =
    /// 1440 B, so 1440 B segments are full, not held, and the bulk transfer has no Nagle hold.
    #[test]
    fn effective_mss_takes_both_syns_and_the_options() {
        let mut w = Wire::handshake(30, 1460);
        w.segments[1].mss = Some(1452);
        w.data(true, 1_000, 100)
            .data(false, 1_100, 1440)
            .ack(true, 41_100)
            .data(false, 41_130, 1440)
            .ack(true, 81_200)
            .data(false, 81_230, 1440);
        for seg in &mut w.segments {
            seg.timestamps = Some((1, 1));
        }
        let a = w.analyse();
        assert_eq!(a.flows[0].mss, [1452, 1452]);
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.counts.get(StallKind::NagleMinor), 0);
    }

    /// A sender that filled the peer's window waits for the window, not for Nagle.
    #[test]
    fn window_limited_sender_is_not_nagle() {
        let mut w = Wire::handshake(30, 1448);
        w.ack_window(false, 500, 8) // 8 << 7 = 1024 bytes
            .data(true, 1_000, 1024)
            .ack_window(false, 45_000, 8)
            .data(true, 45_020, 1000);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.counts.get(StallKind::NagleMinor), 0);
    }

    /// Full-sized segments are never held: a full MSS then a tail is not Nagle.
    #[test]
    fn full_segment_then_tail_is_not_nagle() {
        let mut w = Wire::handshake(30, 988);
        w.data(true, 1_000, 988)
            .ack(false, 41_000)
            .data(true, 41_020, 100);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// The reason a lone claim was set apart.
    fn undecided_reason(a: &super::super::Analysis) -> Option<&'static str> {
        match a.undecided.claims() {
            [c] => Some(c.reason.name()),
            _ => None,
        }
    }

    /// A full-sized segment, or a TSO super-segment, leaving on the peer's delayed ACK of a
    /// small one: Nagle never holds a full segment (the sender waited on its send buffer or
    /// window). Never a Nagle stall: set apart with the obligation it fails.
    #[test]
    fn full_segment_released_by_a_delayed_ack_is_not_nagle() {
        for len in [1448, 11_141] {
            let mut w = Wire::handshake(30, 1448);
            w.data(true, 1_000, 80)
                .data(false, 1_100, 892)
                .ack(true, 201_100)
                .data(false, 201_130, len);
            let a = w.analyse();
            assert_eq!(a.stall_count(), 0, "{len} B: {:?}", a.counts);
            assert_eq!(a.counts.get(StallKind::NagleMinor), 0);
            assert_eq!(undecided_reason(&a), Some("held_segment_full"), "{len} B");
            assert_eq!(a.undecided.claims()[0].packet_number, a.packets);
        }
    }

    /// A side that sent a small segment 10 µs after another, the first unacknowledged, runs
    /// with Nagle off: its later wait for a delayed ACK is not Nagle's, and it gets no
    /// TCP_NODELAY advice.
    #[test]
    fn side_seen_with_nagle_off_gets_no_nagle_claim() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 1)
            .data(false, 1_110, 1024)
            .ack(true, 1_200)
            .data(true, 10_000, 80)
            .data(false, 10_100, 148)
            .ack(true, 50_100)
            .data(false, 50_130, 127);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(undecided_reason(&a), Some("held_side_nagle_off"));
        // The same exchange without the tell-tale pair is a Nagle stall.
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 1025)
            .ack(true, 1_200)
            .data(true, 10_000, 80)
            .data(false, 10_100, 148)
            .ack(true, 50_100)
            .data(false, 50_130, 127);
        assert_single(&w.analyse(), StallKind::NagleDelayedAck, Side::Server);
    }

    /// Without the handshake the ACKing side's leg is untimed: a 40 ms wait for its ACK may be
    /// the path. Set apart.
    #[test]
    fn ack_delay_without_the_peer_leg_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127);
        w.segments.drain(..3);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(undecided_reason(&a), Some("ack_delay_unmeasured"));
    }

    /// A 40 ms delayed ACK from a peer whose SYN carried no TCP timestamps (Windows's default;
    /// Linux sends them): ambiguous, said so, with the fixes for both.
    #[test]
    fn peer_stack_from_the_fingerprint_not_the_delay_alone() {
        let run = |timestamps: bool| {
            let mut w = Wire::handshake(30, 1448);
            if timestamps {
                w.segments[0].timestamps = Some((1, 0));
            }
            w.data(true, 1_000, 80)
                .data(false, 1_100, 148)
                .ack(true, 41_100)
                .data(false, 41_130, 127);
            w.analyse()
        };
        let a = run(true);
        assert_eq!(a.events[0].peer_stack, Some(PeerStack::Linux));
        let a = run(false);
        let e = &a.events[0];
        assert_eq!(e.peer_stack, Some(PeerStack::Ambiguous));
        let fixes = super::hold_fixes(Side::Server, Some(e), true);
        assert!(
            fixes.iter().any(|f| f.contains("TcpAckFrequency")),
            "{fixes:?}"
        );
        assert!(
            fixes.iter().any(|f| f.contains("TCP_DELACK_MAX_US")),
            "{fixes:?}"
        );
    }

    /// Each peer's stack gets its own switches for ACKing at once, and no other system's:
    /// Linux's TCP_QUICKACK and delayed-ACK cap, Windows's per-socket ACK frequency and
    /// registry value, macOS's and BSD's sysctl.
    #[test]
    fn the_peer_s_fixes_are_its_own_system_s() {
        let fixes = |peer| super::hold_fixes_for(Side::Server, peer, None, true).join("\n");
        for linux in [None, Some(PeerStack::Linux), Some(PeerStack::Unknown)] {
            let f = fixes(linux);
            assert!(
                f.contains("TCP_QUICKACK") && f.contains("TCP_DELACK_MAX_US"),
                "{f}"
            );
            assert!(
                !f.contains("SIO_TCP_SET_ACK_FREQUENCY") && !f.contains("sysctl"),
                "{f}"
            );
        }
        let windows = fixes(Some(PeerStack::Windows));
        assert!(
            windows.contains("SIO_TCP_SET_ACK_FREQUENCY to 1 on the client's socket"),
            "{windows}"
        );
        assert!(windows.contains("TcpAckFrequency"), "{windows}");
        assert!(
            !windows.contains("TCP_QUICKACK") && !windows.contains("TCP_DELACK_MAX_US"),
            "{windows}"
        );
        let mac = fixes(Some(PeerStack::MacOsBsd));
        assert!(mac.contains("net.inet.tcp.delayed_ack=0"), "{mac}");
        assert!(
            !mac.contains("TCP_QUICKACK") && !mac.contains("TcpAckFrequency"),
            "{mac}"
        );
        // Either system: the fixes of both.
        let either = fixes(Some(PeerStack::Ambiguous));
        assert!(
            either.contains("TCP_QUICKACK") && either.contains("TcpAckFrequency"),
            "{either}"
        );
        // A minor hold waited for no delayed ACK: no cap, no registry value, no sysctl.
        let minor = super::hold_fixes_for(Side::Server, Some(PeerStack::MacOsBsd), None, false);
        assert_eq!(minor.len(), 2, "{minor:?}");
    }

    /// A generated trace, every packet 1.000 ms after the one before: its holds are the
    /// generator's timing, no stack's, and are not counted, those before the cadence showed
    /// neither (dropped as the flow retires); the same exchange with a real path's uneven
    /// gaps has all of them.
    #[test]
    fn evenly_spaced_packets_prove_no_hold() {
        let run = |jitter_us: u64| {
            let mut w = Wire::handshake(30, 1448);
            for round in 0..10u64 {
                let t = 1_000 + round * 4_000;
                w.data(true, t, 40)
                    .ack(false, t + 1_000 + (round % 3 + 1) * jitter_us)
                    .data(true, t + 2_000, 40)
                    .ack(false, t + 3_000);
            }
            w.analyse().counts.get(StallKind::NagleMinor)
        };
        // Every segment but the first follows the ACK of the one before: 19 holds.
        assert_eq!(run(70), 19);
        assert_eq!(run(0), 0);
    }

    /// Between two loopback addresses there is no path: a segment 1.5 ms after the ACK is the
    /// application's next write, whatever the answers timed, not a release.
    #[test]
    fn on_loopback_a_release_leaves_at_once() {
        let run = |release_us: u64| {
            let mut w = Wire::handshake(30, 1448);
            for s in &mut w.segments {
                s.src = std::net::Ipv4Addr::LOCALHOST.into();
                s.dst = std::net::Ipv4Addr::LOCALHOST.into();
            }
            w.data(true, 1_000, 50)
                .data(false, 1_100, 100)
                .ack(true, 1_150)
                .data(false, 1_150 + release_us, 100);
            w.segments.drain(..3);
            w.analyse().counts.get(StallKind::NagleMinor)
        };
        assert_eq!(run(20), 1);
        assert_eq!(run(1_500), 0);
    }

    /// Without the SYNs the MSS is a guess: a segment the size of the largest the side sent
    /// before (1402 B, again) is where it cuts its data, maybe a full segment, and no hold.
    /// Small equal writes are no MSS, and a SYN's MSS settles it.
    #[test]
    fn without_the_syn_a_repeat_of_the_largest_size_may_be_full() {
        let run = |size: u32, syn: bool| {
            let mut w = Wire::handshake(30, 1460);
            w.data(true, 1_000, 50)
                .data(false, 1_100, size)
                .ack(true, 1_200);
            w.data(false, 1_250, size).ack(true, 1_350);
            w.data(false, 1_400, size);
            if !syn {
                w.segments.drain(..3);
            }
            w.analyse().counts.get(StallKind::NagleMinor)
        };
        assert_eq!(run(1402, false), 0);
        assert_eq!(run(1402, true), 2);
        assert_eq!(run(100, false), 2);
    }

    /// Nagle off shows only after a claim: the side set TCP_NODELAY later (OpenSSH does once
    /// the session is interactive, `ssh_packet_set_interactive`), which says nothing of its
    /// socket before. The earlier claim stands; a later wait is set apart.
    #[test]
    fn nagle_off_seen_later_keeps_the_earlier_claim() {
        let mut w = Wire::handshake(30, 1448);
        w.segments[0].timestamps = Some((1, 0));
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127)
            .data(true, 100_000, 80)
            .data(false, 100_100, 1)
            .data(false, 100_110, 1024)
            .ack(true, 100_200)
            .data(true, 200_000, 80)
            .data(false, 200_100, 148)
            .ack(true, 240_100)
            .data(false, 240_130, 127);
        let a = w.analyse();
        assert_single(&a, StallKind::NagleDelayedAck, Side::Server);
        assert_eq!(
            a.events[0].packet_number, 7,
            "the hold before Nagle went off"
        );
        assert_eq!(undecided_reason(&a), Some("held_side_nagle_off"));
    }
}
