//! `analyze --json`: the stable keys of docs/JSON.md (`summary.packets`, `summary.flows`,
//! `summary.stalls.{nagle_delayed_ack,cork_timer,rto,zero_window}`, `events[].{kind,flow,time,
//! delay_ms,held_side,ack_side}`), plus keys scripts may find useful.
//!
//! Writes paced by ACKs (`nagle_ack_paced`, not a stall: `summary.stalls.nagle_ack_paced`
//! counts the flow sides, not in `stall_total`): one event per paced flow side, its
//! `delay_ms` the holds' time so far (their union), with `"nagle_ack_paced":{"held_side",
//! "holds","released_by_data","delay_sum_ms","time_lost_ms","span_ms","bytes","bytes_per_s",
//! "bytes_per_s_without_estimate","estimate"}`; the flow (`flows[].nagle_ack_paced`, a list,
//! present only on paced flows) carries the same object with the final figures. `holds` counts
//! the holds (`released_by_data`: those released by the peer's data carrying the ACK);
//! `delay_sum_ms` sums each hold's delay (from the small segment to the released one, an upper
//! bound of the wait); `time_lost_ms` is their union, never more than `span_ms` (first to last
//! packet of the flow); `bytes_per_s` is the held side's new bytes over `span_ms`;
//! `bytes_per_s_without_estimate` is an ESTIMATE, `bytes / (span_ms − time_lost_ms)`, named by
//! `estimate`: an upper bound that assumes each hold's time would have gone to sending and
//! ignores what the holds saved (writes gathered into fewer segments).

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde_json::json;
use serde_json::ser::{CompactFormatter, Formatter};

use super::flows::AllFlows;
use crate::detect::verdict::{events_by_flow, explain, fixes, patterns, FlowSummary};
use crate::detect::{Analysis, KindCounts, Pacing, StallEvent, StallKind};
use crate::flow::Span;

/// Extra facts about the input, beside the analysis.
#[derive(Debug, Clone, Default)]
pub struct InputFacts {
    /// Capture files read, in order.
    pub files: Vec<String>,
    /// Packet records in the captures (TCP or not): `summary.packets`.
    pub records: u64,
    /// Warnings about damaged input.
    pub warnings: u64,
    /// The outer tunnel of connections that came in one: a flow's `outer`.
    pub outers: crate::decode::OuterByFlow,
    /// The frames not read as TCP, by reason.
    pub skipped: crate::capture::skipped::SkippedFrames,
    /// Files that could not be read, left out of the report (`summary.unreadable`).
    pub unreadable: Vec<Unreadable>,
    /// For each of `files`, where it was read and which segments of the input it holds.
    pub sources: Vec<Source>,
}

/// A capture file read whole, and the segments of the input it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The file read (for standard input, the file it was kept in).
    pub path: std::path::PathBuf,
    /// The position (0-based, among all segments) of its first segment, and one past its
    /// last.
    pub ordinals: std::ops::Range<u64>,
    /// Packet records read from it (tshark's frames).
    pub packets: u64,
}

impl InputFacts {
    /// Index in `files` and `sources` of the file that holds the `ordinal`-th segment.
    pub fn source_of(&self, ordinal: u64) -> Option<usize> {
        let i = self
            .sources
            .partition_point(|s| s.ordinals.start <= ordinal)
            .checked_sub(1)?;
        self.sources[i].ordinals.contains(&ordinal).then_some(i)
    }

    /// The file that holds the `ordinal`-th segment of the input, when more than one file was
    /// read (a packet number counts within its file).
    pub fn file_of(&self, ordinal: u64) -> Option<&str> {
        if self.files.len() < 2 || self.sources.len() != self.files.len() {
            return None;
        }
        self.files.get(self.source_of(ordinal)?).map(String::as_str)
    }
}

/// A capture file that could not be read, and why.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Unreadable {
    /// The file, as given.
    pub file: String,
    /// The reason, with what to check.
    pub error: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot analyse {}: {}", self.file, self.error)
    }
}

