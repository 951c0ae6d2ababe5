//! `tcpstall fix --route DEST`: the host's lever when neither the writer nor the reader can be
//! changed. Route metrics apply to every connection the route carries: `quickack 1`
//! (RTAX_QUICKACK) keeps them in quick-ACK mode, so a Nagle-held write is released at once;
//! a locked `rto_min` (RTAX_RTO_MIN) caps their delayed ACK on Linux 6.7+ (`tcp_delack_max`).
//!
//! The route changed is the one the kernel uses for DEST, every table and policy rule
//! considered (RTM_GETROUTE with RTM_F_FIB_MATCH): setting a metric on `127.0.0.0/8` does
//! nothing for 127.0.0.1, whose more specific `local 127.0.0.1` route in table local wins. It
//! is replaced in place with all its other attributes and metrics (RTM_NEWROUTE,
//! NLM_F_REPLACE), and what it was is kept in a state file ([`state`]) for `--undo`.

pub mod describe;
pub mod rtnetlink;
pub mod state;

use std::io::Write;
use std::net::IpAddr;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use netlink_packet_route::route::{RouteMessage, RouteMetric};
use netlink_packet_route::AddressFamily;
use serde::Serialize;

use crate::host::kernel::KernelFacts;
use crate::host::netns::NetNs;
use crate::tcp_rules;
use crate::Outcome;

/// CAP_NET_ADMIN (include/uapi/linux/capability.h): changing a route.
const CAP_NET_ADMIN: u32 = 12;
/// CAP_SYS_ADMIN: entering another network namespace (`setns`).
const CAP_SYS_ADMIN: u32 = 21;

/// What `fix --route` changes on the route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteChange {
    /// `quickack 1`: every connection of the route ACKs at once.
    QuickAck,
    /// A locked `rto_min` of this duration: the delayed ACK is capped just under it.
    DelackMax(Duration),
    /// The route as it was before tcpstall changed it.
    Undo,
}

/// Which network namespace holds the route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// tcpstall's own.
    Own,
    /// `/run/netns/NAME` (`ip netns add NAME`).
    Named(String),
    /// The namespace of a process (a container's).
    OfPid(u32),
}

/// One `fix --route` request.
#[derive(Debug, Clone)]
pub struct RouteRequest {
    /// The destination whose route is changed.
    pub dest: IpAddr,
    /// The change.
    pub change: RouteChange,
    /// Where.
    pub namespace: Namespace,
    /// Apply without asking.
    pub yes: bool,
    /// Show only.
    pub dry_run: bool,
    /// JSON on standard output.
    pub json: bool,
    /// The default route may be changed (`--default-route`).
    pub default_route: bool,
}

/// What `fix --route --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct RouteFixReport {
    /// The destination looked up.
    pub dest: IpAddr,
    /// The namespace as given (`null`: tcpstall's own).
    pub netns: Option<String>,
    /// `quickack`, `delack_max` or `undo`.
    pub change: &'static str,
    /// The route the kernel uses for `dest`, as found.
    pub route_before: String,
    /// The route as it is (or, for a dry run, would be) after the change.
    pub route_after: String,
    /// The route's table.
    pub table: u32,
    /// Nothing was changed (`--dry-run`).
    pub dry_run: bool,
    /// The change was made.
    pub applied: bool,
    /// The route already was as asked: nothing to do.
    pub unchanged: bool,
    /// With `--delack-max`: the `rto_min` set, milliseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rto_min_ms: Option<u32>,
    /// With `--delack-max`: the delayed-ACK cap it gives (`rto_min` less one jiffy), µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delack_cap_us: Option<u32>,
    /// What the change costs, one sentence each.
    pub costs: Vec<String>,
    /// What happens to the connections open now.
    pub open_connections: String,
    /// The file that keeps the route as it was, for `--undo`.
    pub state_file: String,
    /// The route found is the default route (DEST has no route of its own): changing it
    /// changes every connection that leaves by it.
    pub default_route: bool,
}

