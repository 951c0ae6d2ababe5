//! What `lab --list` shows: the selected rows with the sizes in effect, each with its expected
//! outcome and explanation. [`crate::report::lab`] writes it as text or JSON.

use std::time::Duration;

use serde::Serialize;

use super::expect::{Geometry, WireOutcome};
use super::explain::Explanation;
use super::runner::RunSettings;
use super::scenarios::{Variant, SCENARIOS};

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
        explanation: Explanation::of(variant, Geometry::of(variant, &sizes)).to_string(),
    }
}
