//! `tcpstall watch`: live traffic, as it happens. A ring capture ([`source`]) feeds the
//! detector `analyze` uses; each stall is printed when it is found ([`printer`]) with the local
//! process that owns the socket and that socket's TCP_NODELAY/TCP_CORK now ([`owner`]); the
//! counters are a Prometheus scrape target on request ([`metrics`]); Ctrl-C, SIGTERM or
//! `--duration` ends the run with a summary ([`summary`]).
//!
//! With `--kernel` the stalls come from the kernel itself instead of a capture ([`kernel`]):
//! BTF tracepoints see each Nagle hold with the process that wrote it.
//!
//! It can run for days: events and retired flows are taken from the detector as they come,
//! and the detector retires closed and idle flows, so memory follows the active flows.

pub mod container;
pub(crate) mod kernel;
pub mod kubelet;
pub mod metrics;
pub(crate) mod printer;
pub(crate) mod source;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use self::metrics::{Metrics, Totals};
use self::printer::ToPrinter;
use self::source::{LiveSource, SourceError, SourceNotice};
use crate::decode::Segment;
use crate::detect::{Detector, DetectorConfig, CORK_NOT_A_TAIL};
use crate::report::model::watch::{PacketCounts, WatchSummary};
use crate::report::watch::{summary_json, summary_text};
use crate::Outcome;

/// How often retired flows are collected and the kernel's drop counters read.
const TICK: Duration = Duration::from_millis(500);

/// The most a packet waits in the kernel's ring before it is read: a stall is printed at most
/// this late, and a quiet host wakes tcpstall at most 100 times a second.
const BLOCK_TIMEOUT: Duration = Duration::from_millis(10);

/// The same with `--buffered`.
const BUFFERED_BLOCK_TIMEOUT: Duration = Duration::from_millis(100);

pub use crate::args::watch::WatchArgs;