/// Runs `tcpstall fix --route`.
pub fn run(request: &RouteRequest) -> anyhow::Result<Outcome> {
    let (namespace, label) = open_namespace(&request.namespace)?;
    let (current, route_before) = find_route(request, namespace.as_ref(), label.as_deref())?;
    refuse_unreplaceable(&current, request.dest)?;
    let state_path = state::path_for(netns_inode(namespace.as_ref())?, &current);
    // A real change needs CAP_NET_ADMIN: refused before anything is read or asked. A dry run
    // needs nothing, and reads the record only to show what --undo would put back.
    let changes = !request.dry_run;
    if changes {
        require_capability(CAP_NET_ADMIN, "CAP_NET_ADMIN", "change a route")?;
    }
    let kept = match (request.change, changes) {
        (RouteChange::Undo, _) | (_, true) => state::load(&state_path)?,
        (_, false) => None,
    };

    let planned = plan_change(
        request.change,
        &current,
        kept.as_ref(),
        &route_before,
        &state_path,
    )?;
    let route_after = in_namespace(namespace.as_ref(), |_| {
        Ok(describe::route_line(&planned.target))
    })?;
    let mut report = plan_report(
        request,
        label,
        &current,
        (route_before, route_after),
        &planned,
        &state_path,
    );
    note_changed_since_set(
        request.change,
        kept.as_ref(),
        &current,
        &report.route_before,
    )?;

    // Refused before the plan is shown: a plan's "becomes" and "kept for --undo" would say a
    // change is coming that is not.
    refuse_unconfirmed_default_route(request, &report)?;
    show_plan(request, &report)?;
    if report.unchanged && request.change == RouteChange::Undo && !request.dry_run {
        // The route is back as it was (put back by hand): the record has nothing left to undo.
        std::fs::remove_file(&state_path)
            .with_context(|| format!("cannot remove {}", state_path.display()))?;
    }
    if !report.unchanged && !request.dry_run {
        confirm_and_apply(
            request,
            namespace.as_ref(),
            &current,
            &planned.target,
            kept,
            &mut report,
        )?;
    }
    print_done(request, &report)?;
    Ok(Outcome::Done)
}

/// The route the kernel uses for `request.dest` in `namespace` (labelled `label`), as a
/// request to replace it and as a line.
fn find_route(
    request: &RouteRequest,
    namespace: Option<&NetNs>,
    label: Option<&str>,
) -> anyhow::Result<(RouteMessage, String)> {
    in_namespace(namespace, |socket| {
        let route = socket.matching_route(request.dest);
        Ok(route.map(|r| {
            let line = describe::route_line(&r);
            (rtnetlink::as_request(&r), line)
        }))
    })?
    .map_err(|err| lookup_error(err, request.dest, label))
}

/// The inode of the route's network namespace (`None`: tcpstall's own), which names the
/// state file.
fn netns_inode(namespace: Option<&NetNs>) -> anyhow::Result<u64> {
    match namespace {
        Some(ns) => ns.inode(),
        None => NetNs::open("own", "/proc/self/ns/net").and_then(|ns| ns.inode()),
    }
    .context("cannot read the network namespace's inode, which names the state file")
}

/// The route a change makes.
struct Planned {
    /// The route as it is to be.
    target: RouteMessage,
    /// With `--delack-max`: the `rto_min` set, milliseconds.
    rto_min_ms: Option<u32>,
    /// With `--delack-max`: the delayed-ACK cap it gives, µs.
    delack_cap_us: Option<u32>,
}

/// The route `change` makes of `current`: with the metric set, or for `--undo` the route
/// `kept` in the state file at `state_path` (an error when there is none).
fn plan_change(
    change: RouteChange,
    current: &RouteMessage,
    kept: Option<&state::RouteState>,
    route_before: &str,
    state_path: &std::path::Path,
) -> anyhow::Result<Planned> {
    let facts = KernelFacts::read();
    let (target, rto_min_ms, delack_cap_us) = match change {
        RouteChange::QuickAck => (with_quickack(current), None, None),
        RouteChange::DelackMax(max) => {
            let (ms, cap_us) = plan_rto_min(max, &facts)?;
            (with_rto_min(current, ms), Some(ms), Some(cap_us))
        }
        RouteChange::Undo => {
            let kept = kept.ok_or_else(|| {
                anyhow!(
                    "tcpstall has no record of changing this route ({route_before}): nothing \
                     to undo (looked for {})",
                    state_path.display()
                )
            })?;
            (
                kept.original()
                    .context("the state file's route is unreadable")?,
                None,
                None,
            )
        }
    };
    Ok(Planned {
        target,
        rto_min_ms,
        delack_cap_us,
    })
}

