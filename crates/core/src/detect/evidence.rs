//! Evidence, not only verdicts: a claim the capture cannot settle is set apart, with the
//! reason, rather than counted as a proven stall or dropped in silence.
//!
//! A rule's timing proves a stall only when the path it is judged against is known: a gap
//! counted from the peer's packet includes the leg to the held side (a cork gap, a Nagle
//! release), and a timeout is told from a fast retransmit only by the peer's packets. And a
//! gap proves a claim only when the capture's clock is fine enough: timestamps that are all
//! whole milliseconds (or tens of them: a pcapng `if_tsresol` of 10^-3, a device that stamps
//! coarsely, a file rewritten at low resolution) err by up to that much in every difference.

use super::{nagle, Finding, Proof, StallKind};
use crate::decode::Segment;
use crate::flow::{Endpoint, Flow, Side, Span, Timestamp};

/// Why a claim is undecided. The names are the stable JSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The round trip from the capture point to the held side is unknown (no handshake and no
    /// answer of that side timed): a gap cannot be told from the path.
    PathUnknown,
    /// The capture holds one direction only: whether a packet of the peer triggered the data
    /// cannot be seen.
    OneDirection,
    /// The data came back sooner after the ACK that released it than the quickest round trip
    /// timed to the held side (by less than a quarter of it): the path's delay varied, or
    /// something else released it.
    PathVaried,
    /// The capture's timestamps are coarser than the margin by which the gap clears the rule's
    /// thresholds: the clock cannot tell the claim from its look-alike.
    CoarseTimestamps,
    /// The flow's packets are evenly spaced, most gaps the same to 10 µs
    /// ([`crate::flow::Cadence`]): a generated or re-timed trace, whose timing no stack made.
    SyntheticTiming,
    /// A sequence or acknowledgment number of the flow lay farther than any window from what
    /// its side had sent ([`crate::flow::Flow::numbers_out_of_window`]): damaged or crafted
    /// numbers, in which a repeat or a gap proves nothing.
    NumbersOutOfWindow,
    /// The packets do not show what the kind's claim needs: one of its proof obligations
    /// ([`super::Obligation`]) failed; its name and sentence.
    Unproven {
        /// The obligation's stable name.
        name: &'static str,
        /// What the packets had to show.
        text: &'static str,
    },
}

impl Reason {
    /// Stable name for the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Reason::PathUnknown => "path_unknown",
            Reason::OneDirection => "one_direction",
            Reason::PathVaried => "path_varied",
            Reason::CoarseTimestamps => "coarse_timestamps",
            Reason::SyntheticTiming => "synthetic_timing",
            Reason::NumbersOutOfWindow => "numbers_out_of_window",
            Reason::Unproven { name, .. } => name,
        }
    }

    /// In people's words.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::PathUnknown => {
                "the round trip to the held side is unknown (no handshake, no answer timed)"
            }
            Reason::OneDirection => "the capture holds one direction only",
            Reason::PathVaried => {
                "the release came sooner than the quickest round trip timed to the held side"
            }
            Reason::CoarseTimestamps => {
                "the capture's timestamps are too coarse to tell the gap from its thresholds"
            }
            Reason::SyntheticTiming => {
                "the flow's packets are evenly spaced (a generated or re-timed trace): no \
                 stack's timer shows in its timing"
            }
            Reason::NumbersOutOfWindow => {
                "a sequence or acknowledgment number of the flow lies farther than any window \
                 (2^30 bytes, RFC 7323) from what its side sent: damaged or crafted numbers, in \
                 which no repeat or gap proves anything"
            }
            Reason::Unproven { text, .. } => text,
        }
    }
}

