//! The browser page (scripts/build-page) in headless Chromium: a capture named in its address
//! is analysed by the WebAssembly module in the page, and its findings are those of
//! `tcpstall analyze --json` on the same file; a file that is no capture gets a clear error.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;
use support::{build_with_script, spawn_printing_port, KillOnDrop, Scratch};

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/analyze");

/// The page, built once for the whole test binary.
fn page() -> &'static Path {
    static PAGE: OnceLock<PathBuf> = OnceLock::new();
    PAGE.get_or_init(|| {
        let out = std::env::temp_dir().join(format!("tcpstall-page-{}.html", std::process::id()));
        build_with_script("build-page", &[out.to_str().expect("utf-8 path")])
    })
}

/// Serves `dir` over HTTP on 127.0.0.1 (Python's http.server), as a person would to open
/// `page.html#capture=FILE`; the port.
fn serve(dir: &Path) -> (KillOnDrop, u16) {
    let script = "import functools, http.server, sys\n\
                  handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
                  server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)\n\
                  print(server.server_address[1], flush=True)\n\
                  server.serve_forever()\n";
    let mut command = Command::new("python3");
    command.args(["-c", script]).arg(dir);
    spawn_printing_port(&mut command, "python3's http.server")
}

/// Opens `url` in headless Chromium and returns the DOM once the page settled.
fn chromium(url: &str, profile: &Path) -> String {
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--virtual-time-budget=30000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("run chromium (scripts/install-deps installs it)");
    assert!(out.status.success(), "chromium failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The findings the page put in its `tcpstall-findings` element, parsed.
fn findings(dom: &str) -> Option<Value> {
    let start = dom.find("id=\"tcpstall-findings\"")?;
    let open = start + dom[start..].find('>')? + 1;
    let close = open + dom[open..].find("</script>")?;
    // The page wrote `</` as `<\/` (a JSON escape) so that the JSON cannot end the element.
    Some(serde_json::from_str(&dom[open..close]).expect("the page's findings are JSON"))
}

/// `tcpstall analyze --json NAME` run in `dir`, as the page names the file.
fn analyze_json(dir: &Path, name: &str) -> Value {
    let out = Command::new(BIN)
        .args(["analyze", "--json", name])
        .current_dir(dir)
        .output()
        .expect("run tcpstall");
    serde_json::from_slice(&out.stdout).expect("analyze --json prints JSON")
}

#[test]
fn the_page_finds_what_analyze_finds() {
    let dir = Scratch::new("findings");
    fs::copy(page(), dir.0.join("page.html")).expect("copy the page");
    let mut names = Vec::new();
    for fixture in [
        "split_response",
        "split_request_v6",
        "windows_peer",
        "cork_tail",
        "rto_lost",
    ] {
        let name = format!("{fixture}.pcap");
        fs::copy(Path::new(FIXTURES).join(&name), dir.0.join(&name)).expect("copy fixture");
        names.push(name);
    }
    // Compressed, as people keep captures.
    fs::copy(
        Path::new(FIXTURES).join("zero_window.pcap"),
        dir.0.join("zero_window.pcap"),
    )
    .expect("copy fixture");
    let gzip = Command::new("gzip")
        .args(["-k", "zero_window.pcap"])
        .current_dir(&dir.0)
        .status();
    assert!(gzip.is_ok_and(|s| s.success()), "gzip compresses a fixture");
    names.push("zero_window.pcap.gz".to_string());

    let (_server, port) = serve(&dir.0);
    let mut stalls = 0;
    for name in &names {
        let profile = Scratch::new(&format!("profile-{name}"));
        let dom = chromium(
            &format!("http://127.0.0.1:{port}/page.html#capture={name}"),
            &profile.0,
        );
        let from_page = findings(&dom).unwrap_or_else(|| panic!("{name}: no findings in {dom}"));
        let from_cli = analyze_json(&dir.0, name);
        assert_eq!(
            from_page, from_cli,
            "{name}: the page and analyze --json differ"
        );
        stalls += from_cli["events"].as_array().map_or(0, Vec::len);
        // The page became the report: its summary and, where there are stalls, a ladder.
        assert!(
            dom.contains("<svg"),
            "{name}: the report's charts are drawn"
        );
    }
    assert!(stalls >= 5, "the fixtures hold stalls to compare: {stalls}");
}

#[test]
fn a_file_that_is_no_capture_is_named_in_a_clear_error() {
    let dir = Scratch::new("error");
    fs::copy(page(), dir.0.join("page.html")).expect("copy the page");
    fs::write(dir.0.join("notes.txt"), "not a capture\n".repeat(10)).expect("write");
    let (_server, port) = serve(&dir.0);
    let profile = Scratch::new("profile-error");
    let url = |file: &str| format!("http://127.0.0.1:{port}/page.html#capture={file}");
    let dom = chromium(&url("notes.txt"), &profile.0);
    assert!(findings(&dom).is_none(), "no findings for a text file");
    let status = dom
        .split("id=\"status\"")
        .nth(1)
        .and_then(|rest| rest.split("</p>").next())
        .unwrap_or_default();
    assert!(
        status.contains("notes.txt: "),
        "the error names the file: {status}"
    );
    assert!(
        status.contains("error"),
        "the status is marked as an error: {status}"
    );
    // A file the server does not have.
    let dom = chromium(&url("missing.pcap"), &profile.0);
    assert!(dom.contains("Could not load missing.pcap: 404"), "{dom}");
}
