//! The HTML report's charts as inline SVG: latency histograms with the delayed-ACK modes
//! marked, turn timelines, the lab catalogue's bars (drawn by plotters, no font files: the
//! text stays `<text>` for the browser to set), and the ladder diagram (drawn here: no chart
//! library draws sequence diagrams).

use std::fmt::Write as _;
use std::ops::Range;

use plotters::prelude::*;

use crate::ladder::{Ladder, Mark};
use crate::tcp_rules::{nanos, DELACK_MIN, MACOS_DELACK, WINDOWS_DELACK};
use crate::Side;

/// Colour of stalled turns and held segments.
const STALLED: RGBColor = RGBColor(0xc6, 0x28, 0x28);
/// Colour of clean turns.
const CLEAN: RGBColor = RGBColor(0x15, 0x65, 0xc0);
/// Colour of the delayed-ACK marks.
const MODE: RGBColor = RGBColor(0x6a, 0x1b, 0x9a);

/// Latency axis of histograms and timelines, milliseconds (log scale): 10 µs to 10 s.
const LATENCY_MS: Range<f64> = 0.01..10_000.0;
/// Histogram bins per decade of latency.
const BINS_PER_DECADE: u32 = 10;

fn draw_error<E: std::error::Error + Send + Sync>(err: DrawingAreaErrorKind<E>) -> anyhow::Error {
    anyhow::anyhow!("cannot draw a chart: {err}")
}

fn ms_of_ns(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Bin edges (ms) of the histogram: [`BINS_PER_DECADE`] log-spaced bins per decade.
fn bin_edges() -> Vec<f64> {
    let decades = (LATENCY_MS.end / LATENCY_MS.start).log10().round() as u32;
    (0..=decades * BINS_PER_DECADE)
        .map(|i| LATENCY_MS.start * 10f64.powf(f64::from(i) / f64::from(BINS_PER_DECADE)))
        .collect()
}

/// Counts of `latencies_ms` per bin of `edges` (values outside the axis go to the end bins).
pub fn histogram_counts(latencies_ms: &[f64], edges: &[f64]) -> Vec<u64> {
    let bins = edges.len().saturating_sub(1);
    let mut counts = vec![0u64; bins];
    if bins == 0 {
        return counts;
    }
    for &v in latencies_ms {
        let i = edges[1..].partition_point(|&e| e <= v).min(bins - 1);
        counts[i] += 1;
    }
    counts
}

/// A latency histogram (log scale) with the delayed-ACK modes marked: Linux 40 ms, macOS
/// 100-200 ms, Windows 200 ms. `stalled_ms` are drawn over `all_ms` in the stall colour.
pub fn latency_histogram(all_ms: &[f64], stalled_ms: &[f64]) -> anyhow::Result<String> {
    let edges = bin_edges();
    let all = histogram_counts(all_ms, &edges);
    let stalled = histogram_counts(stalled_ms, &edges);
    let top = all.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.15;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (560, 220)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(44)
            .build_cartesian_2d(LATENCY_MS.log_scale(), 0.0..top)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("turn latency (ms, log scale)")
            .y_desc("turns")
            .x_label_formatter(&|v| format!("{v}"))
            // Counts are whole: as many ticks as there are whole numbers (at most 6), and a
            // tick that falls between two is left unlabelled rather than rounded into a repeat.
            .y_labels((top as usize + 1).clamp(2, 6))
            .y_label_formatter(&|v| {
                if (v - v.round()).abs() < 1e-9 {
                    format!("{v:.0}")
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(draw_error)?;
        let (macos_lo, macos_hi) = (
            ms_of_ns(nanos(MACOS_DELACK)),
            ms_of_ns(nanos(WINDOWS_DELACK)),
        );
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(macos_lo, 0.0), (macos_hi, top)],
                MODE.mix(0.08).filled(),
            )))
            .map_err(draw_error)?;
        for (counts, color) in [(&all, CLEAN), (&stalled, STALLED)] {
            chart
                .draw_series(
                    counts
                        .iter()
                        .enumerate()
                        .filter(|(_, &n)| n > 0)
                        .map(|(i, &n)| {
                            Rectangle::new(
                                [(edges[i], 0.0), (edges[i + 1], n as f64)],
                                color.filled(),
                            )
                        }),
                )
                .map_err(draw_error)?;
        }
        let marks = [
            (ms_of_ns(nanos(DELACK_MIN)), "Linux 40 ms"),
            (macos_lo, "macOS 100-200 ms"),
            (ms_of_ns(nanos(WINDOWS_DELACK)), "Windows 200 ms"),
        ];
        for (i, (at, label)) in marks.into_iter().enumerate() {
            chart
                .draw_series(LineSeries::new(
                    [(at, 0.0), (at, top)],
                    MODE.stroke_width(1),
                ))
                .map_err(draw_error)?;
            let y = top * (0.95 - 0.1 * i as f64);
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (at * 1.05, y),
                    ("sans-serif", 11).into_font().color(&MODE),
                )))
                .map_err(draw_error)?;
        }
    }
    Ok(tag(svg, "histogram"))
}

