//! One self-contained HTML page (no network: styles, script and SVG charts inline) for
//! `analyze --html` and `lab --html`: a summary read in ten seconds, a sortable table, latency
//! histograms and timelines, and the ladder of one example of each kind of stall.
//!
//! The page is a minijinja template (`templates/page.html`, autoescaped); the charts are SVG
//! strings from [`super::charts`]. It stays small on big inputs: the table keeps the
//! [`TABLE_ROWS`] flows that lost most, charts are drawn for [`CHARTED_FLOWS`] flows, each
//! timeline at most [`TIMELINE_POINTS`] turns.

use std::path::Path;

use anyhow::Context;
use minijinja::Environment;
use serde::Serialize;

use super::charts;
use super::json::InputFacts;
use super::ms;
use crate::detect::verdict::{events_by_flow, explain, fixes, FlowSummary};
use crate::detect::{Analysis, KindCounts, StallEvent, StallKind};
use crate::flow::{Span, Timestamp};
use crate::ladder::Ladder;

/// Flows listed in the table (those that lost most time first).
pub const TABLE_ROWS: usize = 500;
/// Flows with a histogram and a timeline.
pub const CHARTED_FLOWS: usize = 8;
/// Turns drawn on one timeline (evenly sampled beyond that; stalled turns always kept).
pub const TIMELINE_POINTS: usize = 2000;

const TEMPLATE: &str = include_str!("templates/page.html");

/// A table cell: what is shown and the value it sorts by.
#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Shown text.
    pub text: String,
    /// Sort key (a number as text for numeric columns).
    pub sort: String,
    /// Long text that wraps (the lab's explanations).
    pub wide: bool,
}

impl Cell {
    /// A cell of text, sorted as text.
    pub fn text(text: impl Into<String>) -> Cell {
        let text = text.into();
        Cell {
            sort: text.clone(),
            text,
            wide: false,
        }
    }

    /// A cell of text given the width of the table's last column.
    pub fn wide(text: impl Into<String>) -> Cell {
        Cell {
            wide: true,
            ..Cell::text(text)
        }
    }

    /// A number: `text` shown, sorted by `value`.
    pub fn number(text: impl Into<String>, value: f64) -> Cell {
        Cell {
            text: text.into(),
            sort: format!("{value}"),
            wide: false,
        }
    }
}

/// A table row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Cells, in header order.
    pub cells: Vec<Cell>,
    /// Drawn as stalled.
    pub stalled: bool,
}

/// The charts of one flow: its latency histogram and its timeline (SVG).
#[derive(Debug, Serialize)]
pub struct FlowCharts {
    /// The flow, in words.
    pub label: String,
    /// The latency histogram (SVG).
    pub histogram: String,
    /// The turns over time (SVG; empty for none).
    pub timeline: String,
}

/// One ladder diagram of the page.
#[derive(Debug, Serialize)]
pub struct LadderView {
    kind: &'static str,
    flow: String,
    explanation: String,
    svg: String,
    fixes: Vec<String>,
}

/// Everything a page shows.
#[derive(Debug, Default, Serialize)]
pub struct Page {
    /// Title and first heading.
    pub title: String,
    /// The one sentence: what stalls, how much time it cost, who holds.
    pub headline: String,
    /// Nothing stalled.
    pub clean: bool,
    /// Further facts, one line each.
    pub facts: Vec<String>,
    /// The fixes of the main pattern.
    pub fixes: Vec<String>,
    /// The table's heading.
    pub table_title: String,
    /// Column headings.
    pub headers: Vec<String>,
    /// Rows.
    pub rows: Vec<Row>,
    /// Under the table (rows left out).
    pub table_note: Option<String>,
    /// The lab catalogue's chart (SVG).
    pub lab_chart: Option<String>,
    /// Heading of the pacing section (the probe's writes paced by ACKs).
    pub pacing_title: String,
    /// The pacing, one line each: the paced sides' holds and time lost, the throughput and
    /// its estimate, the TCP_NODELAY re-run; empty when none was seen.
    pub pacing: Vec<String>,
    /// Heading of the latency charts.
    pub charts_title: String,
    /// The charts of each flow drawn.
    pub flow_charts: Vec<FlowCharts>,
    /// The ladder diagrams, one example of each kind of stall.
    pub ladders: Vec<LadderView>,
    /// The version of tcpstall that wrote the page.
    pub version: &'static str,
    /// Where tcpstall's browser page is (`analyze --page-link`): readers open further
    /// captures there, with nothing installed.
    pub page_link: Option<String>,
}

