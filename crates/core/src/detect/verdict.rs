//! Verdicts in people's terms: the peer's stack from its delayed-ACK timeout, the write pattern
//! of a stalled turn, the fixes in order of preference, and per-flow summaries.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use super::{KindCounts, StallEvent, StallKind};
use crate::flow::{ClientGuess, Endpoint, Flow, MssSource, PathSource, Side, Span, Timestamp};
use crate::tcp_rules;

/// The peer's TCP stack, guessed from how long its delayed ACK took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerStack {
    /// 40-50 ms: Linux (`TCP_DELACK_MIN` = HZ/25, plus one jiffy of rounding), FreeBSD ≥ 13.
    Linux,
    /// 90-180 ms: macOS (100 ms nominal, fires between 100 and 200 ms) or older BSD (100 ms).
    MacOsBsd,
    /// 180-260 ms: Windows (200 ms, `TcpDelAckTicks`), or macOS at its upper end.
    Windows,
    /// Outside the known timeouts (a custom `delack_max`, or a long RTT mis-estimated).
    Unknown,
    /// The delayed ACK's timeout names one system and the SYN's options another: a 40 ms
    /// delay from a SYN without TCP timestamps (Linux sends them by default, Windows does
    /// not), or a 200 ms one from a SYN with them (macOS at its upper end, or Windows with
    /// timestamps turned on). Linux or Windows; the fixes of both are given.
    Ambiguous,
}

impl PeerStack {
    /// Names the stack from the peer's ACK delay (path RTT removed) and its SYN's options
    /// together: `syn_timestamps` is whether the peer's SYN carried TCP timestamps, when seen;
    /// `syn_ttl` its IP TTL (0 when not seen). A TTL of the 128 class (65-128) is a Windows
    /// host's: a 40 ms delayed ACK from it is no Linux's.
    pub fn from_fingerprint(delay: Span, syn_timestamps: Option<bool>, syn_ttl: u8) -> PeerStack {
        match (PeerStack::from_ack_delay(delay), syn_timestamps) {
            // Linux sends timestamps by default and Windows does not; the converse proves
            // nothing: a Windows host may enable them, and Linux's delayed ACK stays near
            // max(srtt, 40 ms) (`tcp_delack_max`), never a short path's 200 ms.
            (PeerStack::Linux, Some(false)) => PeerStack::Ambiguous,
            (PeerStack::Linux, _) if super::cork::windows_ttl(syn_ttl) => PeerStack::Ambiguous,
            (stack, _) => stack,
        }
    }

    /// Names the stack from the peer's ACK delay alone (path RTT already removed).
    pub fn from_ack_delay(delay: Span) -> PeerStack {
        let ms = delay.as_millis();
        if tcp_rules::LINUX_ACK_DELAY_MS.contains(&ms) {
            PeerStack::Linux
        } else if tcp_rules::MACOS_ACK_DELAY_MS.contains(&ms) {
            PeerStack::MacOsBsd
        } else if tcp_rules::WINDOWS_ACK_DELAY_MS.contains(&ms) {
            PeerStack::Windows
        } else {
            PeerStack::Unknown
        }
    }

    /// Stable name for the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            PeerStack::Linux => "linux",
            PeerStack::MacOsBsd => "macos_bsd",
            PeerStack::Windows => "windows",
            PeerStack::Unknown => "unknown",
            PeerStack::Ambiguous => "ambiguous",
        }
    }

    /// Human description with the timeout it is known for.
    pub fn describe(self) -> &'static str {
        match self {
            PeerStack::Linux => "Linux-like (40 ms delayed ACK)",
            PeerStack::MacOsBsd => "macOS/BSD-like (100-200 ms delayed ACK)",
            PeerStack::Windows => "Windows-like (200 ms delayed ACK)",
            PeerStack::Unknown => "unknown stack",
            PeerStack::Ambiguous => {
                "Linux or Windows (its delayed ACK and its SYN's options or TTL disagree)"
            }
        }
    }
}

