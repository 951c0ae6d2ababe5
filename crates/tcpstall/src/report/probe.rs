//! `probe`'s report: the text for people and the JSON with the stable keys of
//! docs/JSON.md (`target`, `requests`, `p50_ms`, `p99_ms`, `max_ms`, `verdict`,
//! `culprit`, `stalls.{nagle_delayed_ack,cork_timer,rto,zero_window}`, `advice`, `confirmed`).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::detect::StallKind;
use crate::report::model::probe::{AckPaced, ProbeReport, Process, Source, Upstream};

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

/// `ack_paced`: the paced sides (capture), the writes the kernel kept back (socket), the
/// throughput, its estimate without the probe's holds, and the TCP_NODELAY re-run.
fn ack_paced_json(p: &AckPaced) -> Value {
    json!({
        "sides": p.sides.iter().map(|s| json!({
            "held_side": s.held.name(),
            "connections": s.connections,
            "holds": s.holds,
            "time_lost_ms": round3(s.time_lost.as_secs_f64() * 1e3),
        })).collect::<Vec<Value>>(),
        "held_writes": p.held_writes.0,
        "later_writes": p.held_writes.1,
        "requests_per_s": p.requests_per_s.map(f64::round),
        "requests_per_s_without_estimate": p.estimate_per_s.map(f64::round),
        "nodelay": p.nodelay.map(|n| json!({
            "batches": n.batches,
            "requests": n.requests,
            "requests_per_s": n.requests_per_s.map(f64::round),
            "paced_connections": n.paced_connections,
        })),
        "nodelay_gain_percent": p.gain_percent().map(|g| (g * 10.0).round() / 10.0),
    })
}

/// The pacing in words, one line each; nothing when none was seen. The text report and the
/// probe's page both show these.
pub(crate) fn describe_paced(p: &AckPaced) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &p.sides {
        let whose = match s.held {
            crate::Side::Client => {
                "the probe's own pipelined writes (as a client without TCP_NODELAY)"
            }
            crate::Side::Server => "the server's writes",
        };
        lines.push(format!(
            "nagle_ack_paced: {whose} waited for the ACK of the previous small segment at \
             least {} times on {} connection{}, {:.3} ms in all (the holds the capture proves)",
            s.holds,
            s.connections,
            if s.connections == 1 { "" } else { "s" },
            s.time_lost.as_secs_f64() * 1e3
        ));
    }
    let (held, all) = p.held_writes;
    if held > 0 {
        lines.push(format!(
            "socket: {held} of {all} writes after a batch's first were kept back by the kernel \
             (TCP_INFO notsent > 0 right after the write: Nagle, with a small segment in flight)"
        ));
    }
    match (p.requests_per_s, p.estimate_per_s) {
        (Some(now), Some(est)) => lines.push(format!(
            "throughput {now:.0} requests/s; without the probe's holds at most {est:.0}/s \
             (estimate: requests / (run time − the holds' time per connection))"
        )),
        (Some(now), None) if p.nodelay.is_some() => {
            lines.push(format!("throughput {now:.0} requests/s"))
        }
        _ => {}
    }
    if let (Some(run), Some(gain)) = (p.nodelay, p.gain_percent()) {
        let paced = run
            .paced_connections
            .map_or(String::new(), |n| format!(", {n} connections still paced"));
        lines.push(format!(
            "TCP_NODELAY re-run: {}, {:.0} requests/s ({gain:+.1} %{paced}){}",
            batches_text(run.batches, p.pipeline),
            run.requests_per_s.unwrap_or(0.0),
            if gain < 0.0 {
                ": slower, the holds gathered requests into fewer segments and the path's round \
                 trip is short"
            } else {
                ""
            }
        ));
    }
    match p.gain_percent() {
        Some(gain) if gain > 0.0 => lines.push(
            "a client pipelining like this without TCP_NODELAY pays it: set TCP_NODELAY on its \
             sockets, or write each batch in one call"
                .to_string(),
        ),
        Some(_) => lines.push(
            "here TCP_NODELAY did not help: on this short path the holds cost less than the \
             segments they saved; on a longer path each hold costs a round trip"
                .to_string(),
        ),
        None => {}
    }
    lines
}

/// `N requests`, or with --pipeline `N batches of P = R requests`: one wording everywhere.
pub(crate) fn batches_text(batches: usize, pipeline: usize) -> String {
    if pipeline > 1 {
        format!(
            "{batches} batches of {pipeline} = {} requests",
            batches * pipeline
        )
    } else {
        format!("{batches} requests")
    }
}

