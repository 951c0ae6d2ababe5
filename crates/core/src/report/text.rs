//! The terminal report: a summary a person reads in ten seconds, then per flow the stalls in
//! application terms with their fixes; `--flows` adds a per-flow table.

use std::fmt::Write as _;
use std::io;

use super::flows::{AllFlows, FlowTotals, GUESSES};
use super::groups::FlowGroup;
use super::json::InputFacts;
use super::ms;
use crate::detect::verdict::{events_by_flow, explain, fixes, FlowSummary};
use crate::detect::{Analysis, StallKind};
use crate::flow::{ClientGuess, MssSource, Span};

/// Flows described in detail; the rest are counted (the JSON has them all).
const FLOWS_SHOWN: usize = 10;

/// The summary and the stalled flows; `totals` counts every flow (`a.flows` holds at least the
/// flows with stalls).
pub fn summary(a: &Analysis, totals: &FlowTotals, input: &InputFacts) -> String {
    let mut out = String::new();
    write_input(&mut out, a, totals, input);
    write_counts(&mut out, a, input);
    write_notes(&mut out, totals, input);

    let stalled = stalled_flows(a);
    write_time_lost(&mut out, &stalled, totals);
    let by_flow = events_by_flow(&a.events);
    let groups = super::groups::group(&stalled, &by_flow);
    // The fix lists printed so far, each with the flow it was printed under.
    let mut fix_lists: Vec<(Vec<String>, String)> = Vec::new();
    for group in groups.iter().take(FLOWS_SHOWN) {
        out.push('\n');
        write_group(&mut out, group);
        write_patterns(&mut out, group, &mut fix_lists);
    }
    if groups.len() > FLOWS_SHOWN {
        write_rest(&mut out, &groups[FLOWS_SHOWN..]);
    }
    let clean = totals.flows.saturating_sub(stalled.len() as u64);
    if clean > 0 {
        let _ = writeln!(
            out,
            "\n{} without stalls",
            super::counted(clean, "flow", "flows")
        );
    }
    out
}

