//! `analyze --json`: the stable keys of ARCHITECTURE.md (`summary.packets`, `summary.flows`,
//! `summary.stalls.{nagle_delayed_ack,cork_timer,rto,zero_window}`, `events[].{kind,flow,time,
//! delay_ms,held_side,ack_side}`), plus keys scripts may find useful.

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde::Serialize;
use serde_json::json;

use crate::detect::verdict::{events_by_flow, explain, fixes, patterns, FlowSummary};
use crate::detect::{Analysis, KindCounts, StallEvent, StallKind};

/// Extra facts about the input, beside the analysis.
#[derive(Debug, Clone, Default)]
pub struct InputFacts {
    /// Capture files read, in order.
    pub files: Vec<String>,
    /// Packet records in the captures (TCP or not): `summary.packets`.
    pub records: u64,
    /// Warnings about damaged input.
    pub warnings: u64,
}

fn ms(ns: u64) -> f64 {
    (ns as f64 / 1e3).round() / 1e3
}

/// One event of `events[]`. The sentence naming the pattern and the fixes are given once per
/// flow and pattern (`flows[].patterns`), not repeated per event.
#[derive(Serialize)]
pub struct EventJson<'a> {
    kind: &'static str,
    flow: &'a str,
    flow_id: u64,
    server_port: u16,
    time: f64,
    packet: u64,
    delay_ms: f64,
    ack_delay_ms: Option<f64>,
    held_side: &'static str,
    ack_side: Option<&'static str>,
    peer_stack: Option<&'static str>,
    writes: &'a [u32],
}

/// One event as its JSON object; `flow` is the flow's label (`client-server`).
pub fn event<'a>(e: &'a StallEvent, flow: &'a str) -> EventJson<'a> {
    let f = &e.finding;
    EventJson {
        kind: f.kind.name(),
        flow,
        flow_id: e.flow_id,
        server_port: e.server.port,
        time: e.ts_ns as f64 / 1e9,
        packet: e.packet_number,
        delay_ms: ms(f.delay_ns),
        ack_delay_ms: f.ack_delay_ns.map(ms),
        held_side: f.held_side.name(),
        ack_side: f.ack_side.map(|s| s.name()),
        peer_stack: e.peer_stack.map(|s| s.name()),
        writes: &e.writes,
    }
}

/// Counts per kind, under their stable names.
#[derive(Serialize)]
pub struct KindsJson {
    nagle_delayed_ack: u64,
    cork_timer: u64,
    rto: u64,
    zero_window: u64,
    nagle_minor: u64,
}

fn kinds(c: &KindCounts) -> KindsJson {
    KindsJson {
        nagle_delayed_ack: c.get(StallKind::NagleDelayedAck),
        cork_timer: c.get(StallKind::CorkTimer),
        rto: c.get(StallKind::Rto),
        zero_window: c.get(StallKind::ZeroWindow),
        nagle_minor: c.get(StallKind::NagleMinor),
    }
}

/// One stall pattern of a flow, with its fixes.
#[derive(Serialize)]
pub struct PatternJson {
    kind: &'static str,
    held_side: &'static str,
    count: u64,
    explanation: String,
    fixes: Vec<String>,
}

