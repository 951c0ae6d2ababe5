//! Writes paced by ACKs (`nagle_ack_paced`): Nagle holding each small write of a busy sender
//! for the ACK of its previous small segment, one round trip each, sustained over a flow.
//!
//! One such hold is minor ([`StallKind::NagleMinor`]); a sender that keeps writing while its
//! small segments are in flight (pipelined requests, many clients served from one event loop)
//! pays one round trip per ACK for the whole flow. A hold counts when Linux's
//! `tcp_nagle_check` → `tcp_minshall_check` would have held it and nothing else explains the
//! wait:
//! - B, the released segment, is new data ending in a partial segment (only the last, partial
//!   segment is ever held; full segments waiting are the congestion or receive window);
//! - the data unacknowledged just before the releasing packet was less than one MSS and ended
//!   with the small segment A (`snd_sml`), that packet acknowledged A, and the sender had not
//!   filled the window it was offered (a window-limited sender waits for the window);
//! - the releasing packet is the peer's pure ACK, not delayed (the rule of `nagle.rs`; on
//!   loopback, where a sender writing every few µs follows each ACK as closely whether held or
//!   not, only when B carries more than was in flight: writes gathered behind A), or the
//!   peer's data carrying that ACK (a reply piggybacking it, as a server in ping-pong mode
//!   does). A release by data is told from the application answering the reply only on the
//!   sender's host: B leaves within [`tcp_rules::SOFTIRQ_RELEASE`] of the packet, in the softirq
//!   that processed it, and carries more than was in flight (writes gathered while held: an
//!   application waiting for the reply would have had nothing queued).
//!
//! A flow's direction is paced once it has [`MIN_HOLDS`] such holds (more than a new
//! connection's quick-ACK start releases, [`tcp_rules::MAX_QUICKACKS`]), one threshold
//! whatever the path: a few holds, however long, are a few round trips, not pacing. Then one
//! event of the kind is emitted, updated while the
//! detector still holds it, and the flow's summary carries the final [`Pacing`]; the direction's
//! holds are no longer counted as minor. Fewer holds stay `nagle_minor`.

use super::{Analysis, Finding, FlowTally, StallEvent, StallKind};
use super::{Holder, KindInfo, Proof, Release};
use crate::decode::Segment;
use crate::flow::{ClientGuess, Flow, Side, Span, Timestamp};
use crate::tcp_rules;

/// Writes paced by ACKs. No per-segment rule of its own: [`hold`] and [`record`] follow each
/// flow side's holds, from the Nagle rule's minor holds and the releases by the peer's data.
pub const KIND: KindInfo = KindInfo {
    name: "nagle_ack_paced",
    is_stall: false,
    holder: Holder::Nagle,
    release: Release::Acks,
    proof: Proof::Timing,
    rule: None,
    obligations: &[],
    margin: None,
    timer_episode: false,
    aside: Some("flow sides whose small writes each waited one round trip for an ACK (Nagle pacing a busy sender; not a 40 ms stall)"),
    column: "paced",
    page_column: "paced",
    gap: "{held}'s writes wait for {peer}'s ACK, one round trip each (Nagle pacing)",
    explain: |event| {
        let pacing = event.paced.as_deref().copied().unwrap_or_default();
        explain(event.finding.held_side, &pacing)
    },
    fixes: |held, _| fixes(held),
};

/// Holds that make a direction paced: more than the immediate ACKs of a new connection's
/// quick-ACK mode can release (`TCP_MAX_QUICKACKS`, `tcp_incr_quickack`).
pub const MIN_HOLDS: u64 = tcp_rules::MAX_QUICKACKS as u64 + 1;

/// Longest ACK delay (path removed) taken for an ACK sent at once: below the shortest
/// delayed-ACK cap measured (`TCP_DELACK_MAX_US` at its floor, 5 ms, fires after 5-12 ms).
const QUICK_ACK_MAX: Span = Span::from_millis(3);
const SOFTIRQ_RELEASE: Span = Span::from_duration(tcp_rules::SOFTIRQ_RELEASE);
const ON_HOST_LEG: Span = Span::from_duration(tcp_rules::ON_HOST_LEG);

