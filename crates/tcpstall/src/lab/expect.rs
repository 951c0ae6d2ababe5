//! The wire outcome a row expects, as packetdrill scripts state theirs: how its message's
//! writes meet the segment size ([`Geometry`]), which end's write waits and for what
//! ([`Hold`]), and the data segments a request costs ([`WireOutcome`]). Everything here is
//! computed from the catalogue and [`crate::tcp_rules`]; the running kernel's one input, whether
//! segments carry timestamps, is read once per run ([`SegmentRules::read`]).

use super::scenarios::{Expectation, Variant};
use super::server::ServerNodelay;
use crate::detect::StallKind;
use crate::host::kernel::read_sysctl_u64;
use crate::tcp_rules::{self, LOOPBACK_MSS_V4};
use crate::Side;

/// What the running kernel puts in every segment besides payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentRules {
    /// Whether connections negotiate the timestamp option (RFC 7323), which takes
    /// [`tcp_rules::TIMESTAMP_OPTION_LEN`] bytes of every segment.
    pub timestamps: bool,
}

impl SegmentRules {
    /// Reads `net.ipv4.tcp_timestamps` (on unless it reads 0).
    pub fn read() -> SegmentRules {
        SegmentRules {
            timestamps: read_sysctl_u64("/proc/sys/net/ipv4/tcp_timestamps") != Some(0),
        }
    }

    /// The sizes `variant` runs with: `size` and `mss` (from `--size`, `--mss`) replace the
    /// row's own.
    pub fn sizes_of(self, variant: &Variant, size: Option<usize>, mss: Option<u32>) -> RowSizes {
        let mss = mss.or(variant.mss);
        RowSizes {
            size: size.unwrap_or(variant.size),
            mss,
            payload_mss: tcp_rules::payload_mss(mss.unwrap_or(LOOPBACK_MSS_V4), self.timestamps)
                as usize,
        }
    }
}

/// The sizes a row runs with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowSizes {
    /// Payload size (echo line, HTTP body, memcached value, stream write), in bytes.
    pub size: usize,
    /// TCP_MAXSEG on both ends, if any (`None`: loopback's own MSS).
    pub mss: Option<u32>,
    /// Payload bytes of a full segment: the MSS in effect less TCP options
    /// (`tcp_current_mss`).
    pub payload_mss: usize,
}

/// The message a row is about, in the two writes its writer makes, against the segment size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Geometry {
    /// Bytes of the first write (echo head, HTTP header block, memcached's first 1400 B).
    pub first: usize,
    /// Bytes of the second write; 0 when the message goes out in one write.
    pub second: usize,
    /// Payload bytes of a full segment.
    pub mss: usize,
}

/// How the two writes of a message meet the MSS, which decides whether Nagle can hold the
/// second one until a delayed ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fit {
    /// The whole message is one write: nothing is left behind for Nagle to hold.
    OneWrite,
    /// The first write fills at least one full segment.
    FirstFull,
    /// The first write is sub-MSS, the second fills at least one full segment.
    SecondFull,
    /// Both writes are below one MSS: the second waits for the ACK of the first.
    BothSmall,
}

impl Geometry {
    /// The geometry of `variant`'s message at `sizes`.
    pub fn of(variant: &Variant, sizes: &RowSizes) -> Geometry {
        let [first, second] = (variant.workload.message)(sizes.size, variant.per_request());
        Geometry {
            first,
            second,
            mss: sizes.payload_mss,
        }
    }

    /// Bytes of the whole message.
    pub fn message(&self) -> usize {
        self.first + self.second
    }

    /// Segments `bytes` written at once make (0 for nothing).
    pub fn segments_of(&self, bytes: usize) -> usize {
        bytes.div_ceil(self.mss.max(1))
    }

    /// Segments the whole message makes when written at once (at least one).
    pub fn segments(&self) -> usize {
        self.segments_of(self.message()).max(1)
    }