/// `summary.skipped`: the frames not read as TCP, by reason.
fn skipped(s: &crate::capture::skipped::SkippedFrames) -> serde_json::Value {
    let named = |list: &[(std::borrow::Cow<'static, str>, u64)]| {
        list.iter()
            .map(|(what, frames)| json!({"what": what, "frames": frames}))
            .collect::<Vec<_>>()
    };
    json!({
        "not_tcp": s.not_tcp,
        "fragments": s.fragments,
        "undecodable": s.undecodable,
        "opaque": named(&s.opaque),
        "unsupported": named(&s.unsupported),
    })
}

/// Milliseconds rounded to the microsecond.
fn ms(span: Span) -> f64 {
    (span.as_nanos() as f64 / 1e3).round() / 1e3
}

/// Microseconds below this are written by [`write_ms_of_us`] as decimals: a number of at most
/// 15 significant digits is the shortest text that reads back as its `f64` (`DBL_DIG`), so
/// the decimal is what serde_json's shortest round trip writes.
const DECIMAL_US_BELOW: u64 = 1_000_000_000_000_000;
/// Spans below this many nanoseconds are rounded to the microsecond in integers (11.6 days).
const DECIMAL_NS_BELOW: u64 = 1_000_000_000_000_000;

/// Writes `span` in milliseconds rounded to the microsecond: the text serde_json writes for
/// [`ms`]`(span)`, without formatting a float.
fn write_ms(buf: &mut Vec<u8>, span: Span) -> io::Result<()> {
    let ns = span.as_nanos();
    if ns < DECIMAL_NS_BELOW {
        // Rounded half up as `f64::round` rounds the quotient: below this, the quotient's
        // own rounding error (at most 2^-53 of it) is far below its distance to a half.
        write_ms_of_us(buf, (ns + 500) / 1000)
    } else {
        CompactFormatter.write_f64(buf, ms(span))
    }
}

/// Writes `us` microseconds in milliseconds, as serde_json writes `us as f64 / 1e3`: integer
/// digits, a point, the thousandths without their trailing zeros (`.0` for none).
fn write_ms_of_us(buf: &mut Vec<u8>, us: u64) -> io::Result<()> {
    if us >= DECIMAL_US_BELOW {
        return CompactFormatter.write_f64(buf, us as f64 / 1e3);
    }
    let mut digits = itoa::Buffer::new();
    buf.extend_from_slice(digits.format(us / 1000).as_bytes());
    let fraction = (us % 1000) as u32;
    let text = [
        b'.',
        b'0' + (fraction / 100) as u8,
        b'0' + (fraction / 10 % 10) as u8,
        b'0' + (fraction % 10) as u8,
    ];
    let len = match fraction {
        f if f % 100 == 0 => 2,
        f if f % 10 == 0 => 3,
        _ => 4,
    };
    buf.extend_from_slice(&text[..len]);
    Ok(())
}

/// Writes one event of `events[]` as a JSON object; `flow` is the flow's label
/// (`client-server`). The sentence naming the pattern and the fixes are given once per flow and
/// pattern (`flows[].patterns`), not repeated per event.
///
/// Written field by field rather than through a derived `Serialize`: a large capture has tens
/// of thousands of events, and serde's per-byte escape scan of every key and fixed name was
/// most of the cost. Keys and names are fixed ASCII that needs no escaping; the label and the
/// numbers go through serde_json, so the text is what serde_json would write.
pub fn write_event(buf: &mut Vec<u8>, e: &StallEvent, flow: &str) -> io::Result<()> {
    write_event_quoted(buf, e, |buf| write_str(buf, flow))
}

/// [`write_event`], the label written by `write_label` (a flow's [`FlowLabel::quoted`] text,
/// escaped once for all its events).
fn write_event_quoted(
    buf: &mut Vec<u8>,
    e: &StallEvent,
    write_label: impl FnOnce(&mut Vec<u8>) -> io::Result<()>,
) -> io::Result<()> {
    let f = &e.finding;
    let mut number = CompactFormatter;
    buf.extend_from_slice(b"{\"kind\":\"");
    buf.extend_from_slice(f.kind.name().as_bytes());
    buf.extend_from_slice(b"\",\"flow\":");
    write_label(buf)?;
    buf.extend_from_slice(b",\"flow_id\":");
    number.write_u64(buf, e.flow_id)?;
    buf.extend_from_slice(b",\"server_port\":");
    number.write_u16(buf, e.server.port)?;
    buf.extend_from_slice(b",\"time\":");
    number.write_f64(buf, e.ts_ns.as_secs_f64())?;
    buf.extend_from_slice(b",\"packet\":");
    number.write_u64(buf, e.packet_number)?;
    // The peer's packet that released the data: its ACK or window update.
    buf.extend_from_slice(b",\"release_packet\":");
    match e.released_by {
        Some(r) => number.write_u64(buf, r.packet_number)?,
        None => buf.extend_from_slice(b"null"),
    }
    buf.extend_from_slice(b",\"delay_ms\":");
    write_ms(buf, f.delay_ns)?;
    buf.extend_from_slice(b",\"ack_delay_ms\":");
    match f.ack_delay_ns {
        Some(ns) => write_ms(buf, ns)?,
        None => buf.extend_from_slice(b"null"),
    }
    if e.backoffs > 0 {
        // Only on timeout episodes that backed off: other events' JSON is as it was.
        buf.extend_from_slice(b",\"backoffs\":");
        number.write_u32(buf, e.backoffs)?;
    }
    buf.extend_from_slice(b",\"release_ms\":");
    write_opt_ms(buf, f.release_ns)?;
    buf.extend_from_slice(b",\"held_side\":\"");
    buf.extend_from_slice(f.held_side.name().as_bytes());
    buf.extend_from_slice(b"\",\"ack_side\":");
    write_name(buf, f.ack_side.map(|s| s.name()));
    buf.extend_from_slice(b",\"peer_stack\":");
    write_name(buf, e.peer_stack.map(|s| s.name()));
    buf.extend_from_slice(b",\"writes\":[");
    for (i, &w) in e.writes.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        number.write_u32(buf, w)?;
    }
    buf.push(b']');
    if let Some(h) = e.handshake_not_taken {
        // Only on a timeout of the client's first data the server never took.
        buf.extend_from_slice(b",\"handshake_not_taken\":{\"by\":\"");
        buf.extend_from_slice(h.by_name().as_bytes());
        buf.extend_from_slice(b"\",\"proof\":\"");
        buf.extend_from_slice(h.proof_name().as_bytes());
        buf.extend_from_slice(b"\"}");
    }
    if let Some(p) = e.paced.as_deref() {
        buf.extend_from_slice(b",\"nagle_ack_paced\":");
        write_pacing(buf, f.held_side, p)?;
    }
    buf.push(b'}');
    Ok(())
}

