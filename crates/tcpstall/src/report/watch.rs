//! `watch` output: one block (text) or one line (`--json`) per stall as it is found, with the
//! local process that owns the socket, and the closing summary.
//!
//! JSON events carry the keys of `analyze`'s events (written by the same
//! [`super::json::write_event`]) plus `pid`, `command`, `fd`, `owner_side`, `owner_listening`,
//! `owner_hidden`, `owner_deferred`, `nodelay`, `cork`, `cork_confirmed`, `fix` and `runtime`; the summary is one line `{"summary":{...}}`.
//! A claim the capture could not settle and the socket did not either is one line
//! `{"undecided":{...,"reason":R}}`.

use std::fmt::Write as _;
use std::io;

use serde::Serialize;

use super::json::write_event;
use super::ms;
use crate::detect::verdict::{explain, fixes};
use crate::detect::{Holder, KindCounts, StallEvent, StallKind};
use crate::flow::Endpoint;
use crate::report::model::watch::{Container, NoOwner, Owner, OwnerStalls, WatchSummary};
use crate::report::model::Runtime;
use crate::terminal::ASKS_FIRST;

/// Seconds in a day, for the time of day.
const DAY_S: u64 = 86_400;

/// `HH:MM:SS.uuuuuu` (UTC) of a capture time.
pub fn clock(ts_ns: u64) -> String {
    let s = ts_ns / 1_000_000_000 % DAY_S;
    let us = ts_ns / 1_000 % 1_000_000;
    format!("{:02}:{:02}:{:02}.{us:06}", s / 3600, s / 60 % 60, s % 60)
}

/// `client-server`, as `analyze` names a flow.
pub fn flow_label(client: Endpoint, server: Endpoint) -> String {
    let mut label = String::with_capacity(48);
    client.push_to(&mut label);
    label.push('-');
    server.push_to(&mut label);
    label
}

/// The command that switches Nagle off for the held socket: for Nagle stalls whose held side
/// is the owner's socket.
pub fn fix_command(event: &StallEvent, owner: &Owner) -> Option<String> {
    let nagle = event.finding.kind.info().holder == Holder::Nagle;
    (nagle && owner.side == event.finding.held_side).then(|| fix_for(owner.pid, owner.port))
}

/// `tcpstall fix PID --port N`.
fn fix_for(pid: u32, port: u16) -> String {
    format!("tcpstall fix {pid} --port {port}")
}

/// A container as the text names it: `1a2b3c4d5e6f (containerd), pod shop/web-1 (UID …),
/// container nginx`; the names where the node shows them, the UID otherwise.
fn container_text(c: &Container) -> String {
    let mut text = format!("{} ({})", c.short_id(), c.runtime);
    match (&c.pod, &c.pod_uid) {
        (Some(p), uid) => {
            let _ = write!(text, ", pod {}/{}", p.namespace, p.pod);
            if let Some(uid) = uid {
                let _ = write!(text, " (UID {uid})");
            }
            if let Some(name) = &p.container {
                let _ = write!(text, ", container {name}");
            }
        }
        (None, Some(uid)) => {
            let _ = write!(text, ", pod UID {uid}");
        }
        (None, None) => {}
    }
    text
}

/// For a 200 ms-class cork-timer stall, what the owning socket's TCP_CORK says: `Some(true)`
/// when it is set (the kernel held the data: the cork timer), `Some(false)` when it is clear
/// (the application took that time, or sent with MSG_MORE, which leaves no mark on the
/// socket); `None` when not a cork event of the held socket, or TCP_CORK was unreadable.
pub fn cork_confirmed(event: &StallEvent, owner: Option<&Owner>) -> Option<bool> {
    let owner = owner?;
    (event.finding.kind.info().holder == Holder::Cork && owner.side == event.finding.held_side)
        .then_some(owner.cork)
        .flatten()
}

fn on_off(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "on",
        Some(false) => "off",
        None => "?",
    }
}