    /// How the writes meet the MSS. Nagle holds a segment only while an earlier **sub-MSS**
    /// segment is unacknowledged (`tcp_nagle_check` → `tcp_minshall_check`), never a full one:
    /// the second write's full segments leave at once, and with the first write they are more
    /// than one MSS unacknowledged, which the receiver ACKs at once
    /// ([`tcp_rules::acks_at_once`]). So the second write waits for the delayed-ACK timer only
    /// when both writes are below one MSS.
    pub fn fit(&self) -> Fit {
        let mss = self.mss.max(1);
        let unacked = self.first + self.second / mss * mss;
        if self.second == 0 {
            Fit::OneWrite
        } else if self.first >= self.mss {
            Fit::FirstFull
        } else if tcp_rules::acks_at_once(unacked as u64, mss as u64) {
            Fit::SecondFull
        } else {
            Fit::BothSmall
        }
    }
}

/// The detector's name for Nagle holds released by ordinary ACKs, aggregated per flow.
pub(crate) const ACK_PACED_KIND: &str = "nagle_ack_paced";

/// Which end's write waits, and for what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// Nothing waits: the exchange takes one round trip.
    Nothing,
    /// This end's second write waits for the ACK of its first, which the peer sends at once
    /// (more than one MSS unacknowledged, quick-ACK mode, TCP_QUICKACK): two round trips, no
    /// timer.
    ForAck(Side),
    /// This end's second write waits for the ACK of its first, which the peer delays until
    /// its delayed-ACK timer: a stall.
    ForDelayedAck(Side),
    /// This end's second write waits for the ACK of its first, which the peer delays but
    /// only up to its TCP_DELACK_MAX_US cap (`tcp_delack_max()` bounds the timer set in
    /// `tcp_send_delayed_ack`): a hold of about the cap, shorter than the stall threshold.
    ForCappedAck(Side),
}

/// What a row should show on the wire, per request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireOutcome {
    /// Which end's write waits.
    pub hold: Hold,
    /// Data segments of both ends per request (the stream: per write), as `TCP_INFO`'s
    /// `tcpi_data_segs_out` counts them when every write leaves on its own, as on loopback.
    /// Fewer when writes merge: the stream's Nagle rows behind an unacknowledged segment, a
    /// write still waiting for the congestion window over a path (`tcp_sendmsg` appends the
    /// next write to an unsent skb).
    pub segments_per_request: usize,
}

impl WireOutcome {
    /// The outcome of `variant` at `sizes`.
    pub fn of(variant: &Variant, sizes: &RowSizes) -> WireOutcome {
        let geometry = Geometry::of(variant, sizes);
        let workload = variant.workload;
        if let Some((depth, _)) = workload.batches() {
            return Self::of_batch(variant, &geometry, depth);
        }
        let writer = workload.writer;
        let (strategy, nagle) = variant.writes_of(writer);
        let message = if strategy.writes_parts_apart() {
            geometry.segments_of(geometry.first) + geometry.segments_of(geometry.second)
        } else {
            geometry.segments_of(geometry.message())
        };
        let answer = (workload.answer)(sizes.size, variant.per_request());
        // The second write waits when the first ended in a partial segment, which the kernel
        // remembers as `snd_sml` (`tcp_minshall_update`) and Nagle waits behind
        // (`tcp_minshall_check`), unless a close pushes it out with the FIN.
        let waits_behind_first = strategy.writes_parts_apart()
            && nagle
            && geometry.second > 0
            && tcp_rules::is_sub_mss(geometry.first as u64, geometry.mss as u64);
        let pushed_by_fin = workload.closes_when_asked && variant.per_request();
        let held = waits_behind_first && !workload.is_one_way() && !pushed_by_fin;
        let hold = match (held, variant.expected, geometry.fit()) {
            (false, _, _) => Hold::Nothing,
            (true, _, Fit::BothSmall) if variant.caps_delayed_ack() => Hold::ForCappedAck(writer),
            (true, Expectation::Stall, Fit::BothSmall) => Hold::ForDelayedAck(writer),
            (true, _, _) => Hold::ForAck(writer),
        };
        WireOutcome {
            hold,
            segments_per_request: message + geometry.segments_of(answer),
        }
    }