/// One side's [`Pacing`]: its holds, their cost, and the throughput estimate without them.
fn write_pacing(buf: &mut Vec<u8>, held: crate::flow::Side, p: &Pacing) -> io::Result<()> {
    let mut number = CompactFormatter;
    buf.extend_from_slice(b"{\"held_side\":");
    write_name(buf, Some(held.name()));
    buf.extend_from_slice(b",\"holds\":");
    number.write_u64(buf, p.holds)?;
    buf.extend_from_slice(b",\"released_by_data\":");
    number.write_u64(buf, p.by_data)?;
    for (key, span) in [
        (&b",\"delay_sum_ms\":"[..], p.delay_sum_ns),
        (b",\"time_lost_ms\":", p.time_lost_ns),
        (b",\"span_ms\":", p.span_ns),
    ] {
        buf.extend_from_slice(key);
        write_ms(buf, span)?;
    }
    buf.extend_from_slice(b",\"bytes\":");
    number.write_u64(buf, p.bytes)?;
    for (key, rate) in [
        (&b",\"bytes_per_s\":"[..], p.bytes_per_s()),
        (
            b",\"bytes_per_s_without_estimate\":",
            p.bytes_per_s_without(),
        ),
    ] {
        buf.extend_from_slice(key);
        match rate {
            Some(r) => number.write_f64(buf, r.round())?,
            None => buf.extend_from_slice(b"null"),
        }
    }
    buf.extend_from_slice(b",\"estimate\":\"bytes / (span_ms - time_lost_ms)\"}");
    Ok(())
}

