//! The stall detector, one rule per cause, shared by every verb.
//!
//! Streaming: feed segments in capture order with [`Detector::push`], then
//! [`Detector::finish`] returns the [`Analysis`]; a consumer that never finishes (a live
//! capture) collects events and retired flows as it goes with [`Detector::take_events`] and
//! [`Detector::take_flows`], so memory follows the active flows. The lab, `watch` and `probe` feed the same
//! detector as `analyze`, so each rule is written once. The rules follow one capture detection
//! rule (docs/ACCURACY.md, "The rules behind the counts"): a new segment is examined against the flow state
//! *before* it, in this order: closed window (`zero_window`), retransmission (`rto`),
//! Nagle hold released by an ACK (`nagle`), cork timer (`cork`) (each rule's
//! `Rule::rank`). Anything else that delays a turn is think time and never a stall.
//!
//! A kind is one file: its rule and every fact the reports spell about it (`KindInfo`),
//! listed once in the `kinds!` line below (`kind.rs`).

pub mod evidence;
pub mod kind;
pub mod verdict;

use rustc_hash::FxHashMap;

use crate::decode::Segment;
use crate::flow::{Endpoint, Flow, FlowTable, HashedKey, Side, Span, Timestamp};
use crate::tcp_rules;
use crate::units::SeqNumber;

pub use ack_paced::Pacing;
/// Holds that make a flow direction `nagle_ack_paced`.
pub use ack_paced::MIN_HOLDS as PACED_HOLDS;
/// The cork obligation only the held socket's TCP_CORK can settle.
pub use cork::NOT_A_TAIL as CORK_NOT_A_TAIL;
pub use kind::Obligation;
pub use kind::{Holder, KindInfo, Proof, Release, Rule};
pub use nagle::{hold_fixes_for, hold_kind, HoldEnd};
pub use rto::HandshakeNotTaken;
pub use syn_retry::waited_for_syn_resend;
pub use verdict::{FlowSummary, PeerStack};

/// Makes, from one line per kind (`Variant in file`, in report order), the kind's module
/// (whose `KIND` const holds its [`KindInfo`]), the [`StallKind`] variant and its place in
/// [`StallKind::ALL`]: a new kind is its file and its line here.
macro_rules! kinds {
    ($($(#[$doc:meta])* $kind:ident in $file:ident,)+) => {
        $(mod $file;)+

        /// What delayed a turn. The names are the stable JSON names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum StallKind {
            $(
                $(#[$doc])*
                #[doc = concat!("\n\nIts facts: `src/detect/", stringify!($file), ".rs`.")]
                $kind,
            )+
        }

        impl StallKind {
            /// Every kind, in report order (the order of the JSON keys).
            pub const ALL: [StallKind; [$(stringify!($kind)),+].len()] = [$(StallKind::$kind),+];

            /// The kind's facts.
            pub const fn info(self) -> &'static KindInfo {
                match self {
                    $(StallKind::$kind => &$file::KIND,)+
                }
            }
        }
    };
}

kinds! {
    /// Nagle held a small segment until the peer's delayed ACK released it.
    NagleDelayedAck in nagle,
    /// TCP_CORK / MSG_MORE data sent by the 200 ms-class probe timer.
    CorkTimer in cork,
    /// A retransmission sent by the retransmission timer (no ACK triggered it).
    Rto in rto,
    /// A connect that waited for its SYN to be resent (no SYN-ACK in between).
    SynRetry in syn_retry,
    /// The sender waited for the receiver to open a zero window.
    ZeroWindow in zero_window,
    /// Small writes each held one round trip for the ACK of the previous small segment,
    /// sustained over a flow: one event per flow and side, not a 40 ms stall.
    NagleAckPaced in ack_paced,
    /// Nagle held a small segment until an ordinary (undelayed) ACK: about one RTT, minor.
    NagleMinor in nagle_minor,
}

/// Events shorter than this are not stalls ([`tcp_rules::CLEAN_BOUND`]).
pub const MIN_STALL: Span = Span::from_duration(tcp_rules::CLEAN_BOUND);

/// How often (capture time) the flow table is swept for closed and idle flows.
const SWEEP_EVERY: Span = Span::from_millis(1_000);

/// The kinds' rules in the order they are tried ([`Rule::rank`]).
const RULES: [Option<Rule>; StallKind::ALL.len()] = kind::ranked(StallKind::ALL);

impl StallKind {
    /// Stable name, as in the JSON output.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Counts as a stall (a minor Nagle hold costs one RTT and is reported apart).
    pub fn is_stall(self) -> bool {
        self.info().is_stall
    }

    /// Reported as events of its own, printed and counted by `watch`: the stalls, and the
    /// patterns over a flow (minor Nagle holds only on request).
    pub fn is_reported(self) -> bool {
        self.is_stall() || self.info().release == Release::Acks
    }

    /// For a kind counted apart from the stalls: how a summary names a count of it, after the
    /// number.
    pub fn aside(self) -> Option<&'static str> {
        self.info().aside
    }

    /// Every kind that counts as a stall, in report order.
    pub fn stalls() -> impl Iterator<Item = StallKind> {
        StallKind::ALL.into_iter().filter(|k| k.is_stall())
    }

    /// Every kind reported as events of its own ([`StallKind::is_reported`]), in report order.
    pub fn reported() -> impl Iterator<Item = StallKind> {
        StallKind::ALL.into_iter().filter(|k| k.is_reported())
    }

    /// A resend by a timer that backs off until answered: further resends before the peer's
    /// answer are steps of one episode, one event (RFC 6298 §5.5).
    fn timer_episode(self) -> bool {
        self.info().timer_episode
    }

    /// Position in [`StallKind::ALL`]: variants are declared in report order.
    fn index(self) -> usize {
        self as usize
    }
}

/// Counts per [`StallKind`]; serialised as one key per kind, in report order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts([u64; StallKind::ALL.len()]);

impl KindCounts {
    /// Count of `kind`.
    pub fn get(&self, kind: StallKind) -> u64 {
        self.0[kind.index()]
    }

    pub fn add(&mut self, kind: StallKind) {
        self.0[kind.index()] += 1;
    }

