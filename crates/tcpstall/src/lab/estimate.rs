//! How long a run over an emulated path will take, said before it starts (`lab --rtt 60`
//! runs for about two minutes): each row's requests times the round trips its exchange needs
//! (`WireOutcome::round_trips`, one more for a connection per request), plus the delayed-ACK
//! wait of the rows that stall.

use std::time::Duration;

use super::expect::WireOutcome;
use super::runner::RunSettings;
use super::scenarios::Variant;

/// The Linux delayed-ACK wait a stalled request adds, 40 ms plus a jiffy or so.
const STALL: Duration = Duration::from_millis(44);

/// The estimated length of running `selected` over a path of round-trip time `rtt`.
pub(crate) fn run_time(selected: &[Variant], settings: &RunSettings, rtt: Duration) -> Duration {
    let rtt = rtt.as_secs_f64();
    let seconds: f64 = selected
        .iter()
        .map(|variant| {
            // Setting up the row: its server, its first connection.
            let setup = 2.0 * rtt;
            if variant.workload.is_one_way() {
                let waves = settings
                    .stream_connections
                    .div_ceil(settings.stream_parallel.max(1));
                return setup + waves as f64 * (settings.stream_writes as f64 + 2.0) * rtt;
            }
            let sizes = settings
                .segments
                .sizes_of(variant, settings.size, settings.mss);
            let outcome = WireOutcome::of(variant, &sizes);
            let trips =
                f64::from(outcome.round_trips()) + f64::from(u8::from(variant.per_request()));
            let stall = if outcome.stalls() {
                STALL.as_secs_f64()
            } else {
                0.0
            };
            setup + settings.requests as f64 * (trips * rtt + stall)
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

/// The line printed before a run over a path starts.
pub(crate) fn line(selected: &[Variant], settings: &RunSettings, rtt: Duration) -> String {
    let total = run_time(selected, settings, rtt).as_secs();
    let when = if total >= 90 {
        format!("about {} min {} s", total / 60, total % 60)
    } else {
        format!("about {} s", total.max(1))
    };
    let rows = selected.len();
    let row_word = if rows == 1 { "row" } else { "rows" };
    format!(
        "{rows} {row_word} over a {} ms path: {when} (Ctrl-C prints the rows finished)",
        rtt.as_millis()
    )
}
