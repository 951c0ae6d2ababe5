//! `tcpstall trace`: follows a program's socket syscalls and names write-write-read sequences:
//! two or more sends on a socket with Nagle on, the later ones small, then a wait for the peer.
//! On Linux the small send waits in the kernel for the ACK of the earlier one, which the peer
//! delays by 40 ms or more (`tcp_nagle_check` meeting `tcp_send_delayed_ack`).

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::tracer::{self, Mode, TracedSocket, LONG_WAIT};
use crate::Outcome;

/// How long `trace -p` follows a process when `--duration` is not given.
const DEFAULT_ATTACH_SECONDS: f64 = 10.0;

/// Arguments of `tcpstall trace`.
#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    /// Follow this running process (all its threads) instead of starting a command; it is
    /// detached at the end and runs on (as under strace, a syscall blocked at the moment of
    /// attaching or detaching may return EINTR, which programs retry). No seccomp filter can be
    /// installed in a running process from outside, so it stops at every syscall: slower than
    /// `trace -- CMD`.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// Stop after this many seconds (default with -p: 10; a command runs until it and every
    /// process it started have ended, a daemon it leaves behind included, as under
    /// `strace -f`, and is killed when the time is up).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of standard output (which the traced command shares).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Exit 1 when a write-write-read pattern is found.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// The command to run and trace, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<String>,
}

/// One socket of the `trace --json` report: what the tracer saw, and the fix when needed.
#[derive(Debug, Clone, Serialize)]
pub struct SocketReport {
    /// Addresses, options, counts and the example.
    #[serde(flatten)]
    pub socket: TracedSocket,
    /// What to change, when a write-write-read was found.
    pub fix: Option<&'static str>,
}

/// The `trace --json` report.
#[derive(Debug, Clone, Serialize)]
pub struct TraceReport {
    /// The command traced, or null with `-p`.
    pub command: Option<Vec<String>>,
    /// The process traced with `-p`.
    pub pid: Option<u32>,
    /// `seccomp` (a command, stopped only at socket syscalls) or `ptrace_syscall` (`-p`).
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

const FIX: &str = "send each message with one call: build it in one buffer, or pass all parts to \
                   writev/sendmsg; or set TCP_NODELAY on the socket (on a listener, before accept)";

fn socket_report(socket: &TracedSocket) -> SocketReport {
    SocketReport {
        socket: socket.clone(),
        fix: (socket.write_write_read > 0).then_some(FIX),
    }
}

fn seconds(value: f64) -> anyhow::Result<Duration> {
    if !value.is_finite() || value <= 0.0 || value > 7.0 * 86400.0 {
        bail!("--duration must be a number of seconds above 0 and at most a week, not {value}");
    }
    Ok(Duration::from_secs_f64(value))
}

/// Runs `tcpstall trace`.
pub fn run(args: &TraceArgs) -> anyhow::Result<Outcome> {
    let traced = match args.pid {
        Some(pid) => {
            let limit = seconds(args.duration.unwrap_or(DEFAULT_ATTACH_SECONDS))?;
            tracer::trace_process(pid, limit)?
        }
        None => {
            let limit = args.duration.map(seconds).transpose()?;
            tracer::trace_command(&args.command, limit)?
        }
    };
    let mut sockets: Vec<SocketReport> = traced
        .sockets
        .iter()
        .filter(|s| s.sends > 0 || s.reads > 0)
        .map(socket_report)
        .collect();
    sockets.sort_by_key(|s| std::cmp::Reverse(s.socket.write_write_read));
    let report = TraceReport {
        command: args.pid.is_none().then(|| args.command.clone()),
        pid: args.pid,
        method: match traced.mode {
            Mode::Seccomp => "seccomp",
            Mode::Attached => "ptrace_syscall",
        },
        duration_s: traced.elapsed.as_secs_f64(),
        syscalls: traced.syscalls,
        exit_status: traced.exit_status,
        interrupted: traced.interrupted,
        write_write_read: sockets.iter().map(|s| s.socket.write_write_read).sum(),
        sockets,
    };
    let text = if args.json {
        serde_json::to_string_pretty(&report)? + "\n"
    } else {
        render(&report)
    };
    match &args.output {
        Some(path) => std::fs::write(path, text)
            .with_context(|| format!("cannot write the report to {}", path.display()))?,
        None => crate::report::print_stdout(&text)?,
    }
    Ok(if report.write_write_read > 0 {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// "pid 12 fd 3 127.0.0.1:5000 -> 127.0.0.1:80".
fn label(s: &TracedSocket) -> String {
    format!(
        "pid {} fd {} {} -> {}",
        s.pid,
        s.fd,
        crate::report::or_unknown(s.local),
        crate::report::or_unknown(s.remote)
    )
}

/// The text report.
pub fn render(report: &TraceReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let target = match (&report.command, report.pid) {
        (Some(cmd), _) => cmd.join(" "),
        (None, Some(pid)) if report.interrupted => format!("pid {pid} (detached)"),
        (None, Some(pid)) => format!("pid {pid} (exited during the trace)"),
        (None, None) => String::new(),
    };
    let status = report
        .exit_status
        .map(|s| format!(", exit status {s}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "traced {target} for {:.2} s{status}: {} syscalls followed (sockets, reads, writes, \
         waits, closes), {} TCP sockets with data",
        report.duration_s,
        report.syscalls,
        report.sockets.len()
    );
    let (found, clean): (Vec<&TracedSocket>, Vec<&TracedSocket>) = report
        .sockets
        .iter()
        .map(|r| &r.socket)
        .partition(|s| s.write_write_read > 0);
    if found.is_empty() {
        let _ = writeln!(out, "no write-write-read on a Nagle socket");
    }
    for s in &found {
        let nodelay = if s.nodelay_ever_set {
            "TCP_NODELAY was set at some point, off during these writes"
        } else {
            "Nagle on, TCP_NODELAY never set"
        };
        let _ = writeln!(out, "write-write-read: {} ({nodelay})", label(s));
        let _ = writeln!(
            out,
            "  {} times ({} followed by a wait of {} ms or more)",
            s.write_write_read,
            s.waits_over_30ms,
            LONG_WAIT.as_millis()
        );
        if let Some(example) = &s.example {
            let _ = writeln!(out, "  e.g. {}", example.describe());
        }
        if s.quickack_sets > 0 {
            let _ = writeln!(
                out,
                "  TCP_QUICKACK set {} times: it speeds up this side's ACKs, not the peer's, so \
                 it does not release these writes",
                s.quickack_sets
            );
        }
        let _ = writeln!(out, "  fix: {FIX}");
    }
    for s in clean.iter().take(20) {
        let _ = writeln!(
            out,
            "clean: {}: {} sends, {} reads{}",
            label(s),
            s.sends,
            s.reads,
            if s.nodelay { ", TCP_NODELAY on" } else { "" }
        );
    }
    if clean.len() > 20 {
        let _ = writeln!(out, "clean: {} more sockets", clean.len() - 20);
    }
    out
}
