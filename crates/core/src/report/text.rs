//! The terminal report: a summary a person reads in ten seconds, then per flow the stalls in
//! application terms with their fixes; `--flows` adds a per-flow table.

use std::fmt::Write as _;

use super::json::InputFacts;
use super::ms;
use crate::detect::verdict::{events_by_flow, explain, fixes, patterns, FlowSummary};
use crate::detect::{Analysis, StallKind};
use crate::flow::{ClientGuess, MssSource, Span};

/// Flows described in detail; the rest are counted (the JSON has them all).
const FLOWS_SHOWN: usize = 10;

/// The summary and the stalled flows.
pub fn summary(a: &Analysis, input: &InputFacts) -> String {
    let mut out = String::new();
    let span = a.span_ns.map(|(f, l)| l.since(f)).unwrap_or_default();
    let _ = writeln!(
        out,
        "{} packets ({} TCP), {} flows, {:.3} s of traffic",
        input.records.max(a.packets),
        a.packets,
        a.flows.len(),
        span.as_secs_f64()
    );
    if input.skipped.total() > 0 {
        let _ = writeln!(out, "skipped: {}", input.skipped.describe());
    }
    if a.packets == 0 && input.skipped.may_hold_tcp() > 0 {
        let _ = writeln!(
            out,
            "note: no TCP segment was read, and {} frames that may hold TCP were skipped (the \
             warnings above say why): capture where the traffic is not encrypted or tunnelled, \
             e.g. on the host itself",
            input.skipped.may_hold_tcp()
        );
    }
    let minor = a.counts.get(StallKind::NagleMinor);
    let _ = write!(out, "stalls: {}", a.counts.stalls_text());
    if minor > 0 {
        let _ = write!(
            out,
            " (and {minor} minor Nagle holds released by an ordinary ACK)"
        );
    }
    out.push('\n');
    let paced = a.counts.get(StallKind::NagleAckPaced);
    if paced > 0 {
        let _ = writeln!(
            out,
            "paced: {paced} flow sides whose small writes each waited one round trip for an ACK \
             (nagle_ack_paced: Nagle pacing a busy sender; not a 40 ms stall)"
        );
    }
    for (kind, reason, count) in a.undecided.entries() {
        let _ = writeln!(
            out,
            "undecided: {count} {} claims set apart, not counted: {}",
            kind.name(),
            reason.describe()
        );
    }
    let gappy = a.flows.iter().filter(|f| f.capture_gaps > 0).count();
    if gappy > 0 {
        let _ = writeln!(
            out,
            "note: {gappy} flows miss data in the capture (sequence gaps); stalls there may go \
             unseen: capture on the host itself, or with a larger buffer (tcpdump -B)"
        );
    }
    let _ = write!(out, "{}", guess_notes(&a.flows));
    if input.warnings > 0 {
        let _ = writeln!(
            out,
            "warnings: {} about the input (see above)",
            input.warnings
        );
    }
    for unreadable in &input.unreadable {
        let _ = writeln!(out, "not in this report: {unreadable}");
    }

    // Flows with stalls, and those whose writes were paced by ACKs.
    let mut stalled: Vec<&FlowSummary> = a
        .flows
        .iter()
        .filter(|f| f.counts.stalls() > 0 || f.counts.get(StallKind::NagleAckPaced) > 0)
        .collect();
    stalled.sort_by(|x, y| y.time_lost_ns.cmp(&x.time_lost_ns).then(x.id.cmp(&y.id)));
    let with_stalls = stalled.iter().filter(|f| f.counts.stalls() > 0).count();
    if with_stalls > 0 {
        let lost: Span = stalled.iter().map(|f| f.time_lost_ns).sum();
        let worst = stalled
            .iter()
            .map(|f| f.worst_stall_ns)
            .max()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "time lost: {} in {} of {} flows; longest stall {}",
            ms(lost),
            with_stalls,
            a.flows.len(),
            ms(worst)
        );
    }
    let by_flow = events_by_flow(&a.events);
    for f in stalled.iter().take(FLOWS_SHOWN) {
        out.push('\n');
        let latency = f
            .latency_us
            .map(|(p50, p99, _)| {
                format!(
                    ", p99 {} (p50 {})",
                    ms(Span::from_micros(u64::from(p99))),
                    ms(Span::from_micros(u64::from(p50)))
                )
            })
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}: {} requests, {}, {} lost, worst {}{latency}",
            f.label(),
            f.requests,
            f.counts.reported_text(),
            ms(f.time_lost_ns),
            ms(f.worst_stall_ns),
        );
        if let Some(guessed) = flow_guesses(f) {
            let _ = writeln!(out, "  ({guessed})");
        }
        let events = by_flow.get(&f.id).map(Vec::as_slice).unwrap_or_default();
        for p in patterns(events) {
            let _ = writeln!(out, "  {} x {}", p.count, explain(p.example));
            for (i, fix) in fixes(p.kind, p.held_side, Some(p.example))
                .iter()
                .enumerate()
            {
                let lead = if i == 0 { "  fix:" } else { "      " };
                let _ = writeln!(out, "{lead} {}. {fix}", i + 1);
            }
        }
    }
    if stalled.len() > FLOWS_SHOWN {
        let _ = writeln!(
            out,
            "\n... and {} more flows with stalls (--flows lists them, --json has every event)",
            stalled.len() - FLOWS_SHOWN
        );
    }
    let clean = a.flows.len() - stalled.len();
    if clean > 0 {
        let _ = writeln!(out, "\n{clean} flows without stalls");
    }
    out
}