/// What was read: packets, flows and time, what was skipped, and why no TCP was read when
/// frames that may hold it were skipped.
fn write_input(out: &mut String, a: &Analysis, totals: &FlowTotals, input: &InputFacts) {
    let span = a.span_ns.map(|(f, l)| l.since(f)).unwrap_or_default();
    let _ = writeln!(
        out,
        "{} packets ({} TCP), {}, {:.3} s of traffic",
        input.records.max(a.packets),
        a.packets,
        super::counted(totals.flows, "flow", "flows"),
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
}

/// The counts: stalls (and minor holds), flow sides paced by ACKs, and the claims set apart.
fn write_counts(out: &mut String, a: &Analysis, input: &InputFacts) {
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
    let _ = write!(out, "{}", undecided_claims(a, input));
}

/// What the report may miss or rests on: sequence gaps in the capture, guessed clients and
/// assumed MSS, warnings about the input, inputs left out.
fn write_notes(out: &mut String, totals: &FlowTotals, input: &InputFacts) {
    let gappy = totals.with_capture_gaps;
    if gappy > 0 {
        let _ = writeln!(
            out,
            "note: {} data in the capture (sequence gaps); stalls there may go \
             unseen: capture on the host itself, or with a larger buffer (tcpdump -B)",
            super::counted(gappy, "flow misses", "flows miss")
        );
    }
    let _ = write!(out, "{}", guess_notes(totals));
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
}

/// Flows with stalls, and those whose writes were paced by ACKs: those that lost most time
/// first.
fn stalled_flows(a: &Analysis) -> Vec<&FlowSummary> {
    let mut stalled: Vec<&FlowSummary> = a
        .flows
        .iter()
        .filter(|f| f.counts.stalls() > 0 || f.counts.get(StallKind::NagleAckPaced) > 0)
        .collect();
    stalled.sort_by(|x, y| y.time_lost_ns.cmp(&x.time_lost_ns).then(x.id.cmp(&y.id)));
    stalled
}

/// The time lost over the `stalled` flows (from [`stalled_flows`]) and the longest stall;
/// nothing when there are none.
fn write_time_lost(out: &mut String, stalled: &[&FlowSummary], totals: &FlowTotals) {
    let with_stalls = stalled.iter().filter(|f| f.counts.stalls() > 0).count();
    let paced_only = stalled.len() - with_stalls;
    if with_stalls == 0 && paced_only == 0 {
        return;
    }
    let lost: Span = stalled.iter().map(|f| f.time_lost_ns).sum();
    let worst = stalled
        .iter()
        .map(|f| f.worst_stall_ns)
        .max()
        .unwrap_or_default();
    let paced = if paced_only > 0 {
        format!(
            ", and {} paced by ACKs",
            super::counted(paced_only as u64, "flow", "flows")
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "time lost: {} in {with_stalls} of {} with stalls{paced}; longest stall {}",
        ms(lost),
        super::counted(totals.flows, "flow", "flows"),
        ms(worst)
    );
}

/// A group's heading: its one flow, or its flows' count and figures over them with the first
/// (the one that lost most) named; with the latencies of that first flow.
fn write_group(out: &mut String, group: &FlowGroup<'_>) {
    let f = group.flows[0];
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
    let requests = super::counted(
        group.flows.iter().map(|f| f.requests).sum::<u64>(),
        "request",
        "requests",
    );
    // Writes paced by ACKs lose no stall's time (each hold is a round trip, not a timer):
    // their cost is told in holds and the time they covered.
    if let (true, Some(held)) = (group.paced_only(), group.paced_holds()) {
        let paced = format!("writes paced by ACKs, not stalled: {}", held.describe());
        if group.flows.len() > 1 {
            let _ = writeln!(
                out,
                "{} flows like this, {} to {}: {requests}, {paced} in all",
                group.flows.len(),
                f.client.addr,
                f.server
            );
            let _ = writeln!(out, "  the first: {}{latency}", f.label());
        } else {
            let _ = writeln!(out, "{}: {requests}, {paced}{latency}", f.label());
        }
        return;
    }
    if group.flows.len() > 1 {
        let least = group
            .flows
            .iter()
            .map(|f| f.time_lost_ns)
            .min()
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} flows like this, {} to {}: {requests}, {} lost in all ({} to {} each), worst \
             {}",
            group.flows.len(),
            f.client.addr,
            f.server,
            ms(group.time_lost()),
            ms(least),
            ms(f.time_lost_ns),
            ms(group
                .flows
                .iter()
                .map(|f| f.worst_stall_ns)
                .max()
                .unwrap_or_default()),
        );
        let _ = writeln!(out, "  the first: {}{latency}", f.label());
    } else {
        let _ = writeln!(
            out,
            "{}: {requests}, {}, {} lost, worst {}{latency}",
            f.label(),
            f.counts.reported_text(),
            ms(f.time_lost_ns),
            ms(f.worst_stall_ns),
        );
        if let Some(guessed) = flow_guesses(f) {
            let _ = writeln!(out, "  ({guessed})");
        }
    }
}

/// A group's patterns, each with its fixes; `fix_lists` holds the fix lists printed so far
/// with the flow each was printed under, and gains this group's new ones.
fn write_patterns(
    out: &mut String,
    group: &FlowGroup<'_>,
    fix_lists: &mut Vec<(Vec<String>, String)>,
) {
    let f = group.flows[0];
    for p in &group.patterns {
        let _ = writeln!(out, "  {}", pattern_line(p));
        let list = fixes(p.kind, p.held_side, Some(p.example));
        // A fix list already printed is named, not repeated.
        if let Some((_, first)) = fix_lists.iter().find(|(l, _)| *l == list) {
            let _ = writeln!(out, "  fix: as for {first} above");
            continue;
        }
        for (i, fix) in list.iter().enumerate() {
            let lead = if i == 0 { "  fix:" } else { "      " };
            let _ = writeln!(out, "{lead} {}. {fix}", i + 1);
        }
        fix_lists.push((list, f.label()));
    }
}