    /// The outcome of a batched row (`depth` requests in flight per connection), per batch of
    /// one connection. Every request after the first waits in `tcp_nagle_check` behind the
    /// unacknowledged sub-MSS first (Minshall) when the client writes them apart with Nagle
    /// on; the server answers each at once, so the ACK rides on the first reply: an ordinary
    /// ACK, one round trip. A server writing each reply apart with Nagle on holds every reply
    /// after the first until the client ACKs it, and the client, its batch out and nothing
    /// left to send, is in ping-pong mode: its ACK waits for the delayed-ACK timer (the row
    /// says so with [`Expectation::Stall`]).
    fn of_batch(variant: &Variant, geometry: &Geometry, depth: usize) -> WireOutcome {
        let small = |bytes: usize| tcp_rules::is_sub_mss(bytes as u64, geometry.mss as u64);
        let (client_write, client_nagle) = variant.writes_of(Side::Client);
        let client_held = client_write.writes_parts_apart()
            && client_nagle
            && geometry.second > 0
            && small(geometry.first);
        let server_nagle = variant.server_nodelay == ServerNodelay::Off;
        let server_held = server_nagle && depth > 1 && small(geometry.first);
        // A first reply of more than one full segment is ACKed at once
        // (`__tcp_ack_snd_check`), timer or not.
        let acked_at_once = geometry.first > geometry.mss;
        let hold = match (server_held, variant.expected, client_held) {
            (true, Expectation::Stall, _) if !acked_at_once => Hold::ForDelayedAck(Side::Server),
            (true, _, _) => Hold::ForAck(Side::Server),
            (false, _, true) => Hold::ForAck(Side::Client),
            (false, _, false) => Hold::Nothing,
        };
        let requests = if client_write.writes_parts_apart() && !client_held {
            depth * geometry.segments_of(geometry.first)
        } else if client_held {
            geometry.segments_of(geometry.first) + geometry.segments_of(geometry.second)
        } else {
            geometry.segments_of(geometry.message())
        };
        // The replies: each its own segment, or the first and then the rest merged while
        // Nagle holds them.
        let reply = geometry.segments_of(geometry.first);
        let replies = if server_held {
            reply + geometry.segments_of(geometry.first * (depth - 1))
        } else {
            depth * reply
        };
        WireOutcome {
            hold,
            segments_per_request: requests + replies,
        }
    }

