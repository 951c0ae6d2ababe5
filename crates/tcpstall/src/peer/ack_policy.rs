//! The peer's receive-side ACK rules, applied to the ACKs smoltcp emits. smoltcp's own delayed
//! ACK (one timer from the first unacknowledged byte, an ACK once more than one MSS is
//! unacknowledged, no quick-ACK or ping-pong mode, no per-segment count) matches none of the
//! profiles, so the socket ACKs every segment at once and this policy holds each pure ACK as
//! the profile's stack would, releasing it when a rule fires. ACKs are cumulative: the latest
//! held ACK stands for every earlier one, and data sent in the meantime carries it.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::profile::{AckTimer, StackRules};
use crate::tcp_rules;

/// A connection as the peer sees it: (local port, remote port).
pub type FlowKey = (u16, u16);

/// What the policy decides about a packet the socket wants to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send it now.
    Send,
    /// Hold it: a pure ACK the delayed-ACK rules keep back.
    Hold,
}

/// The shape of a TCP segment, as far as the ACK rules care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentShape {
    /// Payload bytes.
    pub payload: usize,
    /// SYN, FIN or RST set: the segment is not a pure ACK.
    pub control: bool,
    /// ACK set.
    pub ack: bool,
}

impl SegmentShape {
    fn is_pure_ack(self) -> bool {
        self.ack && self.payload == 0 && !self.control
    }

    /// Data or FIN: what a receiver owes an ACK for.
    fn occupies_sequence(self) -> bool {
        self.payload > 0 || self.control
    }
}

/// One connection's receive-side state.
#[derive(Debug, Default)]
struct FlowAcks {
    unacked_segments: u32,
    unacked_bytes: usize,
    first_unacked: Option<Instant>,
    /// Largest payload received: the receiver's MSS estimate (`tcp_measure_rcv_mss`).
    rcv_mss: usize,
    held: Option<Vec<u8>>,
    due: Option<Instant>,
    quick_started: bool,
    quick_left: u32,
    ping_pong: bool,
    last_data_received: Option<Instant>,
    /// Data segments this peer sent (TCP_INFO's `data_segs_out`).
    data_segments_out: u32,
}

/// The ACK rules of one profile, for every connection of the peer.
#[derive(Debug)]
pub struct AckPolicy {
    rules: StackRules,
    /// Origin of the free-running tick clock of [`AckTimer::SecondTick`].
    epoch: Instant,
    flows: HashMap<FlowKey, FlowAcks>,
}

/// The receiver's MSS estimate before a larger segment arrives.
const INITIAL_RCV_MSS: usize = tcp_rules::MSS_DEFAULT as usize;

impl AckPolicy {
    /// A policy following `rules`.
    pub fn new(rules: StackRules, epoch: Instant) -> AckPolicy {
        AckPolicy {
            rules,
            epoch,
            flows: HashMap::new(),
        }
    }

    /// Notes a segment that arrived from the other end.
    pub fn on_received(&mut self, flow: FlowKey, segment: SegmentShape, now: Instant) {
        if !segment.occupies_sequence() {
            return;
        }
        let rules = self.rules;
        let state = self.flows.entry(flow).or_default();
        if !state.quick_started {
            // The first data of a connection (`icsk_ack.ato` still 0) starts quick-ACK mode
            // (`tcp_event_data_recv` -> `tcp_incr_quickack`).
            state.quick_started = true;
            state.quick_left = rules.quick_acks;
        }
        state.unacked_segments += 1;
        state.unacked_bytes += segment.payload;
        state.rcv_mss = state.rcv_mss.max(segment.payload).max(INITIAL_RCV_MSS);
        state.first_unacked.get_or_insert(now);
        state.last_data_received = Some(now);
    }

    /// Decides about a packet of `flow` the socket wants to send. A held packet is kept here
    /// until [`AckPolicy::take_due`] returns it.
    pub fn on_send(
        &mut self,
        flow: FlowKey,
        segment: SegmentShape,
        packet: &[u8],
        now: Instant,
    ) -> Verdict {
        let rules = self.rules;
        let epoch = self.epoch;
        let state = self.flows.entry(flow).or_default();
        if !segment.is_pure_ack() {
            if segment.payload > 0 {
                state.data_segments_out += 1;
                // Data sent within the ACK timeout of a receive: an interactive exchange
                // (`tcp_event_data_sent` -> `inet_csk_inc_pingpong_cnt`).
                let ato = timer_span(rules.ack_timer);
                if rules.ping_pong
                    && state
                        .last_data_received
                        .is_some_and(|at| now.saturating_duration_since(at) < ato)
                {
                    state.ping_pong = true;
                }
            }
            if segment.ack {
                state.ack_sent();
            }
            return Verdict::Send;
        }
        if state.unacked_segments == 0 {
            // Nothing received to delay an ACK for: a handshake's ACK, a window update.
            return Verdict::Send;
        }
        let by_count = rules
            .ack_every_segments
            .is_some_and(|n| state.unacked_segments >= n);
        let by_bytes = rules.ack_over_one_mss
            && tcp_rules::acks_at_once(state.unacked_bytes as u64, state.rcv_mss as u64);
        let quick = state.quick_left > 0 && !state.ping_pong;
        if by_count || by_bytes || quick {
            state.ack_sent();
            return Verdict::Send;
        }
        if state.due.is_none() {
            let first = state.first_unacked.unwrap_or(now);
            state.due = Some(due_time(rules.ack_timer, epoch, first));
        }
        state.held = Some(packet.to_vec());
        Verdict::Hold
    }

