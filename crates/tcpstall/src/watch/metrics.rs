//! `watch --metrics ADDR`: the run's counters as a Prometheus scrape target (the text
//! exposition format, through the `prometheus` crate), served by a small HTTP handler on a std
//! listener bound only where the user said.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
    TextEncoder,
};

use crate::detect::{StallEvent, StallKind};
use crate::flow::Side;

/// Upper bounds of the delay histogram, seconds: the delayed-ACK floor (40 ms) and its jiffy
/// rounding, macOS/FreeBSD's 100 ms, the 200 ms-class timers (delayed-ACK maximum, cork/probe
/// timer, minimum RTO) and their doublings.
const DELAY_BUCKETS: [f64; 12] = [
    0.01, 0.02, 0.035, 0.045, 0.05, 0.1, 0.15, 0.2, 0.25, 0.5, 1.0, 2.0,
];

/// How long a scraper may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Every metric of a run. Updating is lock-free (atomics); the registry is gathered by the
/// HTTP thread when scraped.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    stalls: IntCounterVec,
    delay: HistogramVec,
    packets: IntCounter,
    tcp_segments: IntCounter,
    kernel_dropped: IntCounter,
    interface_dropped: IntCounter,
    active_flows: IntGauge,
    flows_ended: IntCounter,
    /// `watch --kernel`'s holds: started, short (by how short), ended without their ACK.
    kernel_holds: IntCounter,
    kernel_short_holds: IntCounterVec,
    kernel_holds_ended: IntCounterVec,
    /// Last totals seen, so the counters advance by the difference.
    seen: [AtomicU64; 4],
    /// The same for the kernel's hold counters, in [`KernelTotals`] order.
    seen_kernel: [AtomicU64; 6],
}

/// `watch --kernel`'s hold counters at one moment (the kernel's own, and the short holds
/// read from its ring), written into the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct KernelTotals {
    /// Holds that began.
    pub holds: u64,
    /// Released by their ACK in under 1 ms: counted in the kernel (recorded too with
    /// `--minor`, and then not counted in `minor`).
    pub short: u64,
    /// Released by their ACK from 1 ms to the stall threshold (30 ms): `nagle_minor`.
    pub minor: u64,
    /// Ended by a later write that sent everything.
    pub by_write: u64,
    /// Ended by close() (the FIN pushed the bytes).
    pub by_close: u64,
    /// Ended by a reset or abort.
    pub by_reset: u64,
}

/// Totals of a run at one moment, written into the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Packets captured.
    pub packets: u64,
    /// TCP segments decoded.
    pub tcp_segments: u64,
    /// Dropped by the kernel (capture buffer full).
    pub kernel_dropped: u64,
    /// Dropped by the interface or driver.
    pub interface_dropped: u64,
    /// Flows in the detector now.
    pub active_flows: u64,
}

impl Metrics {
    /// The metrics, named `tcpstall_watch_*`, every stall series present from the start (at 0)
    /// so that a rate over it is defined before the first stall.
    pub fn new() -> prometheus::Result<Metrics> {
        let registry = Registry::new_custom(Some("tcpstall_watch".into()), None)?;
        let stalls = IntCounterVec::new(
            Opts::new(
                "stalls_total",
                "Stalls found, by kind and by the side whose data waited",
            ),
            &["kind", "held_side"],
        )?;
        let delay = HistogramVec::new(
            HistogramOpts::new(
                "stall_delay_seconds",
                "How long the data of a stall waited, by kind",
            )
            .buckets(DELAY_BUCKETS.to_vec()),
            &["kind"],
        )?;
        for kind in StallKind::ALL.into_iter().filter(|k| k.is_reported()) {
            for side in [Side::Client, Side::Server] {
                stalls.with_label_values(&[kind.name(), side.name()]);
            }
            delay.with_label_values(&[kind.name()]);
        }
        let counter = |name: &str, help: &str| IntCounter::new(name, help);
        let kernel_short_holds = IntCounterVec::new(
            Opts::new(
                "kernel_short_holds_total",
                "watch --kernel: Nagle holds released by their ACK under the stall threshold, \
                 by bound (1ms: counted in the kernel only; stall_threshold: 1 ms to 30 ms, \
                 nagle_minor)",
            ),
            &["below"],
        )?;
        let kernel_holds_ended = IntCounterVec::new(
            Opts::new(
                "kernel_holds_ended_total",
                "watch --kernel: Nagle holds ended without their ACK, by what ended them \
                 (write: a later write sent everything; close: the FIN carried them; reset)",
            ),
            &["by"],
        )?;
        for below in ["1ms", "stall_threshold"] {
            kernel_short_holds.with_label_values(&[below]);
        }
        for by in ["write", "close", "reset"] {
            kernel_holds_ended.with_label_values(&[by]);
        }
        let metrics = Metrics {
            kernel_holds: counter(
                "kernel_holds_total",
                "watch --kernel: Nagle holds that began (a write left bytes waiting)",
            )?,
            kernel_short_holds,
            kernel_holds_ended,
            packets: counter("packets_total", "Packets captured")?,
            tcp_segments: counter(
                "tcp_segments_total",
                "TCP segments decoded and fed to the detector",
            )?,
            kernel_dropped: counter(
                "kernel_dropped_packets_total",
                "Packets the kernel dropped because the capture buffer was full (pcap_stats ps_drop); \
                 watch --kernel: holds lost because its ring was full",
            )?,
            interface_dropped: counter(
                "interface_dropped_packets_total",
                "Packets dropped by the interface or its driver (pcap_stats ps_ifdrop)",
            )?,
            active_flows: IntGauge::new("active_flows", "TCP flows the detector follows now")?,
            flows_ended: counter(
                "flows_ended_total",
                "TCP flows retired: closed, or idle past the timeout",
            )?,
            stalls,
            delay,
            registry,
            seen: Default::default(),
            seen_kernel: Default::default(),
        };
        let r = &metrics.registry;
        r.register(Box::new(metrics.stalls.clone()))?;
        r.register(Box::new(metrics.delay.clone()))?;
        for c in [
            &metrics.packets,
            &metrics.tcp_segments,
            &metrics.kernel_dropped,
            &metrics.interface_dropped,
            &metrics.flows_ended,
        ] {
            r.register(Box::new(c.clone()))?;
        }
        r.register(Box::new(metrics.active_flows.clone()))?;
        r.register(Box::new(metrics.kernel_holds.clone()))?;
        r.register(Box::new(metrics.kernel_short_holds.clone()))?;
        r.register(Box::new(metrics.kernel_holds_ended.clone()))?;
        Ok(metrics)
    }