/// One sentence naming a flow side's writes paced by ACKs, from its aggregate.
pub fn explain_paced(held: Side, pacing: &super::Pacing) -> String {
    super::ack_paced::explain(held, pacing)
}

/// What a side sends in a turn: the client requests, the server responds.
pub(super) fn message(side: Side) -> &'static str {
    match side {
        Side::Client => "request",
        Side::Server => "response",
    }
}

/// Write sizes as `148 B, then 127 B`.
pub(super) fn sizes(writes: &[u32]) -> String {
    let mut s = String::new();
    for (i, w) in writes.iter().enumerate() {
        if i > 0 {
            s.push_str(if i + 1 == writes.len() {
                ", then "
            } else {
                ", "
            });
        }
        s.push_str(&format!("{w} B"));
    }
    s
}

/// One sentence naming the pattern in application terms.
pub fn explain(event: &StallEvent) -> String {
    (event.finding.kind.info().explain)(event)
}

/// The fix for the side that cannot change the writer Nagle holds: a lasting cap on the
/// delayed ACK of `acker`, the side that delays its ACK (`TCP_DELACK_MAX_US`,
/// `tcp_delack_max()`). Said as a condition: the ACKing host may be another machine, whose
/// kernel `tcpstall fix` checks for the option when it runs there.
pub fn delack_cap_fix(acker: &str) -> String {
    delack_cap(
        acker,
        &format!("PID --delack-max 5ms on the {acker}'s host (lasting; costs more ACKs)"),
    )
}

/// [`delack_cap_fix`] for an ACKing process found on this host: its pid, command and the
/// local port of its socket of the connection.
pub fn delack_cap_fix_here(acker: &str, pid: u32, command: &str, port: u16) -> String {
    delack_cap(
        acker,
        &format!(
            "{pid} --port {port} --delack-max 5ms (pid {pid}, {command}, on this host; lasting; \
             costs more ACKs)"
        ),
    )
}

/// The cap's sentence, `tcpstall fix ` followed by `rest`.
fn delack_cap(acker: &str, rest: &str) -> String {
    format!(
        "cap the {acker}'s delayed ACK on Linux with TCP_DELACK_MAX_US (6.13+): tcpstall fix \
         {rest}"
    )
}

/// `tcpstall fix --route WRITER --quickack`: quick ACKs on the route the ACKing host uses to
/// reach the held writer (RTAX_QUICKACK, `tcp_in_quickack_mode`), for every connection of that
/// route. `None` for `::1`, whose route is the kernel's metric 0 route that rtnetlink cannot
/// recreate (`fix --route` refuses it).
pub fn route_fix_command(writer: Option<IpAddr>) -> Option<String> {
    match writer {
        Some(a) if a.is_ipv6() && a.is_loopback() => None,
        Some(a) => Some(format!("tcpstall fix --route {a} --quickack")),
        None => Some("tcpstall fix --route <the writer's address> --quickack".to_string()),
    }
}

/// The fix for when only the ACKing side's host is in reach, neither program: quick ACKs on
/// the route it uses to reach `writer` ([`route_fix_command`]), or a delayed-ACK cap through
/// its `rto_min` (`tcp_delack_max`, 6.7+). `writer_addr` is the held writer's address, when
/// known.
pub fn route_fix(acker: &str, writer: &str, writer_addr: Option<IpAddr>) -> Option<String> {
    let command =
        route_fix_command(writer_addr)?.replace("the writer's", &format!("the {writer}'s"));
    Some(format!(
        "if neither end's program can be changed, on the {acker}'s host, for every connection \
         of its route to the {writer}: {command} (or --delack-max 5ms; more ACKs on that route)"
    ))
}

/// The address of the held side, the writer Nagle holds: where the ACKing host's route leads.
pub fn held_address(event: &StallEvent) -> IpAddr {
    match event.finding.held_side {
        Side::Client => event.client.addr,
        Side::Server => event.server.addr,
    }
}