/// The report as text.
pub fn text(r: &ProbeReport) -> String {
    let d = &r.diagnosis;
    let mut out = String::new();
    // A run cut short says so beside its verdict: it exits 2 (an error) or 130 (Ctrl-C).
    let cut = if r.interrupted {
        " so far (interrupted by Ctrl-C)"
    } else if !r.errors.is_empty() {
        " so far (the run ended early: see the error below)"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "probe {}: {} of {} answered on {} connection{}; verdict: {}{cut}",
        r.target,
        r.requests,
        batches_text(r.requests_asked, r.pipeline),
        r.connections,
        if r.connections == 1 { "" } else { "s" },
        r.verdict()
    );
    let mut link = Vec::new();
    if let Some(ms) = r.connect_ms {
        link.push(format!("connect {ms:.3} ms"));
    }
    if let Some(ms) = r.min_rtt_ms {
        link.push(format!("min RTT {ms:.3} ms"));
    }
    if let Some(n) = r.retransmissions.filter(|n| *n > 0) {
        link.push(format!("{n} retransmissions"));
    }
    let _ = writeln!(
        out,
        "latency: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({})",
        r.latency.p50_ms,
        r.latency.p99_ms,
        r.latency.max_ms,
        link.join(", ")
    );
    if let Some(ct) = r.connect_times.filter(|c| c.waited_for_syn > 0) {
        let _ = writeln!(
            out,
            "connects: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms; {} of {} waited for a SYN \
             resend (not in the request latencies)",
            ct.latency.p50_ms, ct.latency.p99_ms, ct.latency.max_ms, ct.waited_for_syn, ct.connects
        );
    }
    if let Some(q) = &d.listen_queue {
        let _ = writeln!(out, "listen queue: {}", listen_queue_text(q));
    }
    let c = &d.counts;
    let _ = writeln!(
        out,
        "stalls on the probe's own connection{}: {} (minor Nagle holds {}); seen by {}",
        if r.connections == 1 { "" } else { "s" },
        StallKind::stalls()
            .map(|k| format!("{} {}", k.name(), c.get(k)))
            .collect::<Vec<_>>()
            .join(", "),
        c.get(StallKind::NagleMinor),
        source_text(&d.source)
    );
    if let Some(held) = d.upstream.as_ref().and_then(|u| u.held.as_ref()) {
        let _ = writeln!(
            out,
            "stalls behind the server: {} of {} slow requests had a write held upstream \
             (counted apart: the probe's connection ends at the server)",
            held.matched, held.slow
        );
    }
    if let Some(t) = &d.server_time {
        let rtt = t.round_trip_ms.map_or(String::new(), |ms| {
            format!(", the path's round trip {ms:.3} ms")
        });
        let _ = writeln!(
            out,
            "slow: the server's own time: p50 {:.1} ms, quickest {:.1} ms{rtt}; {}",
            t.p50_ms, t.quickest_ms, t.looked
        );
    }
    let paced = describe_paced(&r.ack_paced);
    if !paced.is_empty() {
        let _ = writeln!(out, "ACK pacing:");
        for line in &paced {
            let _ = writeln!(out, "  {line}");
        }
    }
    if d.verdict() == "stall" {
        // A timeout the capture shows as a handshake the server did not take is not put on
        // the network, though from the client's side it cannot be put on the server either.
        let handshake = d
            .example
            .as_ref()
            .and_then(|s| s.event.as_ref())
            .is_some_and(|e| e.handshake_not_taken.is_some());
        let none = if handshake {
            "none proven (the server's accept queue, or the path to it: see why)"
        } else {
            "none (the network)"
        };
        let _ = writeln!(out, "culprit: {}", d.culprit.map_or(none, |s| s.name()));
    }
    if !d.causes.is_empty() {
        let list: Vec<String> = d
            .causes
            .iter()
            .map(|c| {
                let times = super::counted(c.count, "time", "times");
                format!("{} ({times}, {:.1} ms lost)", c.kind, c.lost_ms)
            })
            .collect();
        let _ = writeln!(out, "causes, by time lost: {}", list.join(", then "));
    }
    if let Some(why) = &d.explanation {
        let _ = writeln!(out, "why: {why}");
    }
    for cause in d.causes.iter().skip(1) {
        let _ = writeln!(out, "also ({}): {}", cause.kind, cause.explanation);
    }
    if !d.evidence.is_empty() {
        let _ = writeln!(out, "evidence (one stalled turn):");
        for line in &d.evidence {
            let arrow = match line.from {
                crate::Side::Client => "client -> server",
                crate::Side::Server => "server -> client",
            };
            let _ = writeln!(
                out,
                "  {:>+10.3} ms  {arrow}  {:>6} B  {}",
                line.offset_ms, line.bytes, line.what
            );
        }
    }
    if let Some(hop) = &d.hop {
        let _ = writeln!(out, "where: {hop}");
    }
    if !d.advice.is_empty() {
        let _ = writeln!(out, "advice:");
        for (i, a) in d.advice.iter().enumerate() {
            let _ = writeln!(out, "  {}. {a}", i + 1);
        }
    }
    if let Some(conf) = &r.confirmation {
        let verdict = match conf.confirmed {
            Some(true) if conf.stalls + conf.slow > 0 => format!(
                "confirmed: the stall vanished but for {}, as few as a socket-only view cannot \
                 tell from the server pausing",
                super::counted(conf.stalls.max(conf.slow), "request", "requests")
            ),
            Some(true) => "confirmed: the stall vanished".to_string(),
            Some(false) => {
                "NOT confirmed: the stall stayed, so the diagnosis is in doubt".to_string()
            }
            None if conf.untested.is_some() => format!(
                "tested: {}; not tested: {}",
                conf.tested.as_deref().unwrap_or("-"),
                conf.untested.as_deref().unwrap_or("-")
            ),
            None => format!(
                "undecided: {}",
                conf.undecided.as_deref().unwrap_or("no answer")
            ),
        };
        let _ = writeln!(
            out,
            "confirmation: {} with {}: {}, {} slower than the quickest before by a stall's \
             time, p50 {:.3} ms; {verdict}",
            super::counted(conf.requests as u64, "request", "requests"),
            conf.remedy.describe(),
            super::counted(conf.stalls, "stall", "stalls"),
            super::counted(conf.slow, "request", "requests"),
            conf.p50_ms
        );
    }
    if r.confirmation.is_none() && r.interrupted {
        // Ctrl-C came before the re-run: nothing is known of the stall's kind from it.
        let _ = writeln!(
            out,
            "confirmation: not run (interrupted by Ctrl-C before the re-run)"
        );
    } else if r.confirmation.is_none() && d.verdict() == "stall" && !d.confirmation_not_run {
        let _ = writeln!(
            out,
            "confirmation: none (the client-side re-run tests a Nagle hold released by a delayed \
             ACK; this stall is another kind)"
        );
    }
    for note in &r.notes {
        let _ = writeln!(out, "note: {note}");
    }
    for err in &r.errors {
        let _ = writeln!(out, "error: {err}");
    }
    out
}

