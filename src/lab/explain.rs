//! What a row's message looks like to the kernel (the sizes of its writes against the MSS in
//! effect), the stall Linux is expected to show for it, and the one-line explanation of the
//! table. The expectation and the explanation come from the same [`Geometry`], so a row's text
//! never contradicts its `expected` column, whatever `--size` and `--mss` say.

use super::runner::{echo_parts, Side};
use super::scenarios::{ConnectionMode, Expectation, Variant, Workload};
use super::server::{http_response_head, memcached_reply_len, MEMCACHED_FIRST_WRITE_CAP};
use crate::kernel::read_sysctl_u64;
use crate::tcp_rules::{self, LOOPBACK_MSS_V4};

/// The message a row's split variant writes in two parts, against the segment size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes of the first write (echo head, HTTP header block, memcached's first 1400 B).
    pub first: usize,
    /// Bytes of the second write; 0 when the message goes out in one write.
    pub second: usize,
    /// Payload bytes of a full segment: the MSS in effect minus TCP options.
    pub mss: usize,
}

/// How the two writes of a message meet the MSS, which decides whether Nagle can hold the
/// second one until a delayed ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fit {
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
    /// The geometry of `variant`'s message with a payload of `size` bytes over TCP_MAXSEG
    /// `mss` (`None`: loopback's own).
    pub fn of(variant: &Variant, size: usize, mss: Option<u32>) -> Geometry {
        let (first, second) = match variant.workload {
            Workload::Echo => {
                let (head, body) = echo_parts(size);
                (head.len(), body.len())
            }
            Workload::Http => {
                let close = variant.connections == ConnectionMode::PerRequest;
                (http_response_head(size, close).len(), size)
            }
            Workload::Memcached => {
                let reply = memcached_reply_len(size);
                let first = reply.min(MEMCACHED_FIRST_WRITE_CAP);
                (first, reply - first)
            }
            Workload::Stream => (size, 0),
        };
        Geometry {
            first,
            second,
            mss: payload_mss(mss.unwrap_or(LOOPBACK_MSS_V4)) as usize,
        }
    }

    /// Bytes of the whole message.
    pub fn message(&self) -> usize {
        self.first + self.second
    }

    /// Segments the whole message makes when written at once.
    pub fn segments(&self) -> usize {
        self.message().div_ceil(self.mss.max(1)).max(1)
    }

    /// How the writes meet the MSS. Nagle holds a segment only while an earlier **sub-MSS**
    /// segment is unacknowledged (`tcp_nagle_check` → `tcp_minshall_check`), never a full one;
    /// the receiver delays its ACK only while at most one MSS is unacknowledged
    /// (`__tcp_ack_snd_check`). So the second write waits for the delayed-ACK timer only when
    /// both writes are below one MSS.
    pub fn fit(&self) -> Fit {
        if self.second == 0 {
            Fit::OneWrite
        } else if self.first >= self.mss {
            Fit::FirstFull
        } else if self.second >= self.mss {
            Fit::SecondFull
        } else {
            Fit::BothSmall
        }
    }
}

/// Payload bytes of a full segment for an MSS set with TCP_MAXSEG: the TCP timestamps option
/// (RFC 7323, on unless `net.ipv4.tcp_timestamps=0`) takes 12 bytes of it (`tcp_current_mss`).
pub fn payload_mss(mss: u32) -> u32 {
    let timestamps = read_sysctl_u64("/proc/sys/net/ipv4/tcp_timestamps") != Some(0);
    tcp_rules::payload_mss(mss, timestamps)
}

/// Whether Linux stalls the row, from the catalogue and the kernel rules.
pub fn expected_stall(variant: &Variant, size: usize, mss: Option<u32>) -> bool {
    match variant.expected {
        Expectation::NoStall => false,
        Expectation::Stall => Geometry::of(variant, size, mss).fit() == Fit::BothSmall,
    }
}

/// Which end writes the split message of a row (the end whose second write Nagle holds).
pub fn split_writer(variant: &Variant) -> Option<Side> {
    match variant.workload {
        Workload::Echo => Some(Side::Client),
        Workload::Http | Workload::Memcached => Some(Side::Server),
        Workload::Stream => None,
    }
}

/// The memcached reply fits its first write: the fix rows have nothing to fix either.
const ONE_WRITE: &str = "the {message} B reply fits memcached's 1400 B first write: one write ({segments}), nothing left behind for Nagle to hold";

/// A split message whose first write is at least one full segment.
const FIRST_FULL: &str = "{writer} writes {first} B then {second} B, and the first write fills at least one {mss} B segment: Nagle waits only behind a sub-MSS segment (tcp_minshall_check), and with more than one MSS unacknowledged the {peer} ACKs at once (__tcp_ack_snd_check), so no timer is waited for";

/// A split message whose second write starts with a full segment.
const SECOND_FULL: &str = "{writer} writes {first} B then {second} B: the second write starts with a full {mss} B segment that Nagle never holds; with more than one MSS unacknowledged the {peer} ACKs at once (__tcp_ack_snd_check), releasing the tail";

/// The row's one-line explanation for a payload of `size` bytes over TCP_MAXSEG `mss`: the
/// catalogue's text when the message has the shape the row is about, otherwise why this shape
/// behaves differently. Sizes in the text are the ones in effect.
pub fn explanation(variant: &Variant, size: usize, mss: Option<u32>) -> String {
    let geometry = Geometry::of(variant, size, mss);
    let template = match (variant.workload, variant.expected, geometry.fit()) {
        (Workload::Memcached, _, Fit::OneWrite) => ONE_WRITE,
        (Workload::Stream, _, _) | (_, Expectation::NoStall, _) => variant.explanation,
        (_, Expectation::Stall, Fit::FirstFull) => FIRST_FULL,
        (_, Expectation::Stall, Fit::SecondFull) => SECOND_FULL,
        (_, Expectation::Stall, _) => variant.explanation,
    };
    render(template, variant, &geometry)
}

