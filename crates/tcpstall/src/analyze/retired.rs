//! The flows an `analyze` run has retired, kept so that memory follows the open connections,
//! not every connection of the capture: each detector thread holds up to a bound of them, and
//! past it writes them, sorted by flow id, as one run of a temporary file (an external merge
//! sort). The reports read them back merged in flow order, the parts of one connection joined
//! ([`AllFlows`]), as often as they need: once for the counts, once to list them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::detect::{Analysis, Detector, FlowSummary};
use crate::report::flows::{AllFlows, FlowTotals, CHUNK};

/// Flows kept in memory by all detector threads together before they go to the temporary
/// file: about 400 bytes each, so some 13 MB.
pub const IN_MEMORY: usize = 32_768;

/// Environment variable that sets [`IN_MEMORY`] (at least 1): a lower figure trades memory
/// for temporary-file writes.
pub const IN_MEMORY_VAR: &str = "TCPSTALL_FLOWS_IN_MEMORY";

/// Bytes read from the temporary file at a time for each run being merged.
const READ_AHEAD: usize = 64 * 1024;

/// [`IN_MEMORY`], or what [`IN_MEMORY_VAR`] sets.
pub fn in_memory_bound() -> anyhow::Result<usize> {
    match std::env::var(IN_MEMORY_VAR) {
        Ok(text) => text
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{IN_MEMORY_VAR}={text:?} is not a number of flows (1 or more); unset it for \
                     the default, {IN_MEMORY}"
                )
            }),
        Err(_) => Ok(IN_MEMORY),
    }
}

/// One detector thread's retired flows: the latest in memory, the earlier ones in runs of its
/// temporary file.
pub struct RetiredFlows {
    memory: Vec<FlowSummary>,
    bound: usize,
    spill: Option<Spill>,
}

/// The temporary file (removed when closed) and the runs in it.
struct Spill {
    file: File,
    runs: Vec<Run>,
    end: u64,
}

/// A run: flows in id order, each as a 4-byte little-endian length and its encoding.
#[derive(Debug, Clone, Copy)]
struct Run {
    start: u64,
    end: u64,
}

impl RetiredFlows {
    /// Keeps up to `bound` flows in memory (at least one).
    pub fn new(bound: usize) -> RetiredFlows {
        RetiredFlows {
            memory: Vec::new(),
            bound: bound.max(1),
            spill: None,
        }
    }

    /// Ends `detector`'s run, whose retired flows these are: the flows still open join them,
    /// and its analysis comes back beside them.
    pub fn close(mut self, detector: Detector) -> (Analysis, RetiredFlows) {
        let mut analysis = detector.finish();
        self.push(std::mem::take(&mut analysis.flows));
        (analysis, self)
    }

    /// Adds flows retired after those added before. When the temporary file cannot be
    /// written (no room, no permission), says so once and keeps the flows in memory from then
    /// on, as before there was a bound: the report is still whole.
    pub fn push(&mut self, flows: Vec<FlowSummary>) {
        if self.memory.is_empty() {
            // The detector's own vector, kept: most pushes of a run are its only flows.
            self.memory = flows;
        } else {
            self.memory.extend(flows);
        }
        if self.memory.len() >= self.bound {
            if let Err(err) = self.write_run() {
                static SAID: AtomicBool = AtomicBool::new(false);
                if !SAID.swap(true, Ordering::Relaxed) {
                    eprintln!("tcpstall: warning: {err}; the flows are kept in memory instead");
                }
                self.bound = usize::MAX;
            }
        }
    }