/// One direction's holds for the ACK of the previous small segment, aggregated.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pacing {
    /// Holds found.
    pub holds: u64,
    /// Of these, holds released by the peer's data carrying the ACK (the rest by a pure ACK).
    pub by_data: u64,
    /// Sum of the holds' delays, each from the small segment A to the released segment B: the
    /// wire does not show when B was written, so each is an upper bound of its wait.
    pub delay_sum_ns: Span,
    /// The union of the holds' intervals: never more than the flow's span.
    pub time_lost_ns: Span,
    /// Capture time of the first and of the latest hold.
    pub first_hold: Timestamp,
    /// Capture time of the latest hold.
    pub last_hold: Timestamp,
    /// New bytes the held side sent over the flow (so far, in an event).
    pub bytes: u64,
    /// The flow's span: first packet to last (to the latest hold, in an event).
    pub span_ns: Span,
    /// End of the latest interval counted in `time_lost_ns`.
    until: Timestamp,
    /// Holds of this direction counted as minor before it was found paced.
    minor_counted: u64,
}

impl Pacing {
    /// The held side's throughput over the flow, bytes per second.
    pub fn bytes_per_s(&self) -> Option<f64> {
        per_second(self.bytes, self.span_ns)
    }

    /// Estimate of the throughput without the holds: `bytes / (span − time_lost)`. An upper
    /// bound: it assumes the time each hold waited would have gone to sending, and ignores what
    /// the holds saved (writes gathered into fewer segments, fewer wake-ups of the peer).
    pub fn bytes_per_s_without(&self) -> Option<f64> {
        per_second(self.bytes, self.span_ns - self.time_lost_ns)
    }

    /// The holds are sustained: [`MIN_HOLDS`] of them.
    fn sustained(&self) -> bool {
        self.holds >= MIN_HOLDS
    }

    /// Adds the later part of the same connection.
    pub fn absorb(&mut self, later: &Pacing) {
        self.holds += later.holds;
        self.by_data += later.by_data;
        self.delay_sum_ns += later.delay_sum_ns;
        self.time_lost_ns += later.time_lost_ns;
        self.last_hold = self.last_hold.max(later.last_hold);
        self.bytes += later.bytes;
        self.span_ns += later.span_ns;
    }
}

fn per_second(bytes: u64, span: Span) -> Option<f64> {
    (span > Span::ZERO).then(|| bytes as f64 / span.as_secs_f64())
}

/// A flow's pacing, both directions, kept in its tally.
#[derive(Debug, Clone, Default)]
pub struct FlowPacing {
    dirs: [Pacing; 2],
    /// The direction was found paced: where its event is, `(take generation, index)` in the
    /// detector's events, until a consumer takes it.
    event: [Option<(u64, usize)>; 2],
    paced: [bool; 2],
    /// The side was seen sending with Nagle off ([`Seen::NagleOff`]).
    nagle_off: [bool; 2],
}

impl FlowPacing {
    /// The paced directions' aggregates, as the flow retires (none when neither is paced).
    pub fn summary(&self, flow: &Flow) -> Option<Box<[Option<Pacing>; 2]>> {
        if !self.paced.iter().any(|p| *p) {
            return None;
        }
        let span = flow.last_seen().since(flow.first_seen);
        Some(Box::new([Side::Client, Side::Server].map(|side| {
            let i = side.index();
            self.paced[i].then(|| Pacing {
                bytes: flow.dir(side).bytes,
                span_ns: span,
                ..self.dirs[i]
            })
        })))
    }
}

