//! `tcpstall lab`: the source documents' experiments, reproduced on real kernel sockets over
//! loopback. The catalogue ([`scenarios::CATALOGUE`]) is data; [`runner`] runs a row with the
//! building blocks ([`server`], [`client`], [`write`](mod@write)) and [`measure`] judges it.
//!
//! A row is **stalled** when its median latency is at least 30 ms: the 40 ms floor of the Linux
//! delayed-ACK timer (`TCP_DELACK_MIN`) minus a 10 ms margin ([`measure::STALL_THRESHOLD_MS`]).

pub mod client;
pub mod framing;
pub mod measure;
pub mod runner;
pub mod scenarios;
pub mod server;
pub mod write;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use self::runner::{expected_stall, Row, RunSettings};
use self::scenarios::{Scenario, Variant, CATALOGUE, SCENARIOS};
use crate::capture::live::{CaptureSummary, LiveCapture};
use crate::kernel::KernelFacts;
use crate::Outcome;

/// Arguments of `tcpstall lab`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "A row is stalled when its median latency is >= 30 ms: the 40 ms \
    delayed-ACK floor (TCP_DELACK_MIN) minus a 10 ms margin. Every server binds 127.0.0.1 \
    port 0; nothing leaves loopback."
)]
pub struct LabArgs {
    /// Run only these scenarios (comma-separated or repeated); see --list.
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Run only these variants of the selected scenarios (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    pub variant: Vec<String>,
    /// Requests per row (1-100000); stream rows use --connections and --writes instead.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// Payload size in bytes, replacing each row's own: echo line, HTTP body, memcached
    /// value, stream write.
    #[arg(long)]
    pub size: Option<usize>,
    /// TCP_MAXSEG on both ends (88-32767), e.g. 1460 to emulate a 1500-byte MTU on loopback.
    #[arg(long)]
    pub mss: Option<u32>,
    /// Write the lab's own traffic to this pcap file (needs CAP_NET_RAW).
    #[arg(long, value_name = "FILE.pcap")]
    pub capture: Option<PathBuf>,
    /// Print the catalogue with a description of each entry and exit.
    #[arg(long)]
    pub list: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Stream scenario: connections per row (1-10000; document 001 used 1000).
    #[arg(long, default_value_t = 20)]
    pub connections: usize,
    /// Stream scenario: writes per connection (1-1000).
    #[arg(long, default_value_t = 10)]
    pub writes: usize,
    /// Stream scenario: connections running at once (1-64).
    #[arg(long, default_value_t = 5)]
    pub parallel: usize,
    /// No row runs longer than this many seconds (1-3600).
    #[arg(long, default_value_t = 60)]
    pub row_timeout: u64,
    /// Exit 1 when a row stalls that is not expected to.
    #[arg(long)]
    pub fail_on_stall: bool,
}

/// The whole output of `lab --json`.
#[derive(Debug, Serialize)]
pub struct LabReport {
    /// The running kernel's facts.
    pub kernel: KernelFacts,
    /// The header line: release, HZ, autocorking, delayed-ACK window.
    pub kernel_summary: String,
    /// One entry per row run.
    pub rows: Vec<Row>,
    /// The capture written with `--capture`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureReport>,
}

/// What `--capture` wrote.
#[derive(Debug, Serialize)]
pub struct CaptureReport {
    /// The pcap file.
    pub file: PathBuf,
    /// Packets written.
    pub packets: u64,
    /// TCP connections captured.
    pub flows: u64,
    /// Connections whose FINs were not all seen before the capture stopped.
    pub unclosed_flows: u64,
    /// Packets the kernel dropped before the capture read them (0 for a complete capture).
    pub dropped: u64,
}

/// Runs the lab.
pub fn run(args: &LabArgs) -> anyhow::Result<Outcome> {
    let settings = settings_of(args)?;
    let selected = select(args)?;
    if let Some(size) = args.size {
        check_size(&selected, size)?;
    }
    if args.list {
        print_list(&mut std::io::stdout().lock(), &selected, &settings)
            .context("cannot write the catalogue to standard output")?;
        return Ok(Outcome::Done);
    }
    let kernel = KernelFacts::read();
    let capture = args
        .capture
        .as_deref()
        .map(LiveCapture::start_loopback)
        .transpose()?;
    let watch = |port: u16| {
        if let Some(capture) = &capture {
            capture.watch_port(port);
        }
    };
    // Progress on a terminal only (indicatif draws nothing when stderr is not a TTY).
    let progress = if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(selected.len() as u64);
        if let Ok(style) = ProgressStyle::with_template("lab {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar
    };
    let mut rows = Vec::with_capacity(selected.len());
    for variant in &selected {
        progress.set_message(format!("{}/{}", variant.scenario.name(), variant.name));
        let row = runner::run_variant(variant, &settings, &watch)
            .with_context(|| format!("{}/{}", variant.scenario.name(), variant.name))?;
        progress.inc(1);
        rows.push(row);
    }
    progress.finish_and_clear();
    let capture = match (capture, &args.capture) {
        (Some(capture), Some(file)) => {
            let CaptureSummary {
                packets,
                flows,
                unclosed_flows,
                dropped,
            } = capture.finish()?;
            if dropped > 0 || unclosed_flows > 0 {
                eprintln!(
                    "tcpstall: warning: the capture in {} is incomplete: {dropped} packets \
                     dropped, {unclosed_flows} connections not seen closing",
                    file.display()
                );
            }
            Some(CaptureReport {
                file: file.clone(),
                packets,
                flows,
                unclosed_flows,
                dropped,
            })
        }
        _ => None,
    };
    let unexpected = rows.iter().any(|r| r.stalled && !r.expected_stall);
    let report = LabReport {
        kernel_summary: kernel.summary_line(),
        kernel,
        rows,
        capture,
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        print_table(&mut out, &report)
    }
    .context("cannot write the results to standard output")?;
    Ok(if unexpected {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

fn settings_of(args: &LabArgs) -> anyhow::Result<RunSettings> {
    check_range("--requests", args.requests, 1, 100_000)?;
    check_range("--connections", args.connections, 1, 10_000)?;
    check_range("--writes", args.writes, 1, 1_000)?;
    check_range("--parallel", args.parallel, 1, 64)?;
    check_range("--row-timeout", args.row_timeout as usize, 1, 3_600)?;
    if let Some(mss) = args.mss {
        // Linux refuses TCP_MAXSEG outside [TCP_MIN_MSS, MAX_TCP_WINDOW] (do_tcp_setsockopt).
        check_range("--mss", mss as usize, 88, 32_767)?;
    }
    Ok(RunSettings {
        requests: args.requests,
        size: args.size,
        mss: args.mss,
        stream_connections: args.connections,
        stream_writes: args.writes,
        stream_parallel: args.parallel,
        row_timeout: Duration::from_secs(args.row_timeout),
    })
}

fn check_range(flag: &str, value: usize, min: usize, max: usize) -> anyhow::Result<()> {
    if value < min || value > max {
        bail!("{flag} {value} is out of range: use a value from {min} to {max}");
    }
    Ok(())
}

fn check_size(selected: &[Variant], size: usize) -> anyhow::Result<()> {
    for variant in selected {
        let (min, max) = variant.scenario.size_range();
        if size < min || size > max {
            bail!(
                "--size {size} is out of range for the {} scenario: use {min} to {max} bytes \
                 (or pick other scenarios with --scenario)",
                variant.scenario.name()
            );
        }
    }
    Ok(())
}

/// The rows named by `--scenario` and `--variant`, in catalogue order.
fn select(args: &LabArgs) -> anyhow::Result<Vec<Variant>> {
    let mut scenarios = Vec::new();
    for name in &args.scenario {
        match scenarios::scenario_named(name) {
            Some(s) => scenarios.push(s),
            None => bail!(
                "unknown scenario `{name}`: known scenarios are {} (see `tcpstall lab --list`)",
                SCENARIOS.map(Scenario::name).join(", ")
            ),
        }
    }
    let in_scenario = |v: &Variant| scenarios.is_empty() || scenarios.contains(&v.scenario);
    let candidates: Vec<Variant> = CATALOGUE
        .iter()
        .filter(|v| in_scenario(v))
        .copied()
        .collect();
    for name in &args.variant {
        if !candidates.iter().any(|v| v.name == name) {
            let mut known: Vec<&str> = candidates.iter().map(|v| v.name).collect();
            known.dedup();
            bail!(
                "unknown variant `{name}`{}: known variants are {} (see `tcpstall lab --list`)",
                if scenarios.is_empty() {
                    String::new()
                } else {
                    format!(" for scenario {}", args.scenario.join(","))
                },
                known.join(", ")
            );
        }
    }
    Ok(candidates
        .into_iter()
        .filter(|v| args.variant.is_empty() || args.variant.iter().any(|n| n == v.name))
        .collect())
}

fn print_list(
    out: &mut impl Write,
    selected: &[Variant],
    settings: &RunSettings,
) -> io::Result<()> {
    writeln!(out, "A row is stalled when its median latency is >= 30 ms (40 ms delayed-ACK floor minus 10 ms).")?;
    for scenario in SCENARIOS {
        let rows: Vec<&Variant> = selected.iter().filter(|v| v.scenario == scenario).collect();
        if rows.is_empty() {
            continue;
        }
        writeln!(out, "\n{}: {}", scenario.name(), scenario.description())?;
        for v in rows {
            let size = settings.size.unwrap_or(v.size);
            let stall = if expected_stall(v, size, settings.mss.or(v.mss)) {
                "stalls"
            } else {
                "no stall"
            };
            writeln!(out, "  {:<18} {:<8} {}", v.name, stall, v.explanation)?;
        }
    }
    Ok(())
}

fn print_table(out: &mut impl Write, report: &LabReport) -> io::Result<()> {
    writeln!(out, "{}", report.kernel_summary)?;
    writeln!(
        out,
        "{:<10} {:<18} {:>5} {:>8} {:>8} {:>8} {:>7} {:<7} {:<8} why",
        "scenario",
        "variant",
        "req",
        "p50 ms",
        "p99 ms",
        "max ms",
        "seg/req",
        "stalled",
        "expected"
    )?;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    for r in &report.rows {
        let mut why = r.explanation.clone();
        if let (Some(share), Some(corked)) = (r.own_segment_share, r.autocorking_delta) {
            why = format!(
                "{:.0}% own segment, autocorked +{corked}; {why}",
                share * 100.0
            );
        }
        if let Some(inherited) = r.inherited {
            why = format!("inherited: {}; {why}", yes_no(inherited));
        }
        if !r.errors.is_empty() {
            why = format!("ERROR {}; {why}", r.errors.join("; "));
        }
        writeln!(
            out,
            "{:<10} {:<18} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:<7} {:<8} {why}",
            r.scenario,
            r.variant,
            r.requests,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.segments_per_request,
            yes_no(r.stalled),
            yes_no(r.expected_stall),
        )?;
    }
    if let Some(c) = &report.capture {
        writeln!(
            out,
            "capture: {} packets, {} connections written to {}",
            c.packets,
            c.flows,
            c.file.display()
        )?;
    }
    Ok(())
}