    /// Takes back `n` counts of `kind` (holds found, later, to be part of a pacing).
    pub fn remove(&mut self, kind: StallKind, n: u64) {
        let c = &mut self.0[kind.index()];
        *c = c.saturating_sub(n);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &KindCounts) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0) {
            *mine += theirs;
        }
    }

    /// Sum over the kinds that are stalls (minor Nagle holds excluded).
    pub fn stalls(&self) -> u64 {
        StallKind::stalls().map(|k| self.get(k)).sum()
    }

    /// Sum over every kind.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `N kind, N kind` over the stall kinds found, in report order; `no stalls` when none.
    pub fn stalls_text(&self) -> String {
        self.text(StallKind::stalls())
    }

    /// [`KindCounts::stalls_text`] with the writes paced by ACKs.
    pub fn reported_text(&self) -> String {
        self.text(StallKind::reported())
    }

    fn text(&self, kinds: impl Iterator<Item = StallKind>) -> String {
        let parts: Vec<String> = kinds
            .filter(|k| self.get(*k) > 0)
            .map(|k| format!("{} {}", self.get(k), k.name()))
            .collect();
        if parts.is_empty() {
            "no stalls".to_string()
        } else {
            parts.join(", ")
        }
    }
}

impl FromIterator<StallKind> for KindCounts {
    fn from_iter<I: IntoIterator<Item = StallKind>>(kinds: I) -> KindCounts {
        let mut counts = KindCounts::default();
        for kind in kinds {
            counts.add(kind);
        }
        counts
    }
}

/// [`KindCounts`] as its bare array, for a compact encoding that reads back
/// (`#[serde(with = "counts_as_array")]`); reports use the map of names.
pub(crate) mod counts_as_array {
    use super::{KindCounts, StallKind};

    pub fn serialize<S: serde::Serializer>(c: &KindCounts, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&c.0, s)
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<KindCounts, D::Error> {
        <[u64; StallKind::ALL.len()] as serde::Deserialize>::deserialize(d).map(KindCounts)
    }
}

impl serde::Serialize for KindCounts {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(StallKind::ALL.len()))?;
        for kind in StallKind::ALL {
            map.serialize_entry(kind.name(), &self.get(kind))?;
        }
        map.end()
    }
}

/// What one rule found about a segment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Finding {
    /// The cause.
    pub kind: StallKind,
    /// The side whose data waited.
    pub held_side: Side,
    /// The side whose ACK or window released it, when one did.
    pub ack_side: Option<Side>,
    /// How long the data waited.
    pub delay_ns: Span,
    /// For delayed ACKs: the peer's delayed-ACK timeout, path RTT removed.
    pub ack_delay_ns: Option<Span>,
    /// For data released by a packet of the peer: how long after that packet the data
    /// reached the capture point (at least the round trip from there to the held side).
    pub release_ns: Option<Span>,
}

impl Finding {
    /// A stall of `kind` on `held_side`, released by the peer, if it lasted at least
    /// [`MIN_STALL`].
    pub fn released_by_peer(kind: StallKind, held_side: Side, delay_ns: Span) -> Option<Finding> {
        (delay_ns >= MIN_STALL).then_some(Finding {
            kind,
            held_side,
            ack_side: Some(held_side.peer()),
            delay_ns,
            ack_delay_ns: None,
            release_ns: None,
        })
    }

    /// A stall of `kind` on `held_side` that no packet of the peer released: the side's own
    /// timer sent the data (retransmission or cork/probe timer).
    pub fn own_timer(kind: StallKind, held_side: Side, delay_ns: Span) -> Finding {
        Finding {
            kind,
            held_side,
            ack_side: None,
            delay_ns,
            ack_delay_ns: None,
            release_ns: None,
        }
    }
}

/// One stall (or minor hold) in a flow.
#[derive(Debug, Clone)]
pub struct StallEvent {
    /// The cause and sides.
    pub finding: Finding,
    /// [`FlowSummary::id`] of the flow.
    pub flow_id: u64,
    /// Position of the released segment among all segments analysed (0-based).
    pub ordinal: u64,
    /// The flow's client.
    pub client: Endpoint,
    /// The flow's server.
    pub server: Endpoint,
    /// Capture time of the released segment.
    pub ts_ns: Timestamp,
    /// Packet number of the released segment in its capture.
    pub packet_number: u64,
    /// The peer's packet that released the data (its ACK or window update), when one did.
    pub released_by: Option<PacketAt>,
    /// Payload of the released segment.
    pub released_bytes: u32,
    /// Sizes of the held side's data segments in this turn, the released one last: the
    /// application's writes as the wire shows them.
    pub writes: Vec<u32>,
    /// The held side's MSS, for judging "sub-MSS".
    pub mss: u32,
    /// Peer stack guessed from the delayed-ACK timeout (Nagle × delayed ACK only).
    pub peer_stack: Option<PeerStack>,
    /// For a retransmission timeout: the timer's backoff steps after the first resend, each a
    /// further resend with no ACK of progress between (the episode's one event covers them).
    pub backoffs: u32,
    /// The part of `delay_ns` after the episode's first resend: from it to the last backoff
    /// step, where `ts_ns` and `packet_number` are (`delay_ns` runs from the last send before
    /// the timeout to that step).
    pub backoff_ns: Span,
    /// For [`StallKind::NagleAckPaced`]: the holds of the flow's side so far.
    pub paced: Option<Box<Pacing>>,
    /// For a retransmission timeout of the client's first data: the capture shows the server
    /// never took the handshake (its listener's accept queue full), not a loss of the path.
    pub handshake_not_taken: Option<HandshakeNotTaken>,
}

/// Detector settings.
#[derive(Debug, Clone, Default)]
pub struct DetectorConfig {
    /// Also keep [`StallKind::NagleMinor`] events in [`Analysis::events`] (they are always
    /// counted).
    pub keep_minor_events: bool,
    /// Keep every answered turn's start and latency in [`FlowSummary::turns`] (for the HTML
    /// report's histograms and timelines).
    pub keep_turns: bool,
    /// Also keep, in [`Analysis::awaiting_socket`], the claims a capture cannot settle but the
    /// held socket's own state can (a live watcher reads it; a capture file has none).
    pub keep_socket_settled: bool,
}

