//! The ladder (sequence) diagram of one stall: the segments of one turn around an example
//! event, each marked with the part it plays (the small unacknowledged segment, the late ACK,
//! the held data right behind it).
//!
//! The detector keeps no packets, so the segments are gathered in a second, bounded pass over
//! the capture ([`collect`]): only the example flows, only a window before each example.

use std::collections::VecDeque;
use std::io::Read;
use std::net::IpAddr;

use crate::capture::{for_each_segment, CaptureError};
use crate::decode::{flags, Segment};
use crate::detect::verdict::{explain, fixes};
use crate::detect::{Holder, Release, StallEvent, StallKind};
use crate::flow::{Endpoint, SeqNumber, Span, Timestamp};
use crate::tcp_rules::is_sub_mss;
use crate::Side;

/// Segments drawn before the released one: enough for the request, the small segment and
/// the late ACK of a turn, few enough to read at a glance.
const RUNGS_BEFORE: usize = 9;
/// Segments drawn after the released one (its ACK, the next request).
const RUNGS_AFTER: usize = 2;
/// Window gathered before the stall began, beyond its delay: the request that opened the turn.
const LEAD: Span = Span::from_millis(5);

/// What a segment does in the stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// A sub-MSS segment still unacknowledged: Nagle holds the next small write behind it
    /// (`tcp_nagle_check` → `tcp_minshall_check`).
    SmallUnacked,
    /// The peer's ACK that came one delayed-ACK timeout late and released the held data.
    LateAck,
    /// The ACK or window update that released the held data (not delayed).
    ReleasingAck,
    /// The data that waited, leaving right behind what released it.
    Held,
    /// Data sent by the holder's own timer (cork/probe timer, retransmission timer).
    SentByTimer,
    /// The peer advertised a zero window.
    ZeroWindow,
}

impl Mark {
    /// Short label written beside the segment.
    pub fn label(self) -> &'static str {
        match self {
            Mark::SmallUnacked => "small, unacked",
            Mark::LateAck => "delayed ACK",
            Mark::ReleasingAck => "releasing ACK",
            Mark::Held => "held",
            Mark::SentByTimer => "sent by timer",
            Mark::ZeroWindow => "zero window",
        }
    }
}

/// One segment of the diagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rung {
    /// Time since the first rung.
    pub at: Span,
    /// Who sent it.
    pub from: Side,
    /// Header flags (bits of [`flags`]).
    pub flags: u8,
    /// Payload bytes.
    pub len: u32,
    /// Sequence number relative to the lowest of its direction in the diagram.
    pub seq: u32,
    /// Acknowledgment number relative to the lowest sequence of the peer's direction, when the
    /// ACK flag is set.
    pub ack: Option<u32>,
    /// Receive window as carried in the header (unscaled).
    pub window: u16,
    /// Its part in the stall, if any.
    pub mark: Option<Mark>,
}

impl Rung {
    /// The flags as tcpdump writes them (`S`, `F`, `R`, `P`, `.` for ACK).
    pub fn flag_letters(&self) -> String {
        let mut s = String::new();
        for (bit, letter) in [
            (flags::SYN, 'S'),
            (flags::FIN, 'F'),
            (flags::RST, 'R'),
            (flags::PSH, 'P'),
            (flags::ACK, '.'),
        ] {
            if self.flags & bit != 0 {
                s.push(letter);
            }
        }
        s
    }
}

/// The diagram of one example stall.
#[derive(Debug, Clone)]
pub struct Ladder {
    /// The cause.
    pub kind: StallKind,
    /// The side whose data waited.
    pub held_side: Side,
    /// Connection initiator.
    pub client: Endpoint,
    /// Acceptor.
    pub server: Endpoint,
    /// How long the data waited.
    pub delay: Span,
    /// The segments, in capture order.
    pub rungs: Vec<Rung>,
    /// Index of the rung after which the wait is drawn (the gap the stall cost).
    pub gap_after: Option<usize>,
    /// The event's explanation in application terms.
    pub explanation: String,
    /// The fixes, in order of preference.
    pub fixes: Vec<String>,
}