/// The flows of the groups not described (`rest`), counted.
fn write_rest(out: &mut String, rest: &[FlowGroup<'_>]) {
    let rest: Vec<&FlowSummary> = rest.iter().flat_map(|g| g.flows.iter().copied()).collect();
    let stalls = rest.iter().filter(|f| f.counts.stalls() > 0).count();
    let _ = writeln!(
        out,
        "\n... and {} more: {stalls} with stalls, {} paced by ACKs (--flows lists them, --json \
         has every event)",
        super::counted(rest.len() as u64, "flow", "flows"),
        rest.len() - stalls
    );
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
fn guess_notes(totals: &FlowTotals) -> String {
    let mut out = String::new();
    for (guess, &n) in GUESSES.iter().zip(&totals.guessed) {
        if n > 0 {
            let flows = super::counted(n, "flow", "flows");
            let _ = writeln!(out, "note: {flows}: {}", guess.describe());
        }
    }
    let assumed = totals.mss_assumed;
    if assumed > 0 {
        let _ = writeln!(
            out,
            "note: {} without a SYN carrying the MSS: MSS assumed (Ethernet's, \
             loopback's, or the largest segment seen); a write at or above it is not taken for \
             a small one",
            super::counted(assumed, "flow", "flows")
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
/// capture position; written as the flows come, a chunk at a time.
pub fn write_flow_table(
    out: &mut dyn io::Write,
    flows: &dyn AllFlows,
    outers: &crate::decode::OuterByFlow,
) -> io::Result<()> {
    writeln!(
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
    )?;
    let mut chunk_text = String::new();
    flows.for_each_chunk(&mut |chunk| {
        chunk_text.clear();
        for f in chunk {
            flow_row(&mut chunk_text, f, outers);
        }
        out.write_all(chunk_text.as_bytes())
    })
}

/// One line of [`write_flow_table`].
fn flow_row(out: &mut String, f: &FlowSummary, outers: &crate::decode::OuterByFlow) {
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

/// Claims listed one by one under the counts of `undecided:` lines.
const UNDECIDED_LISTED: usize = 20;

/// Each claim set apart, with its flow, packet and the proof it lacks (the first
/// [`UNDECIDED_LISTED`]; `analyze --json` lists all).
fn undecided_claims(a: &Analysis, input: &InputFacts) -> String {
    let claims = a.undecided.claims();
    let mut out = String::new();
    for c in claims.iter().take(UNDECIDED_LISTED) {
        let file = input
            .file_of(c.ordinal)
            .map_or(String::new(), |f| format!(" of {f}"));
        let _ = writeln!(
            out,
            "  {} {}-{} packet {}{file} ({:.1} ms, {} held): {}",
            c.kind.name(),
            c.client,
            c.server,
            c.packet_number,
            c.delay_ns.as_millis_f64(),
            c.held_side.name(),
            c.reason.name()
        );
    }
    if claims.len() > UNDECIDED_LISTED {
        let _ = writeln!(
            out,
            "  and {} more (analyze --json lists every one)",
            claims.len() - UNDECIDED_LISTED
        );
    }
    out
}

/// A pattern's line: how many times, then the explanation; where the waits differ, their range
/// first, the explanation's figure being the last one's. Writes paced by ACKs are one event
/// per flow side: counted in flows, each with its holds.
fn pattern_line(p: &super::groups::GroupPattern<'_>) -> String {
    if let Some(held) = p.paced {
        if p.count < 2 {
            return format!("paced: {}", explain(p.example));
        }
        return format!(
            "{}, {} each; the last: {}",
            super::counted(p.count, "flow", "flows"),
            held.each(),
            explain(p.example)
        );
    }
    let times = super::counted(p.count, "time", "times");
    if p.count > 1 && p.longest.as_nanos() - p.shortest.as_nanos() >= 100_000 {
        format!(
            "{times}, waits {} to {}; the last: {}",
            ms(p.shortest),
            ms(p.longest),
            explain(p.example)
        )
    } else {
        format!("{times}: {}", explain(p.example))
    }
}
