//! The text of `sockets` (a table of a process tree's TCP sockets, then what is held now, what
//! can stall and what the fixes are) and of `fix` (the plan, then the result), written to any
//! `io::Write`.

use std::io::{self, Write};

use crate::report::model::sockets::{
    Action, DelackPlan, FixReport, FixedSocket, InfoView, KernelView, ProcessName, SocketView,
    TcpState,
};
use crate::report::or_unknown;
use crate::terminal::ASKS_FIRST;

fn on_off(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

/// The `sockets` table: one line per socket, then a line per socket held by several
/// processes, per socket caught holding data, per socket that can stall, and per socket whose
/// delayed ACKs a peer's writes may wait for. The advice names `fix_pid` (the process whose
/// tree is shown: fixing it reaches its children), else each socket's holder.
pub(crate) fn write_table(
    out: &mut impl Write,
    views: &[SocketView],
    fix_pid: Option<u32>,
) -> io::Result<()> {
    if views.is_empty() {
        return writeln!(out, "no TCP sockets");
    }
    writeln!(
        out,
        "{:>7} {:>4} {:<22} {:<22} {:<11} {:<7} {:<4} {:<8} {:>7} {:>7} {:>7} {:>7}",
        "PID",
        "FD",
        "LOCAL",
        "REMOTE",
        "STATE",
        "NODELAY",
        "CORK",
        "QUICKACK",
        "RTT_MS",
        "ATO_MS",
        "UNACKED",
        "NOTSENT"
    )?;
    for v in views {
        let info = |f: fn(&InfoView) -> String| v.tcp_info.as_ref().map_or("?".to_string(), f);
        writeln!(
            out,
            "{:>7} {:>4} {:<22} {:<22} {:<11} {:<7} {:<4} {:<8} {:>7} {:>7} {:>7} {:>7}",
            or_unknown(v.pid),
            or_unknown(v.fd),
            v.local,
            if v.listening { "*" } else { &v.remote },
            v.state.name(),
            on_off(v.nodelay),
            on_off(v.cork),
            on_off(v.quickack),
            info(|i| format!("{:.2}", f64::from(i.rtt_us) / 1000.0)),
            info(|i| format!("{:.0}", f64::from(i.ato_us) / 1000.0)),
            info(|i| i.unacked.to_string()),
            info(|i| i.notsent_bytes.to_string()),
        )?;
    }
    for v in views.iter().filter(|v| v.holders.len() > 1) {
        let holders: Vec<String> = v
            .holders
            .iter()
            .map(|h| format!("pid {} fd {}", h.pid, h.fd))
            .collect();
        writeln!(
            out,
            "shared: {} {}: one socket held by {}",
            v.local,
            v.state.name(),
            holders.join(", ")
        )?;
    }
    for v in views.iter().filter(|v| v.held_now == Some(true)) {
        if let Some(info) = &v.tcp_info {
            writeln!(
                out,
                "held now: pid {} fd {} {}: {} B written and not sent while {} {} an ACK \
                 (Nagle)",
                or_unknown(v.pid),
                or_unknown(v.fd),
                v.local,
                info.notsent_bytes,
                super::counted(info.unacked, "segment", "segments"),
                if info.unacked == 1 { "awaits" } else { "await" }
            )?;
        }
    }
    write_listeners(out, views, fix_pid)?;
    for v in views
        .iter()
        .filter(|v| v.can_stall == Some(true) && !v.listening)
    {
        let Some(pid) = v.pid else { continue };
        let fix = fix_pid.unwrap_or(pid);
        writeln!(
            out,
            "can stall: pid {pid} fd {} {}: Nagle on in a request/response connection: small \
             writes can wait for a delayed ACK (tcpstall fix {fix}; {ASKS_FIRST})",
            or_unknown(v.fd),
            v.local
        )?;
    }
    for v in views.iter().filter(|v| delays_acks_to_a_server(v, views)) {
        let Some(pid) = v.pid else { continue };
        let fix = fix_pid.unwrap_or(pid);
        writeln!(
            out,
            "delayed ACKs: pid {pid} fd {} {} -> {}: this side delays its ACKs ({} ms now); \
             if the server's small writes wait for them (Nagle there) and it cannot be \
             changed, cap the delay here (tcpstall fix {fix} --delack-max 5ms; {ASKS_FIRST})",
            or_unknown(v.fd),
            v.local,
            v.remote,
            v.tcp_info.map_or(0, |i| i.ato_us / 1000)
        )?;
    }
    write_runtimes(out, views)
}

/// For each process whose sockets can stall and whose runtime is known, that runtime's own
/// fix, once.
fn write_runtimes(out: &mut impl Write, views: &[SocketView]) -> io::Result<()> {
    let mut seen = std::collections::HashSet::new();
    for v in views {
        let (Some(pid), Some(runtime)) = (v.pid, &v.runtime) else {
            continue;
        };
        if seen.insert(pid) {
            writeln!(out, "runtime: pid {pid}: {}", runtime.advice())?;
        }
    }
    Ok(())
}

/// The `sockets --all` table from the kernel's iterator: every TCP socket of the host, its
/// owner, Nagle and cork, the delayed ACK it owes and its ping-pong count, the bytes it holds
/// unsent; then a line per socket holding bytes now, and per socket that can stall.
pub(crate) fn write_kernel_table(
    out: &mut impl Write,
    views: &[SocketView],
    fix_pid: Option<u32>,
) -> io::Result<()> {
    if views.is_empty() {
        return writeln!(out, "no TCP sockets");
    }
    // (title, width; negative: left-aligned) of each column, then the cells of a row.
    const COLUMNS: [(&str, i8); 13] = [
        ("PID", 7),
        ("COMMAND", -15),
        ("LOCAL", -22),
        ("REMOTE", -22),
        ("STATE", -11),
        ("NODELAY", -7),
        ("CORK", -4),
        ("DELACK", -6),
        ("PING", 4),
        ("UNSENT", 7),
        ("INFL", 5),
        ("CWND", 5),
        ("MSS", 6),
    ];
    let line = |out: &mut dyn Write, cells: &[String]| -> io::Result<()> {
        let mut text = String::new();
        for ((_, width), cell) in COLUMNS.iter().zip(cells) {
            let w = usize::from(width.unsigned_abs());
            let padded = if *width < 0 {
                format!("{cell:<w$} ")
            } else {
                format!("{cell:>w$} ")
            };
            text.push_str(&padded);
        }
        writeln!(out, "{}", text.trim_end())
    };
    let titles: Vec<String> = COLUMNS.iter().map(|(t, _)| t.to_string()).collect();
    line(out, &titles)?;
    for v in views {
        let k = v.kernel.as_ref();
        let num = |f: fn(&KernelView) -> u32| k.map_or("-".to_string(), |k| f(k).to_string());
        let delack = match k {
            Some(k) if k.delack_pending => k.delay_text().unwrap_or_else(|| "owed".to_string()),
            Some(_) => "-".to_string(),
            None => "?".to_string(),
        };
        let remote = if v.listening { "*" } else { &v.remote };
        line(
            out,
            &[
                or_unknown(v.pid),
                v.command.clone().unwrap_or_else(|| "-".to_string()),
                v.local.clone(),
                remote.to_string(),
                v.state.name().to_string(),
                on_off(v.nodelay).to_string(),
                on_off(v.cork).to_string(),
                delack,
                num(|k| u32::from(k.pingpong)),
                num(|k| k.unsent),
                num(|k| k.packets_out),
                num(|k| k.snd_cwnd),
                num(|k| k.mss_cache),
            ],
        )?;
    }
    for v in views {
        let Some(k) = &v.kernel else { continue };
        let why = if v.held_now == Some(true) {
            "Nagle holds them until the ACK of the segment in flight"
        } else if v.cork == Some(true) && k.unsent > 0 {
            "TCP_CORK holds them until uncorked or the cork timer"
        } else if k.autocork_pending {
            "autocorking holds them until earlier data leaves the qdisc"
        } else {
            continue;
        };
        writeln!(
            out,
            "held now: pid {} {} -> {}: {} B written and not sent, {} in flight: {why}",
            or_unknown(v.pid),
            v.local,
            v.remote,
            k.unsent,
            super::counted(k.packets_out, "segment", "segments")
        )?;
    }
    write_listeners(out, views, fix_pid)?;
    write_runtimes(out, views)
}

/// The listeners with Nagle on, one line per process (a server listening on several
/// addresses is one server): those whose accepted connections inherit Nagle, with the fix;
/// those whose server sets TCP_NODELAY after `accept()`, said to need none. A listener
/// inherited from a process above the tree shown (a worker's, made by its master) names that
/// process, whose fix reaches every process sharing it.
fn write_listeners(
    out: &mut impl Write,
    views: &[SocketView],
    fix_pid: Option<u32>,
) -> io::Result<()> {
    type Line<'a> = (u32, bool, Option<&'a ProcessName>, Vec<&'a str>);
    let mut by_pid: Vec<Line<'_>> = Vec::new();
    for v in views
        .iter()
        .filter(|v| v.listening && v.nodelay == Some(false))
    {
        let Some(pid) = v.pid else { continue };
        let stalls = match (v.can_stall, &v.can_stall_reason) {
            (Some(true), _) => true,
            (Some(false), Some(_)) => false,
            _ => continue,
        };
        let owner = v.inherited_from.as_ref();
        match by_pid
            .iter_mut()
            .find(|(p, s, o, _)| *p == pid && *s == stalls && *o == owner)
        {
            Some((_, _, _, addrs)) => addrs.push(&v.local),
            None => by_pid.push((pid, stalls, owner, vec![&v.local])),
        }
    }
    for (pid, stalls, owner, addrs) in by_pid {
        let addrs = addrs.join(", ");
        if let (true, Some(owner)) = (stalls, owner) {
            writeln!(
                out,
                "can stall: pid {pid} listening with Nagle on ({addrs}), a listener it shares \
                 with {}, which made it: every connection accepted on it inherits Nagle unless \
                 the server sets TCP_NODELAY itself (tcpstall fix {}, the process that owns it; \
                 {ASKS_FIRST})",
                owner.describe(),
                owner.pid
            )?;
        } else if stalls {
            writeln!(
                out,
                "can stall: pid {pid} listening with Nagle on ({addrs}): every connection it \
                 accepts inherits Nagle unless the server sets TCP_NODELAY itself (tcpstall fix \
                 {}; {ASKS_FIRST})",
                fix_pid.unwrap_or(pid)
            )?;
        } else {
            writeln!(
                out,
                "no fix needed: pid {pid} listening with Nagle on ({addrs}): the server sets \
                 TCP_NODELAY after accept(), its accepted connections have it on"
            )?;
        }
    }
    Ok(())
}

/// A client-side connection (its local port is none of the listeners shown) that receives
/// data and still delays its ACKs by the 40 ms minimum or more (`ato` of TCP_INFO, bounded by
/// TCP_DELACK_MAX_US, which this kernel has when it is readable): the side where capping the
/// delayed ACK helps a server whose small writes Nagle holds until that ACK.
fn delays_acks_to_a_server(v: &SocketView, views: &[SocketView]) -> bool {
    let port = |addr: &str| addr.rsplit_once(':').map(|(_, p)| p.to_string());
    let listening_here = views
        .iter()
        .any(|l| l.listening && port(&l.local) == port(&v.local));
    let min_us = crate::tcp_rules::DELACK_MIN.as_micros();
    v.state == TcpState::Established
        && !v.listening
        && !listening_here
        && v.delack_max_us.is_some_and(|us| u128::from(us) >= min_us)
        && v.tcp_info
            .is_some_and(|i| i.data_segs_in > 0 && u128::from(i.ato_us) >= min_us)
}

/// Where a planned socket is: `fd N` in the target itself, `pid P fd N` in a child; with the
/// other holders of a shared socket.
fn place(target: u32, socket: &SocketView) -> String {
    let fd = or_unknown(socket.fd);
    match socket.pid {
        Some(pid) if pid != target => format!("pid {pid} fd {fd:>4}"),
        _ => format!("fd {fd:>4}"),
    }
}

fn ms_text(us: u32) -> String {
    if us % 1000 == 0 {
        format!("{} ms", us / 1000)
    } else {
        format!("{us} µs")
    }
}

/// The plan of `fix`: a line per socket with what is (or would be) done, then what the kernel
/// was checked to do.
pub(crate) fn write_plan(
    out: &mut impl Write,
    report: &FixReport,
    port: Option<u16>,
) -> io::Result<()> {
    let pid = report.pid;
    let children: Vec<String> = report.pids.iter().skip(1).map(u32::to_string).collect();
    match children.len() {
        0 => writeln!(out, "plan for pid {pid}:")?,
        1 => writeln!(
            out,
            "plan for pid {pid} and its child process {}:",
            children[0]
        )?,
        _ => writeln!(
            out,
            "plan for pid {pid} and its child processes {}:",
            children.join(", ")
        )?,
    }
    let plan = &report.sockets;
    if plan.is_empty() {
        match port {
            Some(port) => writeln!(out, "  no TCP socket with local or remote port {port}")?,
            None => writeln!(out, "  no TCP sockets")?,
        }
    }
    for planned in plan {
        let s = &planned.socket;
        let what = match (planned.action, &report.delack_max) {
            (Action::SetNodelay, _) => "set TCP_NODELAY".to_string(),
            (Action::AlreadyNodelay, _) => "already TCP_NODELAY, unchanged".to_string(),
            (Action::SkippedState, _) => "closing, unchanged".to_string(),
            (Action::SetDelackMax, Some(delack)) => format!(
                "cap the delayed ACK at {} (cap now {})",
                ms_text(delack.kept_us),
                s.delack_max_us.map_or("?".to_string(), ms_text)
            ),
            (Action::AlreadyDelackMax, _) | (Action::SetDelackMax, None) => format!(
                "delayed ACK already capped at {}, unchanged",
                s.delack_max_us.map_or("?".to_string(), ms_text)
            ),
        };
        let peer = if s.listening {
            "(listening)".to_string()
        } else {
            format!("-> {}", s.remote)
        };
        let shared = if let Some(owner) = &s.inherited_from {
            format!(" [shared with {}, which made it]", owner.describe())
        } else if s.holders.len() > 1 {
            let pids: Vec<String> = s.holders.iter().map(|h| h.pid.to_string()).collect();
            format!(" [shared by pids {}]", pids.join(", "))
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {} {} {peer} {}: {what}{shared}",
            place(pid, s),
            s.local,
            s.state
        )?;
    }
    write_inherited_listeners(out, report)?;
    match &report.delack_max {
        None => write_nodelay_checks(out, report),
        Some(delack) => write_delack_checks(out, plan, delack),
    }
}

/// Listeners of the plan made by a process above the one given (a worker's listener, made by
/// its master): the change reaches every process sharing it, and the owner is the one to fix.
fn write_inherited_listeners(out: &mut impl Write, report: &FixReport) -> io::Result<()> {
    for planned in &report.sockets {
        let Some(owner) = &planned.socket.inherited_from else {
            continue;
        };
        writeln!(
            out,
            "  note: the listener {} belongs to {}, which made it and shares it with pid {}: a \
             change to it is a change for every process sharing it; fix its owner instead: \
             tcpstall fix {}",
            planned.socket.local,
            owner.describe(),
            report.pid,
            owner.pid
        )?;
    }
    Ok(())
}

fn write_nodelay_checks(out: &mut impl Write, report: &FixReport) -> io::Result<()> {
    if let Some(runtime) = &report.runtime {
        // A live change lasts as long as the sockets; the program's own switch, past a restart.
        writeln!(
            out,
            "  the change lasts as long as these sockets; {}",
            runtime.advice()
        )?;
    }
    if report
        .sockets
        .iter()
        .any(|p| p.socket.listening && p.action == Action::SetNodelay)
    {
        writeln!(
            out,
            "  {}",
            if report.listener_nodelay_inherited {
                "checked on this kernel: connections accepted later inherit TCP_NODELAY from the listener"
            } else {
                "checked on this kernel: accepted connections do NOT inherit TCP_NODELAY from the \
                 listener; only the connections open now are fixed"
            }
        )?;
    }
    Ok(())
}

fn write_delack_checks(
    out: &mut impl Write,
    plan: &[FixedSocket],
    delack: &DelackPlan,
) -> io::Result<()> {
    let kept = ms_text(delack.kept_us);
    writeln!(
        out,
        "  checked on this kernel: TCP_DELACK_MAX_US takes {} to {}; asked {}, kept {} (it \
         counts in jiffies)",
        ms_text(delack.floor_us),
        ms_text(delack.ceiling_us),
        ms_text(delack.requested_us),
        kept
    )?;
    if plan
        .iter()
        .any(|p| p.socket.listening && p.action == Action::SetDelackMax)
    {
        writeln!(
            out,
            "  {}",
            if delack.listener_inherited {
                "checked on this kernel: connections accepted later inherit the cap from the \
                 listener"
            } else {
                "checked on this kernel: accepted connections do NOT inherit the cap from the \
                 listener; only the connections open now are changed"
            }
        )?;
    }
    writeln!(
        out,
        "  effect: these sockets ACK what they receive after about {kept} instead of {} ms or \
         more (up to {} ms), so a peer whose small writes wait for that ACK (Nagle) waits about \
         {kept} plus the timer's slack, up to two jiffies (12 ms measured for 8 ms at HZ=250)",
        crate::tcp_rules::DELACK_MIN.as_millis(),
        crate::tcp_rules::DELACK_MAX.as_millis()
    )?;
    writeln!(
        out,
        "  note: the same --delack-max on a route (fix --route) sets rto_min, which caps the \
         delayed ACK one jiffy under it: lower than here for the same value (4 ms for 5ms at \
         HZ=250)"
    )?;
    writeln!(
        out,
        "  cost: more ACKs: an ACK that would have ridden on the next reply goes alone once \
         {kept} pass, up to one more packet per burst received; TCP_NODELAY on the writing \
         side remains the fix where it can be changed"
    )
}

/// The result of `fix` once applied: each changed socket, before and after.
pub(crate) fn write_result(out: &mut impl Write, report: &FixReport) -> io::Result<()> {
    for planned in &report.sockets {
        let place = place(report.pid, &planned.socket);
        match planned.action {
            Action::SetNodelay => writeln!(
                out,
                "{place} {}: TCP_NODELAY {} -> {}",
                planned.socket.local,
                on_off(planned.nodelay_before),
                on_off(planned.nodelay_after)
            )?,
            Action::SetDelackMax => writeln!(
                out,
                "{place} {}: TCP_DELACK_MAX_US {} -> {}",
                planned.socket.local,
                or_unknown(planned.socket.delack_max_us),
                or_unknown(planned.delack_max_us_after)
            )?,
            _ => {}
        }
    }
    Ok(())
}
