//! TCP_CORK and MSG_MORE: partial segments are held regardless of ACKs (`tcp_nagle_test` with
//! `TCP_NAGLE_CORK`); with nothing in flight the zero-window probe timer
//! (`tcp_check_probe_timer`, `max(RTO, TCP_RTO_MIN)`: 200 ms-class, measured 204-212 ms on
//! loopback) finally sends them.

use super::{Finding, StallKind};
use crate::decode::Segment;
use crate::flow::{seq_lt, Flow, Side};

/// Shortest gap taken for the cork timer: `TCP_RTO_MIN` (200 ms) less timer slack.
pub const CORK_MIN_NS: u64 = 195_000_000;
/// Longest gap taken for the cork timer on a near-zero RTT path; the path's RTT is added
/// (the RTO grows with it, RFC 6298 §2).
pub const CORK_MAX_NS: u64 = 260_000_000;

/// Checks whether `seg`, new data from `side`, left on the cork timer: a partial segment with
/// nothing in flight and no ACK releasing it, ~200 ms after the last activity that could have
/// queued it (the peer's last packet or this side's last data).
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    let me = flow.dir(side);
    let peer = flow.dir(side.peer());
    if seg.payload_len == 0 || seq_lt(seg.seq, me.snd_nxt) || seg.payload_len >= me.mss {
        return None;
    }
    if me.in_flight() != 0 {
        return None; // Nagle's business, or a released hold
    }
    let last_activity = peer.last_ns.max(me.last_data_ns);
    let gap = seg.ts_ns.saturating_sub(last_activity);
    let path_rtt = me.near_rtt_ns.unwrap_or(0) + peer.near_rtt_ns.unwrap_or(0);
    if gap < CORK_MIN_NS || gap > CORK_MAX_NS + 4 * path_rtt {
        return None;
    }
    Some(Finding {
        kind: StallKind::CorkTimer,
        held_side: side,
        ack_side: None,
        delay_ns: gap,
        ack_delay_ns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire};
    use super::super::StallKind;
    use crate::flow::Side;

    #[test]
    fn corked_response_leaves_on_timer() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40)
            .ack(false, 41_000)
            .data(false, 206_000, 300);
        assert_single(&w.analyse(), StallKind::CorkTimer, Side::Server);
    }

    #[test]
    fn quick_answer_is_not_cork() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 40).data(false, 1_200, 300);
        assert_eq!(w.analyse().stall_count(), 0);
    }
}
