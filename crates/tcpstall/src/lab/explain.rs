//! The one-line explanation of a row, as a typed value: what the row is about ([`Why`]) and
//! the sizes in effect ([`Geometry`]), written out by `Display`. The text and the row's
//! expected outcome come from the same geometry, so a row's text never contradicts its
//! `expected` column, whatever `--size` and `--mss` say.

use std::fmt;

use super::expect::{Fit, Geometry, Hold, WireOutcome};
use super::scenarios::{Expectation, Variant};
use crate::exchange::protocol::MEMCACHED_FIRST_WRITE_CAP;
use crate::Side;

/// What a row's explanation says: the catalogue's reason for a row, or, for a split row
/// whose writes no longer have the shape it is about, what the geometry makes of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// Echo: write-write-read, the tail held until the delayed ACK.
    EchoSplit,
    /// Echo: the line in one write.
    EchoSingle,
    /// Echo: one gathering `writev`.
    Writev,
    /// Echo: TCP_NODELAY on the client.
    ClientNodelay,
    /// Echo: `BufWriter` flushes, still write-write-read.
    Flush,
    /// Echo: TCP_CORK around the writes.
    Cork,
    /// Echo: `send(MSG_MORE)` for the head.
    MsgMore,
    /// Echo: the server re-arms TCP_QUICKACK.
    ServerQuickack,
    /// Echo: a new connection per request.
    EchoShort,
    /// HTTP: header and body in two writes.
    HttpSplit,
    /// HTTP: header and body in one write.
    HttpSingle,
    /// HTTP: TCP_NODELAY on the accepted socket.
    HttpNodelay,
    /// HTTP: a new connection per request, closed by the server.
    HttpShort,
    /// memcached: the reply cut in two writes below one MSS each.
    MemcachedSplit,
    /// memcached: the client re-arms TCP_QUICKACK.
    ClientQuickack,
    /// The side that ACKs the writer's first part caps its delayed ACK (TCP_DELACK_MAX_US).
    DelackCap,
    /// The ACKing side's route to the writer carries `quickack 1` (`fix --route --quickack`).
    RouteQuickack,
    /// The ACKing side's route to the writer carries a locked `rto_min` that caps its delayed
    /// ACK (`fix --route --delack-max`).
    RouteDelackCap,
    /// memcached: TCP_NODELAY on the accepted socket.
    AcceptedNodelay,
    /// Stream with Nagle on.
    StreamNagle,
    /// Stream with TCP_NODELAY.
    StreamNodelay,
    /// Inherit: TCP_NODELAY on the listener only.
    ListenerNodelay,
    /// Inherit: TCP_QUICKACK=0 on the listener only.
    ListenerQuickack,
    /// The reply fits memcached's first write: one write.
    ReplyInFirstWrite,
    /// Pipeline/concurrent: each request its own write, Nagle on.
    PipelineNagle,
    /// Pipeline/concurrent: TCP_NODELAY on the client.
    PipelineNodelay,
    /// Pipeline/concurrent: the batch in one gathering `writev`.
    PipelineGather,
    /// Pipeline/concurrent: the client fixed, the server's replies each its own write with
    /// Nagle on.
    PipelineServerNagle,
    /// The first write fills at least one full segment.
    FirstWriteFull,
    /// The second write starts with a full segment.
    SecondWriteFull,
}

/// A row's explanation for the sizes in effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Explanation {
    /// What it says.
    pub why: Why,
    /// The sizes it names.
    pub geometry: Geometry,
    /// The end that writes the message.
    pub writer: Side,
}

impl Explanation {
    /// The explanation of `variant` with its message `geometry`: the catalogue's when the
    /// message has the shape the row is about, otherwise why this shape behaves differently.
    pub fn of(variant: &Variant, geometry: Geometry) -> Explanation {
        let workload = variant.workload;
        // Only memcached's reply can be one write: an echo line always leaves its `\r\n`
        // for the second write, an HTTP reply its body.
        // A capped delayed ACK is still waited for: its rows follow the geometry as a split does.
        let timed = variant.expected == Expectation::Stall || variant.caps_delayed_ack();
        // A batched row's text is about its batch, whatever the geometry.
        let fixed = workload.is_one_way() || workload.batches().is_some();
        let why = match (fixed, timed, geometry.fit()) {
            (true, _, _) => variant.why,
            (false, _, Fit::OneWrite) => Why::ReplyInFirstWrite,
            (_, false, _) => variant.why,
            (_, true, Fit::FirstFull) => Why::FirstWriteFull,
            (_, true, Fit::SecondFull) => Why::SecondWriteFull,
            (_, true, _) => variant.why,
        };
        Explanation {
            why,
            geometry,
            writer: workload.writer,
        }
    }
}

