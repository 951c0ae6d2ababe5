//! `tcpstall fix`: switches TCP_NODELAY on for a running process's TCP sockets, live, on
//! duplicates of its own sockets (`pidfd_getfd` + setsockopt). Listening sockets too, so that
//! the connections they accept later start with Nagle off: Linux copies `nonagle` into the
//! child socket (`inet_csk_clone_lock` copies the whole `tcp_sock`), checked here on the running
//! kernel before it is promised. The target's sockets are never closed or otherwise touched.
//!
//! The target's child processes are included (a master's workers hold the connections), and
//! `--delack-max` offers the fix for the receiving side instead: a lasting cap on its delayed
//! ACK (`TCP_DELACK_MAX_US`), for when the writer that Nagle holds cannot be changed.

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use anyhow::{bail, Context};

use super::fix_state::{self, ChangedSocket};
use super::sockets::{inspect_scope, Holder, SocketView};
use super::AccessError;
use crate::host::pidfd::{socket_inode, PidFds};
use crate::host::procfs::TcpState;
use crate::host::sockopt;
pub use crate::report::model::sockets::{Action, DelackPlan, FixReport, FixedSocket};
use crate::route::{Namespace, RouteChange, RouteRequest};
use crate::Outcome;

pub use crate::args::fix::FixArgs;

/// The `--route` request of `args`, `None` without `--route`.
fn route_request(args: &FixArgs) -> anyhow::Result<Option<RouteRequest>> {
    let Some(dest) = args.route else {
        return Ok(None);
    };
    let change = match (args.quickack, args.delack_max, args.undo) {
        (true, _, _) => RouteChange::QuickAck,
        (_, Some(max), _) => RouteChange::DelackMax(max),
        (_, _, true) => RouteChange::Undo,
        _ => bail!(
            "--route needs what to change: --quickack, --delack-max DURATION (e.g. 5ms), or --undo"
        ),
    };
    let namespace = match (&args.netns, args.netns_of) {
        (Some(name), _) => Namespace::Named(name.clone()),
        (None, Some(pid)) => Namespace::OfPid(pid),
        (None, None) => Namespace::Own,
    };
    Ok(Some(RouteRequest {
        dest,
        change,
        namespace,
        yes: args.yes,
        dry_run: args.dry_run,
        json: args.json,
        default_route: args.default_route,
    }))
}

/// Whether this kernel copies TCP_NODELAY from a listener to the sockets it accepts: a
/// listener of our own on loopback with NODELAY, one connection, the accepted socket read back.
pub(crate) fn listener_nodelay_is_inherited() -> std::io::Result<bool> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    sockopt::set_nodelay(listener.as_fd(), true)?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (accepted, _) = listener.accept()?;
    sockopt::nodelay(accepted.as_fd())
}

/// Whether this kernel copies TCP_DELACK_MAX_US from a listener to the sockets it accepts
/// (`inet_csk_clone_lock` copies `icsk_delack_max` with the rest of the socket), as
/// [`listener_nodelay_is_inherited`] checks TCP_NODELAY.
pub(crate) fn listener_delack_max_is_inherited(max: Duration) -> std::io::Result<bool> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    sockopt::set_delack_max(listener.as_fd(), max)?;
    let kept = sockopt::delack_max(listener.as_fd())?;
    let _client = TcpStream::connect(listener.local_addr()?)?;
    let (accepted, _) = listener.accept()?;
    Ok(sockopt::delack_max(accepted.as_fd())? == kept)
}

/// Checks `--delack-max` against the running kernel: the option exists, and the value is in
/// the range it accepts; then what it keeps and whether accepted sockets inherit it.
fn plan_delack_max(max: Duration) -> anyhow::Result<DelackPlan> {
    let (floor, ceiling) = match sockopt::delack_max_range() {
        Ok(range) => range,
        Err(err) if err.raw_os_error() == Some(libc::ENOPROTOOPT) => bail!(
            "this kernel ({}) lacks TCP_DELACK_MAX_US (Linux 6.13 or later): switch TCP_NODELAY \
             on for the writing side instead (tcpstall fix WRITER_PID), or have the reader \
             re-arm TCP_QUICKACK after each read",
            crate::host::kernel::KernelFacts::read().release
        ),
        Err(err) => return Err(err).context("cannot probe TCP_DELACK_MAX_US on a scratch socket"),
    };
    let micros = |d: Duration| u32::try_from(d.as_micros()).unwrap_or(u32::MAX);
    if max < floor || max > ceiling {
        bail!(
            "this kernel takes a delayed-ACK cap from {} µs to {} µs (it counts in jiffies): \
             {} µs is out of range; ask for e.g. --delack-max {}us",
            micros(floor),
            micros(ceiling),
            micros(max),
            micros(floor)
        );
    }
    let kept = sockopt::delack_max_kept(max)
        .context("cannot set TCP_DELACK_MAX_US on a scratch socket")?;
    let inherited = listener_delack_max_is_inherited(max).context(
        "cannot check on a loopback listener whether accepted sockets inherit TCP_DELACK_MAX_US",
    )?;
    Ok(DelackPlan {
        requested_us: micros(max),
        kept_us: micros(kept),
        floor_us: micros(floor),
        ceiling_us: micros(ceiling),
        listener_inherited: inherited,
    })
}

