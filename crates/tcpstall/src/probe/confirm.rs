//! The confirmation: a few requests again with the one change that must remove the stall the
//! diagnosis names. A server's write held by Nagle until our delayed ACK must vanish when we
//! re-arm TCP_QUICKACK after every read (our ACK leaves at once, `tcp_cleanup_rbuf`); a hold
//! of our own write must vanish with TCP_NODELAY on our socket. If it does not vanish, the
//! diagnosis was wrong and the report says so.

use std::time::Duration;

use crate::flow::Side;
use crate::latency::LatencySummary;
use crate::tcp_rules;

use super::socket::SocketMode;
use super::stalls::Stall;
pub use crate::report::model::probe::{Confirmation, Remedy};

/// Requests of the confirmation run: enough past a new connection's quick-ACK start (the
/// first turn is never held) for a stall to show again.
pub const REQUESTS: usize = 10;

impl Remedy {
    /// The remedy that tests `stall`, when one does: only a Nagle hold released by a delayed
    /// ACK has one the client can apply.
    pub fn for_stall(stall: &Stall) -> Option<Remedy> {
        if !stall.kind.info().nagle_delayed_ack() {
            return None;
        }
        Some(match stall.held {
            Side::Server => Remedy::QuickAck,
            Side::Client => Remedy::NoDelay,
        })
    }

    /// The socket mode of the re-run.
    pub fn mode(self) -> SocketMode {
        match self {
            Remedy::QuickAck => SocketMode {
                quickack: true,
                nodelay: false,
            },
            Remedy::NoDelay => SocketMode {
                quickack: false,
                nodelay: true,
            },
        }
    }

    /// Stable name in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Remedy::QuickAck => "quickack",
            Remedy::NoDelay => "nodelay",
        }
    }

    /// What was done, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Remedy::QuickAck => "TCP_QUICKACK re-armed after every read",
            Remedy::NoDelay => "TCP_NODELAY on the probe's socket",
        }
    }
}

impl Confirmation {
    /// The hold sits on `hop`, behind the server, where the probe's remedies cannot reach: the
    /// re-run tested that our delayed ACK is not what the answer waits for, and cannot tell
    /// whether the fix there works, so it neither confirms nor refutes.
    pub fn out_of_reach(&mut self, hop: &str) {
        let what = match self.remedy {
            Remedy::QuickAck => "whether the answer waits for our delayed ACK",
            Remedy::NoDelay => "whether our own request's hold explains the wait",
        };
        self.tested = Some(format!(
            "{what}: with {} {} of {} requests still waited, so it does not",
            self.remedy.describe(),
            self.slow.max(self.stalls),
            self.requests
        ));
        self.untested = Some(format!(
            "{hop}: a client cannot change when that hop ACKs; apply a fix there and probe again"
        ));
        self.undecided = Some(format!("the hold is behind the server, on {hop}"));
        self.confirmed = None;
    }
}

/// What the re-run measured.
#[derive(Debug, Clone, Copy)]
pub struct Rerun<'a> {
    /// Its stalls.
    pub stalls: &'a [Stall],
    /// Latencies of its answered requests.
    pub latencies: &'a [Duration],
    /// What went wrong in it.
    pub errors: &'a [String],
    /// The stalls come from a capture (the detector), not the socket alone.
    pub captured: bool,
}

/// Judges the re-run against the diagnosed `example`; `baseline` is the quickest request of
/// both runs (the path and the server's own time). The stall has vanished when the re-run
/// has neither a stall of the same kind and side nor a request a stall's worth slower than
/// the baseline ([`tcp_rules::STALL_THRESHOLD`]): a reply still pausing 40 ms with our ACKs
/// immediate is held behind the server (a proxy's upstream hop), not by our delayed ACK, even
/// when the detector, seeing no delayed ACK of ours, finds nothing. One slow request in ten
/// is taken for a busy machine's scheduling; so is one stall in ten when the stalls are the
/// socket's guesses (a descheduled server's pause looks like a hold), none when the detector
/// names them.
pub fn judge(
    remedy: Remedy,
    example: &Stall,
    baseline: Duration,
    rerun: Rerun<'_>,
) -> Confirmation {
    let requests = rerun.latencies.len();
    let same = rerun
        .stalls
        .iter()
        .filter(|s| s.kind == example.kind && s.held == example.held)
        .count() as u64;
    let slow_from = baseline + tcp_rules::STALL_THRESHOLD;
    let slow = rerun.latencies.iter().filter(|l| **l >= slow_from).count() as u64;
    // Slowness is timing, open to a busy machine's scheduling whatever the source: one in ten
    // is noise. A stall the detector names is not, but the socket's guesses are timing too.
    let noise = requests as u64 / 10;
    let tolerated_stalls = if rerun.captured { 0 } else { noise };
    let undecided = if same > 0 || slow > 0 {
        None
    } else if let Some(err) = rerun.errors.first() {
        Some(format!("the re-run failed: {err}"))
    } else if requests < 2 {
        Some("the re-run answered fewer than 2 requests".to_string())
    } else {
        None
    };
    Confirmation {
        remedy,
        requests,
        stalls: same,
        slow,
        p50_ms: LatencySummary::of(rerun.latencies).p50_ms,
        confirmed: undecided
            .is_none()
            .then_some(same <= tolerated_stalls && slow <= noise),
        undecided,
        tested: None,
        untested: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::StallKind;

    fn stall(held: Side) -> Stall {
        Stall {
            kind: StallKind::NagleDelayedAck,
            held,
            delay_ns: 44_000_000,
            local_port: 1,
            ts_ns: 0,
            event: None,
        }
    }

    fn ms(values: &[u64]) -> Vec<Duration> {
        values
            .iter()
            .map(|&v| Duration::from_micros(v * 1000))
            .collect()
    }

    #[test]
    fn vanished_stayed_or_undecided() {
        let example = stall(Side::Server);
        let base = Duration::from_micros(300);
        let fast = ms(&[0, 0, 1, 0, 0, 0, 0, 0, 0, 0]);
        let rerun = |stalls: &'static [Stall], latencies: &[Duration], captured| {
            judge(
                Remedy::QuickAck,
                &example,
                base,
                Rerun {
                    stalls,
                    latencies,
                    errors: &[],
                    captured,
                },
            )
        };
        assert_eq!(rerun(&[], &fast, true).confirmed, Some(true));
        // Still 44 ms with our ACKs immediate: held elsewhere.
        let slow = ms(&[44, 44, 45, 44, 44, 0, 44, 44, 44, 44]);
        let c = rerun(&[], &slow, true);
        assert_eq!((c.confirmed, c.slow), (Some(false), 9));
        // One slow request in ten is noise.
        let one = ms(&[0, 0, 0, 44, 0, 0, 0, 0, 0, 0]);
        assert_eq!(rerun(&[], &one, true).confirmed, Some(true));
        // Nothing answered: undecided.
        assert_eq!(rerun(&[], &[], true).confirmed, None);
    }

    #[test]
    fn remedies_follow_the_held_side() {
        assert_eq!(
            Remedy::for_stall(&stall(Side::Server)),
            Some(Remedy::QuickAck)
        );
        assert_eq!(
            Remedy::for_stall(&stall(Side::Client)),
            Some(Remedy::NoDelay)
        );
        let cork = Stall {
            kind: StallKind::CorkTimer,
            ..stall(Side::Server)
        };
        assert_eq!(Remedy::for_stall(&cork), None);
    }
}