/// The delay of the hold `seg` ends, when it is one: `finding` is what the other rules made of
/// the segment (a minor Nagle hold, or nothing); `coarse` when the capture clock is coarser than
/// a microsecond's.
#[inline]
pub fn hold(
    flow: &Flow,
    side: Side,
    seg: &Segment,
    finding: Option<&Finding>,
    coarse: bool,
) -> Option<Seen> {
    let me = flow.dir(side);
    let prev = flow.prev?;
    // B: new data ending in a partial segment, after a small segment A.
    if !me.is_new_data(seg) || !me.last_data_small || !me.is_small(seg) {
        return None;
    }
    // A still unacknowledged as B leaves: Nagle would have held B (`tcp_minshall_check`), so
    // the side has it off (TCP_NODELAY). The ACK that releases a hold passes the capture point
    // before the data it releases, wherever the capture is taken.
    if me.una_known && me.snd_una < me.snd_sml {
        return Some(Seen::NagleOff);
    }
    if prev.side != side.peer() || prev.window_limited || prev.window == 0 {
        return None;
    }
    // All that was unacknowledged before the releasing packet is less than one MSS and ends
    // with A (`snd_sml`): nothing full-sized waited for the window.
    let in_flight = me.snd_nxt - prev.una_before;
    if in_flight >= me.mss || u64::from(in_flight) >= prev.window.max(1) {
        return None;
    }
    // Captured on the sender's host, a release is in the softirq of the ACK: a later segment
    // is the application's next write (a bulk sender's, whose partial segment is what it had
    // copied so far), not held data.
    // A clock coarser than a microsecond's (`coarse`: whole milliseconds) cannot time that
    // bound, nor can generated timing (`Cadence`): neither tells a hold from a sender writing
    // on its own schedule.
    let on_host = me.near_rtt.is_some_and(|leg| leg < ON_HOST_LEG);
    let untimed = coarse || flow.cadence.synthetic();
    if untimed || (on_host && seg.ts_ns.since(prev.at) > SOFTIRQ_RELEASE) {
        return None;
    }
    match finding {
        // On loopback a sender writing every few µs, TCP_NODELAY or not, has its next write
        // follow each ACK as closely as a release does: only writes gathered behind A show the
        // hold there. On a longer path a sender not held does not wait for ACKs.
        // The ACK came at once: one delayed, even capped to a few ms (`TCP_DELACK_MAX_US`),
        // released a hold that waited for its timer, not for the round trip.
        Some(f) if f.kind == StallKind::NagleMinor => {
            (f.ack_delay_ns.is_some_and(|d| d <= QUICK_ACK_MAX)
                && (seg.payload_len > in_flight || round_trip(flow) >= ON_HOST_LEG))
                .then_some(Seen::Hold(f.delay_ns))
        }
        Some(_) => None,
        None => released_by_data(flow, side, seg, in_flight).map(Seen::Hold),
    }
}

/// What [`hold`] saw in a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Seen {
    /// A hold for the ACK of the previous small segment, that long.
    Hold(Span),
    /// A small segment sent while an earlier one was unacknowledged: the side's Nagle is off,
    /// and none of its waits is a Nagle hold.
    NagleOff,
}

/// The path's round trip as the capture point sees it (both legs; unknown legs count 0).
fn round_trip(flow: &Flow) -> Span {
    let leg = |side: Side| flow.dir(side).near_rtt.unwrap_or(Span::ZERO);
    leg(Side::Client) + leg(Side::Server)
}

/// A hold released by the peer's data that carried the ACK of A: on the sender's host, B
/// follows that packet within the softirq bound and gathers more than was in flight.
fn released_by_data(flow: &Flow, side: Side, seg: &Segment, in_flight: u32) -> Option<Span> {
    // The server's segment after the client's data is its answer to it, however soon it
    // leaves (a quick server answers within the softirq bound on loopback): only the client,
    // whose requests open each exchange, has data that can have waited for the peer's. The
    // roles must be known from the handshake or the service port.
    let roles_known = matches!(
        flow.client_guess,
        ClientGuess::Syn | ClientGuess::SynAck | ClientGuess::ServicePort
    );
    if side != Side::Client || !roles_known {
        return None;
    }
    let me = flow.dir(side);
    let prev = flow.prev?;
    if prev.payload_len == 0 || prev.pure_ack || !prev.advanced_una {
        return None;
    }
    let ack = prev.ack?;
    if !(me.snd_sml <= ack && prev.una_before < me.snd_sml) || me.last_data > prev.at {
        return None;
    }
    let on_host = me.near_rtt.is_some_and(|leg| leg < ON_HOST_LEG);
    if !on_host || seg.payload_len <= in_flight {
        return None;
    }
    Some(seg.ts_ns.since(me.last_data))
}

/// Where a paced event is written and counted.
pub struct Sink<'a> {
    /// The run's analysis: its events and counts.
    pub analysis: &'a mut Analysis,
    /// The flow's tally.
    pub tally: &'a mut FlowTally,
    /// How many times events were taken: an index into the events is good for one generation.
    pub generation: u64,
}