/// A timeline of turns: capture time (s) against latency (ms, log scale), stalled turns in
/// the stall colour.
pub fn turn_timeline(points: &[(f64, f64, bool)], span_s: f64) -> anyhow::Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (560, 200)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(44)
            .build_cartesian_2d(0.0..span_s.max(1e-3), LATENCY_MS.log_scale())
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("latency (ms)")
            .y_label_formatter(&|v| format!("{v}"))
            .draw()
            .map_err(draw_error)?;
        for (stalled, color) in [(false, CLEAN), (true, STALLED)] {
            chart
                .draw_series(points.iter().filter(|p| p.2 == stalled).map(|&(t, ms, _)| {
                    Circle::new((t, ms.max(LATENCY_MS.start)), 2, color.filled())
                }))
                .map_err(draw_error)?;
        }
    }
    Ok(tag(svg, "timeline"))
}

/// One bar pair of the lab chart.
#[derive(Debug, Clone)]
pub struct LabBar {
    /// `scenario/variant`.
    pub label: String,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// The row stalled.
    pub stalled: bool,
}

/// The lab catalogue as a chart: each row's p50 (bar) and p99 (tick), stalled rows in the
/// stall colour, their fixes in the clean colour.
pub fn lab_chart(bars: &[LabBar]) -> anyhow::Result<String> {
    let height = 40 + 18 * bars.len().max(1) as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_error)?;
        let n = bars.len().max(1) as i32;
        let mut chart = ChartBuilder::on(&root)
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(230)
            .build_cartesian_2d(LATENCY_MS.log_scale(), (0..n).into_segmented())
            .map_err(draw_error)?;
        let labels: Vec<String> = bars.iter().map(|b| b.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_desc("latency per request (ms, log scale): bar p50, tick p99")
            .x_label_formatter(&|v| format!("{v}"))
            .y_labels(bars.len().max(1))
            // Row 0 at the top: the axis counts upwards, the table downwards.
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => usize::try_from(n - 1 - *i)
                    .ok()
                    .and_then(|row| labels.get(row))
                    .cloned()
                    .unwrap_or_default(),
                _ => String::new(),
            })
            .draw()
            .map_err(draw_error)?;
        for (row, bar) in bars.iter().enumerate() {
            let i = n - 1 - i32::try_from(row).unwrap_or(i32::MAX);
            let color = if bar.stalled { STALLED } else { CLEAN };
            let p50 = bar.p50_ms.max(LATENCY_MS.start);
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [
                        (LATENCY_MS.start, SegmentValue::Exact(i)),
                        (p50, SegmentValue::Exact(i + 1)),
                    ],
                    color.mix(0.8).filled(),
                )))
                .map_err(draw_error)?;
            let p99 = bar.p99_ms.max(LATENCY_MS.start);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![
                        (p99, SegmentValue::Exact(i)),
                        (p99, SegmentValue::Exact(i + 1)),
                    ],
                    BLACK.stroke_width(2),
                )))
                .map_err(draw_error)?;
        }
    }
    Ok(tag(svg, "lab-chart"))
}

/// Gives a chart's `<svg>` a class, so the page's style and tests can find it.
fn tag(svg: String, class: &str) -> String {
    svg.replacen("<svg ", &format!("<svg class=\"chart {class}\" "), 1)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn mark_color(mark: Mark) -> &'static str {
    match mark {
        Mark::Held | Mark::SentByTimer => "#c62828",
        Mark::LateAck | Mark::ZeroWindow => "#6a1b9a",
        Mark::ReleasingAck => "#8e24aa",
        Mark::SmallUnacked => "#ef6c00",
    }
}

