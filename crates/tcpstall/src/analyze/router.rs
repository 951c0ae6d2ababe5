//! From the reading thread to the detectors: each segment, numbered in input order, goes to
//! the detector that owns its flow. The owners are the worker threads and, for the flows that
//! start while the workers fall behind, a detector on the reading thread itself: where the
//! detectors are the busier (a capture of headers only leaves little to copy in and decode),
//! the reader's spare time takes a share, with no hand-over for it. The analyses merge into
//! the same result however the flows were shared out (`Analysis::merge`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

#[cfg(test)]
use super::retired::MergedFlows;
use super::retired::RetiredFlows;
use crate::capture::SegmentSink;
use crate::decode::{Outer, OuterByFlow, Segment};
use crate::detect::{Analysis, Detector};
use crate::flow::owner_hash;

/// Segments handed to a detector thread at a time.
pub(super) const BATCH: usize = 4096;

/// Buckets of flow hashes (the hash's top bits), each owned by one detector from its first
/// segment on: both directions of a flow, and every later flow of its 4-tuple (which may
/// rejoin it), meet the same detector's state.
const OWNER_BUCKETS: usize = 1 << 16;
/// A bucket whose first segment is yet to come.
const UNOWNED: u8 = u8::MAX;
/// A bucket the reading thread's own detector owns.
const READER: u8 = u8::MAX - 1;
/// Batches queued for each detector thread before the reader waits.
pub(super) const BATCHES_IN_FLIGHT: usize = 8;
/// Batches a worker may have in hand (queued or being worked on) before new flows go to the
/// reading thread's detector instead: a queue this close to full is a worker the reader is
/// about to wait for. A lower mark hands flows over at a worker's passing lag and slows the
/// reader where it is the busier thread (the payload copied in from the file).
const BEHIND: u64 = BATCHES_IN_FLIGHT as u64 - 2;

/// The reading thread's detector keeps this share of a worker's bound on tombstones (what
/// rejoins a retired flow): under heavy churn, a detector's largest memory, which the run's
/// bound counts for one detector. A quarter keeps some 16,000 retired flows rejoinable.
const READER_TOMBSTONES: usize = 4;

/// The bucket of an [`owner_hash`]: its top bits, the well mixed ones of a multiplicative
/// hash (its low bits are zero for a flow whose two ends share an address, as on loopback).
fn bucket_of(hash: u64) -> usize {
    (hash >> 48) as usize % OWNER_BUCKETS
}

/// Segments on their way to a detector thread, each with its position in the input. The
/// items stay allocated and initialised from one use to the next: the reader decodes straight
/// into `items[len]`.
pub(super) struct Batch {
    items: Vec<(u64, Segment)>,
    pub(super) len: usize,
}

impl Batch {
    fn new(capacity: usize) -> Batch {
        Batch {
            items: vec![(0, Segment::UNSET); capacity],
            len: 0,
        }
    }

    /// The segments in the batch, each with its position in the input.
    pub(super) fn filled(&self) -> &[(u64, Segment)] {
        &self.items[..self.len]
    }

    fn is_full(&self) -> bool {
        self.len == self.items.len()
    }
}

/// The detector on the reading thread and the flows it retired.
pub(super) struct ReaderShare {
    detector: Detector,
    retired: RetiredFlows,
    /// Segments pushed since its retired flows were last taken.
    since_taken: usize,
}

impl ReaderShare {
    /// A share whose detector is `detector`, keeping `retired`'s flows. The detector keeps a
    /// quarter of the tombstones a worker's keeps ([`READER_TOMBSTONES`]).
    pub(super) fn new(mut detector: Detector, retired: RetiredFlows) -> ReaderShare {
        detector.keep_tombstones_share(READER_TOMBSTONES);
        ReaderShare {
            detector,
            retired,
            since_taken: 0,
        }
    }

    fn push(&mut self, seg: &Segment, ordinal: u64) {
        self.detector.push_at(seg, ordinal);
        self.since_taken += 1;
        // As a worker does after each batch: memory follows the open flows.
        if self.since_taken == BATCH {
            self.since_taken = 0;
            self.retired.push(self.detector.take_flows());
        }
    }

    fn finish(self) -> (Analysis, RetiredFlows) {
        self.retired.close(self.detector)
    }
}

