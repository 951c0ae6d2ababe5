//! The Prometheus alerting rules shipped for `watch --metrics` (packaging/prometheus/):
//! `promtool check rules` accepts them, `promtool test rules` runs their unit tests (made-up
//! series and the alerts they must and must not raise), and every `tcpstall_watch_*` metric and
//! label value they use is one that `watch` exports.

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use tcpstall::watch::metrics::Metrics;

fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/prometheus")
}

/// promtool, or `None` with the reason printed (the test then passes without checking).
fn promtool() -> Option<Command> {
    match Command::new("promtool").arg("--version").output() {
        Ok(out) if out.status.success() => Some(Command::new("promtool")),
        _ => {
            support::skip(
                "promtool is missing (Debian package prometheus; scripts/install-deps \
                 installs it): the alerting rules were not checked",
            );
            None
        }
    }
}

fn run(mut cmd: Command, args: &[&str]) {
    let out = cmd
        .args(args)
        .current_dir(rules_dir())
        .output()
        .expect("promtool runs");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn rules_pass_promtool_check() {
    let Some(promtool) = promtool() else { return };
    run(promtool, &["check", "rules", "tcpstall-rules.yml"]);
}

#[test]
fn rules_raise_the_expected_alerts_in_promtool_unit_tests() {
    let Some(promtool) = promtool() else { return };
    run(promtool, &["test", "rules", "tcpstall-rules.test.yml"]);
}

/// Words made of `[a-z0-9_]` that start with `prefix`, in `text`.
fn names_with_prefix(text: &str, prefix: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with(prefix))
        .map(str::to_string)
        .collect()
}

#[test]
fn rules_use_only_metrics_and_labels_watch_exports() {
    let metrics = Metrics::new().expect("the metrics register");
    let exposition = metrics.render();
    let exported = names_with_prefix(&exposition, "tcpstall_watch_");
    for file in ["tcpstall-rules.yml", "tcpstall-rules.test.yml"] {
        let text = std::fs::read_to_string(rules_dir().join(file)).expect("the rules file reads");
        let used = names_with_prefix(&text, "tcpstall_watch_");
        assert!(!used.is_empty(), "{file} names no tcpstall_watch_ metric");
        for name in &used {
            assert!(
                exported.contains(name),
                "{file} uses {name}, which watch does not export; it exports {exported:?}"
            );
        }
        // Every kind and held side the files name is a series watch creates at start.
        for (label, value) in label_values(&text, &["kind", "held_side"]) {
            let series = format!("{label}=\"{value}\"");
            assert!(
                exposition.contains(&series),
                "{file} uses {series}, which no series of watch carries"
            );
        }
    }
}

/// `label="value"` pairs for the given label names, as written in series selectors.
fn label_values(text: &str, labels: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for label in labels {
        let open = format!("{label}=\"");
        let mut rest = text;
        while let Some(at) = rest.find(&open) {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + open.len()..];
            // `held_side="` must not be read as `side="`.
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(end) = rest.find('"') {
                found.push((label.to_string(), rest[..end].to_string()));
            }
        }
    }
    found
}
