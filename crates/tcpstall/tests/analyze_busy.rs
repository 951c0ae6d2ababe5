//! `analyze` of a busy capture, the lab's own (`lab --capture`): alike flows are told once
//! ("16 flows like this") with one fix list, the header's counts agree with what is listed
//! and with the "... and N more" line, each group's waits are given as their range, and the
//! HTML summary leads with the fix, the paced flow sides in a section of their own.

mod support;

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// The number before `marker` in `text` (`"23 of"` → 23 for marker `" of"`).
fn number_before(text: &str, marker: &str) -> usize {
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("no {marker:?} in {text}"));
    text[..at]
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before {marker:?} in {text}"))
}

#[test]
fn a_busy_lab_capture_is_told_by_groups_with_counts_that_agree() {
    support::require_root("lab --capture needs CAP_NET_RAW");
    let _serial = support::serial();
    let dir = tempfile::tempdir().expect("temp dir");
    let pcap = dir.path().join("lab.pcap");
    let html = dir.path().join("report.html");
    let lab = support::lab(&[
        "--scenario",
        "http,memcached,concurrent",
        "--requests",
        "6",
        "--capture",
        pcap.to_str().expect("utf-8 path"),
    ]);
    assert!(
        lab.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&lab.stderr)
    );
    let out = Command::new(BIN)
        .arg("analyze")
        .arg(&pcap)
        .arg("--html")
        .arg(&html)
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs");
    assert!(out.status.code().is_some_and(|c| c <= 1));
    let text = String::from_utf8_lossy(&out.stdout);

    // The 16 connections of concurrent/server-nagle, one server, one pattern: one group.
    assert!(text.contains("16 flows like this"), "{text}");
    // The header: flows with stalls and flows paced, which together are what is listed.
    let header = text
        .lines()
        .find(|l| l.starts_with("time lost: "))
        .unwrap_or_else(|| panic!("no time lost line:\n{text}"));
    let with_stalls = number_before(header, " of ");
    let paced: usize = header
        .split(", and ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or(0);
    let listed: usize = text
        .split("\n\n")
        .filter_map(|block| {
            let first = block.lines().next()?;
            if first.contains(" flows like this") {
                Some(number_before(first, " flows like this"))
            } else if first.starts_with("127.0.0.1:")
                && (first.contains(" requests, ") || first.contains(" 1 request, "))
            {
                Some(1)
            } else {
                None
            }
        })
        .sum();
    let more = text
        .lines()
        .find(|l| l.starts_with("... and "))
        .map_or(0, |l| {
            l.trim_start_matches("... and ")
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("a count of flows")
        });
    assert_eq!(listed + more, with_stalls + paced, "{text}");
    // One fix list per distinct list; the rest name it.
    let lists = text.matches("  fix: 1. ").count();
    let named = text.matches("  fix: as for ").count();
    assert!(named > 0, "alike fixes are repeated:\n{text}");
    assert!(lists + named >= 2, "{text}");
    // Grouped waits are a range, never one example's figure alone.
    let counted_in_times = |l: &str| {
        l.trim_start()
            .split_once(' ')
            .is_some_and(|(n, rest)| n.parse::<u64>().is_ok() && rest.starts_with("time"))
    };
    for line in text
        .lines()
        .filter(|l| l.starts_with("  ") && counted_in_times(l))
    {
        assert!(
            line.contains(" times, waits ") || line.contains(" times: "),
            "{line}"
        );
        assert!(!line.contains(" 1 times"), "{line}");
    }
    assert!(!text.contains(" x the "), "{text}");
    assert!(!text.contains(" 1 requests"), "{text}");
    // Flows whose writes were paced by ACKs lose no stall's time: their group tells their
    // holds, counted in flows, never "0.0 ms lost" nor one event per flow called a time.
    let paced_groups: Vec<&str> = text
        .split("\n\n")
        .filter(|b| b.contains("writes paced by ACKs, not stalled"))
        .collect();
    for block in &paced_groups {
        assert!(!block.contains("0.0 ms lost"), "{block}");
        assert!(!block.contains("lost in all"), "{block}");
        assert!(block.contains(" held"), "{block}");
    }
    let paced_group_sizes: Vec<usize> = paced_groups
        .iter()
        .filter_map(|b| b.lines().next())
        .filter(|l| l.contains(" flows like this"))
        .map(|l| number_before(l, " flows like this"))
        .collect();
    for block in paced_groups
        .iter()
        .filter(|b| b.contains(" flows like this"))
    {
        let flows = number_before(block, " flows like this");
        assert!(
            block.contains(&format!("\n  {flows} flows, ")),
            "the pattern counts flows: {block}"
        );
    }
    if paced_group_sizes.is_empty() {
        eprintln!("no alike flows paced by ACKs in this capture: the grouping of paced flows is not checked");
    }

    // The page: the fix before the facts, the paced sides out of the summary.
    let page = std::fs::read_to_string(&html).expect("the page");
    let summary = page
        .split("<section id=\"summary\">")
        .nth(1)
        .and_then(|s| s.split("</section>").next())
        .expect("a summary section");
    let fixes = summary
        .find("<ol class=\"fixes\">")
        .expect("fixes in the summary");
    let facts = summary
        .find("<ul class=\"facts\">")
        .expect("facts in the summary");
    assert!(fixes < facts, "the fix comes first:\n{summary}");
    assert!(!summary.contains("nagle_ack_paced, flow"), "{summary}");
    assert!(summary.matches("<li>").count() < 15, "{summary}");
    // The paced flows are grouped on the page as in the text: a group of N alike flows is
    // one line, "N flows like this".
    if !paced_group_sizes.is_empty() {
        let pacing = page
            .split("<section id=\"pacing\">")
            .nth(1)
            .and_then(|s| s.split("</section>").next())
            .expect("a pacing section");
        for flows in &paced_group_sizes {
            assert!(
                pacing.contains(&format!("<li>{flows} flows like this, ")),
                "{pacing}"
            );
        }
        let paced_flows: usize = paced_group_sizes.iter().sum();
        assert!(
            pacing.matches("<li>").count() < paced_flows,
            "one line per group, not per flow: {pacing}"
        );
    }
}
