//! Every flow of an analysis, for the reports that count or list them all (the summary's
//! counts, `--flows`, `--json`'s `flows[]`): held in memory, or read back in order from where a
//! long run kept them ([`AllFlows`]). The reports name flows one by one only when they have
//! stalls; those are always in [`crate::detect::Analysis::flows`].

use std::io;

use crate::detect::verdict::FlowSummary;
use crate::flow::{ClientGuess, MssSource};

/// Flows handed to a report's writer at a time by [`AllFlows::for_each_chunk`]: enough for
/// the JSON writer's threads, a bounded amount of memory.
pub const CHUNK: usize = 16_384;

/// Counts over every flow, for the summary lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlowTotals {
    /// Connections (the parts of one connection counted once).
    pub flows: u64,
    /// Flows with a sequence gap (data the capture missed).
    pub with_capture_gaps: u64,
    /// Flows whose client was told by each of [`GUESSES`].
    pub guessed: [u64; GUESSES.len()],
    /// Flows with an MSS not read from a SYN.
    pub mss_assumed: u64,
}

/// The ways of telling the client other than its SYN, in the order the notes list them.
pub const GUESSES: [ClientGuess; 4] = [
    ClientGuess::SynAck,
    ClientGuess::ServicePort,
    ClientGuess::EphemeralPort,
    ClientGuess::FirstData,
];

impl FlowTotals {
    /// Counts one flow (all its parts joined).
    pub fn add(&mut self, f: &FlowSummary) {
        self.flows += 1;
        self.with_capture_gaps += u64::from(f.capture_gaps > 0);
        if let Some(i) = GUESSES.iter().position(|g| *g == f.client_guess) {
            self.guessed[i] += 1;
        }
        self.mss_assumed += u64::from(f.mss_source.iter().any(|m| *m != MssSource::Syn));
    }

    /// The counts of `flows`.
    pub fn of(flows: &[FlowSummary]) -> FlowTotals {
        let mut totals = FlowTotals::default();
        for f in flows {
            totals.add(f);
        }
        totals
    }
}

/// Every flow of an analysis, in the order of [`FlowSummary::id`], the parts of one
/// connection joined.
pub trait AllFlows {
    /// Counts over every flow.
    fn totals(&self) -> FlowTotals;

    /// Calls `each` with the flows in order, up to [`CHUNK`] at a time; stops at its first
    /// error.
    fn for_each_chunk(
        &self,
        each: &mut dyn FnMut(&[FlowSummary]) -> io::Result<()>,
    ) -> io::Result<()>;
}

/// Flows held in memory, already in order and joined ([`crate::detect::Analysis::flows`]).
impl AllFlows for Vec<FlowSummary> {
    fn totals(&self) -> FlowTotals {
        FlowTotals::of(self)
    }

    fn for_each_chunk(
        &self,
        each: &mut dyn FnMut(&[FlowSummary]) -> io::Result<()>,
    ) -> io::Result<()> {
        self.chunks(CHUNK).try_for_each(each)
    }
}