/// Fills the `{first}`, `{second}`, `{message}`, `{mss}`, `{segments}`, `{writer}` and
/// `{peer}` fields of a catalogue text.
fn render(template: &str, variant: &Variant, g: &Geometry) -> String {
    let (writer, peer) = match split_writer(variant) {
        Some(Side::Server) => ("the server", "client"),
        _ => ("the client", "server"),
    };
    let segments = match g.segments() {
        1 => "one segment".to_string(),
        n => format!("{n} segments of at most {} B", g.mss),
    };
    template
        .replace("{first}", &g.first.to_string())
        .replace("{second}", &g.second.to_string())
        .replace("{message}", &g.message().to_string())
        .replace("{mss}", &g.mss.to_string())
        .replace("{segments}", &segments)
        .replace("{writer}", writer)
        .replace("{peer}", peer)
}

/// The row's name: the catalogue's, except that a name ending in the row's own size
/// (`value-1400`, `nodelay-1400`) shows the size `--size` put in its place (`value-2400`).
pub fn row_name(variant: &Variant, size: Option<usize>) -> String {
    let own = format!("-{}", variant.size);
    match (size, variant.name.strip_suffix(own.as_str())) {
        (Some(size), Some(stem)) => format!("{stem}-{size}"),
        _ => variant.name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::scenarios::{catalogue_row as row, CATALOGUE};

    #[test]
    fn every_template_is_filled_at_any_size_and_mss() {
        for v in CATALOGUE {
            let (min, max) = v.scenario.size_range();
            for size in [min, v.size, 2400, max] {
                for mss in [None, Some(88), Some(1460), Some(32_767)] {
                    let text = explanation(v, size, mss);
                    assert!(
                        !text.contains('{'),
                        "{}/{}: {text}",
                        v.scenario.name(),
                        v.name
                    );
                }
            }
        }
    }

    #[test]
    fn memcached_text_follows_the_reply_it_explains() {
        let value_100 = row("memcached", "value-100");
        // --size 2400: 1400 B then 1023 B, both below 1448 B: held, not "one write".
        let text = explanation(value_100, 2400, Some(1460));
        assert!(expected_stall(value_100, 2400, Some(1460)));
        assert!(text.contains("1400 B then a 1023 B rest"), "{text}");
        assert!(!text.contains("one write"), "{text}");
        // --mss 32767: the 2623 B rest of a 4000 B value is below one MSS, so it is held.
        let value_4000 = row("memcached", "value-4000");
        let text = explanation(value_4000, 4000, Some(32_767));
        assert!(expected_stall(value_4000, 4000, Some(32_767)));
        assert!(!text.contains("full"), "{text}");
        // --mss 88: the 1400 B first write is many full segments; nothing waits for a timer.
        let value_1400 = row("memcached", "value-1400");
        let text = explanation(value_1400, 1400, Some(88));
        assert!(!expected_stall(value_1400, 1400, Some(88)));
        assert!(text.contains("fills at least one 76 B segment"), "{text}");
        // At MSS 1460 the 4000 B value's rest starts with a full segment.
        let text = explanation(value_4000, 4000, Some(1460));
        assert!(text.contains("starts with a full 1448 B segment"), "{text}");
        assert!(explanation(value_4000, 100, Some(1460)).contains("one write"));
    }

    #[test]
    fn echo_text_follows_the_line_it_explains() {
        let split = row("echo", "split");
        let text = explanation(split, 13, None);
        assert!(
            text.contains("7 B tail") && text.contains("6 B head"),
            "{text}"
        );
        // --mss 88 --size 65536: a 32767 B head is hundreds of full segments.
        let text = explanation(split, 65_536, Some(88));
        assert!(!expected_stall(split, 65_536, Some(88)));
        assert!(text.contains("32767 B then 32769 B"), "{text}");
        let single = row("echo", "single");
        assert!(explanation(single, 13, None).contains("one segment"));
        assert!(explanation(single, 65_536, Some(88)).contains("863 segments of at most 76 B"));
    }

    #[test]
    fn names_ending_in_their_size_show_the_size_in_use() {
        assert_eq!(
            row_name(row("memcached", "value-100"), Some(2400)),
            "value-2400"
        );
        assert_eq!(
            row_name(row("memcached", "nodelay-1400"), Some(7)),
            "nodelay-7"
        );
        assert_eq!(row_name(row("memcached", "value-100"), None), "value-100");
        assert_eq!(row_name(row("echo", "split"), Some(100)), "split");
        assert_eq!(
            row_name(row("stream", "nagle-0ms"), Some(1200)),
            "nagle-0ms"
        );
    }

    #[test]
    fn memcached_expectation_follows_the_segment_rule() {
        let split = row("memcached", "value-1400");
        let mss = Some(1460);
        assert!(!expected_stall(split, 100, mss), "one write");
        assert!(expected_stall(split, 1400, mss));
        assert!(expected_stall(split, 2400, mss));
        assert!(!expected_stall(split, 4000, mss));
        // At loopback's own MSS the 1400-byte cut always leaves a small rest.
        assert!(expected_stall(split, 4000, None));
        assert!(!expected_stall(
            row("memcached", "quickack-1400"),
            1400,
            mss
        ));
    }
}