fn action_for(view: &SocketView, delack: Option<&DelackPlan>) -> Action {
    let live = matches!(
        view.state,
        TcpState::Listen
            | TcpState::Established
            | TcpState::SynSent
            | TcpState::SynRecv
            | TcpState::CloseWait
    );
    match (live, delack) {
        (false, _) => Action::SkippedState,
        (true, Some(plan)) if view.delack_max_us == Some(plan.kept_us) => Action::AlreadyDelackMax,
        (true, Some(_)) => Action::SetDelackMax,
        (true, None) if view.nodelay == Some(true) => Action::AlreadyNodelay,
        (true, None) => Action::SetNodelay,
    }
}

/// Runs `tcpstall fix`.
pub fn run(args: &FixArgs) -> anyhow::Result<Outcome> {
    if let Some(request) = route_request(args)? {
        return crate::route::run(&request);
    }
    let pid = args
        .pid
        .ok_or_else(|| anyhow::anyhow!("give the PID of the process to fix, or --route DEST"))?;
    if args.undo {
        return undo(pid, args);
    }
    let found = inspect_scope(pid, !args.no_tree)?;
    if let Some(missing) = found.missing {
        bail!("{missing}; nothing was changed");
    }
    for note in &found.notes {
        eprintln!("tcpstall: {note}");
    }
    let delack = args.delack_max.map(plan_delack_max).transpose()?;
    let inherited = listener_nodelay_is_inherited().context(
        "cannot check on a loopback listener whether accepted sockets inherit TCP_NODELAY",
    )?;
    let plan: Vec<FixedSocket> = found
        .sockets
        .iter()
        .filter(|v| args.port.map_or(true, |p| v.uses_port(p)))
        .map(|v| FixedSocket {
            socket: v.clone(),
            action: action_for(v, delack.as_ref()),
            nodelay_before: v.nodelay,
            nodelay_after: None,
            delack_max_us_after: None,
        })
        .collect();
    let to_change = plan
        .iter()
        .filter(|s| matches!(s.action, Action::SetNodelay | Action::SetDelackMax))
        .count();
    let mut report = FixReport {
        pid,
        dry_run: args.dry_run,
        applied: false,
        listener_nodelay_inherited: inherited,
        sockets: plan,
        pids: found.pids,
        runtime: delack
            .is_none()
            .then(|| crate::host::runtime::runtime_of(pid))
            .flatten(),
        delack_max: delack,
    };

    if !args.json || !args.yes {
        // The plan goes where the question is asked; with --json --yes stdout stays pure JSON.
        let mut plan_text = Vec::new();
        crate::report::sockets::write_plan(&mut plan_text, &report, args.port)?;
        if args.json {
            std::io::stderr().write_all(&plan_text)?;
        } else {
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&plan_text)?;
            stdout.flush()?;
        }
    }
    if to_change > 0 && !args.dry_run {
        let question = match &report.delack_max {
            Some(plan) => format!("cap the delayed ACK at {} µs for", plan.kept_us),
            None => "switch TCP_NODELAY on for".to_string(),
        };
        let sockets = crate::report::counted(to_change as u64, "socket", "sockets");
        let question = format!("{question} {sockets} of pid {pid}?");
        if !args.yes && !crate::terminal::confirm(&format!("pid {pid}"), &question)? {
            eprintln!("tcpstall: nothing changed");
        } else {
            let applied = apply(&mut report);
            keep_for_undo(&report);
            applied?;
            report.applied = true;
        }
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        stdout.write_all((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    } else if report.applied {
        crate::report::sockets::write_result(&mut stdout, &report)?;
    }
    stdout.flush()?;
    Ok(Outcome::Done)
}

/// Sets the option on every planned socket, through the first of its holders still holding it
/// (same fd, same inode): an fd closed and reused since the listing is left alone, and a
/// worker that exited meanwhile gives way to the next process sharing the socket.
fn apply(report: &mut FixReport) -> Result<(), AccessError> {
    let mut pidfds = PidFds::default();
    let delack = report.delack_max;
    for planned in report.sockets.iter_mut() {
        match planned.action {
            Action::AlreadyNodelay => planned.nodelay_after = Some(true),
            Action::AlreadyDelackMax => planned.delack_max_us_after = planned.socket.delack_max_us,
            _ => {}
        }
        if !matches!(planned.action, Action::SetNodelay | Action::SetDelackMax) {
            continue;
        }
        let what = if delack.is_some() {
            "TCP_DELACK_MAX_US"
        } else {
            "TCP_NODELAY"
        };
        let Some((Holder { pid, fd }, dup)) =
            duplicate_any(&mut pidfds, report.pid, &planned.socket, what)?
        else {
            continue;
        };
        let io_err = |err| AccessError::from_errno(err, pid, format!("set {what} on fd {fd}"));
        match delack {
            Some(plan) => {
                sockopt::set_delack_max(
                    dup.as_fd(),
                    Duration::from_micros(plan.requested_us.into()),
                )
                .map_err(io_err)?;
                let kept = sockopt::delack_max(dup.as_fd()).map_err(io_err)?;
                planned.delack_max_us_after = u32::try_from(kept.as_micros()).ok();
            }
            None => {
                sockopt::set_nodelay(dup.as_fd(), true).map_err(io_err)?;
                planned.nodelay_after = Some(sockopt::nodelay(dup.as_fd()).map_err(io_err)?);
            }
        }
    }
    Ok(())
}

/// Records the sockets `apply` changed, with their option before, for `fix PID --undo`; a
/// record that cannot be written is said, the change stands.
fn keep_for_undo(report: &FixReport) {
    let changed: Vec<ChangedSocket> = report
        .sockets
        .iter()
        .filter(|s| {
            s.nodelay_after == Some(true) && s.action == Action::SetNodelay
                || s.delack_max_us_after.is_some() && s.action == Action::SetDelackMax
        })
        .map(|s| ChangedSocket {
            inode: s.socket.inode,
            holders: s.socket.holders.clone(),
            local: s.socket.local.clone(),
            nodelay_before: (s.action == Action::SetNodelay).then_some(false),
            delack_max_us_before: if s.action == Action::SetDelackMax {
                s.socket.delack_max_us
            } else {
                None
            },
            listening: s.socket.listening,
        })
        .collect();
    if changed.is_empty() {
        return;
    }
    say_stale_removed();
    let kept = fix_state::path_for(report.pid)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no place to keep it (root keeps it in {}, other users in $XDG_RUNTIME_DIR)",
                fix_state::STATE_DIR
            )
        })
        .and_then(|path| fix_state::record(&path, report.pid, changed).map(|()| path));
    match kept {
        Ok(path) => eprintln!(
            "tcpstall: kept for --undo in {} (tcpstall fix {} --undo)",
            path.display(),
            report.pid
        ),
        Err(err) => {
            eprintln!("tcpstall: warning: the change cannot be undone by tcpstall: {err:#}")
        }
    }
}

