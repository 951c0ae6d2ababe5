//! The stall one hop behind the server: a proxy in front of an application server that
//! answers in several writes. The application's last write waits for the *proxy's* delayed
//! ACK on the proxy's own connection upstream, and the proxy then hands the whole answer to
//! the probe at once: the probe's connection shows no hold, only answers that come a
//! delayed-ACK time late, again and again.
//!
//! Two kinds of evidence, the second only when the server is on this host (and the host is
//! Linux):
//! - [`timer_mode`]: the request latencies against the quickest one (the path and the
//!   server's own time; the path's round trip when even that one waited). Most slow requests within a timer's spread of each other
//!   ([`tcp_rules::timer_spread`]), that wait matching a delayed-ACK timer
//!   ([`tcp_rules::delack_timers`]), is a timer, not a server's work: a server's own time
//!   spreads wider, and one slow request is not a pattern.
//! - `hops.rs` (Linux): a capture of every TCP segment on `lo` and the other interfaces while the
//!   probe runs, fed to the detector `analyze` uses, keeping the holds on connections of the
//!   process that owns the listening socket (the proxy); a hold released within a slow
//!   request's time names the backend (its process, as `watch` finds it, when it is on this
//!   host; its address otherwise), its writes and whose ACK released them.

use std::time::Duration;

use crate::detect::PeerStack;
use crate::tcp_rules;

use super::client::RunLog;
pub use crate::report::model::probe::{HeldUpstream, Process, TimerMode, Upstream};

/// Fewest slow requests that make a pattern ("again and again"), not an accident.
pub const MIN_REPEATS: usize = 3;

impl TimerMode {
    /// The evidence in words.
    pub fn describe(&self) -> String {
        let reference = if self.from_round_trip {
            format!(
                "the path's round trip ({:.3} ms; even the quickest request took {:.1} ms more)",
                self.quickest_ms, self.setup_ms
            )
        } else {
            format!(
                "the quickest ({:.3} ms: the path and the server's own time)",
                self.quickest_ms
            )
        };
        format!(
            "{} of {} requests waited {:.1} ms ({:.1}-{:.1} ms) more than {reference}, {} of \
             them within {:.1} ms of each other: the shape of the {}",
            self.slow,
            self.requests,
            self.mode_ms,
            self.low_ms,
            self.high_ms,
            self.in_mode,
            self.high_ms - self.low_ms,
            self.timer.name
        )
    }

    /// The ACKing stack the timer suggests.
    pub fn peer_stack(&self) -> PeerStack {
        match self.timer.stack {
            "linux" => PeerStack::Linux,
            "windows" => PeerStack::Windows,
            _ => PeerStack::MacOsBsd,
        }
    }
}

/// How the shape is decided, for the notes: the same rule [`timer_mode`] applies.
pub fn rule_text(jiffy: Duration) -> String {
    format!(
        "a wait is taken for a timer behind the server when at least {MIN_REPEATS} requests, \
         and at least half of them, are {} ms or more slower than the quickest (than the \
         path's round trip when even the quickest took over {} ms more), three quarters \
         of those within {:.0} ms of each other (two jiffies: a timer's spread; a server's own \
         time spreads wider), and that wait (above the quickest, or above the round trip when the \
         quickest paid for a connection's set-up) matches a delayed-ACK timer (Linux {}-{} ms at \
         this HZ, Windows ~200 ms, macOS 100-200 ms)",
        tcp_rules::STALL_THRESHOLD.as_millis(),
        tcp_rules::CLEAN_BOUND.as_millis(),
        tcp_rules::timer_spread(jiffy).as_secs_f64() * 1e3,
        tcp_rules::delack_timers(jiffy)[0].low.as_millis(),
        tcp_rules::delack_timers(jiffy)[0].high.as_millis(),
    )
}