    /// The kind of event a capture of the row should show, by the rules: `nagle_delayed_ack`
    /// where the delayed-ACK timer releases the held write, `nagle_ack_paced` where ordinary
    /// ACKs pace a batched row's held writes; `None` where nothing is held or the row is not
    /// batched (the one-request rows keep their detector check).
    pub fn detector_kind(&self, variant: &Variant) -> Option<&'static str> {
        variant.workload.batches()?;
        match self.hold {
            Hold::ForDelayedAck(_) => Some(StallKind::NagleDelayedAck.name()),
            Hold::ForAck(_) => Some(ACK_PACED_KIND),
            Hold::Nothing | Hold::ForCappedAck(_) => None,
        }
    }

    /// Whether Linux stalls the row: a write waits for the delayed-ACK timer.
    pub fn stalls(&self) -> bool {
        matches!(self.hold, Hold::ForDelayedAck(_))
    }

    /// The end whose write waits for the delayed ACK, if any.
    pub fn held_side(&self) -> Option<Side> {
        match self.hold {
            Hold::ForDelayedAck(side) => Some(side),
            _ => None,
        }
    }

    /// Round trips a request needs when no timer fires: one, plus one when Nagle holds the
    /// second write until the first is acknowledged, even when that ACK comes at once. Over
    /// an RTT this is what separates a quick-ACKed split (2 RTT) from a stall (2 RTT + the
    /// delayed-ACK timer).
    pub fn round_trips(&self) -> u32 {
        match self.hold {
            Hold::Nothing => 1,
            Hold::ForAck(_) | Hold::ForDelayedAck(_) | Hold::ForCappedAck(_) => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::scenarios::{catalogue_row, CATALOGUE};
    use Hold::{ForAck, ForCappedAck, ForDelayedAck, Nothing};
    use Side::{Client, Server};

    /// Timestamps on, as on a default Linux: a full segment carries MSS - 12 bytes.
    const RULES: SegmentRules = SegmentRules { timestamps: true };

    fn outcome(scenario: &str, name: &str, size: Option<usize>, mss: Option<u32>) -> WireOutcome {
        let row = catalogue_row(scenario, name);
        WireOutcome::of(row, &RULES.sizes_of(row, size, mss))
    }

    /// Every row at its own size, as the source documents describe it and as `lab` measures
    /// it (segments per request: `tcpi_data_segs_out` of both ends).
    const DEFAULT_OUTCOMES: &[(&str, &str, Hold, usize)] = &[
        ("echo", "split", ForDelayedAck(Client), 3),
        ("echo", "single", Nothing, 2),
        ("echo", "writev", Nothing, 2),
        ("echo", "nodelay", Nothing, 3),
        ("echo", "flush", ForDelayedAck(Client), 3),
        ("echo", "cork", Nothing, 2),
        ("echo", "msg_more", Nothing, 2),
        // The tail still waits for the ACK of the head, which comes at once.
        ("echo", "quickack", ForAck(Client), 3),
        // The tail waits for the head's ACK, delayed by the server up to its cap.
        ("echo", "delack-max", ForCappedAck(Client), 3),
        // The same through the server's route (quickack 1; a locked rto_min).
        ("echo", "route-quickack", ForAck(Client), 3),
        ("echo", "route-delack-max", ForCappedAck(Client), 3),
        ("echo", "short", ForAck(Client), 3),
        ("http", "split", ForDelayedAck(Server), 3),
        ("http", "single", Nothing, 2),
        ("http", "nodelay", Nothing, 3),
        ("http", "delack-max", ForCappedAck(Server), 3),
        ("http", "route-quickack", ForAck(Server), 3),
        ("http", "route-delack-max", ForCappedAck(Server), 3),
        // The server's close pushes the held body out with its FIN.
        ("http", "short", Nothing, 3),
        // 122 B: the reply fits the first write.
        ("memcached", "value-100", Nothing, 2),
        ("memcached", "value-1400", ForDelayedAck(Server), 3),
        ("memcached", "value-2400", ForDelayedAck(Server), 3),
        // 1400 B then a 2623 B GSO super-packet that ends in a partial segment: its full
        // segment leaves, more than one MSS is unacknowledged, the client ACKs at once.
        ("memcached", "value-4000", ForAck(Server), 4),
        ("memcached", "quickack-1400", ForAck(Server), 3),
        ("memcached", "delack-max-1400", ForCappedAck(Server), 3),
        ("memcached", "route-quickack-1400", ForAck(Server), 3),
        (
            "memcached",
            "route-delack-max-1400",
            ForCappedAck(Server),
            3,
        ),
        ("memcached", "nodelay-1400", Nothing, 3),
        ("stream", "nagle-0ms", Nothing, 1),
        ("stream", "nagle-5ms", Nothing, 1),
        ("stream", "nagle-10ms", Nothing, 1),
        ("stream", "nagle-15ms", Nothing, 1),
        ("stream", "nodelay-0ms", Nothing, 1),
        ("stream", "nodelay-5ms", Nothing, 1),
        ("stream", "nodelay-10ms", Nothing, 1),
        ("stream", "nodelay-15ms", Nothing, 1),
        ("inherit", "nodelay-listener", Nothing, 3),
        ("inherit", "quickack-listener", ForDelayedAck(Client), 3),
        // Per batch of one connection: the first request, the rest merged behind it, and
        // every reply.
        ("pipeline", "nagle", ForAck(Client), 2 + 16),
        ("pipeline", "nodelay", Nothing, 16 + 16),
        ("pipeline", "writev", Nothing, 1 + 16),
        // One request segment; the first reply, then the rest merged behind it.
        ("pipeline", "server-nagle", ForDelayedAck(Server), 1 + 2),
        ("concurrent", "nagle", ForAck(Client), 2 + 4),
        ("concurrent", "nodelay", Nothing, 4 + 4),
        ("concurrent", "writev", Nothing, 1 + 4),
        ("concurrent", "server-nagle", ForDelayedAck(Server), 1 + 2),
    ];

    #[test]
    fn every_row_states_its_outcome_at_its_own_size() {
        assert_eq!(DEFAULT_OUTCOMES.len(), CATALOGUE.len());
        for &(scenario, name, hold, segments) in DEFAULT_OUTCOMES {
            let got = outcome(scenario, name, None, None);
            assert_eq!(
                got,
                WireOutcome {
                    hold,
                    segments_per_request: segments
                },
                "{scenario}/{name}"
            );
            let stalls = matches!(hold, ForDelayedAck(_));
            assert_eq!(got.stalls(), stalls, "{scenario}/{name}");
            assert_eq!(got.round_trips(), if hold == Nothing { 1 } else { 2 });
            let held = match hold {
                ForDelayedAck(side) => Some(side),
                _ => None,
            };
            assert_eq!(got.held_side(), held, "{scenario}/{name}");
        }
    }

    #[test]
    fn outcomes_follow_size_and_mss() {
        // Scenario, row, --size, --mss, hold, segments per request.
        type Case = (
            &'static str,
            &'static str,
            Option<usize>,
            Option<u32>,
            Hold,
            usize,
        );
        let cases: &[Case] = &[
            // --size 2400: 1400 B then 1023 B, both below 1448 B.
            (
                "memcached",
                "value-100",
                Some(2400),
                Some(1460),
                ForDelayedAck(Server),
                3,
            ),
            // --mss 32767: the 2623 B rest of a 4000 B value is below one MSS: held.
            (
                "memcached",
                "value-4000",
                None,
                Some(32_767),
                ForDelayedAck(Server),
                3,
            ),
            // --mss 88 (76 B segments): the 1400 B first write is 18 full segments and a
            // 32 B partial one, which Nagle waits behind; the client ACKs at once.
            (
                "memcached",
                "value-1400",
                None,
                Some(88),
                ForAck(Server),
                21,
            ),
            // --size 4000 --mss 1460: the 1999 B head is a GSO super-packet ending in a
            // partial segment (1448 + 551): the 2001 B tail waits for an ACK sent at once.
            ("echo", "split", Some(4000), Some(1460), ForAck(Client), 7),
            // --size 154 --mss 88: the 76 B head is exactly one full segment, nothing for
            // Nagle to wait behind (tcp_minshall_update leaves snd_sml alone).
            ("echo", "split", Some(154), Some(88), Nothing, 6),
            // --mss 88: the 200 B body starts with a full segment.
            ("http", "split", None, Some(88), ForAck(Server), 5),
            ("http", "short", Some(100_000), Some(1460), Nothing, 72),
            ("stream", "nagle-0ms", Some(4000), Some(1460), Nothing, 3),
            // 2000 B commands at 1448 B segments end in a partial segment, which the next
            // ones wait behind; a reply of two segments is ACKed at once, no timer.
            (
                "pipeline",
                "nagle",
                Some(2000),
                Some(1460),
                ForAck(Client),
                2 + 21 + 32,
            ),
            (
                "pipeline",
                "server-nagle",
                Some(2000),
                Some(1460),
                ForAck(Server),
                23 + 2 + 21,
            ),
            ("echo", "single", Some(65_536), Some(88), Nothing, 863 * 2),
        ];
        for &(scenario, name, size, mss, hold, segments) in cases {
            assert_eq!(
                outcome(scenario, name, size, mss),
                WireOutcome {
                    hold,
                    segments_per_request: segments
                },
                "{scenario}/{name} --size {size:?} --mss {mss:?}"
            );
        }
    }

    #[test]
    fn payload_mss_is_the_mss_less_the_timestamps_read_once() {
        let row = catalogue_row("memcached", "value-1400");
        assert_eq!(RULES.sizes_of(row, None, None).payload_mss, 1448);
        let bare = SegmentRules { timestamps: false };
        assert_eq!(bare.sizes_of(row, None, None).payload_mss, 1460);
        let echo = catalogue_row("echo", "split");
        assert_eq!(
            RULES.sizes_of(echo, Some(7), None),
            RowSizes {
                size: 7,
                mss: None,
                payload_mss: LOOPBACK_MSS_V4 as usize - 12
            }
        );
    }
}
