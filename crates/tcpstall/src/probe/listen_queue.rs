//! The server's accept queue, when the server is on this host: its listening socket's backlog
//! and queue (`sock_diag`, [`crate::host::sock_diag::listeners`]) before, during (sampled)
//! and after the run, and the `TcpExt: ListenOverflows` / `ListenDrops` counters of the
//! server's network namespace (`/proc/PID/net/netstat`). A queue that overflowed while the
//! probe's requests waited for retransmission timers, or its connects for a SYN resend, is the
//! culprit of those waits, not the network ([`tcp_rules::LISTEN_OVERFLOWS`]).

use std::time::Duration;

use super::client::RunLog;
use super::diagnosis::{Culprit, Diagnosis};
use super::stalls::Stall;
use crate::detect::{waited_for_syn_resend, StallKind};
use crate::latency::LatencySummary;
pub use crate::report::model::probe::{Cause, ConnectTimes, ListenQueue};
use crate::tcp_rules;

/// How often the queue is sampled during the run.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

// Reading the queue takes Linux's sock_diag and /proc; judging it is the same everywhere.
on_linux! {
    mod watch;
    pub(crate) use watch::Watch;
}

/// `once`, `N times`.
fn times(n: u64) -> String {
    match n {
        1 => "once".to_string(),
        n => format!("{n} times"),
    }
}

/// The connect times of `log`.
pub(crate) fn connect_times(log: &RunLog) -> Option<ConnectTimes> {
    let times: Vec<Duration> = log.connections.iter().map(|c| c.connect).collect();
    let waited: Vec<&Duration> = times
        .iter()
        .filter(|t| waited_for_syn_resend(**t))
        .collect();
    (!times.is_empty()).then(|| ConnectTimes {
        connects: times.len(),
        latency: LatencySummary::of(&times),
        waited_for_syn: waited.len(),
        waited_ms: waited.iter().map(|t| t.as_secs_f64() * 1e3).sum(),
    })
}

/// What waited for a timer in the run: timed requests resent by the retransmission timer,
/// and connects that waited for a SYN resend (from the capture, or from their time).
struct TimerWaits {
    resent_requests: u64,
    connects: u64,
    /// The time the connects lost, ms.
    connects_ms: f64,
}

fn timer_waits(d: &Diagnosis, outside: &[Stall], connects: Option<&ConnectTimes>) -> TimerWaits {
    let syn_seen = outside
        .iter()
        .filter(|s| s.kind == StallKind::SynRetry)
        .count() as u64;
    let slow = connects.map_or(0, |c| c.waited_for_syn as u64);
    TimerWaits {
        resent_requests: d.counts.get(StallKind::Rto),
        connects: (syn_seen + d.counts.get(StallKind::SynRetry)).max(slow),
        connects_ms: connects.map_or(0.0, |c| c.waited_ms),
    }
}

/// What to change for an overflowing accept queue.
fn queue_advice(queue: &ListenQueue) -> Vec<String> {
    let cap = queue
        .somaxconn
        .map_or(String::new(), |m| format!(", here {m}"));
    vec![
        format!(
            "raise the backlog {} (pid {}) passes to listen() (now {}; net.core.somaxconn caps \
             it{cap})",
            queue.command, queue.pid, queue.backlog
        ),
        "accept connections sooner: more accepting threads or processes, or fewer \
         connections opened at once by the clients"
            .to_string(),
    ]
}

/// Puts the run's timer waits on the server's accept queue when it overflowed during the run;
/// otherwise leaves the diagnosis as it is and says what was read. Returns a note, if any.
pub(crate) fn judge(
    d: &mut Diagnosis,
    mut queue: ListenQueue,
    outside: &[Stall],
    connects: Option<&ConnectTimes>,
) -> Option<String> {
    let waits = timer_waits(d, outside, connects);
    let overflows = queue.overflows.unwrap_or(0);
    let note = if overflows == 0 {
        None
    } else if waits.resent_requests + waits.connects == 0 {
        Some(format!(
            "the server's accept queue (backlog {}) overflowed {} during the run, but no \
             request or connect of the probe waited for it",
            queue.backlog,
            times(overflows)
        ))
    } else {
        queue.blamed = true;
        d.culprit = Some(Culprit::Server);
        let mut waited = Vec::new();
        if waits.resent_requests > 0 {
            waited.push(format!(
                "{} resent by the retransmission timer",
                crate::report::counted(waits.resent_requests, "request", "requests")
            ));
        }
        if waits.connects > 0 {
            waited.push(format!(
                "{} for a SYN resend ({} s or more)",
                crate::report::counted(waits.connects, "connect waited", "connects waited"),
                tcp_rules::TIMEOUT_INIT.as_secs()
            ));
        }
        // A stall of another kind the requests showed (the server's Nagle hold) stays in the
        // answer: the two causes in order of the time they cost.
        let other = d
            .example
            .as_ref()
            .filter(|e| !matches!(e.kind, StallKind::Rto | StallKind::SynRetry))
            .map(|e| Cause {
                kind: e.kind.name().to_string(),
                count: d.counts.get(e.kind),
                lost_ms: d.lost_ms,
                explanation: d.explanation.clone().unwrap_or_default(),
                advice: d.advice.clone(),
            });
        let queue_cause = Cause {
            kind: "listen_queue".to_string(),
            count: waits.connects + waits.resent_requests,
            lost_ms: waits.connects_ms,
            explanation: format!(
                "the server's accept queue (backlog {}) overflowed {} during the run: the \
                 kernel dropped SYNs and handshake ACKs, and requests waited for \
                 retransmission timers ({})",
                queue.backlog,
                times(overflows),
                waited.join(", ")
            ),
            advice: queue_advice(&queue),
        };
        let queue_hop = format!(
            "the listening socket of {} (pid {}) on {}: {} connections waited for accept() at \
             most during the run (sampled every {} ms), its backlog {}",
            queue.command,
            queue.pid,
            queue.address,
            queue.queued[1],
            SAMPLE_EVERY.as_millis(),
            queue.backlog
        );
        match other {
            Some(other) if other.lost_ms > queue_cause.lost_ms => {
                d.advice.extend(queue_cause.advice.iter().cloned());
                d.causes = vec![other, queue_cause];
            }
            other => {
                d.explanation = Some(queue_cause.explanation.clone());
                d.hop = Some(queue_hop);
                d.advice = queue_cause.advice.clone();
                if let Some(other) = other {
                    d.advice.extend(other.advice.iter().cloned());
                    d.causes = vec![queue_cause, other];
                }
            }
        }
        // The counters agree with the connects line: each connect that waited for a SYN
        // resend is a syn_retry.
        for _ in d.counts.get(StallKind::SynRetry)..waits.connects {
            d.counts.add(StallKind::SynRetry);
        }
        None
    };
    d.listen_queue = Some(queue);
    note
}
