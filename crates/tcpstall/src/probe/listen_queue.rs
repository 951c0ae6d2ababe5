//! The server's accept queue, when the server is on this host: its listening socket's backlog
//! and queue (`sock_diag`, [`crate::host::sock_diag::listeners`]) before, during (sampled)
//! and after the run, and the `TcpExt: ListenOverflows` / `ListenDrops` counters of the
//! server's network namespace (`/proc/PID/net/netstat`). A queue that overflowed while the
//! probe's requests waited for retransmission timers, or its connects for a SYN resend, is the
//! culprit of those waits, not the network ([`tcp_rules::LISTEN_OVERFLOWS`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::client::RunLog;
use super::diagnosis::{Culprit, Diagnosis};
use super::stalls::Stall;
use super::upstream::Process;
use crate::detect::{waited_for_syn_resend, StallKind};
use crate::host::kernel;
use crate::host::sock_diag::{self, ListenQueue as Row};
use crate::latency::LatencySummary;
pub use crate::report::model::probe::{Cause, ConnectTimes, ListenQueue};
use crate::tcp_rules;

/// How often the queue is sampled during the run.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// The counters of a network namespace that a full accept queue raises.
#[derive(Debug, Clone, Copy)]
struct Counters {
    overflows: Option<u64>,
    drops: Option<u64>,
}

impl Counters {
    fn read(pid: u32) -> Counters {
        let netstat = format!("/proc/{pid}/net/netstat");
        Counters {
            overflows: kernel::tcpext_counter_in(&netstat, tcp_rules::LISTEN_OVERFLOWS),
            drops: kernel::tcpext_counter_in(&netstat, tcp_rules::LISTEN_DROPS),
        }
    }
}

/// The listening socket watched while the requests run.
pub(crate) struct Watch {
    server: Process,
    before: Row,
    counters: Counters,
    stop: Arc<AtomicBool>,
    sampler: Option<JoinHandle<u32>>,
}

/// The listening socket of `target` in this namespace.
fn listener(target: SocketAddr) -> Result<Row, String> {
    let rows = sock_diag::listeners().map_err(|err| format!("sock_diag: {err}"))?;
    rows.into_iter()
        .find(|r| {
            r.local.port() == target.port()
                && (r.local.ip().is_unspecified() || r.local.ip() == target.ip())
        })
        .ok_or_else(|| format!("no listening socket for {target} in sock_diag"))
}

impl Watch {
    /// Reads the listener of `target`, owned by `server`, and the counters, and starts
    /// sampling its queue.
    pub(crate) fn start(target: SocketAddr, server: &Process) -> Result<Watch, String> {
        let before = listener(target)?;
        let counters = Counters::read(server.pid);
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let inode = before.inode;
        let sampler = std::thread::Builder::new()
            .name("listen-queue".into())
            .spawn(move || {
                let mut most = 0;
                // Bounded by the run: the watch stops it when the requests end, or when it is
                // dropped on an early return.
                while !flag.load(Ordering::Relaxed) {
                    if let Ok(rows) = sock_diag::listeners() {
                        if let Some(r) = rows.iter().find(|r| r.inode == inode) {
                            most = most.max(r.queued);
                        }
                    }
                    std::thread::sleep(SAMPLE_EVERY);
                }
                most
            })
            .map_err(|err| format!("cannot start the queue sampler: {err}"))?;
        Ok(Watch {
            server: server.clone(),
            before,
            counters,
            stop,
            sampler: Some(sampler),
        })
    }

    /// Stops sampling and reads the listener and the counters again.
    pub(crate) fn finish(mut self) -> ListenQueue {
        self.stop.store(true, Ordering::Relaxed);
        let sampled = self.sampler.take().and_then(|h| h.join().ok()).unwrap_or(0);
        let after = listener(self.before.local).ok();
        let now = Counters::read(self.server.pid);
        let rise = |b: Option<u64>, a: Option<u64>| Some(a?.saturating_sub(b?));
        let queued_after = after.map_or(0, |r| r.queued);
        ListenQueue {
            pid: self.server.pid,
            command: self.server.command.clone(),
            address: self.before.local,
            backlog: after.map_or(self.before.backlog, |r| r.backlog),
            queued: [
                self.before.queued,
                sampled.max(self.before.queued).max(queued_after),
                queued_after,
            ],
            somaxconn: kernel::read_sysctl_u64(tcp_rules::SOMAXCONN_SYSCTL),
            overflows: rise(self.counters.overflows, now.overflows),
            drops: rise(self.counters.drops, now.drops),
            blamed: false,
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
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
