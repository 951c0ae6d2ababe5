//! `analyze --json`: the stable keys of ARCHITECTURE.md (`summary.packets`, `summary.flows`,
//! `summary.stalls.{nagle_delayed_ack,cork_timer,rto,zero_window}`, `events[].{kind,flow,time,
//! delay_ms,held_side,ack_side}`), plus keys scripts may find useful.

use serde_json::{json, Map, Value};

use crate::detect::verdict::{explain, fixes};
use crate::detect::{Analysis, StallKind};

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

/// The whole analysis as JSON.
pub fn analysis(a: &Analysis, input: &InputFacts) -> Value {
    let mut stalls = Map::new();
    for kind in StallKind::ALL {
        stalls.insert(kind.name().to_string(), json!(a.counts.get(kind)));
    }
    let events: Vec<Value> = a
        .events
        .iter()
        .map(|e| {
            let f = &e.finding;
            json!({
                "kind": f.kind.name(),
                "flow": format!("{}-{}", e.client, e.server),
                "flow_id": e.flow_id,
                "client": e.client.to_string(),
                "server": e.server.to_string(),
                "server_port": e.server.port,
                "time": e.ts_ns as f64 / 1e9,
                "packet": e.packet_number,
                "delay_ms": ms(f.delay_ns),
                "ack_delay_ms": f.ack_delay_ns.map(ms),
                "held_side": f.held_side.name(),
                "ack_side": f.ack_side.map(|s| s.name()),
                "peer_stack": e.peer_stack.map(|s| s.name()),
                "writes": e.writes,
                "mss": e.mss,
                "explanation": explain(e),
                "fixes": fixes(f.kind, f.held_side),
            })
        })
        .collect();
    let flows: Vec<Value> = a
        .flows
        .iter()
        .map(|f| {
            let mut stalls = Map::new();
            for kind in StallKind::ALL {
                stalls.insert(kind.name().to_string(), json!(f.counts.get(kind)));
            }
            json!({
                "flow": f.label(),
                "flow_id": f.id,
                "client": f.client.to_string(),
                "server": f.server.to_string(),
                "server_port": f.server.port,
                "client_guess": f.client_guess.name(),
                "capture_position": f.capture_position(),
                "packets": f.packets,
                "bytes_client_to_server": f.bytes[0],
                "bytes_server_to_client": f.bytes[1],
                "retransmissions": f.retransmissions,
                "requests": f.requests,
                "stalls": stalls,
                "time_lost_ms": ms(f.time_lost_ns),
                "worst_stall_ms": ms(f.worst_stall_ns),
                "p50_ms": f.latency_us.map(|l| f64::from(l.0) / 1e3),
                "p99_ms": f.latency_us.map(|l| f64::from(l.1) / 1e3),
                "max_ms": f.latency_us.map(|l| f64::from(l.2) / 1e3),
                "mss": f.mss,
            })
        })
        .collect();
    json!({
        "summary": {
            "packets": input.records.max(a.packets),
            "tcp_segments": a.packets,
            "flows": a.flows.len(),
            "stalls": stalls,
            "stall_total": a.stall_count(),
            "warnings": input.warnings,
            "files": input.files,
        },
        "events": events,
        "flows": flows,
    })
}
