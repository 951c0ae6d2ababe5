//! From the stalls of a run to what the user needs: the verdict, who holds the write (the
//! culprit), one stalled turn as evidence, at which hop the held write sits, and what to change.

use crate::detect::verdict::{explain, fixes, held_address};
use crate::detect::{hold_fixes_for, Holder, KindCounts, PeerStack, StallKind};
use crate::flow::Side;
use crate::tcp_rules;
use crate::terminal::ASKS_FIRST;

use super::captured::{Captured, WireSegment};
use super::client::RunLog;
use super::stalls::Stall;
use super::upstream::{Process, Upstream};
pub use crate::report::model::probe::{Culprit, Diagnosis, EvidenceLine, Source};

/// Most segments shown for one stalled turn.
const EVIDENCE_LINES: usize = 12;

impl super::ProbeReport {
    /// The run's verdict: `error` when the server answered with HTTP error statuses, however
    /// it wrote them (a stall found is then the stall of its error page, not of the answer
    /// the user asked for, and the run exits 2), else the diagnosis's.
    pub fn verdict(&self) -> &'static str {
        if self.http_errors.is_empty() {
            self.diagnosis.verdict()
        } else {
            "error"
        }
    }
}

impl Diagnosis {
    /// `stall` (a hold seen), `undecided` (a timer's shape behind a server the probe cannot
    /// see into), `slow` (slow answers, no hold seen anywhere: the server's own time) or
    /// `clean`.
    pub fn verdict(&self) -> &'static str {
        let queue = self.listen_queue.as_ref().is_some_and(|q| q.blamed);
        let upstream = self.upstream.as_ref().is_some_and(|u| u.held.is_some());
        if self.counts.stalls() > 0 || upstream || queue {
            "stall"
        } else if self.undecided.is_some() {
            "undecided"
        } else if self.server_time.is_some() {
            "slow"
        } else {
            "clean"
        }
    }

    /// A wait in a timer's shape behind the server, with no hold seen and no way to look:
    /// `undecided`, the suspect named, and what would settle it in place of a fix.
    pub fn suspect_upstream(&mut self, upstream: Upstream, settle: String) {
        self.culprit = None;
        self.explanation = Some(format!(
            "{}; no hold is seen: the probe cannot see behind the server, so the wait may be \
             a write held there for a delayed ACK, or the server's own time",
            upstream.timer.as_ref().map_or_else(
                || "the answers waited".to_string(),
                super::upstream::TimerMode::describe
            )
        ));
        self.hop = Some(upstream.hop());
        self.advice = vec![settle.clone()];
        self.undecided = Some(settle);
        self.upstream = Some(upstream);
    }

    /// Puts the blame behind the server: the culprit, the explanation, the hop and the advice
    /// all say so (an own-connection stall the detector named stays counted and shown as the
    /// evidence of how the answer reached us).
    pub fn blame_upstream(&mut self, upstream: Upstream) {
        self.culprit = Some(Culprit::Upstream);
        self.explanation = Some(upstream.explain(self.counts.stalls() > 0));
        self.hop = Some(upstream.hop());
        self.advice = upstream.advice();
        self.upstream = Some(upstream);
    }
}