/// The fixes for a kind, in order of preference, for the side that was held; `example` is a
/// stall of that kind, for the ACKing side's stack as its delay named it and the writer's
/// address.
pub fn fixes(kind: StallKind, held: Side, example: Option<&StallEvent>) -> Vec<String> {
    (kind.info().fixes)(held, example)
}

/// A stall pattern of one flow: every event of one kind holding one side.
#[derive(Debug, Clone)]
pub struct Pattern<'a> {
    /// The cause.
    pub kind: StallKind,
    /// The side whose data waited.
    pub held_side: Side,
    /// The latest event, whose writes and delay name the pattern: the steady state, after a
    /// new connection's quick-ACK start.
    pub example: &'a StallEvent,
    /// How many events.
    pub count: u64,
}

/// Events grouped by [`StallEvent::flow_id`], each group in capture order.
pub fn events_by_flow(events: &[StallEvent]) -> FxHashMap<u64, Vec<&StallEvent>> {
    let mut m: FxHashMap<u64, Vec<&StallEvent>> = FxHashMap::default();
    for e in events {
        m.entry(e.flow_id).or_default().push(e);
    }
    m
}

/// The distinct stall patterns among one flow's events, in order of first appearance (minor
/// Nagle holds left out).
pub fn patterns<'a>(flow_events: &[&'a StallEvent]) -> Vec<Pattern<'a>> {
    let mut found: Vec<Pattern<'a>> = Vec::new();
    for e in flow_events.iter().filter(|e| e.finding.kind.is_reported()) {
        let (kind, held_side) = (e.finding.kind, e.finding.held_side);
        match found
            .iter_mut()
            .find(|p| p.kind == kind && p.held_side == held_side)
        {
            Some(p) => {
                p.count += 1;
                p.example = e;
            }
            None => found.push(Pattern {
                kind,
                held_side,
                example: e,
                count: 1,
            }),
        }
    }
    found
}

/// One flow, summarised when it is retired. Serialisable for a compact encoding that reads
/// back (a long capture's retired flows kept on disk, not in memory); the JSON report writes
/// its own keys.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct FlowSummary {
    /// Position of the flow's first segment among all segments analysed (0-based).
    pub id: u64,
    /// Connection initiator.
    pub client: Endpoint,
    /// Acceptor.
    pub server: Endpoint,
    /// How the client was identified.
    pub client_guess: ClientGuess,
    /// Packets from client and server.
    pub packets: u64,
    /// New payload bytes client → server and server → client.
    pub bytes: [u64; 2],
    /// Retransmitted segments, both directions.
    pub retransmissions: u64,
    /// Retransmissions that were tail-loss probes (RFC 8985 §7): loss recovery of about two
    /// round trips, not counted as `rto` stalls.
    pub loss_probes: u64,
    /// Sequence gaps (data the capture missed), both directions.
    pub capture_gaps: u64,
    /// Request/response turns.
    pub requests: u64,
    /// Events per kind.
    #[serde(with = "super::counts_as_array")]
    pub counts: KindCounts,
    /// Sum of stall delays.
    pub time_lost_ns: Span,
    /// Longest stall.
    pub worst_stall_ns: Span,
    /// Turn latency percentiles (p50, p99, max), microseconds, when turns were answered.
    pub latency_us: Option<(u32, u32, u32)>,
    /// MSS client → server and server → client.
    pub mss: [u32; 2],
    /// Where each of `mss` comes from.
    pub mss_source: [MssSource; 2],
    /// Round trip capture point → client host → capture point, and the same for the server.
    pub near_rtt_ns: [Option<Span>; 2],
    /// Where `near_rtt_ns` comes from.
    pub path_source: PathSource,
    /// A later part of a connection retired before (idle, or closed) that a segment rejoined:
    /// same `id`; a consumer counting connections counts it once.
    pub continued: bool,
    /// Capture time of the first and the last packet.
    pub span_ns: (Timestamp, Timestamp),
    /// Each answered turn's start and latency (µs), in order; empty unless
    /// [`DetectorConfig::keep_turns`](super::DetectorConfig::keep_turns) asked for them.
    pub turns: Vec<(Timestamp, u32)>,
    /// Client's and server's writes paced by ACKs ([`StallKind::NagleAckPaced`]), when
    /// sustained ([`FlowSummary::paced`]); boxed, as few flows have any.
    pub pacing: Option<Box<[Option<super::Pacing>; 2]>>,
}

