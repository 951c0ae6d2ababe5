//! Latency figures as every report shows them (lab's rows, probe's requests).

/// Median, 99th percentile and maximum of a set of latencies, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LatencySummary {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Largest.
    pub max_ms: f64,
}
