//! `tcpstall lab`: the experiments of the source documents (docs/SOURCES.md: "document 000" to
//! "document 004" in the comments), reproduced on real kernel sockets over
//! loopback. The catalogue (`scenarios.rs`) is data: each row names a workload described once
//! (`workload.rs`) and the socket options and write strategy it varies, and states the wire
//! outcome it expects (`expect.rs`) with its explanation (`explain.rs`). `runner.rs` runs a row
//! with the building blocks (servers, [`client`], write strategies) and [`measure`] judges it;
//! `crate::report::lab` renders the results and the `--list` catalogue.
//!
//! A row is **stalled** when its median latency is at least 30 ms: the 40 ms floor of the Linux
//! delayed-ACK timer (`TCP_DELACK_MIN`) minus a 10 ms margin (`tcp_rules::STALL_THRESHOLD`).
//! Over an emulated path (`--rtt`, `path.rs`) the round trips the row needs without a timer
//! are added: RTT + 30 ms, or 2 RTT + 30 ms when Nagle holds a split message's tail.

pub mod client;
pub(crate) mod estimate;
pub(crate) mod expect;
pub(crate) mod explain;
pub(crate) mod interrupt;
pub use interrupt::wait_if_ending_on_signal;
pub(crate) mod listing;
pub(crate) mod own_traffic;
pub(crate) mod path;
pub(crate) mod runner;
pub(crate) mod scenarios;
pub(crate) mod serve;
pub(crate) mod server;
pub(crate) mod workload;

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};

use self::expect::SegmentRules;
use self::own_traffic::{CaptureFile, OwnTraffic, RowVerdicts};
use self::path::{EmulatedPath, PathShape};
use self::runner::{RowResult, RunSettings};
use self::scenarios::{ConnectionMode, Scenario, Variant, CATALOGUE, SCENARIOS};
use crate::capture::live::CaptureSummary;
use crate::host::kernel::KernelFacts;
use crate::report;
pub(crate) use crate::report::model::lab::{CaptureReport, LabReport, PathReport};
use crate::Outcome;

pub use crate::args::lab::{CaptureAt, LabArgs};

