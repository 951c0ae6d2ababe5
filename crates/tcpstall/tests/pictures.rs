//! The pictures: the terminal ladder (golden files on the fixture captures, colour and
//! character set by `--color`, `NO_COLOR` and the locale on a real pseudo-terminal), the HTML
//! page loaded in a real headless Chromium (its rendered DOM read back, no network, no console
//! error, a screenshot kept), the manual pages and shell completions.
//!
//! Golden files are rewritten with `TCPSTALL_BLESS=1 cargo test --test pictures`; read the
//! diff before committing it.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod support;
use support::Scratch;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");
const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/analyze");
const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ladder");
/// Where the browser's screenshots are kept for people to look at.
const ARTIFACTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../target/test-artifacts");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("NO_COLOR")
        .output()
        .expect("run tcpstall")
}

/// The fixtures with a stall of each kind the ladders draw.
const STALLED: [&str; 7] = [
    "split_response",
    "split_request",
    "split_request_v6",
    "windows_peer",
    "cork_tail",
    "rto_lost",
    "zero_window",
];

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}.pcap")
}

/// The ladder part of `analyze --ladder`'s output (after the text report).
fn ladder_part(stdout: &[u8]) -> String {
    let text = String::from_utf8_lossy(stdout);
    let kinds = [
        "nagle_delayed_ack:",
        "cork_timer:",
        "rto:",
        "zero_window:",
        "nagle_minor:",
    ];
    let start = text
        .lines()
        .scan(0, |pos, line| {
            let here = *pos;
            *pos += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| kinds.iter().any(|k| line.starts_with(k)))
        .map_or(text.len(), |(pos, _)| pos);
    text[start..].to_string()
}

#[test]
fn ladders_match_their_golden_files() {
    let bless = std::env::var_os("TCPSTALL_BLESS").is_some();
    for name in STALLED.iter().chain(&["nodelay", "think_time"]) {
        let out = run(&["analyze", "--ladder", &fixture(name)]);
        assert!(out.status.code().is_some_and(|c| c <= 1), "{name}: {out:?}");
        let ladder = ladder_part(&out.stdout);
        let golden = Path::new(GOLDEN).join(format!("{name}.txt"));
        if bless {
            fs::create_dir_all(GOLDEN).expect("golden directory");
            fs::write(&golden, &ladder).expect("write golden file");
            continue;
        }
        let want = fs::read_to_string(&golden)
            .unwrap_or_else(|e| panic!("{}: {e} (TCPSTALL_BLESS=1 writes it)", golden.display()));
        assert_eq!(
            ladder,
            want,
            "{name}: the ladder differs from {}",
            golden.display()
        );
        // Piped output is plain ASCII, without colour, at most 100 columns.
        assert!(ladder.is_ascii(), "{name}: not ASCII:\n{ladder}");
        assert!(!ladder.contains('\x1b'), "{name}: colour in a pipe");
        for line in ladder.lines() {
            assert!(line.chars().count() <= 100, "{name}: line too wide: {line}");
        }
    }
}

#[test]
fn ladder_marks_the_late_ack_the_json_event_names() {
    // The example drawn is the latest stall; its delay is the JSON's last event's.
    let json = run(&["analyze", "--json", &fixture("split_response")]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let events = v["events"].as_array().expect("events");
    let last = events
        .iter()
        .rev()
        .find(|e| e["kind"] == "nagle_delayed_ack")
        .expect("a stall");
    let delay = last["delay_ms"].as_f64().expect("delay_ms");
    assert_eq!(last["held_side"], "server");

    let out = run(&["analyze", "--ladder", &fixture("split_response")]);
    let ladder = ladder_part(&out.stdout);
    let first = ladder.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!("nagle_delayed_ack: server held {delay:.1} ms")
    );
    let marked = |mark: &str| ladder.lines().filter(|l| l.ends_with(mark)).count();
    assert_eq!(marked("| small, unacked"), 1, "{ladder}");
    assert_eq!(marked("| delayed ACK"), 1, "{ladder}");
    assert_eq!(marked("| held"), 1, "{ladder}");
    // In order: the small segment, the wait, the late ACK from the client, the held data.
    let pos = |needle: &str| ladder.find(needle).unwrap_or(usize::MAX);
    assert!(pos("small, unacked") < pos("server holds data until client's delayed ACK"));
    assert!(pos("server holds data until client's delayed ACK") < pos("| delayed ACK"));
    assert!(pos("| delayed ACK") < pos("| held"));
    let late_ack = ladder
        .lines()
        .find(|l| l.ends_with("| delayed ACK"))
        .unwrap_or_default();
    assert!(
        late_ack.contains("-->|"),
        "the late ACK goes client to server: {late_ack}"
    );
    assert!(ladder.contains("fix: 1. write the response in one call on the server"));
}

#[test]
fn clean_capture_draws_no_ladder() {
    let out = run(&["analyze", "--ladder", &fixture("nodelay")]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(ladder_part(&out.stdout), "");
}

#[test]
fn ladder_and_json_exclude_each_other() {
    let out = run(&["analyze", "--ladder", "--json", &fixture("cork")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn ladder_reads_standard_input_twice() {
    let capture = fs::read(fixture("split_response")).expect("fixture");
    let mut child = Command::new(BIN)
        .args(["analyze", "--ladder", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(&capture).expect("write capture");
    }
    let out = child.wait_with_output().expect("wait");
    let from_file = run(&["analyze", "--ladder", &fixture("split_response")]);
    assert_eq!(ladder_part(&out.stdout), ladder_part(&from_file.stdout));
    assert!(ladder_part(&out.stdout).contains("| held"));
}

/// Runs `args` on a pseudo-terminal (util-linux `script`) with `env`, returning what it printed.
fn on_terminal(args: &[&str], env: &[(&str, &str)]) -> String {
    let command = std::iter::once(BIN)
        .chain(args.iter().copied())
        .map(|a| format!("'{a}'"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new("script");
    cmd.args(["-qec", &command, "/dev/null"])
        .env_remove("NO_COLOR")
        .env_remove("LC_ALL")
        .env_remove("LC_CTYPE")
        .env("TERM", "xterm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run script(1)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn colour_and_characters_follow_the_terminal_and_no_color() {
    let f = fixture("split_response");
    let args = ["analyze", "--ladder", f.as_str()];
    let tty_utf8 = on_terminal(&args, &[("LANG", "C.UTF-8")]);
    assert!(tty_utf8.contains('\x1b'), "colour on a terminal");
    assert!(
        tty_utf8.contains('│') && tty_utf8.contains('▶'),
        "box drawing in UTF-8"
    );

    let no_color = on_terminal(&args, &[("LANG", "C.UTF-8"), ("NO_COLOR", "1")]);
    assert!(!no_color.contains('\x1b'), "NO_COLOR honoured");
    assert!(no_color.contains('│'));

    let ascii = on_terminal(&args, &[("LANG", "C")]);
    assert!(
        !ascii.contains('│') && ascii.contains("-->|"),
        "ASCII outside UTF-8"
    );

    let never = on_terminal(
        &["--color", "never", "analyze", "--ladder", f.as_str()],
        &[("LANG", "C.UTF-8")],
    );
    assert!(!never.contains('\x1b'));
    // An explicit flag overrides the variable, and works into a pipe.
    let always = Command::new(BIN)
        .args(["analyze", "--color", "always", "--ladder", f.as_str()])
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    assert!(String::from_utf8_lossy(&always.stdout).contains("\x1b[1;31mheld"));
}

/// Loads `page` in headless Chromium; returns the rendered DOM and the browser's log.
fn chromium(page: &Path, screenshot: Option<&Path>) -> (String, String) {
    // A profile of its own: tests run in parallel, and Chromium locks its profile.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let profile = Scratch::new(&format!("chromium-profile-{run}"));
    let url = format!("file://{}", page.display());
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=5000",
        "--window-size=1200,3000",
    ])
    .arg(format!("--user-data-dir={}", profile.0.display()));
    match screenshot {
        Some(png) => {
            cmd.arg(format!("--screenshot={}", png.display()));
        }
        None => {
            cmd.arg("--dump-dom");
        }
    }
    let out = cmd
        .arg(&url)
        .output()
        .expect("run chromium (scripts/install-deps installs it)");
    assert!(out.status.success(), "chromium failed: {out:?}");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The browser log's complaints about the page: console errors, blocked loads.
fn page_errors(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Refused to") || l.contains("net::ERR_"))
        .collect()
}

#[test]
fn analyze_page_renders_in_a_real_browser() {
    let dir = Scratch::new("analyze-page");
    let page = dir.0.join("split_response.html");
    let out = run(&[
        "analyze",
        "--html",
        page.to_str().expect("utf-8 path"),
        &fixture("split_response"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = fs::read_to_string(&page).expect("page written");
    // Self-contained: nothing is fetched from anywhere.
    for needle in ["src=\"http", "href=\"http", "url(http", "@import", "<link "] {
        assert!(
            !html.contains(needle),
            "the page refers to the network: {needle}"
        );
    }

    let (dom, log) = chromium(&page, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    let json = run(&["analyze", "--json", &fixture("split_response")]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("JSON");
    let stalls = v["summary"]["stalls"]["nagle_delayed_ack"]
        .as_u64()
        .expect("count");
    assert!(
        dom.contains(&format!(
            "{stalls} nagle_delayed_ack stalls cost 391.7 ms in 1 of 1 flows"
        )),
        "summary missing:\n{dom}"
    );
    assert!(dom.contains("<td data-sort=\"127.0.0.1:40408-127.0.0.1:45505\">"));
    assert!(dom.contains(&format!("<td data-sort=\"{stalls}\">{stalls}</td>")));
    assert!(dom.contains("class=\"chart histogram\"") && dom.contains("Linux 40 ms"));
    assert!(dom.contains("class=\"chart timeline\""));
    assert!(dom.contains("class=\"ladder\" data-kind=\"nagle_delayed_ack\""));
    for mark in ["small, unacked", "delayed ACK", "held"] {
        assert!(
            dom.contains(&format!("data-mark=\"{mark}\"")),
            "ladder mark {mark}"
        );
    }
    // The page's script ran to its end: the table's headers sort it.
    assert!(
        dom.contains("data-sorting=\"ready\""),
        "the sorting script did not run"
    );

    fs::create_dir_all(ARTIFACTS).expect("artifacts directory");
    let png = Path::new(ARTIFACTS).join("analyze-split_response.png");
    let (_, log) = chromium(&page, Some(&png));
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    let shot = fs::read(&png).expect("screenshot written");
    assert!(shot.starts_with(b"\x89PNG"), "a PNG screenshot");
}

#[test]
fn analyze_page_links_to_the_browser_page_when_asked() {
    let dir = Scratch::new("analyze-page-link");
    let page = dir.0.join("report.html");
    let page_arg = page.to_str().expect("utf-8 path");
    let capture = fixture("split_response");
    let out = run(&["analyze", "--html", page_arg, &capture]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let plain = fs::read_to_string(&page).expect("page written");
    assert!(
        !plain.contains("id=\"page-link\""),
        "a link nobody asked for"
    );

    let out = run(&[
        "analyze",
        "--html",
        page_arg,
        "--page-link",
        "tools/tcpstall-page.html",
        &capture,
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (dom, log) = chromium(&page, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    assert!(
        dom.contains("<a href=\"tools/tcpstall-page.html\">tcpstall's page</a>"),
        "no link to the page:\n{dom}"
    );

    // The link belongs to the HTML report: alone it is refused, as clap refuses (exit 2).
    let out = run(&["analyze", "--page-link", "page.html", &capture]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--html"), "{stderr}");
}

#[test]
fn page_of_every_kind_has_its_ladder() {
    let dir = Scratch::new("kinds-page");
    let page = dir.0.join("kinds.html");
    let files: Vec<String> = ["cork_tail", "rto_lost", "zero_window"]
        .iter()
        .map(|n| fixture(n))
        .collect();
    let mut args = vec!["analyze", "--html", page.to_str().expect("utf-8 path")];
    args.extend(files.iter().map(String::as_str));
    let out = run(&args);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let (dom, log) = chromium(&page, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    for kind in ["cork_timer", "rto", "zero_window"] {
        assert!(
            dom.contains(&format!("class=\"ladder\" data-kind=\"{kind}\"")),
            "no {kind} ladder"
        );
    }
}

/// A page of many flows, IPv6 among them, fits a 1,200 px window: the document never scrolls
/// sideways (a wide table scrolls inside its own box). Measured by the browser's layout, read
/// back through a script added to a copy of the page.
#[test]
fn a_page_of_many_flows_fits_the_window() {
    let dir = Scratch::new("wide-page");
    let page = dir.0.join("many.html");
    let files: Vec<String> = STALLED.iter().map(|n| fixture(n)).collect();
    let mut args = vec!["analyze", "--html", page.to_str().expect("utf-8 path")];
    args.extend(files.iter().map(String::as_str));
    let out = run(&args);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{out:?}");
    let html = fs::read_to_string(&page).expect("page written");
    let probe = "<script>document.body.dataset.overflow = String(\
                 document.documentElement.scrollWidth - window.innerWidth);</script></body>";
    assert!(html.contains("</body>"), "the page has a body");
    let measured = dir.0.join("measured.html");
    fs::write(&measured, html.replacen("</body>", probe, 1)).expect("write the copy");
    let (dom, log) = chromium(&measured, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    let overflow: i64 = dom
        .split("data-overflow=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the script did not run: {}", &dom[..dom.len().min(400)]));
    assert!(
        overflow <= 0,
        "the page is {overflow} px wider than a 1,200 px window"
    );
    assert!(dom.contains("[::1]"), "the IPv6 flow is in the table");
}

#[test]
fn html_to_an_unwritable_place_is_a_clear_error() {
    let out = run(&[
        "analyze",
        "--html",
        "/nonexistent-dir/page.html",
        &fixture("cork"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot write the HTML report to /nonexistent-dir/page.html"),
        "{err}"
    );
}

#[test]
fn manual_pages_and_completions() {
    let dir = Scratch::new("man");
    let out = run(&["man", dir.0.to_str().expect("utf-8 path")]);
    assert!(out.status.success(), "{out:?}");
    for verb in [
        "",
        "-lab",
        "-analyze",
        "-sockets",
        "-fix",
        "-trace",
        "-completions",
    ] {
        let page = dir.0.join(format!("tcpstall{verb}.1"));
        let text = fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(text.contains(".TH"), "{} is not a man page", page.display());
    }
    // man(1) formats the analyze page, options included.
    let man = Command::new("man")
        .arg("-l")
        .arg(dir.0.join("tcpstall-analyze.1"))
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .output()
        .expect("run man (scripts/install-deps installs man-db)");
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(
        text.contains("--ladder") && text.contains("--html"),
        "{text}"
    );

    let bash = run(&["completions", "bash"]);
    let script = String::from_utf8_lossy(&bash.stdout);
    assert!(script.contains("--ladder"));
    let check = Command::new("bash")
        .args(["-n", "-c", &script])
        .output()
        .expect("bash -n");
    assert!(
        check.status.success(),
        "bash completion does not parse: {check:?}"
    );
    for shell in ["zsh", "fish"] {
        let out = run(&["completions", shell]);
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
}

#[test]
fn lab_page_renders_in_a_real_browser() {
    let dir = Scratch::new("lab-page");
    let page = dir.0.join("lab.html");
    let out = run(&[
        "lab",
        "--scenario",
        "echo",
        "--variant",
        "split,nodelay",
        "--requests",
        "5",
        "--json",
        "--html",
        page.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("lab JSON");
    let rows = v["rows"].as_array().expect("rows");
    let stalled = rows.iter().filter(|r| r["stalled"] == true).count();

    let (dom, log) = chromium(&page, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    assert!(
        dom.contains(&format!("{stalled} of 2 rows stalled")),
        "headline missing:\n{dom}"
    );
    assert!(dom.contains("class=\"chart lab-chart\""));
    for row in rows {
        let label = format!(
            "{}/{}",
            row["scenario"].as_str().unwrap_or(""),
            row["variant"].as_str().unwrap_or("")
        );
        assert!(dom.contains(&label), "the chart names {label}");
        let p50 = row["p50_ms"].as_f64().expect("p50");
        assert!(
            dom.contains(&format!("{p50:.2}")),
            "the table shows {label}'s p50 {p50:.2}"
        );
    }
    // echo/split stalls and is drawn as stalled; its TCP_NODELAY fix is not.
    assert!(dom.contains(
        "<tr class=\"stalled\"><td data-sort=\"echo\">echo</td><td data-sort=\"split\">"
    ));
    assert!(!dom.contains(
        "<tr class=\"stalled\"><td data-sort=\"echo\">echo</td><td data-sort=\"nodelay\">"
    ));
    // As root the lab captures its own traffic: the stalled row's ladder is on the page.
    assert!(
        dom.contains("<h3>nagle_delayed_ack: echo/split</h3>"),
        "no ladder for echo/split"
    );
    assert!(
        !dom.contains(": echo/nodelay</h3>"),
        "a clean row has no ladder"
    );
    fs::create_dir_all(ARTIFACTS).expect("artifacts directory");
    let png = Path::new(ARTIFACTS).join("lab.png");
    chromium(&page, Some(&png));
    assert!(fs::read(&png).expect("screenshot").starts_with(b"\x89PNG"));
}

#[test]
fn lab_ladders_draw_each_stalled_row_with_its_held_side() {
    let json = run(&[
        "lab",
        "--scenario",
        "echo,http",
        "--variant",
        "split,nodelay",
        "--requests",
        "5",
        "--json",
    ]);
    let v: Value = serde_json::from_slice(&json.stdout).expect("lab JSON");
    let out = run(&[
        "lab",
        "--scenario",
        "echo,http",
        "--variant",
        "split,nodelay",
        "--requests",
        "5",
        "--ladder",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for row in v["rows"].as_array().expect("rows") {
        let name = format!(
            "{}/{}",
            row["scenario"].as_str().unwrap_or(""),
            row["variant"].as_str().unwrap_or("")
        );
        let title = text.lines().position(|l| l == name);
        if row["expected_stall"] == true {
            let at = title.unwrap_or_else(|| panic!("no ladder for {name}:\n{text}"));
            let held = row["held_side"].as_str().expect("held side");
            let first = text.lines().nth(at + 1).unwrap_or_default();
            assert!(
                first.starts_with(&format!("nagle_delayed_ack: {held} held ")),
                "{name}: {first}"
            );
        } else {
            assert!(title.is_none(), "{name} is clean but has a ladder");
        }
    }
}

/// Python's http.server (header and body written apart) on a free port, killed on drop.
struct PythonServer(std::process::Child, u16);

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn python_http_server(root: &Path) -> PythonServer {
    use std::io::BufRead;
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/probe/http_server.py"
    );
    let mut child = Command::new("python3")
        .arg(script)
        .arg(root)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    let port = line.trim().parse().unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("the server printed no port: {line:?}")
    });
    PythonServer(child, port)
}

#[test]
fn probe_draws_the_stalled_turn_and_its_page() {
    let dir = Scratch::new("probe-page");
    fs::write(dir.0.join("index.html"), "hello\n").expect("page to serve");
    let server = python_http_server(&dir.0);
    let url = format!("http://127.0.0.1:{}/index.html", server.1);
    let page = dir.0.join("probe.html");
    let out = run(&[
        "probe",
        &url,
        "--requests",
        "8",
        "--ladder",
        "--html",
        page.to_str().expect("utf-8 path"),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    // As root the probe captures its own traffic: the server's split answer is drawn.
    let ladder = ladder_part(&out.stdout);
    assert!(
        ladder.starts_with("nagle_delayed_ack: server held "),
        "no ladder:\n{text}"
    );
    assert!(ladder.contains("| delayed ACK") && ladder.contains("| held"));
    let late_ack = ladder
        .lines()
        .find(|l| l.ends_with("| delayed ACK"))
        .unwrap_or_default();
    assert!(
        late_ack.contains("-->|"),
        "our delayed ACK goes to the server: {late_ack}"
    );

    let (dom, log) = chromium(&page, None);
    assert!(page_errors(&log).is_empty(), "{:?}", page_errors(&log));
    assert!(dom.contains("the server holds"), "headline:\n{dom}");
    assert!(dom.contains("class=\"chart histogram\""));
    assert!(dom.contains("class=\"ladder\" data-kind=\"nagle_delayed_ack\""));
    assert!(dom.contains("confirmed: re-run with the remedy, the stall vanished"));
}
