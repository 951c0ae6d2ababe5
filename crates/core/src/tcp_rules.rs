//! The TCP rules tcpstall reasons with, each written once and cited to the kernel symbol or
//! RFC it comes from. Every verb asks here: the detector judging a capture, the lab predicting
//! a row, `trace` judging a syscall sequence, `probe` and `watch` judging live traffic.
//!
//! Linux facts are read against `net/ipv4/tcp_output.c`, `tcp_input.c`, `tcp_timer.c` and
//! `include/net/tcp.h` (6.12) and checked on a 6.18 kernel; where a figure depends on the
//! running kernel (HZ, `tcp_timestamps`), the caller measures it (the command line's `host::kernel`).

use std::ops::RangeInclusive;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Segment sizes
// ---------------------------------------------------------------------------------------------

/// MSS assumed for IPv4 when no SYN tells it: Ethernet's (1500-byte MTU less 40 bytes of
/// headers, RFC 894), by far the commonest. RFC 9293's 536 is what a *sender* must assume;
/// taken here it would make every write above 536 B look full-sized and hide Nagle holds.
pub const DEFAULT_MSS_V4: u32 = 1460;
/// MSS assumed for IPv6 when no SYN tells it: Ethernet's 1500-byte MTU less 60 bytes.
pub const DEFAULT_MSS_V6: u32 = 1440;
/// MSS of a TCP connection over `lo` (IPv4), as its SYN announces it: the 65535-byte IPv4
/// datagram limit less 40 bytes of IPv4 and TCP headers (`lo` itself allows 65536).
pub const LOOPBACK_MSS_V4: u32 = 65_495;
/// MSS of a TCP connection over `lo` (IPv6): the 65536-byte MTU less 60 bytes of headers.
pub const LOOPBACK_MSS_V6: u32 = 65_476;
/// RFC 1122's smallest MSS (`TCP_MSS_DEFAULT`): what a receiver estimates the peer's segments
/// to be before a larger one arrives (Linux starts `rcv_mss` there, `tcp_initialize_rcv_mss`).
pub const MSS_DEFAULT: u32 = 536;
/// Bytes the timestamp option takes in every segment once negotiated
/// (`TCPOLEN_TSTAMP_ALIGNED`): `tcp_current_mss` subtracts them from the MSS.
pub const TIMESTAMP_OPTION_LEN: u32 = 12;

/// The MSS assumed for a connection whose SYN was not seen, by address family and whether
/// it runs over loopback.
pub fn assumed_mss(ipv6: bool, loopback: bool) -> u32 {
    match (ipv6, loopback) {
        (false, false) => DEFAULT_MSS_V4,
        (true, false) => DEFAULT_MSS_V6,
        (false, true) => LOOPBACK_MSS_V4,
        (true, true) => LOOPBACK_MSS_V6,
    }
}

/// Payload bytes of a full segment for an announced `mss`: the timestamp option, when the
/// connection uses it (RFC 7323, on unless `net.ipv4.tcp_timestamps=0`), takes 12 bytes of it
/// (`tcp_current_mss` → `tcp_established_options`).
pub const fn payload_mss(mss: u32, timestamps: bool) -> u32 {
    if timestamps {
        mss.saturating_sub(TIMESTAMP_OPTION_LEN)
    } else {
        mss
    }
}

/// Minshall's sub-MSS test, as the kernel writes it (`tcp_minshall_update`: `skb->len <
/// tcp_skb_pcount(skb) * mss_now`): a send of `payload` bytes, cut into segments of
/// `payload_mss`, ends in a partial segment. That partial segment becomes `snd_sml`, and
/// while it is unacknowledged Nagle holds the next partial one (`tcp_minshall_check`).
/// A GSO super-packet of 2623 B at 1448 B segments ends partial; one of exactly 2896 B does
/// not. An empty send has no segment and is never sub-MSS.
#[inline]
pub fn is_sub_mss(payload: u64, payload_mss: u64) -> bool {
    // The comparison first: the common segment needs no division.
    if payload < payload_mss {
        return payload > 0;
    }
    payload % payload_mss.max(1) != 0
}

/// Bytes of the IPv4 and TCP headers without options: an MSS is the MTU less these (RFC 9293
/// §3.7.1, RFC 879).
pub const IPV4_TCP_HEADERS: u32 = 40;

/// A receiver ACKs at once, not delayed, when more than one full-sized segment is unacknowledged
/// (`__tcp_ack_snd_check`: `rcv_nxt - rcv_wup > icsk_ack.rcv_mss`).
pub fn acks_at_once(unacked_bytes: u64, rcv_mss: u64) -> bool {
    unacked_bytes > rcv_mss
}