    /// Writes the flows in memory, sorted by id, as a new run of the temporary file, and lets
    /// them go; on an error they stay in memory, and the file is not written again. The sort is
    /// stable: parts of one connection stay in the order they retired.
    fn write_run(&mut self) -> io::Result<()> {
        let spill = match &mut self.spill {
            Some(spill) => spill,
            None => self.spill.insert(Spill {
                file: tempfile::tempfile().map_err(|e| in_temp_dir("create", e))?,
                runs: Vec::new(),
                end: 0,
            }),
        };
        self.memory.sort_by_key(|f| f.id);
        let start = spill.end;
        let mut out = BufWriter::with_capacity(READ_AHEAD, &spill.file);
        let mut encoded = Vec::with_capacity(512);
        for f in &self.memory {
            encoded.clear();
            encoded.extend_from_slice(&[0; 4]);
            let encoded_len = postcard::to_io(f, &mut encoded)
                .map_err(|e| io::Error::other(format!("a flow does not encode: {e}")))?
                .len();
            let len = u32::try_from(encoded_len - 4)
                .map_err(|_| io::Error::other("a flow's summary is over 4 GB"))?;
            encoded[..4].copy_from_slice(&len.to_le_bytes());
            out.write_all(&encoded)
                .map_err(|e| in_temp_dir("write to", e))?;
            spill.end += encoded.len() as u64;
        }
        out.flush().map_err(|e| in_temp_dir("write to", e))?;
        spill.runs.push(Run {
            start,
            end: spill.end,
        });
        self.memory.clear();
        Ok(())
    }

    /// Runs written to the temporary file so far.
    pub fn runs(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.runs.len())
    }
}

/// What the temporary file's failure means, and what to do.
fn in_temp_dir(action: &str, err: io::Error) -> io::Error {
    let dir = std::env::temp_dir();
    io::Error::new(
        err.kind(),
        format!(
            "cannot {action} a temporary file in {} for the flows of a long capture ({err}): \
             TMPDIR names where it goes (a writable directory with room)",
            dir.display()
        ),
    )
}

/// Every detector thread's retired flows, read back merged in flow order.
pub struct MergedFlows {
    parts: Vec<RetiredFlows>,
    totals: FlowTotals,
}

impl MergedFlows {
    /// Merges the threads' flows and reads them once: their counts, and the flows `keep`
    /// chooses (joined, in order) returned to be held in memory.
    pub fn new(
        mut parts: Vec<RetiredFlows>,
        mut keep: impl FnMut(&FlowSummary) -> bool,
    ) -> io::Result<(MergedFlows, Vec<FlowSummary>)> {
        for part in &mut parts {
            // Stable, as for a run: the parts of a connection stay in the order they retired.
            part.memory.sort_by_key(|f| f.id);
        }
        let mut merged = MergedFlows {
            parts,
            totals: FlowTotals::default(),
        };
        let mut totals = FlowTotals::default();
        let mut kept = Vec::new();
        merged.for_each(&mut |f| {
            totals.add(&f);
            if keep(&f) {
                kept.push(f);
            }
            Ok(())
        })?;
        merged.totals = totals;
        Ok((merged, kept))
    }

    /// Runs written to temporary files, over all threads.
    pub fn runs(&self) -> usize {
        self.parts.iter().map(RetiredFlows::runs).sum()
    }

    /// Calls `each` with every flow in id order, the parts of a connection joined.
    fn for_each(&self, each: &mut dyn FnMut(FlowSummary) -> io::Result<()>) -> io::Result<()> {
        // Each thread's runs, then its flows in memory, which retired after them: on equal
        // ids, the heap's tie-break on the source's index keeps the parts in retirement order.
        let mut sources: Vec<Source<'_>> = Vec::new();
        for part in &self.parts {
            if let Some(spill) = &part.spill {
                for run in &spill.runs {
                    sources.push(Source::Run(RunReader::new(&spill.file, *run)));
                }
            }
            sources.push(Source::Memory(part.memory.iter()));
        }
        let mut merge = Merge::new(sources)?;
        while let Some(Reverse((id, i))) = merge.heap.pop() {
            let Some(mut flow) = merge.take(i)? else {
                continue;
            };
            while let Some(&Reverse((next_id, j))) = merge.heap.peek() {
                if next_id != id {
                    break;
                }
                merge.heap.pop();
                if let Some(later) = merge.take(j)? {
                    flow.absorb(later);
                }
            }
            each(flow)?;
        }
        Ok(())
    }
}

/// A k-way merge: each source's next flow, and a heap of their ids.
struct Merge<'a> {
    sources: Vec<Source<'a>>,
    heads: Vec<Option<FlowSummary>>,
    /// (id, source) of each head: the least id first, then the earliest source.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
}