    /// Counts one stall, or one flow side found paced by ACKs (its delay: the holds' time so
    /// far); minor Nagle holds are not counted.
    pub fn record_stall(&self, event: &StallEvent) {
        let f = &event.finding;
        if !f.kind.is_reported() {
            return;
        }
        self.stalls
            .with_label_values(&[f.kind.name(), f.held_side.name()])
            .inc();
        self.delay
            .with_label_values(&[f.kind.name()])
            .observe(f.delay_ns.as_secs_f64());
    }

    /// Counts `n` flows retired.
    pub fn flows_ended(&self, n: u64) {
        self.flows_ended.inc_by(n);
    }

    /// Brings the packet, drop and flow figures to `totals`.
    pub fn update(&self, totals: Totals) {
        use std::sync::atomic::Ordering::Relaxed;
        let advance = |i: usize, counter: &IntCounter, now: u64| {
            let before = self.seen[i].swap(now, Relaxed);
            counter.inc_by(now.saturating_sub(before));
        };
        advance(0, &self.packets, totals.packets);
        advance(1, &self.tcp_segments, totals.tcp_segments);
        advance(2, &self.kernel_dropped, totals.kernel_dropped);
        advance(3, &self.interface_dropped, totals.interface_dropped);
        self.active_flows
            .set(i64::try_from(totals.active_flows).unwrap_or(i64::MAX));
    }

    /// Brings `watch --kernel`'s hold counters to `totals`.
    pub fn update_kernel(&self, totals: KernelTotals) {
        use std::sync::atomic::Ordering::Relaxed;
        let advance = |i: usize, counter: &IntCounter, now: u64| {
            let before = self.seen_kernel[i].swap(now, Relaxed);
            counter.inc_by(now.saturating_sub(before));
        };
        let short = |below: &str| self.kernel_short_holds.with_label_values(&[below]);
        let ended = |by: &str| self.kernel_holds_ended.with_label_values(&[by]);
        advance(0, &self.kernel_holds, totals.holds);
        advance(1, &short("1ms"), totals.short);
        advance(2, &short("stall_threshold"), totals.minor);
        advance(3, &ended("write"), totals.by_write);
        advance(4, &ended("close"), totals.by_close);
        advance(5, &ended("reset"), totals.by_reset);
    }

    /// The exposition, as a scrape returns it.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        // Encoding gathered families into memory fails only on invalid families, which
        // registration already refused.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Binds `addr` (only there) and serves `GET /metrics` from a thread for the rest of the run.
/// Returns the bound address (the port, when 0 was asked).
pub fn serve(addr: SocketAddr, metrics: Arc<Metrics>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).with_context(|| {
        format!(
            "cannot serve metrics on {addr}: is the port in use, or the address not this \
             host's? (--metrics 127.0.0.1:9465 serves on loopback only)"
        )
    })?;
    let bound = listener.local_addr().context("metrics listener address")?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                // One scraper at a time is what Prometheus does; a failed answer is the
                // scraper's to retry.
                let _ = answer(stream, &metrics);
            }
        })
        .context("cannot start the metrics thread")?;
    Ok(bound)
}

/// Reads one HTTP request and answers it: the exposition for `GET /metrics`, 404 elsewhere.
fn answer(stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // The headers end at the first empty line; none of them matters here.
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
            break;
        }
    }
    let mut parts = request_line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") | ("GET", "/") => ("200 OK", prometheus::TEXT_FORMAT, metrics.render()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "tcpstall watch serves /metrics\n".to_string(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "GET /metrics\n".to_string(),
        ),
    };
    // The metrics are written to a Nagle-free socket in one call: a scrape target that stalled
    // on its own small writes would be a poor advertisement.
    let mut stream = stream;
    stream.set_nodelay(true)?;
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_advance_counters_by_difference() {
        let m = Metrics::new().expect("metric names are valid");
        m.update(Totals {
            packets: 10,
            active_flows: 3,
            ..Totals::default()
        });
        m.update(Totals {
            packets: 25,
            kernel_dropped: 2,
            active_flows: 1,
            ..Totals::default()
        });
        let text = m.render();
        assert!(text.contains("tcpstall_watch_packets_total 25"), "{text}");
        assert!(
            text.contains("tcpstall_watch_kernel_dropped_packets_total 2"),
            "{text}"
        );
        assert!(text.contains("tcpstall_watch_active_flows 1"), "{text}");
        assert!(
            text.contains("tcpstall_watch_stalls_total{held_side=\"server\",kind=\"rto\"} 0"),
            "{text}"
        );
    }
}