impl FlowSummary {
    /// Client's and server's writes paced by ACKs ([`StallKind::NagleAckPaced`]), when
    /// sustained.
    pub fn paced(&self) -> [Option<super::Pacing>; 2] {
        self.pacing.as_deref().copied().unwrap_or([None, None])
    }

    /// `client-server`, the flow's name in reports.
    pub fn label(&self) -> String {
        let mut label = String::with_capacity(48);
        self.client.push_to(&mut label);
        label.push('-');
        self.server.push_to(&mut label);
        label
    }

    /// Where the capture was taken, from the two legs of the path: `loopback`, `client host`
    /// or `server host` (a leg under 200 µs), `near client` or `near server` (a leg under a
    /// tenth of the round trip: a tap or router next to that host), `near both` (both legs
    /// under 200 µs between addresses that are not loopback's), `mid-path`, or `unknown`
    /// (a leg not timed: no handshake, or one direction missing).
    pub fn capture_position(&self) -> &'static str {
        const NEAR: Span = Span::from_micros(200);
        match self.near_rtt_ns {
            [Some(c), Some(s)] if c < NEAR && s < NEAR && self.loopback() => "loopback",
            // Both hosts within 200 µs of the capture point, not on loopback: one host's
            // bridge or containers, a LAN, or a generated trace.
            [Some(c), Some(s)] if c < NEAR && s < NEAR => "near both",
            [Some(c), Some(_)] if c < NEAR => "client host",
            [Some(_), Some(s)] if s < NEAR => "server host",
            [Some(c), Some(s)] if c * 10 < c + s => "near client",
            [Some(c), Some(s)] if s * 10 < c + s => "near server",
            [Some(_), Some(_)] => "mid-path",
            _ => "unknown",
        }
    }

    /// Both addresses are loopback addresses (127.0.0.0/8, ::1).
    fn loopback(&self) -> bool {
        self.client.addr.is_loopback() && self.server.addr.is_loopback()
    }

    /// Where the capture was taken, with the legs it is judged from, for people: `near client
    /// (0.7 + 71.7 ms, handshake)`.
    pub fn capture_point(&self) -> String {
        let leg =
            |l: Option<Span>| l.map_or("?".to_string(), |l| format!("{:.1}", l.as_millis_f64()));
        format!(
            "{} ({} + {} ms, {})",
            self.capture_position(),
            leg(self.near_rtt_ns[0]),
            leg(self.near_rtt_ns[1]),
            self.path_source.name()
        )
    }
}

/// Joins the parts of one connection (flows sorted by id; a connection rejoined after it
/// retired, idle or closed, comes back with its id) into one summary.
pub fn join_parts(flows: &mut Vec<FlowSummary>) {
    if flows.windows(2).all(|w| w[0].id != w[1].id) {
        return;
    }
    let mut joined: Vec<FlowSummary> = Vec::with_capacity(flows.len());
    for f in flows.drain(..) {
        match joined.last_mut() {
            Some(last) if last.id == f.id => last.absorb(f),
            _ => joined.push(f),
        }
    }
    *flows = joined;
}

