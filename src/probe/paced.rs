//! Writes paced by ACKs in the probe's own run (`--pipeline`, `--connections`): what the
//! detector found on its connections (`nagle_ack_paced`, from the capture), or, without a
//! capture, what its socket saw (TCP_INFO's `tcpi_notsent_bytes` right after each write of a
//! batch but the first: bytes the kernel kept back), then the throughput of a TCP_NODELAY
//! re-run against the run's.

use std::time::Duration;

use super::capture::Captured;
use super::client::RunLog;
use crate::flow::Side;

/// One side's pacing over the probe's connections (from the capture).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PacedSide {
    /// Whose writes waited.
    pub held: Side,
    /// Connections whose writes of that side were paced.
    pub connections: usize,
    /// Holds, all those connections.
    pub holds: u64,
    /// The holds' time, each connection's union summed.
    pub time_lost: Duration,
}

/// The pacing of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct AckPaced {
    /// Paced sides found by the detector (empty without a capture, or when none was).
    pub sides: Vec<PacedSide>,
    /// Writes after the first of a batch (`--pipeline`) that the kernel kept back, and all
    /// such writes: the socket's view, with or without a capture.
    pub held_writes: (u64, u64),
    /// Requests per second over the run: answered requests over the time from the first
    /// request to the last answer.
    pub requests_per_s: Option<f64>,
    /// Estimate without the probe's holds: requests over that time less each connection's
    /// share of the holds' time (the time lost divided by the connections). An upper bound:
    /// it ignores what the holds saved (requests gathered into fewer segments).
    pub estimate_per_s: Option<f64>,
    /// The TCP_NODELAY re-run, when the probe's own writes were paced or kept back.
    pub nodelay: Option<NoDelayRun>,
}

/// The TCP_NODELAY re-run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoDelayRun {
    /// Requests answered.
    pub requests: usize,
    /// Requests per second.
    pub requests_per_s: Option<f64>,
    /// Its connections still paced on the probe's side (capture only).
    pub paced_connections: Option<usize>,
}

impl AckPaced {
    /// The probe's own writes were paced (the detector, from the capture) or kept back by the
    /// kernel in most batches (the socket, with or without a capture): a TCP_NODELAY re-run
    /// tests it.
    pub fn own_writes_held(&self) -> bool {
        let (held, all) = self.held_writes;
        self.sides.iter().any(|s| s.held == Side::Client) || (all > 0 && held * 2 > all)
    }

    /// The re-run's gain in requests per second, percent (negative: a loss).
    pub fn gain_percent(&self) -> Option<f64> {
        let before = self.requests_per_s?;
        let after = self.nodelay?.requests_per_s?;
        (before > 0.0).then(|| (after / before - 1.0) * 100.0)
    }
}

/// Requests each timed exchange carries.
fn per_exchange(pipeline: usize) -> usize {
    pipeline.max(1)
}

/// Requests per second of `log`: answered requests over the first request to the last answer.
pub fn rate(log: &RunLog, pipeline: usize) -> Option<f64> {
    let wall = wall_time(log)?;
    let requests = log.requests().count() * per_exchange(pipeline);
    (wall > Duration::ZERO).then(|| requests as f64 / wall.as_secs_f64())
}

fn wall_time(log: &RunLog) -> Option<Duration> {
    let start = log.requests().map(|t| t.start_ns).min()?;
    let end = log
        .requests()
        .map(|t| t.start_ns + t.latency.as_nanos() as u64)
        .max()?;
    Some(Duration::from_nanos(end.saturating_sub(start)))
}

/// The paced sides the detector found on the run's connections.
pub fn from_capture(captured: &Captured, log: &RunLog) -> Vec<PacedSide> {
    let ours = |port: u16| log.connections.iter().any(|c| c.local_port == port);
    let mut sides: Vec<PacedSide> = Vec::new();
    let flows = captured
        .analysis
        .flows
        .iter()
        .filter(|f| ours(f.client.port));
    for flow in flows {
        for (held, pacing) in [Side::Client, Side::Server].into_iter().zip(flow.paced) {
            let Some(p) = pacing else { continue };
            let lost = Duration::from_nanos(p.time_lost_ns.as_nanos());
            match sides.iter_mut().find(|s| s.held == held) {
                Some(s) => {
                    s.connections += 1;
                    s.holds += p.holds;
                    s.time_lost += lost;
                }
                None => sides.push(PacedSide {
                    held,
                    connections: 1,
                    holds: p.holds,
                    time_lost: lost,
                }),
            }
        }
    }
    sides
}

