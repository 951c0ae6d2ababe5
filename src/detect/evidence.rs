//! Evidence, not only verdicts: a claim the capture cannot settle is set apart, with the
//! reason, rather than counted as a proven stall or dropped in silence.
//!
//! A rule's timing proves a stall only when the path it is judged against is known: a gap
//! counted from the peer's packet includes the leg to the held side (a cork gap, a Nagle
//! release), and a timeout is told from a fast retransmit only by the peer's packets.

use super::{Finding, Proof, StallKind};
use crate::flow::{Flow, Side};

/// Why a claim is undecided. The names are the stable JSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The round trip from the capture point to the held side is unknown (no handshake and no
    /// answer of that side timed): a gap cannot be told from the path.
    PathUnknown,
    /// The capture holds one direction only: whether a packet of the peer triggered the data
    /// cannot be seen.
    OneDirection,
}

impl Reason {
    /// Stable name for the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Reason::PathUnknown => "path_unknown",
            Reason::OneDirection => "one_direction",
        }
    }

    /// In people's words.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::PathUnknown => {
                "the round trip to the held side is unknown (no handshake, no answer timed)"
            }
            Reason::OneDirection => "the capture holds one direction only",
        }
    }
}

/// Claims set apart, per kind and reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Undecided(Vec<(StallKind, Reason, u64)>);

impl Undecided {
    /// Counts one claim.
    pub(crate) fn add(&mut self, kind: StallKind, reason: Reason) {
        match self
            .0
            .iter_mut()
            .find(|(k, r, _)| *k == kind && *r == reason)
        {
            Some(entry) => entry.2 += 1,
            None => self.0.push((kind, reason, 1)),
        }
    }

    /// Adds another tally's claims.
    pub(crate) fn extend(&mut self, other: &Undecided) {
        for &(kind, reason, n) in &other.0 {
            for _ in 0..n {
                self.add(kind, reason);
            }
        }
    }

    /// Every (kind, reason, count), in order of first appearance.
    pub fn entries(&self) -> &[(StallKind, Reason, u64)] {
        &self.0
    }

    /// Claims set apart, all kinds.
    pub fn total(&self) -> u64 {
        self.0.iter().map(|e| e.2).sum()
    }
}

/// Why `finding`, on data from `side`, cannot be settled by this capture; `None` when its
/// timing proves it. Minor holds are no claim of a stall and always stand.
pub(crate) fn unsettled(flow: &Flow, side: Side, finding: &Finding) -> Option<Reason> {
    if !finding.kind.is_stall() {
        return None;
    }
    let peer_seen = flow.dir(side.peer()).seen;
    let held_leg = flow.dir(side).near_rtt;
    match finding.kind.info().proof {
        Proof::PeerSeen if !peer_seen => Some(Reason::OneDirection),
        Proof::HeldLeg if held_leg.is_none() => Some(Reason::PathUnknown),
        Proof::PeerSeen | Proof::HeldLeg | Proof::Timing => None,
    }
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

    /// No handshake and no timed answer of the server: a reply 250 ms after the request may be
    /// the cork timer or the path. Set apart with the reason.
    #[test]
    fn cork_without_the_path_is_undecided() {
        let mut w = Wire::handshake(30, 1448);
        w.ack(false, 500)
            .data(true, 1_000, 40)
            .data(false, 251_000, 300);
        w.segments.drain(..3);
        let a = w.analyse();
        assert_eq!(a.stall_count(), 0);
        assert_eq!(a.undecided.total(), 1);
        assert_eq!(a.undecided.entries()[0].1, Reason::PathUnknown);
    }
}