/// The events to draw: the latest of each kind, in report order (the steady state, past a
/// new connection's quick-ACK start, as the text report's examples).
pub fn examples(events: &[StallEvent]) -> Vec<&StallEvent> {
    StallKind::ALL
        .iter()
        .filter_map(|kind| events.iter().rfind(|e| e.finding.kind == *kind))
        .collect()
}

/// Segments of one example flow gathered by the second pass.
struct Gathered<'e> {
    event: &'e StallEvent,
    /// From `event`'s delay plus [`LEAD`] before it, the last [`RUNGS_BEFORE`] + 1.
    before: VecDeque<Segment>,
    after: Vec<Segment>,
    released_seen: bool,
}

impl<'e> Gathered<'e> {
    fn new(event: &'e StallEvent) -> Gathered<'e> {
        Gathered {
            event,
            before: VecDeque::with_capacity(RUNGS_BEFORE + 2),
            after: Vec::with_capacity(RUNGS_AFTER),
            released_seen: false,
        }
    }

    /// Keeps `seg` if it is of the example's flow and in its window.
    fn offer(&mut self, seg: &Segment) {
        let e = self.event;
        if !same_ends(seg, e.client, e.server) {
            return;
        }
        let lead = e.finding.delay_ns + LEAD;
        let from = Timestamp::from_nanos(e.ts_ns.as_nanos().saturating_sub(lead.as_nanos()));
        if seg.ts_ns < from || seg.ts_ns > e.ts_ns + LEAD {
            return;
        }
        if self.released_seen {
            if self.after.len() < RUNGS_AFTER {
                self.after.push(*seg);
            }
        } else {
            if self.before.len() > RUNGS_BEFORE {
                self.before.pop_front();
            }
            self.before.push_back(*seg);
            self.released_seen = is_released(seg, e);
        }
    }

    /// The ladder of what was kept, if the released segment was seen.
    fn ladder(self) -> Option<Ladder> {
        self.released_seen.then(|| {
            let mut segs: Vec<Segment> = self.before.into_iter().collect();
            segs.extend(self.after);
            build(self.event, &segs)
        })
    }
}

fn same_ends(seg: &Segment, a: Endpoint, b: Endpoint) -> bool {
    let is = |addr: IpAddr, port: u16, e: Endpoint| addr == e.addr && port == e.port;
    (is(seg.src, seg.src_port, a) && is(seg.dst, seg.dst_port, b))
        || (is(seg.src, seg.src_port, b) && is(seg.dst, seg.dst_port, a))
}

fn is_released(seg: &Segment, event: &StallEvent) -> bool {
    seg.ts_ns == event.ts_ns && seg.payload_len == event.released_bytes
}

/// Reads `inputs` (each a fresh reader of the same captures the events came from, in order)
/// once and draws a ladder for each of `events`, in their order (`None` where the released
/// segment is not in the input). Memory is bounded by the examples, not the capture.
pub fn collect<R: Read>(
    inputs: impl IntoIterator<Item = R>,
    events: &[&StallEvent],
) -> Result<Vec<Option<Ladder>>, CaptureError> {
    let mut gathered: Vec<Gathered<'_>> = events.iter().map(|e| Gathered::new(e)).collect();
    for input in inputs {
        for_each_segment(
            input,
            |seg| {
                for g in gathered.iter_mut() {
                    g.offer(seg);
                }
            },
            // The first pass already reported the input's damage.
            |_| {},
        )?;
    }
    Ok(gathered.into_iter().map(Gathered::ladder).collect())
}

/// The ladder of `event` from segments already in memory (a live capture's), in capture
/// order; `None` when the released segment is not among them.
pub fn around<'s>(
    event: &StallEvent,
    segments: impl IntoIterator<Item = &'s Segment>,
) -> Option<Ladder> {
    let mut g = Gathered::new(event);
    for seg in segments {
        g.offer(seg);
    }
    g.ladder()
}