/// Diagnoses `stalls` of the run `log`; `captured` holds the segment log when there was a
/// capture.
/// `server` is the process listening on the target's port, when it is on this host.
pub fn diagnose(
    stalls: Vec<Stall>,
    log: &RunLog,
    source: Source,
    captured: Option<&Captured>,
    server: Option<&Process>,
) -> Diagnosis {
    let counts: KindCounts = stalls.iter().map(|s| s.kind).collect();
    let example = dominant(&stalls);
    let lost_ms = example.as_ref().map_or(0.0, |e| {
        stalls
            .iter()
            .filter(|s| s.kind == e.kind && s.held == e.held)
            .map(|s| s.delay_ns as f64 / 1e6)
            .sum()
    });
    let culprit = example
        .as_ref()
        .and_then(|s| culprit_of(s.kind, s.held))
        .map(Culprit::from);
    let explanation = example.as_ref().map(|s| match &s.event {
        // A capture sees the server's segments, not its write calls.
        Some(event) if s.held == Side::Server => segments_not_writes(&explain(event)),
        Some(event) => explain(event),
        None => explain_from_socket(s),
    });
    let evidence = match (&example, captured) {
        (Some(stall), Some(cap)) => wire_evidence(stall, &cap.segments),
        (Some(stall), None) => socket_evidence(stall, log),
        _ => Vec::new(),
    };
    let hop = match (&example, captured) {
        (Some(stall), Some(cap)) => hop_from_capture(stall, &cap.segments, log, server),
        (Some(_), None) => Some(format!(
            "without a capture the probe cannot see ACKs, so it cannot place the held write; \
             {}",
            super::capture::TO_PLACE_THE_HOLD
        )),
        (None, Some(cap)) => upstream_pauses(&cap.segments),
        (None, None) => None,
    };
    let mut advice = example.as_ref().map(stall_fixes).unwrap_or_default();
    // The server's process on this host: the fixes meant for the server's host name its pid,
    // the words about it after the whole command so that the command pastes as it stands.
    if let Some(p) = server {
        for line in advice.iter_mut() {
            let Some((head, rest)) = line.split_once("tcpstall fix PID") else {
                continue;
            };
            let Some((options, tail)) = rest.split_once(" on the server's host") else {
                continue;
            };
            *line = format!(
                "{head}tcpstall fix {}{options} (pid {}, {}; add --yes when not at a terminal) \
                 on the server's host{tail}",
                p.pid, p.pid, p.command
            );
        }
    }
    // The server's address is known: the route fix names it (not ::1, whose route
    // `fix --route` cannot recreate, and whose placeholder then stays).
    if let Some(ip) = log
        .connections
        .iter()
        .find_map(|c| c.remote)
        .map(|r| r.ip())
        .filter(|ip| *ip != std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST))
    {
        for line in &mut advice {
            *line = line.replace("<the server's address>", &ip.to_string());
        }
    }
    // The server's own Nagle hold, and its process on this host: the live fix names it.
    let nagle = |s: &Stall| matches!(s.kind, StallKind::NagleDelayedAck | StallKind::NagleMinor);
    if let (Some(p), Some(s)) = (server, example.as_ref()) {
        if s.held == Side::Server && nagle(s) {
            let port = log
                .connections
                .iter()
                .find_map(|c| c.remote)
                .map_or(0, |r| r.port());
            let live = format!(
                "on this host, live: tcpstall fix {} --port {port} (pid {}, {}; {ASKS_FIRST})",
                p.pid, p.pid, p.command
            );
            // Right after the TCP_NODELAY advice: the program's own switch for it, then the
            // live fix.
            let mut at = advice
                .iter()
                .position(|a| a.contains("TCP_NODELAY"))
                .map_or(advice.len(), |i| i + 1);
            if let Some(runtime) = &p.runtime {
                advice.insert(at, runtime.advice());
                at += 1;
            }
            advice.insert(at, live);
        }
    }
    Diagnosis {
        source,
        counts,
        example,
        culprit,
        explanation,
        evidence,
        hop,
        advice,
        upstream: None,
        listen_queue: None,
        undecided: None,
        server_time: None,
        causes: Vec::new(),
        lost_ms,
        runtime: server.and_then(|p| p.runtime.clone()),
        confirmation_not_run: false,
    }
}

/// The side to change for a stall of `kind` holding `held`: the writer for Nagle and cork
/// holds, the reader that let its window close for a zero window, nobody for losses.
fn culprit_of(kind: StallKind, held: Side) -> Option<Side> {
    match kind.info().holder {
        Holder::Nagle | Holder::Cork => Some(held),
        Holder::PeerWindow => Some(held.peer()),
        Holder::Loss => None,
    }
}

