//! The flow table: every active flow, found by its 4-tuple.

use super::connection::{is_client_syn, Flow};
use super::index::SlotIndex;
use super::key::{FlowKey, HashedKey};
use super::side::Side;
use super::time::Timestamp;
use crate::decode::Segment;

/// All active flows, keyed by normalised 4-tuple (FxHash: the key is not attacker-chosen in a
/// way that matters for an offline analysis, and the hash is cheap).
#[derive(Debug, Default)]
pub(crate) struct FlowTable {
    /// 4-tuple hash → index into `slots`.
    index: SlotIndex,
    /// The flows; `None` marks a free slot listed in `free`.
    slots: Vec<Option<(FlowKey, Flow)>>,
    free: Vec<u32>,
}

/// What [`FlowTable::lookup`] found.
pub(crate) struct Lookup<'a> {
    /// The flow the segment belongs to.
    pub(crate) flow: &'a mut Flow,
    /// Which side sent the segment.
    pub(crate) side: Side,
}

impl FlowTable {
    /// Number of active flows.
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    fn remove_slot(&mut self, slot: u32) -> Option<Flow> {
        let (key, flow) = self.slots.get_mut(slot as usize)?.take()?;
        let hash = HashedKey::of_key(key).hash;
        if let Some((pos, _)) = self.index.find(hash, |s| s == slot) {
            self.index.remove_at(pos);
        }
        self.free.push(slot);
        Some(flow)
    }

    /// Finds or creates the flow of `seg`, the `ordinal`-th segment of the input (0-based; it
    /// becomes the id of a new flow). A SYN on a 4-tuple already in use with another ISN (port
    /// reuse), or any segment of a flow that is retirable by its own times (closed more than
    /// [`super::connection::CLOSE_GRACE`] ago, idle for [`super::IDLE_TIMEOUT`]), starts a new flow and returns the
    /// old one to `retire`: the outcome depends on the flow's packets alone, not on when the
    /// table was last swept. (A callback rather than a returned `Option<Flow>`: the flow is
    /// large, and moving it out on every lookup costs a copy per packet.)
    #[inline]
    pub(crate) fn lookup(
        &mut self,
        seg: &Segment,
        ordinal: u64,
        retire: impl FnOnce(Flow),
    ) -> Lookup<'_> {
        let key = HashedKey::of(seg);
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
                let dir = flow.dir(flow.side_of(seg));
                let reused = is_client_syn(seg) && dir.seen && dir.isn != seg.seq;
                if reused || flow.retirable(seg.ts_ns) {
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
                let flow = Flow::new(ordinal, seg);
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
        let side = flow.side_of(seg);
        Lookup { flow, side }
    }

    /// Removes flows retirable at `now` and passes each to `retire`.
    pub(crate) fn evict(&mut self, now: Timestamp, mut retire: impl FnMut(Flow)) {
        for slot in 0..self.slots.len() as u32 {
            let due = matches!(&self.slots[slot as usize], Some((_, f)) if f.retirable(now));
            if due {
                if let Some(f) = self.remove_slot(slot) {
                    retire(f);
                }
            }
        }
    }

    /// Removes every flow, passing each to `retire` in order of first appearance.
    pub(crate) fn drain(&mut self, mut retire: impl FnMut(Flow)) {
        let mut all: Vec<Flow> = self.slots.drain(..).flatten().map(|(_, f)| f).collect();
        self.index.clear();
        self.free.clear();
        all.sort_by_key(|f| f.id);
        for f in all {
            retire(f);
        }
    }
}
