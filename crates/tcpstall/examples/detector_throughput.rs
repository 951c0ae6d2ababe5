//! Throughput of the detector alone on one capture: the capture's segments are decoded into
//! memory first, then fed to a fresh `Detector` in batches, as `analyze`'s detector thread
//! gets them, each pass timed on the thread's own CPU clock (best of N). Without the reading
//! and decoding around it, the figure moves only with the flow tracking and the rules.
//!
//! usage: cargo run --release --example detector_throughput -- FILE [ROUNDS]

use std::path::Path;
use std::time::Duration;

use tcpstall::capture::{for_each_segment, open_input};
use tcpstall::decode::Segment;
use tcpstall::detect::{Detector, DetectorConfig};

/// Segments per batch, as `analyze` hands them to its detector thread.
const BATCH: usize = 4096;

/// CPU time this thread has used (CLOCK_THREAD_CPUTIME_ID): other processes' load does not
/// count in it.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `now`, which outlives the call.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1).map(Path::new) else {
        anyhow::bail!("usage: detector_throughput FILE [ROUNDS]");
    };
    let rounds: u32 = args.get(2).map_or(Ok(5), |r| r.parse())?;
    let mut items: Vec<(u64, Segment)> = Vec::new();
    for_each_segment(
        open_input(path)?,
        |s| items.push((items.len() as u64, *s)),
        |_| {},
    )?;
    let mut best = Duration::MAX;
    let mut events = 0;
    for _ in 0..rounds {
        let mut detector = Detector::new(DetectorConfig::default());
        let start = thread_cpu();
        for segments in items.chunks(BATCH) {
            // As analyze's workers do: the flow key is hashed on the detector's thread.
            for (ordinal, segment) in segments {
                detector.push_at(segment, *ordinal);
            }
            // As analyze does after each batch: memory follows the open flows.
            drop(detector.take_flows());
        }
        let analysis = detector.finish();
        best = best.min(thread_cpu() - start);
        events = analysis.events.len();
    }
    println!(
        "detector: {} segments, {events} events, best of {rounds}: {:.1} ms CPU, {:.2} M segments/s",
        items.len(),
        best.as_secs_f64() * 1e3,
        items.len() as f64 / best.as_secs_f64() / 1e6
    );
    Ok(())
}