/// One claim set apart: which flow, which packet, what it would have claimed and why it
/// cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The kind the rule found.
    pub kind: StallKind,
    /// Why it is undecided.
    pub reason: Reason,
    /// [`super::FlowSummary::id`] of the flow.
    pub flow_id: u64,
    /// The flow's client and server.
    pub client: Endpoint,
    /// The flow's server.
    pub server: Endpoint,
    /// The side whose data would have waited.
    pub held_side: Side,
    /// Capture time of the segment the claim is about.
    pub ts_ns: Timestamp,
    /// Its packet number in its capture.
    pub packet_number: u64,
    /// Position of that segment among all segments analysed (0-based).
    pub ordinal: u64,
    /// The delay the rule measured.
    pub delay_ns: Span,
}

/// Claims set apart: counts per kind and reason, and each claim.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undecided {
    counts: Vec<(StallKind, Reason, u64)>,
    claims: Vec<Claim>,
}

impl Undecided {
    /// Counts one claim.
    pub fn add(&mut self, kind: StallKind, reason: Reason) {
        match self
            .counts
            .iter_mut()
            .find(|(k, r, _)| *k == kind && *r == reason)
        {
            Some(entry) => entry.2 += 1,
            None => self.counts.push((kind, reason, 1)),
        }
    }

    /// Counts one claim and keeps it.
    pub(crate) fn push(&mut self, claim: Claim) {
        self.add(claim.kind, claim.reason);
        self.claims.push(claim);
    }

    /// Adds another tally's claims.
    pub fn extend(&mut self, other: Undecided) {
        for (kind, reason, n) in other.counts {
            match self
                .counts
                .iter_mut()
                .find(|(k, r, _)| *k == kind && *r == reason)
            {
                Some(entry) => entry.2 += n,
                None => self.counts.push((kind, reason, n)),
            }
        }
        self.claims.extend(other.claims);
        self.sort();
    }

    /// Puts the claims in input order (claims set apart late, as a flow retires, come last),
    /// and the counts in the order of their first claims: the same however the input's flows
    /// were shared among detectors.
    pub(crate) fn sort(&mut self) {
        self.claims.sort_by_key(|c| c.ordinal);
        let claims = &self.claims;
        self.counts.sort_by_cached_key(|&(kind, reason, _)| {
            claims
                .iter()
                .position(|c| c.kind == kind && c.reason == reason)
                .unwrap_or(usize::MAX)
        });
    }

    /// Every (kind, reason, count), in order of first appearance in the input.
    pub fn entries(&self) -> &[(StallKind, Reason, u64)] {
        &self.counts
    }

    /// Every claim set apart, in input order.
    pub fn claims(&self) -> &[Claim] {
        &self.claims
    }

    /// Claims set apart, all kinds.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|e| e.2).sum()
    }
}

/// The resolution of a capture's clock as its timestamps show it: the largest power of ten,
/// from 1 ms to 1 s, that every timestamp so far is a multiple of. Microsecond or finer clocks
/// leave it at once (a fine timestamp is a whole millisecond once in a thousand); the header's
/// resolution needs no reading of its own, as a coarse one gives such timestamps.
#[derive(Debug, Clone, Copy)]
pub struct Resolution {
    /// Nanoseconds; below [`Resolution::FINEST_COARSE`] once a finer timestamp was seen.
    step_ns: u64,
}

impl Default for Resolution {
    fn default() -> Resolution {
        Resolution {
            step_ns: 1_000_000_000,
        }
    }
}

impl Resolution {
    /// The finest resolution counted as coarse: 1 ms, the smallest of the rules' slacks.
    const FINEST_COARSE: u64 = 1_000_000;

    /// Notes one timestamp.
    #[inline]
    pub fn observe(&mut self, ts: Timestamp) {
        if self.step_ns < Self::FINEST_COARSE {
            return;
        }
        let ns = ts.as_nanos();
        while self.step_ns >= Self::FINEST_COARSE && ns % self.step_ns != 0 {
            self.step_ns /= 10;
        }
    }

    /// The clock's resolution when coarser than a microsecond clock's: 1 ms or more.
    pub fn coarse(&self) -> Option<Span> {
        (self.step_ns >= Self::FINEST_COARSE).then(|| Span::from_nanos(self.step_ns))
    }
}

