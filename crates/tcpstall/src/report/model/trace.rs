//! What `tcpstall trace` hands its renderer ([`crate::report::trace`]): each traced socket and
//! its longest write-write-read, plain data the tracer's socket model fills in.

use std::net::SocketAddr;
use std::time::Duration;

use crate::report::model::watch::CallSites;

/// A hold this long after a write-write-read is the delayed ACK at work
/// ([`crate::tcp_rules::STALL_THRESHOLD`]).
pub(crate) const LONG_WAIT: Duration = crate::tcp_rules::STALL_THRESHOLD;

/// How long the kernel kept back the tail of a write-write-read's last write (Nagle: unsent
/// bytes behind a small unacknowledged segment), which is the wait the pattern causes; the
/// read after it may wait longer, for the peer's own time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Hold {
    /// Nothing was kept back: the tail left with its send (the kernel's record), or nothing
    /// was unsent when the read began and the socket's last send was then.
    Nothing,
    /// Kept back this long: its leaving was seen (the kernel's record of the releasing ACK,
    /// or TCP_INFO's time of the socket's last send), or it was still unsent when the read
    /// returned (at least this).
    Proven(Duration),
    /// Kept back when the read began (or as the send returned), or not known, and when it
    /// left was not seen: the read's end bounds it, at most this.
    AtMost(Duration),
}

impl Hold {
    /// Proven to be a delayed-ACK wait: kept back [`LONG_WAIT`] or more.
    pub fn is_long(self) -> bool {
        matches!(self, Hold::Proven(d) if d >= LONG_WAIT)
    }

    /// How strongly it speaks for a stall, for choosing the example: a proven long hold, then
    /// one only bounded by a long read, then the rest.
    fn rank(self) -> u8 {
        match self {
            Hold::Proven(d) if d >= LONG_WAIT => 2,
            Hold::AtMost(d) if d >= LONG_WAIT => 1,
            _ => 0,
        }
    }

    fn duration(self) -> Duration {
        match self {
            Hold::Nothing => Duration::ZERO,
            Hold::Proven(d) | Hold::AtMost(d) => d,
        }
    }
}

/// What the tracer knows about one TCP socket it saw used; serialised as is in `trace --json`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct TracedSocket {
    /// Process (thread-group id) that used it first.
    pub pid: u32,
    /// Its fd there.
    pub fd: i32,
    /// Local address, once known.
    pub local: Option<SocketAddr>,
    /// Remote address, once known.
    pub remote: Option<SocketAddr>,
    /// TCP_NODELAY as last seen (read from the socket or from a setsockopt call).
    pub nodelay: bool,
    /// TCP_NODELAY was switched on at some point (setsockopt seen or read on the socket).
    pub nodelay_ever_set: bool,
    /// TCP_CORK as last seen.
    pub cork: bool,
    /// setsockopt(TCP_QUICKACK, 1) calls: the program re-arms immediate ACKs on this socket.
    pub quickack_sets: u64,
    /// MSS for sending (TCP_MAXSEG).
    pub mss: u64,
    /// Send syscalls that moved data.
    pub sends: u64,
    /// Read calls on the socket.
    pub reads: u64,
    /// Write-write-read sequences found.
    pub write_write_read: u64,
    /// Of those, how many had the tail of their last write kept back by Nagle for at least
    /// 30 ms, as measured ([`Hold::Proven`]): the waits the pattern caused.
    pub waits_over_30ms: u64,
    /// Of those, how many had no timed hold (kept back when the read began but its leaving
    /// unseen, or the socket not readable) while the read waited 30 ms or more: a hold of at
    /// most the read's wait, not counted above.
    pub unmeasured_holds_over_30ms: u64,
    /// Reads after a write-write-read that waited 30 ms or more while nothing was kept back
    /// that long: the peer's time (its think time, or idle before its next message).
    pub idle_waits_over_30ms: u64,
    /// The longest of those reads' waits, milliseconds.
    pub longest_idle_wait_ms: Option<f64>,
    /// The write-write-read whose tail was kept back longest (failing any, whose read waited
    /// longest).
    pub example: Option<Example>,
    /// Sends whose tail the kernel's record showed held by Nagle as the call returned
    /// (tracepoints only; the report's `kernel_holds`).
    #[serde(skip)]
    pub kernel_held_sends: u64,
}