// ---------------------------------------------------------------------------------------------
// Timers (Linux)
// ---------------------------------------------------------------------------------------------

/// Shortest delayed-ACK timeout (`TCP_DELACK_MIN` = HZ/25); the timer wheel rounds its
/// expiry up by one jiffy, so it fires in (40 ms, 40 ms + 1 jiffy].
pub const DELACK_MIN: Duration = Duration::from_millis(40);
/// Longest delayed-ACK timeout (`TCP_DELACK_MAX` = HZ/5), further capped by
/// `max(srtt, TCP_DELACK_MIN)` and the socket's `TCP_DELACK_MAX_US` (`tcp_delack_max`).
pub const DELACK_MAX: Duration = Duration::from_millis(200);
/// Lowest retransmission timeout (`TCP_RTO_MIN` = HZ/5); also the floor of the zero-window
/// probe timer that sends corked data when nothing is in flight (`tcp_check_probe_timer`).
pub const RTO_MIN: Duration = Duration::from_millis(200);
/// Immediate ACKs a new connection gets before it may delay them (`TCP_MAX_QUICKACKS`), until
/// ping-pong mode starts (`inet_csk_inc_pingpong_cnt`).
pub const MAX_QUICKACKS: u32 = 16;

/// The release from which `TCP_PINGPONG_THRESH` is 1 again (the revert of "tcp: change
/// pingpong threshold to 3", which Linux 5.1 to 6.1 carry).
pub const PINGPONG_THRESH_1_SINCE: (u32, u32) = (6, 2);

/// `TCP_PINGPONG_THRESH`: ping-pong (delayed-ACK) mode from this many request/response turns
/// (`inet_csk_in_pingpong_mode`); 3 on Linux 5.1 to 6.1, 1 before and since.
pub const fn pingpong_threshold(since_6_2: bool) -> u8 {
    if since_6_2 {
        1
    } else {
        3
    }
}

// ---------------------------------------------------------------------------------------------
// Route metrics (Linux): the host-wide levers, set per route with rtnetlink (RTA_METRICS)
// ---------------------------------------------------------------------------------------------

/// `RTAX_RTO_MIN`: the route's floor of the retransmission timeout, in milliseconds
/// (`dst_metric_rtt` converts it to jiffies). `tcp_rto_min` takes it only when its bit is set
/// in `RTAX_LOCK` (`dst_metric_locked`), which is why `ip route ... rto_min` always locks it.
pub const RTAX_RTO_MIN: u16 = 13;
/// Since Linux 6.7 the delayed-ACK timeout is capped by the retransmission floor:
/// `tcp_delack_max()` returns `min(icsk_delack_max, max(tcp_rto_min(sk), 2) - 1)` jiffies
/// (commit "tcp: derive delack_max from rto_min"), so a route's locked `rto_min` caps the
/// delayed ACK of every connection on it. Before 6.7 `rto_min` moves only the RTO.
pub const DELACK_FOLLOWS_RTO_MIN_SINCE: (u32, u32) = (6, 7);

/// Jiffies of `ms` milliseconds as `msecs_to_jiffies` counts them: rounded up.
pub const fn msecs_to_jiffies(ms: u32, hz: u32) -> u32 {
    (ms as u64 * hz as u64).div_ceil(1000) as u32
}

/// The delayed-ACK cap, in jiffies, that a route's locked `rto_min` of `rto_min_ms` gives on a
/// kernel with [`DELACK_FOLLOWS_RTO_MIN_SINCE`]: `max(rto_min, 2) - 1` (`tcp_delack_max`).
pub const fn route_delack_cap_jiffies(rto_min_ms: u32, hz: u32) -> u32 {
    let rto = msecs_to_jiffies(rto_min_ms, hz);
    (if rto > 2 { rto } else { 2 }) - 1
}

/// The smallest `rto_min` tcpstall sets on a route, in milliseconds: the first whole
/// millisecond over one jiffy. It already gives the lowest cap `tcp_delack_max` allows (one
/// jiffy); anything lower would only let the retransmission timer fire after a single jiffy.
pub const fn route_rto_min_floor_ms(hz: u32) -> u32 {
    1000 / hz + 1
}

/// The largest `rto_min` tcpstall sets on a route for `--delack-max`: below the default floor
/// [`RTO_MIN`] (200 ms). A larger one would raise every retransmission timeout on the route and
/// cap nothing the delayed-ACK ceiling ([`DELACK_MAX`], 200 ms) does not already.
pub const ROUTE_RTO_MIN_CEILING_MS: u32 = RTO_MIN.as_millis() as u32 - 1;

