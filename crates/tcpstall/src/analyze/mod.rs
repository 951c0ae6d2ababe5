//! `tcpstall analyze`: find and explain stalls in pcap/pcapng captures.
//!
//! The files are read in order as one input (so a capture rotated with `tcpdump -C` keeps its
//! flows), streaming: memory follows the number of active flows, not the file size. One thread
//! reads and decodes; [`Detector`]s on `--workers` threads each take a share of the flows (and
//! the reading thread one of its own when they fall behind: [`router`]), and their analyses
//! merge into what a single detector would have found. The flows they retire
//! are kept apart ([`retired`]): past a bound, in a temporary file. `--annotate` writes the
//! captures back with a comment on each event's packets ([`annotate`]).

mod annotate;
mod retired;
mod router;

use retired::RetiredFlows;
pub use retired::{MergedFlows, IN_MEMORY, IN_MEMORY_VAR};
use router::{Batch, ReaderShare, Router, BATCHES_IN_FLIGHT};

use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::capture::{decompressed, open_input, open_raw, stream_segments_decap, CaptureStats};
use crate::decode::{Decap, DecapConfig};
use crate::detect::{Analysis, Detector, DetectorConfig};
use crate::ladder;
use crate::report::flows::AllFlows;
use crate::report::json::{InputFacts, Source, Unreadable};
use crate::report::style::Style;
use crate::report::{self, html, json, text};
use crate::Outcome;

/// Most detector threads.
const MAX_WORKERS: usize = 64;

/// Warnings printed one by one; later ones are only counted.
const WARNINGS_SHOWN: u64 = 20;

/// Arguments of `tcpstall analyze`.
#[derive(Args, Debug, Clone)]
pub struct AnalyzeArgs {
    /// Capture files (pcap or pcapng); `-` reads standard input, e.g. `tcpdump -w - | tcpstall
    /// analyze -`: Ctrl-C then stops tcpdump, and the report covers what it captured.
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
    /// Detector threads [default: one less than the CPUs, at least 1]; flows are split between
    /// them by 4-tuple and the output is the same for any number (reading and decoding run on
    /// one more thread, which takes new flows itself while the others fall behind).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: Option<u16>,
    /// Draw the ladder diagram of one example of each kind of stall found (the capture is read
    /// a second time for it; standard input is kept in a temporary file).
    #[arg(long, conflicts_with = "json")]
    pub ladder: bool,
    /// Also write a self-contained HTML report to FILE: summary, sortable flow table, latency
    /// histograms and timelines, ladder diagrams. Opens without network access.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// With --html: a link in the report to tcpstall's browser page at URL (built by
    /// scripts/build-page), where its readers open further captures with nothing installed.
    #[arg(long, value_name = "URL", requires = "html")]
    pub page_link: Option<String>,
    /// Also write the captures to FILE as pcapng with a packet comment on each event's packet
    /// and on the peer's packet that released it (kind, time held, side, fix): Wireshark
    /// shows them as frame.comment and in Expert Info. Every packet is copied unchanged;
    /// several captures become the sections of one file, in order.
    #[arg(long, value_name = "FILE")]
    pub annotate: Option<PathBuf>,
    /// Also read UDP port N as VXLAN (IANA's 4789 always is), e.g. 8472 for Linux's and
    /// flannel's old default; repeatable. Flows are the connections inside the tunnels.
    #[arg(long = "vxlan-port", value_name = "N")]
    pub vxlan_ports: Vec<u16>,
    /// Also read UDP port N as Geneve (IANA's 6081 always is); repeatable.
    #[arg(long = "geneve-port", value_name = "N")]
    pub geneve_ports: Vec<u16>,
}

