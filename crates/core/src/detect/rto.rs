//! Retransmissions sent by the retransmission timer (RFC 6298; Linux `tcp_retransmit_timer`,
//! and the tail-loss probe `tcp_send_loss_probe`, which also fires with no ACK to trigger it).
//!
//! A segment repeating sequence space already sent is a retransmission. When the peer's last
//! packet came just before it (duplicate ACKs, SACK) it is a fast retransmit (RFC 5681 §3.2):
//! it costs about one RTT and is only counted in the flow. When nothing triggered it, the
//! sender sat out a timer: a stall of at least the RTO (Linux `TCP_RTO_MIN` = 200 ms) — unless
//! it came sooner than the path allows any timeout and resent the tail with data unacked
//! before it: a tail-loss probe (RFC 8985 §7, `tcp_send_loss_probe`), the loss recovery of
//! about two round trips, counted in the flow (`loss_probes`) and not as a stall.
//!
//! A client's first data resent by the timer, when the server never took the handshake, is no
//! loss of the path's making: a listener whose accept queue was full dropped the handshake's
//! ACK and the data with it ([`tcp_rules::LISTEN_OVERFLOWS`]). The capture proves that the
//! server did not take the ACK when it resent its SYN-ACK after the ACK passed; it proves the
//! listener dropped it when taken on the server's host, where the ACK is seen to arrive.

use super::{
    Finding, Holder, KindInfo, Obligation, Proof, Release, Rule, StallEvent, StallKind, MIN_STALL,
};
use crate::decode::Segment;
use crate::flow::{Flow, Side, Span};
use crate::tcp_rules;

/// The shortest retransmission timeout of any stack (Linux `TCP_RTO_MIN`; Windows 300 ms, the
/// BSDs and macOS more): a resend in loss recovery sooner than this was the recovery's.
const RECOVERY_TIMEOUT: Span = Span::from_duration(tcp_rules::RTO_MIN);

/// What sent a retransmission that no packet of the peer triggered.
enum TimerResend {
    /// The retransmission timer, `delay` after the side's previous transmission.
    Timeout(Span),
    /// A tail-loss probe (RFC 8985 §7): sooner than any retransmission timeout of the path.
    LossProbe,
}

/// The capture shows the server did not take the handshake's ACK before the client's first
/// data was resent by the timer ([`handshake_not_taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandshakeNotTaken {
    /// Captured on the server's host (its leg under [`tcp_rules::ON_HOST_LEG`], or loopback
    /// traffic): the ACK and
    /// the data arrived there and the listener dropped them, its accept queue full. Captured
    /// away from it, they may also have been lost on the way.
    pub at_server: bool,
    /// The server resent its SYN-ACK after the client's ACK had passed the capture point; else
    /// the proof is that it sent nothing, not even an ACK of the data, until the resend.
    pub syn_ack_resent: bool,
}

impl HandshakeNotTaken {
    /// What the capture shows, for people.
    pub fn sentence(&self) -> &'static str {
        if self.at_server {
            "the server's listener dropped the handshake's ACK and the request with it: its \
             accept queue was full (not the network)"
        } else {
            "the server did not take the handshake's ACK (its listener's accept queue full, or \
             the ACK lost after the capture point)"
        }
    }

    /// The evidence, for people.
    pub fn proof(&self) -> &'static str {
        if self.syn_ack_resent {
            "the server resent its SYN-ACK after the client's ACK had passed the capture point"
        } else {
            "the data reached the server's host and the server acknowledged nothing until the \
             resend"
        }
    }

    /// Stable name of who dropped the ACK, for the JSON output: `listener`, or
    /// `listener_or_path` when captured away from the server.
    pub fn by_name(&self) -> &'static str {
        if self.at_server {
            "listener"
        } else {
            "listener_or_path"
        }
    }

    /// Stable name of the proof, for the JSON output.
    pub fn proof_name(&self) -> &'static str {
        if self.syn_ack_resent {
            "syn_ack_resent"
        } else {
            "data_unacknowledged"
        }
    }
}

