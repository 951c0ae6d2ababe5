//! `tcpstall fix`: switches TCP_NODELAY on for a running process's TCP sockets, live, on
//! duplicates of its own sockets (`pidfd_getfd` + setsockopt). Listening sockets too, so that
//! the connections they accept later start with Nagle off: Linux copies `nonagle` into the
//! child socket (`inet_csk_clone_lock` copies the whole `tcp_sock`), checked here on the running
//! kernel before it is promised. The target's sockets are never closed or otherwise touched.

use std::io::{BufRead, IsTerminal, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;

use anyhow::{bail, Context};
use clap::Args;
use serde::Serialize;

use super::pidfd::{socket_inode, PidFd};
use super::procfs::TcpState;
use super::sockets::{inspect, SocketView};
use super::AccessError;
use crate::sockopt;
use crate::Outcome;

/// Arguments of `tcpstall fix`.
#[derive(Args, Debug, Clone)]
pub struct FixArgs {
    /// Process whose TCP sockets get TCP_NODELAY.
    pub pid: u32,
    /// Apply without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Show what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only sockets whose local or remote port is N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Print JSON (before/after of each socket) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What `fix` does to one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// TCP_NODELAY is switched on.
    SetNodelay,
    /// TCP_NODELAY was already on.
    AlreadyNodelay,
    /// The state has no future traffic to speed up (closing, time-wait...).
    SkippedState,
}

/// One socket's line of the plan and of the result.
#[derive(Debug, Clone, Serialize)]
pub struct FixedSocket {
    /// The socket as `sockets` shows it before the change; its inode guards the change (the fd
    /// is changed only while it still holds this socket).
    #[serde(flatten)]
    pub socket: SocketView,
    /// What is (or would be) done.
    pub action: Action,
    /// TCP_NODELAY before.
    pub nodelay_before: Option<bool>,
    /// TCP_NODELAY read back after setting it; `None` for a dry run or when not applied.
    pub nodelay_after: Option<bool>,
}

/// The result of `fix --json`.
#[derive(Debug, Clone, Serialize)]
pub struct FixReport {
    /// The target.
    pub pid: u32,
    /// Nothing was changed.
    pub dry_run: bool,
    /// Changes were applied.
    pub applied: bool,
    /// Whether, on this kernel, an accepted socket inherits TCP_NODELAY from its listener.
    pub listener_nodelay_inherited: bool,
    /// Every TCP socket in the plan.
    pub sockets: Vec<FixedSocket>,
}

/// Whether this kernel copies TCP_NODELAY from a listener to the sockets it accepts: a
/// listener of our own on loopback with NODELAY, one connection, the accepted socket read back.
pub fn listener_nodelay_is_inherited() -> std::io::Result<bool> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    sockopt::set_nodelay(listener.as_fd(), true)?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (accepted, _) = listener.accept()?;
    sockopt::nodelay(accepted.as_fd())
}

fn action_for(view: &SocketView) -> Action {
    let live = matches!(
        view.state,
        TcpState::Listen
            | TcpState::Established
            | TcpState::SynSent
            | TcpState::SynRecv
            | TcpState::CloseWait
    );
    match (live, view.nodelay) {
        (false, _) => Action::SkippedState,
        (true, Some(true)) => Action::AlreadyNodelay,
        (true, _) => Action::SetNodelay,
    }
}

/// Runs `tcpstall fix`.
pub fn run(args: &FixArgs) -> anyhow::Result<Outcome> {
    let pid = args.pid;
    let found = inspect(pid)?;
    if let Some(missing) = found.missing {
        bail!("{missing}; nothing was changed");
    }
    let inherited = listener_nodelay_is_inherited().context(
        "cannot check on a loopback listener whether accepted sockets inherit TCP_NODELAY",
    )?;
    let mut plan: Vec<FixedSocket> = found
        .sockets
        .iter()
        .filter(|v| args.port.map_or(true, |p| v.uses_port(p)))
        .map(|v| FixedSocket {
            socket: v.clone(),
            action: action_for(v),
            nodelay_before: v.nodelay,
            nodelay_after: None,
        })
        .collect();
    let to_change = plan
        .iter()
        .filter(|s| s.action == Action::SetNodelay)
        .count();

    let plan_text = render_plan(pid, &plan, inherited, args.port);
    if !args.json || !args.yes {
        // The plan goes where the question is asked; with --json --yes stdout stays pure JSON.
        if args.json {
            eprint!("{plan_text}");
        } else {
            crate::report::print_stdout(&plan_text)?;
        }
    }
    let mut applied = false;
    if to_change > 0 && !args.dry_run {
        if !args.yes && !confirm(pid, to_change)? {
            eprintln!("tcpstall: nothing changed");
        } else {
            apply(pid, &mut plan)?;
            applied = true;
        }
    }
    let report = FixReport {
        pid,
        dry_run: args.dry_run,
        applied,
        listener_nodelay_inherited: inherited,
        sockets: plan,
    };
    if args.json {
        crate::report::print_stdout(&(serde_json::to_string_pretty(&report)? + "\n"))?;
    } else if applied {
        crate::report::print_stdout(&render_result(&report))?;
    }
    Ok(Outcome::Done)
}