// ---------------------------------------------------------------------------------------------
// Other systems' delayed ACKs (documentation; see docs/LAB.md for sources)
// ---------------------------------------------------------------------------------------------

/// Windows: 200 ms delayed-ACK timer (`TcpDelAckTicks` 2 × 100 ms), an ACK every second
/// segment (`TcpAckFrequency` 2).
pub const WINDOWS_DELACK: Duration = Duration::from_millis(200);
/// macOS: `net.inet.tcp.delayed_ack` with a 100 ms nominal timer that fires between 100 and
/// 200 ms (the fast timer ticks every 100 ms).
pub const MACOS_DELACK: Duration = Duration::from_millis(100);

/// The delayed-ACK timers of the systems above as a wait shows them once the path's round trip
/// is taken off, each with the stack it names: a hold released by that timer lasts this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelackTimer {
    /// The timer, in words (`Linux delayed ACK (40 ms + 1 jiffy)`).
    pub name: &'static str,
    /// The system whose timer it is.
    pub stack: &'static str,
    /// Shortest wait taken for it.
    pub low: Duration,
    /// Longest wait taken for it.
    pub high: Duration,
}

/// The delayed-ACK timers a wait may match, for a Linux kernel ticking every `jiffy`: Linux's
/// fires in (40 ms, 40 ms + 1 jiffy] (`TCP_DELACK_MIN`, rounded up by the timer wheel), with
/// [`TIMER_SLACK`] either side for scheduling; Windows' 200 ms ([`WINDOWS_DELACK`]); macOS's
/// between 100 and 200 ms ([`MACOS_DELACK`]). Windows is listed before macOS: a wait of 200 ms
/// is the commoner Windows timer, or macOS at its upper end.
pub fn delack_timers(jiffy: Duration) -> [DelackTimer; 3] {
    [
        DelackTimer {
            name: "Linux delayed ACK (40 ms + 1 jiffy)",
            stack: "linux",
            low: DELACK_MIN.saturating_sub(TIMER_SLACK),
            high: DELACK_MIN + jiffy + TIMER_SLACK,
        },
        DelackTimer {
            name: "Windows delayed ACK (200 ms)",
            stack: "windows",
            low: WINDOWS_DELACK.saturating_sub(TIMER_SLACK),
            high: WINDOWS_DELACK + 4 * TIMER_SLACK,
        },
        DelackTimer {
            name: "macOS delayed ACK (100-200 ms)",
            stack: "macos_bsd",
            low: MACOS_DELACK.saturating_sub(TIMER_SLACK),
            high: 2 * MACOS_DELACK,
        },
    ]
}

/// The timer `wait` (a wait above the path's round trip) matches, if any.
#[cfg(test)]
fn delack_timer_of(wait: Duration, jiffy: Duration) -> Option<DelackTimer> {
    delack_timers(jiffy)
        .into_iter()
        .find(|t| (t.low..=t.high).contains(&wait))
}

/// ACK delays (the path's round trip taken off, whole milliseconds) that name a peer's stack
/// from a capture, where neither the peer's jiffy nor its scheduling is known: Linux's timer
/// ([`DELACK_MIN`], 40 ms rounded up by up to a jiffy at HZ=100, and FreeBSD 13's 40 ms),
/// from [`STALL_THRESHOLD`] to 65 ms.
pub const LINUX_ACK_DELAY_MS: RangeInclusive<u64> = STALL_THRESHOLD.as_millis() as u64..=65;
/// macOS's timer ([`MACOS_DELACK`], firing between 100 and 200 ms) or older BSD's 100 ms, up
/// to where Windows' range starts.
pub const MACOS_ACK_DELAY_MS: RangeInclusive<u64> = 66..=179;
/// Windows' timer ([`WINDOWS_DELACK`], `TcpDelAckTicks` 2 × 100 ms), or macOS's at its upper
/// end, with 60 ms for a late tick and a busy peer.
pub const WINDOWS_ACK_DELAY_MS: RangeInclusive<u64> = 180..=260;

/// Scheduling and clock slack allowed around a timer's expiry when a wait is matched to it.
pub const TIMER_SLACK: Duration = Duration::from_millis(4);

/// A jiffy when the kernel's HZ is unknown: HZ=100's 10 ms, the coarsest Linux tick, so that
/// no Linux timer falls outside the ranges built from it.
pub const JIFFY_UNKNOWN_HZ: Duration = Duration::from_millis(10);