/// The latest stall of the commonest (kind, held side): the steady state of the run.
fn dominant(stalls: &[Stall]) -> Option<Stall> {
    let real: Vec<&Stall> = stalls.iter().filter(|s| s.kind.is_stall()).collect();
    let count = |s: &Stall| {
        real.iter()
            .filter(|o| o.kind == s.kind && o.held == s.held)
            .count()
    };
    real.iter()
        .enumerate()
        .max_by_key(|(i, s)| (count(s), *i))
        .map(|(_, s)| (*s).clone())
}

/// "in 2 writes (17 B, then 192 B)" said of segments a capture saw: "in 2 segments (…)".
fn segments_not_writes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(" writes (") {
        let (head, tail) = rest.split_at(at);
        let counted = head
            .rsplit(' ')
            .next()
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        out.push_str(head);
        out.push_str(if counted { " segments (" } else { " writes (" });
        rest = &tail[" writes (".len()..];
    }
    out.push_str(rest);
    out.replace(
        "server writes the response in",
        "server sends the response in",
    )
}

/// The socket-only sentence for a stall.
fn explain_from_socket(stall: &Stall) -> String {
    let ms = stall.delay_ns as f64 / 1e6;
    // The socket alone finds Nagle holds and whole late replies (`stalls::from_socket`).
    match (stall.kind.info().holder, stall.held) {
        (Holder::Nagle, Side::Client) => format!(
            "our request's last write was held by the kernel (TCP_INFO: bytes not sent) and the \
             answer took {ms:.1} ms: Nagle held it until the server's delayed ACK"
        ),
        (Holder::Nagle, Side::Server) => format!(
            "the reply reached our socket in parts, the last {ms:.1} ms after the one before: \
             the server writes it in several writes and the last waited, for our delayed ACK as \
             far as the socket can tell"
        ),
        (Holder::Cork | Holder::Loss | Holder::PeerWindow, _) => format!(
            "the whole reply came {ms:.1} ms after the request: the server's TCP_CORK/MSG_MORE \
             timer (~200 ms) or as long spent by the server"
        ),
    }
}

/// The segments of the stalled turn, from the request that started it to the released
/// segment.
fn wire_evidence(stall: &Stall, segments: &[WireSegment]) -> Vec<EvidenceLine> {
    let conn: Vec<&WireSegment> = segments
        .iter()
        .filter(|s| s.local_port == stall.local_port)
        .collect();
    let Some(release) = conn
        .iter()
        .rposition(|s| s.ts_ns == stall.ts_ns && s.payload > 0)
    else {
        return Vec::new();
    };
    // The turn starts after the previous reply (data from the server before our request;
    // before the held write itself when we are the held side), leading pure ACKs skipped.
    let last_before = |end: usize, outgoing: bool| {
        conn[..end]
            .iter()
            .rposition(|s| s.payload > 0 && s.outgoing == outgoing)
    };
    let request_end = match stall.held {
        Side::Server => last_before(release, true).unwrap_or(0),
        Side::Client => release,
    };
    let mut start = last_before(request_end, false).map_or(0, |p| p + 1);
    while start < release && conn[start].payload == 0 {
        start += 1;
    }
    let start = start.max((release + 1).saturating_sub(EVIDENCE_LINES));
    let t0 = conn[start].ts_ns;
    conn[start..=release]
        .iter()
        .enumerate()
        .map(|(i, s)| EvidenceLine {
            offset_ms: s.ts_ns.saturating_sub(t0) as f64 / 1e6,
            from: if s.outgoing {
                Side::Client
            } else {
                Side::Server
            },
            bytes: s.payload,
            what: if start + i == release {
                "released (the held write)".to_string()
            } else if s.payload == 0 {
                "ACK".to_string()
            } else {
                "data".to_string()
            },
        })
        .collect()
}