impl<'a> Merge<'a> {
    fn new(mut sources: Vec<Source<'a>>) -> io::Result<Merge<'a>> {
        let mut heads = Vec::with_capacity(sources.len());
        let mut heap = BinaryHeap::with_capacity(sources.len());
        for (i, source) in sources.iter_mut().enumerate() {
            let head = source.next()?;
            if let Some(f) = &head {
                heap.push(Reverse((f.id, i)));
            }
            heads.push(head);
        }
        Ok(Merge {
            sources,
            heads,
            heap,
        })
    }

    /// Source `i`'s head, whose heap entry was just popped; its next flow takes its place.
    fn take(&mut self, i: usize) -> io::Result<Option<FlowSummary>> {
        let next = self.sources[i].next()?;
        if let Some(f) = &next {
            self.heap.push(Reverse((f.id, i)));
        }
        Ok(std::mem::replace(&mut self.heads[i], next))
    }
}

impl AllFlows for MergedFlows {
    fn totals(&self) -> FlowTotals {
        self.totals
    }

    fn for_each_chunk(
        &self,
        each: &mut dyn FnMut(&[FlowSummary]) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut chunk = Vec::with_capacity(CHUNK);
        self.for_each(&mut |f| {
            chunk.push(f);
            if chunk.len() == CHUNK {
                each(&chunk)?;
                chunk.clear();
            }
            Ok(())
        })?;
        if chunk.is_empty() {
            Ok(())
        } else {
            each(&chunk)
        }
    }
}

/// Where the merge takes flows from.
enum Source<'a> {
    Memory(std::slice::Iter<'a, FlowSummary>),
    Run(RunReader<'a>),
}

impl Source<'_> {
    fn next(&mut self) -> io::Result<Option<FlowSummary>> {
        match self {
            Source::Memory(flows) => Ok(flows.next().cloned()),
            Source::Run(run) => run.next(),
        }
    }
}

/// Reads one run's flows back, [`READ_AHEAD`] bytes at a time (each read seeks first: the runs
/// of one file are read side by side).
struct RunReader<'a> {
    file: &'a File,
    at: u64,
    end: u64,
    buf: Vec<u8>,
    pos: usize,
}