/// The ladder diagram as SVG: the two hosts' lifelines, one sloped arrow per segment (equal
/// steps: the wait is drawn as a labelled band, not to scale), the marks in colour.
pub fn ladder_svg(ladder: &Ladder) -> String {
    const W: f64 = 760.0;
    const LEFT: f64 = 150.0;
    const RIGHT: f64 = 560.0;
    const STEP: f64 = 34.0;
    const GAP: f64 = 46.0;
    const TOP: f64 = 48.0;
    let gaps = usize::from(ladder.gap_after.is_some());
    let height = TOP + STEP * ladder.rungs.len() as f64 + GAP * gaps as f64 + 20.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg class="ladder" data-kind="{kind}" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" viewBox="0 0 {W} {height}" font-family="sans-serif" font-size="12"><defs><marker id="arrow-{kind}" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="context-stroke"/></marker></defs>"##,
        kind = ladder.kind.name(),
    );
    for (x, who, end) in [
        (LEFT, "client", ladder.client),
        (RIGHT, "server", ladder.server),
    ] {
        let _ = write!(
            s,
            r##"<text x="{x}" y="16" text-anchor="middle" font-weight="bold">{who}</text><text x="{x}" y="32" text-anchor="middle">{}</text><line x1="{x}" y1="{TOP}" x2="{x}" y2="{}" stroke="#555" stroke-width="2"/>"##,
            escape(&end.to_string()),
            height - 10.0
        );
    }
    let mut y = TOP + 8.0;
    for (i, r) in ladder.rungs.iter().enumerate() {
        let (x1, x2) = match r.from {
            Side::Client => (LEFT, RIGHT),
            Side::Server => (RIGHT, LEFT),
        };
        let color = r.mark.map_or("#333", mark_color);
        let label = {
            let mut l = r.flag_letters();
            if r.len > 0 {
                let _ = write!(l, " {} B seq {}", r.len, r.seq);
            }
            if let Some(ack) = r.ack {
                let _ = write!(l, " ack {ack}");
            }
            if r.window == 0 {
                l.push_str(" win 0");
            }
            l
        };
        let _ = write!(
            s,
            r##"<g class="rung" data-mark="{mark}"><text x="10" y="{ty}" fill="#555">{t:.3} ms</text><line x1="{x1}" y1="{y}" x2="{x2}" y2="{y2}" stroke="{color}" stroke-width="{sw}" marker-end="url(#arrow-{kind})"/><text x="{mx}" y="{ly}" text-anchor="middle" fill="{color}">{label}</text>"##,
            mark = r.mark.map_or("", Mark::label),
            ty = y + 4.0,
            t = r.at.as_millis_f64(),
            y2 = y + STEP - 12.0,
            sw = if r.mark.is_some() { 2.5 } else { 1.2 },
            kind = ladder.kind.name(),
            mx = (LEFT + RIGHT) / 2.0,
            ly = y + (STEP - 12.0) / 2.0 - 3.0,
            label = escape(&label),
        );
        if let Some(mark) = r.mark {
            let _ = write!(
                s,
                r##"<text x="{x}" y="{ty}" fill="{c}" font-weight="bold">{m}</text>"##,
                x = RIGHT + 12.0,
                ty = y + 10.0,
                c = mark_color(mark),
                m = mark.label()
            );
        }
        s.push_str("</g>");
        y += STEP;
        if ladder.gap_after == Some(i) {
            let _ = write!(
                s,
                r##"<rect class="gap" x="{LEFT}" y="{y}" width="{w}" height="{h}" fill="#f3e5f5"/><text x="{mx}" y="{ty}" text-anchor="middle" fill="#6a1b9a" font-weight="bold">{text}</text>"##,
                w = RIGHT - LEFT,
                h = GAP - 10.0,
                mx = (LEFT + RIGHT) / 2.0,
                ty = y + GAP / 2.0,
                text = escape(&format!(
                    "{:.1} ms: {} waits",
                    ladder.delay.as_millis_f64(),
                    ladder.held_side.name()
                )),
            );
            y += GAP;
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_bins_hold_every_value_once() {
        let edges = bin_edges();
        assert_eq!(edges.len(), 6 * BINS_PER_DECADE as usize + 1);
        let values = [0.001, 0.05, 43.9, 44.0, 200.0, 1e9];
        let counts = histogram_counts(&values, &edges);
        assert_eq!(counts.iter().sum::<u64>(), values.len() as u64);
        // 43.9 and 44.0 ms share the bin of the Linux delayed-ACK mode.
        let bin_of = |v: f64| edges[1..].partition_point(|&e| e <= v);
        assert_eq!(bin_of(43.9), bin_of(44.0));
        assert_eq!(counts[bin_of(44.0)], 2);
    }

    #[test]
    fn charts_are_svg_with_their_class() {
        let svg = latency_histogram(&[0.05, 44.0, 44.1], &[44.0, 44.1]).expect("drawn");
        assert!(
            svg.starts_with("<svg class=\"chart histogram\""),
            "{}",
            &svg[..80]
        );
        assert!(svg.contains("Linux 40 ms") && svg.contains("Windows 200 ms"));
        let svg = turn_timeline(&[(0.1, 44.0, true), (0.2, 0.05, false)], 1.0).expect("drawn");
        assert!(svg.contains("class=\"chart timeline\""));
    }
}

#[cfg(test)]
mod y_axis_tests {
    /// The y axis's labels: the texts drawn at the axis's own x (the first number drawn there).
    fn y_labels(svg: &str) -> Vec<String> {
        let texts: Vec<(String, String)> = svg
            .split("<text")
            .skip(1)
            .filter_map(|t| {
                let x = t.split("x=\"").nth(1)?.split('"').next()?.to_string();
                let body = t.split('>').nth(1)?.split('<').next()?.trim().to_string();
                Some((x, body))
            })
            .collect();
        let zero_x = texts
            .iter()
            .find(|(_, body)| body == "0")
            .map(|(x, _)| x.clone())
            .expect("a 0 on the y axis");
        texts
            .into_iter()
            .filter(|(x, body)| *x == zero_x && !body.is_empty())
            .map(|(_, body)| body)
            .collect()
    }

    #[test]
    fn a_histogram_of_one_turn_per_bin_has_whole_distinct_ticks() {
        let svg = super::latency_histogram(&[0.3, 44.0, 210.0], &[44.0]).expect("drawn");
        let labels = y_labels(&svg);
        let mut unique = labels.clone();
        unique.dedup();
        assert_eq!(labels, unique, "repeated ticks: {labels:?}");
        assert!(
            labels.iter().all(|l| l.parse::<u64>().is_ok()),
            "{labels:?}"
        );
    }
}