/// The report of the change `planned` on `current`, before it is made: the route's lines
/// `(before, after)`, what it costs and where its undo is kept.
fn plan_report(
    request: &RouteRequest,
    label: Option<String>,
    current: &RouteMessage,
    (route_before, route_after): (String, String),
    planned: &Planned,
    state_path: &std::path::Path,
) -> RouteFixReport {
    let Planned {
        rto_min_ms,
        delack_cap_us,
        ..
    } = *planned;
    RouteFixReport {
        dest: request.dest,
        netns: label,
        change: match request.change {
            RouteChange::QuickAck => "quickack",
            RouteChange::DelackMax(_) => "delack_max",
            RouteChange::Undo => "undo",
        },
        route_before,
        route_after,
        table: rtnetlink::table(current),
        dry_run: request.dry_run,
        applied: false,
        unchanged: rtnetlink::to_bytes(&planned.target) == rtnetlink::to_bytes(current),
        rto_min_ms,
        delack_cap_us,
        costs: costs(request.change, rto_min_ms, delack_cap_us),
        open_connections: OPEN_CONNECTIONS.to_string(),
        state_file: state_path.display().to_string(),
        default_route: rtnetlink::is_default(current),
    }
}

/// For `--undo`: a note when the route is no longer as tcpstall left it (`current` against the
/// route the state file says tcpstall applied).
fn note_changed_since_set(
    change: RouteChange,
    kept: Option<&state::RouteState>,
    current: &RouteMessage,
    route_before: &str,
) -> anyhow::Result<()> {
    if let (RouteChange::Undo, Some(kept)) = (change, kept) {
        let applied = kept
            .applied()
            .context("the state file's route is unreadable")?;
        if rtnetlink::to_bytes(&applied) != rtnetlink::to_bytes(current) {
            eprintln!(
                "tcpstall: note: the route changed since tcpstall set it (now: {route_before}); \
                 --undo puts back the route as it was before tcpstall's first change"
            );
        }
    }
    Ok(())
}

/// `--yes` to a change that would land on the default route (DEST has no route of its own)
/// without `--default-route`: refused, as nothing else is asked.
fn refuse_unconfirmed_default_route(
    request: &RouteRequest,
    report: &RouteFixReport,
) -> anyhow::Result<()> {
    let changes = !report.unchanged && !request.dry_run && request.change != RouteChange::Undo;
    if changes && report.default_route && request.yes && !request.default_route {
        bail!(
            "{} has no route of its own: the route found is the default route ({}), and \
             changing it changes every connection that leaves by it; add --default-route \
             to confirm, or add a route for {} and fix that one",
            request.dest,
            report.route_before,
            request.dest
        );
    }
    Ok(())
}

/// The plan, before anything changes: on standard output, or on stderr with `--json` (not at
/// all with `--json --yes`).
fn show_plan(request: &RouteRequest, report: &RouteFixReport) -> anyhow::Result<()> {
    if !request.json || !request.yes {
        let mut text = Vec::new();
        write_plan(&mut text, report)?;
        if request.json {
            std::io::stderr().write_all(&text)?;
        } else {
            std::io::stdout().write_all(&text)?;
            std::io::stdout().flush()?;
        }
    }
    Ok(())
}

/// Asks before changing the route (unless `--yes`; the default route only with
/// `--default-route`), then changes it to `target`.
fn confirm_and_apply(
    request: &RouteRequest,
    namespace: Option<&NetNs>,
    current: &RouteMessage,
    target: &RouteMessage,
    kept: Option<state::RouteState>,
    report: &mut RouteFixReport,
) -> anyhow::Result<()> {
    let default_route = report.default_route;
    let question = if default_route {
        format!(
            "change the DEFAULT route {} (every connection leaving by it)?",
            report.route_before
        )
    } else {
        format!("change the route {}?", report.route_before)
    };
    if !request.yes && !crate::terminal::confirm("the route", &question)? {
        eprintln!("tcpstall: nothing changed");
        Ok(())
    } else {
        apply(request, namespace, current, target, kept, report)
    }
}