/// Sends each segment, numbered in input order, to the detector that owns its flow.
pub(super) struct Router<'a> {
    batches: Vec<Batch>,
    queues: Vec<mpsc::SyncSender<Batch>>,
    recycled: mpsc::Receiver<Batch>,
    /// Batches sent to each worker, and those each worker has finished.
    sent: Vec<u64>,
    finished: &'a [AtomicU64],
    /// The owner of each bucket of flow hashes: a worker's index, [`READER`] or [`UNOWNED`].
    owners: Box<[u8]>,
    reader: Option<ReaderShare>,
    /// Segments a batch holds, and [`BEHIND`] (other marks in tests).
    batch_len: usize,
    behind: u64,
    pub(super) ordinal: u64,
    /// Where segments are decoded when several workers share them: the flow, hence the
    /// batch, is known only once decoded.
    staging: Segment,
    /// The outer tunnel of each tunnelled connection.
    pub(super) outers: OuterByFlow,
}

impl<'a> Router<'a> {
    /// A router to the workers fed by `queues` (each counting the batches it finished in
    /// `finished`, and handing them back through `recycled`), and to `reader`, the reading
    /// thread's detector, when there is one.
    pub(super) fn new(
        queues: Vec<mpsc::SyncSender<Batch>>,
        recycled: mpsc::Receiver<Batch>,
        finished: &'a [AtomicU64],
        reader: Option<ReaderShare>,
    ) -> Router<'a> {
        Router::with_marks(queues, recycled, finished, reader, BATCH, BEHIND)
    }

    /// [`Router::new`] with batches of `batch_len` segments, and new flows for the reading
    /// thread once a worker has `behind` batches in hand.
    fn with_marks(
        queues: Vec<mpsc::SyncSender<Batch>>,
        recycled: mpsc::Receiver<Batch>,
        finished: &'a [AtomicU64],
        reader: Option<ReaderShare>,
        batch_len: usize,
        behind: u64,
    ) -> Router<'a> {
        Router {
            batches: queues.iter().map(|_| Batch::new(batch_len)).collect(),
            sent: vec![0; queues.len()],
            queues,
            recycled,
            finished,
            owners: vec![UNOWNED; OWNER_BUCKETS].into_boxed_slice(),
            reader,
            batch_len,
            behind,
            ordinal: 0,
            staging: Segment::UNSET,
            outers: OuterByFlow::default(),
        }
    }

    /// Sends the worker's batch when full, and takes an empty one back.
    fn send_if_full(&mut self, worker: usize) {
        if self.batches[worker].is_full() {
            let empty = self
                .recycled
                .try_recv()
                .unwrap_or_else(|_| Batch::new(self.batch_len));
            let full = std::mem::replace(&mut self.batches[worker], empty);
            // A send fails only when the worker is gone; its join reports why.
            let _ = self.queues[worker].send(full);
            self.sent[worker] += 1;
        }
    }

    /// A worker has [`BEHIND`] batches or more in hand (`self.behind`).
    fn workers_behind(&self) -> bool {
        self.sent
            .iter()
            .zip(self.finished)
            .any(|(&sent, finished)| sent >= finished.load(Ordering::Relaxed) + self.behind)
    }

    /// The owner of the flow whose [`owner_hash`] is `hash`: its bucket's, or, for a bucket's
    /// first segment, the reading thread when the workers are behind, else the worker the
    /// hash names.
    fn owner(&mut self, hash: u64) -> u8 {
        let bucket = bucket_of(hash);
        let owner = self.owners[bucket];
        if owner != UNOWNED {
            return owner;
        }
        let owner = if self.reader.is_some() && self.workers_behind() {
            READER
        } else {
            // At most `MAX_WORKERS` (64) workers: the index fits below READER.
            (bucket % self.batches.len()) as u8
        };
        self.owners[bucket] = owner;
        owner
    }

    /// Sends what is left to the workers, which then end with their queues, and ends the
    /// reading thread's detector.
    pub(super) fn finish(self) -> Option<(Analysis, RetiredFlows)> {
        for (batch, queue) in self.batches.into_iter().zip(&self.queues) {
            if batch.len > 0 {
                let _ = queue.send(batch);
            }
        }
        self.reader.map(ReaderShare::finish)
    }
}

