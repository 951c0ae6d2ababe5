//! What `tcpstall lab` hands its renderers ([`crate::report::lab`], the lab page of
//! [`crate::report::html`]): the results of a run and the catalogue of `lab --list`, plain data
//! the lab fills in.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use crate::detect::StallKind;
use crate::host::kernel::KernelFacts;
use crate::Side;

/// The whole output of `lab --json`.
#[derive(Debug, Serialize)]
pub(crate) struct LabReport {
    /// The running kernel's facts.
    pub kernel: KernelFacts,
    /// The header line: release, HZ, autocorking, delayed-ACK window.
    pub kernel_summary: String,
    /// One entry per row run.
    pub rows: Vec<RowResult>,
    /// The capture written with `--capture`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture: Option<CaptureReport>,
    /// The emulated path of `--rtt`, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<PathReport>,
    /// Set when a signal ended the run: the rows above are those finished before it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interrupted>,
}

/// The emulated path a run used.
#[derive(Debug, Serialize)]
pub(crate) struct PathReport {
    /// Round-trip time added by the relay.
    pub rtt_ms: f64,
    /// Bottleneck rate, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_mbit: Option<f64>,
    /// `--lose-segment`: the segment of each connection the relay lost, client to server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lose_segment: Option<u32>,
    /// The client's namespace (deleted when the run ended).
    pub client_namespace: String,
    /// The server's namespace (deleted when the run ended).
    pub server_namespace: String,
    /// `--peer`: the user-space stack playing one end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerReport>,
}

/// What `--capture` wrote.
#[derive(Debug, Serialize)]
pub(crate) struct CaptureReport {
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

/// One measured row, the result the lab's `run_variant` returns: the stable keys of `lab --json` and
/// the lab's own additions.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RowResult {
    /// Scenario name.
    pub scenario: &'static str,
    /// Variant name; a row named by its size (`value-1400`) shows the size in use
    /// (`value-2400` with `--size 2400`).
    pub variant: String,
    /// Requests completed (stream: writes).
    pub requests: usize,
    /// Median latency (stream: from a write to its last byte reaching the receiver).
    pub p50_ms: f64,
    /// 99th percentile latency.
    pub p99_ms: f64,
    /// Largest latency.
    pub max_ms: f64,
    /// Data segments of both ends per request (`tcpi_data_segs_out` deltas).
    pub segments_per_request: f64,
    /// p50 at or above `stall_threshold_ms`.
    pub stalled: bool,
    /// The p50 from which the row counts as stalled: the round trips its exchange needs
    /// without any timer (the catalogue's `WireOutcome::round_trips`), times the path's RTT, plus 30 ms
    /// (the lab's `stall_threshold_ms`); 30 ms on loopback.
    pub stall_threshold_ms: f64,
    /// Round-trip time of the emulated path (`lab --rtt`); absent on loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path_rtt_ms: Option<f64>,
    /// What Linux is expected to do, from the catalogue (`WireOutcome::stalls`).
    pub expected_stall: bool,
    /// Why, from the kernel's rules.
    pub explanation: String,
    /// Requests that took at least the stall threshold: with a capture, the number of
    /// Nagle × delayed-ACK events an analyzer should find in this row's flows.
    pub stalled_requests: usize,
    /// Which end's write Nagle holds when the row stalls as expected: `client` (the
    /// connection's initiator) or `server`, as in `analyze --json`; absent when no stall is
    /// expected.
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "side_name")]
    pub held_side: Option<Side>,
    /// What the stall detector found in the row's own captured traffic (stalls by kind, the
    /// held side); `null` when the lab could not capture (no CAP_NET_RAW).
    pub detector: Option<DetectorVerdict>,
    /// Pipeline and concurrent rows: the kind of event the rules say a capture of the row
    /// shows (`nagle_ack_paced`: holds paced by ordinary ACKs; `nagle_delayed_ack`: released
    /// by the delayed-ACK timer); absent where nothing is held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_detector_kind: Option<&'static str>,
    /// The kind the row's detector check looks for: the expected kind, absent when the row ran
    /// too few rounds for it to be decided (`lab::own_traffic::kind_checked`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detector_kind_checked: Option<&'static str>,
    /// The server's port: a flow to this port in a capture belongs to this row.
    pub server_port: u16,
    /// TCP connections the row opened.
    pub connections: usize,
    /// Payload size, in bytes.
    pub size: usize,
    /// Bytes of the two writes of the row's message as the split variants write it (echo
    /// request, HTTP or memcached reply; a second part of 0: one write). The other variants
    /// send the same bytes their own way.
    pub message_parts: [usize; 2],
    /// Payload bytes of a full segment in effect (MSS minus TCP options), the size the
    /// message's parts are measured against.
    pub payload_mss: usize,
    /// TCP_MAXSEG set on both ends, if any.
    pub mss: Option<u32>,
    /// Data segments the clients sent.
    pub client_data_segments: u64,
    /// Data segments the server sent.
    pub server_data_segments: u64,
    /// Stream: data segments per write, at most 1 (1 = every write left as its own segment).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_segment_share: Option<f64>,
    /// Stream over an emulated path: share of writes that left as a packet of their own (one
    /// whole write, nothing merged), counted on the path as document 001 counted in Wireshark.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub own_packet_share: Option<f64>,
    /// Stream over an emulated path: share of the client's data packets that carry PSH, as
    /// document 001 counted ("packets sent without buffering", a share of packets: 2 of 9
    /// when ten writes merge behind the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pushed_packet_share: Option<f64>,
    /// Stream: change of TcpExt TCPAutoCorking during the row (system-wide counter).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autocorking_delta: Option<u64>,
    /// Pipeline and concurrent: requests answered per second of the row's rounds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<f64>,
    /// Pipeline and concurrent: share of the request rate lost against the row's scenario's
    /// `nodelay` row on the same path (0.4: 40 % fewer requests per second); absent on that
    /// row and when it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_lost: Option<f64>,
    /// Inherit: the option read on the accepted socket before anything was set on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited: Option<bool>,
    /// What went wrong (timeouts, resets), if anything.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A side as the JSON names it (`client`, `server`).