/// The outcome on standard output: the report as JSON with `--json`; else, once applied, the
/// route as it is now and how to undo the change.
fn print_done(request: &RouteRequest, report: &RouteFixReport) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    if request.json {
        stdout.write_all((serde_json::to_string_pretty(report)? + "\n").as_bytes())?;
    } else if report.applied {
        writeln!(stdout, "done: {}", report.route_after)?;
        if request.change != RouteChange::Undo {
            writeln!(
                stdout,
                "undo: tcpstall fix --route {}{} --undo",
                request.dest,
                namespace_option(&request.namespace)
            )?;
        }
    }
    stdout.flush()?;
    Ok(())
}

/// Replaces the route, keeping (or, for `--undo`, dropping) its state file. The original is
/// written down before the route is touched, so that a change is never left without its undo.
fn apply(
    request: &RouteRequest,
    namespace: Option<&NetNs>,
    current: &RouteMessage,
    target: &RouteMessage,
    kept: Option<state::RouteState>,
    report: &mut RouteFixReport,
) -> anyhow::Result<()> {
    let path = std::path::PathBuf::from(&report.state_file);
    let hex = |route: &RouteMessage| state::to_hex(&rtnetlink::to_bytes(route));
    let mut record = kept.unwrap_or_else(|| state::RouteState {
        dest: request.dest.to_string(),
        netns: report.netns.clone(),
        route_before: report.route_before.clone(),
        original: hex(current),
        applied: hex(current),
    });
    let first_change = record.original == record.applied;
    if request.change != RouteChange::Undo {
        state::save(&path, &record)?;
    }
    let replaced = in_namespace(namespace, |socket| {
        Ok(socket.replace(target).and_then(|()| {
            let now = socket.matching_route(request.dest)?;
            Ok((rtnetlink::as_request(&now), describe::route_line(&now)))
        }))
    })?;
    let after = match replaced {
        Ok(after) => after,
        Err(err) => {
            if first_change && request.change != RouteChange::Undo {
                // Nothing was changed: no record of a change either.
                let _ = std::fs::remove_file(&path);
            }
            return Err(replace_error(err, &report.route_before));
        }
    };
    report.applied = true;
    report.route_after = after.1;
    if request.change == RouteChange::Undo {
        std::fs::remove_file(&path)
            .with_context(|| format!("the route is restored, but {} stays", path.display()))?;
    } else {
        record.applied = hex(&after.0);
        state::save(&path, &record)?;
    }
    Ok(())
}

/// A route changed for a while in a namespace tcpstall made (the lab's `route-*` rows), put
/// back as it was when dropped. Never for the host's own routes: no state file is kept.
pub(crate) struct RouteOverride {
    namespace: NetNs,
    original: RouteMessage,
}

impl RouteOverride {
    /// Changes the route `namespace` uses for `dest` (`change` is not [`RouteChange::Undo`]).
    pub(crate) fn set(
        namespace: &NetNs,
        dest: IpAddr,
        change: RouteChange,
    ) -> anyhow::Result<RouteOverride> {
        let original = in_namespace(Some(namespace), |socket| {
            let route = rtnetlink::as_request(&socket.matching_route(dest)?);
            let target = match change {
                RouteChange::QuickAck => with_quickack(&route),
                RouteChange::DelackMax(max) => {
                    let ms = u32::try_from(max.as_micros().div_ceil(1000)).unwrap_or(u32::MAX);
                    with_rto_min(&route, ms)
                }
                RouteChange::Undo => route.clone(),
            };
            socket.replace(&target)?;
            Ok(route)
        })
        .with_context(|| {
            format!(
                "cannot change the route for {dest} in network namespace {}",
                namespace.name()
            )
        })?;
        Ok(RouteOverride {
            namespace: namespace.clone(),
            original,
        })
    }
}

impl Drop for RouteOverride {
    fn drop(&mut self) {
        let original = &self.original;
        if let Err(err) = in_namespace(Some(&self.namespace), |socket| socket.replace(original)) {
            eprintln!(
                "tcpstall: note: the route changed in network namespace {} could not be put \
                 back ({err:#}); the namespace is deleted when the run ends",
                self.namespace.name()
            );
        }
    }
}

/// The route with `quickack 1` (any other value replaced).
fn with_quickack(route: &RouteMessage) -> RouteMessage {
    let mut metrics: Vec<RouteMetric> = rtnetlink::metrics(route)
        .iter()
        .filter(|m| !matches!(m, RouteMetric::QuickAck(_)))
        .cloned()
        .collect();
    metrics.push(RouteMetric::QuickAck(1));
    rtnetlink::with_metrics(route, metrics)
}