impl TracedSocket {
    /// Counts one write-write-read: `wait` from the end of its last send to the end of the
    /// read, `hold` of its last write's tail. True when it became the socket's example.
    pub fn count(&mut self, writes: Vec<u64>, sends: u64, wait: Duration, hold: Hold) -> bool {
        self.write_write_read += 1;
        if hold.is_long() {
            self.waits_over_30ms += 1;
        } else if matches!(hold, Hold::AtMost(d) if d >= LONG_WAIT) {
            self.unmeasured_holds_over_30ms += 1;
        } else if wait >= LONG_WAIT {
            self.idle_waits_over_30ms += 1;
            let ms = millis(wait);
            if self.longest_idle_wait_ms.map_or(true, |m| m < ms) {
                self.longest_idle_wait_ms = Some(ms);
            }
        }
        let better = self.example.as_ref().map_or(true, |e| {
            let key = (hold.rank(), hold.duration(), wait);
            let theirs = (e.hold.rank(), e.hold.duration(), e.wait);
            key > theirs
        });
        if better {
            self.example = Some(Example::new(writes, sends, wait, hold));
        }
        better
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The sizes of one write-write-read, how long its last write's tail was kept back, and how
/// long the read after it waited.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Example {
    /// Bytes of each send (at most 8 listed).
    pub writes: Vec<u64>,
    /// Sends before the read.
    pub sends: u64,
    /// From the end of the last send to the end of the read or wait, milliseconds: the hold
    /// and whatever the peer took besides.
    pub wait_ms: f64,
    /// How long the tail of the last write was kept back by Nagle, milliseconds; null when
    /// nothing was.
    pub hold_ms: Option<f64>,
    /// The tail's leaving was not seen: `hold_ms` is the read's wait, an upper bound.
    pub hold_is_upper_bound: bool,
    /// Where the last write and the one before it were made (through the tracepoints, unless
    /// `--no-stacks`): the keys `stack`, `previous_stack` and their `*_missing`.
    #[serde(flatten)]
    pub call_sites: Option<CallSites>,
    #[serde(skip)]
    hold: Hold,
    #[serde(skip)]
    wait: Duration,
}

impl Example {
    /// The example of sends of `writes` bytes (`sends` of them), a read waiting `wait` and
    /// the last write's tail kept back `hold`.
    pub fn new(writes: Vec<u64>, sends: u64, wait: Duration, hold: Hold) -> Example {
        Example {
            writes,
            sends,
            wait_ms: millis(wait),
            hold_ms: match hold {
                Hold::Nothing => None,
                Hold::Proven(d) | Hold::AtMost(d) => Some(millis(d)),
            },
            hold_is_upper_bound: matches!(hold, Hold::AtMost(_)),
            call_sites: None,
            hold,
            wait,
        }
    }

    /// "6 B, then 7 B, the last kept back 41.2 ms by Nagle; the read after them waited
    /// 341.0 ms".
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self.writes.iter().map(|b| format!("{b} B")).collect();
        if self.sends > self.writes.len() as u64 {
            parts.push(format!("{} more", self.sends - self.writes.len() as u64));
        }
        let writes = parts.join(", then ");
        let wait = self.wait_ms;
        match (self.hold_ms, self.hold_is_upper_bound) {
            (None, _) => {
                format!("{writes}, then a read waiting {wait:.1} ms with nothing kept back")
            }
            (Some(_), true) => format!(
                "{writes}, the last kept back by Nagle when the read began, for at most \
                 {wait:.1} ms (the read's wait: when it left was not seen)"
            ),
            (Some(hold), false) => format!(
                "{writes}, the last kept back {hold:.1} ms by Nagle; the read after them waited \
                 {wait:.1} ms"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn example_text() {
        let held = Example::new(vec![6, 7], 2, ms(341), Hold::Proven(ms(41)));
        assert_eq!(
            held.describe(),
            "6 B, then 7 B, the last kept back 41.0 ms by Nagle; the read after them waited \
             341.0 ms"
        );
        let idle = Example::new(vec![6, 7], 3, ms(310), Hold::Nothing);
        assert_eq!(
            idle.describe(),
            "6 B, then 7 B, then 1 more, then a read waiting 310.0 ms with nothing kept back"
        );
        let bounded = Example::new(vec![6, 7], 2, ms(50), Hold::AtMost(ms(50)));
        assert!(bounded.describe().contains("at most 50.0 ms"));
        assert!(bounded.hold_is_upper_bound);
    }

    #[test]
    fn a_long_read_is_a_stall_only_when_the_hold_is() {
        let mut s = TracedSocket::new(1, 3);
        s.count(vec![6, 7], 2, ms(310), Hold::Nothing);
        s.count(vec![6, 7], 2, ms(305), Hold::Proven(ms(2)));
        assert_eq!((s.waits_over_30ms, s.idle_waits_over_30ms), (0, 2));
        assert_eq!(s.longest_idle_wait_ms, Some(310.0));
        s.count(vec![5, 6], 2, ms(340), Hold::Proven(ms(40)));
        s.count(vec![8, 9], 2, ms(345), Hold::AtMost(ms(345)));
        s.count(vec![1, 2], 2, ms(1), Hold::Proven(ms(1)));
        assert_eq!(s.write_write_read, 5);
        assert_eq!(s.waits_over_30ms, 1);
        assert_eq!(s.unmeasured_holds_over_30ms, 1);
        assert_eq!(s.idle_waits_over_30ms, 2);
        // The proven hold is the example, not the longer reads around it.
        let example = s.example.expect("an example");
        assert_eq!(example.writes, vec![5, 6]);
        assert_eq!(example.hold_ms, Some(40.0));
    }
}