/// A loss recovered by the retransmission timer.
pub const KIND: KindInfo = KindInfo {
    name: "rto",
    is_stall: true,
    holder: Holder::Loss,
    release: Release::OwnTimer,
    proof: Proof::PeerSeen,
    rule: Some(Rule {
        rank: 20,
        judges: Rule::DATA,
        check,
    }),
    obligations: &[
        Obligation {
            name: "not_sent_before",
            text: "the resent bytes must have been sent before in this capture (data at a \
               sequence number a pure ACK or the SYN ran ahead to is a first transmission; a \
               resend of bytes the capture never saw cannot be timed from their send)",
            holds: |flow, side, seg, _| flow.dir(side).sent_before(seg),
        },
        Obligation {
            name: "capture_rewound",
            text: "the flow's packets must come in time order: its capture time went back (the \
               same traffic in two files, or a clock stepped back), so a repeat may be the \
               packet's own copy",
            holds: |flow, _, _, _| !flow.rewound,
        },
        Obligation {
            name: "in_loss_recovery",
            text: "a resend in loss recovery (after three duplicate ACKs or a SACK of the peer, \
               until the data sent then is acknowledged) must come at least the shortest \
               retransmission timeout (200 ms) after both the side's previous send and the \
               peer's latest ACK: recovery resends on the peer's ACKs and its own timers \
               (RFC 5681 §3.2, RFC 6582, RFC 6675, RACK RFC 8985), and a sooner resend the \
               capture cannot tell from them",
            holds: |flow, side, seg, finding| {
                let me = flow.dir(side);
                let since_ack = seg.ts_ns.since(me.recovery_ack_at);
                me.recovery_until.is_none()
                    || (finding.delay_ns >= RECOVERY_TIMEOUT && since_ack >= RECOVERY_TIMEOUT)
            },
        },
        Obligation {
            name: "packet_captured_twice",
            text: "the resend must be a new packet: it carries the IPv4 identification of one \
               already seen (a new transmission numbers upward), so it is the same packet \
               captured twice (several VLANs or interfaces) or replayed",
            holds: |flow, side, seg, _| !flow.dir(side).copy_of_earlier(seg),
        },
        Obligation {
            name: "timer_backed_off",
            text: "a timeout in the loss recovery that follows a timeout must take at least half \
               as long as that one when the flow has no TCP timestamps: the timer doubled as \
               it expired (RFC 6298 §5.5) and stays so until data never resent is \
               acknowledged (Karn's algorithm, RFC 6298 §3); a sooner resend follows the \
               peer's ACKs",
            holds: |flow, side, seg, finding| {
                let before = flow.dir(side).timeout_before;
                seg.timestamps.is_some() || before.map_or(true, |t| finding.delay_ns >= t / 2)
            },
        },
        SPURIOUS,
    ],
    margin: Some(margin),
    timer_episode: true,
    aside: None,
    column: "rto",
    page_column: "rto",
    gap: "silence until the retransmission timer",
    explain,
    fixes,
};

/// The resend was not needed: the peer's D-SACK of exactly the resent range (RFC 2883 §4) shows
/// the original had arrived. Known only from the peer's later packet: checked then (the
/// detector sets the claim apart when the flow retires), so it holds at the resend.
pub(crate) const SPURIOUS: Obligation = Obligation {
    name: "spurious_dsack",
    text: "the resent bytes must have been lost: the peer's D-SACK reports the resent range \
           received twice (RFC 2883), so the original arrived and the resend was spurious \
           (a late ACK or a timer too short, not a lost segment)",
    holds: |_, _, _, _| true,
};

fn fixes(_: Side, example: Option<&StallEvent>) -> Vec<String> {
    match example.and_then(|e| e.handshake_not_taken) {
        Some(h) => {
            let mut fixes = vec![ACCEPT_QUEUE_FIX.to_string()];
            if !h.at_server {
                fixes.push(
                    "if the server's ListenOverflows did not rise, find the packet loss between \
                     the capture point and the server"
                        .to_string(),
                );
            }
            fixes
        }
        None => vec!["find the packet loss on the path (retransmissions)".to_string()],
    }
}

/// The fix for a listener whose accept queue overflows.
pub const ACCEPT_QUEUE_FIX: &str = "raise the backlog the server passes to listen() \
     (and net.core.somaxconn, which caps it), or accept connections sooner; the server's \
     `nstat TcpExtListenOverflows` counts the overflows";

