//! What `lab --list` shows: the selected rows with the sizes in effect, each with its expected
//! outcome and explanation. [`crate::report::lab`] writes it as text or JSON.

use std::time::Duration;

use super::expect::{Geometry, WireOutcome};
use super::explain::Explanation;
use super::runner::RunSettings;
use super::scenarios::{ConnectionMode, Expectation, Variant, SCENARIOS};
use crate::exchange::protocol::Protocol;
use crate::exchange::write::WriteStrategy;
pub(crate) use crate::report::model::lab::{ListedRow, ListedScenario, Listing};
use crate::Side;

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