/// Widest spread of the waits one timer produces, beside its jiffy: a timer wheel fires within
/// a jiffy of its expiry, and each hold starts at a different point of the tick, so successive
/// waits differ by up to two jiffies; [`TIMER_SLACK`] more for scheduling. A server's own time
/// spreads wider.
pub fn timer_spread(jiffy: Duration) -> Duration {
    2 * jiffy.max(Duration::from_millis(2)) + TIMER_SLACK / 4
}

// ---------------------------------------------------------------------------------------------
// The project's judgements, derived from the rules above
// ---------------------------------------------------------------------------------------------

/// Slack under a timer's nominal value before a wait is taken for that timer: the timer wheel
/// and the capture clock may round down a little, and a 10 ms margin keeps "clean" and
/// "stalled" apart.
pub const STALL_MARGIN: Duration = Duration::from_millis(10);
/// A wait at least this long is a delayed-ACK stall: the 40 ms floor of the Linux timer
/// ([`DELACK_MIN`]) less [`STALL_MARGIN`]. The lab's `stalled` column and the detector's
/// delayed-versus-ordinary ACK test both use it.
pub const STALL_THRESHOLD: Duration = DELACK_MIN.saturating_sub(STALL_MARGIN);
/// Below this a wait is not a stall at all (the project's "clean" bound).
pub const CLEAN_BOUND: Duration = STALL_MARGIN;
/// Shortest gap taken for the cork timer: [`RTO_MIN`] less 5 ms of timer slack.
pub const CORK_TIMER_MIN: Duration = Duration::from_millis(195);
/// Longest gap taken for the cork timer on a near-zero RTT path (measured 204-212 ms on
/// loopback at HZ=250); the path's RTT is added, as the RTO grows with it (RFC 6298 §2).
pub const CORK_TIMER_MAX: Duration = Duration::from_millis(260);

/// The shortest retransmission timeout on a path whose round trip is `srtt`: `srtt + rttvar`
/// with `rttvar` never below `TCP_RTO_MIN` (`__tcp_set_rto`, `tcp_rtt_estimator`), less the
/// timer slack of [`CORK_TIMER_MIN`]. A timer-driven resend sooner than this was not the
/// retransmission timer: on Linux, the tail-loss probe (`tcp_schedule_loss_probe`: 2·srtt +
/// 2 jiffies with more than one packet out, RFC 8985 §7.2), or RACK's reordering timer.
pub const fn rto_floor(srtt: Duration) -> Duration {
    CORK_TIMER_MIN.saturating_add(srtt)
}

/// Duplicate ACKs that start fast retransmit and loss recovery (RFC 5681 §3.2 DupThresh;
/// Linux `tp->reordering`'s initial `TCP_FASTRETRANS_THRESH`).
pub const DUP_THRESH: u8 = 3;

/// The largest receive window a TCP may offer, 2^30 bytes (RFC 7323 §2.3, window scale 14):
/// what one side sends and the other acknowledges never runs farther apart than this.
pub const MAX_WINDOW: u32 = 1 << 30;

/// Slack of a capture clock and of scheduling when a segment is judged against the path: a
/// segment reaching the capture point later than a packet it answers by less than the round
/// trip to its sender, less this, cannot have been sent in answer to it.
pub const PATH_SLACK: Duration = Duration::from_millis(1);
/// Data Nagle held leaves in the softirq that processes the releasing ACK (`tcp_rcv_established`
/// → `tcp_ack` → `tcp_data_snd_check`), before any application can read what that packet
/// carried. Measured on loopback (6.18, 2 cores busy with other work): releases 3-7 µs after
/// the packet; a Python client answering a reply 8 µs and more, the probe's next batch after
/// its replies 16 µs and more (a wake-up, then a read and a write). A capture on the sender's
/// host sees a release by the peer's *data* within this bound; a later segment is taken for
/// the application's answer. The bound is not a proof (a process awake in its event loop may
/// answer as fast): the rule also asks for writes gathered behind the small segment.
pub const SOFTIRQ_RELEASE: Duration = Duration::from_micros(8);
/// The first retransmission timeout of a connection before any round trip is timed: a SYN
/// (and a SYN-ACK) unanswered is resent after it (`TCP_TIMEOUT_INIT`, RFC 6298 §2.1 and its
/// appendix; `tcp_connect`, `inet_csk_reqsk_queue_hash_add`), doubling each time. A connect
/// that took this long waited for a SYN resend.
pub const TIMEOUT_INIT: Duration = Duration::from_secs(1);
/// A listener whose accept queue is full (`sk_acceptq_is_full`: more children waiting for
/// `accept()` than the backlog given to `listen()`, itself capped by `net.core.somaxconn`)
/// drops new SYNs (`tcp_conn_request`) and the handshake's ACK (`tcp_check_req` →
/// `tcp_v4_syn_recv_sock` fails; with `net.ipv4.tcp_abort_on_overflow` 0, the default, the
/// request stays in SYN_RECV and the ACK, with any data it carries, is dropped). Both count
/// `TcpExt: ListenOverflows` and `ListenDrops` in the listener's network namespace.
pub const LISTEN_OVERFLOWS: &str = "ListenOverflows";
/// See [`LISTEN_OVERFLOWS`]: also counts other drops at a listener.
pub const LISTEN_DROPS: &str = "ListenDrops";
/// The ceiling of every listener's backlog (`__sys_listen` clamps it to this sysctl).
pub const SOMAXCONN_SYSCTL: &str = "/proc/sys/net/core/somaxconn";
/// A capture whose round trip to a host is below this was taken on that host.
pub const ON_HOST_LEG: Duration = Duration::from_micros(200);

