//! The lab's renderers: the results table and `--json` of `tcpstall lab`, and the catalogue
//! of `lab --list` as text or JSON, each written to any [`io::Write`].

use std::fmt;
use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;

use crate::report::model::lab::{LabReport, ListedScenario, Listing, RowResult};
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

/// `lab --list`: the stall rule, then each scenario and its rows, wrapped to the terminal in
/// plain words; `wide` keeps one line per row with the kernel's names and the sources.
pub(crate) fn write_list(out: &mut impl Write, listing: &Listing, wide: bool) -> io::Result<()> {
    let width = super::terminal_width();
    let rule = StallRule {
        rtt: listing.rtt,
        marks_two_rtt_rows: true,
    };
    write_prose(out, &rule.to_string(), wide, width)?;
    for scenario in &listing.scenarios {
        writeln!(out)?;
        let description = if wide {
            scenario.description.to_string()
        } else {
            plain(scenario.description)
        };
        write_prose(
            out,
            &format!("{}: {description}", scenario.name),
            wide,
            width,
        )?;
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
            let line = format!("  {:<21} {:>7} B {:<8} {rounds}", v.name, v.size, stall);
            if wide {
                writeln!(out, "{line}{}", v.explanation)?;
            } else {
                writeln!(out, "{}", line.trim_end())?;
                for part in wrap(&plain(&v.explanation), width.saturating_sub(4)) {
                    writeln!(out, "    {part}")?;
                }
            }
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
///
/// The table fits the terminal (`COLUMNS`, else the terminal's width, else 100 columns): each
/// row's `why` goes on a line of its own in plain words, cut to the width; `wide` keeps the
/// one-line rows with the whole explanation, kernel names and sources included (as in JSON).
pub(crate) fn write_table(out: &mut impl Write, report: &LabReport, wide: bool) -> io::Result<()> {
    let width = super::terminal_width();
    let mut prose = Vec::new();
    prose.push(report.kernel_summary.clone());
    if let Some(path) = &report.path {
        prose.push(format!(
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
        ));
        if let Some(peer) = &path.peer {
            prose.push(format!(
                "peer: the {} is a {}-like user-space stack (smoltcp): {}; the other end is this kernel",
                peer.side, peer.profile, peer.rules
            ));
        }
    }
    for line in &prose {
        write_prose(out, line, wide, width)?;
    }
    if wide {
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
    }
    // The narrow table: each row on one line, its why indented on the next, cut to the width.
    let variant_width = report
        .rows
        .iter()
        .map(|r| r.variant.chars().count())
        .max()
        .unwrap_or(7)
        .clamp(7, 21);
    let detector_text = |r: &RowResult| {
        r.detector
            .as_ref()
            .map_or_else(|| "?".to_string(), |d| d.to_string())
    };
    let detector_width = report
        .rows
        .iter()
        .map(|r| detector_text(r).chars().count())
        .max()
        .unwrap_or(8)
        .max(8);
    if !wide {
        let head = format!(
            "{:<10} {:<variant_width$} {:>6} {:>5} {:>7} {:>7} {:<5} {:<3} {:<detector_width$}",
            "scenario", "variant", "size", "req", "p50 ms", "p99 ms", "stall", "exp", "detector"
        );
        writeln!(out, "{}", fit(head.trim_end(), width))?;
        writeln!(
            out,
            "{}",
            fit(
                "           why (--wide: kernel names, one line per row)",
                width
            )
        )?;
    }
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
        if !wide {
            let line = format!(
                "{:<10} {:<variant_width$} {:>6} {:>5} {:>7.2} {:>7.2} {:<5} {:<3} {:<detector_width$}",
                r.scenario,
                r.variant,
                r.size,
                r.requests,
                r.p50_ms,
                r.p99_ms,
                yes_no(r.stalled),
                yes_no(r.expected_stall),
                detector_text(r),
            );
            writeln!(out, "{}", fit(line.trim_end(), width))?;
            writeln!(
                out,
                "{}",
                fit(&format!("           {}", plain(&why)), width)
            )?;
            continue;
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
        let text = format!(
            "capture: {}, {} written to {}",
            super::counted(c.packets, "packet", "packets"),
            super::counted(c.flows, "connection", "connections"),
            c.file.display()
        );
        write_prose(out, &text, wide, width)?;
    }
    if let Some(i) = &report.interrupted {
        let running = i
            .row
            .as_ref()
            .map(|row| format!("{row} was running and is left out; "))
            .unwrap_or_default();
        let text = format!(
            "interrupted ({}): {running}{} of {} rows finished, shown above{}",
            i.signal,
            i.finished,
            i.total,
            if report.rows.iter().any(|r| r.detector.is_none()) {
                " (the detector reads the capture at the end: `?`)"
            } else {
                ""
            }
        );
        write_prose(out, &text, wide, width)?;
    }
    Ok(())
}

/// A line of prose: as it is with `wide`, else wrapped to `width`.
fn write_prose(out: &mut impl Write, text: &str, wide: bool, width: usize) -> io::Result<()> {
    if wide {
        return writeln!(out, "{text}");
    }
    for line in wrap(text, width) {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// `line` cut to `width` characters, an ellipsis marking the cut.
fn fit(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        return line.to_string();
    }
    let mut cut: String = line.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `text` broken between words into lines of at most `width` characters, the lines after the
/// first indented by two spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    crate::report::wrap::words(text, width, "  ")
        .iter()
        .map(|l| fit(l, width))
        .collect()
}

/// A row's explanation in plain words: the kernel's names (functions, flags, route metrics)
/// and the source documents' numbers left out, with the parentheses that carry them; `--wide`
/// and the JSON keep them.
pub(crate) fn plain(why: &str) -> String {
    const PHRASES: [(&str, &str); 4] = [
        (" in tcp_nagle_check", ""),
        ("tcp_nagle_test passes, ", ""),
        (
            "doc 001's 22% needs a real RTT",
            "the 22% measured over a network needs a real RTT",
        ),
        (" (Minshall)", ""),
    ];
    let mut text = why.to_string();
    for (from, to) in PHRASES {
        text = text.replace(from, to);
    }
    // Top-level parenthesised groups naming the kernel or a document are dropped.
    let mut out = String::with_capacity(text.len());
    let mut group = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '(' => {
                depth += 1;
                group.push(c);
            }
            ')' if depth > 0 => {
                depth -= 1;
                group.push(c);
                if depth == 0 {
                    if !names_the_kernel(&group) {
                        out.push_str(&group);
                    } else if out.ends_with(' ') {
                        out.pop();
                    }
                    group.clear();
                }
            }
            _ if depth > 0 => group.push(c),
            _ => out.push(c),
        }
    }
    out.push_str(&group);
    out
}

/// Whether `text` names a kernel symbol (`tcp_nagle_check`, `__tcp_ack_snd_check`,
/// `ICSK_ACK_PUSHED2`, `RTAX_QUICKACK`, `inet_csk_clone_lock`) or a source document.
fn names_the_kernel(text: &str) -> bool {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .any(|word| {
            word.contains("tcp_")
                || word.starts_with("ICSK_")
                || word.starts_with("RTAX_")
                || word.starts_with("inet_csk")
        })
        || text.contains("doc 0")
        || text.contains("docs 0")
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