/// A fixed ASCII name (no character JSON escapes) as a string, or `null`.
fn write_name(buf: &mut Vec<u8>, name: Option<&'static str>) {
    match name {
        Some(name) => {
            buf.push(b'"');
            buf.extend_from_slice(name.as_bytes());
            buf.push(b'"');
        }
        None => buf.extend_from_slice(b"null"),
    }
}

/// Counts per kind as `KindCounts`' `Serialize` writes them (one key per kind, in report
/// order), the keys being fixed ASCII names.
fn write_counts(buf: &mut Vec<u8>, counts: &KindCounts) -> io::Result<()> {
    let mut number = CompactFormatter;
    for (i, kind) in StallKind::ALL.into_iter().enumerate() {
        buf.extend_from_slice(if i == 0 { b"{\"" } else { b",\"" });
        buf.extend_from_slice(kind.name().as_bytes());
        buf.extend_from_slice(b"\":");
        number.write_u64(buf, counts.get(kind))?;
    }
    buf.push(b'}');
    Ok(())
}

/// A string, escaped as JSON requires.
fn write_str(buf: &mut Vec<u8>, s: &str) -> io::Result<()> {
    serde_json::to_writer(buf, s).map_err(io::Error::from)
}

/// A flow's label (`client-server`) and where the client's part ends in it.
pub struct FlowLabel {
    text: String,
    client_len: usize,
    /// `text` as a JSON string, quoted and escaped.
    quoted: Vec<u8>,
}

impl FlowLabel {
    /// The label of `f`, as [`FlowSummary::label`] writes it, computed once per flow:
    /// formatting addresses is the costly part of a flow's JSON.
    pub fn of(f: &FlowSummary) -> FlowLabel {
        let text = f.label();
        // Neither an IPv4 nor a bracketed IPv6 endpoint contains '-'.
        let client_len = text.find('-').unwrap_or(text.len());
        let mut quoted = Vec::with_capacity(text.len() + 2);
        // Writing to a Vec cannot fail.
        let _ = write_str(&mut quoted, &text);
        FlowLabel {
            text,
            client_len,
            quoted,
        }
    }

    /// `client-server`.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The label as a JSON string.
    fn quoted(&self) -> &[u8] {
        &self.quoted
    }

    fn client(&self) -> &str {
        &self.text[..self.client_len]
    }

    fn server(&self) -> &str {
        self.text.get(self.client_len + 1..).unwrap_or_default()
    }

    /// Writes `part` of the label (its client or server) as a JSON string: copied between
    /// quotes when the label needed no escaping (its quoted text only added the quotes), as
    /// addresses and ports never do.
    fn write_part(&self, buf: &mut Vec<u8>, part: &str) -> io::Result<()> {
        if self.quoted.len() == self.text.len() + 2 {
            buf.push(b'"');
            buf.extend_from_slice(part.as_bytes());
            buf.push(b'"');
            Ok(())
        } else {
            write_str(buf, part)
        }
    }
}

/// Writes a span in milliseconds, or null when unknown.
fn write_opt_ms(buf: &mut Vec<u8>, span: Option<Span>) -> io::Result<()> {
    match span {
        Some(span) => write_ms(buf, span),
        None => {
            buf.extend_from_slice(b"null");
            Ok(())
        }
    }
}