/// Counts a hold of `side` ending at `seg` ([`Seen::Hold`]); `minor` when it was counted as a
/// minor Nagle hold. A side seen with Nagle off is never paced. Emits the direction's event
/// when its holds become sustained and keeps it up to date while the detector still holds it.
pub fn record(
    sink: Sink<'_>,
    flow: &Flow,
    side: Side,
    seg: &Segment,
    seen: Seen,
    minor: bool,
    ordinal: u64,
) {
    let i = side.index();
    // Allocated at the flow's first hold: most flows have none.
    let pacing = &mut **sink.tally.paced.get_or_insert_with(Default::default);
    let delay = match seen {
        Seen::Hold(delay) if !pacing.nagle_off[i] => delay,
        Seen::Hold(_) => return,
        Seen::NagleOff => {
            // Its holds so far were the timing's coincidences; a side already paced keeps its
            // event.
            pacing.nagle_off[i] = true;
            return;
        }
    };
    let p = &mut pacing.dirs[i];
    // A hold waited no longer than the flow has existed.
    let delay = delay.min(seg.ts_ns.since(flow.first_seen));
    let start = Timestamp::from_nanos(seg.ts_ns.as_nanos().saturating_sub(delay.as_nanos()));
    if p.holds == 0 {
        p.first_hold = seg.ts_ns;
    }
    p.holds += 1;
    p.by_data += u64::from(!minor);
    p.delay_sum_ns += delay;
    p.time_lost_ns += seg.ts_ns.since(start.max(p.until));
    p.until = p.until.max(seg.ts_ns);
    p.last_hold = seg.ts_ns;
    p.bytes = flow.dir(side).bytes + u64::from(seg.payload_len);
    p.span_ns = seg.ts_ns.since(flow.first_seen);
    let counts = [&mut sink.analysis.counts, &mut sink.tally.counts];
    let events = &mut sink.analysis.events;
    let minor_here = |e: &StallEvent| {
        e.flow_id == flow.id
            && e.finding.kind == StallKind::NagleMinor
            && e.finding.held_side == side
    };
    if pacing.paced[i] {
        // The direction is paced: its holds are the pacing, not minor holds (the one just
        // recorded, when minor events are kept, is the last event).
        if minor {
            for c in counts {
                c.remove(StallKind::NagleMinor, 1);
            }
            if events.last().is_some_and(minor_here) {
                events.pop();
            }
        }
        // The side's event, while the detector still holds it: at its index, or, when another
        // side's minor events were dropped since, found again.
        let ours = |e: &StallEvent| {
            e.flow_id == flow.id
                && e.finding.kind == StallKind::NagleAckPaced
                && e.finding.held_side == side
        };
        let Some((generation, at)) = pacing.event[i] else {
            return;
        };
        if generation != sink.generation {
            return;
        }
        let at = match events.get(at) {
            Some(e) if ours(e) => Some(at),
            _ => events.iter().rposition(ours),
        };
        pacing.event[i] = at.map(|at| (generation, at));
        // The event's time and packet follow its figures: the holds so far end at this one.
        if let Some(e) = at.and_then(|at| events.get_mut(at)) {
            e.finding.delay_ns = p.time_lost_ns;
            e.paced = Some(Box::new(*p));
            e.ts_ns = seg.ts_ns;
            e.packet_number = seg.packet_number;
            e.released_bytes = seg.payload_len;
            e.writes = vec![seg.payload_len];
        }
        return;
    }
    p.minor_counted += u64::from(minor);
    if !p.sustained() {
        return;
    }
    pacing.paced[i] = true;
    let earlier_minor = p.minor_counted;
    for c in counts {
        c.remove(StallKind::NagleMinor, earlier_minor);
        c.add(StallKind::NagleAckPaced);
    }
    // Once, when the side turns paced: its minor events still held are the pacing's holds.
    if earlier_minor > 0 {
        events.retain(|e| !minor_here(e));
    }
    let dir = flow.dir(side);
    let event = StallEvent {
        finding: Finding {
            kind: StallKind::NagleAckPaced,
            held_side: side,
            ack_side: Some(side.peer()),
            delay_ns: p.time_lost_ns,
            ack_delay_ns: None,
            release_ns: None,
        },
        flow_id: flow.id,
        ordinal,
        client: flow.client,
        server: flow.server,
        ts_ns: seg.ts_ns,
        packet_number: seg.packet_number,
        released_by: None,
        released_bytes: seg.payload_len,
        writes: vec![seg.payload_len],
        mss: dir.mss,
        peer_stack: None,
        backoffs: 0,
        backoff_ns: Span::ZERO,
        handshake_not_taken: None,
        paced: Some(Box::new(*p)),
    };
    pacing.event[i] = Some((sink.generation, events.len()));
    events.push(event);
}

