//! `tcpstall lab`: the source documents' experiments, reproduced on real kernel sockets over
//! loopback. The catalogue ([`scenarios::CATALOGUE`]) is data; [`runner`] runs a row with the
//! building blocks ([`server`], [`client`], [`write`](mod@write)) and [`measure`] judges it.
//!
//! A row is **stalled** when its median latency is at least 30 ms: the 40 ms floor of the Linux
//! delayed-ACK timer (`TCP_DELACK_MIN`) minus a 10 ms margin ([`measure::STALL_THRESHOLD_MS`]).
//! Over an emulated path (`--rtt`, [`path`]) the round trips the row needs without a timer
//! are added: RTT + 30 ms, or 2 RTT + 30 ms when Nagle holds a split message's tail.

pub mod client;
pub mod explain;
pub mod framing;
pub mod measure;
pub mod notes;
pub mod path;
pub mod runner;
pub mod scenarios;
pub mod server;
pub mod write;

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use self::explain::{expected_stall, row_name};
use self::path::{EmulatedPath, PathShape, TUN_NAME};
use self::runner::{round_trips, Row, RunSettings};
use self::scenarios::{ConnectionMode, Scenario, Variant, Workload, CATALOGUE, SCENARIOS};
use crate::capture::live::{CaptureSummary, LiveCapture};
use crate::kernel::KernelFacts;
use crate::Outcome;

/// Arguments of `tcpstall lab`.
#[derive(Args, Debug, Clone)]
#[command(
    after_help = "A row is stalled when its median latency is >= 30 ms: the 40 ms \
    delayed-ACK floor (TCP_DELACK_MIN) minus a 10 ms margin. Every server binds 127.0.0.1 \
    port 0; nothing leaves loopback.\n\nWith --rtt MS the client and the server run in two \
    network namespaces (tcpstall-lab-<pid>-client/-server, 169.254.77.1 and .2, deleted at \
    the end) joined by TUN devices and a relay that delays each packet by RTT/2 (needs \
    CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root). A row is then stalled when its p50 is \
    >= RTT + 30 ms, or 2 RTT + 30 ms for rows whose split message Nagle holds until the first \
    part is acknowledged (those cost 2 RTT even when the ACK is immediate)."
)]
pub struct LabArgs {
    /// Run only these scenarios (comma-separated or repeated); see --list.
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Run only these variants of the selected scenarios (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    pub variant: Vec<String>,
    /// Requests per row (1-100000; at least 3 when a keep-alive row is selected: a new
    /// connection starts in quick-ACK mode, so its first request is never held and the
    /// median must land on a later one); stream rows use --connections and --writes instead.
    #[arg(long, default_value_t = 20)]
    pub requests: usize,
    /// Payload size in bytes, replacing each row's own: echo line, HTTP body, memcached
    /// value, stream write. memcached's value-N rows then become one row named by the size
    /// (value-2400), as do quickack-N and nodelay-N.
    #[arg(long)]
    pub size: Option<usize>,
    /// TCP_MAXSEG on both ends (88-32767), e.g. 1460 to emulate a 1500-byte MTU on loopback.
    #[arg(long)]
    pub mss: Option<u32>,
    /// Write the lab's own traffic to this pcap file (needs CAP_NET_RAW); with --rtt, as
    /// the server's TUN device sees it (raw IP, link type 101). On loopback the capture holds
    /// the sender's GSO packets: one packet may carry several segments, so count segments as
    /// payload bytes split at the MSS (TCP_INFO's data_segments), not as packets.
    #[arg(long, value_name = "FILE.pcap")]
    pub capture: Option<PathBuf>,
    /// Print the catalogue with a description of each entry and exit (as JSON with --json).
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
    /// Run over an emulated path with this round-trip time in ms (1-400): client and server in
    /// their own network namespaces, packets delayed by a relay (needs root).
    #[arg(long, value_name = "MS")]
    pub rtt: Option<u64>,
    /// With --rtt: bottleneck rate of the path in Mbit/s (0.1-10000), both directions.
    #[arg(long, value_name = "MBIT", requires = "rtt")]
    pub rate: Option<f64>,
    /// With --rtt: one end of every row is a user-space TCP stack behaving like this system's
    /// (its delayed ACK, ACK frequency, Nagle); the other end stays this kernel.
    #[arg(long, value_enum, requires = "rtt")]
    pub peer: Option<crate::peer::profile::Profile>,
    /// With --peer: the end the peer plays.
    #[arg(long, value_enum, requires = "peer", default_value = "client")]
    pub peer_side: crate::peer::PeerSide,
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
    /// The emulated path of `--rtt`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
}

/// The emulated path a run used.
#[derive(Debug, Serialize)]
pub struct PathReport {
    /// Round-trip time added by the relay.
    pub rtt_ms: f64,
    /// Bottleneck rate, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<f64>,
    /// The client's namespace (deleted when the run ended).
    pub client_namespace: String,
    /// The server's namespace (deleted when the run ended).
    pub server_namespace: String,
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
    let mut settings = settings_of(args)?;
    let shape = path_shape_of(args)?;
    let selected = select(args)?;
    if let Some(size) = args.size {
        check_size(&selected, size)?;
    }
    if args.list {
        let mut out = std::io::stdout().lock();
        if args.json {
            serde_json::to_writer_pretty(&mut out, &list_report(&selected, &settings, shape))
                .map_err(io::Error::from)
                .and_then(|()| writeln!(out))
        } else {
            print_list(&mut out, &selected, &settings, shape)
        }
        .context("cannot write the catalogue to standard output")?;
        return Ok(Outcome::Done);
    }
    check_requests(&selected, args.requests)?;
    let kernel = KernelFacts::read();
    // Owns the namespaces: dropped (deleted) when this function returns, also on error.
    let emulated = match shape {
        Some(shape) => {
            let registry = Arc::new(Mutex::new(Vec::new()));
            path::delete_namespaces_on_signal(registry.clone())?;
            Some(EmulatedPath::create(shape, registry)?)
        }
        None => None,
    };
    settings.path = emulated.as_ref().map(|p| p.ends().clone());
    if args.peer.is_some() && args.peer_side == crate::peer::PeerSide::Server {
        bail!("--peer-side server is not built yet: use --peer-side client (the default)");
    }
    if let (Some(profile), Some(ends)) = (args.peer, &settings.path) {
        let peer = crate::peer::Peer::attach(profile, args.peer_side, ends)?;
        settings.peer = Some(Arc::new(peer));
    }
    let capture = match (&args.capture, &settings.path) {
        (Some(file), Some(ends)) => Some(LiveCapture::start_tun(file, &ends.server, TUN_NAME)?),
        (Some(file), None) => Some(LiveCapture::start_loopback(file)?),
        (None, _) => None,
    };
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
        path: settings.path.as_ref().map(|ends| PathReport {
            rtt_ms: ends.shape.rtt.as_secs_f64() * 1000.0,
            rate_mbit: ends.shape.rate_bps.map(|bps| bps as f64 / 1e6),
            client_namespace: ends.client.name().to_string(),
            server_namespace: ends.server.name().to_string(),
        }),
    };
    drop(emulated);
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        print_table(&mut out, &report)
    }
    .context("cannot write the results to standard output")?;
    drop(out);
    // The table (or JSON) above holds every row; the rows that failed are named again on
    // stderr, and the run exits 2 since their figures are incomplete.
    let failed: Vec<&Row> = report
        .rows
        .iter()
        .filter(|r| !r.errors.is_empty())
        .collect();
    for row in &failed {
        for error in &row.errors {
            eprintln!("tcpstall: {}/{}: {error}", row.scenario, row.variant);
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} rows ended with an error (listed above); their figures are incomplete",
            failed.len(),
            report.rows.len()
        );
    }
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
        path: None,
        peer: None,
    })
}