/// One stall as text: a line of facts, the owner, the explanation and the fix.
pub fn event_text(event: &StallEvent, found: Result<&Owner, &NoOwner>) -> String {
    let f = &event.finding;
    let owner = found.ok();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}  {}  {}  held: {}  {}",
        clock(event.ts_ns.as_nanos()),
        f.kind.name(),
        ms(f.delay_ns),
        f.held_side.name(),
        flow_label(event.client, event.server),
    );
    match owner {
        Some(o) => {
            let whose = if o.side == f.held_side {
                format!("the held {}", o.side.name())
            } else {
                format!(
                    "the {} (no socket of the held {} found on this host)",
                    o.side.name(),
                    f.held_side.name()
                )
            };
            let options = match &o.unreadable {
                Some(why) => format!("options unknown: {why}"),
                None => format!(
                    "TCP_NODELAY {}, TCP_CORK {} now",
                    on_off(o.nodelay),
                    on_off(o.cork)
                ),
            };
            let socket = if o.listener {
                " (its listening socket: the connection has closed)"
            } else {
                ""
            };
            let fd = if o.fd >= 0 {
                format!(" fd {}", o.fd)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  process: pid {} ({}){fd}{socket}, port {}, {whose}; {options}",
                o.pid, o.command, o.port
            );
            if let Some(runtime) = &o.runtime {
                let _ = writeln!(out, "  runtime: {}", runtime.describe());
            }
            if let Some(c) = &o.container {
                let _ = writeln!(out, "  container: {}", container_text(c));
            }
        }
        None if found == Err(&NoOwner::Hidden) => {
            let _ = writeln!(
                out,
                "  process: a socket of this host, held by a process tcpstall may not inspect \
                 (another user's; run as root or with CAP_SYS_PTRACE)"
            );
        }
        None if found == Err(&NoOwner::Deferred) => {
            let _ = writeln!(
                out,
                "  process: not searched yet (its socket is new and the processes were read \
                 under a second ago; the flow's next stall names it)"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  process: none found (no endpoint is a socket in this host's network namespace \
                 now: traffic passing through, another namespace, or a connection already closed)"
            );
        }
    }
    let _ = writeln!(out, "  {}", explain(event));
    match cork_confirmed(event, owner) {
        Some(true) => {
            let _ = writeln!(
                out,
                "  settled by the socket: TCP_CORK is set on it, so the kernel held the data: the \
                 cork timer"
            );
            for fix in fixes(f.kind, f.held_side, Some(event)) {
                let _ = writeln!(out, "  fix: {fix}");
            }
        }
        Some(false) => {
            let _ = writeln!(
                out,
                "  settled by the socket: TCP_CORK is clear on it, so the {} took that time before \
                 writing (or sent with MSG_MORE, which leaves no mark on the socket: `tcpstall \
                 trace -p {}` follows its sends)",
                f.held_side.name(),
                owner.map_or(0, |o| o.pid)
            );
        }
        None => {}
    }
    if let Some(o) = owner.filter(|_| f.kind.info().nagle_delayed_ack()) {
        if o.side == f.held_side {
            if o.nodelay == Some(true) {
                let _ = writeln!(
                    out,
                    "  TCP_NODELAY is on now: Nagle no longer holds this socket"
                );
            } else if let Some(fix) = fix_command(event, o) {
                let _ = writeln!(out, "  fix: {fix} ({ASKS_FIRST})");
                if let Some(runtime) = &o.runtime {
                    let _ = writeln!(out, "  {}", runtime.advice());
                }
            }
        } else if !o.listener && kernel_caps_delayed_ack() {
            // Only the ACKing side is here: its lasting cap is the fix this host can apply.
            let _ = writeln!(
                out,
                "  fix here, if the {} cannot be changed: {} --delack-max 5ms (TCP_DELACK_MAX_US, \
                 which this kernel has; more ACKs)",
                f.held_side.name(),
                fix_for(o.pid, o.port)
            );
        }
        if o.side != f.held_side && !o.listener {
            // Or this host's lever, for every connection of its route to the writer.
            let writer = crate::detect::verdict::held_address(event);
            if let Some(route) = crate::detect::verdict::route_fix_command(Some(writer)) {
                let _ = writeln!(
                    out,
                    "  or, for every connection of this host's route to the {}: {route} (or \
                     --delack-max 5ms; more ACKs on that route)",
                    f.held_side.name()
                );
            }
        }
    }
    out
}