impl<'a> RunReader<'a> {
    fn new(file: &'a File, run: Run) -> RunReader<'a> {
        RunReader {
            file,
            at: run.start,
            end: run.end,
            buf: Vec::new(),
            pos: 0,
        }
    }

    /// Makes at least `n` unread bytes available in `buf[pos..]`, or fails: the run was
    /// written whole, so a short read means the file changed under us.
    fn fill(&mut self, n: usize) -> io::Result<()> {
        if self.buf.len() - self.pos >= n {
            return Ok(());
        }
        self.buf.drain(..self.pos);
        self.pos = 0;
        let want = (n - self.buf.len()).max(READ_AHEAD);
        let left = usize::try_from(self.end - self.at).unwrap_or(usize::MAX);
        let want = want.min(left);
        let old = self.buf.len();
        self.buf.resize(old + want, 0);
        // Seek, then read: the runs share the file but are read on one thread, one at a time
        // (and Windows has no read that leaves the position alone).
        let mut file = self.file;
        file.seek(SeekFrom::Start(self.at))
            .and_then(|_| file.read_exact(&mut self.buf[old..]))
            .map_err(|e| in_temp_dir("read back", e))?;
        self.at += want as u64;
        if self.buf.len() < n {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the temporary file of retired flows ends inside a flow",
            ));
        }
        Ok(())
    }

    fn next(&mut self) -> io::Result<Option<FlowSummary>> {
        if self.pos == self.buf.len() && self.at == self.end {
            return Ok(None);
        }
        self.fill(4)?;
        let mut len = [0u8; 4];
        len.copy_from_slice(&self.buf[self.pos..self.pos + 4]);
        let len = u32::from_le_bytes(len) as usize;
        self.pos += 4;
        self.fill(len)?;
        let flow = postcard::from_bytes(&self.buf[self.pos..self.pos + len]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a flow of the temporary file does not read back: {e}"),
            )
        })?;
        self.pos += len;
        Ok(Some(flow))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::verdict::join_parts;
    use crate::flow::{ClientGuess, Endpoint, MssSource, PathSource, Span, Timestamp};

    fn flow(id: u64, packets: u64, continued: bool) -> FlowSummary {
        let end = |port| Endpoint {
            addr: std::net::IpAddr::from([10, 0, 0, 1]),
            port,
        };
        FlowSummary {
            id,
            client: end(40_000 + (id % 20_000) as u16),
            server: end(80),
            client_guess: ClientGuess::Syn,
            packets,
            bytes: [packets * 10, packets * 20],
            retransmissions: 0,
            loss_probes: 0,
            capture_gaps: id % 3,
            requests: 1,
            counts: Default::default(),
            time_lost_ns: Span::ZERO,
            worst_stall_ns: Span::ZERO,
            latency_us: Some((u32::try_from(id).unwrap_or(0), 2, 3)),
            mss: [1460, 1460],
            mss_source: [MssSource::Syn, MssSource::Assumed],
            near_rtt_ns: [Some(Span::from_micros(id)), None],
            path_source: PathSource::Handshake,
            continued,
            span_ns: (
                Timestamp::from_nanos(id),
                Timestamp::from_nanos(id + packets),
            ),
            turns: Vec::new(),
            pacing: None,
        }
    }

    fn render(flows: &dyn AllFlows) -> Vec<String> {
        let mut out = Vec::new();
        flows
            .for_each_chunk(&mut |chunk| {
                out.extend(chunk.iter().map(|f| format!("{f:?}")));
                Ok(())
            })
            .expect("reads back");
        out
    }

    /// Two threads' flows retiring out of id order, with connections in two parts: through
    /// runs of three flows, the same flows in the same order, joined, as held in memory.
    #[test]
    fn runs_on_disk_read_back_as_the_flows_held_in_memory() {
        let mut retired: [Vec<FlowSummary>; 2] = Default::default();
        for id in (0..200u64).rev() {
            retired[(id % 2) as usize].push(flow(id, id + 1, false));
        }
        // Later parts of 10, 11 and 150, retired after everything else.
        for id in [10, 11, 150] {
            retired[(id % 2) as usize].push(flow(id, 7, true));
        }
        let mut expected: Vec<FlowSummary> = retired.iter().flatten().cloned().collect();
        expected.sort_by_key(|f| f.id);
        join_parts(&mut expected);

        let parts = retired
            .iter()
            .map(|flows| {
                let mut part = RetiredFlows::new(3);
                for pair in flows.chunks(2) {
                    part.push(pair.to_vec());
                }
                part
            })
            .collect();
        let keep = |f: &FlowSummary| f.id % 50 == 0;
        let (merged, kept) = MergedFlows::new(parts, keep).expect("merged");
        assert!(merged.runs() >= 40, "{} runs", merged.runs());
        assert_eq!(render(&merged), render(&expected));
        assert_eq!(merged.totals(), expected.totals());
        assert_eq!(merged.totals().flows, 200);
        let kept: Vec<String> = kept.iter().map(|f| format!("{f:?}")).collect();
        let expected_kept: Vec<String> = expected
            .iter()
            .filter(|f| keep(f))
            .map(|f| format!("{f:?}"))
            .collect();
        assert_eq!(kept, expected_kept);
        // The joined part: packets of both.
        let joined = expected.iter().find(|f| f.id == 150).expect("flow 150");
        assert_eq!(joined.packets, 151 + 7);
        assert!(!joined.continued);
    }

    /// Without a spill, nothing is written and the flows come from memory.
    #[test]
    fn flows_under_the_bound_stay_in_memory() {
        let mut part = RetiredFlows::new(1_000);
        part.push((0..10).map(|id| flow(id, 1, false)).collect());
        let (merged, kept) = MergedFlows::new(vec![part], |_| false).expect("merged");
        assert_eq!(merged.runs(), 0);
        assert!(kept.is_empty());
        assert_eq!(render(&merged).len(), 10);
    }
}
