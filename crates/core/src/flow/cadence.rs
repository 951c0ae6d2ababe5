//! Packet gaps that repeat to the microsecond: the mark of a generated or re-timed trace.
//!
//! A real path's packets leave at the stacks' and applications' own times, each gap different;
//! a trace written by a generator, or rewritten at a fixed interval, has one gap between
//! every two packets (zeek's `ftp/ftp-many-port-expected.pcap.gz`: 1.000 ms; `pop3` traces
//! re-timed to 200 ms a packet). No delayed ACK, timer or Nagle release shows in such timing.

use crate::units::Timestamp;

/// Gaps counted as a cadence only from this long (ns): back-to-back segments of a burst leave
/// a serialisation time apart (12 µs a 1500 B frame at 1 Gbit/s), evenly, on any real path.
const MIN_GAP_NS: u64 = 1_000_000;
/// Two gaps this close (ns) are the same gap.
const SAME_WITHIN_NS: u64 = 10_000;
/// Gaps needed before a flow's timing is judged synthetic.
const MIN_GAPS: u32 = 8;

/// A flow's packet gaps: how many, and how many repeated the gap before them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cadence {
    /// The latest gap, in nanoseconds.
    gap_ns: u64,
    gaps: u32,
    repeats: u32,
}

impl Cadence {
    /// Counts the gap from the flow's previous packet, at `previous`, to one at `now`.
    #[inline]
    pub fn observe(&mut self, previous: Timestamp, now: Timestamp) {
        let gap = now.since(previous).as_nanos();
        self.gaps = self.gaps.saturating_add(1);
        let repeat = gap >= MIN_GAP_NS && gap.abs_diff(self.gap_ns) <= SAME_WITHIN_NS;
        self.repeats = self.repeats.saturating_add(u32::from(repeat));
        self.gap_ns = gap;
    }

    /// At least [`MIN_GAPS`] gaps, three in four of them repeating the one before and a
    /// millisecond or more: generated timing, which proves no claim.
    #[inline]
    pub fn synthetic(&self) -> bool {
        self.gaps >= MIN_GAPS && u64::from(self.repeats) * 4 >= u64::from(self.gaps) * 3
    }
}

#[cfg(test)]
mod tests {
    use super::Cadence;
    use crate::units::Timestamp;

    fn cadence(times_us: &[u64]) -> Cadence {
        let mut c = Cadence::default();
        for w in times_us.windows(2) {
            c.observe(
                Timestamp::from_nanos(w[0] * 1000),
                Timestamp::from_nanos(w[1] * 1000),
            );
        }
        c
    }

    #[test]
    fn a_fixed_interval_is_synthetic_and_a_real_exchange_is_not() {
        let generated: Vec<u64> = (0..12).map(|i| 1_000 + i * 1_000).collect();
        assert!(cadence(&generated).synthetic());
        // Two irregular gaps first (the handshake), then a re-timed 200 ms a packet.
        let mut retimed = vec![0, 30, 1_000];
        retimed.extend((1..12).map(|i| 1_000 + i * 200_000));
        assert!(cadence(&retimed).synthetic());
        // A request/response exchange with a 40 ms delayed ACK in it.
        let real = [
            0, 120, 180, 1_150, 1_190, 41_190, 41_230, 90_000, 90_060, 91_000, 131_000,
        ];
        assert!(!cadence(&real).synthetic());
        // A burst of back-to-back segments, 12 µs apart: even, but no cadence.
        let burst: Vec<u64> = (0..40).map(|i| i * 12).collect();
        assert!(!cadence(&burst).synthetic());
        // Too few gaps to judge.
        assert!(!cadence(&generated[..6]).synthetic());
    }
}