/// The route with a locked `rto_min` of `ms`: `tcp_rto_min` reads the metric only when it is
/// locked (`dst_metric_locked`), as `ip route ... rto_min` always sets it.
fn with_rto_min(route: &RouteMessage, ms: u32) -> RouteMessage {
    let bit = 1u32 << tcp_rules::RTAX_RTO_MIN;
    let mut locked = false;
    let mut metrics: Vec<RouteMetric> = rtnetlink::metrics(route)
        .iter()
        .filter(|m| !matches!(m, RouteMetric::RtoMin(_)))
        .map(|m| match m {
            RouteMetric::Lock(bits) => {
                locked = true;
                RouteMetric::Lock(bits | bit)
            }
            other => other.clone(),
        })
        .collect();
    if !locked {
        metrics.insert(0, RouteMetric::Lock(bit));
    }
    metrics.push(RouteMetric::RtoMin(ms));
    rtnetlink::with_metrics(route, metrics)
}

/// `--delack-max` on a route: the kernel must derive the delayed-ACK cap from `rto_min`
/// (6.7+), and the value must be in tcpstall's range. Returns the `rto_min` in whole
/// milliseconds (the metric's unit) and the cap it gives, in µs.
fn plan_rto_min(max: Duration, facts: &KernelFacts) -> anyhow::Result<(u32, u32)> {
    let (major, minor) = tcp_rules::DELACK_FOLLOWS_RTO_MIN_SINCE;
    if facts.release_at_least((major, minor)) == Some(false) {
        bail!(
            "this kernel ({}) does not cap the delayed ACK by the route's rto_min (Linux \
             {major}.{minor} or later, tcp_delack_max): use --quickack on the route instead",
            facts.release
        );
    }
    // An unknown HZ is taken as 100, the coarsest: its floor is the highest.
    let hz = facts.hz.unwrap_or(100);
    let ms = u32::try_from(max.as_micros().div_ceil(1000)).unwrap_or(u32::MAX);
    let (floor, ceiling) = (
        tcp_rules::route_rto_min_floor_ms(hz),
        tcp_rules::ROUTE_RTO_MIN_CEILING_MS,
    );
    if ms < floor || ms > ceiling {
        bail!(
            "--delack-max on a route sets its rto_min, from {floor} ms (just over one jiffy at \
             HZ={hz}) to {ceiling} ms (under the default RTO floor): {ms} ms is out of range; \
             ask for e.g. --delack-max {floor}ms"
        );
    }
    let cap_jiffies = tcp_rules::route_delack_cap_jiffies(ms, hz);
    Ok((ms, cap_jiffies * (1_000_000 / hz)))
}

/// What a change costs, said before it is made.
fn costs(change: RouteChange, rto_min_ms: Option<u32>, cap_us: Option<u32>) -> Vec<String> {
    match change {
        RouteChange::QuickAck => vec![
            "more ACKs on every connection of this route: each data segment received is ACKed \
             at once, alone, instead of waiting up to 40 ms to ride on the reply (up to one ACK \
             per segment on a bulk transfer)"
                .into(),
        ],
        RouteChange::DelackMax(_) => {
            let ms = rto_min_ms.unwrap_or(0);
            let cap = f64::from(cap_us.unwrap_or(0)) / 1000.0;
            vec![
                format!(
                    "more ACKs on every connection of this route: an ACK waits at most {cap:.0} \
                     ms (rto_min less one jiffy, tcp_delack_max) before it goes alone"
                ),
                format!(
                    "a lower rto_min also makes retransmission timeouts fire sooner: after \
                     max({ms} ms, srtt + 4·rttvar) instead of at least 200 ms (RFC 6298 §2.4, \
                     tcp_rto_min), so a path whose round trip varies more than that sees \
                     spurious retransmissions"
                ),
            ]
        }
        RouteChange::Undo => Vec::new(),
    }
}

/// Connections open now pick the change up at their next packet: replacing the route makes the
/// route cached in each socket stale (IPv4: `rt_cache_flush` in `fib_table_insert`; IPv6: the
/// node's serial number, `fib6_update_sernum`), and the next send, even an ACK, looks it up
/// again (`__sk_dst_check`).
const OPEN_CONNECTIONS: &str = "new connections of this route take the change; connections open \
    now take it at their next packet sent (the replaced route makes the one each socket cached \
    stale, so the kernel looks it up again)";