/// The result of a run.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Segments pushed.
    pub packets: u64,
    /// Stalls found, in capture order.
    pub events: Vec<StallEvent>,
    /// Counts per kind (minor Nagle holds included even when their events were not kept).
    pub counts: KindCounts,
    /// One summary per flow, in order of first appearance.
    pub flows: Vec<FlowSummary>,
    /// Capture time of the first and last segment.
    pub span_ns: Option<(Timestamp, Timestamp)>,
    /// Claims the capture cannot settle, set apart with the reason: not in `events` nor
    /// `counts` ([`evidence`]).
    pub undecided: evidence::Undecided,
    /// Claims in `undecided` that the held socket's state settles (see
    /// [`evidence::settled_by_socket`]), as the events they would be; kept only with
    /// [`DetectorConfig::keep_socket_settled`].
    pub awaiting_socket: Vec<StallEvent>,
}

impl Analysis {
    /// Joins the analyses of detectors that each saw a share of the flows (fed with
    /// [`Detector::push_at`]): events in input order, flows in order of first appearance, the
    /// same result as one detector fed everything.
    pub fn merge(parts: Vec<Analysis>) -> Analysis {
        let mut parts = parts.into_iter();
        // The first part's vectors are extended in place: a large capture has tens of thousands
        // of events, and moving them into new vectors cost a copy and the page faults of it.
        let mut all = parts.next().unwrap_or_default();
        for part in parts {
            all.packets += part.packets;
            all.counts.merge(&part.counts);
            all.events.extend(part.events);
            all.flows.extend(part.flows);
            all.undecided.extend(part.undecided);
            all.awaiting_socket.extend(part.awaiting_socket);
            all.span_ns = match (all.span_ns, part.span_ns) {
                (Some((f1, l1)), Some((f2, l2))) => Some((f1.min(f2), l1.max(l2))),
                (a, b) => a.or(b),
            };
        }
        // Stable sorts: one part already in order costs a single pass.
        all.events.sort_by_key(|e| e.ordinal);
        all.awaiting_socket.sort_by_key(|e| e.ordinal);
        all.flows.sort_by_key(|f| f.id);
        verdict::join_parts(&mut all.flows);
        all
    }

    /// Number of stalls (minor Nagle holds excluded).
    pub fn stall_count(&self) -> u64 {
        self.counts.stalls()
    }
}

/// Per-flow tallies the rules update (only when they find something: not per packet).
#[derive(Debug, Clone, Default)]
struct FlowTally {
    counts: KindCounts,
    lost: Span,
    worst: Span,
    /// End of the latest stall interval counted in `lost`: a flow's time lost is the union of
    /// its stalls' intervals, so an interval overlapping an earlier one adds only what lies
    /// beyond it, and the total never exceeds the flow's span.
    lost_until: Timestamp,
    /// Holds for the ACK of the previous small segment, per side.
    paced: Option<Box<ack_paced::FlowPacing>>,
    /// Per side, the latest timer episode's event (`take_events` generation, index in the
    /// events): found at once however many events of other flows came since.
    episode: [Option<(u64, usize)>; 2],
    /// Per side, the sequence range the latest timeout event resent first.
    resent: [Option<(SeqNumber, SeqNumber)>; 2],
    /// Ordinals of timeout events whose resend the peer reported received twice (D-SACK).
    spurious: Vec<u64>,
}

/// What a detector with a bound on its active flows did not follow
/// ([`Detector::limit_active_flows`]): segments that would have started a flow while the
/// table held its bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Untracked {
    /// Connections refused: their client's SYN found the table full.
    pub connections: u64,
    /// Segments not followed, those SYNs included.
    pub segments: u64,
}

/// The streaming stall detector.
#[derive(Debug, Default)]
pub struct Detector {
    config: DetectorConfig,
    table: FlowTable,
    /// Most active flows followed at once; `None`: no bound.
    max_active_flows: Option<usize>,
    untracked: Untracked,
    tallies: FxHashMap<u64, FlowTally>,
    analysis: Analysis,
    last_sweep: Timestamp,
    /// Capture time of the previous segment pushed.
    prev_ts: Timestamp,
    /// Times events were taken ([`Detector::take_events`]).
    taken: u64,
    /// The capture clock's resolution, as the timestamps show it.
    resolution: evidence::Resolution,
}

impl Detector {
    /// A detector with `config`.
    pub fn new(config: DetectorConfig) -> Detector {
        let mut detector = Detector {
            config,
            ..Detector::default()
        };
        detector.table.keep_turn_starts = detector.config.keep_turns;
        detector
    }

    /// Active flows in the table.
    pub fn active_flows(&self) -> usize {
        self.table.len()
    }

    /// Follows at most `max` flows at once: while that many are active, a segment of any
    /// other flow is counted in [`Detector::untracked`] and not followed, so memory stays
    /// bounded whatever the number of connections (a live watcher's, a host's exporter).
    pub fn limit_active_flows(&mut self, max: usize) {
        self.max_active_flows = Some(max);
    }

    /// Keeps a `parts`-th of the usual bound on what rejoins a retired flow (its tombstone: a
    /// connection silent past the idle timeout, a late retransmission after the close): for a
    /// detector helping others, whose memory must not count as much as theirs.
    pub fn keep_tombstones_share(&mut self, parts: usize) {
        self.table.keep_tombstones_share(parts);
    }

    /// Records no turn latencies: flow summaries then have no `latency_us`, and a flow's
    /// memory is the same after a million turns as after one (a live watcher, which reports
    /// stalls, not latencies).
    pub fn forget_turn_latencies(&mut self) {
        self.table.no_turn_latencies = true;
    }

    /// What the bound of [`Detector::limit_active_flows`] left unfollowed so far.
    pub fn untracked(&self) -> Untracked {
        self.untracked
    }

    /// Feeds one segment, in capture order.
    pub fn push(&mut self, seg: &Segment) {
        self.push_at(seg, self.analysis.packets);
    }

    /// Feeds one segment that is the `ordinal`-th (0-based) of the whole input, in capture
    /// order. Used when the input is split by flow over several detectors whose analyses are
    /// then joined with [`Analysis::merge`]: ordinals make flow ids and event order the same as
    /// with one detector.
    pub fn push_at(&mut self, seg: &Segment, ordinal: u64) {
        self.push_keyed(seg, HashedKey::of(seg), ordinal);
    }