/// Writes one flow of `flows[]` as a JSON object, with its stall patterns and their fixes
/// (written field by field, as [`write_event`] and for the same reason).
pub fn write_flow(
    buf: &mut Vec<u8>,
    f: &FlowSummary,
    label: &FlowLabel,
    flow_events: &[&StallEvent],
    outer: Option<&crate::decode::Outer>,
) -> io::Result<()> {
    let mut number = CompactFormatter;
    buf.extend_from_slice(b"{\"flow\":");
    buf.extend_from_slice(label.quoted());
    buf.extend_from_slice(b",\"flow_id\":");
    number.write_u64(buf, f.id)?;
    buf.extend_from_slice(b",\"client\":");
    label.write_part(buf, label.client())?;
    buf.extend_from_slice(b",\"server\":");
    label.write_part(buf, label.server())?;
    buf.extend_from_slice(b",\"server_port\":");
    number.write_u16(buf, f.server.port)?;
    buf.extend_from_slice(b",\"client_guess\":");
    write_name(buf, Some(f.client_guess.name()));
    buf.extend_from_slice(b",\"capture_position\":");
    write_name(buf, Some(f.capture_position()));
    for (key, value) in [
        (&b",\"packets\":"[..], f.packets),
        (b",\"bytes_client_to_server\":", f.bytes[0]),
        (b",\"bytes_server_to_client\":", f.bytes[1]),
        (b",\"retransmissions\":", f.retransmissions),
        (b",\"loss_probes\":", f.loss_probes),
        (b",\"capture_gaps\":", f.capture_gaps),
        (b",\"requests\":", f.requests),
    ] {
        buf.extend_from_slice(key);
        number.write_u64(buf, value)?;
    }
    buf.extend_from_slice(b",\"stalls\":");
    write_counts(buf, &f.counts)?;
    buf.extend_from_slice(b",\"time_lost_ms\":");
    write_ms(buf, f.time_lost_ns)?;
    buf.extend_from_slice(b",\"worst_stall_ms\":");
    write_ms(buf, f.worst_stall_ns)?;
    let (p50, p99, max) = match f.latency_us {
        Some((p50, p99, max)) => (Some(p50), Some(p99), Some(max)),
        None => (None, None, None),
    };
    for (key, value) in [
        (&b",\"p50_ms\":"[..], p50),
        (b",\"p99_ms\":", p99),
        (b",\"max_ms\":", max),
    ] {
        buf.extend_from_slice(key);
        match value {
            Some(us) => write_ms_of_us(buf, u64::from(us))?,
            None => buf.extend_from_slice(b"null"),
        }
    }
    buf.extend_from_slice(b",\"mss\":[");
    number.write_u32(buf, f.mss[0])?;
    buf.push(b',');
    number.write_u32(buf, f.mss[1])?;
    buf.extend_from_slice(b"],\"mss_source\":[");
    write_name(buf, Some(f.mss_source[0].name()));
    buf.push(b',');
    write_name(buf, Some(f.mss_source[1].name()));
    // The flow's span and the two legs of its path as the capture shows them: what every
    // claim about the flow is bounded by.
    buf.extend_from_slice(b"],\"span_ms\":");
    write_ms(buf, f.span_ns.1.since(f.span_ns.0))?;
    buf.extend_from_slice(b",\"start\":");
    number.write_f64(buf, f.span_ns.0.as_secs_f64())?;
    buf.extend_from_slice(b",\"path\":{\"client_rtt_ms\":");
    write_opt_ms(buf, f.near_rtt_ns[0])?;
    buf.extend_from_slice(b",\"server_rtt_ms\":");
    write_opt_ms(buf, f.near_rtt_ns[1])?;
    buf.extend_from_slice(b",\"from\":");
    write_name(buf, Some(f.path_source.name()));
    buf.push(b'}');
    if let Some(pacing) = f.pacing.as_deref() {
        // Only on flows with paced writes: other flows' JSON is as it was.
        buf.extend_from_slice(b",\"nagle_ack_paced\":[");
        let sides = [crate::flow::Side::Client, crate::flow::Side::Server];
        let paced = sides
            .iter()
            .zip(pacing)
            .filter_map(|(s, p)| Some((*s, p.as_ref()?)));
        for (i, (side, p)) in paced.enumerate() {
            if i > 0 {
                buf.push(b',');
            }
            write_pacing(buf, side, p)?;
        }
        buf.push(b']');
    }
    if let Some(outer) = outer {
        // Only for tunnelled flows: other flows' JSON is as it was.
        buf.extend_from_slice(b",\"outer\":{\"kind\":");
        write_name(buf, Some(outer.kind.name()));
        buf.extend_from_slice(b",\"src\":");
        write_str(buf, &outer.src.to_string())?;
        buf.extend_from_slice(b",\"dst\":");
        write_str(buf, &outer.dst.to_string())?;
        buf.extend_from_slice(b"},\"patterns\":[");
    } else {
        buf.extend_from_slice(b",\"patterns\":[");
    }
    for (i, p) in patterns(flow_events).into_iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        buf.extend_from_slice(b"{\"kind\":");
        write_name(buf, Some(p.kind.name()));
        buf.extend_from_slice(b",\"held_side\":");
        write_name(buf, Some(p.held_side.name()));
        buf.extend_from_slice(b",\"count\":");
        number.write_u64(buf, p.count)?;
        buf.extend_from_slice(b",\"explanation\":");
        write_str(buf, &explain(p.example))?;
        buf.extend_from_slice(b",\"fixes\":");
        serde_json::to_writer(&mut *buf, &fixes(p.kind, p.held_side, Some(p.example)))?;
        buf.push(b'}');
    }
    buf.extend_from_slice(b"]}");
    Ok(())
}

