//! What a newcomer meets in the first hour, said the same way everywhere: trace's usage names
//! `-p`, watch's capability advice is README's, a filter refused because TCPSTALL_NO_LIBPCAP
//! turned libpcap off says so, `fix --delack-max` says what is measured and what the flag
//! means on a route, `trace -p` attached mid-run does not claim TCP_NODELAY was never set, and
//! a lab row whose path lost a segment says so.

mod support;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::process::SplitServer;

const BIN: &str = env!("CARGO_BIN_EXE_tcpstall");

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("tcpstall runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn trace_without_arguments_shows_both_ways_to_use_it() {
    let out = run(&["trace"], &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("tcpstall trace [OPTIONS] -- <CMD>"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tcpstall trace [OPTIONS] -p <PID>"),
        "{stderr}"
    );
}

#[test]
fn a_filter_refused_with_libpcap_turned_off_names_the_variable() {
    let out = run(
        &[
            "watch",
            "-i",
            "lo",
            "--duration",
            "1",
            "ether host 00:11:22:33:44:55",
        ],
        &[("TCPSTALL_NO_LIBPCAP", "1")],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("turned off by TCPSTALL_NO_LIBPCAP"),
        "{stderr}"
    );
    assert!(!stderr.contains("does not have"), "{stderr}");
    assert!(!stderr.contains("apt install"), "{stderr}");
}

#[test]
fn watch_asks_for_the_capability_readme_names() {
    let Some(out) = support::as_nobody(BIN, &["watch", "-i", "lo", "--duration", "1"]) else {
        return;
    };
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
        .expect("README.md");
    let advice = "setcap cap_net_raw+ep";
    assert!(stderr.contains(advice), "{stderr}");
    assert!(readme.contains(advice));
    assert!(!stderr.contains("cap_net_admin+eip"), "{stderr}");
}

#[test]
fn the_delack_max_plan_says_what_is_measured_and_what_a_route_means() {
    let mut sleeper =
        support::KillOnDrop(Command::new("sleep").arg("30").spawn().expect("sleep runs"));
    let pid = sleeper.0.id().to_string();
    let out = run(&["fix", &pid, "--delack-max", "5ms", "--dry-run"], &[]);
    let stdout = text(&out.stdout);
    if !stdout.contains("effect:") {
        support::skip(format!(
            "this kernel has no TCP_DELACK_MAX_US: {}",
            text(&out.stderr)
        ));
        return;
    }
    assert!(!stdout.contains("at most"), "{stdout}");
    assert!(stdout.contains("12 ms measured"), "{stdout}");
    assert!(stdout.contains("on a route (fix --route)"), "{stdout}");
    let _ = sleeper.0.kill();
}

#[test]
fn trace_attached_mid_run_does_not_say_never_set() {
    let _serial = support::serial();
    let server = SplitServer::start(&[]);
    let addr = server.addr();
    let stop = Arc::new(AtomicBool::new(false));
    // The load says when it is under way (its third answer): trace attaches mid-run.
    let (running, under_way) = std::sync::mpsc::channel();
    let load = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let config = tcpstall::lab::client::ClientConfig {
                timeout: Duration::from_secs(5),
                ..Default::default()
            };
            let mut client =
                tcpstall::lab::client::HttpClient::connect(addr, &config).expect("connect");
            let deadline = Instant::now() + Duration::from_secs(20);
            let mut done = 0;
            while !stop.load(Ordering::SeqCst) && done < 400 && Instant::now() < deadline {
                client.get("/", false).expect("answered");
                done += 1;
                if done == 3 {
                    let _ = running.send(());
                }
            }
        })
    };
    under_way
        .recv_timeout(Duration::from_secs(10))
        .expect("the load answered three requests");
    let pid = server.pid().to_string();
    let out = run(&["trace", "-p", &pid, "--ptrace", "--duration", "1.5"], &[]);
    stop.store(true, Ordering::SeqCst);
    load.join().expect("client thread");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("write-write-read:"),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(!stdout.contains("never set"), "{stdout}");
    assert!(
        stdout.contains("TCP_NODELAY not set while traced"),
        "{stdout}"
    );
}

#[test]
fn a_lab_row_over_a_lossy_path_says_the_segment_was_lost() {
    support::require_root("lab --rtt makes network namespaces");
    let _serial = support::serial();
    let out = support::lab(&[
        "--json",
        "--rtt",
        "10",
        "--scenario",
        "echo",
        "--variant",
        "nodelay",
        "--requests",
        "3",
        "--lose-segment",
        "4",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let why = report["rows"][0]["explanation"]
        .as_str()
        .unwrap_or_default();
    assert!(why.contains("lost data segment 4"), "{why}");
}