/// The `upstream` object: what was found behind the server.
fn upstream_json(u: &Upstream) -> Value {
    let process = |p: &Process| json!({"pid": p.pid, "command": p.command, "runtime": p.runtime});
    let held = u.held.as_ref();
    json!({
        "proxy": u.proxy.as_ref().map(process),
        "backend": held.and_then(|h| h.backend.as_ref()).map(|b| json!({
            "pid": b.process.pid,
            "command": b.process.command,
            "runtime": b.process.runtime,
            "nodelay": b.nodelay,
        })),
        "address": held.map(|h| h.address.to_string()),
        "writes": held.map(|h| h.example.writes.clone()),
        "delay_ms": u.delay_ms().map(round3),
        "peer_stack": u.peer_stack().map(|s| s.name()),
        "held_requests": held.map(|h| h.matched),
        "slow_requests": held.map(|h| h.slow).or(u.timer.as_ref().map(|t| t.slow)),
        "timer": u.timer.as_ref().map(|t| json!({
            "name": t.timer.name,
            "stack": t.timer.stack,
            "mode_ms": round3(t.mode_ms),
            "low_ms": round3(t.low_ms),
            "high_ms": round3(t.high_ms),
            "quickest_ms": round3(t.quickest_ms),
            "reference": if t.from_round_trip { "round_trip" } else { "quickest" },
            "in_mode": t.in_mode,
            "slow": t.slow,
            "requests": t.requests,
        })),
        "unwatched": if held.is_none() { u.unwatched.as_deref() } else { None },
        "fix": u.advice(),
    })
}

fn source_text(source: &Source) -> String {
    match source {
        Source::Capture { interface, .. } => format!("a capture on {interface}"),
        Source::Socket { .. } => "the probe's socket only (weaker, see the note)".to_string(),
    }
}

/// The server's listening socket in a line.
fn listen_queue_text(q: &crate::report::model::probe::ListenQueue) -> String {
    let count = |n: Option<u64>| n.map_or("?".to_string(), |n| n.to_string());
    format!(
        "{} (pid {}) on {}: backlog {}{}, queued {} before, {} at most, {} after; \
         ListenOverflows +{}, ListenDrops +{} (its network namespace)",
        q.command,
        q.pid,
        q.address,
        q.backlog,
        q.somaxconn
            .map_or(String::new(), |m| format!(" (somaxconn {m})")),
        q.queued[0],
        q.queued[1],
        q.queued[2],
        count(q.overflows),
        count(q.drops)
    )
}

