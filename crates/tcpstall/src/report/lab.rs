//! The lab's renderers: the results table and `--json` of `tcpstall lab`, and the catalogue
//! of `lab --list` as text or JSON, each written to any [`io::Write`].

use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;

use crate::report::model::lab::{LabReport, ListedScenario, Listing};
use crate::tcp_rules::{DELACK_MIN, STALL_MARGIN, STALL_THRESHOLD};

/// When a row counts as stalled: on loopback, or over a path of the given RTT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StallRule {
    /// The emulated path's round-trip time, if any.
    pub rtt: Option<Duration>,
    /// Whether the text that follows marks the 2-RTT rows (the `--list` table does).
    pub marks_two_rtt_rows: bool,
}

impl fmt::Display for StallRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let threshold = STALL_THRESHOLD.as_millis();
        match self.rtt {
            None => write!(
                f,
                "A row is stalled when its median latency is >= {threshold} ms ({} ms \
                 delayed-ACK floor minus {} ms).",
                DELACK_MIN.as_millis(),
                STALL_MARGIN.as_millis()
            ),
            Some(rtt) => write!(
                f,
                "Over a {} ms RTT path a row is stalled when its median latency is >= RTT + \
                 {threshold} ms, or 2 RTT + {threshold} ms when Nagle holds a split message's \
                 tail until the first part is acknowledged{}.",
                rtt.as_millis(),
                if self.marks_two_rtt_rows {
                    " (marked 2 RTT below)"
                } else {
                    ""
                }
            ),
        }
    }
}

/// `lab --list`: the stall rule, then each scenario and its rows.
pub(crate) fn write_list(out: &mut impl Write, listing: &Listing) -> io::Result<()> {
    let rule = StallRule {
        rtt: listing.rtt,
        marks_two_rtt_rows: true,
    };
    writeln!(out, "{rule}")?;
    for scenario in &listing.scenarios {
        writeln!(out, "\n{}: {}", scenario.name, scenario.description)?;
        for v in &scenario.variants {
            let stall = if v.expected_stall {
                "stalls"
            } else {
                "no stall"
            };
            let rounds = if listing.rtt.is_some() && v.round_trips == 2 {
                "2 RTT "
            } else {
                ""
            };
            writeln!(
                out,
                "  {:<21} {:>7} B {:<8} {rounds}{}",
                v.name, v.size, stall, v.explanation
            )?;
        }
    }
    Ok(())
}

/// `lab --list --json`: `{"stall_rule", "scenarios": [...]}`.
pub(crate) fn write_list_json(out: &mut impl Write, listing: &Listing) -> io::Result<()> {
    #[derive(Serialize)]
    struct ListJson<'a> {
        stall_rule: String,
        scenarios: &'a [ListedScenario],
    }
    let rule = StallRule {
        rtt: listing.rtt,
        marks_two_rtt_rows: false,
    };
    write_pretty_json(
        out,
        &ListJson {
            stall_rule: rule.to_string(),
            scenarios: &listing.scenarios,
        },
    )
}

/// `lab --json`: the whole report.
pub(crate) fn write_json(out: &mut impl Write, report: &LabReport) -> io::Result<()> {
    write_pretty_json(out, report)
}

fn write_pretty_json(out: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value).map_err(io::Error::from)?;
    writeln!(out)
}