    /// [`Detector::push_at`] with the segment's flow key already hashed (`HashedKey::of(seg)`).
    fn push_keyed(&mut self, seg: &Segment, key: HashedKey, ordinal: u64) {
        self.resolution.observe(seg.ts_ns);
        let a = &mut self.analysis;
        a.packets += 1;
        // From the first segment to the latest time seen: a packet stamped out of order (a
        // clock step, a damaged record) does not stretch the span back to it.
        a.span_ns = Some(match a.span_ns {
            None => (seg.ts_ns, seg.ts_ns),
            Some((first, last)) => (first, last.max(seg.ts_ns)),
        });

        if self
            .max_active_flows
            .is_some_and(|max| self.table.len() >= max && !self.table.contains(key))
        {
            self.untracked.segments += 1;
            self.untracked.connections += u64::from(crate::flow::is_client_syn(seg));
            return;
        }
        let keep_turns = self.config.keep_turns;
        let (analysis, tallies) = (&mut self.analysis, &mut self.tallies);
        let lookup = self.table.lookup(seg, key, ordinal, |old| {
            retire(analysis, tallies, old, keep_turns)
        });
        let flow = lookup.flow;
        let side = lookup.side;
        if let Some(dsack) = seg.dsack() {
            if let Some(tally) = self.tallies.get_mut(&flow.id) {
                spurious_resend(tally, &self.analysis.events, self.taken, side.peer(), dsack);
            }
        }
        let mut finding = classify(flow, side, seg);
        let mut undecided = false;
        let unsettled = finding
            .as_ref()
            .and_then(|f| evidence::unsettled(flow, side, seg, f, self.resolution.coarse()));
        // A hold that claims no stall and fails an obligation is no hold at all.
        if unsettled.is_some() && finding.is_some_and(|f| !f.kind.is_stall()) {
            finding = None;
        }
        if let Some(mut finding) = finding {
            // Nothing waited before the flow began: a delay reaching back past the flow's
            // first packet is cut there.
            finding.delay_ns = finding.delay_ns.min(seg.ts_ns.since(flow.first_seen));
            if let Some(reason) = unsettled {
                if self.config.keep_socket_settled && evidence::settled_by_socket(&reason) {
                    let mut event = event_of(flow, side, seg, finding);
                    event.ordinal = ordinal;
                    self.analysis.awaiting_socket.push(event);
                }
                self.analysis.undecided.push(evidence::Claim {
                    kind: finding.kind,
                    reason,
                    flow_id: flow.id,
                    client: flow.client,
                    server: flow.server,
                    held_side: side,
                    ts_ns: seg.ts_ns,
                    packet_number: seg.packet_number,
                    ordinal,
                    delay_ns: finding.delay_ns,
                });
                undecided = true;
            } else if finding.kind.timer_episode() && flow.dir(side).rto_open {
                let tally = self.tallies.entry(flow.id).or_default();
                let events = &mut self.analysis.events;
                backoff_step(tally, events, self.taken, flow, side, seg, &finding);
            } else {
                let event = record(&self.config, &mut self.tallies, flow, side, seg, finding);
                self.analysis.counts.add(finding.kind);
                if let Some(mut event) = event {
                    event.ordinal = ordinal;
                    if finding.kind.timer_episode() {
                        let index = self.analysis.events.len();
                        let tally = self.tallies.entry(flow.id).or_default();
                        tally.episode[side.index()] = Some((self.taken, index));
                        tally.resent[side.index()] = Some((seg.seq, seg.seq + seg.payload_len));
                    }
                    self.analysis.events.push(event);
                }
            }
        }
        let settled = finding.filter(|_| !undecided);
        let coarse = self.resolution.coarse().is_some();
        if let Some(seen) = ack_paced::hold(flow, side, seg, settled.as_ref(), coarse) {
            let sink = ack_paced::Sink {
                analysis: &mut self.analysis,
                tally: self.tallies.entry(flow.id).or_default(),
                generation: self.taken,
            };
            ack_paced::record(sink, flow, side, seg, seen, settled.is_some(), ordinal);
        }
        if finding.is_none() && rto::loss_probe(flow, side, seg) {
            flow.dirs[side.index()].loss_probes += 1;
        }
        flow.update(seg, side, ordinal);
        if let Some(f) = finding {
            let d = &mut flow.dirs[side.index()];
            d.rto_open |= f.kind.timer_episode() && !undecided;
            if f.kind == StallKind::Rto {
                // After a timeout everything sent is marked lost and resent as ACKs allow,
                // until it is all acknowledged (RFC 6582 §4 `recover`, Linux
                // `tcp_enter_loss`'s `high_seq`): so after one the capture could not prove
                // too, as the sender's state does not hang on the proof.
                d.recovery_until = Some(d.snd_nxt);
                d.timeout_before = Some(f.delay_ns);
            }
        }

        // Sweep at the earlier of this and the previous segment's time: one packet stamped far
        // ahead (a damaged timestamp) must not retire every other flow as idle.
        let now = seg.ts_ns.min(self.prev_ts);
        self.prev_ts = seg.ts_ns;
        if now.since(self.last_sweep) >= SWEEP_EVERY {
            self.sweep(now);
        }
    }

    /// Tells the detector that a live capture's clock (the kernel's realtime clock, which
    /// stamps its packets) reads `now_ns` and nothing arrived since the latest packet: flows
    /// that closed or went idle then retire on time, not at the next packet. A time before
    /// the latest packet changes nothing.
    pub fn advance_clock(&mut self, now_ns: u64) {
        let now = Timestamp::from_nanos(now_ns);
        if self.analysis.packets > 0
            && now > self.prev_ts
            && now.since(self.last_sweep) >= SWEEP_EVERY
        {
            self.sweep(now);
        }
    }

    /// Retires the flows closed or idle at `now`; called at most once per [`SWEEP_EVERY`].
    #[cold]
    fn sweep(&mut self, now: Timestamp) {
        self.last_sweep = now;
        let keep_turns = self.config.keep_turns;
        let (analysis, tallies) = (&mut self.analysis, &mut self.tallies);
        self.table
            .evict(now, |f| retire(analysis, tallies, f, keep_turns));
    }

    /// The events found since the last call (all of them, the first time), in input order,
    /// leaving none behind: a long-running consumer takes them as it goes, so memory stays
    /// bounded. Taken events are not in [`Detector::finish`]'s [`Analysis`]; its counts
    /// still include them.
    pub fn take_events(&mut self) -> Vec<StallEvent> {
        self.taken += 1;
        std::mem::take(&mut self.analysis.events)
    }

    /// The claims awaiting the held socket's word found since the last call (kept with
    /// [`DetectorConfig::keep_socket_settled`]).
    pub fn take_awaiting_socket(&mut self) -> Vec<StallEvent> {
        std::mem::take(&mut self.analysis.awaiting_socket)
    }

