//! `tcpstall probe URL`: drives a real server the way a typical client does (Nagle on, the
//! kernel's delayed ACK, connections kept alive) and says whether it stalls, who causes it
//! and what to change.
//!
//! The probe watches its own traffic: with CAP_NET_RAW a live capture of its ports on the
//! route's interface feeds the detector `analyze` uses ([`capture`]); without it, the kernel's
//! receive timestamps on its own socket and TCP_INFO ([`socket`], [`stalls::from_turn`]), a
//! weaker view the report owns up to. A stall it can blame on Nagle × delayed ACK is then
//! re-run with the client-side remedy ([`confirm`]): it must vanish.
//!
//! On Windows and macOS the probe has only its socket's view, weaker still (the time a read
//! returns, no TCP_INFO), and nothing of the server's host; a re-run that needs TCP_QUICKACK
//! is not made. The report's notes say what it did not see.

pub(crate) mod captured;
pub(crate) mod client;
pub(crate) mod confirm;
pub(crate) mod diagnosis;
pub(crate) mod dialogue;
pub(crate) mod http;
mod interrupt;
pub(crate) mod line;
pub(crate) mod listen_queue;
pub(crate) mod memcached;
pub(crate) mod paced;
pub(crate) mod redis;
pub(crate) mod reply;
pub(crate) mod socket;
pub(crate) mod stalls;
pub(crate) mod target;
pub(crate) mod upstream;

// What needs Linux (a packet ring, /proc, sock_diag); elsewhere, in `elsewhere/`, what stands
// in for it: the probe then has its own socket's view only, and its report says so.
on_linux! {
    pub(crate) mod behind;
    pub(crate) mod capture;
    pub(crate) mod hops;
    pub(crate) mod this_host;
}
#[cfg(not(target_os = "linux"))]
#[path = "elsewhere/capture.rs"]
pub(crate) mod capture;
#[cfg(not(target_os = "linux"))]
#[path = "elsewhere/this_host.rs"]
pub(crate) mod this_host;

// TLS (rustls over ring) wherever ring's C part builds with the system's compiler: Linux and
// Windows; a macOS build is checked without Apple's SDK, so TLS stands aside there.
#[cfg(not(target_os = "macos"))]
pub(crate) mod tls;
#[cfg(target_os = "macos")]
#[path = "elsewhere/tls.rs"]
pub(crate) mod tls;

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};

use self::capture::OwnCapture;
use self::captured::{Captured, NoCapture};
use self::client::{Plan, RunLog};
use self::confirm::{Confirmation, Remedy};
use self::diagnosis::{Diagnosis, Source};
use self::dialogue::{Dialogue, Shape};
use self::socket::SocketMode;
use self::target::Target;
use self::upstream::Upstream;
use crate::latency::LatencySummary;
use crate::report;
pub use crate::report::model::probe::ProbeReport;
use crate::report::model::probe::ServerTime;
use crate::Outcome;

pub use crate::args::probe::{ProbeArgs, MAX_REQUESTS};

/// Exit status of a run cut short by Ctrl-C, as a shell reports SIGINT.
const EXIT_INTERRUPTED: i32 = 130;

pub(crate) use self::interrupt::interrupted;

