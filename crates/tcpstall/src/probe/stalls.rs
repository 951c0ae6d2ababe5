//! The stalls of a run, from either source of evidence, in one shape: the detector's events
//! when the probe captured its traffic, or what its own socket saw (kernel receive
//! timestamps, TCP_INFO after each write) when it could not.

use crate::detect::{hold_kind, HoldEnd, StallEvent, StallKind};
use crate::flow::Side;
use crate::units::Span;

use super::client::{RunLog, Turn};
use super::socket::Sent;

pub use crate::report::model::probe::Stall;

/// The detector's events, for the connections of `log` only. A "cork timer" that is a whole
/// answer in one segment after a wait shows no hold (no part of the answer left before the
/// rest waited): a server's own time looks the same, so it is no stall claim here.
pub fn from_capture(events: &[StallEvent], log: &RunLog) -> Vec<Stall> {
    events
        .iter()
        .filter(|e| {
            log.connections
                .iter()
                .any(|c| c.local_port == e.client.port)
        })
        .filter(|e| e.finding.kind != StallKind::CorkTimer || e.writes.len() > 1)
        .map(|e| Stall {
            kind: e.finding.kind,
            held: e.finding.held_side,
            delay_ns: e.finding.delay_ns.as_nanos(),
            local_port: e.client.port,
            ts_ns: e.ts_ns.as_nanos(),
            event: Some(e.clone()),
        })
        .collect()
}

/// `stalls` split into those inside a timed request's window (its first write to the last
/// byte of its reply, on the same connection), which make the verdict, and the rest: a hold
/// in a TLS handshake, a setup exchange or a connection's close is no answer to a request,
/// so it is never the server's stall; the report names these apart.
pub fn split_by_request(stalls: Vec<Stall>, log: &RunLog) -> (Vec<Stall>, Vec<Stall>) {
    stalls
        .into_iter()
        .partition(|s| position(s, log) == Position::InRequest)
}

/// Where a stall falls among the timed requests of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Inside a timed request's window.
    InRequest,
    /// Before the connection's first timed request: its TCP or TLS handshake, a setup
    /// exchange.
    BeforeRequests,
    /// Between two timed requests.
    BetweenRequests,
    /// After the connection's last timed request (its close), or on a connection that
    /// answered none.
    AfterRequests,
}

/// Where `stall` falls among the timed requests of its connection in `log`.
pub fn position(stall: &Stall, log: &RunLog) -> Position {
    let windows = log.requests().filter(|t| {
        log.connections
            .get(t.connection)
            .is_some_and(|c| c.local_port == stall.local_port)
    });
    let (mut before, mut after) = (false, false);
    for turn in windows {
        let end = turn
            .start_ns
            .saturating_add(u64::try_from(turn.latency.as_nanos()).unwrap_or(u64::MAX));
        if (turn.start_ns..=end).contains(&stall.ts_ns) {
            return Position::InRequest;
        }
        before |= stall.ts_ns < turn.start_ns;
        after |= stall.ts_ns > end;
    }
    match (before, after) {
        (true, true) => Position::BetweenRequests,
        (true, false) => Position::BeforeRequests,
        _ => Position::AfterRequests,
    }
}

/// Writes of a timed request after its first (a request written in parts, a pipelined
/// batch): those Nagle may hold.
pub fn later_writes(log: &RunLog) -> impl Iterator<Item = &Sent> {
    log.requests().flat_map(|t| t.sent.iter().skip(1))
}

/// Whether the socket told nothing of what the kernel kept back of the probe's own later
/// writes (no TCP_INFO: Windows, macOS), when there were any.
pub fn own_holds_unknown(log: &RunLog) -> bool {
    later_writes(log).next().is_some() && later_writes(log).all(|s| s.held.is_none())
}

/// The note of a run that wrote its requests in parts and [`own_holds_unknown`] is true of.
pub const OWN_HOLDS_UNKNOWN_NOTE: &str = "the probe wrote each request in parts, and this \
                                          system's socket does not tell whether the kernel held \
                                          the later ones (no TCP_INFO): a Nagle hold of its own \
                                          write, released by the server's delayed ACK, looks \
                                          here like time the server took";

/// What the socket alone shows, turn by turn (see [`from_turn`]).
pub fn from_socket(log: &RunLog) -> Vec<Stall> {
    log.turns
        .iter()
        .filter_map(|turn| {
            let port = log.connections.get(turn.connection)?.local_port;
            from_turn(turn, port)
        })
        .collect()
}

