//! Latency figures of a row and the lab's definition of "stalled".

use std::time::Duration;

use hdrhistogram::Histogram;

pub use crate::report::model::latency::LatencySummary;
use crate::tcp_rules;

/// A row is stalled when its median is at least this many milliseconds
/// ([`tcp_rules::STALL_THRESHOLD`]: the 40 ms floor of the Linux delayed-ACK timer less a
/// 10 ms margin). A loopback round trip without a stall takes well under 1 ms, so nothing
/// else lands near it.
pub(crate) const STALL_THRESHOLD_MS: f64 = tcp_rules::STALL_THRESHOLD.as_millis() as f64;

/// The stall threshold over a path of round-trip time `rtt` for an exchange that needs
/// `round_trips` round trips without any timer: those round trips plus
/// [`STALL_THRESHOLD_MS`]. A stall is the delayed-ACK timer on top of what the path costs
/// anyway; on loopback (`rtt` zero) this is [`STALL_THRESHOLD_MS`].
// The lab, its user, runs only on Linux.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) fn stall_threshold_ms(round_trips: u32, rtt: Duration) -> f64 {
    f64::from(round_trips) * rtt.as_secs_f64() * 1000.0 + STALL_THRESHOLD_MS
}

impl LatencySummary {
    /// Summarises latencies at nanosecond resolution (3 significant digits: a loopback round
    /// trip is a few microseconds); empty → zeros.
    pub fn of(latencies: &[Duration]) -> LatencySummary {
        // 1 ns to 1 hour at 3 significant digits cannot fail to construct.
        let Ok(mut histogram) = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3) else {
            return LatencySummary::default();
        };
        for latency in latencies {
            let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
            histogram.saturating_record(nanos.max(1));
        }
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        let ms = |nanos: u64| nanos as f64 / 1_000_000.0;
        LatencySummary {
            p50_ms: ms(histogram.value_at_quantile(0.5)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            max_ms: ms(histogram.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = LatencySummary::of(&values);
        assert!((s.p50_ms - 50.0).abs() < 0.1, "{s:?}");
        assert!((s.max_ms - 100.0).abs() < 0.1, "{s:?}");
        assert_eq!(LatencySummary::of(&[]), LatencySummary::default());
        assert_eq!(stall_threshold_ms(2, Duration::from_millis(20)), 70.0);
        assert_eq!(stall_threshold_ms(1, Duration::ZERO), STALL_THRESHOLD_MS);
    }
}