/// The stalled turn as the socket saw it: our writes and the reads of the reply.
fn socket_evidence(stall: &Stall, log: &RunLog) -> Vec<EvidenceLine> {
    let Some(turn) = log.turns.iter().find(|t| {
        log.connections.get(t.connection).map(|c| c.local_port) == Some(stall.local_port)
            && (t.sent.iter().any(|s| s.ts_ns == stall.ts_ns)
                || t.arrivals.iter().any(|a| a.ts_ns == stall.ts_ns))
    }) else {
        return Vec::new();
    };
    let t0 = turn.start_ns;
    let mut lines: Vec<(u64, EvidenceLine)> = turn
        .sent
        .iter()
        .map(|s| {
            let what = match s.held {
                Some(held) if held > 0 => format!("write; {held} B still unsent after it"),
                _ => "write".to_string(),
            };
            (s.ts_ns, Side::Client, s.bytes, what)
        })
        .chain(turn.arrivals.iter().map(|a| {
            (
                a.ts_ns,
                Side::Server,
                a.bytes,
                super::socket::READ_STAMP.to_string(),
            )
        }))
        .map(|(ts, from, bytes, what)| {
            (
                ts,
                EvidenceLine {
                    offset_ms: ts.saturating_sub(t0) as f64 / 1e6,
                    from,
                    bytes: u32::try_from(bytes).unwrap_or(u32::MAX),
                    what,
                },
            )
        })
        .collect();
    lines.sort_by_key(|(ts, _)| *ts);
    lines
        .into_iter()
        .take(EVIDENCE_LINES)
        .map(|(_, l)| l)
        .collect()
}

/// The connection's handshake round trip as the capture saw it: our SYN to the SYN-ACK.
fn handshake_rtt(conn: &[&WireSegment]) -> Option<u64> {
    use crate::decode::flags::{ACK, SYN};
    let syn = conn
        .iter()
        .find(|s| s.outgoing && s.flags & SYN != 0 && s.flags & ACK == 0)?;
    let syn_ack = conn
        .iter()
        .find(|s| !s.outgoing && s.flags & (SYN | ACK) == SYN | ACK)?;
    Some(syn_ack.ts_ns.saturating_sub(syn.ts_ns))
}

/// Where the held write sits, from the gap between our ACK and the release against the
/// handshake's round trip.
fn hop_from_capture(
    stall: &Stall,
    segments: &[WireSegment],
    log: &RunLog,
    server: Option<&Process>,
) -> Option<String> {
    let conn: Vec<&WireSegment> = segments
        .iter()
        .filter(|s| s.local_port == stall.local_port)
        .collect();
    let rtt = handshake_rtt(&conn);
    let rtt_text = rtt.map_or("?".to_string(), |r| format!("{:.3} ms", r as f64 / 1e6));
    let remote = log
        .connections
        .iter()
        .find(|c| c.local_port == stall.local_port)
        .and_then(|c| c.remote);
    let on_this_host = remote.is_some_and(|r| r.ip().is_loopback());
    let port = remote.map_or(0, |r| r.port());
    if stall.held == Side::Client {
        return Some(
            "the held write is the probe's own: this host, this process (its request pattern)"
                .to_string(),
        );
    }
    if stall.kind.info().holder != Holder::Nagle {
        return None;
    }
    let release = conn
        .iter()
        .rposition(|s| s.ts_ns == stall.ts_ns && s.payload > 0)?;
    let our_ack = conn[..release]
        .iter()
        .rev()
        .find(|s| s.outgoing && s.payload == 0)?;
    let gap = stall.ts_ns.saturating_sub(our_ack.ts_ns);
    let gap_text = format!("{:.3} ms", gap as f64 / 1e6);
    // The release answers our ACK within a round trip (plus a little scheduling) when the
    // holder is the far end of this TCP connection.
    let within_rtt = rtt.is_some_and(|r| gap <= 2 * r + 1_000_000);
    Some(if !within_rtt {
        format!(
            "the released segment came {gap_text} after our ACK, more than the handshake's \
             round trip ({rtt_text}): the far end did not send it in answer to our ACK alone, \
             so the hold may sit behind it (a proxy's upstream connection)"
        )
    } else if on_this_host {
        let (who, pid) = match server {
            Some(p) => (
                format!("pid {} ({}), listening on port {port},", p.pid, p.command),
                p.pid.to_string(),
            ),
            None => (
                format!("the process listening on port {port}"),
                "PID".to_string(),
            ),
        };
        format!(
            "the held write is on this host (loopback): {who} wrote it; its segment left \
             {gap_text} after our ACK reached it. `tcpstall sockets {pid}` shows its sockets' \
             TCP_NODELAY and `tcpstall fix {pid} --port {port}` sets it live (add --yes when \
             not at a terminal)"
        )
    } else {
        format!(
            "the released segment came {gap_text} after our ACK left, within the handshake's \
             round trip ({rtt_text}): the write was held at the far end of this TCP connection, \
             the server or a proxy/load balancer that ends TCP in front of it. The capture cannot \
             see past that hop; `tcpstall watch` on that host names the process"
        )
    })
}

