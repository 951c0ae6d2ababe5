//! The report of `trace`: text for people, JSON for scripts (keys in docs/JSON.md).

use std::io::{self, Write};

use serde::Serialize;

use crate::report::model::trace::{TracedSocket, LONG_WAIT};
use crate::report::model::Runtime;

/// What to change on a socket with write-write-reads.
pub(crate) const FIX: &str = "send each message with one call: build it in one buffer, or pass \
                              all parts to writev/sendmsg; or set TCP_NODELAY on the socket (on \
                              a listener, before accept)";

/// Clean sockets listed in the text report; the rest are counted.
const CLEAN_SHOWN: usize = 20;

/// One socket of the report: what the tracer saw, and the fix when needed.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SocketReport {
    /// Addresses, options, counts and the example.
    #[serde(flatten)]
    pub socket: TracedSocket,
    /// What to change, when a write-write-read was found.
    pub fix: Option<&'static str>,
    /// Sends whose tail the kernel showed held by Nagle as the call returned (unsent bytes
    /// behind a small segment in flight); traced through the tracepoints only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_holds: Option<u64>,
    /// The peer's process, when its end of the connection is a socket of this host: the
    /// ACKing side, whose delayed ACK can be capped there.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_process: Option<PeerProcess>,
    /// The runtime and framework of the socket's process, and their fix, when it had a
    /// write-write-read and tcpstall knows the runtime (read at the trace's end: a command
    /// that has exited shows none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
}

/// A process on this host holding the other end of a traced connection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PeerProcess {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub command: String,
}

impl SocketReport {
    /// The socket, with the fix when it had a write-write-read.
    pub fn new(socket: TracedSocket) -> SocketReport {
        let fix = (socket.write_write_read > 0).then_some(FIX);
        SocketReport {
            socket,
            fix,
            kernel_holds: None,
            peer_process: None,
            runtime: None,
        }
    }
}

/// The whole report of one trace.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct TraceReport {
    /// The command traced, or null with `-p`.
    pub command: Option<Vec<String>>,
    /// The process traced with `-p`.
    pub pid: Option<u32>,
    /// `tracepoints` (never stopped: a command, or `-p`, where the kernel allows BPF),
    /// `seccomp` (a command under ptrace, stopped only at socket syscalls: `--ptrace`, or where
    /// the kernel refuses tracepoints) or `ptrace_syscall` (`-p --ptrace`, or where the kernel
    /// refuses tracepoints).
    pub method: &'static str,
    /// Seconds traced.
    pub duration_s: f64,
    /// Followed syscalls seen.
    pub syscalls: u64,
    /// The command's exit status (128 + signal when killed).
    pub exit_status: Option<i32>,
    /// Ended by Ctrl-C, SIGTERM or `--duration`.
    pub interrupted: bool,
    /// Write-write-read sequences on all sockets.
    pub write_write_read: u64,
    /// TCP sockets that carried data, most sequences first.
    pub sockets: Vec<SocketReport>,
}

/// Writes the report as pretty JSON and a newline.
pub(crate) fn write_json(report: &TraceReport, out: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    out.write_all(b"\n")
}

/// "pid 12 fd 3 127.0.0.1:5000 -> 127.0.0.1:80".
fn label(s: &TracedSocket) -> String {
    format!(
        "pid {} fd {} {} -> {}",
        s.pid,
        s.fd,
        super::or_unknown(s.local),
        super::or_unknown(s.remote)
    )
}

