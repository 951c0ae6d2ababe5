//! Request/response turns: what each side sent in the current turn ([`Burst`]) and how long
//! the turns took ([`Turns`]).

use super::side::Side;
use crate::units::Timestamp;

/// Turn latencies reserved at a flow's first answered turn.
const LATENCIES_RESERVED: usize = 32;
/// Longest list of turn latencies kept per flow: enough for a p99, bounded memory.
const MAX_TURNS_KEPT: usize = 65_536;

/// Sizes of the data segments one side sent in the current turn (since the peer last sent
/// data): the application's writes as far as the wire shows them. Fixed size: no allocation
/// per packet.
#[derive(Debug, Clone, Copy, Default)]
pub struct Burst {
    /// Payload sizes, first ones kept when more than fit.
    sizes: [u32; 8],
    /// Number of data segments in the turn (may exceed `sizes.len()`).
    pub count: u32,
}

impl Burst {
    /// Adds a data segment of `len` bytes.
    pub fn push(&mut self, len: u32) {
        if let Some(slot) = self.sizes.get_mut(self.count as usize) {
            *slot = len;
        }
        self.count = self.count.saturating_add(1);
    }

    /// The recorded sizes.
    pub fn recorded(&self) -> &[u32] {
        &self.sizes[..(self.count as usize).min(self.sizes.len())]
    }
}

/// Request/response turns: a request starts when the client sends new data after the server
/// answered (or first); its latency runs to the last server data before the next request.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    /// Requests seen.
    pub requests: u64,
    /// Latency of each finished turn that got an answer, microseconds (first
    /// [`MAX_TURNS_KEPT`]): four bytes a turn, as a flow may keep tens of thousands.
    pub latencies_us: Vec<u32>,
    /// Capture time of each turn of `latencies_us`, the same index, when `keep_starts`.
    pub starts: Vec<Timestamp>,
    /// Record `starts` (only a report that draws timelines needs them).
    pub keep_starts: bool,
    /// Record no latencies (a live watcher reports none): the flow's memory then does not
    /// grow with its turns.
    pub no_latencies: bool,
    /// Capture time of the current request's first byte.
    start: Timestamp,
    /// Capture time of the server's last data in the current turn, if it answered yet.
    answered: Option<Timestamp>,
}

impl Turns {
    /// New data from `side` at `at`.
    pub fn data(&mut self, side: Side, at: Timestamp) {
        match side {
            Side::Client => self.client_data(at),
            Side::Server => self.server_data(at),
        }
    }

    fn client_data(&mut self, at: Timestamp) {
        if self.requests > 0 && self.answered.is_none() {
            return; // still the same request
        }
        self.finish();
        self.requests += 1;
        self.start = at;
    }

    fn server_data(&mut self, at: Timestamp) {
        if self.requests > 0 {
            self.answered = Some(at);
        }
    }

    /// Closes the current turn, recording its latency when it was answered.
    pub fn finish(&mut self) {
        if let Some(end) = self.answered.take() {
            if !self.no_latencies && self.latencies_us.len() < MAX_TURNS_KEPT {
                // Room for a keep-alive connection's turns at once, instead of growing from 4
                // through five reallocations.
                if self.latencies_us.is_empty() {
                    self.latencies_us.reserve(LATENCIES_RESERVED);
                }
                let us = end.since(self.start).as_micros();
                self.latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
                if self.keep_starts {
                    self.starts.push(self.start);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::Span;

    /// Several client segments before the answer are one request; the turn runs to the
    /// server's last data before the next request.
    #[test]
    fn a_turn_runs_from_request_to_last_answer() {
        let t = |ms: u64| Timestamp::from_nanos(0) + Span::from_millis(ms);
        let mut turns = Turns::default();
        turns.data(Side::Server, t(1)); // before any request: not an answer
        turns.data(Side::Client, t(10));
        turns.data(Side::Client, t(12));
        turns.data(Side::Server, t(15));
        turns.data(Side::Server, t(55));
        turns.data(Side::Client, t(100));
        turns.finish();
        assert_eq!(turns.requests, 2);
        assert_eq!(turns.latencies_us, vec![45_000]);
    }

    #[test]
    fn burst_keeps_the_first_sizes_and_counts_all() {
        let mut b = Burst::default();
        for len in 1..=10 {
            b.push(len);
        }
        assert_eq!(b.count, 10);
        assert_eq!(b.recorded(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    }
}
