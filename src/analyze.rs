//! `tcpstall analyze`: find and explain stalls in pcap/pcapng captures.
//!
//! The files are read in order into one [`Detector`] (so a capture rotated with `tcpdump -C`
//! keeps its flows), streaming: memory follows the number of active flows, not the file size.

use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::capture::{for_each_segment, open_input, CaptureStats};
use crate::decode::Segment;
use crate::detect::{Analysis, Detector, DetectorConfig};
use crate::report::json::InputFacts;
use crate::report::{json, text};
use crate::Outcome;

/// Segments handed to the detector thread at a time.
const BATCH: usize = 4096;
/// Batches queued for the detector thread before the reader waits.
const BATCHES_IN_FLIGHT: usize = 8;

/// Warnings printed one by one; later ones are only counted.
const WARNINGS_SHOWN: u64 = 20;

/// Arguments of `tcpstall analyze`.
#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng); `-` reads standard input.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Exit 1 when a stall is found.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Print JSON (stable keys: summary.packets, summary.flows, summary.stalls, events).
    #[arg(long)]
    pub json: bool,
    /// Add a per-flow table to the text report.
    #[arg(long)]
    pub flows: bool,
    /// Also list minor Nagle holds (released by an ordinary ACK) as events.
    #[arg(long)]
    pub minor: bool,
}

/// Analyses the captures and prints the report on standard output.
pub fn run(args: &AnalyzeArgs) -> anyhow::Result<Outcome> {
    let config = DetectorConfig {
        keep_minor_events: args.minor,
    };
    let (analysis, facts) = analyse_files(&args.files, config)?;
    let mut out = io::BufWriter::new(io::stdout().lock());
    if args.json {
        json::write(&mut out, &analysis, &facts)?;
    } else {
        write!(out, "{}", text::summary(&analysis, &facts))?;
        if args.flows {
            writeln!(out)?;
            write!(out, "{}", text::flow_table(&analysis))?;
        }
    }
    out.flush()?;
    Ok(if analysis.stall_count() > 0 {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// Runs the detector over `files` in order; warnings about damaged input go to stderr.
pub fn analyse_files(
    files: &[PathBuf],
    config: DetectorConfig,
) -> anyhow::Result<(Analysis, InputFacts)> {
    let mut detector = Detector::new(config);
    let mut facts = InputFacts::default();
    for path in files {
        let stats = analyse_one(path, &mut detector, &mut facts.warnings)
            .with_context(|| format!("cannot analyse {}", display(path)))?;
        facts.records += stats.packets;
        facts.files.push(display(path));
    }
    if facts.warnings > WARNINGS_SHOWN {
        eprintln!(
            "tcpstall: warning: {} more warnings not shown",
            facts.warnings - WARNINGS_SHOWN
        );
    }
    Ok((detector.finish(), facts))
}

fn display(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

fn analyse_one(
    path: &Path,
    detector: &mut Detector,
    warnings: &mut u64,
) -> anyhow::Result<CaptureStats> {
    let input = open_input(path)?;
    let size = std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let input = ProgressRead::new(input, size);
    let name = display(path);
    // Two stages on two threads: reading and decoding here, the detector on a worker fed with
    // batches in capture order (one detector, so the output is the same as on one thread).
    std::thread::scope(|scope| {
        let (to_worker, batches) = mpsc::sync_channel::<Vec<Segment>>(BATCHES_IN_FLIGHT);
        let (recycle, recycled) = mpsc::channel::<Vec<Segment>>();
        let worker = scope.spawn(move || {
            for mut batch in batches {
                for seg in &batch {
                    detector.push(seg);
                }
                batch.clear();
                let _ = recycle.send(batch);
            }
        });
        let mut batch = Vec::with_capacity(BATCH);
        let stats = for_each_segment(
            input,
            |seg| {
                batch.push(*seg);
                if batch.len() == BATCH {
                    let empty = recycled
                        .try_recv()
                        .unwrap_or_else(|_| Vec::with_capacity(BATCH));
                    // A send fails only when the worker is gone; its join reports why.
                    let _ = to_worker.send(std::mem::replace(&mut batch, empty));
                }
            },
            |w| {
                *warnings += 1;
                if *warnings <= WARNINGS_SHOWN {
                    eprintln!("tcpstall: warning: {name}: {w}");
                }
            },
        );
        if !batch.is_empty() {
            let _ = to_worker.send(batch);
        }
        drop(to_worker);
        if worker.join().is_err() {
            anyhow::bail!("the detector stopped unexpectedly");
        }
        Ok(stats?)
    })
}

/// Counts bytes read and shows a progress bar on stderr once reading has taken more than a
/// second, only when stderr is a terminal (never in pipes or CI logs).
struct ProgressRead<R> {
    inner: R,
    started: Instant,
    bar: Option<ProgressBar>,
    size: Option<u64>,
    read: u64,
    checked: u64,
}

impl<R: Read> ProgressRead<R> {
    fn new(inner: R, size: Option<u64>) -> Self {
        ProgressRead {
            inner,
            started: Instant::now(),
            bar: None,
            size,
            read: 0,
            checked: 0,
        }
    }

    fn tick(&mut self) {
        // Check the clock every 4 MiB, not every read.
        if self.read - self.checked < 4 << 20 {
            return;
        }
        self.checked = self.read;
        if self.bar.is_none()
            && self.started.elapsed() > Duration::from_secs(1)
            && io::stderr().is_terminal()
        {
            let bar = match self.size {
                Some(len) => ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr()),
                None => ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr()),
            };
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            ) {
                bar.set_style(style);
            }
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_position(self.read);
        }
    }
}

impl<R: Read> Read for ProgressRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        self.tick();
        Ok(n)
    }
}

impl<R> Drop for ProgressRead<R> {
    fn drop(&mut self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