fn explain(event: &StallEvent) -> String {
    if let Some(h) = event.handshake_not_taken {
        return format!(
            "the client resent its first request ({} B) after {:.1} ms of silence{}: {}; {}",
            event.released_bytes,
            event.finding.delay_ns.as_millis_f64(),
            if event.backoffs > 0 {
                format!(", {} times in all", event.backoffs + 1)
            } else {
                String::new()
            },
            h.sentence(),
            h.proof()
        );
    }
    let held = event.finding.held_side.name();
    let delay = event.finding.delay_ns;
    let ms = delay.as_millis_f64();
    if event.backoffs > 0 {
        format!(
            "the {held} resent {} B after {:.1} ms of silence, then {} more as the \
             retransmission timer backed off, {ms:.1} ms in all: resent by the timer because the \
             peer had not acknowledged it (whether a resend got through, its ACK tells)",
            event.released_bytes,
            (delay - event.backoff_ns).as_millis_f64(),
            crate::report::counted(u64::from(event.backoffs), "time", "times")
        )
    } else {
        format!(
            "the {held} resent {} B after {ms:.1} ms of silence: resent by the retransmission timer \
             because the peer had not acknowledged it",
            event.released_bytes
        )
    }
}

/// Checks whether `seg` from `side` is a timer-driven retransmission.
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    match timer_resend(flow, side, seg)? {
        TimerResend::Timeout(delay) => Some(Finding::own_timer(StallKind::Rto, side, delay)),
        TimerResend::LossProbe => None,
    }
}

/// Whether the timeout resend `seg` of `side` is the client's first data, which the server
/// never took with the handshake, as far as the capture shows (see [`HandshakeNotTaken`]).
pub fn handshake_not_taken(flow: &Flow, side: Side, seg: &Segment) -> Option<HandshakeNotTaken> {
    let h = flow.handshake;
    let client = flow.dir(Side::Client);
    // The client's first data, the handshake seen, and nothing from the server since but
    // SYN-ACKs: a server that took the ACK acknowledges the data at once (quick-ACK mode of a
    // new connection) or answers it.
    let first_data = seg.seq == client.isn + 1;
    if side != Side::Client || !first_data || h.client_ack_at.is_none() || h.server_spoke {
        return None;
    }
    // Loopback traffic never leaves the host: captured there, whatever a busy host's softirq
    // made of the handshake's timing.
    let loopback = flow.on_loopback();
    let on_host = Span::from_duration(tcp_rules::ON_HOST_LEG);
    let at_server = loopback || flow.dir(Side::Server).near_rtt.is_some_and(|l| l < on_host);
    // Away from the server, silence alone cannot tell a dropped ACK from lost data.
    (h.syn_ack_after_ack || at_server).then_some(HandshakeNotTaken {
        at_server,
        syn_ack_resent: h.syn_ack_after_ack,
    })
}

/// Whether `seg` from `side` is a tail-loss probe: counted in the flow, never as a stall.
pub fn loss_probe(flow: &Flow, side: Side, seg: &Segment) -> bool {
    matches!(timer_resend(flow, side, seg), Some(TimerResend::LossProbe))
}

fn timer_resend(flow: &Flow, side: Side, seg: &Segment) -> Option<TimerResend> {
    let me = flow.dir(side);
    if seg.payload_len == 0 || !me.resends(seg) {
        return None;
    }
    // Zero-window probes and keepalives repeat one byte below snd_una (`tcp_xmit_probe_skb`),
    // already acknowledged: not a loss.
    if seg.payload_len <= 1 && me.una_known && me.snd_una >= seg.seq + seg.payload_len {
        return None;
    }
    if let Some(prev) = flow.prev {
        let since_prev = seg.ts_ns.since(prev.at);
        if prev.side == side.peer() && since_prev <= flow.follow_allowance(side) {
            return None; // triggered by the peer's (duplicate) ACK: fast retransmit
        }
    }
    // Nothing of the peer's released it: the sender's own timer did (no ACK side). The timer
    // runs from the previous transmission, new or repeated (RFC 6298 §5.1, §5.5): a burst's
    // later segments follow the first at once and are no new timeout, and a backoff step is
    // measured from the step before it. A side that sent nothing before is measured from its
    // first packet, never from the epoch.
    let delay = seg.ts_ns.since(me.last_sent);
    if delay < MIN_STALL {
        return None;
    }
    // The retransmission timer resends from SND.UNA (`tcp_retransmit_timer`); the tail-loss
    // probe resends the last segment sent (`tcp_send_loss_probe`), and fires at 2·srtt
    // (+ 2 jiffies) only while more than one packet is out (`tcp_schedule_loss_probe`; with
    // one, it waits TCP_RTO_MIN more, as long as the timeout). So: the tail, with unacked data
    // before it, resent sooner than the path's shortest timeout, is a probe.
    if probe_floor(flow, side, seg).is_some_and(|floor| delay < floor) {
        return Some(TimerResend::LossProbe);
    }
    Some(TimerResend::Timeout(delay))
}