/// What a request costs without any timer: the quickest request (the path and the server's own
/// time), unless even it took more than [`tcp_rules::CLEAN_BOUND`] above the path's
/// `round_trip` (the TCP handshake): then it waited too (a proxy whose connection upstream is
/// already in ping-pong mode, or one opening that connection for it on a busy host), and only
/// the round trip is free of the timer. A server's own time of a few milliseconds stays in the
/// baseline; one of more than ten is judged against a stall's worth anyway
/// ([`tcp_rules::STALL_THRESHOLD`]) and the timer it must match.
pub fn baseline(latencies: &[Duration], round_trip: Option<Duration>) -> Option<(Duration, bool)> {
    let quickest = *latencies.iter().min()?;
    Some(match round_trip {
        Some(rtt) if quickest > rtt + tcp_rules::CLEAN_BOUND => (rtt, true),
        _ => (quickest, false),
    })
}

/// The path's round trip as the probe measured it: the kernel's lowest RTT sample of its
/// connections (TCP_INFO `tcpi_min_rtt`), else the quickest TCP handshake of `log` (which a
/// busy host's scheduling may stretch).
pub fn round_trip(log: &RunLog) -> Option<Duration> {
    let kernel = log
        .connections
        .iter()
        .filter_map(|c| c.info_at_end)
        .map(|info| info.min_rtt)
        .filter(|us| *us > 0)
        .min()
        .map(|us| Duration::from_micros(u64::from(us)));
    kernel.or_else(|| log.connections.iter().map(|c| c.connect).min())
}

/// The timer the latencies are shaped like, if they are (see [`rule_text`]); `round_trip` is
/// the path's ([`baseline`]), `jiffy` the running kernel's tick.
pub fn timer_mode(
    latencies: &[Duration],
    round_trip: Option<Duration>,
    jiffy: Duration,
) -> Option<TimerMode> {
    let (quickest, from_round_trip) = baseline(latencies, round_trip)?;
    let fastest = *latencies.iter().min()?;
    let mut waits: Vec<Duration> = latencies
        .iter()
        .map(|l| l.saturating_sub(quickest))
        .filter(|w| *w >= tcp_rules::STALL_THRESHOLD)
        .collect();
    let slow = waits.len();
    if slow < MIN_REPEATS || slow * 2 < latencies.len() {
        return None;
    }
    waits.sort_unstable();
    // The widest run of waits within one spread: the mode.
    let spread = tcp_rules::timer_spread(jiffy);
    let (mut best, mut end) = ((0, 0), 0);
    for start in 0..slow {
        while end < slow && waits[end] - waits[start] <= spread {
            end += 1;
        }
        if end - start > best.1 - best.0 {
            best = (start, end);
        }
    }
    let mode = &waits[best.0..best.1];
    if mode.len() * 4 < slow * 3 {
        return None;
    }
    let median = mode[mode.len() / 2];
    // The quickest request may have cost more than the path (the proxy opening its connection
    // upstream, an ARP resolution): the timer's wait lies between the wait above the quickest
    // and the wait above the round trip.
    let setup = round_trip.map_or(Duration::ZERO, |rtt| fastest.saturating_sub(rtt));
    let (shortest, longest) = if from_round_trip {
        (median.saturating_sub(setup), median)
    } else {
        (median, median + setup)
    };
    // The timer the mode itself is on first: the interval may reach more than one.
    let timers = tcp_rules::delack_timers(jiffy);
    let timer = timers
        .iter()
        .find(|t| (t.low..=t.high).contains(&median))
        .or_else(|| {
            timers
                .iter()
                .find(|t| shortest <= t.high && longest >= t.low)
        })
        .copied()?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Some(TimerMode {
        from_round_trip,
        setup_ms: ms(setup),
        requests: latencies.len(),
        slow,
        in_mode: mode.len(),
        quickest_ms: ms(quickest),
        mode_ms: ms(median),
        low_ms: ms(mode[0]),
        high_ms: ms(mode[mode.len() - 1]),
        timer,
    })
}