/// "one segment", or "N segments of at most M B".
struct Segments<'a>(&'a Geometry);

impl fmt::Display for Segments<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.segments() {
            1 => f.write_str("one segment"),
            n => write!(f, "{n} segments of at most {} B", self.0.mss),
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let g = &self.geometry;
        let (first, second, message, mss) = (g.first, g.second, g.message(), g.mss);
        let segments = Segments(g);
        let (writer, peer) = match self.writer {
            Side::Client => ("the client", "server"),
            Side::Server => ("the server", "client"),
        };
        match self.why {
            Why::EchoSplit => write!(f, "write-write-read: the {second} B tail waits in tcp_nagle_check for the ACK of the {first} B head (both below one {mss} B segment), which the server delays (ping-pong mode) until the delayed-ACK timer"),
            Why::EchoSingle => write!(f, "one write, {segments}: full segments are never held and no sub-MSS segment is in flight ahead of the last, so nothing waits; the reply carries the ACK"),
            Why::Writev => write!(f, "one gathering writev ({segments}): same as a single write without the copy"),
            Why::ClientNodelay => write!(f, "client TCP_NODELAY: tcp_nagle_test passes, the {second} B tail leaves right after the {first} B head"),
            Why::Flush => write!(f, "flush() only hands each part to the kernel: still write-write-read, Nagle holds the {second} B tail behind the unacknowledged {first} B head (both below one {mss} B segment) until the delayed ACK (doc 003)"),
            Why::Cork => write!(f, "TCP_CORK gathers both parts; uncorking pushes all {message} B at once ({segments})"),
            Why::MsgMore => write!(f, "send(MSG_MORE) keeps the {first} B head queued; the second send pushes all {message} B at once ({segments})"),
            Why::ServerQuickack => write!(f, "server re-arms TCP_QUICKACK after every read: it ACKs the {first} B head at once, which releases the {second} B tail"),
            Why::EchoShort => write!(f, "one request per connection: a new connection is in quick-ACK mode, the server ACKs the {first} B head at once"),
            Why::HttpSplit => write!(f, "write(header) write(body): the {second} B body waits for the ACK of the {first} B header (both below one {mss} B segment), which the client delays (ping-pong) until the timer (doc 004, `ab -k`)"),
            Why::HttpSingle => write!(f, "header and body in one write of {message} B ({segments}): nothing held"),
            Why::HttpNodelay => f.write_str("TCP_NODELAY on the accepted socket (nginx's tcp_nodelay): the body leaves right after the header"),
            Why::HttpShort => f.write_str("new connection per request (`ab` without -k): the server closes after the body, and closing pushes the held body out with the FIN (tcp_send_fin); the client, in quick-ACK mode, ACKs the header at once anyway"),
            Why::MemcachedSplit => write!(f, "the server writes {first} B then a {second} B rest, both below one {mss} B segment: the rest waits in tcp_nagle_check for the ACK of the sub-MSS first write (Minshall), which the client delays (ping-pong) until the timer"),
            Why::ClientQuickack => write!(f, "client re-arms TCP_QUICKACK after each receive: it ACKs the first {first} B at once, the {second} B rest follows (doc 002's client fix)"),
            Why::DelackCap => write!(f, "the {peer} caps its delayed ACK once (TCP_DELACK_MAX_US on its socket, at the kernel's floor rounded up to a millisecond): {writer}'s {second} B second write still waits for the ACK of its {first} B first, but only about the cap (kept in whole jiffies, plus timer slack) instead of the 40 ms timer; lasting, unlike TCP_QUICKACK, at the cost of more ACKs (what `tcpstall fix PID --delack-max` sets)"),
            Why::RouteQuickack => write!(f, "the {peer}'s route to {writer} carries quickack 1 (RTAX_QUICKACK, what `tcpstall fix --route DEST --quickack` sets, here in the lab's namespace): every connection of that route stays in quick-ACK mode (tcp_in_quickack_mode), so the {first} B head is ACKed at once and the {second} B tail follows; lasting and host-wide, at the cost of an ACK per segment"),
            Why::RouteDelackCap => write!(f, "the {peer}'s route to {writer} carries a locked rto_min just over one jiffy (what `tcpstall fix --route DEST --delack-max` sets, here in the lab's namespace): tcp_delack_max caps the delayed ACK one jiffy under it (Linux 6.7+), so {writer}'s {second} B second write waits about that for the ACK of its {first} B first instead of the 40 ms timer; the route's retransmission floor drops with it"),
            Why::AcceptedNodelay => write!(f, "server TCP_NODELAY on the accepted socket: the {second} B rest leaves right after the first {first} B (doc 002's server fix)"),
            Why::StreamNagle => f.write_str("Nagle on: a write waits only while an earlier sub-MSS segment is unacknowledged; on loopback the ACK (the receiver never sends data, so it stays in quick-ACK mode) is back within microseconds, so little is merged; doc 001's 22% needs a real RTT"),
            Why::StreamNodelay => f.write_str("TCP_NODELAY: every write leaves at once unless autocorking defers it (tcp_should_autocork: an earlier skb of the socket still queued below TCP); lo has no qdisc, so that is rare"),
            Why::ListenerNodelay => write!(f, "HTTP header and body in two writes ({first} B + {second} B), TCP_NODELAY set on the listener only: accepted sockets are copies of it (nonagle included), so no stall"),
            Why::ListenerQuickack => write!(f, "echo split ({first} B + {second} B), TCP_QUICKACK=0 (ping-pong) set on the listener only: not carried over to accepted sockets, and quick-ACK is no lasting setting anyway; ping-pong starts after the first turn and the split request stalls"),
            Why::PipelineNagle => write!(f, "each request its own write, Nagle on: the first {first} B request leaves, the next {second} B wait in tcp_nagle_check behind it (Minshall: a sub-MSS segment unacknowledged) and leave together when its ACK comes; the server answers at once (TCP_NODELAY, as redis), so the ACK rides on the first reply: one round trip more per batch, no timer"),
            Why::PipelineNodelay => write!(f, "client TCP_NODELAY: every request leaves as written ({message} B per batch); one round trip per batch"),
            Why::PipelineGather => write!(f, "the batch in one gathering writev of {message} B ({segments}): nothing behind an unacknowledged sub-MSS segment, one round trip per batch"),
            Why::PipelineServerNagle => write!(f, "the client sends its batch in one writev of {message} B, but the server writes each {first} B reply apart with Nagle on: the first reply leaves alone, the others wait behind it in tcp_nagle_check; the client, its batch out and nothing left to send, is in ping-pong mode and has one small segment to ACK (a second would make tcp_cleanup_rbuf ACK at once, ICSK_ACK_PUSHED2), so the odd reply waits for its delayed-ACK timer"),
            Why::ReplyInFirstWrite => write!(f, "the {message} B reply fits memcached's {MEMCACHED_FIRST_WRITE_CAP} B first write: one write ({segments}), nothing left behind for Nagle to hold"),
            Why::FirstWriteFull => write!(f, "{writer} writes {first} B then {second} B, and the first write fills at least one {mss} B segment: Nagle waits only behind a sub-MSS segment (tcp_minshall_check), and with more than one MSS unacknowledged the {peer} ACKs at once (__tcp_ack_snd_check), so no timer is waited for"),
            Why::SecondWriteFull => write!(f, "{writer} writes {first} B then {second} B: the second write starts with a full {mss} B segment that Nagle never holds; with more than one MSS unacknowledged the {peer} ACKs at once (__tcp_ack_snd_check), releasing the tail"),
        }
    }
}

