//! The flow table: every active flow, found by its 4-tuple.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use super::connection::{is_client_syn, Flow, FlowState};
use super::endpoint::Endpoint;
use super::guess::ClientGuess;
use super::index::SlotIndex;
use super::key::{FlowKey, HashedKey};
use super::side::Side;
use crate::decode::Segment;
use crate::units::{Span, Timestamp};

/// All active flows, keyed by normalised 4-tuple (an unseeded folded multiply: the key is not
/// attacker-chosen in a way that matters for an offline analysis, and the hash is cheap).
#[derive(Debug, Default)]
pub struct FlowTable {
    /// 4-tuple hash → index into `slots`.
    index: SlotIndex,
    /// The flows; `None` marks a free slot listed in `free`.
    slots: Vec<Option<(FlowKey, Flow)>>,
    free: Vec<u32>,
    /// New flows keep each turn's start time (for the HTML report's timelines).
    pub keep_turn_starts: bool,
    /// New flows record no turn latencies ([`super::turns::Turns::no_latencies`]).
    pub no_turn_latencies: bool,
    /// What is kept of each retired flow to rejoin it: a connection silent past the idle
    /// timeout, or one whose late retransmissions follow its close, stays one flow.
    tombstones: FxHashMap<FlowKey, Tombstone>,
    /// Tombstones in order of retirement, for their expiry.
    tombstone_order: VecDeque<(FlowKey, Timestamp)>,
    /// At most this many tombstones; `None`: [`TOMBSTONES_MAX`].
    tombstones_max: Option<usize>,
}

/// What rejoins a retired flow: its id and which end is the client (a FIN/ACK retransmitted
/// after the close must not make a flow of its own with the roles swapped).
#[derive(Debug, Clone, Copy)]
struct Tombstone {
    id: u64,
    client: Endpoint,
    client_guess: ClientGuess,
    closed: bool,
    /// The flow's last packet: the tombstone's time runs from it.
    at: Timestamp,
}

/// Tombstones kept at most: a long `watch` keeps this much of its retired connections, not
/// the connections themselves.
const TOMBSTONES_MAX: usize = 65_536;
/// How long a closed connection's tombstone is kept: late retransmissions and ACKs follow the
/// close within the peer's TIME-WAIT (`TCP_TIMEWAIT_LEN`, 60 s), twice for margin.
const CLOSED_TOMBSTONE_TTL: Span = Span::from_millis(120_000);
/// How long an idle connection's tombstone is kept: the default keepalive interval
/// (`tcp_keepalive_time`, 2 h) is the longest silence a live connection commonly shows.
const IDLE_TOMBSTONE_TTL: Span = Span::from_millis(2 * 3_600_000);

/// What [`FlowTable::lookup`] found.
pub struct Lookup<'a> {
    /// The flow the segment belongs to.
    pub flow: &'a mut Flow,
    /// Which side sent the segment.
    pub side: Side,
}

impl FlowTable {
    /// Number of active flows.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// No flow is active.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// An active flow has the 4-tuple `key`.
    pub fn contains(&self, key: HashedKey) -> bool {
        let slots = &self.slots;
        self.index
            .find(
                key.hash,
                |s| matches!(slots.get(s as usize), Some(Some((k, _))) if *k == key.key),
            )
            .is_some()
    }

    fn remove_slot(&mut self, slot: u32) -> Option<Flow> {
        let (key, flow) = self.slots.get_mut(slot as usize)?.take()?;
        let hash = key.table_hash();
        if let Some((pos, _)) = self.index.find(hash, |s| s == slot) {
            self.index.remove_at(pos);
        }
        self.free.push(slot);
        Some(flow)
    }