/// What ended a kernel-seen hold, in words (`watch --kernel`), by its `release` name.
pub fn release_text(release: &str) -> &'static str {
    match release {
        "ack" => "the ACK of the small segment in flight",
        "tlp" => "the tail-loss probe timer (no ACK came in time: the probe sent or resent data)",
        "rto" => "the retransmission timer (the small segment or its ACK was lost and resent)",
        "pushed" => "no ACK: TCP_NODELAY was switched on, or the socket uncorked",
        "close" => "close(): the FIN carried the held bytes out",
        "reset" => "a reset or abort: the held bytes were discarded with the socket",
        _ => "unknown",
    }
}

/// A kernel event's `release` added to its rendering: the JSON key, or a text line.
pub fn add_release(buf: &mut Vec<u8>, json: bool, release: &str) {
    if json {
        if buf.last() == Some(&b'}') {
            buf.pop();
            buf.extend_from_slice(format!(",\"release\":\"{release}\"}}").as_bytes());
        }
    } else {
        let line = super::fit_prose(format!("  released by: {}\n", release_text(release)));
        buf.extend_from_slice(line.as_bytes());
    }
}

/// A hold that ended because its socket closed (`watch --kernel`): reported as ended, not as
/// a stall nor as lost. JSON: `{"ended":{"by","flow","flow_id","time","delay_ms","held_side",
/// "bytes","pid","command"}}`.
pub fn ended_text(event: &StallEvent, pid: u32, command: &str, by: &str, json: bool) -> String {
    let f = &event.finding;
    let flow = flow_label(event.client, event.server);
    if json {
        #[derive(Serialize)]
        struct Ended<'a> {
            by: &'a str,
            flow: &'a str,
            flow_id: u64,
            time: f64,
            delay_ms: f64,
            held_side: &'static str,
            bytes: u32,
            pid: u32,
            command: &'a str,
        }
        let ended = Ended {
            by,
            flow: &flow,
            flow_id: event.flow_id,
            time: event.ts_ns.as_secs_f64(),
            delay_ms: f.delay_ns.as_secs_f64() * 1e3,
            held_side: f.held_side.name(),
            bytes: event.released_bytes,
            pid,
            command,
        };
        let line = serde_json::json!({ "ended": ended });
        return format!("{line}\n");
    }
    super::fit_prose(format!(
        "{}  hold ended by {by}  {}  held: {}  {flow}\n  process: pid {pid} ({command}); {} B \
         waited for Nagle until {}\n",
        clock(event.ts_ns.as_nanos()),
        ms(f.delay_ns),
        f.held_side.name(),
        event.released_bytes,
        release_text(by)
    ))
}

/// Whether the running kernel takes TCP_DELACK_MAX_US, probed once on a scratch socket.
fn kernel_caps_delayed_ack() -> bool {
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBED.get_or_init(|| crate::host::sockopt::delack_max_range().is_ok())
}

/// One stall as a JSON object, without a newline: `analyze`'s event keys plus the owner's.
pub fn write_event_json(
    buf: &mut Vec<u8>,
    event: &StallEvent,
    found: Result<&Owner, &NoOwner>,
) -> io::Result<()> {
    let owner = found.ok();
    write_event(buf, event, &flow_label(event.client, event.server))?;
    // Reopen the object to add the owner's keys.
    if buf.last() == Some(&b'}') {
        buf.pop();
    }
    #[derive(Serialize)]
    struct OwnerKeys<'a> {
        pid: Option<u32>,
        command: Option<&'a str>,
        fd: Option<i32>,
        owner_side: Option<&'static str>,
        owner_listening: Option<bool>,
        owner_hidden: bool,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        owner_deferred: bool,
        nodelay: Option<bool>,
        cork: Option<bool>,
        cork_confirmed: Option<bool>,
        fix: Option<String>,
        runtime: Option<&'a Runtime>,
        container_id: Option<&'a str>,
        container_runtime: Option<&'static str>,
        pod_uid: Option<&'a str>,
        pod_namespace: Option<&'a str>,
        pod_name: Option<&'a str>,
        container_name: Option<&'a str>,
    }
    let container = owner.and_then(|o| o.container.as_ref());
    let pod = container.and_then(|c| c.pod.as_ref());
    let keys = OwnerKeys {
        pid: owner.map(|o| o.pid),
        command: owner.map(|o| o.command.as_str()),
        fd: owner.map(|o| o.fd).filter(|fd| *fd >= 0),
        owner_side: owner.map(|o| o.side.name()),
        owner_listening: owner.map(|o| o.listener),
        owner_hidden: found == Err(&NoOwner::Hidden),
        owner_deferred: found == Err(&NoOwner::Deferred),
        nodelay: owner.and_then(|o| o.nodelay),
        cork: owner.and_then(|o| o.cork),
        cork_confirmed: cork_confirmed(event, owner),
        fix: owner.and_then(|o| fix_command(event, o)),
        runtime: owner.and_then(|o| o.runtime.as_ref()),
        container_id: container.map(|c| c.id.as_str()),
        container_runtime: container.map(|c| c.runtime),
        pod_uid: container.and_then(|c| c.pod_uid.as_deref()),
        pod_namespace: pod.map(|p| p.namespace.as_str()),
        pod_name: pod.map(|p| p.pod.as_str()),
        container_name: pod.and_then(|p| p.container.as_deref()),
    };
    let object = serde_json::to_vec(&keys).map_err(io::Error::from)?;
    // `{"pid":...}` → `,"pid":...}` after the event's last key.
    buf.push(b',');
    buf.extend_from_slice(object.get(1..).unwrap_or_default());
    Ok(())
}

