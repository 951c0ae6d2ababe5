//! What `lab --list` shows: the selected rows with the sizes in effect, each with its expected
//! outcome and explanation. [`crate::report::lab`] writes it as text or JSON.

use std::time::Duration;

use serde::Serialize;

use super::expect::{Geometry, WireOutcome};
use super::explain::Explanation;
use super::runner::RunSettings;
use super::scenarios::{ConnectionMode, Expectation, Variant, SCENARIOS};
use super::server::Protocol;
use super::write::WriteStrategy;
use crate::Side;

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

impl Listing {
    /// The listing of `selected` under `settings`, over a path of round-trip time `rtt`.
    pub fn of(selected: &[Variant], settings: &RunSettings, rtt: Option<Duration>) -> Listing {
        let scenarios = SCENARIOS
            .iter()
            .filter_map(|info| {
                let variants: Vec<ListedRow> = selected
                    .iter()
                    .filter(|v| v.scenario == info.scenario)
                    .map(|v| listed_row(v, settings))
                    .collect();
                (!variants.is_empty()).then_some(ListedScenario {
                    name: info.name,
                    description: info.description,
                    variants,
                })
            })
            .collect();
        Listing { rtt, scenarios }
    }
}

fn listed_row(variant: &Variant, settings: &RunSettings) -> ListedRow {
    let sizes = settings
        .segments
        .sizes_of(variant, settings.size, settings.mss);
    let outcome = WireOutcome::of(variant, &sizes);
    ListedRow {
        name: variant.name_in_run(settings.size),
        size: sizes.size,
        mss: sizes.mss,
        expected_stall: outcome.stalls(),
        round_trips: outcome.round_trips(),
        held_side: outcome.held_side().map(|side| side.name()),
        protocol: protocol_name((variant.workload.protocol)(sizes.size)),
        // A typical client has one request in flight: a batched row's server answers it in
        // one write, with nothing behind it to hold.
        typical_client_stall: variant.workload.batches().is_none()
            && WireOutcome::of(&with_typical_client(variant), &sizes).stalls(),
        requests_in_flight: variant.workload.batches().map_or(1, |(depth, _)| depth),
        explanation: Explanation::of(variant, Geometry::of(variant, &sizes)).to_string(),
    }
}

/// `variant` with its client side as a typical client's: one write per request, Nagle on,
/// no TCP_QUICKACK nor delayed-ACK cap, keep-alive. The server side is the row's own.
fn with_typical_client(variant: &Variant) -> Variant {
    // Such a client delays its ACKs once the connection is in ping-pong mode (after its first
    // turn, `tcp_event_data_sent`), so a server's held write waits for its timer; when the
    // client writes the message, the row's server decides the ACKs as in the row.
    let expected = match variant.workload.writer {
        Side::Server => Expectation::Stall,
        Side::Client => variant.expected,
    };
    Variant {
        expected,
        client_write: WriteStrategy::Single,
        client_nodelay: false,
        client_quickack: false,
        delack_cap: variant.delack_cap.filter(|side| *side == Side::Server),
        route_fix: variant.route_fix.filter(|fix| fix.side == Side::Server),
        connections: ConnectionMode::KeepAlive,
        ..*variant
    }
}

fn protocol_name(protocol: Protocol) -> &'static str {
    match protocol {
        Protocol::Echo => "echo",
        Protocol::Http { .. } => "http",
        Protocol::Memcached { .. } => "memcached",
        Protocol::Sink { .. } => "sink",
    }
}