    /// Finds or creates the flow of `seg` (whose key and hash are `key`), the `ordinal`-th segment of the input (0-based; it
    /// becomes the id of a new flow). A SYN on a 4-tuple already in use with another ISN (port
    /// reuse), or any segment of a flow that is retirable by its own times (closed more than
    /// [`super::connection::CLOSE_GRACE`] ago, idle for [`super::IDLE_TIMEOUT`]), starts a new flow and returns the
    /// old one to `retire`: the outcome depends on the flow's packets alone, not on when the
    /// table was last swept. (A callback rather than a returned `Option<Flow>`: the flow is
    /// large, and moving it out on every lookup costs a copy per packet.)
    #[inline]
    pub fn lookup(
        &mut self,
        seg: &Segment,
        key: HashedKey,
        ordinal: u64,
        retire: impl FnOnce(Flow),
    ) -> Lookup<'_> {
        let slots = &self.slots;
        let mut slot = self
            .index
            .find(
                key.hash,
                |s| matches!(slots.get(s as usize), Some(Some((k, _))) if *k == key.key),
            )
            .map(|(_, slot)| slot);
        if let Some(old) = slot {
            if let Some(Some((_, flow))) = self.slots.get(old as usize) {
                // Only a new SYN starts a new connection on the 4-tuple: any other segment,
                // however long after, belongs to the connection (tshark's `tcp.stream`).
                let reused = is_client_syn(seg) && {
                    let dir = flow.dir(flow.side_of_source(key.source_first));
                    (dir.seen && dir.isn != seg.seq) || flow.retirable(seg.ts_ns)
                };
                if reused {
                    if let Some(old_flow) = self.remove_slot(old) {
                        retire(old_flow);
                    }
                    slot = None;
                }
            }
        }
        let slot = match slot {
            Some(slot) => slot,
            None => {
                let mut flow = self
                    .rejoin(&key.key, seg)
                    .unwrap_or_else(|| Flow::new(ordinal, seg));
                flow.turns.keep_starts = self.keep_turn_starts;
                flow.turns.no_latencies = self.no_turn_latencies;
                let slot = match self.free.pop() {
                    Some(free) => free,
                    None => {
                        self.slots.push(None);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.slots[slot as usize] = Some((key.key, flow));
                self.index.insert(key.hash, slot);
                slot
            }
        };
        let (_, flow) = self.slots[slot as usize]
            .as_mut()
            .unwrap_or_else(|| unreachable!("the index only names occupied slots"));
        if flow.guess_open {
            flow.settle_guess(seg);
        }
        let side = flow.side_of_source(key.source_first);
        Lookup { flow, side }
    }

    /// The continuation of a retired flow that `seg` (not a new connection's SYN) rejoins:
    /// the same id and roles, and, after a close, no rule runs on it
    /// ([`Flow::after_close`]).
    #[cold]
    fn rejoin(&mut self, key: &FlowKey, seg: &Segment) -> Option<Flow> {
        if self.tombstones.is_empty() {
            return None;
        }
        let tomb = self.tombstones.remove(key)?;
        let ttl = if tomb.closed {
            CLOSED_TOMBSTONE_TTL
        } else {
            IDLE_TOMBSTONE_TTL
        };
        if is_client_syn(seg) || seg.ts_ns.since(tomb.at) > ttl {
            return None;
        }
        let mut flow = Flow::new(tomb.id, seg);
        if flow.client != tomb.client {
            flow.swap_roles();
        }
        flow.client_guess = tomb.client_guess;
        flow.guess_open = false;
        flow.continued = true;
        if tomb.closed {
            flow.state = FlowState::Closed { since: seg.ts_ns };
            flow.after_close = true;
        }
        Some(flow)
    }

    /// Keeps at most a `parts`-th of the tombstones a table keeps (at least one): for a table
    /// beside others in one run, whose memory the run's bound counts once.
    pub fn keep_tombstones_share(&mut self, parts: usize) {
        self.tombstones_max = Some((TOMBSTONES_MAX / parts.max(1)).max(1));
    }

    /// Keeps what rejoins `flow` later, and forgets tombstones past their time or beyond the
    /// table's bound ([`TOMBSTONES_MAX`], or its share of it).
    fn bury(&mut self, key: FlowKey, flow: &Flow, now: Timestamp) {
        let closed = matches!(flow.state, FlowState::Closed { .. });
        let at = flow.last_seen();
        self.tombstones.insert(
            key,
            Tombstone {
                id: flow.id,
                client: flow.client,
                client_guess: flow.client_guess,
                closed,
                at,
            },
        );
        self.tombstone_order.push_back((key, at));
        while let Some(&(old_key, at)) = self.tombstone_order.front() {
            let full = self.tombstone_order.len() > self.tombstones_max.unwrap_or(TOMBSTONES_MAX);
            if !full && now.since(at) <= IDLE_TOMBSTONE_TTL {
                break;
            }
            self.tombstone_order.pop_front();
            // Only the entry this record was made for: the key may have been buried again.
            if self.tombstones.get(&old_key).is_some_and(|t| t.at == at) {
                self.tombstones.remove(&old_key);
            }
        }
    }

    /// Removes flows retirable at `now` and passes each to `retire`.
    pub fn evict(&mut self, now: Timestamp, mut retire: impl FnMut(Flow)) {
        for slot in 0..self.slots.len() as u32 {
            let due = matches!(&self.slots[slot as usize], Some((_, f)) if f.retirable(now));
            if due {
                let key = self.slots[slot as usize].as_ref().map(|(k, _)| *k);
                if let Some(f) = self.remove_slot(slot) {
                    if let Some(key) = key {
                        self.bury(key, &f, now);
                    }
                    retire(f);
                }
            }
        }
    }

    /// Removes every flow, passing each to `retire` in order of first appearance.
    pub fn drain(&mut self, mut retire: impl FnMut(Flow)) {
        let mut all: Vec<Flow> = self.slots.drain(..).flatten().map(|(_, f)| f).collect();
        self.index.clear();
        self.free.clear();
        self.tombstones.clear();
        self.tombstone_order.clear();
        all.sort_by_key(|f| f.id);
        for f in all {
            retire(f);
        }
    }
}