/// One sentence naming the pattern, from the event's aggregate.
pub fn explain(held: Side, p: &Pacing) -> String {
    let peer = held.peer().name();
    let per_hold = p.delay_sum_ns.as_millis_f64() / p.holds.max(1) as f64;
    let mut s = format!(
        "the {}'s small writes waited for the {peer}'s ACK of its previous small segment at \
         least {} times (the holds the capture proves; {per_hold:.3} ms each on average, {:.1} ms in all, {:.1} % of the flow): Nagle pacing \
         a sender that writes while its requests are in flight",
        held.name(),
        p.holds,
        p.time_lost_ns.as_millis_f64(),
        share(p) * 100.0,
    );
    if let (Some(now), Some(without)) = (p.bytes_per_s(), p.bytes_per_s_without()) {
        s.push_str(&format!(
            "; {} now, at most {} without the holds (an estimate and an upper bound: bytes / \
             (span − time lost))",
            rate(now),
            rate(without)
        ));
    }
    s
}

/// Share of the flow's span lost to the holds.
pub fn share(p: &Pacing) -> f64 {
    if p.span_ns == Span::ZERO {
        return 0.0;
    }
    p.time_lost_ns.as_secs_f64() / p.span_ns.as_secs_f64()
}

/// A byte rate for people.
pub fn rate(bytes_per_s: f64) -> String {
    if bytes_per_s >= 1e6 {
        format!("{:.2} MB/s", bytes_per_s / 1e6)
    } else if bytes_per_s >= 1e3 {
        format!("{:.1} kB/s", bytes_per_s / 1e3)
    } else {
        format!("{bytes_per_s:.0} B/s")
    }
}