/// Analyses the captures and prints the report on standard output. The command's one run:
/// the analysis is left to the process's exit to reclaim.
pub fn run(args: &AnalyzeArgs) -> anyhow::Result<Outcome> {
    if args.files.iter().any(|f| f == Path::new("-")) {
        keep_reading_on_interrupt();
    }
    let pictures = args.ladder || args.html.is_some();
    // Checked before the reading: a destination that cannot be written fails at once.
    let annotated = match &args.annotate {
        Some(path) => Some(annotate::Output::create(path, &args.files)?),
        None => None,
    };
    // The pictures and the annotated copy read the input twice: standard input is kept in a
    // file for that.
    let twice = pictures || annotated.is_some();
    let spool = if twice && args.files.iter().any(|f| f == Path::new("-")) {
        Some(spool_stdin()?)
    } else {
        None
    };
    let files: Vec<PathBuf> = args
        .files
        .iter()
        .map(|f| match &spool {
            Some(tmp) if f == Path::new("-") => tmp.path().to_path_buf(),
            _ => f.clone(),
        })
        .collect();
    let config = DetectorConfig {
        keep_minor_events: args.minor,
        keep_turns: args.html.is_some(),
        keep_socket_settled: false,
    };
    let workers = match args.workers {
        Some(n) => usize::from(n),
        None => std::thread::available_parallelism().map_or(1, |n| n.get().saturating_sub(1)),
    };
    let decap = DecapConfig {
        vxlan_ports: args.vxlan_ports.clone(),
        geneve_ports: args.geneve_ports.clone(),
    };
    // The HTML page draws every flow: it keeps them all in memory.
    let bound = if args.html.is_some() {
        usize::MAX
    } else {
        retired::in_memory_bound()?
    };
    let (mut analysis, flows, mut facts) =
        analyse_files_decap(&files, config, workers, &decap, bound)?;
    // The report names what the user gave, not the file standard input was kept in.
    if let Some(tmp) = &spool {
        let kept = display(tmp.path());
        for name in facts
            .files
            .iter_mut()
            .chain(facts.unreadable.iter_mut().map(|u| &mut u.file))
        {
            if *name == kept {
                *name = display(Path::new("-"));
            }
        }
    }
    // The unreadable files are left out of the pictures' second read and of the title.
    let readable = |f: &Path| !facts.unreadable.iter().any(|u| u.file == display(f));
    let ladders = if pictures {
        let examples = ladder::examples(&analysis.events);
        let inputs = files
            .iter()
            .filter(|f| readable(f))
            .map(|f| open_input(f))
            .collect::<Result<Vec<_>, _>>()?;
        ladder::collect(inputs, &examples)?
            .into_iter()
            .flatten()
            .collect()
    } else {
        Vec::new()
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    if args.json {
        json::write(&mut out, &analysis, &flows, &facts)?;
    } else {
        let summary = text::summary(&analysis, &flows.totals(), &facts);
        write!(out, "{}", report::fit_prose(summary))?;
        if args.flows {
            writeln!(out)?;
            text::write_flow_table(&mut out, &flows, &facts.outers)?;
        }
        if args.ladder {
            let style = Style::stdout();
            for l in &ladders {
                writeln!(out)?;
                report::ladder::write(&mut out, l, style)?;
            }
        }
    }
    out.flush()?;
    if let Some(path) = &args.html {
        let title: Vec<String> = args
            .files
            .iter()
            .zip(&files)
            .filter(|(_, read)| readable(read))
            .map(|(given, _)| given.display().to_string())
            .collect();
        // Every flow, for the page's table (none went to the temporary file: see `bound`).
        analysis.flows.clear();
        flows.for_each_chunk(&mut |chunk| {
            analysis.flows.extend_from_slice(chunk);
            Ok(())
        })?;
        let mut page = html::analysis_page(&analysis, &facts, &title.join(" "))?;
        page.add_ladders(&ladders);
        page.page_link = args.page_link.clone();
        page.write_to(path)?;
        eprintln!("tcpstall: HTML report written to {}", path.display());
    }
    if let (Some(output), Some(path)) = (annotated, &args.annotate) {
        let written = output.finish(&analysis, &facts)?;
        eprintln!(
            "tcpstall: annotated capture written to {}: {} packets, {} with a comment",
            path.display(),
            written.packets,
            written.commented
        );
    }
    if !facts.unreadable.is_empty() {
        let names: Vec<&str> = facts.unreadable.iter().map(|u| u.file.as_str()).collect();
        anyhow::bail!(
            "{} of {} capture files could not be read ({}); the report covers the others",
            names.len(),
            names.len() + facts.files.len(),
            names.join(", ")
        );
    }
    let outcome = if analysis.stall_count() > 0 {
        Outcome::StallsFound
    } else {
        Outcome::Done
    };
    // The process ends with the report: freeing a large capture's tens of thousands of events
    // and flows one by one would only delay its exit (1.3-1.7 ms for a million packets).
    std::mem::forget(analysis);
    std::mem::forget(flows);
    Ok(outcome)
}

/// Copies standard input into a temporary file (removed when dropped), for the second read
/// of the pictures.
fn spool_stdin() -> anyhow::Result<tempfile::NamedTempFile> {
    let mut tmp = tempfile::NamedTempFile::new()
        .context("cannot create a temporary file to keep standard input for --ladder/--html")?;
    io::copy(&mut io::stdin().lock(), &mut tmp)
        .context("cannot keep standard input in a temporary file for --ladder/--html")?;
    Ok(tmp)
}

/// `tcpdump -w - | tcpstall analyze -` stopped with Ctrl-C: the terminal interrupts both.
/// tcpdump then flushes and exits, which ends our input; ignoring the interrupt here lets the
/// report of what was read come out instead of nothing.
fn keep_reading_on_interrupt() {
    // signal(3) is both POSIX's and the C runtime's on Windows, where SIG_IGN for SIGINT
    // ignores the console's Ctrl-C too. SAFETY: SIG_IGN installs no handler code, so nothing
    // runs in signal context.
    let previous = unsafe { libc::signal(libc::SIGINT, libc::SIG_IGN) };
    if previous == libc::SIG_ERR as libc::sighandler_t {
        eprintln!(
            "tcpstall: warning: cannot ignore Ctrl-C while reading standard input: {}",
            io::Error::last_os_error()
        );
    }
}

/// Runs the detector over `files` in order, on `workers` detector threads (flows split between
/// them by 4-tuple; the result is the same for any number), reading the extra overlay ports of
/// `decap`; warnings about damaged input go to stderr. Every flow is in the [`MergedFlows`]
/// (up to `flows_in_memory` of them held in memory, the others in a temporary file); the
/// analysis holds the flows the reports name one by one: those with events or counts.
pub fn analyse_files_decap(
    files: &[PathBuf],
    config: DetectorConfig,
    workers: usize,
    decap: &DecapConfig,
    flows_in_memory: usize,
) -> anyhow::Result<(Analysis, MergedFlows, InputFacts)> {
    let workers = workers.clamp(1, MAX_WORKERS);
    let mut facts = InputFacts::default();
    // Reading and decoding on this thread; each worker runs its own detector on the segments
    // of its flows, fed in batches in capture order, each segment with its position in the
    // whole input so that merging gives one detector's result.
    // The workers and the reading thread's detector share the bound; the reader's, a helper
    // whose flows come only while the workers lag, keeps a sixteenth of a worker's share in
    // memory and writes the rest out sooner (as it keeps fewer tombstones:
    // `router::READER_TOMBSTONES`): the run's memory is no more than the workers'.
    let per_worker = (flows_in_memory / (workers + 1)).max(1);
    let per_reader = (per_worker / 16).max(1);
    let finished: Vec<AtomicU64> = (0..workers).map(|_| AtomicU64::new(0)).collect();
    let parts = std::thread::scope(|scope| -> anyhow::Result<Vec<(Analysis, RetiredFlows)>> {
        let (recycle, recycled) = mpsc::channel::<Batch>();
        let mut handles = Vec::with_capacity(workers);
        let mut queues = Vec::with_capacity(workers);
        for finished in &finished {
            let (queue, batches) = mpsc::sync_channel::<Batch>(BATCHES_IN_FLIGHT);
            let recycle = recycle.clone();
            let mut detector = Detector::new(config.clone());
            let mut retired = RetiredFlows::new(per_worker);
            handles.push(scope.spawn(move || -> (Analysis, RetiredFlows) {
                for mut batch in batches {
                    for (ordinal, seg) in batch.filled() {
                        detector.push_at(seg, *ordinal);
                    }
                    batch.len = 0;
                    let _ = recycle.send(batch);
                    finished.fetch_add(1, Ordering::Relaxed);
                    // Memory follows the open flows: the retired ones leave the detector.
                    retired.push(detector.take_flows());
                }
                retired.close(detector)
            }));
            queues.push(queue);
        }
        let reader = ReaderShare::new(Detector::new(config.clone()), RetiredFlows::new(per_reader));
        let mut router = Router::new(queues, recycled, &finished, Some(reader));
        let mut decap = Decap::new(decap);
        let mut seen_files = std::collections::HashSet::new();
        for path in files {
            // Read twice, a capture's packets would look like retransmissions of themselves.
            let same = std::fs::canonicalize(path).ok().filter(|p| p.is_file());
            if same.is_some_and(|p| !seen_files.insert(p)) {
                eprintln!(
                    "tcpstall: warning: {} is given more than once; read once",
                    display(path)
                );
                continue;
            }
            // One damaged file does not lose the others: it is named on stderr and in the
            // report, and the run ends with an error once the rest is reported. Its readable
            // packets (an I/O failure can come after some) stay in the analysis.
            let start = router.ordinal;
            match analyse_one(path, &mut router, &mut decap, &mut facts.warnings) {
                Ok(stats) => {
                    facts.sources.push(Source {
                        path: path.clone(),
                        ordinals: start..router.ordinal,
                        packets: stats.packets,
                    });
                    facts.records += stats.packets;
                    facts.skipped.add(&stats.skipped);
                    facts.files.push(display(path));
                }
                Err(err) => facts.unreadable.push(Unreadable {
                    file: display(path),
                    error: format!("{err:#}"),
                }),
            }
        }
        facts.outers = std::mem::take(&mut router.outers);
        let own = router.finish();
        let mut parts = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a detector thread stopped unexpectedly"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        parts.extend(own);
        Ok(parts)
    })?;
    if facts.warnings > WARNINGS_SHOWN {
        eprintln!(
            "tcpstall: warning: {} more warnings not shown",
            facts.warnings - WARNINGS_SHOWN
        );
    }
    if let ([], [only]) = (facts.files.as_slice(), facts.unreadable.as_slice()) {
        anyhow::bail!("{only}");
    }
    // Each unreadable file on stderr, with its reason; the caller reports the others.
    for unreadable in &facts.unreadable {
        eprintln!("tcpstall: error: {unreadable}");
    }
    if facts.files.is_empty() && !facts.unreadable.is_empty() {
        anyhow::bail!("none of the {} capture files could be read", files.len());
    }
    let (analyses, retired): (Vec<Analysis>, Vec<RetiredFlows>) = parts.into_iter().unzip();
    let mut analysis = Analysis::merge(analyses);
    // The flows the reports name one by one: those with events (minor ones included) or
    // counts; bounded by the events, not by the flows.
    let with_events: rustc_hash::FxHashSet<u64> =
        analysis.events.iter().map(|e| e.flow_id).collect();
    let (flows, named) = MergedFlows::new(retired, |f| {
        with_events.contains(&f.id) || f.counts.total() > 0 || f.pacing.is_some()
    })?;
    analysis.flows = named;
    Ok((analysis, flows, facts))
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
    router: &mut Router,
    decap: &mut Decap,
    warnings: &mut u64,
) -> anyhow::Result<CaptureStats> {
    let size = std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    // The bar counts the file's own bytes, before any decompression, against its size.
    let input = ProgressRead::new(open_raw(path)?, size);
    // Warnings go through the bar, which clears itself for them and redraws after, so the two
    // do not garble each other on the terminal.
    let bar = input.bar.clone();
    let input = decompressed(input)?;
    let name = display(path);
    let stats = stream_segments_decap(
        input,
        router,
        |w| {
            *warnings += 1;
            if *warnings <= WARNINGS_SHOWN {
                bar.suspend(|| eprintln!("tcpstall: warning: {name}: {w}"));
            }
        },
        decap,
    )?;
    Ok(stats)
}

/// Counts bytes read and shows a progress bar on stderr once reading has taken more than a
/// second, only when stderr is a terminal (never in pipes or CI logs).
struct ProgressRead<R> {
    inner: R,
    started: Instant,
    /// Hidden until shown; warnings are printed through it either way.
    bar: ProgressBar,
    shown: bool,
    size: Option<u64>,
    read: u64,
    checked: u64,
}

impl<R: Read> ProgressRead<R> {
    fn new(inner: R, size: Option<u64>) -> Self {
        ProgressRead {
            inner,
            started: Instant::now(),
            bar: ProgressBar::hidden(),
            shown: false,
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
        if !self.shown
            && self.started.elapsed() > Duration::from_secs(1)
            && io::stderr().is_terminal()
        {
            if let Some(len) = self.size {
                self.bar.set_length(len);
            }
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} {bytes}/{total_bytes} {wide_bar} {bytes_per_sec} eta {eta}",
            ) {
                self.bar.set_style(style);
            }
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown = true;
        }
        if self.shown {
            self.bar.set_position(self.read);
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
        if self.shown {
            self.bar.finish_and_clear();
        }
    }
}
