//! The lab in a newcomer's terminal: Ctrl-C keeps the rows finished (on loopback and over a
//! 60 ms path, whose run says how long it will take before it starts), and the table fits the
//! terminal's width in plain words, the kernel's names kept for `--wide` and JSON.

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::Collected;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

/// Starts `tcpstall lab ARGS`, sends it SIGINT after `after`, and returns its exit code,
/// stdout and stderr.
fn interrupted_lab(args: &[&str], after: Duration) -> (Option<i32>, String, Vec<String>) {
    let child = Command::new(BIN)
        .arg("lab")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tcpstall runs");
    let pid = child.id();
    let run = Collected::new(child);
    std::thread::sleep(after);
    support::signal(pid, libc::SIGINT).expect("SIGINT sent to our child");
    let (status, stdout, stderr) = run.finish(Duration::from_secs(30), "the interrupted lab");
    assert_eq!(
        support::namespaces_of(pid),
        Vec::<String>::new(),
        "namespaces left behind"
    );
    (status.code(), stdout, stderr)
}

/// The rows printed (a line starting with a scenario's name), and the "N of M rows finished"
/// the last line says.
fn rows_and_finished(stdout: &str) -> (usize, usize) {
    let scenarios = [
        "echo ",
        "http ",
        "memcached ",
        "stream ",
        "inherit ",
        "pipeline ",
        "concurrent ",
    ];
    let rows = stdout
        .lines()
        .filter(|l| scenarios.iter().any(|s| l.starts_with(s)))
        .count();
    let text = stdout.replace('\n', " ");
    let at = text
        .find("interrupted (SIGINT): ")
        .unwrap_or_else(|| panic!("no interrupted line:\n{stdout}"));
    let after = &text[at..];
    let finished = after
        .split(" of ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of rows finished: {after}"));
    (rows, finished)
}

#[test]
fn ctrl_c_prints_the_rows_finished_and_exits_130() {
    let (code, stdout, stderr) = interrupted_lab(&["--requests", "5"], Duration::from_secs(4));
    assert_eq!(code, Some(130), "{stdout}\n{stderr:?}");
    assert!(stdout.starts_with("kernel "), "{stdout}");
    let (rows, finished) = rows_and_finished(&stdout);
    assert!(finished >= 1, "{stdout}");
    assert_eq!(rows, finished, "{stdout}");
    assert!(stdout.contains("was running and is left out"), "{stdout}");
}

#[test]
fn ctrl_c_over_a_60_ms_path_keeps_the_rows_and_the_time_was_said() {
    support::require_root("lab --rtt makes network namespaces");
    let _serial = support::serial();
    let (code, stdout, stderr) = interrupted_lab(&["--rtt", "60"], Duration::from_secs(12));
    assert_eq!(code, Some(130), "{stdout}\n{stderr:?}");
    let estimate = stderr
        .iter()
        .find(|l| l.contains("over a 60 ms path: about"))
        .unwrap_or_else(|| panic!("no time estimate: {stderr:?}"));
    assert!(estimate.contains("min"), "{estimate}");
    let (rows, finished) = rows_and_finished(&stdout);
    assert!(finished >= 1, "{stdout}");
    assert_eq!(rows, finished, "{stdout}");
    assert!(stdout.contains("path: RTT 60 ms"), "{stdout}");
}

/// `tcpstall lab ARGS` with `COLUMNS` as given (none: the variable removed): its stdout.
fn lab_table(args: &[&str], columns: Option<&str>) -> String {
    let mut command = Command::new(BIN);
    command.arg("lab").args(args).stdin(Stdio::null());
    match columns {
        Some(c) => command.env("COLUMNS", c),
        None => command.env_remove("COLUMNS"),
    };
    let out = command.output().expect("tcpstall runs");
    let child_ok = out.status.code() == Some(0) || out.status.code() == Some(1);
    assert!(child_ok, "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn widest(text: &str) -> usize {
    text.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

#[test]
fn the_table_fits_the_terminal_in_plain_words() {
    let args = [
        "--scenario",
        "echo,concurrent",
        "--variant",
        "split,nodelay,server-nagle",
        "--requests",
        "3",
    ];
    let piped = lab_table(&args, None);
    assert!(widest(&piped) <= 100, "wider than 100 columns:\n{piped}");
    let narrow = lab_table(&args, Some("80"));
    assert!(widest(&narrow) <= 80, "wider than COLUMNS=80:\n{narrow}");
    for text in [&piped, &narrow] {
        for symbol in [
            "tcp_nagle_check",
            "ICSK_ACK_PUSHED2",
            "__tcp_ack_snd_check",
            "doc 0",
        ] {
            assert!(
                !text.contains(symbol),
                "{symbol} in the plain table:\n{text}"
            );
        }
    }
    assert!(piped.contains("echo       split"), "{piped}");
    // --wide: one line per row, the kernel's names kept.
    let wide = lab_table(&[&args[..], &["--wide"]].concat(), Some("80"));
    assert!(wide.contains("tcp_nagle_check"), "{wide}");
    assert!(wide.contains("ICSK_ACK_PUSHED2"), "{wide}");
    // The catalogue too.
    let list = lab_table(&["--list"], None);
    assert!(
        widest(&list) <= 100,
        "--list wider than 100 columns:\n{list}"
    );
    assert!(
        !list.contains("tcp_nagle_check") && !list.contains("doc 0"),
        "{list}"
    );
    assert!(lab_table(&["--list", "--wide"], None).contains("tcp_nagle_check"));
    // JSON keeps the whole explanation.
    let json = lab_table(&[&args[..], &["--json"]].concat(), None);
    assert!(json.contains("tcp_nagle_check"), "{json}");
}