/// The ladder of `event` from its flow's segments around it (the released one included).
pub fn build(event: &StallEvent, segs: &[Segment]) -> Ladder {
    let side_of = |s: &Segment| {
        if s.src == event.client.addr && s.src_port == event.client.port {
            Side::Client
        } else {
            Side::Server
        }
    };
    let start = segs.first().map_or(event.ts_ns, |s| s.ts_ns);
    // Sequence numbers relative to the lowest of each direction in view (in sequence space,
    // RFC 9293 §3.4).
    let mut base: [Option<SeqNumber>; 2] = [None, None];
    for s in segs {
        let b = &mut base[usize::from(side_of(s) == Side::Server)];
        *b = Some(match *b {
            Some(old) if old <= s.seq => old,
            _ => s.seq,
        });
    }
    let mut rungs: Vec<Rung> = segs
        .iter()
        .map(|s| {
            let from = side_of(s);
            let rel = |seq: SeqNumber, side: Side| {
                base[usize::from(side == Side::Server)].map_or(seq.0, |b| seq - b)
            };
            Rung {
                at: s.ts_ns.since(start),
                from,
                flags: s.flags,
                len: s.payload_len,
                seq: rel(s.seq, from),
                ack: (s.flags & flags::ACK != 0).then(|| rel(s.ack, from.peer())),
                window: s.window,
                mark: None,
            }
        })
        .collect();
    let released = segs.iter().position(|s| is_released(s, event));
    let gap_after = released.and_then(|r| mark(&mut rungs, r, event));
    Ladder {
        kind: event.finding.kind,
        held_side: event.finding.held_side,
        client: event.client,
        server: event.server,
        delay: event.finding.delay_ns,
        rungs,
        gap_after,
        explanation: explain(event),
        fixes: fixes(event.finding.kind, event.finding.held_side, Some(event)),
    }
}

/// The rung in `from..to` followed by the longest silence: where the wait is drawn.
fn longest_gap(rungs: &[Rung], from: usize, to: usize) -> usize {
    (from..to)
        .max_by_key(|&i| {
            rungs[i + 1]
                .at
                .as_nanos()
                .saturating_sub(rungs[i].at.as_nanos())
        })
        .unwrap_or(from)
}

/// Marks the rungs' parts in the stall whose data left at `released`; returns the rung after
/// which the wait is drawn.
fn mark(rungs: &mut [Rung], released: usize, event: &StallEvent) -> Option<usize> {
    let held = event.finding.held_side;
    let kind = event.finding.kind;
    let is_data_from = |r: &Rung, side: Side| r.from == side && r.len > 0;
    let is_pure_ack_from = |r: &Rung, side: Side| {
        r.from == side && r.len == 0 && r.flags & (flags::SYN | flags::FIN | flags::RST) == 0
    };
    let info = kind.info();
    match info.holder {
        Holder::Nagle => {
            rungs[released].mark = Some(Mark::Held);
            // Writes paced by ACKs may be released by the peer's data carrying the ACK.
            let releases = |r: &Rung| match info.release {
                Release::Acks => r.from == held.peer(),
                Release::DelayedAck | Release::Ack | Release::OwnTimer => {
                    is_pure_ack_from(r, held.peer())
                }
            };
            let ack = (0..released).rev().find(|&i| releases(&rungs[i]))?;
            rungs[ack].mark = Some(match info.release {
                Release::DelayedAck => Mark::LateAck,
                Release::Ack | Release::OwnTimer | Release::Acks => Mark::ReleasingAck,
            });
            let small = (0..ack).rev().find(|&i| {
                is_data_from(&rungs[i], held)
                    && is_sub_mss(u64::from(rungs[i].len), u64::from(event.mss))
            })?;
            rungs[small].mark = Some(Mark::SmallUnacked);
            Some(longest_gap(rungs, small, ack))
        }
        Holder::PeerWindow => {
            rungs[released].mark = Some(Mark::Held);
            let zero =
                (0..released).find(|&i| rungs[i].from == held.peer() && rungs[i].window == 0)?;
            rungs[zero].mark = Some(Mark::ZeroWindow);
            if let Some(update) = (zero + 1..released)
                .rev()
                .find(|&i| rungs[i].from == held.peer() && rungs[i].window > 0)
            {
                rungs[update].mark = Some(Mark::ReleasingAck);
                return Some(longest_gap(rungs, zero, update));
            }
            Some(longest_gap(rungs, zero, released))
        }
        Holder::Cork | Holder::Loss => {
            rungs[released].mark = Some(Mark::SentByTimer);
            released.checked_sub(1)
        }
    }
}