/// Removes the records of processes gone since (their sockets went with them), and says so.
fn say_stale_removed() {
    let removed = fix_state::remove_stale();
    if let Some(first) = removed.first() {
        eprintln!(
            "tcpstall: removed {} of processes no longer running ({}{})",
            crate::report::counted(removed.len() as u64, "fix record", "fix records"),
            first.display(),
            if removed.len() > 1 { ", …" } else { "" }
        );
    }
}

/// `fix PID --undo`: puts back on each socket still open the option as it was before
/// tcpstall's first change, then removes the record.
fn undo(pid: u32, args: &FixArgs) -> anyhow::Result<Outcome> {
    if !crate::host::procfs::process_exists(pid) {
        return Err(AccessError::NoSuchProcess { pid }.into());
    }
    if let Err(crate::host::procfs::FdListError::PermissionDenied) =
        crate::host::procfs::socket_fds(pid)
    {
        bail!("{}; nothing was changed", AccessError::fd_list_refused(pid));
    }
    say_stale_removed();
    let path = fix_state::path_for(pid).ok_or_else(|| {
        anyhow::anyhow!(
            "cannot tell where tcpstall kept its record of pid {pid} (its start time, or \
             $XDG_RUNTIME_DIR for a user other than root): nothing was changed"
        )
    })?;
    let state = fix_state::load(&path)?.ok_or_else(|| {
        anyhow::anyhow!(
            "tcpstall has no record of changing pid {pid}: nothing to undo (looked for {})",
            path.display()
        )
    })?;
    let mut plan = String::new();
    for s in &state.sockets {
        let listening = if s.listening { " (listening)" } else { "" };
        plan.push_str(&format!("  {}{listening}: {}\n", s.local, s.restores()));
    }
    let mut out: Box<dyn Write> = if args.json {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    write!(
        out,
        "undo for pid {pid}: {} changed by tcpstall fix\n{plan}",
        crate::report::counted(state.sockets.len() as u64, "socket", "sockets")
    )?;
    out.flush()?;
    if args.dry_run {
        writeln!(out, "dry run: nothing changed")?;
        return Ok(Outcome::Done);
    }
    let question = format!("put back the options of pid {pid}?");
    if !args.yes && !crate::terminal::confirm(&format!("pid {pid}"), &question)? {
        eprintln!("tcpstall: nothing changed");
        return Ok(Outcome::Done);
    }
    let mut pidfds = PidFds::default();
    let mut undone = Vec::new();
    let mut listeners_undone = false;
    let mut gone = 0usize;
    for s in &state.sockets {
        let mut dup = None;
        for holder in &s.holders {
            let Ok(fd) = pidfds.get(holder.pid).and_then(|p| p.get_fd(holder.fd)) else {
                continue;
            };
            if socket_inode(&fd).ok() == Some(s.inode) {
                dup = Some((*holder, fd));
                break;
            }
        }
        let Some((Holder { pid: holder, fd }, dup)) = dup else {
            gone += 1;
            continue;
        };
        let io_err = |err| AccessError::from_errno(err, holder, format!("put back fd {fd}"));
        if let Some(nodelay) = s.nodelay_before {
            sockopt::set_nodelay(dup.as_fd(), nodelay).map_err(io_err)?;
        }
        if let Some(us) = s.delack_max_us_before {
            sockopt::set_delack_max(dup.as_fd(), Duration::from_micros(us.into()))
                .map_err(io_err)?;
        }
        listeners_undone |= s.listening;
        undone.push(serde_json::json!({
            "local": s.local,
            "inode": s.inode,
            "nodelay_after": sockopt::nodelay(dup.as_fd()).ok(),
            "delack_max_us_after": sockopt::delack_max(dup.as_fd())
                .ok()
                .and_then(|d| u32::try_from(d.as_micros()).ok()),
        }));
    }
    std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
    let mut stdout = std::io::stdout().lock();
    if args.json {
        let report = serde_json::json!({"pid": pid, "undone": undone, "gone": gone});
        stdout.write_all((serde_json::to_string_pretty(&report)? + "\n").as_bytes())?;
    } else {
        writeln!(
            stdout,
            "done: {} put back{}",
            crate::report::counted(undone.len() as u64, "socket", "sockets"),
            if gone > 0 {
                format!(
                    ", {} closed since the fix (nothing to put back there)",
                    crate::report::counted(gone as u64, "socket", "sockets")
                )
            } else {
                String::new()
            }
        )?;
        if listeners_undone {
            writeln!(
                stdout,
                "note: connections accepted since the fix copied the listener's options then \
                 and keep them until they close"
            )?;
        }
    }
    stdout.flush()?;
    Ok(Outcome::Done)
}

/// A duplicate of `socket` through the first holder that still holds it; `None` when none
/// does any more. The target itself exiting is an error; a child exiting is not.
fn duplicate_any(
    pidfds: &mut PidFds,
    target: u32,
    socket: &SocketView,
    what: &str,
) -> Result<Option<(Holder, std::os::fd::OwnedFd)>, AccessError> {
    for &holder in &socket.holders {
        let dup = match pidfds.get(holder.pid).and_then(|p| p.get_fd(holder.fd)) {
            Ok(dup) => dup,
            Err(AccessError::FdClosed { .. }) => continue,
            Err(AccessError::NoSuchProcess { .. }) if holder.pid != target => continue,
            Err(err) => return Err(err),
        };
        let inode = socket_inode(&dup).map_err(|err| {
            let action = format!("set {what} on fd {}", holder.fd);
            AccessError::from_errno(err, holder.pid, action)
        })?;
        if inode == socket.inode {
            return Ok(Some((holder, dup)));
        }
    }
    Ok(None)
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

    #[test]
    fn delack_cap_inheritance_is_checked_on_this_kernel() {
        match sockopt::delack_max_range() {
            // inet_csk_clone_lock copies icsk_delack_max with the rest of the listener.
            Ok((floor, _)) => assert!(listener_delack_max_is_inherited(floor).expect("loopback")),
            Err(err) => assert_eq!(err.raw_os_error(), Some(libc::ENOPROTOOPT), "{err}"),
        }
    }
}