/// A claim the capture could not settle and the held socket did not settle either (its
/// TCP_CORK is clear or unreadable): `{"undecided":{...the event and owner keys...,"reason":R}}`,
/// so that no line with a top-level `kind` is a claim that was not proven.
pub fn write_undecided_json(
    buf: &mut Vec<u8>,
    event: &StallEvent,
    found: Result<&Owner, &NoOwner>,
    reason: &str,
) -> io::Result<()> {
    buf.extend_from_slice(b"{\"undecided\":");
    write_event_json(buf, event, found)?;
    if buf.last() == Some(&b'}') {
        buf.pop();
    }
    buf.extend_from_slice(b",\"reason\":");
    serde_json::to_writer(&mut *buf, reason).map_err(io::Error::from)?;
    buf.extend_from_slice(b"}}");
    Ok(())
}

/// The text of such a claim: what the wire showed and why the socket did not settle it.
pub fn undecided_text(event: &StallEvent, found: Result<&Owner, &NoOwner>) -> String {
    let f = &event.finding;
    let held = f.held_side.name();
    let why = match found {
        Ok(o) if o.side == f.held_side && o.cork == Some(false) => format!(
            "TCP_CORK is off on its socket (pid {} ({})): the writer's own time, or a send \
             with MSG_MORE, which leaves no mark on the socket",
            o.pid, o.command
        ),
        Ok(o) => format!(
            "TCP_CORK of the {held}'s socket could not be read (pid {} ({}))",
            o.pid, o.command
        ),
        Err(_) => format!("the {held}'s socket was not found on this host"),
    };
    format!(
        "{}  undecided {}  {}  held: {}  {}\n  the {held}'s {} B answer left {} after the \
         request with nothing in flight; {why}\n",
        clock(event.ts_ns.as_nanos()),
        f.kind.name(),
        ms(f.delay_ns),
        held,
        flow_label(event.client, event.server),
        event.released_bytes,
        ms(f.delay_ns),
    )
}

/// The fix of a process whose own sockets were held by Nagle.
fn summary_fix(o: &OwnerStalls) -> Option<String> {
    let nagle = StallKind::ALL
        .into_iter()
        .any(|k| k.info().nagle_delayed_ack() && o.stalls.get(k) > 0);
    (o.held && nagle).then(|| fix_for(o.pid, o.port))
}