/// The path's shortest retransmission timeout, when `seg` has a tail-loss probe's shape (the
/// tail, with unacknowledged data before it) and the path is known: a timer-driven resend
/// sooner than this is a probe.
fn probe_floor(flow: &Flow, side: Side, seg: &Segment) -> Option<Span> {
    let me = flow.dir(side);
    let tail = seg.seq + seg.payload_len == me.snd_nxt;
    let data_before = me.una_known && me.snd_una < seg.seq;
    if !(tail && data_before) {
        return None;
    }
    let rtt = me.near_rtt? + flow.dir(side.peer()).near_rtt?;
    let srtt = std::time::Duration::from_nanos(rtt.as_nanos());
    Some(Span::from_duration(tcp_rules::rto_floor(srtt)))
}

/// How far a timeout's timing clears the rule's thresholds (long enough, not following the
/// peer's packet within the allowance, and past the tail-loss probe's time when it could be
/// one): a capture clock coarser than this cannot prove it.
pub fn margin(flow: &Flow, side: Side, seg: &Segment, finding: &Finding) -> Span {
    let mut margin = finding.delay_ns - MIN_STALL;
    if let Some(prev) = flow.prev.filter(|p| p.side == side.peer()) {
        margin = margin.min(seg.ts_ns.since(prev.at) - flow.follow_allowance(side));
    }
    if let Some(floor) = probe_floor(flow, side, seg) {
        margin = margin.min(finding.delay_ns - floor);
    }
    margin
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire, MS};
    use super::super::StallKind;
    use crate::flow::Side;

    /// A request, then the server's three 1000 B segments answering it at 1.10-1.12 ms.
    fn three_answers_out() -> Wire {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 1000)
            .data(false, 1_110, 1000)
            .data(false, 1_120, 1000);
        w
    }

    #[test]
    fn lost_response_resent_by_timer() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 300)
            .retransmit(false, 215_000, 300);
        let a = w.analyse();
        assert_single(&a, StallKind::Rto, Side::Server);
        assert_eq!(a.events[0].finding.ack_side, None, "no ACK released it");
    }

    /// The peer's D-SACK of exactly the resent range (RFC 2883 §4): the original arrived, the
    /// resend was spurious. Set apart, undecided; a D-SACK of other bytes changes nothing.
    #[test]
    fn resend_reported_received_twice_is_undecided() {
        let run = |offset: u32| {
            let mut w = Wire::handshake(30, 1448);
            w.data(true, 1_000, 50)
                .data(false, 1_100, 300)
                .retransmit(false, 215_000, 300);
            let end = w.last().seq + 300;
            w.ack(true, 215_100);
            let ack = w.last();
            ack.first_sack = Some((end - 300 - offset, end - offset));
            w.analyse()
        };
        let a = run(0);
        assert_eq!(a.stall_count(), 0);
        let claims = a.undecided.claims();
        assert_eq!(claims.len(), 1, "{:?}", a.undecided);
        assert_eq!(claims[0].kind, StallKind::Rto);
        assert_eq!(claims[0].reason.name(), "spurious_dsack");
        assert_eq!(a.flows[0].time_lost_ns.as_nanos(), 0);
        assert_single(&run(100), StallKind::Rto, Side::Server);
    }

    /// A side whose first captured segment lies above one it sends later (a capture that
    /// starts mid-loss): the resend is measured from that side's first packet, never from the
    /// epoch, and no delay exceeds the flow's span.
    #[test]
    fn resend_below_first_seen_is_not_measured_from_the_epoch() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50).data(false, 1_100, 300);
        w.data(false, 1_150, 300);
        w.segments.drain(..3);
        w.segments.swap(1, 2); // the server's second segment is seen first
        w.retransmit(false, 301_150, 300);
        w.last().seq = w.segments[2].seq;
        for seg in &mut w.segments {
            seg.ts_ns += MS * 1_700_000_000_000; // real capture times
        }
        let a = w.analyse();
        let span = a.flows[0].span_ns.1.since(a.flows[0].span_ns.0);
        assert!(a.events.iter().all(|e| e.finding.delay_ns <= span));
        assert!(a.flows[0].time_lost_ns <= span);
    }

    /// A timeout resends the whole burst back to back: one timeout, one event.
    #[test]
    fn resent_burst_is_one_timeout() {
        let mut w = three_answers_out();
        let end = w.server_seq;
        for (i, t) in [(3u32, 215_000), (2, 215_010), (1, 215_020)] {
            w.retransmit(false, t, 1000);
            w.last().seq = end - i * 1000;
        }
        let a = w.analyse();
        assert_single(&a, StallKind::Rto, Side::Server);
        let span = a.flows[0].span_ns.1.since(a.flows[0].span_ns.0);
        assert!(a.flows[0].time_lost_ns <= span);
    }

    /// The timer backs off (200, 400, 800 ms): each step is measured from the step before,
    /// and the episode is one event covering them; the time lost is the episode once.
    #[test]
    fn backoff_steps_are_one_episode() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50).data(false, 1_100, 300);
        for t in [201_100, 601_100, 1_401_100] {
            w.retransmit(false, t, 300);
        }
        let a = w.analyse();
        assert_single(&a, StallKind::Rto, Side::Server);
        let e = &a.events[0];
        assert_eq!(e.backoffs, 2);
        assert_eq!(e.finding.delay_ns, MS * 1_400);
        assert_eq!(a.flows[0].time_lost_ns, MS * 1_400);
        // Acknowledged at last: a later loss is a new episode.
        w.ack(true, 1_401_200).data(false, 1_401_300, 300);
        w.retransmit(false, 1_700_000, 300);
        assert_eq!(w.analyse().counts.get(StallKind::Rto), 2);
    }

    /// The last of two segments resent 30 ms later, the first still unacknowledged: far sooner
    /// than any timeout of the path (its round trip + 200 ms), so a tail-loss probe; counted in
    /// the flow, not as a stall. The same resend after 215 ms is the timeout.
    #[test]
    fn tail_resent_before_any_timeout_is_a_loss_probe() {
        let probe_at = |t_us: u64| {
            let mut w = Wire::handshake_between(10_000, 10_000, 1448);
            w.data(true, 30_000, 50)
                .data(false, 40_100, 1000)
                .data(false, 40_110, 1000);
            w.retransmit(false, t_us, 1000);
            w.analyse()
        };
        let a = probe_at(70_110);
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.flows[0].loss_probes, 1);
        assert_eq!(a.flows[0].retransmissions, 1);
        let a = probe_at(255_110);
        assert_single(&a, StallKind::Rto, Side::Server);
        assert_eq!(a.flows[0].loss_probes, 0);
        // The head resent early (a stack whose timeout floor is lower than Linux's): the
        // retransmission timer resends from SND.UNA, the probe never does.
        let mut w = Wire::handshake_between(10_000, 10_000, 1448);
        w.data(true, 30_000, 50)
            .data(false, 40_100, 1000)
            .data(false, 40_110, 1000);
        w.retransmit(false, 70_110, 1000);
        w.last().seq = w.last().seq - 1000;
        assert_single(&w.analyse(), StallKind::Rto, Side::Server);
    }

    /// The client's first request, after the handshake, resent by its timer while the server
    /// said nothing: captured on the server's host (the ACK and the data seen arriving there),
    /// the listener dropped them; captured on the client's host, silence alone proves
    /// nothing, until the server resends its SYN-ACK after the ACK.
    #[test]
    fn first_request_resent_when_the_server_never_took_the_handshake() {
        use super::super::testing::Wire;
        // On the server's host: 10 µs to the server, 30 ms to the client.
        let mut w = Wire::handshake_between(30_000, 10, 1448);
        w.data(true, 30_100, 121).retransmit(true, 240_100, 121);
        w.ack(false, 240_150).data(false, 241_000, 184);
        let a = w.analyse();
        assert_single(&a, StallKind::Rto, Side::Client);
        let h = a.events[0]
            .handshake_not_taken
            .expect("the listener dropped it");
        assert!(h.at_server && !h.syn_ack_resent);
        let text = super::explain(&a.events[0]);
        assert!(text.contains("accept queue"), "{text}");
        assert!(!super::fixes(Side::Client, Some(&a.events[0]))[0].contains("packet loss"));

        // On the client's host: the same silence is also what lost data looks like.
        let near_client = |syn_ack_again: bool| {
            let mut w = Wire::handshake_between(10, 30_000, 1448);
            w.data(true, 30_100, 121).retransmit(true, 240_100, 121);
            if syn_ack_again {
                let mut syn_ack = w.segments[1];
                syn_ack.ts_ns += MS * 1_000;
                w.segments.push(syn_ack);
                w.ack(true, 1_030_020);
            }
            w.retransmit(true, 1_100_000, 121);
            w.ack(false, 1_130_000);
            w.analyse()
        };
        let a = near_client(false);
        assert_single(&a, StallKind::Rto, Side::Client);
        assert_eq!(a.events[0].handshake_not_taken, None);
        let a = near_client(true);
        assert_single(&a, StallKind::Rto, Side::Client);
        assert_eq!(a.events[0].backoffs, 1);
        let h = a.events[0]
            .handshake_not_taken
            .expect("the SYN-ACK came again");
        assert!(!h.at_server && h.syn_ack_resent);
        assert!(super::explain(&a.events[0]).contains("did not take the handshake"));
        assert_eq!(
            a.flows[0].near_rtt_ns[1],
            Some(MS * 30),
            "a resent SYN-ACK times nothing"
        );
        assert!(a
            .events
            .iter()
            .all(|e| e.finding.kind != StallKind::SynRetry));

        // The server acknowledged part of the data: it had taken the handshake.
        let mut w = Wire::handshake_between(30_000, 10, 1448);
        w.data(true, 30_100, 121)
            .ack(false, 30_120)
            .data(true, 30_200, 100);
        w.retransmit(true, 240_200, 100);
        let a = w.analyse();
        assert_single(&a, StallKind::Rto, Side::Client);
        assert_eq!(a.events[0].handshake_not_taken, None);
    }

    #[test]
    fn fast_retransmit_is_not_a_stall() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 300)
            .ack(true, 1_200);
        w.retransmit(false, 1_250, 300);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    /// A pure ACK whose sequence number ran ahead of data still queued, then that data: a
    /// first transmission, not a resend. Data at the SYN's own sequence number is none
    /// either. Both set apart with the obligation they fail.
    #[test]
    fn data_never_sent_before_is_no_timeout() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50).ack(false, 1_100);
        w.last().seq = w.last().seq + 24;
        w.data(false, 20_000, 24);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.undecided.claims()[0].reason.name(), "not_sent_before");
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 215_000, 50);
        w.last().seq = w.last().seq - 1;
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.undecided.claims()[0].reason.name(), "not_sent_before");
    }

    /// Bytes the capture missed (the side's data jumped ahead over them), sent later: no
    /// resend the capture can time from its send. A resend that reaches on into bytes the
    /// capture saw (the peer's duplicate ACKs show the hole) was sent before, and is timed
    /// from the side's previous send.
    #[test]
    fn data_the_capture_skipped_is_not_sent_before() {
        let run = |resent: u32| {
            let mut w = Wire::handshake(30, 1448);
            w.data(true, 1_000, 50)
                .data(false, 1_100, 300)
                .data(false, 1_110, 300)
                .data(false, 1_120, 300);
            w.segments.remove(w.segments.len() - 2);
            w.retransmit(false, 215_000, 600);
            w.last().payload_len = resent;
            w.analyse()
        };
        let a = run(300);
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.undecided.claims()[0].reason.name(), "not_sent_before");
        assert_single(&run(600), StallKind::Rto, Side::Server);
    }

    /// After three duplicate ACKs the sender is in loss recovery (RFC 5681 §3.2): a resend
    /// 100 ms after its last send may be the recovery's own, set apart; after 300 ms of
    /// silence both ways, longer than any stack's shortest timeout, it is the timer's.
    #[test]
    fn a_resend_in_loss_recovery_is_the_timers_only_past_the_shortest_timeout() {
        let run = |resend_at: u64, last_dup_ack: u64| {
            let mut w = three_answers_out();
            for t in [1_200, 1_210, 1_220, last_dup_ack] {
                w.ack(true, t);
                w.last().ack = w.last().ack - 2000;
            }
            w.retransmit(false, resend_at, 1000);
            w.last().seq = w.last().seq - 1000;
            w.analyse()
        };
        let a = run(100_000, 1_230);
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.undecided.claims()[0].reason.name(), "in_loss_recovery");
        assert_single(&run(300_000, 1_230), StallKind::Rto, Side::Server);
        // Duplicate ACKs still arriving 50 ms before: the resend answers them (RACK marks
        // the loss from the peer's ACKs), however long since the side's own send.
        let a = run(300_000, 250_000);
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(a.undecided.claims()[0].reason.name(), "in_loss_recovery");
    }

    /// The same packet captured twice (its IPv4 identification repeated: one capture over
    /// several VLANs) is no resend; a new packet numbers upward.
    #[test]
    fn a_copy_with_the_same_ip_id_is_no_resend() {
        let run = |resend_id: u16| {
            let mut w = Wire::handshake(30, 1448);
            w.data(true, 1_000, 50);
            w.data(false, 1_100, 300);
            w.last().ip_id = 0x4a9a;
            w.retransmit(false, 215_000, 300);
            w.last().ip_id = resend_id;
            w.analyse()
        };
        let a = run(0x4a9a);
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(
            a.undecided.claims()[0].reason.name(),
            "packet_captured_twice"
        );
        assert_single(&run(0x4a9b), StallKind::Rto, Side::Server);
        // The ID 0 (Linux before a socket has its peer) says nothing.
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50).data(false, 1_100, 300);
        w.retransmit(false, 215_000, 300);
        assert_single(&w.analyse(), StallKind::Rto, Side::Server);
    }

    /// Numbers farther apart than any window (a fuzzer's ACK of data never sent): no repeat
    /// in such a flow proves a resend, so its timeout is set apart.
    #[test]
    fn numbers_out_of_every_window_prove_no_resend() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 300)
            .ack(true, 1_200);
        w.last().ack = w.last().ack + 0x6000_0000;
        w.retransmit(false, 215_000, 300);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0, "{:?}", a.counts);
        assert_eq!(
            a.undecided.claims()[0].reason.name(),
            "numbers_out_of_window"
        );
        // Within a window (capture loss ahead of the ACK) the timeout stands.
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 300)
            .data(false, 1_110, 300);
        w.ack(true, 1_200);
        w.last().ack = w.last().ack - 300 + 0x10_0000;
        w.retransmit(false, 215_000, 300);
        w.last().seq = w.last().seq - 300;
        assert_single(&w.analyse(), StallKind::Rto, Side::Server);
    }

    /// After a timeout the sender resends what is still outstanding as the peer's ACKs come
    /// (RFC 6582 §4): a resend 120 ms after such an ACK is the recovery's. A later one after
    /// 400 ms of silence is no timeout either while the timer stays backed off from the
    /// 1 s one (Karn), unless TCP timestamps time the resent data.
    #[test]
    fn after_a_timeout_resends_follow_the_acks_and_the_backed_off_timer() {
        let run = |second_at: u64, timestamps: bool| {
            let mut w = three_answers_out();
            w.retransmit(false, 1_001_120, 1000);
            w.last().seq = w.last().seq - 2000;
            w.ack(true, 1_001_200);
            w.last().ack = w.last().ack - 2000;
            w.retransmit(false, second_at, 1000);
            w.last().seq = w.last().seq - 1000;
            if timestamps {
                w.last().timestamps = Some((7, 7));
            }
            w.analyse()
        };
        let claims = |a: &crate::detect::Analysis| -> Vec<&'static str> {
            a.undecided
                .claims()
                .iter()
                .map(|c| c.reason.name())
                .collect()
        };
        let a = run(1_121_200, false);
        assert_eq!(
            (a.counts.get(StallKind::Rto), claims(&a)),
            (1, vec!["in_loss_recovery"])
        );
        let a = run(1_401_200, false);
        assert_eq!(
            (a.counts.get(StallKind::Rto), claims(&a)),
            (1, vec!["timer_backed_off"])
        );
        let a = run(1_401_200, true);
        assert_eq!((a.counts.get(StallKind::Rto), claims(&a)), (2, vec![]));
    }

    /// A backed-off episode's event is where its delay ends: the last resend.
    #[test]
    fn backed_off_event_ends_at_the_last_resend() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50).data(false, 1_100, 300);
        for t in [201_100, 601_100, 1_401_100] {
            w.retransmit(false, t, 300);
        }
        let a = w.analyse();
        let e = &a.events[0];
        assert_eq!(e.packet_number, a.packets);
        assert_eq!(e.ts_ns.since(w.segments[4].ts_ns), e.finding.delay_ns);
        assert!(
            super::explain(e).contains("after 200.0 ms of silence"),
            "{}",
            super::explain(e)
        );
    }
}