impl Upstream {
    /// The ACKing stack: from the hold's ACK delay when seen, else from the timer.
    pub fn peer_stack(&self) -> Option<PeerStack> {
        self.held
            .as_ref()
            .and_then(|h| h.example.peer_stack)
            .or_else(|| self.timer.as_ref().map(TimerMode::peer_stack))
    }

    /// The wait, ms: the hold's when seen, else the latency mode's.
    pub fn delay_ms(&self) -> Option<f64> {
        self.held
            .as_ref()
            .map(|h| h.example.finding.delay_ns.as_millis_f64())
            .or_else(|| self.timer.as_ref().map(|t| t.mode_ms))
    }

    /// Who the proxy is, in words: a proxy only once a hold on its connection behind it is
    /// seen; a lone server is the server.
    fn proxy_name(&self) -> String {
        match (&self.proxy, self.held.is_some()) {
            (Some(p), true) => format!("the proxy ({}, pid {})", p.command, p.pid),
            (Some(p), false) => format!("the server ({}, pid {})", p.command, p.pid),
            (None, _) => "the server (a proxy, load balancer or sidecar, if any)".to_string(),
        }
    }

    /// The hop the hold sits on, in a few words.
    pub fn hop_name(&self) -> String {
        let proxy = match &self.proxy {
            Some(p) => format!("{} (pid {})", p.command, p.pid),
            None => "the server".to_string(),
        };
        match &self.held {
            Some(held) => format!("the connection from {proxy} to {}", held.address),
            None => format!("the connection from {proxy} to the application server behind it"),
        }
    }

    /// One sentence naming the pattern: whose write waits for whose delayed ACK.
    /// `own_stalls`: the detector saw holds on our connection, which the hold upstream explains.
    pub fn explain(&self, own_stalls: bool) -> String {
        let proxy = self.proxy_name();
        match &self.held {
            Some(held) => {
                let e = &held.example;
                let writer = match &held.backend {
                    Some(b) => format!(
                        "the backend {} (pid {}) at {}",
                        b.process.command, b.process.pid, held.address
                    ),
                    None => format!("the backend at {}", held.address),
                };
                let writes = match e.writes.len() {
                    0 | 1 => format!("a {} B segment", e.released_bytes),
                    // The capture sees segments, not the application's write calls.
                    n => format!("its answer in {n} segments ({})", sizes(&e.writes)),
                };
                let stack = e
                    .peer_stack
                    .map(|s| format!("; the proxy looks {}", s.describe()))
                    .unwrap_or_default();
                format!(
                    "{writer} sends {writes}; the last waits for the delayed ACK of {proxy} on \
                     its own connection to that backend ({:.1} ms{stack}), then the proxy \
                     passes it on: {} of {} slow requests had such a hold upstream. {}",
                    e.finding.delay_ns.as_millis_f64(),
                    held.matched,
                    held.slow,
                    own_connection(own_stalls)
                )
            }
            None => {
                let timer = self
                    .timer
                    .as_ref()
                    .map(|t| format!("{}. ", capitalized(&t.describe())))
                    .unwrap_or_default();
                format!(
                    "{timer}{}. A write held behind the server waits for a delayed ACK there, \
                     most likely that of {proxy} on its connection to the application server, \
                     which answers in several writes; not for ours",
                    own_connection(own_stalls)
                )
            }
        }
    }