/// The closing summary as text.
pub fn summary_text(s: &WatchSummary) -> String {
    let mut out = String::new();
    let filter = if s.filter.trim().is_empty() {
        "all TCP".to_string()
    } else {
        format!("filter `{}`", s.filter)
    };
    if s.interface == "kernel" {
        // watch --kernel: no packets; its drops are holds lost to a full ring.
        let _ = writeln!(
            out,
            "watched the kernel's Nagle holds on every TCP socket for {:.1} s; lost: {} (ring full)",
            s.duration_s, s.drops.dropped
        );
    } else {
        let _ = writeln!(
            out,
            "watched {} ({filter}) for {:.1} s: {}, {}; dropped: {} by the kernel, {} by the \
             interface",
            s.interface,
            s.duration_s,
            super::counted(s.packets.packets, "packet", "packets"),
            super::counted(s.packets.tcp_segments, "TCP segment", "TCP segments"),
            s.drops.dropped,
            s.drops.if_dropped
        );
    }
    if s.drops.dropped > 0 && s.interface == "kernel" {
        let _ = writeln!(
            out,
            "note: the kernel's ring was full: {} lost unseen (tcpstall read it too slowly); \
             without --minor only holds of 1 ms or more take room in it",
            if s.drops.dropped == 1 {
                "1 hold was".to_string()
            } else {
                format!("{} holds were", s.drops.dropped)
            }
        );
    }
    if s.drops.dropped > 0 && s.interface != "kernel" {
        let _ = writeln!(
            out,
            "note: the kernel dropped packets: stalls in them go unseen; a narrower filter or a \
             larger --buffer-mib helps"
        );
    }
    let _ = writeln!(out, "flows: {} ({} active)", s.flows, s.active_flows);
    if s.untracked.segments > 0 {
        let _ = writeln!(
            out,
            "not followed: {} and {} of connections past the --max-flows bound (stalls in them \
             go unseen; a larger --max-flows or a narrower filter follows them)",
            super::counted(s.untracked.connections, "new connection", "new connections"),
            super::counted(s.untracked.segments, "packet", "packets"),
        );
    }
    let _ = write!(out, "stalls: {}", s.counts.reported_text());
    if s.counts.stalls() > 0 {
        let _ = write!(
            out,
            "; data held on the {}",
            [("client", s.held[0]), ("server", s.held[1])]
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(side, n)| format!("{side} {}", super::counted(*n, "time", "times")))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let minor = s.counts.get(StallKind::NagleMinor);
    if minor > 0 {
        let holds = super::counted(minor, "minor Nagle hold", "minor Nagle holds");
        let _ = write!(out, " (and {holds})");
    }
    out.push('\n');
    if !s.owners.is_empty() {
        let _ = writeln!(out, "processes:");
        for o in &s.owners {
            let fix = summary_fix(o).map_or(String::new(), |fix| format!("; fix: {fix}"));
            let _ = writeln!(
                out,
                "  pid {} ({}) port {}, {}{}: {}{fix}",
                o.pid,
                o.command,
                o.port,
                o.side.name(),
                if o.held {
                    " (held)"
                } else {
                    " (peer of the held side)"
                },
                o.stalls.stalls_text(),
            );
            if let (Some(_), Some(runtime)) = (summary_fix(o), &o.runtime) {
                let _ = writeln!(out, "    {}", runtime.advice());
            }
        }
    }
    if s.owners_unlisted > 0 {
        let _ = writeln!(
            out,
            "  ... and {} of further processes (not listed)",
            super::counted(s.owners_unlisted, "stall", "stalls")
        );
    }
    if s.without_owner > 0 {
        let _ = writeln!(
            out,
            "{} on flows without a local socket found (traffic passing through, another network \
             namespace, or a client connection closed before it was looked up)",
            super::counted(s.without_owner, "stall", "stalls")
        );
    }
    out
}

/// The closing summary as one JSON line: `{"summary":{...}}`.
pub fn summary_json(s: &WatchSummary) -> String {
    #[derive(Serialize)]
    struct Held {
        client: u64,
        server: u64,
    }
    #[derive(Serialize)]
    struct OwnerJson<'a> {
        pid: u32,
        command: &'a str,
        port: u16,
        side: &'static str,
        held: bool,
        stalls: KindCounts,
        fix: Option<String>,
        runtime: Option<&'a Runtime>,
    }
    #[derive(Serialize)]
    struct SummaryJson<'a> {
        interface: &'a str,
        filter: &'a str,
        duration_s: f64,
        packets: u64,
        tcp_segments: u64,
        dropped: u64,
        if_dropped: u64,
        flows: u64,
        active_flows: u64,
        untracked_connections: u64,
        untracked_segments: u64,
        stalls: KindCounts,
        held_side: Held,
        without_owner: u64,
        owners: Vec<OwnerJson<'a>>,
        owners_unlisted: u64,
    }
    #[derive(Serialize)]
    struct Line<'a> {
        summary: SummaryJson<'a>,
    }
    let line = Line {
        summary: SummaryJson {
            interface: &s.interface,
            filter: &s.filter,
            duration_s: (s.duration_s * 1e3).round() / 1e3,
            packets: s.packets.packets,
            tcp_segments: s.packets.tcp_segments,
            dropped: s.drops.dropped,
            if_dropped: s.drops.if_dropped,
            flows: s.flows,
            active_flows: s.active_flows,
            untracked_connections: s.untracked.connections,
            untracked_segments: s.untracked.segments,
            stalls: s.counts,
            held_side: Held {
                client: s.held[0],
                server: s.held[1],
            },
            without_owner: s.without_owner,
            owners: s
                .owners
                .iter()
                .map(|o| OwnerJson {
                    pid: o.pid,
                    command: &o.command,
                    port: o.port,
                    side: o.side.name(),
                    held: o.held,
                    stalls: o.stalls,
                    fix: summary_fix(o),
                    runtime: o.runtime.as_ref(),
                })
                .collect(),
            owners_unlisted: s.owners_unlisted,
        },
    };
    // Serialising plain structs of numbers and strings cannot fail.
    serde_json::to_string(&line).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server's response held until the client's delayed ACK, seen where only the client
    /// is local: the fix offered is the client's cap, when this kernel has the option.
    #[test]
    fn the_acking_side_alone_is_offered_its_delayed_ack_cap() {
        use crate::detect::testing::Wire;
        use crate::Side;
        let mut w = Wire::handshake(30, 1448);
        w.data(true, 1_000, 80)
            .data(false, 1_100, 148)
            .ack(true, 41_100)
            .data(false, 41_130, 127);
        let analysis = w.analyse();
        let event = &analysis.events[0];
        assert_eq!(event.finding.kind, StallKind::NagleDelayedAck);
        let mut client = Owner {
            side: Side::Client,
            pid: 4321,
            command: "client".into(),
            fd: 3,
            port: 40000,
            nodelay: Some(false),
            cork: Some(false),
            unreadable: None,
            listener: false,
            container: None,
            runtime: None,
        };
        let text = event_text(event, Ok(&client));
        let cap = "fix here, if the server cannot be changed: tcpstall fix 4321 --port 40000 \
                   --delack-max 5ms";
        assert_eq!(
            text.contains(cap),
            crate::host::sockopt::delack_max_range().is_ok(),
            "{text}"
        );
        // And this host's lever, on any kernel: its route to the server.
        let server = event.server.addr;
        assert!(
            text.contains(&format!(
                "or, for every connection of this host's route to the server: tcpstall fix \
                 --route {server} --quickack"
            )),
            "{text}"
        );
        // The held side's own socket gets TCP_NODELAY, not the cap.
        client.side = Side::Server;
        let text = event_text(event, Ok(&client));
        assert!(
            text.contains(&format!(
                "fix: tcpstall fix 4321 --port 40000 ({ASKS_FIRST})\n"
            )),
            "{text}"
        );
        assert!(!text.contains("--delack-max"), "{text}");
    }

    #[test]
    fn holds_lost_to_a_full_ring_are_said() {
        let mut s = WatchSummary {
            interface: "kernel".into(),
            ..WatchSummary::default()
        };
        assert!(!summary_text(&s).contains("note:"), "{}", summary_text(&s));
        s.drops.dropped = 7;
        let text = summary_text(&s);
        assert!(text.contains("lost: 7 (ring full)"), "{text}");
        assert!(text.contains("7 holds were lost unseen"), "{text}");
    }

    #[test]
    fn counts_of_one_are_in_the_singular() {
        let mut s = WatchSummary {
            interface: "lo".into(),
            filter: "port 8000".into(),
            ..WatchSummary::default()
        };
        s.packets.packets = 1;
        s.packets.tcp_segments = 1;
        s.owners_unlisted = 1;
        s.without_owner = 1;
        let text = summary_text(&s);
        assert!(text.contains(": 1 packet, 1 TCP segment;"), "{text}");
        assert!(
            text.contains("... and 1 stall of further processes"),
            "{text}"
        );
        assert!(text.contains("\n1 stall on flows without"), "{text}");
        s.interface = "kernel".into();
        s.drops.dropped = 1;
        assert!(
            summary_text(&s).contains("1 hold was lost unseen"),
            "{}",
            summary_text(&s)
        );
    }

    #[test]
    fn clock_is_utc_time_of_day() {
        // 2024-01-02 03:04:05.678901 UTC.
        assert_eq!(clock(1_704_164_645_678_901_000), "03:04:05.678901");
    }
}
