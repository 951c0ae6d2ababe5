//! The page of a lab run.

use tcpstall_core::report::charts::{self, LabBar};
use tcpstall_core::report::html::{Cell, Page, Row};

/// The page of a lab run: the catalogue as a chart (each row's p50 and p99, stalled rows
/// against their fixes), the table of rows, the ladders of the stalled rows.
pub(crate) fn lab_page(report: &crate::report::model::lab::LabReport) -> anyhow::Result<Page> {
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
        crate::report::counted(rows.len() as u64, "row", "rows"),
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