/// Events or flows rendered as one piece of text (about 350 bytes each): small enough that the
/// pieces rendered ahead of the writer stay small, large enough that handing one over costs
/// nothing next to rendering it.
const ITEMS_PER_CHUNK: usize = 1024;
/// Pieces each renderer may have finished ahead of the writer: bounds the text held in memory
/// (threads × this × [`ITEMS_PER_CHUNK`] lines) while the writer never waits for a renderer
/// that could have run.
const CHUNKS_AHEAD: usize = 2;

/// Writes the whole analysis as one JSON document, one event and one flow per line, without
/// building the whole document in memory (a large capture has tens of thousands of events, a
/// long one millions of flows, read from `flows` a chunk at a time). Lines are rendered on
/// every CPU, a bounded round at a time, and written in order: the document is the same for
/// any number of CPUs. `a.flows` holds at least the flows of `a.events`.
pub fn write(
    out: &mut impl Write,
    a: &Analysis,
    flows: &dyn AllFlows,
    input: &InputFacts,
) -> io::Result<()> {
    let totals = flows.totals();
    let summary = json!({
        "packets": input.records.max(a.packets),
        "tcp_segments": a.packets,
        "flows": totals.flows,
        "stalls": &a.counts,
        "stall_total": a.stall_count(),
        "warnings": input.warnings,
        "flows_with_capture_gaps": totals.with_capture_gaps,
        "files": input.files,
        "skipped": skipped(&input.skipped),
        "unreadable": input.unreadable,
        "undecided": a.undecided.entries().iter().map(|(kind, reason, count)| json!({
            "kind": kind.name(),
            "reason": reason.name(),
            "count": count,
        })).collect::<Vec<_>>(),
    });
    write!(out, "{{\"summary\": {summary},\n\"events\": [")?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Labels once per flow with events, not per event: formatting addresses is the costly part.
    let by_flow = events_by_flow(&a.events);
    let labels: FxHashMap<u64, FlowLabel> = a
        .flows
        .iter()
        .filter(|f| by_flow.contains_key(&f.id))
        .map(|f| (f.id, FlowLabel::of(f)))
        .collect();
    write_lines(out, &a.events, threads, true, |buf, e| {
        let label = labels
            .get(&e.flow_id)
            .map_or(&b"\"\""[..], FlowLabel::quoted);
        write_event_quoted(buf, e, |buf| {
            buf.extend_from_slice(label);
            Ok(())
        })
        .map_err(serde_json::Error::io)?;
        if let Some(file) = input.file_of(e.ordinal) {
            // Several files: the one whose packet numbers `packet` counts in, and the one of
            // `release_packet` when that is another (a capture rotated between the two).
            buf.pop();
            buf.extend_from_slice(b",\"file\":");
            write_str(buf, file).map_err(serde_json::Error::io)?;
            let release_file = e.released_by.and_then(|r| input.file_of(r.ordinal));
            if let Some(other) = release_file.filter(|&other| other != file) {
                buf.extend_from_slice(b",\"release_file\":");
                write_str(buf, other).map_err(serde_json::Error::io)?;
            }
            buf.push(b'}');
        }
        Ok(())
    })?;
    write!(out, "\n],\n\"flows\": [")?;
    let mut first = true;
    flows.for_each_chunk(&mut |chunk| {
        write_lines(out, chunk, threads, first, |buf, f| {
            let events = by_flow.get(&f.id).map(Vec::as_slice).unwrap_or_default();
            let outer = input.outers.get(
                (f.client.addr, f.client.port),
                (f.server.addr, f.server.port),
            );
            match labels.get(&f.id) {
                Some(label) => write_flow(buf, f, label, events, outer),
                None => write_flow(buf, f, &FlowLabel::of(f), events, outer),
            }
            .map_err(serde_json::Error::io)
        })?;
        first &= chunk.is_empty();
        Ok(())
    })?;
    write!(out, "\n],\n\"undecided\": [")?;
    write_lines(out, a.undecided.claims(), threads, true, |buf, c| {
        let mut claim = undecided_claim(c);
        if let Some(file) = input.file_of(c.ordinal) {
            claim["file"] = json!(file);
        }
        serde_json::to_writer(buf, &claim)
    })?;
    writeln!(out, "\n]}}")
}