/// The report as JSON (one object, one line).
pub fn json(r: &ProbeReport) -> String {
    let d = &r.diagnosis;
    let c = &d.counts;
    let (source, interface, dropped, reason) = match &d.source {
        Source::Capture { interface, dropped } => {
            ("capture", Some(interface.as_str()), Some(*dropped), None)
        }
        Source::Socket { reason } => ("socket", None, None, Some(reason.as_str())),
    };
    let example = d.example.as_ref();
    let event = example.and_then(|s| s.event.as_ref());
    let evidence = example.map(|s| {
        json!({
            "kind": s.kind.name(),
            "held_side": s.held.name(),
            "delay_ms": round3(s.delay_ns as f64 / 1e6),
            "ack_delay_ms": event.and_then(|e| e.finding.ack_delay_ns).map(|span| round3(span.as_millis_f64())),
            "held_writes": event.map(|e| e.writes.clone()),
            "mss": event.map(|e| e.mss),
            "peer_stack": event.and_then(|e| e.peer_stack).map(|p| p.name()),
            "handshake_not_taken": event.and_then(|e| e.handshake_not_taken).map(|h| json!({
                "by": h.by_name(),
                "proof": h.proof_name(),
            })),
            "segments": d.evidence.iter().map(|l| json!({
                "t_ms": round3(l.offset_ms),
                "from": l.from.name(),
                "bytes": l.bytes,
                "what": l.what,
            })).collect::<Vec<Value>>(),
        })
    });
    let confirmation = r.confirmation.as_ref().map(|conf| {
        json!({
            "remedy": conf.remedy.name(),
            "requests": conf.requests,
            "stalls": conf.stalls,
            "slow_requests": conf.slow,
            "p50_ms": round3(conf.p50_ms),
            "undecided": conf.undecided,
            "tested": conf.tested,
            "untested": conf.untested,
        })
    });
    let upstream = d.upstream.as_ref().map(upstream_json);
    let causes: Vec<Value> = d
        .causes
        .iter()
        .map(|c| {
            json!({
                "kind": c.kind,
                "count": c.count,
                "lost_ms": round3(c.lost_ms),
                "explanation": c.explanation,
                "advice": c.advice,
            })
        })
        .collect();
    let server_time = d.server_time.as_ref().map(|t| {
        json!({
            "p50_ms": round3(t.p50_ms),
            "quickest_ms": round3(t.quickest_ms),
            "round_trip_ms": t.round_trip_ms.map(round3),
            "looked": t.looked,
        })
    });
    let listen_queue = d.listen_queue.as_ref().map(|q| {
        json!({
            "pid": q.pid,
            "command": q.command,
            "address": q.address.to_string(),
            "backlog": q.backlog,
            "queued_before": q.queued[0],
            "queued_max": q.queued[1],
            "queued_after": q.queued[2],
            "somaxconn": q.somaxconn,
            "listen_overflows": q.overflows,
            "listen_drops": q.drops,
            "blamed": q.blamed,
        })
    });
    let value = json!({
        "target": r.target,
        "requests": r.requests,
        "requests_asked": r.requests_asked,
        "connections": r.connections,
        "reconnects": r.reconnects,
        "interrupted": r.interrupted,
        "p50_ms": round3(r.latency.p50_ms),
        "p99_ms": round3(r.latency.p99_ms),
        "max_ms": round3(r.latency.max_ms),
        "verdict": r.verdict(),
        "http_errors": r.http_errors.iter().map(|(status, count)| json!({"status": status, "count": count})).collect::<Vec<Value>>(),
        "culprit": d.culprit.map(|s| s.name()),
        "stalls": c,
        "pipeline": r.pipeline,
        "ack_paced": ack_paced_json(&r.ack_paced),
        "advice": d.advice,
        "confirmed": r.confirmation.as_ref().and_then(|conf| conf.confirmed),
        "confirmation": confirmation,
        "explanation": d.explanation,
        "evidence": evidence,
        "hop": d.hop,
        "upstream": upstream,
        "undecided": d.undecided,
        "causes": causes,
        "server_time": server_time,
        "evidence_source": source,
        "interface": interface,
        "capture_dropped": dropped,
        "no_capture_reason": reason,
        "connect_ms": r.connect_ms.map(round3),
        "connect_times": r.connect_times.map(|c| json!({
            "connects": c.connects,
            "p50_ms": round3(c.latency.p50_ms),
            "p99_ms": round3(c.latency.p99_ms),
            "max_ms": round3(c.latency.max_ms),
            "waited_for_syn": c.waited_for_syn,
        })),
        "listen_queue": listen_queue,
        "runtime": d.runtime,
        "min_rtt_ms": r.min_rtt_ms.map(round3),
        "retransmissions": r.retransmissions,
        "notes": r.notes,
        "errors": r.errors,
    });
    format!("{value}\n")
}