/// One flow of `flows[]`.
#[derive(Serialize)]
pub struct FlowJson {
    flow: String,
    flow_id: u64,
    client: String,
    server: String,
    server_port: u16,
    client_guess: &'static str,
    capture_position: &'static str,
    packets: u64,
    bytes_client_to_server: u64,
    bytes_server_to_client: u64,
    retransmissions: u64,
    capture_gaps: u64,
    requests: u64,
    stalls: KindsJson,
    time_lost_ms: f64,
    worst_stall_ms: f64,
    p50_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    mss: [u32; 2],
    mss_source: [&'static str; 2],
    patterns: Vec<PatternJson>,
}

/// One flow as its JSON object, with its stall patterns and their fixes.
pub fn flow(f: &FlowSummary, flow_events: &[&StallEvent]) -> FlowJson {
    let patterns = patterns(flow_events)
        .into_iter()
        .map(|p| PatternJson {
            kind: p.kind.name(),
            held_side: p.held_side.name(),
            count: p.count,
            explanation: explain(p.example),
            fixes: fixes(p.kind, p.held_side),
        })
        .collect();
    FlowJson {
        flow: f.label(),
        flow_id: f.id,
        client: f.client.to_string(),
        server: f.server.to_string(),
        server_port: f.server.port,
        client_guess: f.client_guess.name(),
        capture_position: f.capture_position(),
        packets: f.packets,
        bytes_client_to_server: f.bytes[0],
        bytes_server_to_client: f.bytes[1],
        retransmissions: f.retransmissions,
        capture_gaps: f.capture_gaps,
        requests: f.requests,
        stalls: kinds(&f.counts),
        time_lost_ms: ms(f.time_lost_ns),
        worst_stall_ms: ms(f.worst_stall_ns),
        p50_ms: f.latency_us.map(|l| f64::from(l.0) / 1e3),
        p99_ms: f.latency_us.map(|l| f64::from(l.1) / 1e3),
        max_ms: f.latency_us.map(|l| f64::from(l.2) / 1e3),
        mss: f.mss,
        mss_source: f.mss_source.map(|m| m.name()),
        patterns,
    }
}

/// Events or flows rendered per thread and round: bounds the text held in memory (about
/// 350 bytes each) while keeping the threads' start-up cost negligible.
const ITEMS_PER_THREAD: usize = 8192;
/// Fewest lines worth handing to a helper thread.
const MIN_ITEMS_PER_THREAD: usize = 1024;

/// Writes the whole analysis as one JSON document, one event and one flow per line, without
/// building the whole document in memory (a large capture has tens of thousands of events).
/// Lines are rendered on every CPU, a bounded round at a time, and written in order: the
/// document is the same for any number of CPUs.
pub fn write(out: &mut impl Write, a: &Analysis, input: &InputFacts) -> io::Result<()> {
    let summary = json!({
        "packets": input.records.max(a.packets),
        "tcp_segments": a.packets,
        "flows": a.flows.len(),
        "stalls": kinds(&a.counts),
        "stall_total": a.stall_count(),
        "warnings": input.warnings,
        "flows_with_capture_gaps": a.flows.iter().filter(|f| f.capture_gaps > 0).count(),
        "files": input.files,
    });
    write!(out, "{{\"summary\": {summary},\n\"events\": [")?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Labels once per flow, not per event: formatting addresses is the costly part.
    let labels: FxHashMap<u64, String> = a.flows.iter().map(|f| (f.id, f.label())).collect();
    write_lines(out, &a.events, threads, |buf, e| {
        let label = labels
            .get(&e.flow_id)
            .map(String::as_str)
            .unwrap_or_default();
        serde_json::to_writer(buf, &event(e, label))
    })?;
    write!(out, "\n],\n\"flows\": [")?;
    let by_flow = events_by_flow(&a.events);
    write_lines(out, &a.flows, threads, |buf, f| {
        let events = by_flow.get(&f.id).map(Vec::as_slice).unwrap_or_default();
        serde_json::to_writer(buf, &flow(f, events))
    })?;
    writeln!(out, "\n]}}")
}

/// Writes `items` as the lines of a JSON array body (`\n` before the first, `,\n` before the
/// others), each rendered by `render`; rounds of up to `threads` × [`ITEMS_PER_THREAD`] items
/// are rendered in parallel.
fn write_lines<T: Sync>(
    out: &mut impl Write,
    items: &[T],
    threads: usize,
    render: impl Fn(&mut Vec<u8>, &T) -> serde_json::Result<()> + Sync,
) -> io::Result<()> {
    let render_chunk = |chunk: &[T], first: bool| -> serde_json::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(chunk.len() * 384);
        for (i, item) in chunk.iter().enumerate() {
            buf.extend_from_slice(if first && i == 0 { b"\n" } else { b",\n" });
            render(&mut buf, item)?;
        }
        Ok(buf)
    };
    for (round_no, round) in items.chunks(threads * ITEMS_PER_THREAD).enumerate() {
        // Small outputs stay on this thread: a helper costs more than a few lines.
        let per_thread = round.len().div_ceil(threads).max(MIN_ITEMS_PER_THREAD);
        let rendered: Vec<serde_json::Result<Vec<u8>>> = std::thread::scope(|scope| {
            let mut chunks = round.chunks(per_thread);
            // This thread renders the first chunk; the others go to helpers.
            let first = chunks.next();
            let helpers: Vec<_> = chunks
                .map(|chunk| scope.spawn(move || render_chunk(chunk, false)))
                .collect();
            let mut rendered: Vec<_> = first
                .map(|chunk| render_chunk(chunk, round_no == 0))
                .into_iter()
                .collect();
            for helper in helpers {
                rendered.push(
                    helper
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                );
            }
            rendered
        });
        for buf in rendered {
            out.write_all(&buf?)?;
        }
    }
    Ok(())
}