fn side_name<S: Serializer>(side: &Option<Side>, serializer: S) -> Result<S::Ok, S::Error> {
    match side {
        Some(side) => serializer.serialize_str(side.name()),
        None => serializer.serialize_none(),
    }
}

/// What the detector found in one row's flows: stalls by kind, and the side whose data
/// waited. JSON: `{"stalls": {"nagle_delayed_ack": N, "cork_timer": N, "rto": N,
/// "zero_window": N}, "holds": {"nagle_ack_paced": N, "nagle_minor": N}, "held_side": "client" |
/// "server" | null, "paced_side": "client" | "server" | null}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectorVerdict {
    /// Stalls of each kind that counts as a stall ([`StallKind::is_stall`]), in report order.
    pub stalls: Vec<(StallKind, u64)>,
    /// Events of the kinds that do not count as stalls (Nagle holds released by an ordinary
    /// ACK, one RTT each), in report order.
    pub holds: Vec<(StallKind, u64)>,
    /// The side whose data most stalls held; `None` when there was no stall.
    pub held_side: Option<Side>,
    /// The side whose writes were paced by ACKs in most paced flows (`nagle_ack_paced`);
    /// `None` when none was.
    pub paced_side: Option<Side>,
}

/// The table's column: `nagle_delayed_ack×19 client`, kinds joined by commas; `-` for none.
impl fmt::Display for DetectorVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found: Vec<String> = self
            .stalls
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| format!("{}×{n}", kind.name()))
            .collect();
        let found: Vec<String> = match (found.is_empty(), self.paced_side) {
            // Holds are shown by the kind that decides a flow, not one by one.
            (true, Some(side)) => self
                .holds
                .iter()
                .filter(|(kind, n)| *n > 0 && *kind == StallKind::NagleAckPaced)
                .map(|(kind, n)| format!("{}×{n} {}", kind.name(), side.name()))
                .collect(),
            _ => found,
        };
        let text = match (found.is_empty(), self.held_side) {
            (true, _) => "-".to_string(),
            (false, Some(side)) => format!("{} {}", found.join(","), side.name()),
            (false, None) => found.join(","),
        };
        f.pad(&text)
    }
}