impl Page {
    /// Renders the page.
    pub fn render(&self) -> anyhow::Result<String> {
        let mut env = Environment::new();
        env.add_template("page.html", TEMPLATE)
            .context("the report template does not parse")?;
        let template = env.get_template("page.html")?;
        Ok(template.render(minijinja::value::Serde(self))?)
    }

    /// Renders the page into `path`.
    pub fn write_to(&self, path: &Path) -> anyhow::Result<()> {
        let html = self.render()?;
        std::fs::write(path, html)
            .with_context(|| format!("cannot write the HTML report to {}", path.display()))
    }

    /// Adds the ladder diagrams, each titled by its flow.
    pub fn add_ladders(&mut self, ladders: &[Ladder]) {
        for l in ladders {
            self.add_ladder(format!("{}-{}", l.client, l.server), l);
        }
    }

    /// Adds one ladder diagram under `title`.
    pub fn add_ladder(&mut self, title: String, l: &Ladder) {
        self.ladders.push(LadderView {
            kind: l.kind.name(),
            flow: title,
            explanation: l.explanation.clone(),
            svg: charts::ladder_svg(l),
            fixes: l.fixes.clone(),
        });
    }
}

/// The tables' headers of the reported kinds (the stalls, and writes paced by ACKs), in report
/// order.
pub fn stall_columns() -> impl Iterator<Item = &'static str> {
    StallKind::reported().map(|kind| kind.info().page_column)
}

/// A row's counts of the reported kinds, in the order of [`stall_columns`].
pub fn stall_cells(counts: &KindCounts) -> impl Iterator<Item = Cell> + '_ {
    StallKind::reported().map(|kind| {
        let n = counts.get(kind);
        Cell::number(n.to_string(), n as f64)
    })
}

fn ms_cell(us: Option<u32>) -> Cell {
    match us {
        Some(us) => Cell::number(format!("{:.1}", f64::from(us) / 1e3), f64::from(us) / 1e3),
        None => Cell::number("-", -1.0),
    }
}

/// The page of an analysis: `title` names the input.
pub fn analysis_page(a: &Analysis, input: &InputFacts, title: &str) -> anyhow::Result<Page> {
    let mut flows: Vec<&FlowSummary> = a.flows.iter().collect();
    flows.sort_by(|x, y| y.time_lost_ns.cmp(&x.time_lost_ns).then(x.id.cmp(&y.id)));
    let span = a.span_ns.map_or(Span::ZERO, |(f, l)| l.since(f));

    let mut page = Page {
        title: format!("tcpstall analyze: {title}"),
        clean: a.stall_count() == 0,
        table_title: "Flows".to_string(),
        charts_title: "Latency of the worst flows".to_string(),
        version: env!("CARGO_PKG_VERSION"),
        ..Page::default()
    };
    let main = main_pattern(a);
    page.headline = headline(a, &flows, main);
    if let Some(p) = main {
        page.fixes = fixes(p.kind, p.held_side, Some(p.example));
    }
    page.pacing = pacing_lines(a, &flows);
    if !page.pacing.is_empty() {
        page.pacing_title = "Writes paced by ACKs".to_string();
    }
    page.facts = facts(a, input, &flows, span, !page.pacing.is_empty());
    add_table(&mut page, &flows);
    page.flow_charts = flow_charts(a, &flows, span)?;
    Ok(page)
}

/// The pattern an analysis is headlined by: a kind of stall and the side it held.
#[derive(Debug, Clone, Copy)]
struct MainPattern<'a> {
    kind: StallKind,
    held_side: crate::Side,
    /// Its latest event, which names it.
    example: &'a StallEvent,
}

/// The main pattern: the kind and held side that cost most time over all flows; its latest
/// event names it (the steady state, as the text report's examples).
fn main_pattern(a: &Analysis) -> Option<MainPattern<'_>> {
    let mut cost: Vec<((StallKind, crate::Side), Span, &StallEvent)> = Vec::new();
    for e in a.events.iter().filter(|e| e.finding.kind.is_stall()) {
        let key = (e.finding.kind, e.finding.held_side);
        match cost.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, total, latest)) => {
                *total += e.finding.delay_ns;
                *latest = e;
            }
            None => cost.push((key, e.finding.delay_ns, e)),
        }
    }
    cost.iter()
        .max_by_key(|(_, total, _)| *total)
        .map(|&((kind, held_side), _, example)| MainPattern {
            kind,
            held_side,
            example,
        })
}