/// A turn's stall as the probe's own socket can judge it, weaker than a capture:
/// - our request's later write was still unsent right after it (`tcpi_notsent_bytes` > 0)
///   and the turn took a delayed-ACK time: Nagle held our own write (`tcp_nagle_check`);
/// - the reply reached the socket in parts, the last at least a delayed-ACK time after the
///   one before: the server's last write waited, for our delayed ACK as far as the socket
///   can tell (a server pausing between its writes looks the same).
///
/// A whole reply that comes late shows no hold: it is the server's own time as far as the
/// socket can see (the report says `slow`), whatever timer its wait resembles.
pub fn from_turn(turn: &Turn, local_port: u16) -> Option<Stall> {
    let latency = turn.latency.as_nanos() as u64;
    let stall = |kind, held, delay_ns, ts_ns| Stall {
        kind,
        held,
        delay_ns,
        local_port,
        ts_ns,
        event: None,
    };
    let last_write = turn.sent.last()?;
    let our_hold = turn
        .sent
        .iter()
        .skip(1)
        .any(|s| s.held.is_some_and(|b| b > 0));
    // The detector's rule (detect::hold_kind): the socket cannot tell a delayed ACK from a
    // lost one, nor time the path apart, so every wait is taken as the ACK's; a minor hold is
    // below what a turn's timing can show.
    let delayed_ack = |wait_ns: u64| {
        hold_kind(Span::from_nanos(wait_ns), HoldEnd::PeerAck) == StallKind::NagleDelayedAck
    };
    if our_hold && delayed_ack(latency) {
        return Some(stall(
            StallKind::NagleDelayedAck,
            Side::Client,
            latency,
            last_write.ts_ns,
        ));
    }
    let widest_gap = turn
        .arrivals
        .windows(2)
        .map(|w| (w[1].ts_ns.saturating_sub(w[0].ts_ns), w[1].ts_ns))
        .max();
    widest_gap
        .filter(|(gap, _)| delayed_ack(*gap))
        .map(|(gap, ts)| stall(StallKind::NagleDelayedAck, Side::Server, gap, ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::socket::{Arrival, Sent};
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn turn(sent: &[(u64, Option<u32>)], arrivals: &[u64], latency_ms: u64) -> Turn {
        Turn {
            connection: 0,
            setup: false,
            start_ns: 0,
            latency: Duration::from_millis(latency_ms),
            sent: sent
                .iter()
                .map(|&(ts_ns, held)| Sent {
                    ts_ns,
                    bytes: 100,
                    held,
                })
                .collect(),
            arrivals: arrivals
                .iter()
                .map(|&ts_ns| Arrival { ts_ns, bytes: 50 })
                .collect(),
            http_status: None,
            auth_scheme: None,
            https_port: false,
        }
    }

    #[test]
    fn only_stalls_inside_a_timed_request_make_the_verdict() {
        use crate::probe::client::Connection;
        let timed = |start_ns, setup| Turn {
            start_ns,
            setup,
            ..turn(&[(start_ns, None)], &[start_ns + MS], 1)
        };
        let log = RunLog {
            // A setup exchange at 0, timed requests at 100 ms and 200 ms, each 1 ms long.
            turns: vec![
                timed(0, true),
                timed(100 * MS, false),
                timed(200 * MS, false),
            ],
            connections: vec![Connection {
                local_port: 7,
                ..Connection::default()
            }],
            ..RunLog::default()
        };
        let at = |ts_ns, local_port| Stall {
            kind: StallKind::NagleDelayedAck,
            held: Side::Client,
            delay_ns: 43 * MS,
            local_port,
            ts_ns,
            event: None,
        };
        let cases = [
            (at(MS / 2, 7), Position::BeforeRequests), // the handshake or the setup exchange
            (at(100 * MS + MS / 2, 7), Position::InRequest),
            (at(150 * MS, 7), Position::BetweenRequests),
            (at(201 * MS, 7), Position::InRequest), // the window's last instant
            (at(300 * MS, 7), Position::AfterRequests),
            (at(100 * MS + MS / 2, 8), Position::AfterRequests), // another connection's time
        ];
        for (stall, expected) in &cases {
            assert_eq!(position(stall, &log), *expected, "{}", stall.ts_ns);
        }
        let (inside, outside) = split_by_request(cases.iter().map(|c| c.0.clone()).collect(), &log);
        assert_eq!((inside.len(), outside.len()), (2, 4));
    }

    #[test]
    fn a_reply_in_two_parts_a_delayed_ack_apart_is_the_servers_hold() {
        let s = from_turn(&turn(&[(0, Some(0))], &[MS / 10, 44 * MS], 44), 7).unwrap();
        assert_eq!(
            (s.kind, s.held, s.local_port),
            (StallKind::NagleDelayedAck, Side::Server, 7)
        );
        assert!(s.delay_ns >= 43 * MS);
        // The same parts a millisecond apart: no stall.
        assert!(from_turn(&turn(&[(0, Some(0))], &[MS / 10, MS], 1), 7).is_none());
    }

    #[test]
    fn on_windows_a_reply_two_hundred_ms_apart_is_the_servers_hold() {
        // A Windows host's own delayed ACK is 200 ms, and its socket tells no held bytes.
        let s = from_turn(&turn(&[(0, None)], &[MS / 10, 200 * MS], 200), 7).unwrap();
        assert_eq!((s.kind, s.held), (StallKind::NagleDelayedAck, Side::Server));
        assert!(s.delay_ns >= 199 * MS);
        // Our later write of unknown held bytes, answered at once after 200 ms: no claim that
        // Nagle held it.
        let unknown = turn(&[(0, None), (MS / 100, None)], &[200 * MS], 200);
        assert!(from_turn(&unknown, 7).is_none());
    }

    #[test]
    fn our_later_write_left_unsent_is_our_hold() {
        let t = turn(&[(0, Some(0)), (MS / 100, Some(2000))], &[45 * MS], 45);
        let s = from_turn(&t, 7).unwrap();
        assert_eq!((s.kind, s.held), (StallKind::NagleDelayedAck, Side::Client));
        // Unsent but answered at once: Nagle released it by an ordinary ACK.
        let quick = turn(&[(0, Some(0)), (MS / 100, Some(2000))], &[MS / 5], 0);
        assert!(from_turn(&quick, 7).is_none());
    }

    #[test]
    fn a_whole_reply_late_shows_no_hold() {
        // 205 ms, the cork timer's length, and 42 ms, a delayed ACK's: the socket sees no
        // hold, only the server's time.
        assert!(from_turn(&turn(&[(0, Some(0))], &[205 * MS], 205), 7).is_none());
        assert!(from_turn(&turn(&[(0, Some(0))], &[42 * MS], 42), 7).is_none());
        assert!(from_turn(&turn(&[(0, Some(0))], &[100 * MS], 100), 7).is_none());
    }
}
