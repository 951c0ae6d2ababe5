//! The flow table's index: from a flow key's hash to the slot holding the flow.

/// Open-addressing index from a key's hash to its slot, linear probing. Eight bytes an entry
/// (32 bits of hash, the slot) keep the index of a few thousand flows in the nearest caches,
/// where a map holding the 48-byte keys themselves missed on most segments; the key is
/// compared in the slot, which the segment needs next anyway.
#[derive(Debug, Default)]
pub(super) struct SlotIndex {
    /// `hash32 << 32 | slot`, or [`SlotIndex::EMPTY`]; the length is a power of two.
    entries: Vec<u64>,
    len: usize,
}

impl SlotIndex {
    const EMPTY: u64 = u64::MAX;
    const MIN_CAPACITY: usize = 64;

    /// Number of slots indexed.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn hash32(hash: u64) -> u64 {
        // Both halves: a hash whose bits sit in one half (as a `usize`-wide hash's do on a
        // 32-bit target) still spreads the keys over the slots.
        ((hash >> 32) ^ hash) & 0xffff_ffff
    }

    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    /// The slot under `hash` for which `is_key` holds, and where its entry is.
    #[inline]
    pub(super) fn find(&self, hash: u64, is_key: impl Fn(u32) -> bool) -> Option<(usize, u32)> {
        if self.entries.is_empty() {
            return None;
        }
        let tag = Self::hash32(hash);
        let mut pos = tag as usize & self.mask();
        loop {
            let entry = self.entries[pos];
            if entry == Self::EMPTY {
                return None;
            }
            let slot = entry as u32;
            if entry >> 32 == tag && is_key(slot) {
                return Some((pos, slot));
            }
            pos = (pos + 1) & self.mask();
        }
    }

    pub(super) fn insert(&mut self, hash: u64, slot: u32) {
        // At most half full: probe sequences stay short.
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        self.place(Self::hash32(hash) << 32 | u64::from(slot));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mut pos = (entry >> 32) as usize & self.mask();
        while self.entries[pos] != Self::EMPTY {
            pos = (pos + 1) & self.mask();
        }
        self.entries[pos] = entry;
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(Self::MIN_CAPACITY);
        let old = std::mem::replace(&mut self.entries, vec![Self::EMPTY; capacity]);
        for entry in old.into_iter().filter(|&e| e != Self::EMPTY) {
            self.place(entry);
        }
    }

    /// Empties the entry at `pos`, shifting back the entries after it that probed past it
    /// (deletion without tombstones, so lookups never slow down with churn).
    pub(super) fn remove_at(&mut self, mut pos: usize) {
        let mask = self.mask();
        self.entries[pos] = Self::EMPTY;
        self.len -= 1;
        let mut next = (pos + 1) & mask;
        while self.entries[next] != Self::EMPTY {
            let home = (self.entries[next] >> 32) as usize & mask;
            // The entry may fill the hole when the hole lies on its probe path from home.
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(pos) & mask) {
                self.entries[pos] = self.entries[next];
                self.entries[next] = Self::EMPTY;
                pos = next;
            }
            next = (next + 1) & mask;
        }
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hash only 32 bits wide still spreads keys over the index: their tags differ, as
    /// 64-bit hashes' do.
    #[test]
    fn hashes_of_a_32_bit_target_get_distinct_tags() {
        let tags: std::collections::HashSet<u64> = (1..=1000u64)
            .map(|i| SlotIndex::hash32((i * 0x9e37_79b9) & 0xffff_ffff))
            .collect();
        assert_eq!(tags.len(), 1000);
        assert_ne!(SlotIndex::hash32(0x0123_4567_89ab_cdef), 0);
    }

    /// The index against a map, through inserts and removals whose hashes collide on purpose
    /// (a few distinct home positions, many equal tags), across several growths.
    #[test]
    fn slot_index_finds_what_a_map_finds() {
        let mut index = SlotIndex::default();
        let mut model: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for step in 0..20_000u32 {
            let r = next();
            if r % 3 != 0 || model.is_empty() {
                // Tags from a small set, so that probes run past equal tags of other slots.
                let hash = (r % 24) << 32 | (r >> 40);
                index.insert(hash, step);
                model.insert(step, hash);
            } else {
                let victim = *model
                    .keys()
                    .nth((r >> 8) as usize % model.len())
                    .expect("not empty");
                let hash = model.remove(&victim).expect("present");
                let (pos, slot) = index.find(hash, |s| s == victim).expect("indexed");
                assert_eq!(slot, victim);
                index.remove_at(pos);
                assert!(index.find(hash, |s| s == victim).is_none());
            }
            assert_eq!(index.len, model.len());
            if step % 997 == 0 {
                for (&slot, &hash) in &model {
                    assert_eq!(index.find(hash, |s| s == slot).map(|f| f.1), Some(slot));
                }
            }
        }
        for (&slot, &hash) in &model {
            assert_eq!(index.find(hash, |s| s == slot).map(|f| f.1), Some(slot));
        }
    }
}