/// The one sentence: what stalls, how much time it cost, who holds; or that nothing stalled.
/// `flows` are the analysis's flows.
fn headline(a: &Analysis, flows: &[&FlowSummary], main: Option<MainPattern<'_>>) -> String {
    let stalled_flows = flows.iter().filter(|f| f.counts.stalls() > 0).count();
    let lost: Span = a.flows.iter().map(|f| f.time_lost_ns).sum();
    match main {
        Some(p) => {
            format!(
                "{} stalls cost {} in {stalled_flows} of {} flows; the {} holds: {}",
                a.counts.stalls_text(),
                ms(lost),
                a.flows.len(),
                p.held_side.name(),
                explain(p.example)
            )
        }
        None => format!(
            "no stalls in {} ({} TCP packets)",
            super::counted(a.flows.len() as u64, "flow", "flows"),
            a.packets
        ),
    }
}

/// The facts under the headline, one line each; `paced` when writes paced by ACKs have a
/// section of their own.
fn facts(
    a: &Analysis,
    input: &InputFacts,
    flows: &[&FlowSummary],
    span: Span,
    paced: bool,
) -> Vec<String> {
    let mut facts = traffic_facts(a, input, span);
    facts.extend(undecided_facts(a));
    if paced {
        let sides = a.counts.get(StallKind::NagleAckPaced);
        facts.push(format!(
            "nagle_ack_paced: {} whose small writes each waited one round trip for an ACK \
             (Nagle pacing a busy sender, not a 40 ms stall): listed under \"Writes paced by \
             ACKs\"",
            super::counted(sides, "flow side", "flow sides")
        ));
    }
    for unreadable in &input.unreadable {
        facts.push(format!("not in this report: {unreadable}"));
    }
    if let Some(worst) = flows.first().filter(|f| f.worst_stall_ns > Span::ZERO) {
        facts.push(format!(
            "longest stall {} (flow {})",
            ms(worst.worst_stall_ns),
            worst.label()
        ));
    }
    facts
}

/// What was read: the packets, flows and time, what was skipped, and the kinds counted apart
/// from the stalls.
fn traffic_facts(a: &Analysis, input: &InputFacts, span: Span) -> Vec<String> {
    let mut facts = vec![format!(
        "{} packets ({} TCP), {}, {:.3} s of traffic",
        input.records.max(a.packets),
        a.packets,
        super::counted(a.flows.len() as u64, "flow", "flows"),
        span.as_secs_f64()
    )];
    if input.skipped.total() > 0 {
        facts.push(format!("skipped: {}", input.skipped.describe()));
    }
    // The kinds counted apart from the stalls, as each names itself.
    for kind in StallKind::ALL {
        let n = a.counts.get(kind);
        if let Some(aside) = kind.aside().filter(|_| n > 0) {
            facts.push(format!("{n} {aside}"));
        }
    }
    facts
}

/// Claims set apart: their counts by kind and reason, then each with its flow, packet and the
/// proof it lacks (the first [`TABLE_ROWS`]).
fn undecided_facts(a: &Analysis) -> Vec<String> {
    let mut facts = Vec::new();
    for (kind, reason, count) in a.undecided.entries() {
        facts.push(format!(
            "undecided: {count} {} claims set apart, not counted: {}",
            kind.name(),
            reason.describe()
        ));
    }
    for c in a.undecided.claims().iter().take(TABLE_ROWS) {
        facts.push(format!(
            "undecided {}, flow {}-{}, packet {}: {}",
            c.kind.name(),
            c.client,
            c.server,
            c.packet_number,
            c.reason.name()
        ));
    }
    facts
}

/// Writes paced by ACKs: each flow side's holds, cost and throughput estimate, one line each
/// (the first [`TABLE_ROWS`]), alike flows told once as the text report tells them ("16 flows
/// like this", their holds over the group, the first flow's explanation). One line in the
/// summary says they are there; they have a section of their own below it.
fn pacing_lines(a: &Analysis, flows: &[&FlowSummary]) -> Vec<String> {
    let paced: Vec<&FlowSummary> = flows
        .iter()
        .copied()
        .filter(|f| f.counts.get(StallKind::NagleAckPaced) > 0)
        .collect();
    let by_flow = events_by_flow(&a.events);
    let mut lines = Vec::new();
    for group in super::groups::group(&paced, &by_flow) {
        let first = group.flows[0];
        for p in group.patterns.iter().filter(|p| p.paced.is_some()) {
            let side = p.held_side;
            let pacing = first.paced()[side.index()]
                .or(p.example.paced.as_deref().copied())
                .unwrap_or_default();
            let explained = crate::detect::verdict::explain_paced(side, &pacing);
            lines.push(match p.paced.filter(|_| group.flows.len() > 1) {
                Some(held) => format!(
                    "{} flows like this, {} to {}: {} in all ({} each); the first, flow {}: \
                     {explained}",
                    group.flows.len(),
                    first.client.addr,
                    first.server,
                    held.describe(),
                    held.each(),
                    first.label()
                ),
                None => format!("flow {}: {explained}", first.label()),
            });
        }
        if lines.len() >= TABLE_ROWS {
            lines.truncate(TABLE_ROWS);
            break;
        }
    }
    lines
}