/// Writes after a batch's first that the kernel kept back (`tcpi_notsent_bytes` > 0 right after
/// the write), and all of them, over the timed requests.
pub fn held_writes(log: &RunLog) -> (u64, u64) {
    let later = log.requests().flat_map(|t| t.sent.iter().skip(1));
    later.fold((0, 0), |(held, all), s| {
        (held + u64::from(s.held.unwrap_or(0) > 0), all + 1)
    })
}

/// The pacing of a run: `captured` when the probe captured its traffic.
pub fn of(log: &RunLog, captured: Option<&Captured>, pipeline: usize) -> AckPaced {
    let sides = captured.map_or_else(Vec::new, |c| from_capture(c, log));
    let requests_per_s = rate(log, pipeline);
    let connections = log.connections.len().max(1) as u32;
    let own_lost: Duration = sides
        .iter()
        .filter(|s| s.held == Side::Client)
        .map(|s| s.time_lost)
        .sum();
    let estimate_per_s = wall_time(log).and_then(|wall| {
        let left = wall.saturating_sub(own_lost / connections);
        let requests = log.requests().count() * per_exchange(pipeline);
        (left > Duration::ZERO && !own_lost.is_zero()).then(|| requests as f64 / left.as_secs_f64())
    });
    AckPaced {
        sides,
        held_writes: held_writes(log),
        requests_per_s,
        estimate_per_s,
        nodelay: None,
    }
}

/// The re-run with TCP_NODELAY on the probe's sockets, measured as the first run was.
pub fn nodelay_run(log: &RunLog, captured: Option<&Captured>, pipeline: usize) -> NoDelayRun {
    NoDelayRun {
        requests: log.requests().count() * per_exchange(pipeline),
        requests_per_s: rate(log, pipeline),
        paced_connections: captured.map(|c| {
            from_capture(c, log)
                .iter()
                .filter(|s| s.held == Side::Client)
                .map(|s| s.connections)
                .sum()
        }),
    }
}

/// The pacing in words, one line each; nothing when none was seen.
pub fn describe(p: &AckPaced) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &p.sides {
        let whose = match s.held {
            Side::Client => "the probe's own pipelined writes (as a client without TCP_NODELAY)",
            Side::Server => "the server's writes",
        };
        lines.push(format!(
            "nagle_ack_paced: {whose} waited for the ACK of the previous small segment {} times \
             on {} connection{}, {:.3} ms in all",
            s.holds,
            s.connections,
            if s.connections == 1 { "" } else { "s" },
            s.time_lost.as_secs_f64() * 1e3
        ));
    }
    let (held, all) = p.held_writes;
    if held > 0 {
        lines.push(format!(
            "socket: {held} of {all} writes after a batch's first were kept back by the kernel \
             (TCP_INFO notsent > 0 right after the write: Nagle, with a small segment in flight)"
        ));
    }
    match (p.requests_per_s, p.estimate_per_s) {
        (Some(now), Some(est)) => lines.push(format!(
            "throughput {now:.0} requests/s; without the probe's holds at most {est:.0}/s \
             (estimate: requests / (run time − the holds' time per connection))"
        )),
        (Some(now), None) if p.nodelay.is_some() => {
            lines.push(format!("throughput {now:.0} requests/s"))
        }
        _ => {}
    }
    if let (Some(run), Some(gain)) = (p.nodelay, p.gain_percent()) {
        let paced = run
            .paced_connections
            .map_or(String::new(), |n| format!(", {n} connections still paced"));
        lines.push(format!(
            "TCP_NODELAY re-run: {} requests, {:.0} requests/s ({gain:+.1} %{paced}){}",
            run.requests,
            run.requests_per_s.unwrap_or(0.0),
            if gain < 0.0 {
                ": slower, the holds gathered requests into fewer segments and the path's round \
                 trip is short"
            } else {
                ""
            }
        ));
    }
    match p.gain_percent() {
        Some(gain) if gain > 0.0 => lines.push(
            "a client pipelining like this without TCP_NODELAY pays it: set TCP_NODELAY on its \
             sockets, or write each batch in one call"
                .to_string(),
        ),
        Some(_) => lines.push(
            "here TCP_NODELAY did not help: on this short path the holds cost less than the \
             segments they saved; on a longer path each hold costs a round trip"
                .to_string(),
        ),
        None => {}
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gain_of_the_rerun() {
        let mut p = AckPaced {
            sides: Vec::new(),
            held_writes: (9, 10),
            requests_per_s: Some(1000.0),
            estimate_per_s: None,
            nodelay: None,
        };
        assert!(p.own_writes_held());
        p.held_writes = (1, 10);
        assert!(!p.own_writes_held());
        assert_eq!(p.gain_percent(), None);
        p.nodelay = Some(NoDelayRun {
            requests: 10,
            requests_per_s: Some(1500.0),
            paced_connections: None,
        });
        assert_eq!(p.gain_percent().map(f64::round), Some(50.0));
    }
}