    /// The flows retired since the last call (closed past their grace period, idle, or
    /// replaced by a new connection on their 4-tuple), in order of first appearance. Taken
    /// flows are not in [`Detector::finish`]'s [`Analysis`]; flows still active stay in the
    /// table until they retire or the run ends.
    pub fn take_flows(&mut self) -> Vec<FlowSummary> {
        let mut flows = std::mem::take(&mut self.analysis.flows);
        flows.sort_by_key(|f| f.id);
        verdict::join_parts(&mut flows);
        flows
    }

    /// Ends the run: every flow still open is summarised.
    pub fn finish(mut self) -> Analysis {
        let keep_turns = self.config.keep_turns;
        let (analysis, tallies) = (&mut self.analysis, &mut self.tallies);
        self.table
            .drain(|f| retire(analysis, tallies, f, keep_turns));
        self.analysis.undecided.sort();
        self.analysis.flows.sort_by_key(|f| f.id);
        verdict::join_parts(&mut self.analysis.flows);
        self.analysis
    }
}

impl FlowTally {
    /// Counts the stall interval `[end - delay, end]` into the time lost, as a union with the
    /// intervals counted before (they end in capture order).
    fn add_interval(&mut self, end: Timestamp, delay: Span) {
        let start = Timestamp::from_nanos(end.as_nanos().saturating_sub(delay.as_nanos()));
        self.lost += end.since(start.max(self.lost_until));
        self.lost_until = self.lost_until.max(end);
        self.worst = self.worst.max(delay);
    }
}

/// A further timer-driven resend of a side whose timeout episode is still open (no ACK of
/// progress since): the retransmission timer backing off (RFC 6298 §5.5, `tcp_retransmit_timer`
/// doubling `icsk_rto`). It lengthens the episode's one event, while that event is still held,
/// and the flow's time lost; it is no new timeout.
fn backoff_step(
    tally: &mut FlowTally,
    events: &mut [StallEvent],
    generation: u64,
    flow: &Flow,
    side: Side,
    seg: &Segment,
    finding: &Finding,
) {
    tally.add_interval(seg.ts_ns, finding.delay_ns);
    // The episode's event, unless a consumer already took it.
    let ours = |e: &StallEvent| {
        e.flow_id == flow.id && e.finding.kind == finding.kind && e.finding.held_side == side
    };
    // Claims of other flows revoked since (`revoke_claims`) can only have moved it down.
    let index = tally.episode[side.index()]
        .filter(|&(g, _)| g == generation)
        .and_then(|(_, i)| events[..(i + 1).min(events.len())].iter().rposition(ours));
    let episode = index.and_then(|i| events.get_mut(i));
    if let Some(e) = episode {
        // A server that resent its SYN-ACK meanwhile proves, now, what the first resend could
        // not (or proves it more directly): it had not taken the handshake.
        if finding.kind == StallKind::Rto {
            if let Some(h) = rto::handshake_not_taken(flow, side, seg) {
                e.handshake_not_taken = Some(h);
            }
        }
        // The event ends where its delay ends, at the latest step: its time, packet and delay
        // agree, and it never starts before its flow.
        let first = e.finding.delay_ns - e.backoff_ns;
        let first_resend = Timestamp::from_nanos(e.ts_ns.as_nanos() - e.backoff_ns.as_nanos());
        e.backoff_ns = seg.ts_ns.since(first_resend);
        e.finding.delay_ns = (first + e.backoff_ns).min(seg.ts_ns.since(flow.first_seen));
        e.ts_ns = seg.ts_ns;
        e.packet_number = seg.packet_number;
        e.backoffs += 1;
        tally.worst = tally.worst.max(e.finding.delay_ns);
    }
}

/// Summarises a flow leaving the table, with the tallies of its stalls.
fn retire(
    analysis: &mut Analysis,
    tallies: &mut FxHashMap<u64, FlowTally>,
    flow: Flow,
    keep_turns: bool,
) {
    let mut tally = tallies.remove(&flow.id).unwrap_or_default();
    if !tally.spurious.is_empty() {
        let spurious = std::mem::take(&mut tally.spurious);
        let revoked =
            |e: &StallEvent| e.finding.kind == StallKind::Rto && spurious.contains(&e.ordinal);
        let reason = evidence::Reason::Unproven {
            name: rto::SPURIOUS.name,
            text: rto::SPURIOUS.text,
        };
        revoke_claims(analysis, &mut tally, &flow, revoked, reason);
    }
    // A generated trace's timing proves nothing, whenever its cadence showed: the claims
    // made before it did go too, and the minor holds and pacing with them.
    if flow.cadence.synthetic() && (tally.counts.total() > 0 || tally.paced.is_some()) {
        let reason = evidence::Reason::SyntheticTiming;
        revoke_claims(analysis, &mut tally, &flow, |_| true, reason);
        let minor = tally.counts.get(StallKind::NagleMinor);
        analysis.counts.remove(StallKind::NagleMinor, minor);
        tally.counts.remove(StallKind::NagleMinor, minor);
        tally.paced = None;
    }
    let paced = tally.paced.as_ref().and_then(|p| p.summary(&flow));
    let mut summary = verdict::summarise(flow, &tally.counts, tally.lost, tally.worst, keep_turns);
    summary.pacing = paced;
    analysis.flows.push(summary);
}

/// A timeout event of `held` whose first resend the peer's D-SACK `dsack` covers (RFC 2883
/// §4: the original had arrived): marked spurious, to be set apart when the flow retires.
fn spurious_resend(
    tally: &mut FlowTally,
    events: &[StallEvent],
    generation: u64,
    held: Side,
    (left, right): (SeqNumber, SeqNumber),
) {
    let Some((seq, end)) = tally.resent[held.index()] else {
        return;
    };
    if !(left <= seq && end <= right) {
        return;
    }
    let event = tally.episode[held.index()]
        .filter(|&(g, _)| g == generation)
        .and_then(|(_, i)| events.get(i))
        .filter(|e| e.finding.kind == StallKind::Rto && e.finding.held_side == held);
    if let Some(e) = event {
        if !tally.spurious.contains(&e.ordinal) {
            tally.spurious.push(e.ordinal);
        }
    }
}