/// Runs the probe and prints its report; errors after some requests were answered are
/// reported with the results, then returned (exit 2).
pub fn run(args: &ProbeArgs) -> anyhow::Result<Outcome> {
    let target = target::parse(&args.url)?;
    let dialogue = dialogue::build(&target, &shape_of(args)?)?;
    let addrs = resolve(&target)?;
    interrupt::catch()?;
    let max_time = Duration::from_secs_f64(args.max_time);
    let plan = plan_of(args, &target, addrs, max_time)?;
    let requests = args.requests as usize;
    let watch = this_host::ServerWatch::start(plan.addrs[0]);
    let Observed {
        log,
        stalls,
        outside,
        source,
        captured,
    } = observed_run(&plan, &dialogue, requests, usize::from(args.connections));
    let ServerSeen {
        proxy,
        queue,
        held,
        hops,
        connections_behind,
    } = watch.finish(&log);
    exit_unless_answered(&target, &log)?;
    let mut diagnosis =
        diagnosis::diagnose(stalls, &log, source, captured.as_ref(), proxy.as_ref());
    let connect_times = listen_queue::connect_times(&log);
    let queue_note = queue
        .and_then(|q| listen_queue::judge(&mut diagnosis, q, &outside, connect_times.as_ref()));
    let ack_paced = ack_pacing(args, &plan, &dialogue, &log, captured.as_ref(), max_time);
    let jiffy = this_host::jiffy();
    let (confirmation, remarks) = confirm_and_place(
        &plan,
        &dialogue,
        &log,
        Behind {
            proxy,
            held,
            hops,
            jiffy,
            connections_behind,
        },
        &mut diagnosis,
        max_time,
    );
    let ladder = example_ladder(&diagnosis, captured.as_ref());
    let latencies_ms: Vec<f64> = log
        .requests()
        .map(|t| t.latency.as_secs_f64() * 1e3)
        .collect();
    let mut report = assemble(&target, requests, &log, diagnosis, confirmation, jiffy);
    report.interrupted = interrupted();
    report.ack_paced = ack_paced;
    report.pipeline = usize::from(args.pipeline);
    if let Some(note) = outside_note(&outside, &log) {
        report.notes.insert(0, note);
    }
    report.notes.extend(remarks);
    if stalls::own_holds_unknown(&log) {
        report.notes.push(
            if args.pipeline > 1 {
                paced::HELD_UNKNOWN_NOTE
            } else {
                stalls::OWN_HOLDS_UNKNOWN_NOTE
            }
            .to_string(),
        );
    }
    report.notes.extend(queue_note);
    report.connect_times = connect_times;
    print_report(args, &report, ladder.as_ref(), captured.is_some())?;
    write_html(args, &report, &latencies_ms, ladder.as_ref())?;
    outcome_of(&report, requests)
}

/// The exchange the command line asks for: method, sizes, the request's split, the bytes of
/// `tcp://` and the pipeline's depth.
fn shape_of(args: &ProbeArgs) -> anyhow::Result<Shape> {
    Ok(Shape {
        method: args.method.clone(),
        body_size: args.body_size as usize,
        split_request: args.split_request,
        value_size: args.size as usize,
        send: args.send.as_deref().map(target::unescape).transpose()?,
        until: args.until.as_deref().map(target::unescape).transpose()?,
        pipeline: usize::from(args.pipeline),
    })
}

/// How the requests are made: to `addrs`, over TLS for the TLS targets, each request within
/// the timeout and the run within `max_time` from now.
fn plan_of(
    args: &ProbeArgs,
    target: &Target,
    addrs: Vec<SocketAddr>,
    max_time: Duration,
) -> anyhow::Result<Plan> {
    let tls = if target.protocol.is_tls() {
        Some((tls::client_config(args.insecure)?, args.insecure))
    } else {
        None
    };
    let timeout = Duration::from_secs_f64(args.timeout);
    Ok(Plan {
        addrs,
        host: target.host.clone(),
        tls,
        timeout,
        deadline: Instant::now() + max_time,
        mode: SocketMode::default(),
    })
}

/// What was seen of a server on this host once the requests ran ([`this_host`]).
pub(crate) struct ServerSeen {
    /// The owner of the target's listening socket, when it is on this host.
    proxy: Option<upstream::Process>,
    /// The server's accept queue before and after the requests.
    queue: Option<listen_queue::ListenQueue>,
    /// A hold seen on the proxy's connections upstream within the slow requests.
    held: Option<upstream::HeldUpstream>,
    /// Whether the proxy's connections behind it were captured, or why not.
    hops: Result<(), String>,
    /// The server's connections other than the probe's.
    connections_behind: Option<Vec<SocketAddr>>,
}