impl Serialize for DetectorVerdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The kinds by their stable names.
        struct Stalls<'a>(&'a [(StallKind, u64)]);
        impl Serialize for Stalls<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (kind, n) in self.0 {
                    map.serialize_entry(kind.name(), n)?;
                }
                map.end()
            }
        }
        let mut verdict = serializer.serialize_struct("DetectorVerdict", 4)?;
        verdict.serialize_field("stalls", &Stalls(&self.stalls))?;
        verdict.serialize_field("holds", &Stalls(&self.holds))?;
        verdict.serialize_field("held_side", &self.held_side.map(Side::name))?;
        verdict.serialize_field("paced_side", &self.paced_side.map(Side::name))?;
        verdict.end()
    }
}

/// The peer as `lab --json` reports it (under `path`).
#[derive(Debug, Clone, Serialize)]
pub struct PeerReport {
    /// The system it behaves like.
    pub profile: &'static str,
    /// The end it plays.
    pub side: &'static str,
    /// Its rules, in one line.
    pub rules: &'static str,
}

/// The catalogue as a run with these settings would use it.
#[derive(Debug)]
pub(crate) struct Listing {
    /// The emulated path's round-trip time (`--rtt`), if any: it changes the stall rule.
    pub rtt: Option<Duration>,
    /// The scenarios with at least one selected row, in catalogue order.
    pub scenarios: Vec<ListedScenario>,
}

/// A scenario of the listing (a stable JSON object of `lab --list --json`).
#[derive(Debug, Serialize)]
pub(crate) struct ListedScenario {
    /// Its name.
    pub name: &'static str,
    /// One line about it.
    pub description: &'static str,
    /// Its selected rows.
    pub variants: Vec<ListedRow>,
}

/// A row of the listing.
#[derive(Debug, Serialize)]
pub(crate) struct ListedRow {
    /// The row's name in this run (`value-2400` with `--size 2400`).
    pub name: String,
    /// Payload size in effect, in bytes.
    pub size: usize,
    /// TCP_MAXSEG in effect, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mss: Option<u32>,
    /// Whether Linux stalls it.
    pub expected_stall: bool,
    /// Round trips the exchange needs without a timer (1, or 2 when Nagle holds a tail).
    pub round_trips: u32,
    /// Which end's write Nagle holds when the row stalls as expected (`client`, `server`), as
    /// in `lab --json`; absent when no stall is expected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_side: Option<&'static str>,
    /// What the row's server speaks (`echo`, `http`, `memcached`, `sink`), for a client of
    /// `lab --serve`.
    pub protocol: &'static str,
    /// Whether the row's server stalls a typical client (each request in one write, Nagle
    /// and delayed ACKs left on, connections kept alive), as `tcpstall probe` is: a row
    /// fixed on the client's side meets such a client as its stalling row does.
    pub typical_client_stall: bool,
    /// Requests a client keeps in flight on one connection (1 but for the pipeline and
    /// concurrent rows): a row whose stall needs several meets a typical client cleanly.
    pub requests_in_flight: usize,
    /// Why.
    pub explanation: String,
}

/// What was running when the run was interrupted (`"interrupted"` in `lab --json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Interrupted {
    /// The signal's name (`SIGINT`).
    pub signal: String,
    /// `scenario/variant` of the row that was running, if any; its figures are lost.
    pub row: Option<String>,
    /// Rows finished and shown.
    pub finished: usize,
    /// Rows the run was to run.
    pub total: usize,
}