impl SegmentSink for Router<'_> {
    fn slot(&mut self) -> &mut Segment {
        if self.batches.len() == 1 {
            // One worker: straight into its batch (never full here: sent as it fills).
            let batch = &mut self.batches[0];
            &mut batch.items[batch.len].1
        } else {
            &mut self.staging
        }
    }

    fn outer(&mut self, outer: Outer) {
        let segment = *self.slot();
        self.outers.record(&segment, outer);
    }

    fn commit(&mut self) {
        let hash = owner_hash(self.slot());
        let owner = self.owner(hash);
        let ordinal = self.ordinal;
        self.ordinal += 1;
        if owner == READER {
            let Router {
                batches,
                staging,
                reader,
                ..
            } = self;
            // Decoded in place, detected in place: the worker's batch does not count it.
            let seg = match batches.as_slice() {
                [only] => &only.items[only.len].1,
                _ => staging,
            };
            if let Some(reader) = reader {
                reader.push(seg, ordinal);
            }
            return;
        }
        let worker = usize::from(owner);
        if self.batches.len() > 1 {
            let batch = &mut self.batches[worker];
            batch.items[batch.len].1 = self.staging;
        }
        let batch = &mut self.batches[worker];
        batch.items[batch.len].0 = ordinal;
        batch.len += 1;
        self.send_if_full(worker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::DetectorConfig;

    /// The segments of every capture in the analyze fixtures, read as one input.
    fn fixture_segments() -> Vec<Segment> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/analyze");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("the analyze fixtures")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
            .collect();
        files.sort();
        let mut segments = Vec::new();
        for file in files {
            let input = std::fs::File::open(&file).expect("a fixture");
            crate::capture::for_each_segment(input, |s| segments.push(*s), |_| {})
                .expect("a readable fixture");
        }
        segments
    }

    /// Routes `segments` to one worker that never reports a batch finished (so it is behind
    /// once it has `behind` batches of 8) and, when `share`, to a detector of the reading
    /// thread: the merged events and flows, and how many flows each detector had.
    fn route(segments: &[Segment], share: bool, behind: u64) -> (String, String, [usize; 2]) {
        let config = DetectorConfig {
            keep_minor_events: true,
            ..DetectorConfig::default()
        };
        let finished = [AtomicU64::new(0)];
        let (recycle, recycled) = mpsc::channel::<Batch>();
        let (queue, batches) = mpsc::sync_channel::<Batch>(segments.len() / 8 + 2);
        let worker_config = config.clone();
        let worker = std::thread::spawn(move || {
            let mut detector = Detector::new(worker_config);
            for mut batch in batches {
                for (ordinal, seg) in batch.filled() {
                    detector.push_at(seg, *ordinal);
                }
                batch.len = 0;
                let _ = recycle.send(batch);
            }
            detector.finish()
        });
        let reader =
            share.then(|| ReaderShare::new(Detector::new(config), RetiredFlows::new(usize::MAX)));
        let mut router = Router::with_marks(vec![queue], recycled, &finished, reader, 8, behind);
        for seg in segments {
            *router.slot() = *seg;
            router.commit();
        }
        let own = router.finish();
        let mut parts = vec![worker.join().expect("the worker")];
        let mut own_flows = 0;
        if let Some((analysis, retired)) = own {
            let (_, mut flows) = MergedFlows::new(vec![retired], |_| true).expect("in memory");
            own_flows = flows.len();
            let mut analysis = analysis;
            analysis.flows.append(&mut flows);
            parts.push(analysis);
        }
        let worker_flows = parts[0].flows.len();
        let merged = Analysis::merge(parts);
        (
            format!("{:?}", merged.events),
            format!("{:?}", merged.flows),
            [worker_flows, own_flows],
        )
    }

    /// Flows the reading thread takes while its worker is behind are found as the worker
    /// would have found them: the merged events and flows are the same as the worker's alone.
    #[test]
    fn the_reader_s_share_changes_nothing_found() {
        let segments = fixture_segments();
        assert!(segments.len() > 300, "{} segments", segments.len());
        let (events, flows, [alone, none]) = route(&segments, false, 1);
        assert_eq!(none, 0);
        assert!(events.contains("NagleDelayedAck"), "the fixtures' stalls");
        let (shared_events, shared_flows, [worker, reader]) = route(&segments, true, 1);
        assert!(
            worker > 0 && reader > 0,
            "shared: {worker} and {reader} flows"
        );
        assert_eq!(worker + reader, alone);
        assert_eq!(shared_events, events);
        assert_eq!(shared_flows, flows);
    }

    /// Flows between two ports of one address (loopback) are spread over every worker.
    #[test]
    fn loopback_flows_spread_over_the_workers() {
        for workers in [2, 3, 4, 8] {
            let mut taken = vec![0; workers];
            for port in 40_000..40_256 {
                let seg = Segment {
                    src: "127.0.0.1".parse().expect("an address"),
                    dst: "127.0.0.1".parse().expect("an address"),
                    src_port: port,
                    dst_port: 8080,
                    ..Segment::UNSET
                };
                taken[bucket_of(owner_hash(&seg)) % workers] += 1;
            }
            assert!(
                taken.iter().all(|&n| n > 256 / workers / 2),
                "{workers}: {taken:?}"
            );
        }
    }

    /// A worker that keeps up keeps every flow: the reader takes none while the mark is not
    /// reached.
    #[test]
    fn a_worker_that_keeps_up_keeps_every_flow() {
        let segments = fixture_segments();
        let (_, _, [worker, reader]) = route(&segments, true, u64::MAX);
        assert!(worker > 0);
        assert_eq!(reader, 0);
    }
}