/// Nanoseconds of `d`, for the detector's capture-time arithmetic.
pub const fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ranges that name a peer's stack follow one another without a gap and hold each
    /// stack's nominal timer.
    #[test]
    fn ack_delay_ranges_hold_their_timers() {
        let ms = |d: Duration| d.as_millis() as u64;
        assert!(LINUX_ACK_DELAY_MS.contains(&ms(DELACK_MIN)));
        assert!(MACOS_ACK_DELAY_MS.contains(&ms(MACOS_DELACK)));
        assert!(WINDOWS_ACK_DELAY_MS.contains(&ms(WINDOWS_DELACK)));
        assert_eq!(LINUX_ACK_DELAY_MS.end() + 1, *MACOS_ACK_DELAY_MS.start());
        assert_eq!(MACOS_ACK_DELAY_MS.end() + 1, *WINDOWS_ACK_DELAY_MS.start());
        assert_eq!(*LINUX_ACK_DELAY_MS.start(), ms(STALL_THRESHOLD));
    }

    #[test]
    fn sub_mss_is_the_kernels_remainder_test() {
        assert!(is_sub_mss(100, 1448));
        assert!(!is_sub_mss(1448, 1448));
        // A GSO super-packet ending in a partial segment (memcached's 2623 B rest).
        assert!(is_sub_mss(2623, 1448));
        assert!(!is_sub_mss(2896, 1448));
        assert!(!is_sub_mss(0, 1448));
    }

    #[test]
    fn thresholds_follow_the_timers() {
        assert_eq!(STALL_THRESHOLD, Duration::from_millis(30));
        assert_eq!(CLEAN_BOUND, Duration::from_millis(10));
        assert_eq!(payload_mss(1460, true), 1448);
        assert_eq!(payload_mss(1460, false), 1460);
        assert_eq!(assumed_mss(false, true), LOOPBACK_MSS_V4);
    }

    #[test]
    fn route_rto_min_caps_the_delayed_ack_in_jiffies() {
        // HZ=250: 5 ms is 2 jiffies, so the cap is 1 jiffy (4 ms).
        assert_eq!(msecs_to_jiffies(5, 250), 2);
        assert_eq!(route_delack_cap_jiffies(5, 250), 1);
        assert_eq!(route_delack_cap_jiffies(1, 1000), 1);
        assert_eq!(route_delack_cap_jiffies(20, 1000), 19);
        assert_eq!(route_rto_min_floor_ms(250), 5);
        assert_eq!(route_rto_min_floor_ms(1000), 2);
        assert_eq!(route_rto_min_floor_ms(100), 11);
        assert_eq!(ROUTE_RTO_MIN_CEILING_MS, 199);
    }

    #[test]
    fn waits_match_the_timers_of_their_systems() {
        let jiffy = Duration::from_millis(4);
        let of = |ms| delack_timer_of(Duration::from_millis(ms), jiffy).map(|t| t.stack);
        assert_eq!(of(44), Some("linux"));
        assert_eq!(of(48), Some("linux"));
        assert_eq!(of(60), None);
        assert_eq!(of(200), Some("windows"));
        assert_eq!(of(150), Some("macos_bsd"));
        assert_eq!(of(25), None);
        assert_eq!(timer_spread(jiffy), Duration::from_millis(9));
    }
}
