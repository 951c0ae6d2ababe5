//! The HTML pages of the verbs that run on this host (lab, probe), built on the page of
//! [`tcpstall_core::report::html`].

use tcpstall_core::report::charts::{self, LabBar};
use tcpstall_core::report::html::{stall_cells, stall_columns, Cell, FlowCharts, Page, Row};

use crate::report::model::probe::Culprit;

/// The page of a lab run: the catalogue as a chart (each row's p50 and p99, stalled rows
/// against their fixes), the table of rows, the ladders of the stalled rows.
pub(crate) fn lab_page(report: &super::model::lab::LabReport) -> anyhow::Result<Page> {
    let rows = &report.rows;
    let stalled = rows.iter().filter(|r| r.stalled).count();
    let unexpected = rows
        .iter()
        .filter(|r| r.stalled != r.expected_stall)
        .count();
    let mut page = Page {
        title: "tcpstall lab".to_string(),
        clean: stalled == 0,
        table_title: "Rows".to_string(),
        version: env!("CARGO_PKG_VERSION"),
        ..Page::default()
    };
    page.headline = format!(
        "{stalled} of {} stalled{}",
        super::counted(rows.len() as u64, "row", "rows"),
        match unexpected {
            0 => ", each as the kernel's rules predict".to_string(),
            1 => "; 1 row did not do what the kernel's rules predict".to_string(),
            n => format!("; {n} rows did not do what the kernel's rules predict"),
        }
    );
    page.facts.push(report.kernel_summary.clone());
    if let Some(path) = &report.path {
        page.facts.push(format!(
            "over an emulated path: RTT {} ms between two network namespaces",
            path.rtt_ms
        ));
    }
    let bars: Vec<LabBar> = rows
        .iter()
        .map(|r| LabBar {
            label: format!("{}/{}", r.scenario, r.variant),
            p50_ms: r.p50_ms,
            p99_ms: r.p99_ms,
            stalled: r.stalled,
        })
        .collect();
    page.lab_chart = Some(charts::lab_chart(&bars)?);
    page.headers = [
        "scenario", "variant", "requests", "p50 (ms)", "p99 (ms)", "max (ms)", "seg/req",
        "stalled", "expected", "why",
    ]
    .map(String::from)
    .to_vec();
    let yes_no = |b: bool| Cell::text(if b { "yes" } else { "no" });
    for r in rows {
        let number = |v: f64| Cell::number(format!("{v:.2}"), v);
        page.rows.push(Row {
            stalled: r.stalled,
            cells: vec![
                Cell::text(r.scenario),
                Cell::text(r.variant.clone()),
                Cell::number(r.requests.to_string(), r.requests as f64),
                number(r.p50_ms),
                number(r.p99_ms),
                number(r.max_ms),
                number(r.segments_per_request),
                yes_no(r.stalled),
                yes_no(r.expected_stall),
                Cell::wide(r.explanation.clone()),
            ],
        });
    }
    Ok(page)
}

/// The page of a probe: the verdict, the culprit and what to change, the confirmation, the
/// latency histogram of the requests (`latencies_ms`) with the delayed-ACK modes marked.
pub fn probe_page(
    report: &super::model::probe::ProbeReport,
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
    page.pacing = super::probe::describe_paced(&report.ack_paced);
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