    /// Held ACKs whose timer has fired by `now`, to send now.
    pub fn take_due(&mut self, now: Instant) -> Vec<Vec<u8>> {
        let ping_pong_rule = self.rules.ping_pong;
        let mut due = Vec::new();
        for state in self.flows.values_mut() {
            if state.due.is_some_and(|at| at <= now) {
                if let Some(packet) = state.held.take() {
                    due.push(packet);
                }
                state.ack_sent();
                // A delayed ACK that had to wait for the timer ends ping-pong mode
                // (`tcp_delack_timer_handler`).
                if ping_pong_rule {
                    state.ping_pong = false;
                }
            }
        }
        due
    }

    /// When the next held ACK is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.flows.values().filter_map(|s| s.due).min()
    }

    /// Data segments the peer sent on `flow`.
    pub fn data_segments_out(&self, flow: FlowKey) -> u32 {
        self.flows.get(&flow).map_or(0, |s| s.data_segments_out)
    }
}

impl FlowAcks {
    /// An ACK left (alone or on data): nothing is owed any more; one quick-ACK is used up
    /// (`tcp_event_ack_sent` -> `tcp_dec_quickack_mode`).
    fn ack_sent(&mut self) {
        self.unacked_segments = 0;
        self.unacked_bytes = 0;
        self.first_unacked = None;
        self.held = None;
        self.due = None;
        self.quick_left = self.quick_left.saturating_sub(1);
    }
}

/// The timer's nominal span.
fn timer_span(timer: AckTimer) -> Duration {
    match timer {
        AckTimer::After(span) | AckTimer::SecondTick(span) => span,
    }
}

/// When the timer armed by a segment that arrived at `first` fires.
fn due_time(timer: AckTimer, epoch: Instant, first: Instant) -> Instant {
    match timer {
        AckTimer::After(span) => first + span,
        AckTimer::SecondTick(period) => {
            let period_ns = period.as_nanos().max(1);
            let since = (first + period).saturating_duration_since(epoch).as_nanos();
            let ticks = since.div_ceil(period_ns);
            epoch + Duration::from_nanos((ticks * period_ns) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::profile::Profile;

    const DATA: SegmentShape = SegmentShape {
        payload: 1400,
        control: false,
        ack: true,
    };
    const ACK: SegmentShape = SegmentShape {
        payload: 0,
        control: false,
        ack: true,
    };
    const FLOW: FlowKey = (49152, 11211);

    #[test]
    fn windows_holds_one_segment_for_its_timer_and_acks_the_second_at_once() {
        let t0 = Instant::now();
        let mut policy = AckPolicy::new(Profile::Windows.rules(false, None), t0);
        policy.on_received(FLOW, DATA, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a1", t0), Verdict::Hold);
        let timer = t0 + tcp_rules::WINDOWS_DELACK;
        assert_eq!(policy.next_due(), Some(timer));
        assert!(policy.take_due(timer - Duration::from_millis(1)).is_empty());
        assert_eq!(policy.take_due(timer), vec![b"a1".to_vec()]);
        // Two small segments: the second forces the ACK (TcpAckFrequency 2).
        let small = SegmentShape { payload: 6, ..DATA };
        policy.on_received(FLOW, small, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a2", t0), Verdict::Hold);
        policy.on_received(FLOW, small, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a3", t0), Verdict::Send);
        assert_eq!(policy.next_due(), None);
    }

    #[test]
    fn the_client_fix_acks_every_segment() {
        let t0 = Instant::now();
        let mut policy = AckPolicy::new(Profile::Windows.rules(true, None), t0);
        policy.on_received(FLOW, DATA, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a", t0), Verdict::Send);
    }

    #[test]
    fn macos_fires_on_the_second_tick() {
        let t0 = Instant::now();
        let mut policy = AckPolicy::new(Profile::Macos.rules(false, None), t0);
        let first = t0 + Duration::from_millis(30);
        policy.on_received(FLOW, DATA, first);
        assert_eq!(policy.on_send(FLOW, ACK, b"a", first), Verdict::Hold);
        // The fast timer's second tick.
        assert_eq!(policy.next_due(), Some(t0 + 2 * tcp_rules::MACOS_DELACK));
    }

    #[test]
    fn linux_quick_acks_until_ping_pong_then_delays() {
        let t0 = Instant::now();
        let mut policy = AckPolicy::new(Profile::Linux.rules(false, None), t0);
        // Request 1 goes out before any data arrived: no ping-pong yet.
        policy.on_send(FLOW, SegmentShape { payload: 7, ..ACK }, b"req", t0);
        policy.on_received(FLOW, DATA, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a1", t0), Verdict::Send);
        // Request 2 right after the reply: ping-pong; the next reply's ACK is delayed.
        policy.on_send(FLOW, SegmentShape { payload: 7, ..ACK }, b"req", t0);
        policy.on_received(FLOW, DATA, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a2", t0), Verdict::Hold);
        assert_eq!(policy.next_due(), Some(t0 + tcp_rules::DELACK_MIN));
        // More than one full segment unacknowledged: at once.
        policy.on_received(FLOW, DATA, t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a3", t0), Verdict::Send);
    }

    #[test]
    fn handshake_acks_are_never_held() {
        let t0 = Instant::now();
        let mut policy = AckPolicy::new(Profile::Windows.rules(false, None), t0);
        assert_eq!(policy.on_send(FLOW, ACK, b"a", t0), Verdict::Send);
    }
}