/// Claims the packets disproved after they were made, while the detector still holds them (a
/// timeout resend the peer reports received twice, a flow whose timing shows generated), are
/// set apart as undecided with `reason` (minor holds, which claim no stall, are dropped), and
/// the flow's time lost is counted again without them.
#[cold]
fn revoke_claims(
    analysis: &mut Analysis,
    tally: &mut FlowTally,
    flow: &Flow,
    revoked: impl Fn(&StallEvent) -> bool,
    reason: evidence::Reason,
) {
    let revoked = |e: &StallEvent| e.flow_id == flow.id && revoked(e);
    // The flow's events come at or after its first segment (events are in input order).
    let start = analysis.events.partition_point(|e| e.ordinal < flow.id);
    let mut any = false;
    for e in analysis.events[start..].iter().filter(|e| revoked(e)) {
        any = true;
        analysis.counts.remove(e.finding.kind, 1);
        tally.counts.remove(e.finding.kind, 1);
        if !e.finding.kind.is_stall() {
            continue;
        }
        analysis.undecided.push(evidence::Claim {
            kind: e.finding.kind,
            reason,
            flow_id: flow.id,
            client: flow.client,
            server: flow.server,
            held_side: e.finding.held_side,
            ts_ns: e.ts_ns,
            packet_number: e.packet_number,
            ordinal: e.ordinal,
            delay_ns: e.finding.delay_ns,
        });
    }
    if !any {
        return;
    }
    let mut tail = analysis.events.split_off(start);
    tail.retain(|e| !revoked(e));
    analysis.events.extend(tail);
    // The union of the flow's remaining stalls (each ends at its event's time).
    let mut rest = FlowTally::default();
    let mut spans: Vec<(Timestamp, Span)> = analysis.events[start..]
        .iter()
        .filter(|e| e.flow_id == flow.id && e.finding.kind.is_stall())
        .map(|e| (e.ts_ns, e.finding.delay_ns))
        .collect();
    spans.sort_by_key(|s| s.0);
    for (end, delay) in spans {
        rest.add_interval(end, delay);
    }
    tally.lost = rest.lost.min(tally.lost);
    tally.worst = rest.worst.min(tally.worst);
}

/// Runs the rules, in order, on `seg` against the flow state before it.
fn classify(flow: &Flow, side: Side, seg: &Segment) -> Option<Finding> {
    // What the segment carries, for the rules that judge it (`Rule::judges`).
    let carries = (u8::from(seg.payload_len > 0) * Rule::DATA)
        | (u8::from(seg.has(crate::decode::flags::SYN)) * Rule::SYN);
    if carries == 0 || !flow.dir(side).seen || flow.after_close {
        return None;
    }
    RULES
        .iter()
        .flatten()
        .filter(|rule| rule.judges & carries != 0)
        .find_map(|rule| (rule.check)(flow, side, seg))
}

/// Tallies a finding in its flow and builds its event (none for minor holds unless kept).
fn record(
    config: &DetectorConfig,
    tallies: &mut FxHashMap<u64, FlowTally>,
    flow: &Flow,
    side: Side,
    seg: &Segment,
    finding: Finding,
) -> Option<StallEvent> {
    let tally = tallies.entry(flow.id).or_default();
    tally.counts.add(finding.kind);
    if finding.kind.is_stall() {
        tally.add_interval(seg.ts_ns, finding.delay_ns);
    }
    if !finding.kind.is_stall() && !config.keep_minor_events {
        return None;
    }
    Some(event_of(flow, side, seg, finding))
}

/// A packet of the input, as an event refers to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PacketAt {
    /// Position among the segments analysed (0-based), as [`StallEvent::ordinal`].
    pub ordinal: u64,
    /// Packet number in its capture (tshark's `frame.number` in that file).
    pub packet_number: u64,
}

/// The packet that released `finding`'s data: every rule that names a releasing side judged
/// the flow's packet just before the released one, which that side sent.
fn released_by(flow: &Flow, finding: &Finding) -> Option<PacketAt> {
    let side = finding.ack_side?;
    flow.prev.filter(|p| p.side == side).map(|p| PacketAt {
        ordinal: p.ordinal,
        packet_number: p.packet_number,
    })
}