/// What a row costs over an emulated path (`lab --rtt`), added to its explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathNote {
    /// A one-way stream: the ACK clock merges writes.
    Stream,
    /// Requests in flight: what a batch costs.
    Batch(Hold),
    /// The expected outcome's hold.
    Hold(Hold),
}

impl PathNote {
    /// The note for `variant` with its expected `outcome`.
    pub fn of(variant: &Variant, outcome: &WireOutcome) -> PathNote {
        if variant.workload.is_one_way() {
            PathNote::Stream
        } else if variant.workload.batches().is_some() {
            PathNote::Batch(outcome.hold)
        } else {
            PathNote::Hold(outcome.hold)
        }
    }
}

impl fmt::Display for PathNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PathNote::Stream => "over a path the ACK of a sub-MSS segment takes an RTT, and with Nagle the writes made meanwhile leave merged into full segments; with --rate, packets wait in the tbf qdisc still charged to the socket, so autocorking (tcp_should_autocork) merges writes even with TCP_NODELAY",
            PathNote::Batch(Hold::ForAck(Side::Client)) => "over a path: 2 RTT per batch, no timer: the commands after the first leave when the first reply brings its ACK, then cross the path with their replies",
            PathNote::Batch(Hold::ForDelayedAck(_)) => "over a path: 2 RTT + the delayed-ACK timer per batch: the batch and the first reply cross the path, the client's ACK waits for its timer, then it and the held replies cross",
            PathNote::Batch(Hold::Nothing) => "over a path: 1 RTT per batch, nothing held",
            PathNote::Batch(_) => "over a path: 2 RTT per batch, no timer: the held writes wait for an ACK sent at once",
            PathNote::Hold(Hold::ForDelayedAck(_)) => "over a path: 2 RTT + the delayed-ACK timer (the first part's ACK waits for the timer, then the tail and the reply each cross the path)",
            PathNote::Hold(Hold::ForCappedAck(_)) => "over a path: 2 RTT + the capped delayed ACK (the first part's ACK waits up to the cap, then the tail and the reply each cross the path)",
            PathNote::Hold(Hold::ForAck(_)) => "over a path: 2 RTT, no timer: the tail still waits for the first part's ACK, sent at once, to cross the path",
            PathNote::Hold(Hold::Nothing) => "over a path: 1 RTT, nothing held",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::expect::SegmentRules;
    use crate::lab::scenarios::catalogue_row as row;

    const RULES: SegmentRules = SegmentRules { timestamps: true };

    fn explain(v: &Variant, size: usize, mss: Option<u32>) -> String {
        let sizes = RULES.sizes_of(v, Some(size), mss);
        Explanation::of(v, Geometry::of(v, &sizes)).to_string()
    }

    fn stalls(v: &Variant, size: usize, mss: Option<u32>) -> bool {
        WireOutcome::of(v, &RULES.sizes_of(v, Some(size), mss)).stalls()
    }

    #[test]
    fn memcached_text_follows_the_reply_it_explains() {
        let value_100 = row("memcached", "value-100");
        // --size 2400: 1400 B then 1023 B, both below 1448 B: held, not "one write".
        let text = explain(value_100, 2400, Some(1460));
        assert!(stalls(value_100, 2400, Some(1460)));
        assert!(text.contains("1400 B then a 1023 B rest"), "{text}");
        assert!(!text.contains("one write"), "{text}");
        // --mss 32767: the 2623 B rest of a 4000 B value is below one MSS, so it is held.
        let value_4000 = row("memcached", "value-4000");
        let text = explain(value_4000, 4000, Some(32_767));
        assert!(stalls(value_4000, 4000, Some(32_767)));
        assert!(!text.contains("full"), "{text}");
        // --mss 88: the 1400 B first write is many full segments; nothing waits for a timer.
        let value_1400 = row("memcached", "value-1400");
        let text = explain(value_1400, 1400, Some(88));
        assert!(!stalls(value_1400, 1400, Some(88)));
        assert!(text.contains("fills at least one 76 B segment"), "{text}");
        // At MSS 1460 the 4000 B value's rest starts with a full segment.
        let text = explain(value_4000, 4000, Some(1460));
        assert!(text.contains("starts with a full 1448 B segment"), "{text}");
        assert!(text.starts_with("the server writes") && text.contains("the client ACKs"));
        let text = explain(value_4000, 100, Some(1460));
        assert!(
            text.starts_with(
                "the 122 B reply fits memcached's 1400 B first write: one write (one segment)"
            ),
            "{text}"
        );
        // The fixes keep their own text, and a reply in one write has nothing to fix.
        // A capped delayed ACK matters only while both writes are below one MSS.
        let capped = row("memcached", "delack-max-1400");
        assert!(explain(capped, 1400, Some(1460)).contains("about the cap"));
        assert!(explain(capped, 4000, Some(1460)).contains("starts with a full 1448 B segment"));
        let quickack = row("memcached", "quickack-1400");
        assert!(explain(quickack, 1400, Some(1460)).contains("ACKs the first 1400 B at once"));
        assert!(explain(quickack, 100, Some(1460)).contains("one write"));
    }

    #[test]
    fn echo_text_follows_the_line_it_explains() {
        let split = row("echo", "split");
        let text = explain(split, 13, None);
        assert!(
            text.contains("7 B tail") && text.contains("6 B head"),
            "{text}"
        );
        // --mss 88 --size 65536: a 32767 B head is hundreds of full segments.
        let text = explain(split, 65_536, Some(88));
        assert!(!stalls(split, 65_536, Some(88)));
        assert!(
            text.starts_with("the client writes 32767 B then 32769 B"),
            "{text}"
        );
        assert!(text.contains("the server ACKs at once"), "{text}");
        let single = row("echo", "single");
        assert!(explain(single, 13, None).contains("one write, one segment:"));
        assert!(explain(single, 65_536, Some(88)).contains("863 segments of at most 76 B"));
        // A stream row's text does not depend on the geometry.
        let stream = row("stream", "nagle-5ms");
        assert_eq!(
            explain(stream, 100_000, Some(88)),
            explain(stream, 1200, None)
        );
    }

    #[test]
    fn path_notes_follow_the_hold() {
        let note = |scenario: &str, name: &str| {
            let v = row(scenario, name);
            PathNote::of(v, &WireOutcome::of(v, &RULES.sizes_of(v, None, None))).to_string()
        };
        assert!(note("echo", "split").starts_with("over a path: 2 RTT + the delayed-ACK timer"));
        assert!(note("echo", "quickack").starts_with("over a path: 2 RTT, no timer"));
        assert_eq!(note("echo", "single"), "over a path: 1 RTT, nothing held");
        assert!(note("stream", "nagle-0ms").contains("autocorking"));
        assert!(note("pipeline", "nagle").starts_with("over a path: 2 RTT per batch, no timer"));
        assert!(note("concurrent", "server-nagle").contains("delayed-ACK timer per batch"));
        assert_eq!(
            note("pipeline", "writev"),
            "over a path: 1 RTT per batch, nothing held"
        );
    }

    #[test]
    fn batched_rows_name_their_sizes_and_the_detector_kind() {
        let nagle = row("pipeline", "nagle");
        let text = explain(nagle, 16, None);
        assert!(
            text.contains("first 16 B request") && text.contains("next 240 B"),
            "{text}"
        );
        let text = explain(row("concurrent", "server-nagle"), 16, None);
        assert!(text.contains("one writev of 64 B") && text.contains("timer"));
        let kind = |scenario: &str, name: &str| {
            let v = row(scenario, name);
            WireOutcome::of(v, &RULES.sizes_of(v, None, None)).detector_kind(v)
        };
        assert_eq!(kind("pipeline", "nagle"), Some("nagle_ack_paced"));
        assert_eq!(
            kind("concurrent", "server-nagle"),
            Some("nagle_delayed_ack")
        );
        assert_eq!(kind("pipeline", "nodelay"), None);
        // The one-request rows keep their own detector check.
        assert_eq!(kind("echo", "split"), None);
        // The pacing verdict needs rounds; a one-per-request kind does not.
        let min = crate::lab::own_traffic::MIN_PACED_ROUNDS;
        assert_eq!(min, 51, "the --requests help and docs/LAB.md say 51");
        let checked = crate::lab::own_traffic::kind_checked;
        assert_eq!(checked("nagle_ack_paced", min - 1), None);
        assert_eq!(checked("nagle_ack_paced", min), Some("nagle_ack_paced"));
        assert_eq!(checked("nagle_delayed_ack", 1), Some("nagle_delayed_ack"));
    }
}