/// The flow table: the [`TABLE_ROWS`] flows that lost most time, and a note counting those
/// left out.
fn add_table(page: &mut Page, flows: &[&FlowSummary]) {
    page.headers = table_headers();
    page.rows = flows
        .iter()
        .take(TABLE_ROWS)
        .map(|f| table_row(f))
        .collect();
    if flows.len() > TABLE_ROWS {
        page.table_note = Some(format!(
            "{} more flows with less time lost are left out (`tcpstall analyze --json` lists all)",
            flows.len() - TABLE_ROWS
        ));
    }
}

/// The flow table's column headings.
fn table_headers() -> Vec<String> {
    ["flow", "requests"]
        .into_iter()
        .chain(stall_columns())
        .chain([
            "lost (ms)",
            "p50 (ms)",
            "p99 (ms)",
            "packets",
            "captured at",
        ])
        // A break allowed after each underscore: kind names are long for a column's head.
        .map(|h| h.replace('_', "_\u{200B}"))
        .collect()
}

/// One flow's row of the flow table, in the order of [`table_headers`].
fn table_row(f: &FlowSummary) -> Row {
    Row {
        stalled: f.counts.stalls() > 0,
        cells: [
            Cell::text(f.label()),
            Cell::number(f.requests.to_string(), f.requests as f64),
        ]
        .into_iter()
        .chain(stall_cells(&f.counts))
        .chain([
            Cell::number(
                format!("{:.1}", f.time_lost_ns.as_millis_f64()),
                f.time_lost_ns.as_millis_f64(),
            ),
            ms_cell(f.latency_us.map(|l| l.0)),
            ms_cell(f.latency_us.map(|l| l.1)),
            Cell::number(f.packets.to_string(), f.packets as f64),
            Cell::text(f.capture_point()),
        ])
        .collect(),
    }
}

/// The charts of the [`CHARTED_FLOWS`] flows that lost most time among those with turns;
/// `span` is the capture's, the timelines' width.
fn flow_charts(
    a: &Analysis,
    flows: &[&FlowSummary],
    span: Span,
) -> anyhow::Result<Vec<FlowCharts>> {
    let by_flow = events_by_flow(&a.events);
    let first = a.span_ns.map_or(Timestamp::default(), |(f, _)| f);
    flows
        .iter()
        .filter(|f| !f.turns.is_empty())
        .take(CHARTED_FLOWS)
        .map(|f| {
            let events = by_flow.get(&f.id).map(Vec::as_slice).unwrap_or_default();
            charts_of_flow(f, events, first, span)
        })
        .collect()
}

/// One flow's latency histogram and timeline, its stalled turns marked; `events` are the
/// flow's, `first` the capture's first timestamp.
fn charts_of_flow(
    f: &FlowSummary,
    events: &[&StallEvent],
    first: Timestamp,
    span: Span,
) -> anyhow::Result<FlowCharts> {
    // A turn stalled when a stall's released segment left inside it.
    let stalled = |start: Timestamp, us: u32| {
        let end = start + Span::from_micros(u64::from(us));
        events
            .iter()
            .any(|e| e.finding.kind.is_stall() && e.ts_ns >= start && e.ts_ns <= end)
    };
    let all_ms: Vec<f64> = f.turns.iter().map(|&(_, us)| f64::from(us) / 1e3).collect();
    let stalled_ms: Vec<f64> = f
        .turns
        .iter()
        .filter(|&&(s, us)| stalled(s, us))
        .map(|&(_, us)| f64::from(us) / 1e3)
        .collect();
    let every = f.turns.len().div_ceil(TIMELINE_POINTS).max(1);
    let points: Vec<(f64, f64, bool)> = f
        .turns
        .iter()
        .enumerate()
        .filter_map(|(i, &(s, us))| {
            let st = stalled(s, us);
            (st || i % every == 0).then(|| (s.since(first).as_secs_f64(), f64::from(us) / 1e3, st))
        })
        .collect();
    Ok(FlowCharts {
        label: f.label(),
        histogram: charts::latency_histogram(&all_ms, &stalled_ms)?,
        timeline: charts::turn_timeline(&points, span.as_secs_f64())?,
    })
}