impl FlowSummary {
    /// Adds a later part of the same connection (same [`FlowSummary::id`], retired after
    /// this one).
    pub fn absorb(&mut self, later: FlowSummary) {
        self.packets += later.packets;
        self.bytes[0] += later.bytes[0];
        self.bytes[1] += later.bytes[1];
        self.retransmissions += later.retransmissions;
        self.loss_probes += later.loss_probes;
        self.capture_gaps += later.capture_gaps;
        self.requests += later.requests;
        self.counts.merge(&later.counts);
        self.time_lost_ns += later.time_lost_ns;
        self.worst_stall_ns = self.worst_stall_ns.max(later.worst_stall_ns);
        self.latency_us = self.latency_us.or(later.latency_us);
        for i in 0..2 {
            self.near_rtt_ns[i] = self.near_rtt_ns[i].or(later.near_rtt_ns[i]);
        }
        self.span_ns = (
            self.span_ns.0.min(later.span_ns.0),
            self.span_ns.1.max(later.span_ns.1),
        );
        self.turns.extend(later.turns);
        match (&mut self.pacing, later.pacing) {
            (Some(mine), Some(theirs)) => {
                for (mine, theirs) in mine.iter_mut().zip(*theirs) {
                    match (mine.as_mut(), theirs) {
                        (Some(m), Some(t)) => m.absorb(&t),
                        (None, t) => *mine = t,
                        _ => {}
                    }
                }
            }
            (mine @ None, theirs) => *mine = theirs,
            _ => {}
        }
    }
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[u32], p: f64) -> u32 {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Summarises a flow that leaves the table.
pub fn summarise(
    mut flow: Flow,
    counts: &KindCounts,
    lost: Span,
    worst: Span,
    keep_turns: bool,
) -> FlowSummary {
    flow.turns.finish();
    let turns = if keep_turns {
        let t = &flow.turns;
        t.starts
            .iter()
            .copied()
            .zip(t.latencies_us.iter().copied())
            .collect()
    } else {
        Vec::new()
    };
    let lat = &mut flow.turns.latencies_us;
    lat.sort_unstable();
    let latency_us = (!lat.is_empty()).then(|| {
        (
            percentile(lat, 0.50),
            percentile(lat, 0.99),
            lat[lat.len() - 1],
        )
    });
    let [c, s] = &flow.dirs;
    FlowSummary {
        id: flow.id,
        client: flow.client,
        server: flow.server,
        client_guess: flow.client_guess,
        packets: c.packets + s.packets,
        bytes: [c.bytes, s.bytes],
        retransmissions: c.retransmissions + s.retransmissions,
        loss_probes: c.loss_probes + s.loss_probes,
        capture_gaps: c.gaps + s.gaps,
        requests: flow.turns.requests,
        counts: *counts,
        time_lost_ns: lost,
        worst_stall_ns: worst,
        latency_us,
        mss: [c.mss, s.mss],
        mss_source: [c.mss_source, s.mss_source],
        near_rtt_ns: [c.near_rtt, s.near_rtt],
        path_source: flow.path_source(),
        continued: flow.continued,
        span_ns: (flow.first_seen, flow.last_seen()),
        turns,
        pacing: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_from_delays() {
        let ms = Span::from_millis;
        assert_eq!(PeerStack::from_ack_delay(ms(41)), PeerStack::Linux);
        assert_eq!(PeerStack::from_ack_delay(ms(120)), PeerStack::MacOsBsd);
        assert_eq!(PeerStack::from_ack_delay(ms(200)), PeerStack::Windows);
        assert_eq!(PeerStack::from_ack_delay(ms(900)), PeerStack::Unknown);
    }

    /// A 40 ms delayed ACK from a host with a TTL of the 128 class (Windows) is not
    /// Linux-like; from one of the 64 class it is.
    #[test]
    fn windows_ttl_with_a_40ms_delay_is_not_linux() {
        let ms = Span::from_millis;
        let stack = |ttl| PeerStack::from_fingerprint(ms(41), Some(true), ttl);
        assert_eq!(stack(128), PeerStack::Ambiguous);
        assert_eq!(stack(120), PeerStack::Ambiguous);
        assert_eq!(stack(64), PeerStack::Linux);
        assert_eq!(stack(255), PeerStack::Linux);
        assert_eq!(stack(0), PeerStack::Linux);
    }

    #[test]
    fn percentile_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&[7], 0.99), 7);
    }
}