fn write_plan(out: &mut impl Write, report: &RouteFixReport) -> std::io::Result<()> {
    let place = report
        .netns
        .as_deref()
        .map_or(String::new(), |ns| format!(" in network namespace {ns}"));
    writeln!(
        out,
        "route for {}{place}: {}",
        report.dest, report.route_before
    )?;
    if report.unchanged {
        writeln!(out, "already as asked: nothing to change")?;
        return Ok(());
    }
    let verb = if report.dry_run {
        "would become"
    } else {
        "becomes"
    };
    writeln!(out, "{verb}: {}", report.route_after)?;
    if let (Some(ms), Some(cap)) = (report.rto_min_ms, report.delack_cap_us) {
        writeln!(
            out,
            "rto_min {ms} ms (locked): delayed ACKs capped at {:.1} ms, plus up to one jiffy of \
             timer slack",
            f64::from(cap) / 1000.0
        )?;
    }
    for cost in &report.costs {
        writeln!(out, "cost: {cost}")?;
    }
    writeln!(out, "open connections: {}", report.open_connections)?;
    if report.default_route && report.change != "undo" {
        writeln!(
            out,
            "default route: {} has no route of its own, so this changes the default route, for \
             every connection that leaves by it (confirm with --default-route, or add a route \
             for {} and fix that one)",
            report.dest, report.dest
        )?;
    }
    match (report.change == "undo", report.dry_run) {
        (true, _) => writeln!(
            out,
            "record: {} (removed once the route is back)",
            report.state_file
        )?,
        (false, false) => writeln!(out, "kept for --undo in {}", report.state_file)?,
        (false, true) => writeln!(
            out,
            "dry run: nothing changed, nothing written (a change keeps the route as it was in \
             {} for --undo)",
            report.state_file
        )?,
    }
    Ok(())
}

/// Routes rtnetlink cannot put back as they are.
fn refuse_unreplaceable(route: &RouteMessage, dest: IpAddr) -> anyhow::Result<()> {
    // rtm_to_fib6_config turns metric 0 into 1024 (IP6_RT_PRIO_USER): the routes addrconf
    // makes for the host's own IPv6 addresses (metric 0) cannot be recreated through
    // rtnetlink; a replace would look for a metric 1024 route instead.
    if route.header.address_family == AddressFamily::Inet6 && rtnetlink::priority(route) == 0 {
        bail!(
            "the route for {dest} is the kernel's route for a local IPv6 address (metric 0), \
             which rtnetlink cannot recreate (it reads metric 0 as 1024): reach the service \
             over IPv4, or fix the sockets (tcpstall fix PID --delack-max 5ms)"
        );
    }
    if rtnetlink::expires(route) != 0 {
        bail!(
            "the route for {dest} expires (learned from a router advertisement); replaced, it \
             would not: add a route of your own for {dest} and fix that one"
        );
    }
    Ok(())
}

fn lookup_error(err: std::io::Error, dest: IpAddr, netns: Option<&str>) -> anyhow::Error {
    let place = netns.map_or("this host".to_string(), |ns| {
        format!("network namespace {ns}")
    });
    match err.raw_os_error() {
        Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::ESRCH | libc::ENOENT) => {
            anyhow!("{place} has no route for {dest} (ip route get {dest} says the same)")
        }
        _ => anyhow!("cannot look up the route for {dest} in {place}: {err}"),
    }
}

fn replace_error(err: std::io::Error, route: &str) -> anyhow::Error {
    match err.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => anyhow!(
            "the kernel refused to change the route {route}: changing a route needs \
             CAP_NET_ADMIN in the namespace's user namespace (run as root)"
        ),
        Some(libc::ENOENT | libc::ESRCH) => anyhow!(
            "the route {route} went away before it could be replaced: run the command again"
        ),
        _ => anyhow!("the kernel refused to replace the route {route}: {err}"),
    }
}