/// Ends the run when no request was answered: exit 130 after Ctrl-C, else the first error.
fn exit_unless_answered(target: &Target, log: &RunLog) -> anyhow::Result<()> {
    let answered = log.requests().count();
    if answered == 0 && interrupted() {
        eprintln!("tcpstall: probe interrupted before any request was answered");
        std::process::exit(EXIT_INTERRUPTED);
    }
    if answered == 0 {
        let first = log
            .errors
            .first()
            .cloned()
            .unwrap_or_else(|| "no request was answered".to_string());
        return Err(anyhow!(
            "probe of {}: {first}{}",
            target.display(),
            tls_port_hint(target, log)
        ));
    }
    Ok(())
}

/// Whether the server's ACKs paced the probe's own writes; when they held them (and no Ctrl-C
/// came), what the same run gains with TCP_NODELAY.
fn ack_pacing(
    args: &ProbeArgs,
    plan: &Plan,
    dialogue: &Dialogue,
    log: &RunLog,
    captured: Option<&Captured>,
    max_time: Duration,
) -> paced::AckPaced {
    let pipeline = usize::from(args.pipeline);
    let mut ack_paced = paced::of(log, captured, pipeline);
    let held_unknown = pipeline > 1 && stalls::own_holds_unknown(log);
    if (ack_paced.own_writes_held() || held_unknown) && !interrupted() {
        // The same run with TCP_NODELAY on the probe's sockets: the throughput it gains (or
        // loses: on a short path the holds also gather requests into fewer segments).
        let nodelay = Plan {
            mode: SocketMode {
                quickack: false,
                nodelay: true,
            },
            deadline: Instant::now() + max_time,
            ..plan.clone()
        };
        let rerun = observed_run(
            &nodelay,
            dialogue,
            args.requests as usize,
            usize::from(args.connections),
        );
        ack_paced.nodelay = Some(paced::nodelay_run(
            &rerun.log,
            rerun.captured.as_ref(),
            pipeline,
        ));
    }
    ack_paced
}

/// The ladder of the diagnosis's example stall, from the probe's own capture.
fn example_ladder(
    diagnosis: &Diagnosis,
    captured: Option<&Captured>,
) -> Option<crate::ladder::Ladder> {
    diagnosis
        .example
        .as_ref()
        .and_then(|s| s.event.as_ref())
        .zip(captured)
        .and_then(|(event, captured)| crate::ladder::around(event, &captured.raw))
}

/// The report on standard output (JSON with `--json`), then with `--ladder` the example
/// stall's ladder, or why there is none.
fn print_report(
    args: &ProbeArgs,
    report: &ProbeReport,
    ladder: Option<&crate::ladder::Ladder>,
    captured: bool,
) -> anyhow::Result<()> {
    let text = if args.json {
        report::probe::json(report)
    } else {
        report::fit_prose(report::probe::text(report))
    };
    report::print_stdout(&text)?;
    if args.ladder {
        let mut out = std::io::stdout().lock();
        match ladder {
            Some(ladder) => {
                writeln!(out)?;
                report::ladder::write(&mut out, ladder, report::style::Style::stdout())?;
            }
            None if !captured => writeln!(
                out,
                "\nno ladder: drawing it needs the capture of the probe's own traffic ({})",
                capture::NEEDS
            )?,
            None => {}
        }
    }
    Ok(())
}

/// `--html FILE`: the report as a page, with the latencies and the example stall's ladder.
fn write_html(
    args: &ProbeArgs,
    report: &ProbeReport,
    latencies_ms: &[f64],
    ladder: Option<&crate::ladder::Ladder>,
) -> anyhow::Result<()> {
    if let Some(path) = &args.html {
        let mut page = report::html::probe_page(report, latencies_ms)?;
        if let Some(ladder) = ladder {
            page.add_ladder(format!("{}-{}", ladder.client, ladder.server), ladder);
        }
        page.write_to(path)?;
        eprintln!("tcpstall: HTML report written to {}", path.display());
    }
    Ok(())
}