/// Runs the lab.
pub fn run(args: &LabArgs) -> anyhow::Result<Outcome> {
    let mut settings = settings_of(args);
    let shape = path_shape_of(args);
    let selected = selected_rows(args)?;
    if args.serve {
        let kernel = KernelFacts::read();
        let selected = without_delack_rows_unless_capped(selected, &mut settings, &kernel);
        return serve::serve(&selected, &settings, args.port.unwrap_or(0));
    }
    if args.list {
        return write_catalogue(args, &selected, &settings, shape);
    }
    check_requests(&selected, args.requests)?;
    let kernel = KernelFacts::read();
    let selected = rows_to_run(selected, &mut settings, &kernel, args);
    // Ctrl-C keeps the rows finished: the signals are waited for in a thread of their own,
    // set up before any other thread starts.
    let shared = SharedWithSignals::default();
    let progress = progress_bar(args, selected.len());
    print_rows_on_signal(&shared, &kernel, &progress, args)?;
    // Owns the namespaces: dropped (deleted) when this function returns, also on error.
    let emulated = emulated_path(args, shape, &selected, &settings, shared.registry.clone())?;
    settings.path = emulated.as_ref().map(|p| p.ends().clone());
    attach_peer(args, &mut settings)?;
    shared.run_starts(&settings, selected.len());
    // The rows' own traffic through the detector; with --capture also to the file. The
    // ladders read a capture back: the user's, or one of the lab's own.
    let pictures = args.ladder || args.html.is_some();
    let spool = ladder_spool(args, pictures)?;
    let file = capture_file(args, spool.as_ref());
    let capture = OwnTraffic::start(file, settings.path.as_ref(), args.capture_at)?;
    let mut rows = run_rows(
        &selected,
        &settings,
        capture.as_ref(),
        &progress,
        &shared.progress,
    )?;
    runner::set_throughput_lost(&mut rows);
    let captured = capture.map(OwnTraffic::finish).transpose()?;
    let mut ladders = Vec::new();
    if let Some((_, verdicts)) = &captured {
        let ladder_file = file.path().filter(|_| pictures);
        ladders = judge_by_detector(&mut rows, verdicts, &settings, args, ladder_file)?;
    }
    let capture = capture_report(captured.map(|(summary, _)| summary), args.capture.as_ref());
    let unexpected = rows.iter().any(|r| r.stalled && !r.expected_stall);
    let report = lab_report(kernel, rows, capture, Some(&settings));
    drop(emulated);
    write_html(args, &report, &ladders)?;
    write_results(args, &report, &ladders)?;
    // The table (or JSON) above holds every row; the rows that failed are named again on
    // stderr, and the run exits 2 since their figures are incomplete.
    fail_on_failed_rows(&report)?;
    Ok(if unexpected {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// The rows named by `--scenario` and `--variant`, less those a `--peer` cannot play, checked
/// against `--size`.
fn selected_rows(args: &LabArgs) -> anyhow::Result<Vec<Variant>> {
    let mut selected = select(args)?;
    if args.peer.is_some() {
        selected = without_many_connection_rows(selected, !args.scenario.is_empty())?;
    }
    if args.peer.is_some() && args.peer_side == crate::peer::PeerSide::Server {
        selected = peer_server_rows(selected, !args.scenario.is_empty())?;
    }
    if let Some(size) = args.size {
        check_size(&selected, size)?;
    }
    Ok(selected)
}

/// `--list`: the catalogue of the selected rows on standard output (JSON with `--json`).
fn write_catalogue(
    args: &LabArgs,
    selected: &[Variant],
    settings: &RunSettings,
    shape: Option<PathShape>,
) -> anyhow::Result<Outcome> {
    let listing = listing::Listing::of(selected, settings, shape.map(|s| s.rtt));
    let mut out = std::io::stdout().lock();
    if args.json {
        report::lab::write_list_json(&mut out, &listing)
    } else {
        report::lab::write_list(&mut out, &listing, args.wide)
    }
    .context("cannot write the catalogue to standard output")?;
    Ok(Outcome::Done)
}

/// The selected rows this kernel, the peer and the place of the run allow, each left out said
/// on stderr; sets the run's delayed-ACK cap and the `rto_min` of the route rows.
fn rows_to_run(
    selected: Vec<Variant>,
    settings: &mut RunSettings,
    kernel: &KernelFacts,
    args: &LabArgs,
) -> Vec<Variant> {
    let selected = without_delack_rows_unless_capped(selected, settings, kernel);
    let selected = without_rows_the_peer_cannot_cap(selected, args);
    route_rows_where_possible(selected, settings, kernel, args)
}

/// What the run shares with the thread that waits for Ctrl-C: the namespaces to delete, the
/// rows finished so far, and the settings their report needs once the path is set up.
#[derive(Default)]
struct SharedWithSignals {
    registry: Arc<Mutex<Vec<String>>>,
    progress: interrupt::SharedProgress,
    settings: Arc<Mutex<Option<RunSettings>>>,
}

impl SharedWithSignals {
    /// The rows are about to run with `settings`: the report of an interruption has them, and
    /// counts `rows` to run.
    fn run_starts(&self, settings: &RunSettings, rows: usize) {
        if let Ok(mut late) = self.settings.lock() {
            *late = Some(settings.clone());
        }
        if let Ok(mut p) = self.progress.lock() {
            p.total = rows;
        }
    }
}

/// The bar counting the rows run (hidden with `--json`).
fn progress_bar(args: &LabArgs, rows: usize) -> ProgressBar {
    if args.json {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(rows as u64);
        if let Ok(style) = ProgressStyle::with_template("lab {bar:30} {pos}/{len} {msg}") {
            bar.set_style(style);
        }
        bar
    }
}

/// Waits for SIGINT, SIGTERM and SIGHUP in a thread of its own ([`interrupt::on_signal`]): on
/// the first, the rows finished so far are printed as the run would print them (table or
/// JSON), the interruption said.
fn print_rows_on_signal(
    shared: &SharedWithSignals,
    kernel: &KernelFacts,
    progress: &ProgressBar,
    args: &LabArgs,
) -> anyhow::Result<()> {
    let (kernel, settings, bar) = (kernel.clone(), shared.settings.clone(), progress.clone());
    let (json, wide) = (args.json, args.wide);
    interrupt::on_signal(
        shared.registry.clone(),
        shared.progress.clone(),
        Box::new(move |rows, interrupted| {
            bar.finish_and_clear();
            let settings = settings.lock().ok().and_then(|s| s.clone());
            let mut report = lab_report(kernel, rows, None, settings.as_ref());
            report.interrupted = Some(interrupted);
            let mut out = std::io::stdout().lock();
            let _ = if json {
                report::lab::write_json(&mut out, &report)
            } else {
                report::lab::write_table(&mut out, &report, wide)
            };
            let _ = out.flush();
        }),
    )
}

/// With `--rtt`: the emulated path, its namespaces listed in `registry`, after a line on
/// stderr estimating how long the run takes (not with `--json`).
fn emulated_path(
    args: &LabArgs,
    shape: Option<PathShape>,
    selected: &[Variant],
    settings: &RunSettings,
    registry: Arc<Mutex<Vec<String>>>,
) -> anyhow::Result<Option<EmulatedPath>> {
    let Some(shape) = shape else {
        return Ok(None);
    };
    if !args.json {
        eprintln!(
            "tcpstall: {}",
            estimate::line(selected, settings, shape.rtt)
        );
    }
    Ok(Some(EmulatedPath::create(shape, registry)?))
}

/// With `--peer` over the emulated path: the peer's stack, in the namespace of the end it plays.
fn attach_peer(args: &LabArgs, settings: &mut RunSettings) -> anyhow::Result<()> {
    if let (Some(profile), Some(ends)) = (args.peer, &settings.path) {
        let namespace = match args.peer_side {
            crate::peer::PeerSide::Client => &ends.client,
            crate::peer::PeerSide::Server => &ends.server,
        };
        let peer = crate::peer::Peer::attach(profile, args.peer_side, namespace)?;
        settings.peer = Some(Arc::new(peer));
    }
    Ok(())
}

/// With `--ladder` or `--html` but no `--capture`: a temporary file for the lab's own capture,
/// which the ladders read back.
fn ladder_spool(args: &LabArgs, pictures: bool) -> anyhow::Result<Option<tempfile::NamedTempFile>> {
    Ok(match (&args.capture, pictures) {
        (None, true) => Some(
            tempfile::Builder::new()
                .prefix("tcpstall-lab-")
                .suffix(".pcap")
                .tempfile()
                .context("cannot create a temporary capture file for the ladders")?,
        ),
        _ => None,
    })
}

/// Where the lab's own traffic is written: `--capture`'s file (required), else the `spool`
/// (if the lab can capture at all), else nowhere.
fn capture_file<'a>(
    args: &'a LabArgs,
    spool: Option<&'a tempfile::NamedTempFile>,
) -> CaptureFile<'a> {
    match (&args.capture, spool) {
        (Some(file), _) => CaptureFile::Required(file),
        (None, Some(tmp)) => CaptureFile::IfPossible(tmp.path()),
        (None, None) => CaptureFile::None,
    }
}

/// Runs the rows one after the other, each named on the progress bar while it runs and kept
/// for Ctrl-C once finished; `capture` learns each row's server port before its first connect.
fn run_rows(
    selected: &[Variant],
    settings: &RunSettings,
    capture: Option<&OwnTraffic>,
    progress: &ProgressBar,
    shared: &interrupt::SharedProgress,
) -> anyhow::Result<Vec<RowResult>> {
    let watch = |port: u16| {
        if let Some(capture) = capture {
            capture.row_started(port);
        }
    };
    // Progress on a terminal only (indicatif draws nothing when stderr is not a TTY).
    let mut rows = Vec::with_capacity(selected.len());
    for variant in selected {
        let name = format!("{}/{}", variant.scenario.name(), variant.name());
        progress.set_message(name.clone());
        if let Ok(mut p) = shared.lock() {
            p.running = Some(name.clone());
        }
        let row = runner::run_variant(variant, settings, &watch).context(name)?;
        progress.inc(1);
        if let Ok(mut p) = shared.lock() {
            p.running = None;
            p.rows.push(row.clone());
        }
        rows.push(row);
    }
    progress.finish_and_clear();
    Ok(rows)
}

/// Gives each row the detector's verdict on its own traffic (its kind checked only where the
/// capture point can see it); the ladders of the stalled rows, drawn from `ladder_file` when
/// pictures are asked for.
fn judge_by_detector(
    rows: &mut [RowResult],
    verdicts: &RowVerdicts,
    settings: &RunSettings,
    args: &LabArgs,
    ladder_file: Option<&std::path::Path>,
) -> anyhow::Result<Vec<(String, crate::ladder::Ladder)>> {
    for (index, row) in rows.iter_mut().enumerate() {
        row.detector = Some(verdicts.of(index, row.server_port));
        row.detector_kind_checked = row
            .detector_kind_checked
            .filter(|kind| own_traffic::seen_from(kind, settings, args.capture_at));
    }
    match ladder_file {
        Some(file) => row_ladders(rows, verdicts, file),
        None => Ok(Vec::new()),
    }
}

/// The report's account of `--capture FILE`; a capture that dropped packets (or, in the file,
/// saw connections not closing) is warned about on stderr.
fn capture_report(
    summary: Option<CaptureSummary>,
    file: Option<&PathBuf>,
) -> Option<CaptureReport> {
    match (summary, file) {
        (Some(summary), Some(file)) => {
            let CaptureSummary {
                packets,
                flows,
                unclosed_flows,
                dropped,
                ..
            } = summary;
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
        (Some(summary), None) => {
            if summary.dropped > 0 {
                eprintln!(
                    "tcpstall: warning: the detector column may miss stalls: the kernel dropped \
                     {} captured packets",
                    summary.dropped
                );
            }
            None
        }
        _ => None,
    }
}

/// `--html FILE`: the report as a page, with the stalled rows' ladders.
fn write_html(
    args: &LabArgs,
    report: &LabReport,
    ladders: &[(String, crate::ladder::Ladder)],
) -> anyhow::Result<()> {
    if let Some(path) = &args.html {
        let mut page = report::html::lab_page(report)?;
        for (row, ladder) in ladders {
            page.add_ladder(row.clone(), ladder);
        }
        page.write_to(path)?;
        eprintln!("tcpstall: HTML report written to {}", path.display());
    }
    Ok(())
}

/// The table (or JSON) of the rows on standard output, then with `--ladder` each stalled row's
/// ladder.
fn write_results(
    args: &LabArgs,
    report: &LabReport,
    ladders: &[(String, crate::ladder::Ladder)],
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        report::lab::write_json(&mut out, report)
    } else {
        report::lab::write_table(&mut out, report, args.wide)
    }
    .context("cannot write the results to standard output")?;
    if args.ladder {
        let style = report::style::Style::stdout();
        for (row, ladder) in ladders {
            writeln!(out, "\n{row}")?;
            report::ladder::write(&mut out, ladder, style)?;
        }
    }
    Ok(())
}

/// Names each row that ended with an error on stderr, and fails (exit 2) when there is any.
fn fail_on_failed_rows(report: &LabReport) -> anyhow::Result<()> {
    let failed: Vec<&RowResult> = report
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
    Ok(())
}

/// The report of a run (or of the rows finished when it was interrupted).
fn lab_report(
    kernel: KernelFacts,
    rows: Vec<RowResult>,
    capture: Option<report::model::lab::CaptureReport>,
    settings: Option<&RunSettings>,
) -> LabReport {
    LabReport {
        kernel_summary: kernel.summary_line(),
        kernel,
        rows,
        capture,
        path: settings.and_then(|settings| {
            settings.path.as_ref().map(|ends| PathReport {
                rtt_ms: ends.shape.rtt.as_secs_f64() * 1000.0,
                rate_mbit: ends.shape.rate_bps.map(|bps| bps as f64 / 1e6),
                lose_segment: ends.shape.lose_segment,
                client_namespace: ends.client.name().to_string(),
                server_namespace: ends.server.name().to_string(),
                peer: settings.peer.as_deref().map(crate::peer::Peer::report),
            })
        }),
        interrupted: None,
    }
}

/// Sets the run's delayed-ACK cap for the `delack-max` rows; on a kernel without
/// TCP_DELACK_MAX_US those rows are left out with a note rather than failing.
fn without_delack_rows_unless_capped(
    selected: Vec<Variant>,
    settings: &mut RunSettings,
    kernel: &KernelFacts,
) -> Vec<Variant> {
    if selected.iter().all(|v| v.delack_cap.is_none()) {
        return selected;
    }
    match runner::lab_delack_cap() {
        Ok(cap) => {
            settings.delack_cap = Some(cap);
            selected
        }
        Err(err) => {
            for v in selected.iter().filter(|v| v.delack_cap.is_some()) {
                eprintln!(
                    "tcpstall: note: {}/{} skipped: this kernel ({}) cannot cap its delayed \
                     ACK (TCP_DELACK_MAX_US, Linux 6.13 or later): {err}",
                    v.scenario.name(),
                    v.name_in_run(settings.size),
                    kernel.release
                );
            }
            selected
                .into_iter()
                .filter(|v| v.delack_cap.is_none())
                .collect()
        }
    }
}

/// The run's settings; clap has checked every range.
fn settings_of(args: &LabArgs) -> RunSettings {
    RunSettings {
        requests: args.requests,
        size: args.size,
        mss: args.mss,
        stream_connections: args.connections,
        stream_writes: args.writes,
        stream_parallel: args.parallel,
        row_timeout: Duration::from_secs(args.row_timeout),
        path: None,
        segments: SegmentRules::read(),
        delack_cap: None,
        peer: None,
        route_rto_min: None,
    }
}

fn path_shape_of(args: &LabArgs) -> Option<PathShape> {
    Some(PathShape {
        rtt: Duration::from_millis(args.rtt?),
        rate_bps: args.rate.map(|mbit| (mbit * 1_000_000.0) as u64),
        lose_segment: args.lose_segment,
    })
}

/// Without the `delack-max` rows whose cap a Windows or macOS peer would have to set: those
/// systems have no TCP_DELACK_MAX_US (the Linux profile honours it).
fn without_rows_the_peer_cannot_cap(selected: Vec<Variant>, args: &LabArgs) -> Vec<Variant> {
    let peer_side = match (args.peer, args.peer_side) {
        (Some(crate::peer::profile::Profile::Linux) | None, _) => return selected,
        (Some(_), crate::peer::PeerSide::Client) => crate::Side::Client,
        (Some(_), crate::peer::PeerSide::Server) => crate::Side::Server,
    };
    let (kept, left): (Vec<Variant>, Vec<Variant>) = selected
        .into_iter()
        .partition(|v| v.delack_cap != Some(peer_side));
    if !left.is_empty() {
        let names: Vec<String> = left
            .iter()
            .map(|v| format!("{}/{}", v.scenario.name(), v.name()))
            .collect();
        eprintln!(
            "tcpstall: note: {} left out: the peer's system has no TCP_DELACK_MAX_US to cap",
            names.join(", ")
        );
    }
    kept
}

/// Without the `route-*` rows that cannot run here, each said on stderr: on loopback (they
/// would change the host's routes, which the lab never does: they need `--rtt`'s namespaces),
/// on the side a `--peer` stack plays (it has no kernel route), and the `route-delack-max`
/// rows before Linux 6.7 (`rto_min` caps the delayed ACK since then).
fn route_rows_where_possible(
    selected: Vec<Variant>,
    settings: &mut RunSettings,
    kernel: &KernelFacts,
    args: &LabArgs,
) -> Vec<Variant> {
    settings.route_rto_min = runner::lab_route_rto_min(kernel);
    let peer_side = args.peer.map(|_| match args.peer_side {
        crate::peer::PeerSide::Client => crate::Side::Client,
        crate::peer::PeerSide::Server => crate::Side::Server,
    });
    let why_not = |v: &Variant| {
        let fix = v.route_fix?;
        if args.rtt.is_none() {
            Some(
                "they change a route, and the lab changes routes only in its own namespaces \
                  (--rtt, as root), never the host's"
                    .to_string(),
            )
        } else if peer_side == Some(fix.side) {
            Some("the peer's user-space stack has no kernel route to change".to_string())
        } else if fix.lever == scenarios::RouteLever::DelackMax && settings.route_rto_min.is_none()
        {
            Some(format!(
                "this kernel ({}) does not cap the delayed ACK by a route's rto_min (Linux 6.7 \
                 or later)",
                kernel.release
            ))
        } else {
            None
        }
    };
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    let mut kept = Vec::new();
    for v in selected {
        match why_not(&v) {
            None => kept.push(v),
            Some(reason) => {
                let name = format!("{}/{}", v.scenario.name(), v.name_in_run(settings.size));
                match reasons.iter_mut().find(|(r, _)| *r == reason) {
                    Some((_, names)) => names.push(name),
                    None => reasons.push((reason, vec![name])),
                }
            }
        }
    }
    for (reason, names) in reasons {
        eprintln!("tcpstall: note: {} left out: {reason}", names.join(", "));
    }
    kept
}

/// The rows a peer server can serve: request/response rows. The stream's sink counts arrivals
/// on kernel sockets, and the inherit rows ask what this kernel's listener passes on. Named
/// explicitly, they are an error; in the whole catalogue they are left out, saying so.
fn peer_server_rows(selected: Vec<Variant>, named: bool) -> anyhow::Result<Vec<Variant>> {
    let (served, left_out): (Vec<Variant>, Vec<Variant>) = selected
        .into_iter()
        .partition(|v| !v.workload.is_one_way() && v.scenario != Scenario::Inherit);
    if !left_out.is_empty() {
        let mut names: Vec<&str> = left_out.iter().map(|v| v.scenario.name()).collect();
        names.dedup();
        let names = names.join(" and ");
        if named || served.is_empty() {
            bail!(
                "--peer-side server serves the echo, http and memcached rows only; the {names} rows \
                 need the kernel's server: run them with --peer-side client"
            );
        }
        eprintln!(
            "tcpstall: --peer-side server: the {names} rows are left out (they need the \
             kernel's server)"
        );
    }
    Ok(served)
}

/// The rows a peer can play: not the concurrent rows, whose client drives many connections
/// from one thread on kernel sockets (the peer's stack drives one at a time, and its server
/// serves one at a time). Named explicitly, they are an error; in the whole catalogue they
/// are left out, saying so.
fn without_many_connection_rows(
    selected: Vec<Variant>,
    named: bool,
) -> anyhow::Result<Vec<Variant>> {
    let (kept, many): (Vec<Variant>, Vec<Variant>) = selected.into_iter().partition(|v| {
        v.workload
            .batches()
            .map_or(true, |(_, connections)| connections == 1)
    });
    if many.is_empty() {
        return Ok(kept);
    }
    if named || kept.is_empty() {
        bail!(
            "--peer drives one connection at a time: the concurrent rows need the kernel at \
             both ends; run them without --peer"
        );
    }
    eprintln!(
        "tcpstall: --peer: the concurrent rows are left out (they need the kernel at both ends)"
    );
    Ok(kept)
}

/// Fewest requests that let a keep-alive row show a stall: the first data a connection
/// receives puts it in quick-ACK mode (`tcp_event_data_recv` with `icsk_ack.ato` still 0 calls
/// `tcp_incr_quickack`), so the first turn is ACKed at once; the stall shows from the second
/// turn on, once the receiver is in ping-pong mode. With 3 turns the median is a later one.
const MIN_KEEP_ALIVE_REQUESTS: usize = 3;

fn check_requests(selected: &[Variant], requests: usize) -> anyhow::Result<()> {
    let keep_alive = selected
        .iter()
        .any(|v| !v.workload.is_one_way() && v.connections == ConnectionMode::KeepAlive);
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
        let (min, max) = variant.scenario.info().sizes;
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
                SCENARIOS.map(|info| info.name).join(", ")
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
        if !candidates.iter().any(|v| v.name() == *name) {
            // Several scenarios share names (split, single, ...): list each once, in
            // catalogue order.
            let mut known: Vec<String> = Vec::new();
            for v in &candidates {
                if !known.contains(&v.name()) {
                    known.push(v.name());
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
        .filter(|v| args.variant.is_empty() || args.variant.contains(&v.name()))
    {
        // With --size, memcached's value-100 ... value-4000 are all the same experiment,
        // value-<size>: run it once.
        let name = (v.scenario, v.name_in_run(args.size));
        if !names.contains(&name) {
            names.push(name);
            rows.push(v);
        }
    }
    Ok(rows)
}

/// The ladder of each stalled row: its latest stall, drawn from the capture in `file`.
fn row_ladders(
    rows: &[RowResult],
    verdicts: &RowVerdicts,
    file: &std::path::Path,
) -> anyhow::Result<Vec<(String, crate::ladder::Ladder)>> {
    let examples: Vec<(String, &crate::detect::StallEvent)> = rows
        .iter()
        .enumerate()
        .filter_map(|(index, row)| {
            let event = verdicts.example(index, row.server_port)?;
            Some((format!("{}/{}", row.scenario, row.variant), event))
        })
        .collect();
    let events: Vec<&crate::detect::StallEvent> = examples.iter().map(|(_, e)| *e).collect();
    let input = crate::capture::open_input(file)?;
    let ladders = crate::ladder::collect([input], &events)?;
    Ok(examples
        .into_iter()
        .zip(ladders)
        .filter_map(|((name, _), ladder)| Some((name, ladder?)))
        .collect())
}