/// The event of `finding` on `seg`, `side`'s segment of `flow` (its ordinal still 0).
fn event_of(flow: &Flow, side: Side, seg: &Segment, finding: Finding) -> StallEvent {
    let dir = flow.dir(side);
    // Sized once: growing it by the push below cost a reallocation per event.
    let recorded = dir.burst.recorded();
    let mut writes = Vec::with_capacity(recorded.len() + 1);
    writes.extend_from_slice(recorded);
    if seg.payload_len > 0 && finding.kind != StallKind::Rto {
        writes.push(seg.payload_len);
    }
    StallEvent {
        finding,
        flow_id: flow.id,
        ordinal: 0,
        client: flow.client,
        server: flow.server,
        ts_ns: seg.ts_ns,
        packet_number: seg.packet_number,
        released_by: released_by(flow, &finding),
        released_bytes: seg.payload_len,
        writes,
        mss: dir.mss,
        // The delay of a delayed ACK names the peer's stack.
        peer_stack: match finding.kind.info().release {
            Release::DelayedAck => {
                let peer = flow.dir(side.peer());
                let stack = |d| PeerStack::from_fingerprint(d, peer.syn_timestamps, peer.syn_ttl);
                finding.ack_delay_ns.map(stack)
            }
            Release::Ack | Release::OwnTimer | Release::Acks => None,
        },
        backoffs: 0,
        backoff_ns: Span::ZERO,
        paced: None,
        handshake_not_taken: match finding.kind {
            StallKind::Rto => rto::handshake_not_taken(flow, side, seg),
            _ => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{assert_claimed, Wire, MS};
    use super::*;

    /// Closed flows leave the table after the grace period: memory follows active flows.
    #[test]
    fn closed_flows_are_evicted() {
        let mut d = Detector::new(DetectorConfig::default());
        let mut peak = 0;
        for i in 0..200u64 {
            let mut w = Wire::handshake(30, 1448);
            w.data(true, 100, 20)
                .data(false, 200, 20)
                .fin(true, 300)
                .fin(false, 400);
            w.ack(true, 500);
            for seg in &mut w.segments {
                seg.ts_ns += MS * (i * 100); // one connection every 100 ms
                seg.src_port = seg.src_port.wrapping_add(i as u16);
                seg.dst_port = seg.dst_port.wrapping_add(i as u16);
                d.push(seg);
            }
            peak = peak.max(d.active_flows());
        }
        assert!(
            peak <= 40,
            "{peak} flows kept: 2 s grace at 10 connections/s is ~30"
        );
        let a = d.finish();
        assert_eq!(a.flows.len(), 200);
        assert!(a.flows.windows(2).all(|w| w[0].id < w[1].id));
        assert_eq!(a.flows[0].requests, 1);
    }

    /// Connection `i` of a keep-alive series, one every 100 ms on its own ports: a request, a
    /// response split in two writes whose second waits for the client's delayed ACK, then a
    /// close from both sides.
    fn stalled_connection(i: u64) -> Vec<Segment> {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127)
            .fin(true, 50_000)
            .fin(false, 50_100);
        w.ack(true, 50_200);
        for seg in &mut w.segments {
            seg.ts_ns += MS * (i * 100);
            seg.src_port = seg.src_port.wrapping_add(i as u16);
            seg.dst_port = seg.dst_port.wrapping_add(i as u16);
        }
        w.segments
    }

    /// A detector that forgets turn latencies still counts the turns, and keeps none of
    /// their latencies however many there are.
    #[test]
    fn forgotten_turn_latencies_do_not_grow_with_the_turns() {
        let mut w = Wire::handshake(30, 1448);
        for turn in 0..1_000u64 {
            w.data(true, 1_000 + turn * 1_000, 80)
                .data(false, 1_100 + turn * 1_000, 148);
        }
        let run = |forget: bool| {
            let mut d = Detector::new(DetectorConfig::default());
            if forget {
                d.forget_turn_latencies();
            }
            w.segments.iter().for_each(|seg| d.push(seg));
            d.finish().flows.remove(0)
        };
        let (kept, forgotten) = (run(false), run(true));
        assert_eq!((kept.requests, forgotten.requests), (1_000, 1_000));
        assert!(kept.latency_us.is_some());
        assert_eq!(forgotten.latency_us, None);
    }

    /// A long-running consumer takes events and retired flows as it goes: what it took and
    /// what `finish` leaves are, together, exactly what a one-shot run finds, and no take
    /// returns anything twice.
    #[test]
    fn take_events_and_flows_while_running() {
        let segments: Vec<Segment> = (0..300).flat_map(stalled_connection).collect();
        let mut once = Detector::new(DetectorConfig::default());
        for seg in &segments {
            once.push(seg);
        }
        let once = once.finish();
        assert_eq!(once.counts.get(StallKind::NagleDelayedAck), 300);

        let mut d = Detector::new(DetectorConfig::default());
        let (mut events, mut flows) = (Vec::new(), Vec::new());
        let mut largest_take = 0;
        for (i, seg) in segments.iter().enumerate() {
            d.push(seg);
            if i % 50 == 49 {
                let taken = d.take_flows();
                largest_take = largest_take.max(taken.len());
                flows.extend(taken);
                events.extend(d.take_events());
                assert!(d.take_events().is_empty() && d.take_flows().is_empty());
            }
        }
        assert!(
            !flows.is_empty() && largest_take <= 40,
            "retired flows are handed over as they retire ({largest_take} at once)"
        );
        let rest = d.finish();
        assert_eq!(rest.counts, once.counts, "counts cover taken events too");
        events.extend(rest.events);
        flows.extend(rest.flows);
        let ordinals = |e: &[StallEvent]| e.iter().map(|e| e.ordinal).collect::<Vec<_>>();
        assert_eq!(ordinals(&events), ordinals(&once.events));
        let ids = |f: &[FlowSummary]| f.iter().map(|f| f.id).collect::<Vec<_>>();
        assert_eq!(ids(&flows), ids(&once.flows));
    }

    /// A capture that starts mid-flow: the side with the ephemeral port is the client.
    #[test]
    fn mid_flow_client_guess() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127);
        w.segments.drain(..3); // no handshake
        let a = w.analyse();
        assert_eq!(
            a.flows[0].client_guess,
            crate::flow::ClientGuess::ServicePort
        );
        assert_eq!(a.flows[0].client.port, 40000);
        assert_claimed(&a, StallKind::NagleDelayedAck, Side::Server);
    }

    /// Mid-flow with both ports ephemeral and the server's the larger: the side that sends the
    /// first data is the client, even when the capture starts with the server's pure ACK.
    #[test]
    fn mid_flow_both_ephemeral_first_data_decides() {
        let mut w = Wire::handshake(30, 1448);
        w.ack(false, 900)
            .data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127);
        w.segments.drain(..3);
        for seg in &mut w.segments {
            for port in [&mut seg.src_port, &mut seg.dst_port] {
                *port = if *port == 80 { 50_000 } else { 40_000 };
            }
        }
        let a = w.analyse();
        let f = &a.flows[0];
        assert_eq!(f.client_guess, crate::flow::ClientGuess::FirstData);
        assert_eq!((f.client.port, f.server.port), (40_000, 50_000));
        assert_claimed(&a, StallKind::NagleDelayedAck, Side::Server);
        assert_eq!(a.undecided.claims()[0].server.port, 50_000);
    }

    /// Without a SYN the MSS is assumed (Ethernet's), not taken from the largest payload: a
    /// 1400 B first write stays sub-MSS and its Nagle hold is found.
    #[test]
    fn mid_flow_mss_not_raised_to_largest_write() {
        let mut w = Wire::handshake(30, 1460);
        w.data(true, 1_000, 7)
            .data(false, 1_100, 1400)
            .ack(true, 41_100)
            .data(false, 41_130, 23);
        w.segments.drain(..3);
        let a = w.analyse();
        assert_claimed(&a, StallKind::NagleDelayedAck, Side::Server);
        assert_eq!(a.flows[0].mss_source[1], crate::flow::MssSource::Assumed);
        // Only the SYN-ACK: the server's own announced MSS stands in for the client's.
        let mut w = Wire::handshake(30, 1460);
        w.data(true, 1_000, 7)
            .data(false, 1_100, 1400)
            .ack(true, 41_100)
            .data(false, 41_130, 23);
        w.segments.remove(0);
        let a = w.analyse();
        assert_claimed(&a, StallKind::NagleDelayedAck, Side::Server);
        assert_eq!(a.flows[0].mss, [1460, 1460]);
        assert_eq!(a.flows[0].mss_source[1], crate::flow::MssSource::OwnSyn);
    }

    /// Segments of another connection every second, `from_s` to `to_s`: they keep the
    /// detector sweeping its table meanwhile.
    fn other_traffic(from_s: u64, to_s: u64) -> Vec<Segment> {
        let mut w = Wire::handshake(30, 1448);
        for s in from_s..to_s {
            w.data(true, s * 1_000_000, 10);
        }
        w.segments.drain(..3);
        for seg in &mut w.segments {
            seg.src_port += 7;
            seg.dst_port += 7;
        }
        w.segments
    }

    /// A connection silent for longer than the idle timeout is retired meanwhile (memory stays
    /// bounded), and rejoins its flow when it speaks again: one connection, one flow.
    #[test]
    fn idle_connection_rejoins_its_flow() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80).data(false, 1_100, 148);
        w.data(true, 400_001_000, 80).data(false, 400_001_100, 148);
        let mut d = Detector::new(DetectorConfig::default());
        let other = other_traffic(1, 399);
        for seg in w.segments[..5].iter().chain(&other).chain(&w.segments[5..]) {
            d.push(seg);
        }
        assert_eq!(d.active_flows(), 2);
        let a = d.finish();
        let ours: Vec<_> = a.flows.iter().filter(|f| f.client.port == 40000).collect();
        assert_eq!(ours.len(), 1, "one flow for the connection");
        assert_eq!(ours[0].packets, 7);
        assert_eq!(ours[0].requests, 2);
        assert!(!ours[0].continued);
        // Taken as it goes (watch): the part after the silence comes later, marked as the
        // continuation of a connection already handed over.
        let mut d = Detector::new(DetectorConfig::default());
        let mut taken = Vec::new();
        for seg in w.segments[..5].iter().chain(&other).chain(&w.segments[5..]) {
            d.push(seg);
            taken.extend(d.take_flows());
        }
        taken.extend(d.finish().flows);
        let ours: Vec<_> = taken.iter().filter(|f| f.client.port == 40000).collect();
        assert_eq!(ours.len(), 2);
        assert_eq!(ours[0].id, ours[1].id);
        assert_eq!((ours[0].continued, ours[1].continued), (false, true));
    }

    /// A FIN/ACK retransmitted after the close, once the flow has retired, neither starts a
    /// flow of its own nor swaps client and server.
    #[test]
    fn late_retransmission_after_close_is_the_same_flow() {
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .fin(true, 2_000)
            .fin(false, 2_100);
        w.ack(true, 2_200);
        let mut late = w.segments[5]; // the server's FIN, again
        late.ts_ns += MS * 10_000;
        let other = other_traffic(1, 9);
        let mut d = Detector::new(DetectorConfig::default());
        for seg in w
            .segments
            .iter()
            .chain(&other)
            .chain(std::iter::once(&late))
        {
            d.push(seg);
        }
        let a = d.finish();
        let ours: Vec<_> = a.flows.iter().filter(|f| f.client.port == 40000).collect();
        assert_eq!(ours.len(), 1, "one flow for the connection");
        assert_eq!(ours[0].client.port, 40000);
        assert_eq!(ours[0].packets, 9);
        assert_eq!(a.stall_count(), 0);
        // A new SYN on the tuple is a new connection.
        let mut again = Wire::handshake_from(10, 30, 1448, (5_000, 70_000));
        for seg in &mut again.segments {
            seg.ts_ns += MS * 20_000;
        }
        let mut d = Detector::new(DetectorConfig::default());
        for seg in w.segments.iter().chain(&other).chain(&again.segments) {
            d.push(seg);
        }
        assert_eq!(d.finish().flows.len(), 3);
    }

    /// A lone packet stamped an hour ahead does not retire the other flows as idle.
    #[test]
    fn one_packet_far_ahead_does_not_split_flows() {
        let mut d = Detector::new(DetectorConfig::default());
        let mut a = Wire::handshake(30, 1448);
        a.data(true, 1_000, 10).data(false, 2_000, 10);
        let mut b = Wire::handshake(30, 1448);
        b.data(true, 1_500, 10).data(false, 2_500, 10);
        for seg in &mut b.segments {
            seg.src_port += 1;
            seg.dst_port += 1;
        }
        b.segments[3].ts_ns += MS * 3_600_000; // b's first request: one hour ahead
        for seg in a.segments.iter().chain(&b.segments).chain(&a.segments[3..]) {
            d.push(seg);
        }
        // Flow b itself is split at its far packet (its own times say it idled an hour; the
        // reader warns), but flow a, silent meanwhile, is not.
        let a = d.finish();
        assert_eq!(a.flows.iter().filter(|f| f.client.port == 40000).count(), 1);
    }
}

