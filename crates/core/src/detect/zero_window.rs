//! The receiver closed its window (RFC 9293 §3.8.6.1; Linux `tcp_select_window` advertising 0
//! when the receive buffer is full) and the sender waited: zero-window probes
//! (`tcp_send_probe0`) until a window update let the data go.

use super::{Finding, Holder, KindInfo, Proof, Release, Rule, StallEvent, StallKind, MIN_STALL};
use crate::decode::Segment;
use crate::flow::{Flow, PeerWindow, Side, Span};

/// The sender waited out the receiver's closed window.
pub const KIND: KindInfo = KindInfo {
    name: "zero_window",
    is_stall: true,
    holder: Holder::PeerWindow,
    release: Release::Ack,
    proof: Proof::Timing,
    rule: Some(Rule {
        rank: 10,
        judges: Rule::DATA,
        check,
    }),
    obligations: &[],
    margin: Some(margin),
    timer_episode: false,
    aside: None,
    column: "zwin",
    page_column: "zero win",
    gap: "{peer}'s receive window is closed",
    explain,
    fixes: |held, _| {
        vec![format!(
            "make the {} read sooner, or give it a larger SO_RCVBUF",
            held.peer().name()
        )]
    },
};

fn explain(event: &StallEvent) -> String {
    let f = &event.finding;
    format!(
        "the {} advertised a zero window; the {} waited {:.1} ms for it to read",
        f.held_side.peer().name(),
        f.held_side.name(),
        f.delay_ns.as_millis_f64()
    )
}

/// Checks whether `seg`, new data from `side`, left right after the peer reopened a window it
/// had closed.
pub fn check(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    let me = flow.dir(side);
    let PeerWindow::Reopened { since, at } = me.peer_window else {
        return None;
    };
    // Data sent into the closed window and dropped by the receiver comes again once it opens:
    // a resend right after the window update is the sender resuming, not its retransmission
    // timer (`tcp_ack` → `tcp_ack_probe` restarts sending when the window opens).
    if seg.payload_len == 0 {
        return None;
    }
    // The window update must be the packet just before B, and B must follow it at once.
    let prev = flow.prev?;
    if prev.side != side.peer() || prev.at != at {
        return None;
    }
    if seg.ts_ns.since(at) > flow.follow_allowance(side) {
        return None; // the sender had nothing waiting when the window opened
    }
    Finding::released_by_peer(StallKind::ZeroWindow, side, seg.ts_ns.since(since))
}

/// How far a zero-window stall's timing clears the rule's thresholds (long enough, and the
/// data following the window update within the allowance).
pub fn margin(flow: &Flow, side: Side, seg: &Segment, finding: &Finding) -> Span {
    let after_update = match flow.dir(side).peer_window {
        PeerWindow::Reopened { at, .. } => seg.ts_ns.since(at),
        _ => Span::ZERO,
    };
    (finding.delay_ns - MIN_STALL).min(flow.follow_allowance(side) - after_update)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{assert_single, Wire};
    use super::super::StallKind;
    use crate::flow::Side;

    #[test]
    fn sender_waits_for_window_update() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 1000)
            .ack_window(false, 1_100, 0)
            .ack_window(false, 300_000, 64)
            .data(true, 300_020, 1000);
        assert_single(&w.analyse(), StallKind::ZeroWindow, Side::Client);
    }

    /// Captured at the receiver, 72 ms from the sender: the data sent into the closed window
    /// comes again one round trip after the window update. A zero-window stall, no timeout.
    #[test]
    fn resend_after_window_update_is_zero_window() {
        let mut w = Wire::handshake_between(10, 72_000, 1448);
        w.data(true, 100_000, 80)
            .data(false, 172_000, 1400)
            .data(false, 172_010, 1400)
            .ack_window(true, 172_100, 0);
        for t in [172_200, 172_300, 172_400] {
            w.ack_window(true, t, 0);
        }
        w.ack_window(true, 233_000, 512);
        w.retransmit(false, 305_000, 1400);
        w.data(false, 305_010, 1400);
        let a = w.analyse();
        assert_single(&a, StallKind::ZeroWindow, Side::Server);
        assert_eq!(a.counts.get(StallKind::Rto), 0);
    }

    /// The window closed once during an upload; much later the sender answers a request at
    /// once: that answer did not wait for the window.
    #[test]
    fn later_answer_is_not_a_window_stall() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 1000)
            .ack_window(false, 1_100, 0)
            .ack_window(false, 300_000, 64)
            .data(false, 900_000, 100)
            .data(true, 900_050, 1000);
        assert_eq!(w.analyse().stall_count(), 0);
    }

    #[test]
    fn window_reopened_while_idle_is_not_a_stall() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 1000)
            .ack_window(false, 1_100, 0)
            .ack_window(false, 300_000, 64)
            .data(true, 900_000, 1000);
        assert_eq!(w.analyse().stall_count(), 0);
    }
}