/// Replies that paused a delayed-ACK time in the middle with no ACK of ours releasing them
/// (the detector found nothing): the wait is behind the server.
fn upstream_pauses(segments: &[WireSegment]) -> Option<String> {
    let threshold = tcp_rules::nanos(tcp_rules::STALL_THRESHOLD);
    let mut pauses = 0;
    let mut last_in: std::collections::HashMap<u16, u64> = Default::default();
    for s in segments.iter().filter(|s| s.payload > 0) {
        if s.outgoing {
            // A new request: the next reply starts afresh.
            last_in.remove(&s.local_port);
            continue;
        }
        if let Some(prev) = last_in.get(&s.local_port) {
            if s.ts_ns.saturating_sub(*prev) >= threshold {
                pauses += 1;
            }
        }
        last_in.insert(s.local_port, s.ts_ns);
    }
    (pauses > 0).then(|| {
        format!(
            "{pauses} replies paused at least {} ms in the middle with no ACK of ours releasing \
             them: the wait is behind the server (a proxy waiting on its upstream connection, \
             where that hop's delayed ACK may release a held write, or the server pausing \
             between writes); `tcpstall watch` on that host sees that hop",
            tcp_rules::STALL_THRESHOLD.as_millis()
        )
    })
}

/// The fixes of `stall`. A server's Nagle hold waits for the probe's own delayed ACK, so the
/// client's switches for ACKing at once are those of the system the probe runs on. Named
/// directly, not through the event's ACKing stack: where the probe cannot capture (Windows,
/// macOS) its evidence is its socket's, and there is no event.
fn stall_fixes(stall: &Stall) -> Vec<String> {
    let nagle = matches!(
        stall.kind,
        StallKind::NagleDelayedAck | StallKind::NagleMinor
    );
    if stall.held == Side::Server && nagle && super::this_host::STACK != PeerStack::Linux {
        let delayed = stall.kind == StallKind::NagleDelayedAck;
        let address = stall.event.as_ref().map(held_address);
        return hold_fixes_for(
            Side::Server,
            Some(super::this_host::STACK),
            address,
            delayed,
        );
    }
    fixes(stall.kind, stall.held, stall.event.as_ref())
}

#[cfg(test)]
mod tests {
    use super::segments_not_writes;

    #[test]
    fn a_capture_counts_segments_not_write_calls() {
        assert_eq!(
            segments_not_writes(
                "the server writes the response in 2 writes (17 B, then 192 B); the last waits"
            ),
            "the server sends the response in 2 segments (17 B, then 192 B); the last waits"
        );
        assert_eq!(segments_not_writes("its writes (all)"), "its writes (all)");
    }
}
