//! Alike flows told once: a busy capture holds many connections from one client to one
//! server that stall the same way (`lab --capture`: 16 per row), and one description with one
//! fix list says it better than sixteen copies. Flows are alike when they join the same client
//! address to the same server address and port and show the same stall patterns (kind and
//! held side); each figure of a group is given as the range it spans, not one example's.

use rustc_hash::FxHashMap;

use crate::detect::verdict::{patterns, FlowSummary};
use crate::detect::{StallEvent, StallKind};
use crate::flow::Span;
use crate::Side;

/// One stall pattern over a group's flows.
pub(crate) struct GroupPattern<'a> {
    /// The cause.
    pub kind: StallKind,
    /// The side whose data waited.
    pub held_side: Side,
    /// The latest event of the first flow: its writes name the pattern.
    pub example: &'a StallEvent,
    /// Events over the group.
    pub count: u64,
    /// Shortest and longest wait among them.
    pub shortest: Span,
    /// Longest wait.
    pub longest: Span,
    /// For writes paced by ACKs ([`StallKind::NagleAckPaced`], one event per flow side, so
    /// `count` counts flows): the holds over the group's flows.
    pub paced: Option<PacedHolds>,
}

/// The holds of a group's flow sides paced by ACKs: what their cost is counted in (their
/// flows lose no stall's time: each hold is a round trip, not a delayed-ACK timer).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PacedHolds {
    /// Holds over the group.
    pub holds: u64,
    /// Fewest holds of one flow side.
    pub fewest: u64,
    /// Most holds of one flow side.
    pub most: u64,
    /// Time the holds covered, summed over the flows (each flow's union of its holds).
    pub held: Span,
}

impl PacedHolds {
    /// `28 holds, 5.1 ms held`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} held",
            super::counted(self.holds, "hold", "holds"),
            super::ms(self.held)
        )
    }

    /// `12 holds` when every flow side had as many, else `3 to 12 holds`.
    pub fn each(&self) -> String {
        if self.fewest == self.most {
            super::counted(self.most, "hold", "holds")
        } else {
            format!("{} to {} holds", self.fewest, self.most)
        }
    }

    /// One flow side's pacing.
    fn of(p: &crate::detect::Pacing) -> PacedHolds {
        PacedHolds {
            holds: p.holds,
            fewest: p.holds,
            most: p.holds,
            held: p.time_lost_ns,
        }
    }

    /// Both together.
    fn merge(self, other: PacedHolds) -> PacedHolds {
        PacedHolds {
            holds: self.holds + other.holds,
            fewest: self.fewest.min(other.fewest),
            most: self.most.max(other.most),
            held: self.held + other.held,
        }
    }
}

/// Flows told as one.
pub(crate) struct FlowGroup<'a> {
    /// The flows, the one that lost most first.
    pub flows: Vec<&'a FlowSummary>,
    /// Their patterns, merged.
    pub patterns: Vec<GroupPattern<'a>>,
}

impl FlowGroup<'_> {
    /// Time lost over the group.
    pub fn time_lost(&self) -> Span {
        self.flows.iter().map(|f| f.time_lost_ns).sum()
    }

    /// No flow of the group stalled: its flows' writes were only paced by ACKs.
    pub fn paced_only(&self) -> bool {
        self.flows.iter().all(|f| f.counts.stalls() == 0)
    }

    /// The holds of the group's writes paced by ACKs, over every paced pattern (a client's
    /// and a server's side add up).
    pub fn paced_holds(&self) -> Option<PacedHolds> {
        self.patterns
            .iter()
            .filter_map(|p| p.paced)
            .reduce(PacedHolds::merge)
    }
}

/// `flows` (ordered by time lost) in groups of alike flows, in the order of each group's
/// first flow.
pub(crate) fn group<'a>(
    flows: &[&'a FlowSummary],
    by_flow: &FxHashMap<u64, Vec<&'a StallEvent>>,
) -> Vec<FlowGroup<'a>> {
    type Key = (
        std::net::IpAddr,
        crate::flow::Endpoint,
        Vec<(StallKind, Side)>,
    );
    let mut groups: Vec<FlowGroup<'a>> = Vec::new();
    let mut index: FxHashMap<Key, usize> = FxHashMap::default();
    for &f in flows {
        let events = by_flow.get(&f.id).map(Vec::as_slice).unwrap_or_default();
        let found = patterns(events);
        let key: Key = (
            f.client.addr,
            f.server,
            found.iter().map(|p| (p.kind, p.held_side)).collect(),
        );
        let at = *index.entry(key).or_insert_with(|| {
            groups.push(FlowGroup {
                flows: Vec::new(),
                patterns: Vec::new(),
            });
            groups.len() - 1
        });
        let group = &mut groups[at];
        group.flows.push(f);
        for p in found {
            let waits = events
                .iter()
                .filter(|e| e.finding.kind == p.kind && e.finding.held_side == p.held_side)
                .map(|e| e.finding.delay_ns);
            let (shortest, longest) = waits.fold((None::<Span>, None::<Span>), |(lo, hi), d| {
                (
                    Some(lo.map_or(d, |l| l.min(d))),
                    Some(hi.map_or(d, |h| h.max(d))),
                )
            });
            let (shortest, longest) = (shortest.unwrap_or_default(), longest.unwrap_or_default());
            // The flow's final pacing of that side, else the event's (its pacing so far).
            let pacing = (p.kind == StallKind::NagleAckPaced)
                .then(|| f.paced()[p.held_side.index()].or(p.example.paced.as_deref().copied()))
                .flatten();
            match group
                .patterns
                .iter_mut()
                .find(|g| g.kind == p.kind && g.held_side == p.held_side)
            {
                Some(g) => {
                    g.count += p.count;
                    g.shortest = g.shortest.min(shortest);
                    g.longest = g.longest.max(longest);
                    if let (Some(held), Some(pacing)) = (g.paced, pacing.as_ref()) {
                        g.paced = Some(held.merge(PacedHolds::of(pacing)));
                    }
                }
                None => group.patterns.push(GroupPattern {
                    kind: p.kind,
                    held_side: p.held_side,
                    example: p.example,
                    count: p.count,
                    shortest,
                    longest,
                    paced: pacing.as_ref().map(PacedHolds::of),
                }),
            }
        }
    }
    groups
}