/// How the run ends once its report is out: exit 130 after Ctrl-C, an error (exit 2) when
/// requests failed or the server answered with HTTP errors, else whether a stall was found.
fn outcome_of(report: &ProbeReport, requests: usize) -> anyhow::Result<Outcome> {
    if report.interrupted {
        // Everything measured is printed; the status says the run did not finish.
        let _ = std::io::stdout().flush();
        std::process::exit(EXIT_INTERRUPTED);
    }
    if let Some(first) = report.errors.first() {
        return Err(anyhow!(
            "probe of {} ended early ({} of {} requests answered): {first}",
            report.target,
            report.requests,
            requests
        ));
    }
    if let Some((code, count)) = report.http_errors.first() {
        return Err(anyhow!(
            "probe of {}: the server answered with HTTP errors ({count} of {} requests {code}{}): \
             the answers are errors, not the page (see the notes)",
            report.target,
            report.requests,
            match report.http_errors.len() {
                1 => String::new(),
                n => format!(
                    ", and {} other status{}",
                    n - 1,
                    if n == 2 { "" } else { "es" }
                ),
            }
        ));
    }
    Ok(if report.verdict() == "stall" {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// A connection accepted and then ended or left silent before any answer, to a protocol in the
/// clear that has a TLS form: the port may speak TLS (redis-server's --tls-port drops
/// plain RESP without a word).
fn tls_port_hint(target: &Target, log: &RunLog) -> String {
    let tls_scheme = match target.protocol {
        target::Protocol::Redis => "rediss",
        target::Protocol::Http => "https",
        _ => return String::new(),
    };
    if log.connections.is_empty() || !log.turns.is_empty() {
        return String::new();
    }
    format!(" (if the port speaks TLS, write {tls_scheme}://…)")
}

/// What is known of the hops behind the server before the diagnosis places the hold.
struct Behind {
    /// The owner of the target's listening socket, when it is on this host.
    proxy: Option<upstream::Process>,
    /// A hold seen on the proxy's connections upstream within the slow requests.
    held: Option<upstream::HeldUpstream>,
    /// Whether the proxy's connections behind it were captured, or why not.
    hops: Result<(), String>,
    /// The running kernel's tick.
    jiffy: Duration,
    /// The server's connections other than the probe's, when it is on this host and its
    /// sockets could be listed.
    connections_behind: Option<Vec<SocketAddr>>,
}

/// Runs the confirmation the diagnosis calls for and decides whether the hold sits behind the
/// server: the latencies shaped like a delayed-ACK timer, or a hold seen on the proxy's
/// connection upstream, that our own remedy did not remove. Returns the confirmation and the
/// remarks for the notes.
fn confirm_and_place(
    plan: &Plan,
    dialogue: &Dialogue,
    log: &RunLog,
    seen: Behind,
    diagnosis: &mut Diagnosis,
    max_time: Duration,
) -> (Option<Confirmation>, Vec<String>) {
    if interrupted() {
        // Ctrl-C: no re-run; the diagnosis is what the requests so far show.
        return (None, Vec::new());
    }
    let latencies: Vec<Duration> = log.requests().map(|t| t.latency).collect();
    let hops = seen.hops;
    let behind = Upstream {
        timer: upstream::timer_mode(&latencies, upstream::round_trip(log), seen.jiffy),
        held: seen.held,
        proxy: seen.proxy,
        unwatched: match &hops {
            Ok(_) => Some(
                "no held write seen on the proxy's connections through this host's interfaces"
                    .to_string(),
            ),
            Err(why) => Some(why.clone()),
        },
    };
    let suspect_upstream = behind.timer.is_some() || behind.held.is_some();
    // Without a stall of its own, a run shaped like a timer is re-run with our ACKs at once
    // too: what that can test (that our delayed ACK is not what the answer waits for) is said.
    let upstream_example = || stalls::Stall {
        kind: crate::detect::StallKind::NagleDelayedAck,
        held: crate::flow::Side::Server,
        delay_ns: behind.delay_ms().map_or(0, |ms| (ms * 1e6) as u64),
        local_port: 0,
        ts_ns: 0,
        event: None,
    };
    let remedy = match &diagnosis.example {
        Some(example) => Remedy::for_stall(example).map(|remedy| (example.clone(), remedy)),
        None if suspect_upstream => Some((upstream_example(), Remedy::QuickAck)),
        None => None,
    };
    let mut remarks = Vec::new();
    let mut confirmation = match remedy {
        Some((example, remedy)) => match socket::cannot_apply(remedy.mode()) {
            Some(why) => {
                diagnosis.confirmation_not_run = true;
                remarks.push(format!(
                    "confirmation not run: {why}; to confirm, apply the advice and probe \
                     again, or probe from Linux"
                ));
                None
            }
            None => Some(confirm_with(
                plan, dialogue, log, &example, remedy, max_time,
            )),
        },
        None => None,
    };
    let stayed = confirmation
        .as_ref()
        .is_some_and(|c| c.confirmed == Some(false));
    if suspect_upstream && stayed && behind.held.is_none() {
        // No hold seen: a timer's shape alone proves nothing.
        let no_hop = seen.connections_behind.as_ref().is_some_and(Vec::is_empty);
        if no_hop || hops.is_ok() {
            let why = if no_hop {
                "the server has no connection behind it but the probe's (its sockets listed \
                 while the requests ran), so no write of a hop there can wait"
            } else {
                "no write was held on the server's connections behind it (captured on this \
                 host)"
            };
            remarks.push(format!(
                "the answers waited in a delayed-ACK timer's shape, but no hold is seen: not on \
                 this connection, and {why}; with our ACKs sent at once they waited as long: \
                 the server's own time"
            ));
            confirmation = None;
        } else {
            let settle = settle_text(behind.proxy.as_ref(), &hops);
            confirmation = None;
            diagnosis.suspect_upstream(behind, settle);
        }
        return (confirmation, remarks);
    }
    if suspect_upstream && stayed {
        if let Some(conf) = confirmation.as_mut() {
            conf.out_of_reach(&behind.hop_name());
        }
        diagnosis.blame_upstream(behind);
    } else {
        if diagnosis.example.is_none() {
            if let Some(conf) = confirmation.take() {
                // Our ACKs at once removed the wait (or the re-run could not tell): not a
                // hold behind the server, and none this connection's evidence names.
                remarks.push(format!(
                    "requests waited in a delayed-ACK timer's shape, but a re-run with {} \
                     {}: the wait is not placed behind the server; something on this \
                     connection that the evidence does not name as a hold may wait for our \
                     delayed ACK",
                    conf.remedy.describe(),
                    match conf.confirmed {
                        Some(true) => "removed it".to_string(),
                        _ => format!(
                            "could not tell ({})",
                            conf.undecided.as_deref().unwrap_or("no answer")
                        ),
                    }
                ));
            }
        }
        if let Some(hop) = confirmation.as_ref().and_then(held_behind_the_server) {
            diagnosis.hop = Some(hop);
        }
    }
    (confirmation, remarks)
}

/// What would settle a timer-shaped wait behind a server the probe cannot see into.
fn settle_text(server: Option<&upstream::Process>, hops: &Result<(), String>) -> String {
    match (server, hops) {
        (Some(p), Err(why)) => format!(
            "to settle it, let the probe see the connections of {} (pid {}) behind it ({why}): \
             run the probe with CAP_NET_RAW (as root), or `sudo tcpstall watch --kernel` while \
             it runs",
            p.command, p.pid
        ),
        _ => "to settle it, look where the server runs: run `tcpstall probe` on the server's \
              host, capture there (`sudo tcpstall watch`), or `sudo tcpstall watch --kernel` \
              there while the probe runs"
            .to_string(),
    }
}

/// Re-runs a few requests with `remedy` on a fresh connection and judges whether the stall of
/// `example` vanished.
fn confirm_with(
    plan: &Plan,
    dialogue: &Dialogue,
    first: &RunLog,
    example: &stalls::Stall,
    remedy: Remedy,
    max_time: Duration,
) -> Confirmation {
    let plan = Plan {
        mode: remedy.mode(),
        deadline: Instant::now() + max_time,
        ..plan.clone()
    };
    let Observed {
        log: rerun,
        stalls,
        source,
        ..
    } = observed_run(&plan, dialogue, confirm::REQUESTS, 1);
    let latencies: Vec<Duration> = rerun.requests().map(|t| t.latency).collect();
    // The quickest request of either run: the path and the server's own time, no timer (a new
    // connection's first request is never held at this end); the round trip when even it
    // waited (held behind the server, where the first request may wait too).
    let both: Vec<Duration> = first
        .requests()
        .chain(rerun.requests())
        .map(|t| t.latency)
        .collect();
    let round_trip = [first, &rerun]
        .into_iter()
        .filter_map(upstream::round_trip)
        .min();
    let baseline = upstream::baseline(&both, round_trip).map_or(Duration::ZERO, |(b, _)| b);
    confirm::judge(
        remedy,
        example,
        baseline,
        confirm::Rerun {
            stalls: &stalls,
            latencies: &latencies,
            errors: &rerun.errors,
            captured: matches!(source, Source::Capture { .. }),
        },
    )
}

/// Where the held write is when QUICKACK re-armed did not remove the stall: not waiting for
/// our ACK, so behind the server.
fn held_behind_the_server(conf: &Confirmation) -> Option<String> {
    (conf.confirmed == Some(false) && conf.remedy == Remedy::QuickAck).then(|| {
        format!(
            "with our ACKs sent at once the replies still paused ({} of {} requests a stall \
             slower): the held write does not wait for our ACK but sits behind the server. The \
             server is a proxy or sidecar whose own connection upstream holds it (that hop's \
             delayed ACK releases it), or it pauses between writes; this probe's connection \
             ends at that server, and `tcpstall watch` on its host sees the next hop",
            conf.slow.max(conf.stalls),
            conf.requests
        )
    })
}

/// The target's addresses.
fn resolve(target: &Target) -> anyhow::Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .with_context(|| format!("cannot resolve {} (check the host name)", target.host))?
        .collect();
    if addrs.is_empty() {
        return Err(anyhow!("{} resolved to no address", target.host));
    }
    Ok(addrs)
}

/// What one watched run gives.
struct Observed {
    log: RunLog,
    /// Stalls inside the timed requests: the verdict's.
    stalls: Vec<stalls::Stall>,
    /// Stalls outside them (TLS handshake, setup exchange, close): left out of the verdict.
    outside: Vec<stalls::Stall>,
    source: Source,
    captured: Option<Captured>,
}

/// One run of requests, watched: captured when the probe may, else from its socket.
fn observed_run(plan: &Plan, dialogue: &Dialogue, requests: usize, connections: usize) -> Observed {
    let capture = OwnCapture::start(plan.addrs[0]);
    let log = match &capture {
        Ok(cap) => client::run(plan, dialogue, requests, connections, &|port| {
            cap.watch(port)
        }),
        Err(_) => client::run(plan, dialogue, requests, connections, &|_| {}),
    };
    // A connection that ended in an error (a timeout, a reset) may never see the server's
    // FIN: waiting for it would add the capture's grace period after the timeout, so the
    // capture stops at once with what the kernel has queued.
    let ended = |cap: OwnCapture| {
        if log.errors.is_empty() {
            cap.finish()
        } else {
            cap.stop()
        }
    };
    let captured = match capture.map(ended) {
        Ok(Ok(captured)) => Ok(captured),
        Ok(Err(err)) => Err(format!("the capture failed: {err:#}")),
        Err(NoCapture::NoPermission) => Err("no CAP_NET_RAW to capture its own packets".into()),
        Err(NoCapture::Failed(why)) => Err(format!("no capture: {why}")),
    };
    let (stalls, source, captured) = match captured {
        Ok(captured) => {
            let stalls = stalls::from_capture(&captured.analysis.events, &log);
            let source = Source::Capture {
                interface: captured.interface.clone(),
                dropped: captured.dropped,
            };
            (stalls, source, Some(captured))
        }
        Err(reason) => (stalls::from_socket(&log), Source::Socket { reason }, None),
    };
    let (stalls, outside) = stalls::split_by_request(stalls, &log);
    Observed {
        log,
        stalls,
        outside,
        source,
        captured,
    }
}

/// Most stalls outside the timed requests described one by one in the note.
const OUTSIDE_SHOWN: usize = 3;

/// The note naming the stalls left out of the verdict because no timed request was waiting
/// on them.
fn outside_note(outside: &[stalls::Stall], log: &RunLog) -> Option<String> {
    use self::stalls::Position;
    // Connects that waited for a SYN resend have their own line (`connects:`).
    let real: Vec<&stalls::Stall> = outside
        .iter()
        .filter(|s| s.kind.is_stall() && s.kind != crate::detect::StallKind::SynRetry)
        .collect();
    if real.is_empty() {
        return None;
    }
    let described: Vec<String> = real
        .iter()
        .take(OUTSIDE_SHOWN)
        .map(|s| {
            let when = match stalls::position(s, log) {
                Position::BeforeRequests => {
                    "before its connection's first request (TCP or TLS handshake, setup exchange)"
                }
                Position::BetweenRequests => "between two requests",
                Position::AfterRequests | Position::InRequest => {
                    "after its connection's last answered request (closing)"
                }
            };
            format!(
                "{}: the {}'s data waited {:.1} ms (local port {}), {when}",
                s.kind.name(),
                s.held.name(),
                s.delay_ns as f64 / 1e6,
                s.local_port
            )
        })
        .collect();
    let more = match real.len().saturating_sub(OUTSIDE_SHOWN) {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    let count = match real.len() {
        1 => "1 stall".to_string(),
        n => format!("{n} stalls"),
    };
    Some(format!(
        "{count} outside the timed requests, left out of the verdict (no request was waiting \
         on the held write): {}{more}",
        described.join("; ")
    ))
}

/// HTTP 401 answers: the server wants credentials (or refused the URL's), and how to give
/// them.
fn unauthorized_note(target: &Target, log: &RunLog) -> Option<String> {
    let refused: Vec<_> = log
        .requests()
        .filter(|t| t.http_status == Some(401))
        .collect();
    let first = refused.first()?;
    let count = format!(
        "401 Unauthorized to {} of {} requests: the figures are those of its refusal",
        refused.len(),
        log.requests().count()
    );
    let mut note = if target.credentials.is_some() {
        format!(
            "the server refused the credentials of the URL ({count}): check the user and \
             password (in the URL, write @ : / % in them as %40 %3A %2F %25)"
        )
    } else {
        format!(
            "the server wants credentials ({count}): give them in the URL, {}://USER:PASSWORD@{}{} \
             (sent as HTTP Basic authentication)",
            target.protocol.scheme(),
            target.authority(),
            target.path
        )
    };
    if let Some(scheme) = first
        .auth_scheme
        .as_deref()
        .filter(|s| !s.eq_ignore_ascii_case("basic"))
    {
        note.push_str(&format!(
            "; it asks for {scheme} authentication, and the probe sends only Basic"
        ));
    }
    Some(note)
}

/// Gathers the figures of the run into the report.
fn assemble(
    target: &Target,
    requests_asked: usize,
    log: &RunLog,
    diagnosis: Diagnosis,
    confirmation: Option<Confirmation>,
    jiffy: Duration,
) -> ProbeReport {
    let latencies: Vec<Duration> = log.requests().map(|t| t.latency).collect();
    let latency = LatencySummary::of(&latencies);
    let infos: Vec<_> = log
        .connections
        .iter()
        .filter_map(|c| c.info_at_end)
        .collect();
    let mut notes = Vec::new();
    if let Source::Socket { reason } = &diagnosis.source {
        notes.push(format!(
            "weaker diagnosis ({reason}): the probe saw only {}, not the packets: no ACKs, no \
             segment sizes, no retransmissions or window updates. A reply arriving in parts 40 \
             ms apart is taken for a Nagle hold released by our delayed ACK, though a server \
             pausing between writes looks the same. {}",
            socket::VIEW,
            socket::FULLER_VIEW
        ));
    }
    if let Source::Capture { dropped, .. } = &diagnosis.source {
        if *dropped > 0 {
            notes.push(format!(
                "the kernel dropped {dropped} packets (of any port on the interface) from the \
                 capture's buffer: if some were the probe's, stalls may be missed"
            ));
        }
    }
    let rule = upstream::rule_text(jiffy);
    let mut diagnosis = diagnosis;
    if diagnosis.verdict() == "clean" && latency.p50_ms >= crate::latency::STALL_THRESHOLD_MS {
        let seen = match &diagnosis.source {
            Source::Capture { .. } => "this connection's packets (captured)",
            Source::Socket { .. } => socket::LOOKED,
        };
        let behind = if diagnosis.hop.is_some() {
            "; the time is spent at or behind the server (see where)"
        } else {
            ""
        };
        diagnosis.server_time = Some(ServerTime {
            p50_ms: latency.p50_ms,
            quickest_ms: latencies
                .iter()
                .min()
                .map_or(0.0, |d| d.as_secs_f64() * 1e3),
            round_trip_ms: upstream::round_trip(log).map(|d| d.as_secs_f64() * 1e3),
            looked: format!("no hold seen in {seen}, nor behind the server{behind}"),
        });
    }
    if diagnosis
        .upstream
        .as_ref()
        .is_some_and(|u| u.held.is_none())
    {
        notes.push(format!(
            "the stall behind the server is judged from timing: {rule}"
        ));
    }
    if let Some(note) = unauthorized_note(target, log) {
        notes.insert(0, note);
    }
    let mut http_errors: Vec<(u16, usize)> = Vec::new();
    for code in log
        .requests()
        .filter_map(|t| t.http_status)
        .filter(|c| *c >= 400)
    {
        match http_errors.iter_mut().find(|(c, _)| *c == code) {
            Some((_, n)) => *n += 1,
            None => http_errors.push((code, 1)),
        }
    }
    http_errors.sort_by_key(|(code, n)| (std::cmp::Reverse(*n), *code));
    let failed: usize = http_errors
        .iter()
        .filter(|(code, _)| *code != 401)
        .map(|(_, n)| n)
        .sum();
    if let Some((code, _)) = http_errors.iter().find(|(code, _)| *code != 401) {
        let mut note = format!(
            "the server answered {failed} of {} requests with an error status (first: {code}): \
             the figures are those of its error answer; check the URL and --method",
            log.requests().count()
        );
        if log.requests().any(|t| t.https_port) {
            note.push_str(&format!(
                "; it says the port speaks TLS: write https://{}{}",
                target.authority(),
                target.path
            ));
        }
        notes.push(note);
    }
    let answered = log.requests().count();
    if log.reconnects > 0 {
        notes.push(format!(
            "the server closed {} kept-alive connection{} after an answer without saying so (no \
             `Connection: close`): the probe sent the next request again on a new connection \
             each time, as curl and Python's http.client do",
            log.reconnects,
            if log.reconnects == 1 { "" } else { "s" }
        ));
    }
    if log.closed_by_server + log.reconnects > answered / 2 && answered > 2 {
        notes.push(format!(
            "the server closed the connection after most answers ({} of {}): a new \
             connection starts in quick-ACK mode, so a Nagle stall may not show",
            log.closed_by_server + log.reconnects,
            answered
        ));
    }
    ProbeReport {
        target: target.display(),
        requests: latencies.len(),
        requests_asked,
        connections: log.connections.len(),
        reconnects: log.reconnects,
        interrupted: false,
        http_errors,
        latency,
        diagnosis,
        confirmation,
        connect_ms: log
            .connections
            .first()
            .map(|c| c.connect.as_secs_f64() * 1e3),
        min_rtt_ms: infos.first().map(|i| f64::from(i.min_rtt) / 1e3),
        retransmissions: (!infos.is_empty())
            .then(|| infos.iter().map(|i| u64::from(i.total_retrans)).sum()),
        notes,
        errors: log.errors.clone(),
        ack_paced: paced::of(log, None, 1),
        pipeline: 1,
        connect_times: None,
    }
}
