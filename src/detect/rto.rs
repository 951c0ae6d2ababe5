//! Retransmissions sent by the retransmission timer (RFC 6298; Linux `tcp_retransmit_timer`,
//! and the tail-loss probe `tcp_send_loss_probe`, which also fires with no ACK to trigger it).
//!
//! A segment repeating sequence space already sent is a retransmission. When the peer's last
//! packet came just before it (duplicate ACKs, SACK) it is a fast retransmit (RFC 5681 §3.2):
//! it costs about one RTT and is only counted in the flow. When nothing triggered it, the
//! sender sat out a timer: a stall of at least the RTO (Linux `TCP_RTO_MIN` = 200 ms).

use super::{Finding, StallKind, MIN_STALL};
use crate::decode::Segment;
use crate::flow::{Flow, Side};

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
    // Nothing of the peer's released it: the sender's own timer did (no ACK side).
    let delay = seg.ts_ns.since(me.last_data);
    (delay >= MIN_STALL).then(|| Finding::own_timer(StallKind::Rto, side, delay))
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire};
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