    /// Where the held write sits.
    pub fn hop(&self) -> String {
        let proxy = self.proxy_name();
        match &self.held {
            Some(held) => {
                let whose = match &held.backend {
                    Some(b) => format!(
                        "on this host: the write is held by the backend {} (pid {}) at {}",
                        b.process.command, b.process.pid, held.address
                    ),
                    None => format!(
                        "on the proxy's connection seen from this host: the write is held by the \
                         backend at {}, not a process of this host (`tcpstall watch` on its host \
                         names it)",
                        held.address
                    ),
                };
                format!(
                    "behind the server, {whose}, and released by the delayed ACK of {proxy} on \
                     the proxy's connection to it; this probe's connection ends at the proxy"
                )
            }
            None => {
                let why = self
                    .unwatched
                    .as_deref()
                    .map(|w| format!(" (the hop itself was not watched: {w})"))
                    .unwrap_or_default();
                format!(
                    "behind the server, if anywhere: this probe's connection ends at {proxy} and \
                     shows no hold; a write held on a connection beyond it, to an application \
                     server, would look like this, and so would the server's own time: only the \
                     timing tells{why}. `tcpstall watch` on the host of that hop names the \
                     process"
                )
            }
        }
    }

    /// The fixes, best first, with the commands when the processes are known.
    pub fn advice(&self) -> Vec<String> {
        let mut advice = Vec::new();
        let port = self.held.as_ref().map(|h| h.address.port());
        match self
            .held
            .as_ref()
            .and_then(|h| h.backend.as_ref().zip(port))
        {
            Some((b, port)) => advice.push(format!(
                "set TCP_NODELAY on the backend's sockets, live: tcpstall fix {} --port {port} \
                 ({}{}; add --yes when not at a terminal), then in its code (or make it write \
                 each answer in one call)",
                b.process.pid,
                b.process.command,
                match b.nodelay {
                    Some(false) => ", TCP_NODELAY off now",
                    Some(true) => ", TCP_NODELAY on now",
                    None => "",
                }
            )),
            None => {
                advice.push(match port {
                    Some(port) => format!(
                    "set TCP_NODELAY on the backend at {} (tcpstall fix PID --port {port} on its \
                     host), or make it write each answer in one call",
                    self.held.as_ref().map_or_else(String::new, |h| h.address.to_string())
                ),
                    None => "set TCP_NODELAY on the application server behind the proxy (tcpstall \
                         fix PID on its host), or make it write each answer in one call"
                        .to_string(),
                })
            }
        }
        // The backend's own switch, in its runtime's terms.
        if let Some(runtime) = self
            .held
            .as_ref()
            .and_then(|h| h.backend.as_ref())
            .and_then(|b| b.process.runtime.as_ref())
        {
            advice.push(runtime.advice());
        }
        let linux = matches!(self.peer_stack(), None | Some(PeerStack::Linux));
        if linux {
            let target = match (&self.proxy, port) {
                (Some(p), Some(port)) => format!("tcpstall fix {} --port {port}", p.pid),
                (Some(p), None) => format!("tcpstall fix {}", p.pid),
                _ => "tcpstall fix PROXY_PID".to_string(),
            };
            advice.push(format!(
                "if the backend cannot be changed, cap the proxy's delayed ACK on its upstream \
                 connections: {target} --delack-max 5ms (Linux 6.13+; add --yes when not at a \
                 terminal; reaches the connections open now, not those it opens later; costs \
                 more ACKs)"
            ));
        }
        let hint = match self.proxy.as_ref().map(|p| p.command.as_str()) {
            Some("haproxy") => Some(
                "haproxy's `option http-no-delay` does not remove this hold: it changes how \
                 haproxy sends, not when it ACKs the backend",
            ),
            Some("nginx") => Some(
                "nginx's `tcp_nodelay` and `proxy_buffering off` do not remove this hold: they \
                 change how nginx sends, not when it ACKs the upstream",
            ),
            _ => None,
        };
        advice.extend(hint.map(String::from));
        advice
    }
}

/// What our own connection showed, beside a hold upstream.
fn own_connection(own_stalls: bool) -> &'static str {
    if own_stalls {
        "Our connection shows the answer in parts as the proxy forwards them; our delayed ACK \
         between them only coincides with the release upstream (with our ACKs at once the wait \
         stays)"
    } else {
        "Our connection shows no hold of its own: the proxy sends the whole answer at once"
    }
}