/// One claim of `undecided[]`: what the rule found, where, and the proof it lacks.
fn undecided_claim(c: &crate::detect::evidence::Claim) -> serde_json::Value {
    json!({
        "kind": c.kind.name(),
        "reason": c.reason.name(),
        "why": c.reason.describe(),
        "flow_id": c.flow_id,
        "flow": format!("{}-{}", c.client, c.server),
        "held_side": c.held_side.name(),
        "time": c.ts_ns.as_secs_f64(),
        "packet": c.packet_number,
        "delay_ms": ms(c.delay_ns),
    })
}

/// Writes `items` as lines of a JSON array body (`\n` before the array's first, `,\n` before
/// the others; `opens` when `items` starts the array), each rendered by `render`. With several
/// CPUs, `threads` renderers take the pieces of [`ITEMS_PER_CHUNK`] lines in turn while this
/// thread writes the finished ones in order: writing overlaps rendering, and the document is
/// the same for any number of CPUs.
fn write_lines<T: Sync>(
    out: &mut impl Write,
    items: &[T],
    threads: usize,
    opens: bool,
    render: impl Fn(&mut Vec<u8>, &T) -> serde_json::Result<()> + Sync,
) -> io::Result<()> {
    let render_chunk = |index: usize, chunk: &[T]| -> serde_json::Result<Vec<u8>> {
        let mut buf = Vec::with_capacity(chunk.len() * 384);
        for (i, item) in chunk.iter().enumerate() {
            let first = opens && index == 0 && i == 0;
            buf.extend_from_slice(if first { b"\n" } else { b",\n" });
            render(&mut buf, item)?;
        }
        Ok(buf)
    };
    let chunks: Vec<&[T]> = items.chunks(ITEMS_PER_CHUNK).collect();
    // One piece, or one CPU (WebAssembly has no threads): a helper would only cost.
    if threads <= 1 || chunks.len() <= 1 {
        for (index, chunk) in chunks.into_iter().enumerate() {
            out.write_all(&render_chunk(index, chunk)?)?;
        }
        return Ok(());
    }
    let renderers = threads.min(chunks.len());
    std::thread::scope(|scope| {
        let rendered: Vec<_> = (0..renderers)
            .map(|first| {
                let (done, finished) = std::sync::mpsc::sync_channel(CHUNKS_AHEAD);
                let (chunks, render_chunk) = (&chunks, &render_chunk);
                scope.spawn(move || {
                    for index in (first..chunks.len()).step_by(renderers) {
                        // The writer stopped on an error: nothing more is wanted.
                        if done.send(render_chunk(index, chunks[index])).is_err() {
                            break;
                        }
                    }
                });
                finished
            })
            .collect();
        for index in 0..chunks.len() {
            // A renderer that ended without its piece panicked; the scope re-raises that.
            let Ok(buf) = rendered[index % renderers].recv() else {
                break;
            };
            out.write_all(&buf?)?;
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `count` numbers as lines through [`write_lines`] on `threads` renderers.
    fn lines(count: usize, threads: usize, opens: bool) -> io::Result<Vec<u8>> {
        let items: Vec<usize> = (0..count).collect();
        let mut out = Vec::new();
        write_lines(&mut out, &items, threads, opens, |buf, n| {
            serde_json::to_writer(buf, &json!({ "n": n }))
        })?;
        Ok(out)
    }

    /// Milliseconds written as decimals are the text serde_json writes for the same value as a
    /// float: every microsecond up to 2 s, every power of ten and its neighbours, the ends of
    /// the decimal range, and a spread of spans in nanoseconds up to years.
    #[test]
    fn milliseconds_are_written_as_serde_json_writes_them() {
        let float = |value: f64| {
            let mut buf = Vec::new();
            CompactFormatter
                .write_f64(&mut buf, value)
                .expect("written");
            String::from_utf8(buf).expect("ASCII")
        };
        let fast = |us: u64| {
            let mut buf = Vec::new();
            write_ms_of_us(&mut buf, us).expect("written");
            String::from_utf8(buf).expect("ASCII")
        };
        let mut cases: Vec<u64> = (0..2_000_000).collect();
        for exp in 0..=16 {
            let p = 10u64.pow(exp);
            cases.extend([p - 1, p, p + 1, 7 * p + 3]);
        }
        cases.extend([DECIMAL_US_BELOW - 1, u64::from(u32::MAX)]);
        for us in cases {
            assert_eq!(fast(us), float(us as f64 / 1e3), "{us} us");
        }
        let by_span = |ns: u64| {
            let mut buf = Vec::new();
            write_ms(&mut buf, Span::from_nanos(ns)).expect("written");
            assert_eq!(
                String::from_utf8(buf).expect("ASCII"),
                float(ms(Span::from_nanos(ns))),
                "{ns} ns"
            );
        };
        // Halves and their neighbours, where the two roundings could part, to the integer
        // path's end and past it.
        for us in (0..20u64).chain([999_999, 1 << 40, DECIMAL_NS_BELOW / 1000 - 1, 1 << 52]) {
            for rest in [0, 1, 499, 500, 501, 999] {
                by_span(us * 1000 + rest);
            }
        }
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..200_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Up to about 3.6 years of nanoseconds, spread over every magnitude.
            by_span(state >> (state % 57 + 7));
        }
    }

    /// A flow's counts per kind, written key by key, are the text of their `Serialize`.
    #[test]
    fn counts_are_written_as_serde_json_writes_them() {
        let mut counts = KindCounts::default();
        for (i, kind) in StallKind::ALL.into_iter().enumerate() {
            for _ in 0..i * 7 {
                counts.add(kind);
            }
            let mut buf = Vec::new();
            write_counts(&mut buf, &counts).expect("written");
            assert_eq!(buf, serde_json::to_vec(&counts).expect("serialised"));
        }
    }

    /// The document does not depend on the CPUs rendering it: the same bytes, in order, from
    /// one thread and from several, for a piece, a few pieces and a part-filled last piece.
    #[test]
    fn lines_are_the_same_on_any_number_of_threads() {
        for count in [0, 1, ITEMS_PER_CHUNK, 3 * ITEMS_PER_CHUNK + 17] {
            for opens in [true, false] {
                let one = lines(count, 1, opens).expect("rendered");
                for threads in [2, 3, 8] {
                    assert_eq!(lines(count, threads, opens).expect("rendered"), one);
                }
                let text = String::from_utf8(one).expect("UTF-8");
                assert_eq!(text.lines().filter(|l| l.starts_with('{')).count(), count);
                if count > 0 {
                    let expected_start = if opens { "\n{\"n\":0}" } else { ",\n{\"n\":0}" };
                    assert!(text.starts_with(expected_start), "{text:.40}");
                }
            }
        }
    }

    /// A line that cannot be rendered ends the writing with its error, whichever renderer met
    /// it, and nothing after it is written.
    #[test]
    fn a_render_error_ends_the_lines() {
        let items: Vec<usize> = (0..4 * ITEMS_PER_CHUNK).collect();
        let bad = 2 * ITEMS_PER_CHUNK + 5;
        for threads in [1, 2, 3] {
            let mut out = Vec::new();
            let result = write_lines(&mut out, &items, threads, true, |buf, &n| {
                if n == bad {
                    return Err(serde_json::Error::io(io::Error::other("unrenderable")));
                }
                serde_json::to_writer(buf, &n)
            });
            assert!(result.is_err(), "{threads} threads");
            let written = String::from_utf8(out).expect("UTF-8");
            assert_eq!(written.matches(",\n").count() + 1, 2 * ITEMS_PER_CHUNK);
        }
    }
}