/// The fixes, in order of preference.
pub fn fixes(held: Side) -> Vec<String> {
    let h = held.name();
    vec![
        format!("set TCP_NODELAY on the {h}'s socket (its writes then leave at once)"),
        format!(
            "or gather each batch of the {h}'s writes into one write (writev, a buffered writer)"
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::testing::Wire;
    use super::super::StallKind;
    use super::MIN_HOLDS;
    use crate::flow::Side;

    const US: u64 = 1;

    /// A client pipelining `batches` batches: one 33 B command leaves, the rest of the batch
    /// (495 B) waits until the server's first reply, which carries the ACK, releases it 4 µs
    /// later; then the replies to the rest. Times in µs.
    fn pipelined(batches: u64, release_after: u64) -> Wire {
        let mut w = Wire::handshake(30, 65_483);
        let mut t = 1_000;
        for _ in 0..batches {
            w.data(true, t, 33)
                .data(false, t + 27, 5)
                .data(true, t + 27 + release_after, 495)
                .data(false, t + 60, 75);
            t += 200;
        }
        w
    }

    #[test]
    fn pipelined_client_released_by_replies_is_paced() {
        let a = pipelined(40, 4 * US).analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 1, "{:?}", a.counts);
        assert_eq!(a.stall_count(), 0, "pacing is not a 40 ms stall");
        let e = a
            .events
            .iter()
            .find(|e| e.finding.kind == StallKind::NagleAckPaced)
            .expect("the paced event");
        assert_eq!(e.finding.held_side, Side::Client);
        let p = e.paced.as_deref().copied().unwrap_or_default();
        assert_eq!(p.holds, 40, "the event is kept up to date");
        assert_eq!(p.by_data, 40);
        let f = a.flows[0].paced()[0].expect("the flow's aggregate");
        assert_eq!(f.holds, 40);
        assert!(f.time_lost_ns <= f.span_ns && f.time_lost_ns <= f.delay_sum_ns);
        assert!(f.bytes_per_s_without() > f.bytes_per_s());
        assert!(a.flows[0].paced()[1].is_none());
    }

    /// The same exchange where the client's next command follows the reply after 12 µs, or is
    /// no larger than what was in flight, is a client answering replies: not paced.
    #[test]
    fn answering_replies_is_not_pacing() {
        let a = pipelined(40, 12 * US).analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 0);
        let mut w = Wire::handshake(30, 65_483);
        for i in 0..40 {
            let t = 1_000 + i * 200;
            w.data(true, t, 33).data(false, t + 27, 5);
        }
        assert_eq!(w.analyse().counts.get(StallKind::NagleAckPaced), 0);
    }

    /// A server answering each piece of a pipelined batch as it comes, quickly: its second
    /// answer follows the client's data (which acknowledges the first) within the softirq
    /// bound and is larger than what was in flight, yet it is an answer, not held data: only
    /// the client is paced.
    #[test]
    fn a_quick_server_answering_is_not_paced() {
        let mut w = Wire::handshake(30, 65_483);
        let mut t = 1_000;
        for _ in 0..40 {
            w.data(true, t, 33)
                .data(false, t + 27, 5)
                .data(true, t + 31, 495)
                .data(false, t + 33, 75);
            t += 200;
        }
        let a = w.analyse();
        let paced = a.flows[0].paced();
        assert!(paced[Side::Client.index()].is_some(), "{:?}", a.counts);
        assert!(paced[Side::Server.index()].is_none(), "{:?}", paced);
    }

    /// Holds released by pure ACKs (a peer in quick-ACK mode): sustained, paced, and no longer
    /// counted as minor; a few stay minor. On loopback a next write no larger than what was in
    /// flight is no evidence of a hold (a TCP_NODELAY sender writing every few µs looks the
    /// same); on a 4 ms path it is.
    #[test]
    fn pure_ack_releases_pace_once_sustained() {
        let run = |n: u64, rtt_us: u64, b_len: u32| {
            let mut w = Wire::handshake(rtt_us, 1448);
            for i in 0..n {
                let t = 100_000 + i * 10_000;
                w.data(true, t, 6)
                    .ack(false, t + rtt_us + 10)
                    .data(true, t + rtt_us + 14, b_len);
                w.data(false, t + 3 * rtt_us + 200, 10);
            }
            w.analyse()
        };
        let few = run(MIN_HOLDS - 1, 30, 7);
        assert_eq!(few.counts.get(StallKind::NagleAckPaced), 0);
        assert_eq!(few.counts.get(StallKind::NagleMinor), MIN_HOLDS - 1);
        let many = run(MIN_HOLDS + 5, 30, 7);
        assert_eq!(many.counts.get(StallKind::NagleAckPaced), 1);
        assert_eq!(many.counts.get(StallKind::NagleMinor), 0);
        assert_eq!(many.flows[0].counts.get(StallKind::NagleMinor), 0);
        assert_eq!(
            many.flows[0].paced()[0].map(|p| p.holds),
            Some(MIN_HOLDS + 5)
        );
        // The kept minor events go with their counts: the holds are the pacing's.
        let minor_events = |a: &super::super::Analysis| {
            a.events
                .iter()
                .filter(|e| e.finding.kind == StallKind::NagleMinor)
                .count() as u64
        };
        assert_eq!(minor_events(&few), MIN_HOLDS - 1);
        assert_eq!(minor_events(&many), 0);
        assert_eq!(many.events.len(), 1);
        let paced = many.events[0].paced.as_deref().map(|p| p.holds);
        assert_eq!(paced, Some(MIN_HOLDS + 5), "the event kept up to date");
        let same_size = run(MIN_HOLDS + 5, 30, 6);
        assert_eq!(same_size.counts.get(StallKind::NagleAckPaced), 0);
        assert_eq!(same_size.counts.get(StallKind::NagleMinor), MIN_HOLDS + 5);
        let long_path = run(MIN_HOLDS + 5, 2_000, 6);
        assert_eq!(long_path.counts.get(StallKind::NagleAckPaced), 1);
    }

    /// A server with TCP_NODELAY writing a header and, 11 µs later, a body: mostly the body
    /// leaves before the client's quick ACK of the header, which Nagle would never allow; now
    /// and then the ACK comes first and the body follows it within the softirq bound. Those
    /// are coincidences, not holds: the side is never paced.
    #[test]
    fn a_side_seen_with_nagle_off_is_not_paced() {
        let mut w = Wire::handshake(30, 65_483);
        for i in 0..60 {
            let t = 1_000 + i * 700;
            w.data(true, t, 144).data(false, t + 30, 238);
            if i % 3 == 0 {
                w.data(false, t + 40, 615).ack(true, t + 41);
            } else {
                w.ack(true, t + 41).data(false, t + 42, 615);
            }
        }
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 0, "{:?}", a.counts);
        // Without the tell-tale turns the same timing is taken for holds.
        let mut w = Wire::handshake(30, 65_483);
        for i in 0..60 {
            let t = 1_000 + i * 700;
            w.data(true, t, 144).data(false, t + 30, 238);
            w.ack(true, t + 41).data(false, t + 42, 615);
        }
        assert_eq!(w.analyse().counts.get(StallKind::NagleAckPaced), 1);
    }

    /// On a long path a few holds are most of the flow's time, and still a few round trips:
    /// one threshold, more than 16 holds, as README says.
    #[test]
    fn few_costly_holds_on_a_long_path_stay_minor() {
        let mut w = Wire::handshake_between(10, 30_000, 1448);
        for i in 0..3 {
            let t = 100_000 + i * 70_000;
            w.data(true, t, 6)
                .ack(false, t + 30_000)
                .data(true, t + 30_004, 7);
            w.data(false, t + 60_000, 10);
        }
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 0, "{:?}", a.counts);
        assert!(a.flows[0].paced()[0].is_none());
    }

    /// A window-limited bulk sender: segments sub-MSS on loopback, each waiting for the window
    /// update that acknowledges the previous one. Not Nagle.
    #[test]
    fn window_limited_bulk_is_not_paced() {
        let mut w = Wire::handshake(30, 65_483);
        w.ack_window(false, 500, 8); // 8 << 7 = 1024 bytes
        for i in 0..40 {
            let t = 1_000 + i * 100;
            w.data(true, t, 1024).ack_window(false, t + 40, 8);
        }
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 0);
    }

    /// Holds released by a capped delayed ACK (`TCP_DELACK_MAX_US`: 12 ms on loopback) waited
    /// for the peer's timer, not for the round trip: no pacing, however many.
    #[test]
    fn holds_released_by_a_capped_delayed_ack_are_not_pacing() {
        let mut w = Wire::handshake(30, 1448);
        for i in 0..MIN_HOLDS + 5 {
            let t = 100_000 + i * 20_000;
            w.data(true, t, 6)
                .ack(false, t + 12_000)
                .data(true, t + 12_004, 7);
            w.data(false, t + 12_200, 10);
        }
        let a = w.analyse();
        assert_eq!(a.counts.get(StallKind::NagleAckPaced), 0, "{:?}", a.counts);
    }

    /// A trace whose packets are all whole milliseconds apart (generated, or re-timed): its
    /// clock cannot show a hold.
    #[test]
    fn a_coarse_clock_shows_no_pacing() {
        let mut w = Wire::handshake(1_000, 1448);
        for i in 0..MIN_HOLDS + 5 {
            let t = 100_000 + i * 13_000;
            w.data(true, t, 6)
                .ack(false, t + 1_000)
                .data(true, t + 2_000, 7);
        }
        assert_eq!(w.analyse().counts.get(StallKind::NagleAckPaced), 0);
    }

    /// The event's packet and time are those of the latest hold its figures count.
    #[test]
    fn the_event_is_at_its_latest_hold() {
        let w = pipelined(40, 4 * US);
        let a = w.analyse();
        let e = a
            .events
            .iter()
            .find(|e| e.finding.kind == StallKind::NagleAckPaced)
            .expect("paced");
        let p = e.paced.as_deref().copied().unwrap_or_default();
        assert_eq!(e.ts_ns, p.last_hold);
        assert!(e.finding.delay_ns <= e.ts_ns.since(a.flows[0].span_ns.0));
    }
}