fn path_shape_of(args: &LabArgs) -> anyhow::Result<Option<PathShape>> {
    let Some(rtt) = args.rtt else {
        return Ok(None);
    };
    Ok(Some(PathShape {
        rtt: path::rtt_of(rtt)?,
        rate_bps: args.rate.map(path::rate_of).transpose()?,
    }))
}

fn check_range(flag: &str, value: usize, min: usize, max: usize) -> anyhow::Result<()> {
    if value < min || value > max {
        bail!("{flag} {value} is out of range: use a value from {min} to {max}");
    }
    Ok(())
}

/// Fewest requests that let a keep-alive row show a stall: the first data a connection
/// receives puts it in quick-ACK mode (`tcp_event_data_recv` with `icsk_ack.ato` still 0 calls
/// `tcp_incr_quickack`), so the first turn is ACKed at once; the stall shows from the second
/// turn on, once the receiver is in ping-pong mode. With 3 turns the median is a later one.
const MIN_KEEP_ALIVE_REQUESTS: usize = 3;

fn check_requests(selected: &[Variant], requests: usize) -> anyhow::Result<()> {
    let keep_alive = selected
        .iter()
        .any(|v| v.workload != Workload::Stream && v.connections == ConnectionMode::KeepAlive);
    if keep_alive && requests < MIN_KEEP_ALIVE_REQUESTS {
        bail!(
            "--requests {requests} is too few for keep-alive rows: a new connection starts in \
             quick-ACK mode, so its first request is never held for the delayed ACK and a \
             stall shows from the second request on; use --requests {MIN_KEEP_ALIVE_REQUESTS} \
             or more so that the median is a later request (the short variants, one \
             connection per request, work with any count)"
        );
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
            // Several scenarios share names (split, single, ...): list each once, in
            // catalogue order.
            let mut known: Vec<&str> = Vec::new();
            for v in &candidates {
                if !known.contains(&v.name) {
                    known.push(v.name);
                }
            }
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
    let mut rows: Vec<Variant> = Vec::new();
    let mut names: Vec<(Scenario, String)> = Vec::new();
    for v in candidates
        .into_iter()
        .filter(|v| args.variant.is_empty() || args.variant.iter().any(|n| n == v.name))
    {
        // With --size, memcached's value-100 ... value-4000 are all the same experiment,
        // value-<size>: run it once.
        let name = (v.scenario, row_name(&v, args.size));
        if !names.contains(&name) {
            names.push(name);
            rows.push(v);
        }
    }
    Ok(rows)
}

/// `lab --list --json`.
#[derive(Debug, Serialize)]
struct ListReport {
    /// When a row counts as stalled.
    stall_rule: String,
    scenarios: Vec<ListScenario>,
}

#[derive(Debug, Serialize)]
struct ListScenario {
    name: &'static str,
    description: &'static str,
    variants: Vec<ListVariant>,
}

#[derive(Debug, Serialize)]
struct ListVariant {
    name: String,
    size: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    mss: Option<u32>,
    expected_stall: bool,
    /// Round trips the exchange needs without a timer (1, or 2 when Nagle holds a tail).
    round_trips: u32,
    explanation: String,
}

/// When a row counts as stalled; `in_table` adds where the table marks the 2-RTT rows.
fn stall_rule(shape: Option<PathShape>, in_table: bool) -> String {
    match shape {
        None => "A row is stalled when its median latency is >= 30 ms (40 ms delayed-ACK floor minus 10 ms).".to_string(),
        Some(shape) => format!(
            "Over a {} ms RTT path a row is stalled when its median latency is >= RTT + 30 ms, \
             or 2 RTT + 30 ms when Nagle holds a split message's tail until the first part is \
             acknowledged{}.",
            shape.rtt.as_millis(),
            if in_table { " (marked 2 RTT below)" } else { "" }
        ),
    }
}

fn list_report(
    selected: &[Variant],
    settings: &RunSettings,
    shape: Option<PathShape>,
) -> ListReport {
    let scenarios = SCENARIOS
        .into_iter()
        .filter_map(|scenario| {
            let variants: Vec<ListVariant> = selected
                .iter()
                .filter(|v| v.scenario == scenario)
                .map(|v| {
                    let size = settings.size.unwrap_or(v.size);
                    let mss = settings.mss.or(v.mss);
                    ListVariant {
                        name: row_name(v, settings.size),
                        size,
                        mss,
                        expected_stall: expected_stall(v, size, mss),
                        round_trips: round_trips(v, size, mss),
                        explanation: explain::explanation(v, size, mss),
                    }
                })
                .collect();
            (!variants.is_empty()).then(|| ListScenario {
                name: scenario.name(),
                description: scenario.description(),
                variants,
            })
        })
        .collect();
    ListReport {
        stall_rule: stall_rule(shape, false),
        scenarios,
    }
}

fn print_list(
    out: &mut impl Write,
    selected: &[Variant],
    settings: &RunSettings,
    shape: Option<PathShape>,
) -> io::Result<()> {
    let list = list_report(selected, settings, shape);
    writeln!(out, "{}", stall_rule(shape, true))?;
    for scenario in &list.scenarios {
        writeln!(out, "\n{}: {}", scenario.name, scenario.description)?;
        for v in &scenario.variants {
            let stall = if v.expected_stall {
                "stalls"
            } else {
                "no stall"
            };
            let rounds = if shape.is_some() && v.round_trips == 2 {
                "2 RTT "
            } else {
                ""
            };
            writeln!(
                out,
                "  {:<18} {:>7} B {:<8} {rounds}{}",
                v.name, v.size, stall, v.explanation
            )?;
        }
    }
    Ok(())
}

fn print_table(out: &mut impl Write, report: &LabReport) -> io::Result<()> {
    writeln!(out, "{}", report.kernel_summary)?;
    if let Some(path) = &report.path {
        writeln!(
            out,
            "path: RTT {} ms{} between namespaces {} and {} (user-space relay over TUN, MTU 1500)",
            path.rtt_ms,
            path.rate_mbit
                .map(|r| format!(", {r} Mbit/s"))
                .unwrap_or_default(),
            path.client_namespace,
            path.server_namespace
        )?;
    }
    writeln!(
        out,
        "{:<10} {:<18} {:>7} {:>5} {:>8} {:>8} {:>8} {:>7} {:<7} {:<8} why",
        "scenario",
        "variant",
        "size B",
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
        if let Some(own) = r.own_packet_share {
            why = format!("{:.0}% of writes sent alone; {why}", own * 100.0);
        }
        if let Some(inherited) = r.inherited {
            why = format!("inherited: {}; {why}", yes_no(inherited));
        }
        if !r.errors.is_empty() {
            why = format!("ERROR {}; {why}", r.errors.join("; "));
        }
        writeln!(
            out,
            "{:<10} {:<18} {:>7} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:<7} {:<8} {why}",
            r.scenario,
            r.variant,
            r.size,
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
