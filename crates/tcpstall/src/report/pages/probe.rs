//! The page of a probe.

use tcpstall_core::report::charts;
use tcpstall_core::report::html::{stall_cells, stall_columns, Cell, FlowCharts, Page, Row};

use crate::report::model::probe::Culprit;

/// The page of a probe: the verdict, the culprit and what to change, the confirmation, the
/// latency histogram of the requests (`latencies_ms`) with the delayed-ACK modes marked.
pub fn probe_page(
    report: &crate::report::model::probe::ProbeReport,
    latencies_ms: &[f64],
) -> anyhow::Result<Page> {
    let d = &report.diagnosis;
    let stalled = d.verdict() == "stall";
    let mut page = Page {
        title: format!("tcpstall probe: {}", report.target),
        clean: !stalled,
        table_title: "Requests".to_string(),
        charts_title: "Latency of the requests".to_string(),
        version: env!("CARGO_PKG_VERSION"),
        fixes: d.advice.clone(),
        ..Page::default()
    };
    page.headline = match (&d.explanation, d.culprit) {
        (Some(why), Some(Culprit::Upstream)) => {
            format!("stall behind the server (upstream): {why}")
        }
        (Some(why), Some(culprit)) if stalled => {
            format!(
                "stall: {} of {} requests; the {} holds: {why}",
                d.counts.stalls(),
                report.requests,
                culprit.name()
            )
        }
        _ if stalled => format!(
            "stall: {} of {} requests",
            d.counts.stalls(),
            report.requests
        ),
        _ => format!("clean: {} requests, no stall", report.requests),
    };
    if let Some(c) = &report.confirmation {
        page.facts.push(match c.confirmed {
            Some(true) => format!(
                "confirmed: re-run with the remedy, the stall vanished (p50 {:.2} ms)",
                c.p50_ms
            ),
            Some(false) => format!(
                "not confirmed: re-run with the remedy, the stall stayed (p50 {:.2} ms)",
                c.p50_ms
            ),
            None => match (&c.tested, &c.untested) {
                (Some(tested), Some(untested)) => {
                    format!("the confirming re-run tested {tested}; it could not test {untested}")
                }
                _ => "the confirming re-run could not tell".to_string(),
            },
        });
    }
    if let Some(hop) = &d.hop {
        page.facts.push(hop.clone());
    }
    if let Some(runtime) = &d.runtime {
        page.facts
            .push(format!("the server's runtime: {}", runtime.describe()));
    }
    page.facts.extend(report.notes.iter().cloned());
    page.pacing = crate::report::probe::describe_paced(&report.ack_paced);
    page.pacing_title = format!(
        "Writes paced by ACKs (batches of {})",
        report.pipeline.max(1)
    );
    page.headers = ["requests", "p50 (ms)", "p99 (ms)", "max (ms)"]
        .into_iter()
        .chain(stall_columns())
        .map(String::from)
        .collect();
    let number = |v: f64| Cell::number(format!("{v:.2}"), v);
    let count = |n: u64| Cell::number(n.to_string(), n as f64);
    page.rows.push(Row {
        stalled,
        cells: [
            count(report.requests as u64),
            number(report.latency.p50_ms),
            number(report.latency.p99_ms),
            number(report.latency.max_ms),
        ]
        .into_iter()
        .chain(stall_cells(&d.counts))
        .collect(),
    });
    let slow: Vec<f64> = latencies_ms
        .iter()
        .copied()
        .filter(|&ms| stalled && ms >= crate::tcp_rules::STALL_THRESHOLD.as_secs_f64() * 1e3)
        .collect();
    page.flow_charts.push(FlowCharts {
        label: report.target.clone(),
        histogram: charts::latency_histogram(latencies_ms, &slow)?,
        timeline: String::new(),
    });
    Ok(page)
}