/// Writes the text report: a summary line, each socket with write-write-reads and its fix, then
/// the clean ones.
pub(crate) fn write_text(report: &TraceReport, out: &mut impl Write) -> io::Result<()> {
    let target = match (&report.command, report.pid) {
        (Some(cmd), _) => cmd.join(" "),
        (None, Some(pid)) if report.interrupted && report.method == "tracepoints" => {
            format!("pid {pid} (still running, never stopped)")
        }
        (None, Some(pid)) if report.interrupted => format!("pid {pid} (detached)"),
        (None, Some(pid)) => format!("pid {pid} (exited during the trace)"),
        (None, None) => String::new(),
    };
    let status = report
        .exit_status
        .map(|s| format!(", exit status {s}"))
        .unwrap_or_default();
    // A command's way is named here; `-p`'s in its target's words above.
    let way = match (&report.command, report.method) {
        (Some(_), "tracepoints") => ", through the kernel's tracepoints (never stopped)",
        (Some(_), _) => ", under ptrace (stopped at its socket syscalls)",
        (None, _) => "",
    };
    writeln!(
        out,
        "traced {target} for {:.2} s{status}{way}: {} syscalls followed (sockets, reads, writes, \
         waits, closes), {} with data",
        report.duration_s,
        report.syscalls,
        crate::report::counted(report.sockets.len() as u64, "TCP socket", "TCP sockets")
    )?;
    let (found, clean): (Vec<&TracedSocket>, Vec<&TracedSocket>) = report
        .sockets
        .iter()
        .map(|r| &r.socket)
        .partition(|s| s.write_write_read > 0);
    if found.is_empty() {
        writeln!(out, "no write-write-read on a Nagle socket")?;
    }
    for r in report
        .sockets
        .iter()
        .filter(|r| r.socket.write_write_read > 0)
    {
        let s = &r.socket;
        let nodelay = match (s.nodelay_ever_set, report.command.is_some()) {
            (true, _) => "TCP_NODELAY was set at some point, off during these writes",
            (false, true) => "Nagle on, TCP_NODELAY never set",
            // Attached to a running process: what it did before is unseen.
            (false, false) => "Nagle on, TCP_NODELAY not set while traced",
        };
        writeln!(out, "write-write-read: {} ({nodelay})", label(s))?;
        let long = LONG_WAIT.as_millis();
        let unmeasured = match s.unmeasured_holds_over_30ms {
            0 => String::new(),
            n => format!("; {n} more not timed, their reads waiting {long} ms or more"),
        };
        writeln!(
            out,
            "  {} ({} with the last write kept back {long} ms or more by Nagle{unmeasured})",
            super::counted(s.write_write_read, "time", "times"),
            s.waits_over_30ms,
        )?;
        if let Some(idle) = s.longest_idle_wait_ms {
            writeln!(
                out,
                "  {} of the reads after them waited {long} ms or more with nothing kept back \
                 that long (the longest {idle:.1} ms): the peer's time, not a hold",
                s.idle_waits_over_30ms
            )?;
        }
        if let Some(example) = &s.example {
            writeln!(out, "  e.g. {}", example.describe())?;
            if let Some(sites) = &example.call_sites {
                let width = super::terminal_width();
                out.write_all(super::call_sites::text(sites, width).as_bytes())?;
            }
        }
        if let Some(holds) = r.kernel_holds.filter(|&h| h > 0) {
            writeln!(
                out,
                "  the kernel held the tail of {} (Nagle: unsent bytes behind a small \
                 segment in flight) as the call returned",
                crate::report::counted(holds, "send", "sends")
            )?;
        }
        if s.quickack_sets > 0 {
            writeln!(
                out,
                "  TCP_QUICKACK set {}: it speeds up this side's ACKs, not the peer's, so \
                 it does not release these writes",
                crate::report::counted(s.quickack_sets, "time", "times")
            )?;
        }
        writeln!(out, "  fix: {FIX}")?;
        if let Some(runtime) = &r.runtime {
            writeln!(out, "  {}", runtime.advice())?;
        }
        // Waits as long as the peer's delayed ACK: a cap on it there releases them sooner.
        if s.waits_over_30ms > 0 {
            let cap = match (&r.peer_process, s.remote) {
                (Some(peer), Some(remote)) => crate::detect::verdict::delack_cap_fix_here(
                    "peer",
                    peer.pid,
                    &peer.command,
                    remote.port(),
                ),
                _ => crate::detect::verdict::delack_cap_fix("peer"),
            };
            writeln!(out, "  if this program cannot be changed: {cap}")?;
            let writer = s.local.map(|a| a.ip());
            if let Some(route) = crate::detect::verdict::route_fix("peer", "program", writer) {
                writeln!(out, "  {route}")?;
            }
        }
    }
    for s in clean.iter().take(CLEAN_SHOWN) {
        writeln!(
            out,
            "clean: {}: {}, {}{}",
            label(s),
            crate::report::counted(s.sends, "send", "sends"),
            crate::report::counted(s.reads, "read", "reads"),
            if s.nodelay { ", TCP_NODELAY on" } else { "" }
        )?;
    }
    if clean.len() > CLEAN_SHOWN {
        let more = clean.len() - CLEAN_SHOWN;
        let sockets = if more == 1 { "socket" } else { "sockets" };
        writeln!(out, "clean: {more} more {sockets}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::report::model::trace::{Example, Hold};

    /// Two sockets with write-write-reads (one with TCP_QUICKACK calls, one with a long
    /// example) and a clean one, from a command.
    fn found() -> TraceReport {
        let mut a = TracedSocket::new(4242, 5);
        a.local = Some("127.0.0.1:40000".parse().expect("address"));
        a.remote = Some("127.0.0.1:8080".parse().expect("address"));
        a.mss = 65483;
        (a.sends, a.reads, a.write_write_read, a.waits_over_30ms) = (12, 6, 6, 4);
        a.unmeasured_holds_over_30ms = 1;
        (a.idle_waits_over_30ms, a.longest_idle_wait_ms) = (1, Some(310.25));
        a.quickack_sets = 3;
        a.nodelay_ever_set = true;
        a.example = Some(Example::new(
            vec![76, 10],
            2,
            Duration::from_micros(341_234),
            Hold::Proven(Duration::from_micros(41_234)),
        ));
        let mut b = TracedSocket::new(4242, 7);
        b.remote = Some("[::1]:9000".parse().expect("address"));
        (b.sends, b.reads) = (3, 1);
        (b.nodelay, b.nodelay_ever_set) = (true, true);
        let mut c = TracedSocket::new(4243, 3);
        (c.sends, c.write_write_read) = (1, 1);
        c.example = Some(Example::new(
            vec![1, 2, 3, 4, 5, 6, 7, 8],
            11,
            Duration::from_micros(40),
            Hold::Nothing,
        ));
        TraceReport {
            command: Some(vec!["python3".into(), "client.py".into(), "80".into()]),
            pid: None,
            method: "seccomp",
            duration_s: 1.23456,
            syscalls: 99,
            exit_status: Some(0),
            interrupted: false,
            write_write_read: 7,
            sockets: [a, c, b].into_iter().map(SocketReport::new).collect(),
        }
    }

    /// 24 clean sockets of a process traced with -p and detached.
    fn clean_detached() -> TraceReport {
        let mut report = found();
        report.command = None;
        report.pid = Some(77);
        report.interrupted = true;
        report.exit_status = None;
        report.method = "ptrace_syscall";
        let base = report.sockets[2].clone();
        report.sockets.retain(|s| s.socket.write_write_read == 0);
        for i in 0..23 {
            let mut s = base.clone();
            s.socket.fd = 10 + i;
            s.socket.nodelay = i % 2 == 0;
            report.sockets.push(s);
        }
        report
    }

    fn text(report: &TraceReport) -> String {
        let mut out = Vec::new();
        write_text(report, &mut out).expect("write to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    fn json(report: &TraceReport) -> String {
        let mut out = Vec::new();
        write_json(report, &mut out).expect("write to memory");
        String::from_utf8(out).expect("UTF-8")
    }

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/trace-report");

    fn expected(name: &str) -> String {
        std::fs::read_to_string(format!("{FIXTURES}/{name}")).expect("fixture")
    }

    #[test]
    fn text_and_json_are_as_written() {
        assert_eq!(text(&found()), expected("found.txt"));
        assert_eq!(json(&found()), expected("found.json"));
        assert_eq!(text(&clean_detached()), expected("clean-detached.txt"));
        assert_eq!(json(&clean_detached()), expected("clean-detached.json"));
        let mut exited = clean_detached();
        exited.interrupted = false;
        exited.sockets.clear();
        assert_eq!(text(&exited), expected("empty-exited.txt"));
    }

    #[test]
    fn a_peer_found_on_this_host_is_named_in_the_delayed_ack_cap() {
        let mut report = found();
        let before = text(&report);
        assert!(before.contains("tcpstall fix PID --delack-max 5ms on the peer's host"));
        report.sockets[0].peer_process = Some(PeerProcess {
            pid: 5151,
            command: "redis-server".into(),
        });
        let named = text(&report);
        assert!(
            named.contains(
                "tcpstall fix 5151 --port 8080 --delack-max 5ms (pid 5151, redis-server, on this \
                 host;"
            ),
            "{named}"
        );
        assert!(!named.contains("fix PID"), "{named}");
        let parsed: serde_json::Value = serde_json::from_str(&json(&report)).expect("JSON");
        assert_eq!(
            parsed["sockets"][0]["peer_process"],
            serde_json::json!({"pid": 5151, "command": "redis-server"})
        );
    }

    #[test]
    fn one_socket_is_counted_in_the_singular() {
        let mut one = clean_detached();
        one.sockets.truncate(1);
        let text = text(&one);
        assert!(text.contains(", 1 TCP socket with data\n"), "{text}");
        assert!(text.contains(": 3 sends, 1 read"), "{text}");
    }

    #[test]
    fn a_failed_write_is_returned() {
        let mut full = [0u8; 16];
        let err = write_text(&found(), &mut &mut full[..]).expect_err("16 bytes are too few");
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