/// Refuses, naming the capability, when tcpstall lacks it.
fn require_capability(cap: u32, name: &str, what: &str) -> anyhow::Result<()> {
    if crate::host::privilege::has_effective_cap(cap) == Some(false) {
        bail!(
            "tcpstall needs {name} to {what}: run it as root (sudo), or grant the capability \
             (setpriv --ambient-caps +{} ...); --dry-run shows the change without it",
            name.trim_start_matches("CAP_").to_ascii_lowercase()
        );
    }
    Ok(())
}

/// The namespace as a file to enter, with its name for messages; `None` for tcpstall's own.
fn open_namespace(namespace: &Namespace) -> anyhow::Result<(Option<NetNs>, Option<String>)> {
    let (label, path) = match namespace {
        Namespace::Own => return Ok((None, None)),
        Namespace::Named(name) => {
            if name.is_empty() || name.contains('/') || name == "." || name == ".." {
                bail!("'{name}' is not a network namespace name (as `ip netns list` shows one)");
            }
            (name.clone(), format!("/run/netns/{name}"))
        }
        Namespace::OfPid(pid) => (format!("of pid {pid}"), format!("/proc/{pid}/ns/net")),
    };
    require_capability(
        CAP_SYS_ADMIN,
        "CAP_SYS_ADMIN",
        "enter another network namespace",
    )?;
    let ns = NetNs::open(&label, &path).map_err(|err| match (namespace, err.kind()) {
        (Namespace::Named(name), std::io::ErrorKind::NotFound) => {
            anyhow!("no network namespace {name}: {path} is missing (ip netns list shows them)")
        }
        (Namespace::OfPid(pid), std::io::ErrorKind::NotFound) => {
            anyhow!("no process with pid {pid}: it does not exist or has exited")
        }
        _ => anyhow!("cannot open {path}: {err}"),
    })?;
    Ok((Some(ns), Some(label)))
}

/// Runs `work` with a route socket of the namespace, on a thread inside it (or here for
/// tcpstall's own), so that interface names are read there too.
fn in_namespace<T: Send>(
    namespace: Option<&NetNs>,
    work: impl FnOnce(&mut rtnetlink::RouteSocket) -> std::io::Result<T> + Send,
) -> anyhow::Result<T> {
    let run = || -> std::io::Result<T> {
        let mut socket = rtnetlink::RouteSocket::open()?;
        work(&mut socket)
    };
    match namespace {
        Some(ns) => ns.run(run),
        None => run(),
    }
    .context("rtnetlink")
}

/// The namespace option to repeat in a command line shown to the user.
fn namespace_option(namespace: &Namespace) -> String {
    match namespace {
        Namespace::Own => String::new(),
        Namespace::Named(name) => format!(" --netns {name}"),
        Namespace::OfPid(pid) => format!(" --netns-of {pid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback_route() -> RouteMessage {
        let mut socket = rtnetlink::RouteSocket::open().expect("route socket");
        let route = socket
            .matching_route(IpAddr::from([127, 0, 0, 1]))
            .expect("route");
        rtnetlink::as_request(&route)
    }

    #[test]
    fn rto_min_is_locked_and_quickack_set_once() {
        let route = loopback_route();
        let capped = with_rto_min(&with_rto_min(&route, 20), 5);
        assert_eq!(
            describe::metrics_text(rtnetlink::metrics(&capped)),
            " rto_min lock 5ms"
        );
        let quick = with_quickack(&with_quickack(&capped));
        assert_eq!(
            describe::metrics_text(rtnetlink::metrics(&quick)),
            " rto_min lock 5ms quickack 1"
        );
    }

    #[test]
    fn rto_min_range_follows_hz() {
        let facts = KernelFacts {
            release: "6.18.0".into(),
            hz: Some(250),
            tcp_autocorking: None,
            delack_min_ms: 40,
        };
        assert_eq!(
            plan_rto_min(Duration::from_millis(5), &facts).ok(),
            Some((5, 4000))
        );
        let low = plan_rto_min(Duration::from_millis(2), &facts).unwrap_err();
        assert!(low.to_string().contains("from 5 ms"), "{low}");
        assert!(plan_rto_min(Duration::from_millis(200), &facts).is_err());
        let old = KernelFacts {
            release: "6.6.30".into(),
            ..facts
        };
        let refused = plan_rto_min(Duration::from_millis(5), &old).unwrap_err();
        assert!(refused.to_string().contains("--quickack"), "{refused}");
    }
}