/// Whether the held socket's own state can settle a claim set apart for `reason`: a whole
/// answer ~200 ms after its request is the cork timer when TCP_CORK is set on the socket
/// that sent it (`tcp_nagle_test` holds it with `TCP_NAGLE_CORK`).
pub fn settled_by_socket(reason: &Reason) -> bool {
    matches!(reason, Reason::Unproven { name, .. } if *name == super::cork::NOT_A_TAIL)
}

/// Why `finding`, on `seg` from `side`, cannot be settled by this capture; `None` when its
/// timing proves it. A minor hold, no claim of a stall, needs its obligations and a clock fine
/// enough for its timing, nothing of the path. `coarse` is the
/// clock's resolution when it is coarse ([`Resolution::coarse`]).
pub fn unsettled(
    flow: &Flow,
    side: Side,
    seg: &Segment,
    finding: &Finding,
    coarse: Option<Span>,
) -> Option<Reason> {
    if let Some(failed) = finding
        .kind
        .info()
        .obligations
        .iter()
        .find(|o| !(o.holds)(flow, side, seg, finding))
    {
        return Some(Reason::Unproven {
            name: failed.name,
            text: failed.text,
        });
    }
    if flow.cadence.synthetic() {
        return Some(Reason::SyntheticTiming);
    }
    if flow.numbers_out_of_window {
        return Some(Reason::NumbersOutOfWindow);
    }
    // A hold that claims no stall needs no path to the peer; its timing, though, must clear
    // the clock's tick like any other.
    if !finding.kind.is_stall() {
        return coarser_than_margin(flow, side, seg, finding, coarse);
    }
    let peer_seen = flow.dir(side.peer()).seen;
    let held_leg = flow.dir(side).near_rtt;
    match finding.kind.info().proof {
        Proof::PeerSeen if !peer_seen => return Some(Reason::OneDirection),
        Proof::HeldLeg if held_leg.is_none() => return Some(Reason::PathUnknown),
        Proof::PeerSeen | Proof::HeldLeg | Proof::Timing => {}
    }
    // Released sooner than the timed leg allows, by less than the path's own variation.
    if finding.kind == StallKind::NagleDelayedAck
        && nagle::released_before_the_leg(flow, side, finding)
    {
        return Some(Reason::PathVaried);
    }
    coarser_than_margin(flow, side, seg, finding, coarse)
}

/// [`Reason::CoarseTimestamps`] when the clock's resolution `coarse` exceeds the margin by
/// which `finding`'s gap clears its rule's thresholds. Every difference of two timestamps errs
/// by less than the resolution: a margin at least that large holds whatever the true times
/// were.
fn coarser_than_margin(
    flow: &Flow,
    side: Side,
    seg: &Segment,
    finding: &Finding,
    coarse: Option<Span>,
) -> Option<Reason> {
    let resolution = coarse?;
    let margin = (finding.kind.info().margin?)(flow, side, seg, finding);
    (margin < resolution).then_some(Reason::CoarseTimestamps)
}

#[cfg(test)]
mod tests {
    use super::super::testing::Wire;
    use super::super::StallKind;
    use super::Reason;

    /// Only the server's direction was captured: its resend may have answered duplicate ACKs
    /// the capture does not hold. Set apart, not counted.
    #[test]
    fn one_direction_timeout_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.data(false, 1_100, 300).retransmit(false, 215_000, 300);
        w.segments.retain(|s| s.src_port == 80);
        w.segments.remove(0); // the SYN-ACK
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(
            a.undecided.entries(),
            &[(StallKind::Rto, Reason::OneDirection, 1)]
        );
    }

    /// No handshake and no timed answer of the server: a tail 250 ms after the ACK of its
    /// write's full segment may be the cork timer or the path. Set apart with the reason.
    #[test]
    fn cork_without_the_path_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.ack(false, 500)
            .data(false, 1_100, 1460)
            .ack(true, 1_200)
            .data(false, 251_000, 300);
        w.segments.drain(..3);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.undecided.total(), 1);
        assert_eq!(a.undecided.entries()[0].1, Reason::PathUnknown);
    }
}
