//! Writes paced by ACKs in the probe's own run (`--pipeline`, `--connections`): what the
//! detector found on its connections (`nagle_ack_paced`, from the capture), or, without a
//! capture, what its socket saw (TCP_INFO's `tcpi_notsent_bytes` right after each write of a
//! batch but the first: bytes the kernel kept back), then the throughput of a TCP_NODELAY
//! re-run against the run's.

use std::time::Duration;

use super::captured::Captured;
use super::client::RunLog;
use super::stalls::later_writes;
use crate::flow::Side;
pub(crate) use crate::report::model::probe::{AckPaced, NoDelayRun, PacedSide};

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
        for (held, pacing) in [Side::Client, Side::Server].into_iter().zip(flow.paced()) {
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
/// the write), and all of those whose held bytes the socket told, over the timed requests.
pub fn held_writes(log: &RunLog) -> (u64, u64) {
    later_writes(log)
        .filter_map(|s| s.held)
        .fold((0, 0), |(held, all), h| (held + u64::from(h > 0), all + 1))
}

/// The note of a pipelined run whose later writes' held bytes are unknown
/// ([`super::stalls::own_holds_unknown`]).
pub const HELD_UNKNOWN_NOTE: &str = "this system's socket does not tell which of the probe's \
                                     pipelined writes the kernel kept back (no TCP_INFO): the \
                                     TCP_NODELAY re-run measures what Nagle cost them";

/// The pacing of a run: `captured` when the probe captured its traffic.
pub fn of(log: &RunLog, captured: Option<&Captured>, pipeline: usize) -> AckPaced {
    let mut sides = captured.map_or_else(Vec::new, |c| from_capture(c, log));
    // Without --pipeline the probe writes one request at a time: a request written in parts
    // (--split-request) held by Nagle is the main diagnosis's stall, not pacing of batches.
    if pipeline <= 1 {
        sides.retain(|s| s.held == Side::Server);
    }
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
        held_writes: if pipeline > 1 {
            held_writes(log)
        } else {
            (0, 0)
        },
        requests_per_s,
        estimate_per_s,
        nodelay: None,
        pipeline: pipeline.max(1),
    }
}

/// The re-run with TCP_NODELAY on the probe's sockets, measured as the first run was.
pub fn nodelay_run(log: &RunLog, captured: Option<&Captured>, pipeline: usize) -> NoDelayRun {
    NoDelayRun {
        batches: log.requests().count(),
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
            pipeline: 16,
        };
        assert!(p.own_writes_held());
        p.held_writes = (1, 10);
        assert!(!p.own_writes_held());
        assert_eq!(p.gain_percent(), None);
        p.nodelay = Some(NoDelayRun {
            batches: 10,
            requests: 10,
            requests_per_s: Some(1500.0),
            paced_connections: None,
        });
        assert_eq!(p.gain_percent().map(f64::round), Some(50.0));
    }
}