/// Asks on the terminal; refuses without one.
fn confirm(pid: u32, count: usize) -> anyhow::Result<bool> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        bail!(
            "standard input is not a terminal, so fix cannot ask before changing pid {pid}: \
             add --yes to apply, or --dry-run to only show the plan"
        );
    }
    eprint!("switch TCP_NODELAY on for {count} socket(s) of pid {pid}? [y/N] ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes" | "YES"))
}

/// Sets TCP_NODELAY on every planned socket, after checking that the fd still holds the same
/// socket (same inode): an fd closed and reused since the listing is left alone.
fn apply(pid: u32, plan: &mut [FixedSocket]) -> Result<(), AccessError> {
    let pidfd = PidFd::open(pid)?;
    for planned in plan.iter_mut() {
        let Some(fd) = planned.socket.fd else {
            continue;
        };
        if planned.action == Action::AlreadyNodelay {
            planned.nodelay_after = Some(true);
        }
        if planned.action != Action::SetNodelay {
            continue;
        }
        let dup = match pidfd.get_fd(fd) {
            Ok(dup) => dup,
            Err(AccessError::FdClosed { .. }) => continue,
            Err(err) => return Err(err),
        };
        let io_err = |err| AccessError::from_errno(err, pid, format!("set TCP_NODELAY on fd {fd}"));
        if socket_inode(&dup).map_err(io_err)? != planned.socket.inode {
            continue;
        }
        sockopt::set_nodelay(dup.as_fd(), true).map_err(io_err)?;
        planned.nodelay_after = Some(sockopt::nodelay(dup.as_fd()).map_err(io_err)?);
    }
    Ok(())
}

fn on_off(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

fn render_plan(pid: u32, plan: &[FixedSocket], inherited: bool, port: Option<u16>) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "plan for pid {pid}:");
    if plan.is_empty() {
        match port {
            Some(port) => {
                let _ = writeln!(out, "  no TCP socket with local or remote port {port}");
            }
            None => {
                let _ = writeln!(out, "  no TCP sockets");
            }
        }
    }
    for planned in plan {
        let s = &planned.socket;
        let what = match planned.action {
            Action::SetNodelay => "set TCP_NODELAY",
            Action::AlreadyNodelay => "already TCP_NODELAY, unchanged",
            Action::SkippedState => "closing, unchanged",
        };
        let fd = crate::report::or_unknown(s.fd);
        let peer = if s.listening {
            "(listening)".to_string()
        } else {
            format!("-> {}", s.remote)
        };
        let _ = writeln!(out, "  fd {fd:>4} {} {peer} {}: {what}", s.local, s.state);
    }
    if plan
        .iter()
        .any(|p| p.socket.listening && p.action == Action::SetNodelay)
    {
        let _ = writeln!(
            out,
            "  {}",
            if inherited {
                "checked on this kernel: connections accepted later inherit TCP_NODELAY from the listener"
            } else {
                "checked on this kernel: accepted connections do NOT inherit TCP_NODELAY from the \
                 listener; only the connections open now are fixed"
            }
        );
    }
    out
}

fn render_result(report: &FixReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for planned in report
        .sockets
        .iter()
        .filter(|p| p.action == Action::SetNodelay)
    {
        let fd = crate::report::or_unknown(planned.socket.fd);
        let _ = writeln!(
            out,
            "fd {fd:>4} {}: TCP_NODELAY {} -> {}",
            planned.socket.local,
            on_off(planned.nodelay_before),
            on_off(planned.nodelay_after)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inheritance_check_runs_on_this_kernel() {
        // Linux copies nonagle into accepted sockets; a kernel that did not would fail here
        // and `fix` would then say so instead of promising it.
        assert!(listener_nodelay_is_inherited().expect("loopback listener works"));
    }
}
