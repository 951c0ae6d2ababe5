//! The command line's layers, as docs/ARCHITECTURE.md draws them: the verbs are leaves over the
//! shared modules and the host layer, which import no verb; the host layer imports nothing of
//! the command line but itself (and the portable core). Read from the source: every
//! `crate::NAME` path of a module, and every name of a `use crate::{...}` group.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The verbs' modules: `analyze`, `lab`, `probe`, `watch`, `process` (`sockets`, `fix`,
/// `trace`), `route` (`fix --route`) and `unsupported` (the verbs that need Linux, elsewhere).
const VERBS: &[&str] = &[
    "analyze",
    "lab",
    "probe",
    "watch",
    "process",
    "route",
    "unsupported",
];

/// The modules every verb may use, none of which may use a verb.
const SHARED: &[&str] = &[
    "args", "capture", "exchange", "host", "latency", "peer", "report", "terminal",
];

/// The arrows between verbs there are, each with its reason; any other fails.
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "lab",
        "route",
        "the lab's delayed-ACK rows set a route's options for the row (route::RouteOverride)",
    ),
    (
        "process",
        "route",
        "`fix --route` is `fix`'s form for a route (route::run)",
    ),
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
}

/// The top-level module a source file belongs to: `src/probe/http.rs` → `probe`,
/// `src/latency.rs` → `latency`; the crate root's files → `""`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("under src");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    match first.strip_suffix(".rs") {
        Some("lib" | "main") => String::new(),
        Some(name) => name.to_string(),
        None => first,
    }
}

/// The top-level modules `text` names through `crate::`: `crate::host::procfs` gives `host`,
/// `use crate::{host::kernel, report}` gives `host` and `report`.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        // `tcpstall_crate::` or a word ending in `crate` is not the path keyword.
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 && c == ',' {
                    names.insert(head(&item));
                    item.clear();
                } else {
                    item.push(c);
                }
            }
            names.insert(head(&item));
        } else {
            names.insert(head(rest));
        }
    }
    names.remove("");
    names
}

/// The first path segment of `item`, as a name.
fn head(item: &str) -> String {
    item.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// (from, to) → the files that make the arrow, for every arrow between top-level modules.
fn arrows() -> BTreeMap<(String, String), Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    assert!(files.len() > 50, "the sources were found: {}", files.len());
    let mut arrows: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let from = module_of(&src, &file);
        let text = fs::read_to_string(&file).expect("a source file reads");
        for to in crate_paths(&text) {
            if to != from {
                let shown = file.strip_prefix(&src).expect("under src").display();
                arrows
                    .entry((from.clone(), to))
                    .or_default()
                    .push(shown.to_string());
            }
        }
    }
    arrows
}

#[test]
fn the_paths_are_read_as_the_compiler_reads_them() {
    let text = "use crate::host::procfs;\nuse crate::{lab::x, report::{a, b}, Side};\n\
                let y = crate::probe::run(); // tcpstall_crate::watch";
    let names: Vec<_> = crate_paths(text).into_iter().collect();
    assert_eq!(names, ["Side", "host", "lab", "probe", "report"]);
}

#[test]
fn no_verb_imports_another_but_the_listed_arrows() {
    let all = arrows();
    let mut wrong = Vec::new();
    for ((from, to), files) in &all {
        if VERBS.contains(&from.as_str())
            && VERBS.contains(&to.as_str())
            && !ALLOWED.iter().any(|(f, t, _)| *f == from && *t == to)
        {
            wrong.push(format!("{from} -> {to} ({})", files.join(", ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "verbs are leaves: move what both need to a shared module or the host layer \
         (docs/ARCHITECTURE.md), or list the arrow with its reason in ALLOWED: {wrong:#?}"
    );
    // Each allowed arrow is still there: one no longer needed is taken off the list.
    for (from, to, why) in ALLOWED {
        assert!(
            all.contains_key(&(from.to_string(), to.to_string())),
            "{from} -> {to} ({why}) is gone: take it off ALLOWED"
        );
    }
}

#[test]
fn shared_modules_import_no_verb_and_the_host_only_itself() {
    let mut wrong = Vec::new();
    for ((from, to), files) in arrows() {
        let shared_to_verb = SHARED.contains(&from.as_str()) && VERBS.contains(&to.as_str());
        let host_to_other =
            from == "host" && (SHARED.contains(&to.as_str()) || VERBS.contains(&to.as_str()));
        if shared_to_verb || host_to_other {
            wrong.push(format!("{from} -> {to} ({})", files.join(", ")));
        }
    }
    assert!(
        wrong.is_empty(),
        "the shared modules sit below the verbs, the host layer below them all \
         (docs/ARCHITECTURE.md): {wrong:#?}"
    );
}

#[test]
fn every_module_has_its_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(&src, f)).collect();
    for module in modules.iter().filter(|m| !m.is_empty()) {
        assert!(
            VERBS.contains(&module.as_str()) || SHARED.contains(&module.as_str()),
            "src/{module}: a new top-level module is a verb or a shared module: add it to \
             VERBS or SHARED in tests/layers.rs and to docs/ARCHITECTURE.md"
        );
    }
}

#[test]
fn architecture_draws_these_layers() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let text = fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{}: {e}", doc.display()));
    let layers = text
        .split("\n## ")
        .find(|s| s.starts_with("Layers"))
        .expect("docs/ARCHITECTURE.md has a Layers section");
    let words: BTreeSet<&str> = layers
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    for verb in VERBS {
        assert!(
            words.contains(verb),
            "the verb {verb} is missing from ARCHITECTURE.md's Layers"
        );
    }
    for module in SHARED {
        assert!(
            layers.contains(&format!("{module}/")) || layers.contains(&format!("{module}.rs")),
            "the shared module {module} is missing from ARCHITECTURE.md's Layers"
        );
    }
    for (from, to, why) in ALLOWED {
        assert!(
            layers.contains(&format!("{from} ─> {to}")),
            "the arrow {from} ─> {to} ({why}) is missing from ARCHITECTURE.md's Layers"
        );
    }
}