/// `lab`: the kernel line, the path line, one line per row, then the capture line.
pub(crate) fn write_table(out: &mut impl Write, report: &LabReport) -> io::Result<()> {
    writeln!(out, "{}", report.kernel_summary)?;
    if let Some(path) = &report.path {
        writeln!(
            out,
            "path: RTT {} ms{}{} between namespaces {} and {} (user-space relay over TUN, MTU 1500)",
            path.rtt_ms,
            path.rate_mbit
                .map(|r| format!(", {r} Mbit/s"))
                .unwrap_or_default(),
            path.lose_segment
                .map(|n| format!(", data segment {n} of each connection lost client to server"))
                .unwrap_or_default(),
            path.client_namespace,
            path.server_namespace
        )?;
        if let Some(peer) = &path.peer {
            writeln!(
                out,
                "peer: the {} is a {}-like user-space stack (smoltcp): {}; the other end is this kernel",
                peer.side, peer.profile, peer.rules
            )?;
        }
    }
    writeln!(
        out,
        "{:<10} {:<21} {:>7} {:>5} {:>8} {:>8} {:>8} {:>7} {:<7} {:<8} {:<27} why",
        "scenario",
        "variant",
        "size B",
        "req",
        "p50 ms",
        "p99 ms",
        "max ms",
        "seg/req",
        "stalled",
        "expected",
        "detector"
    )?;
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    for r in &report.rows {
        let mut why = r.explanation.clone();
        if let (Some(share), Some(corked)) = (r.own_segment_share, r.autocorking_delta) {
            why = format!(
                "{:.0}% own segment, autocorked +{corked}; {why}",
                share * 100.0
            );
        }
        if let Some(own) = r.own_packet_share {
            let pushed = r
                .pushed_packet_share
                .map(|p| format!(" ({:.1}% of packets pushed)", p * 100.0))
                .unwrap_or_default();
            why = format!("{:.0}% of writes sent alone{pushed}; {why}", own * 100.0);
        }
        if let (Some(expected), Some(detector)) = (r.expected_detector_kind, &r.detector) {
            why = match r.detector_kind_checked {
                Some(kind) => format!("capture: {kind}×{}; {why}", detector.count_of(kind)),
                None => format!(
                    "capture: {expected} not decided here (it needs 51 rounds and, over a path, the client's capture; nagle_minor×{}); {why}",
                    detector.count_of("nagle_minor")
                ),
            };
        }
        if let Some(rate) = r.requests_per_second {
            let lost = r
                .throughput_lost
                .map(|lost| format!(", {:+.0}% vs nodelay", -lost * 100.0))
                .unwrap_or_default();
            why = format!("{rate:.0} req/s{lost}; {why}");
        }
        if let Some(inherited) = r.inherited {
            why = format!("inherited: {}; {why}", yes_no(inherited));
        }
        if !r.errors.is_empty() {
            why = format!("ERROR {}; {why}", r.errors.join("; "));
        }
        writeln!(
            out,
            "{:<10} {:<21} {:>7} {:>5} {:>8.2} {:>8.2} {:>8.2} {:>7.2} {:<7} {:<8} {:<27} {why}",
            r.scenario,
            r.variant,
            r.size,
            r.requests,
            r.p50_ms,
            r.p99_ms,
            r.max_ms,
            r.segments_per_request,
            yes_no(r.stalled),
            yes_no(r.expected_stall),
            // `?`: the lab could not capture its own traffic (no CAP_NET_RAW).
            r.detector
                .as_ref()
                .map_or_else(|| "?".to_string(), |d| d.to_string()),
        )?;
    }
    if let Some(c) = &report.capture {
        writeln!(
            out,
            "capture: {} packets, {} connections written to {}",
            c.packets,
            c.flows,
            c.file.display()
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stall_rule_names_the_path_and_the_marks() {
        let loopback = StallRule {
            rtt: None,
            marks_two_rtt_rows: true,
        };
        assert!(loopback.to_string().starts_with("A row is stalled when"));
        let path = StallRule {
            rtt: Some(Duration::from_millis(60)),
            marks_two_rtt_rows: true,
        };
        let text = path.to_string();
        assert!(text.starts_with("Over a 60 ms RTT path"), "{text}");
        assert!(
            text.ends_with("acknowledged (marked 2 RTT below)."),
            "{text}"
        );
        let json = StallRule {
            marks_two_rtt_rows: false,
            ..path
        };
        assert!(json.to_string().ends_with("acknowledged."));
    }
}