fn sizes(writes: &[u32]) -> String {
    let text: Vec<String> = writes.iter().map(|w| format!("{w} B")).collect();
    match text.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{}, then {last}", rest.join(", ")),
        _ => text.join(""),
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or_else(String::new, |c| {
        c.to_uppercase().chain(chars).collect::<String>()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[f64]) -> Vec<Duration> {
        values
            .iter()
            .map(|v| Duration::from_secs_f64(v / 1e3))
            .collect()
    }

    const JIFFY: Duration = Duration::from_millis(4);

    #[test]
    fn a_sharp_mode_a_delayed_ack_above_the_quickest_is_a_timer() {
        let mut l = vec![0.4];
        l.extend([44.1, 44.0, 43.9, 47.9, 44.2, 44.0, 44.1, 43.8, 44.0, 44.3]);
        let mode = timer_mode(&ms(&l), None, JIFFY).expect("a timer");
        assert_eq!(mode.timer.stack, "linux");
        assert_eq!((mode.slow, mode.requests), (10, 11));
        assert!(mode.in_mode >= 9, "{mode:?}");
        assert!((43.0..45.0).contains(&mode.mode_ms), "{mode:?}");
    }

    #[test]
    fn a_server_taking_its_own_time_is_not_a_timer() {
        // Once only.
        let once = ms(&[0.4, 0.5, 45.0, 0.4, 0.5, 0.4]);
        assert!(timer_mode(&once, None, JIFFY).is_none());
        // Spread out over tens of milliseconds.
        let spread = ms(&[0.4, 35.0, 52.0, 41.0, 60.0, 38.0, 70.0, 47.0, 33.0, 55.0]);
        assert!(timer_mode(&spread, None, JIFFY).is_none());
        // Always slow, and no round trip known: the quickest is as slow, so no wait above it.
        let always = ms(&[45.0, 45.2, 44.9, 45.1, 45.0]);
        assert!(timer_mode(&always, None, JIFFY).is_none());
        // Sharp, but on no timer.
        let odd = ms(&[0.4, 70.0, 70.2, 70.1, 70.3, 70.0]);
        assert!(timer_mode(&odd, None, JIFFY).is_none());
        // A first request that paid for the proxy's connection upstream: the wait above it is
        // short of the timer, the wait above the round trip is on it.
        let setup = ms(&[9.0, 43.9, 44.0, 44.1, 47.9, 44.0]);
        let rtt = Some(Duration::from_micros(200));
        assert!(timer_mode(&setup, None, JIFFY).is_none());
        assert!(timer_mode(&setup, rtt, JIFFY).is_some());
    }

    #[test]
    fn every_request_waiting_is_measured_against_the_round_trip() {
        let all = ms(&[44.0, 44.1, 43.9, 44.2, 44.0]);
        let rtt = Some(Duration::from_micros(200));
        let mode = timer_mode(&all, rtt, JIFFY).expect("a timer above the round trip");
        assert!(mode.from_round_trip && mode.slow == 5, "{mode:?}");
        // A first request that paid 14 ms for the proxy's connection upstream on a busy host.
        let busy = ms(&[14.0, 44.0, 44.1, 43.9, 44.2]);
        let mode = timer_mode(&busy, rtt, JIFFY).expect("a timer above the round trip");
        assert!(mode.from_round_trip && mode.slow == 4, "{mode:?}");
        // A quick request is the better reference when there is one.
        let some_quick = ms(&[0.5, 44.0, 44.1, 43.9]);
        assert_eq!(
            baseline(&some_quick, rtt),
            Some((Duration::from_micros(500), false))
        );
    }

    #[test]
    fn a_windows_proxy_waits_200_ms() {
        let l = ms(&[1.0, 201.0, 202.0, 201.5, 201.0, 203.0]);
        assert_eq!(
            timer_mode(&l, None, JIFFY).map(|m| m.peer_stack()),
            Some(PeerStack::Windows)
        );
    }
}
