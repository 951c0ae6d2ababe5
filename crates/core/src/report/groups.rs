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
            match group
                .patterns
                .iter_mut()
                .find(|g| g.kind == p.kind && g.held_side == p.held_side)
            {
                Some(g) => {
                    g.count += p.count;
                    g.shortest = g.shortest.min(shortest);
                    g.longest = g.longest.max(longest);
                }
                None => group.patterns.push(GroupPattern {
                    kind: p.kind,
                    held_side: p.held_side,
                    example: p.example,
                    count: p.count,
                    shortest,
                    longest,
                }),
            }
        }
    }
    groups
}