#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing {
    //! The scripted conversations of [`crate::flow::testing`], run through a detector.
    pub use crate::flow::testing::{Wire, MS};

    impl Wire {
        /// Runs the detector over the segments.
        pub fn analyse(&self) -> super::Analysis {
            let mut d = super::Detector::new(super::DetectorConfig {
                keep_minor_events: true,
                keep_turns: false,
                keep_socket_settled: false,
            });
            for s in &self.segments {
                d.push(s);
            }
            d.finish()
        }
    }

    /// Asserts the rules found exactly one claim, of `kind`, holding `side`: a stall, or one set
    /// apart as undecided (a capture without the handshake times no ACK delay).
    pub fn assert_claimed(a: &super::Analysis, kind: super::StallKind, side: crate::flow::Side) {
        let events = a.events.iter().filter(|e| e.finding.kind == kind);
        let events: Vec<_> = events.map(|e| e.finding.held_side).collect();
        let claims = a.undecided.claims().iter().filter(|c| c.kind == kind);
        let claims: Vec<_> = claims.map(|c| c.held_side).collect();
        assert_eq!([events, claims].concat(), vec![side], "{:?}", a.undecided);
    }

    /// Asserts the analysis holds exactly one stall, of `kind`, holding `side`.
    pub fn assert_single(a: &super::Analysis, kind: super::StallKind, side: crate::flow::Side) {
        assert_eq!(a.stall_count(), 1, "{:?}", a.counts);
        assert_eq!(a.counts.get(kind), 1, "{:?}", a.counts);
        let stall = a.events.iter().find(|e| e.finding.kind.is_stall());
        assert_eq!(stall.map(|e| e.finding.held_side), Some(side));
    }
}