/// What a flow's report rests on that the capture did not show: the client guessed (no SYN),
/// the MSS assumed (no SYN carrying it).
fn flow_guesses(f: &FlowSummary) -> Option<String> {
    let mut parts = Vec::new();
    if f.client_guess.is_guess() {
        parts.push(f.client_guess.describe().to_string());
    }
    for (i, who) in ["client", "server"].iter().enumerate() {
        match f.mss_source[i] {
            MssSource::Syn => {}
            MssSource::OwnSyn => parts.push(format!(
                "{who}'s MSS assumed {} B from its own SYN",
                f.mss[i]
            )),
            MssSource::Assumed => {
                parts.push(format!("{who}'s MSS assumed {} B (no SYN)", f.mss[i]))
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// One line per way clients were guessed and one for assumed MSS, over all flows.
fn guess_notes(flows: &[FlowSummary]) -> String {
    let mut out = String::new();
    for guess in [
        ClientGuess::SynAck,
        ClientGuess::ServicePort,
        ClientGuess::EphemeralPort,
        ClientGuess::FirstData,
    ] {
        let n = flows.iter().filter(|f| f.client_guess == guess).count();
        if n > 0 {
            let _ = writeln!(out, "note: {n} flows: {}", guess.describe());
        }
    }
    let assumed = flows
        .iter()
        .filter(|f| f.mss_source.iter().any(|m| *m != MssSource::Syn))
        .count();
    if assumed > 0 {
        let _ = writeln!(
            out,
            "note: {assumed} flows without a SYN carrying the MSS: MSS assumed (Ethernet's, \
             loopback's, or the largest segment seen); a write at or above it is not taken for \
             a small one"
        );
    }
    out
}

/// One column per kind, each as wide as its header and at least 4, each after a space.
fn kind_columns<T: std::fmt::Display>(cell: impl Fn(StallKind) -> T) -> String {
    let mut out = String::new();
    for kind in StallKind::ALL {
        let width = kind.info().column.len().max(4);
        let _ = write!(out, " {:>width$}", cell(kind));
    }
    out
}

/// `--flows`: one line per flow, naming the outer tunnel of flows that came in one after their
/// capture position.
pub fn flow_table_with_tunnels(a: &Analysis, outers: &crate::decode::OuterByFlow) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<47} {:>7} {:>6}{} {:>10} {:>9} {:>9} {:>7}  capture",
        "flow (client-server)",
        "packets",
        "reqs",
        kind_columns(|kind| kind.info().column),
        "lost ms",
        "p50 ms",
        "p99 ms",
        "retrans",
    );
    for f in &a.flows {
        let (p50, p99) = f
            .latency_us
            .map(|(p50, p99, _)| {
                (
                    format!("{:.1}", f64::from(p50) / 1e3),
                    format!("{:.1}", f64::from(p99) / 1e3),
                )
            })
            .unwrap_or(("-".into(), "-".into()));
        let mut guess = match f.client_guess {
            ClientGuess::Syn => String::new(),
            g => format!(", client by {}", g.name()),
        };
        if let Some(outer) = outers.get(
            (f.client.addr, f.client.port),
            (f.server.addr, f.server.port),
        ) {
            let _ = write!(guess, ", in {outer}");
        }
        let _ = writeln!(
            out,
            "{:<47} {:>7} {:>6}{} {:>10.1} {:>9} {:>9} {:>7}  {}{guess}",
            f.label(),
            f.packets,
            f.requests,
            kind_columns(|kind| f.counts.get(kind)),
            f.time_lost_ns.as_millis_f64(),
            p50,
            p99,
            f.retransmissions,
            f.capture_position(),
        );
    }
    out
}
