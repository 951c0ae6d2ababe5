//! Retransmissions sent by the retransmission timer (RFC 6298; Linux `tcp_retransmit_timer`,
//! and the tail-loss probe `tcp_send_loss_probe`, which also fires with no ACK to trigger it).
//!
//! A segment repeating sequence space already sent is a retransmission. When the peer's last
//! packet came just before it (duplicate ACKs, SACK) it is a fast retransmit (RFC 5681 §3.2):
//! it costs about one RTT and is only counted in the flow. When nothing triggered it, the
//! sender sat out a timer: a stall of at least the RTO (Linux `TCP_RTO_MIN` = 200 ms).

use super::{Finding, Holder, KindInfo, Proof, Release, Rule, StallEvent, StallKind, MIN_STALL};
use crate::decode::Segment;
use crate::flow::{Flow, Side};

/// A loss recovered by the retransmission timer.
pub(crate) const KIND: KindInfo = KindInfo {
    name: "rto",
    is_stall: true,
    holder: Holder::Loss,
    release: Release::OwnTimer,
    proof: Proof::PeerSeen,
    rule: Some(Rule { rank: 20, check }),
    column: "rto",
    page_column: "rto",
    gap: "silence until the retransmission timer",
    explain,
    fixes: |_, _| vec!["find the packet loss on the path (retransmissions)".to_string()],
};

fn explain(event: &StallEvent) -> String {
    let held = event.finding.held_side.name();
    let delay = event.finding.delay_ns;
    let ms = delay.as_millis_f64();
    if event.backoffs > 0 {
        format!(
            "the {held} resent {} B after {:.1} ms of silence, then {} more times as the \
             retransmission timer backed off, {ms:.1} ms in all: a loss recovered by the timer",
            event.released_bytes,
            (delay - event.backoff_ns).as_millis_f64(),
            event.backoffs
        )
    } else {
        format!(
            "the {held} resent {} B after {ms:.1} ms of silence: a lost segment recovered by the \
             retransmission timer",
            event.released_bytes
        )
    }
}

/// Checks whether `seg` from `side` is a timer-driven retransmission.
pub(crate) fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
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
    (delay >= MIN_STALL).then(|| Finding::own_timer(StallKind::Rto, side, delay))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire, MS};
    use super::super::StallKind;
    use crate::flow::Side;

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
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 1000)
            .data(false, 1_110, 1000)
            .data(false, 1_120, 1000);
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

    #[test]
    fn fast_retransmit_is_not_a_stall() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 50)
            .data(false, 1_100, 300)
            .ack(true, 1_200);
        w.retransmit(false, 1_250, 300);
        assert_eq!(w.analyse().stall_count(), 0);
    }
}