/// Runs `tcpstall watch`.
pub fn run(args: &WatchArgs) -> anyhow::Result<Outcome> {
    if let Some(d) = args.duration {
        if !(d.is_finite() && d > 0.0) {
            bail!("--duration {d} is not a positive number of seconds");
        }
    }
    if args.kernel && args.interface.iter().any(|i| i != "any") {
        bail!("--kernel watches every socket of the host: it takes no interface (-i)");
    }
    let filter = args.filter.join(" ");
    let buffer_bytes = (args.buffer_mib as usize) << 20;
    let block_timeout = if args.buffered {
        BUFFERED_BLOCK_TIMEOUT
    } else {
        BLOCK_TIMEOUT
    };
    let mut source = match args.kernel {
        true => None,
        false => Some(LiveSource::open(
            &args.interface,
            &filter,
            buffer_bytes,
            block_timeout,
        )?),
    };

    let metrics = Arc::new(Metrics::new().context("cannot set up the metrics")?);
    metrics.set_source(if args.kernel { "kernel" } else { "capture" });
    if let Some(addr) = args.metrics {
        let bound = metrics::serve(addr, Arc::clone(&metrics))?;
        eprintln!("tcpstall: metrics at http://{bound}/metrics");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut handlers = Vec::new();
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        handlers.push(
            signal_hook::flag::register(signal, Arc::clone(&stop))
                .context("cannot install the Ctrl-C handler")?,
        );
    }
    let interfaces = args.interface.join(", ");
    let started = Instant::now();
    let result = match source.as_mut() {
        None => kernel::watch(args, &metrics, &stop, started).map(|s| (s, None)),
        Some(source) => {
            announce(args, &interfaces, &filter);
            capture_loop(args, source, &metrics, &stop, started)
        }
    };
    for id in handlers {
        signal_hook::low_level::unregister(id);
    }
    // A capture that failed part-way still reports what it watched until then.
    let (mut summary, failure) = result?;
    if source.is_some() {
        summary.interface = interfaces;
        summary.filter = filter;
    }
    summary.duration_s = started.elapsed().as_secs_f64();
    let text = if args.json {
        summary_json(&summary)
    } else {
        format!("\n{}", crate::report::fit_prose(summary_text(&summary)))
    };
    crate::report::print_stdout(&text)?;
    if let Some(err) = failure {
        return Err(err.into());
    }
    Ok(if summary.counts.stalls() > 0 {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// Says what the capture watches and how it ends.
fn announce(args: &WatchArgs, interfaces: &str, filter: &str) {
    eprintln!(
        "tcpstall: watching {interfaces} ({}); {} ends it with a summary",
        if filter.trim().is_empty() {
            "all TCP".to_string()
        } else {
            format!("filter `{filter}`")
        },
        match args.duration {
            Some(d) => format!("{d} s or Ctrl-C"),
            None => "Ctrl-C".to_string(),
        }
    );
}

/// Captures until a signal, the deadline, or an error, and returns the summary so far with
/// the capture's error, if it ended in one.
fn capture_loop(
    args: &WatchArgs,
    source: &mut LiveSource,
    metrics: &Metrics,
    stop: &AtomicBool,
    started: Instant,
) -> anyhow::Result<(WatchSummary, Option<SourceError>)> {
    let deadline = args
        .duration
        .map(|d| started + Duration::from_secs_f64(d.min(1e9)));
    let (mut tx, printer) =
        printer::spawn(args.json, metrics).context("cannot start the printing thread")?;
    let mut unprinted = 0;
    let mut detector = Detector::new(DetectorConfig {
        keep_minor_events: args.minor,
        keep_turns: false,
        keep_socket_settled: true,
    });
    detector.limit_active_flows(usize::try_from(args.max_flows).unwrap_or(usize::MAX));
    detector.forget_turn_latencies();
    let mut said_full = false;
    let mut summary = WatchSummary::default();
    let mut packets = PacketCounts::default();
    let mut segment = Segment::UNSET;
    let mut last_tick = Instant::now();
    let mut printer_gone = false;
    let mut failure = None;
    while !stop.load(Ordering::Relaxed) && deadline.map_or(true, |d| Instant::now() < d) {
        match source.read_batch(&mut segment, |seg| detector.push(seg)) {
            Ok(counts) => packets.add(counts),
            Err(err) => {
                failure = Some(err);
                break;
            }
        }
        for notice in source.take_notices() {
            match notice {
                SourceNotice::Down(name) => eprintln!(
                    "tcpstall: interface {name} went down; watching resumes when it is up"
                ),
                SourceNotice::Gone(name) => {
                    eprintln!(
                        "tcpstall: interface {name} disappeared; the others are still watched"
                    )
                }
            }
        }
        for event in detector.take_events() {
            metrics.record_stall(&event);
            if event.finding.kind.is_stall() {
                summary.held[event.finding.held_side.index()] += 1;
            }
            printer_gone |= tx.stall(event, None).is_err();
        }
        for event in detector.take_awaiting_socket() {
            printer_gone |= tx.awaiting_socket(event, CORK_NOT_A_TAIL).is_err();
        }
        if last_tick.elapsed() >= TICK {
            last_tick = Instant::now();
            // Closed and idle flows retire by the clock, also when no packet comes.
            detector.advance_clock(crate::capture::live::now_ns());
            let taken = detector.take_flows();
            // A connection that rejoined its flow after retiring is one connection.
            let new = taken.iter().filter(|f| !f.continued).count() as u64;
            let retired: Vec<u64> = taken.iter().map(|f| f.id).collect();
            summary.flows += new;
            metrics.flows_ended(new);
            if !retired.is_empty() {
                printer_gone |= tx.send(ToPrinter::Retired(retired)).is_err();
            }
            if !said_full && detector.untracked().segments > 0 {
                said_full = true;
                eprintln!(
                    "tcpstall: {} connections followed, the --max-flows bound: further ones \
                     are counted in the summary, not followed",
                    detector.active_flows()
                );
            }
            printer::say_backlog(&tx, unprinted);
            unprinted = tx.unprinted();
            metrics.printer(tx.backlog(), unprinted);
            let drops = source.drops();
            metrics.update(Totals {
                packets: packets.packets,
                tcp_segments: packets.tcp_segments,
                kernel_dropped: drops.dropped,
                interface_dropped: drops.if_dropped,
                active_flows: detector.active_flows() as u64,
                untracked_segments: detector.untracked().segments,
            });
        }
        if printer_gone {
            break; // the printer failed (standard output closed): its error says why
        }
    }
    if failure.is_none() && !printer_gone {
        // What the kernel captured before the signal or the deadline is read too: a stall
        // released just before Ctrl-C is in the ring, not yet read.
        match source.read_batch(&mut segment, |seg| detector.push(seg)) {
            Ok(counts) => packets.add(counts),
            Err(err) => failure = Some(err),
        }
    }
    summary.drops = source.drops();
    summary.packets = packets;
    summary.active_flows = detector.active_flows() as u64;
    summary.untracked = detector.untracked();
    let last = detector.finish();
    summary.flows += last.flows.iter().filter(|f| !f.continued).count() as u64;
    summary.counts = last.counts;
    for event in last.events {
        // A printer that has gone returns its error from `join`.
        if tx.stall(event, None).is_err() {
            break;
        }
    }
    for event in last.awaiting_socket {
        if tx.awaiting_socket(event, CORK_NOT_A_TAIL).is_err() {
            break;
        }
    }
    finish_printing(tx, printer, &mut summary)?;
    Ok((summary, failure))
}

/// Closes the printer's channel, waits for it to print what it holds, and adds the owners it
/// found to `summary`.
fn finish_printing(
    tx: printer::Queue,
    printer: std::thread::JoinHandle<std::io::Result<printer::Printed>>,
    summary: &mut WatchSummary,
) -> anyhow::Result<()> {
    if tx.unprinted() > 0 {
        eprintln!(
            "tcpstall: {} stalls were counted but not printed: the printer fell behind",
            tx.unprinted()
        );
    }
    drop(tx);
    let printed = printer
        .join()
        .map_err(|_| anyhow::anyhow!("the printing thread panicked"))??;
    summary.owners = printed.owners.sorted();
    summary.owners_unlisted = printed.owners.unlisted;
    summary.without_owner = printed.without_owner;
    for (held, settled) in summary.held.iter_mut().zip(printed.settled_by_socket) {
        *held += settled;
    }
    summary.counts.merge(&printed.settled_kinds);
    Ok(())
}
