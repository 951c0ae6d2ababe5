//! What a stall kind is, as every report spells it. Each kind states its facts once, in its
//! own file, as a [`KindInfo`]: its rule, its JSON name, its sentence and fixes, what held the
//! data and what released it (the ladder's marks), whether it counts as a stall. The one
//! `kinds!` list in `detect/mod.rs` makes the [`StallKind`] enum of them; reports read the
//! facts or iterate [`StallKind::ALL`], and where one must treat a kind apart it matches
//! [`Holder`] or [`Release`] exhaustively, so a new kind cannot be left out in silence.

use super::{Finding, StallEvent, StallKind};
use crate::decode::Segment;
use crate::flow::{Flow, Side, Span};

/// What held the data back: who is to change, and how the ladder finds the wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    /// Nagle's algorithm on the held side (`tcp_nagle_check`): a sub-MSS segment unacknowledged.
    Nagle,
    /// TCP_CORK or MSG_MORE on the held side (`tcp_nagle_test` with `TCP_NAGLE_CORK`).
    Cork,
    /// A lost segment: nobody's socket options, the path.
    Loss,
    /// The peer's closed receive window (`tcp_snd_wnd_test`): the peer reads too slowly.
    PeerWindow,
}

/// What let the held data go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The peer's delayed ACK (`tcp_send_delayed_ack`): its timeout names the peer's stack.
    DelayedAck,
    /// An ACK or window update the peer sent at once.
    Ack,
    /// The held side's own timer (probe or retransmission timer), no packet of the peer.
    OwnTimer,
    /// The ACK of each small segment, one round trip each, over a flow: a pure ACK or data
    /// carrying it (writes paced by ACKs).
    Acks,
}

/// What a capture must show for a claim of the kind to stand ([`super::evidence`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// Nothing beyond the rule's timing.
    Timing,
    /// The peer's packets: a retransmission timeout is told from a fast retransmit by them.
    PeerSeen,
    /// The leg to the held side: released by the peer's packet or counted from it, the leg is
    /// part of the gap.
    HeldLeg,
}

/// One thing the packets must show for a claim of a kind to stand: checked after the kind's
/// rule found the claim ([`super::evidence::unsettled`]). A claim that fails one is set apart
/// as undecided with the obligation's name and sentence, never counted as a stall, never
/// dropped in silence.
#[derive(Clone, Copy)]
pub struct Obligation {
    /// Stable name: the JSON `reason` of an undecided claim that fails it.
    pub name: &'static str,
    /// What the packets must show, in people's words (said of a claim that fails it).
    pub text: &'static str,
    /// Whether the claim `finding` on `seg` of `side` meets it, the flow as it was before `seg`.
    pub(crate) holds: fn(&Flow, Side, &Segment, &Finding) -> bool,
}

/// One rule: a check of a new segment against the flow state before it.
#[derive(Clone, Copy)]
pub struct Rule {
    /// Place among the rules, lowest first; the first finding wins. Today: the window (10)
    /// before retransmission (20), so data resent as a closed window opens is the sender
    /// resuming; then Nagle (30), then the cork timer (40) (docs/ACCURACY.md, "The rules behind the counts").
    pub rank: u8,
    /// The segments the check can judge: [`Rule::DATA`], [`Rule::SYN`] or both. Others pass
    /// it by unread: a pure ACK, half the packets of most captures, runs no rule at all.
    pub judges: u8,
    /// The check.
    pub check: fn(&Flow, Side, &Segment) -> Option<Finding>,
}

impl Rule {
    /// Judges segments that carry data.
    pub const DATA: u8 = 1;
    /// Judges SYNs.
    pub const SYN: u8 = 2;
}

/// How far a claim's timing clears its rule's thresholds.
pub(crate) type Margin = fn(&Flow, Side, &Segment, &Finding) -> Span;

/// Everything the reports say of one kind.
pub struct KindInfo {
    /// Stable name: the JSON key and value, the metrics label.
    pub name: &'static str,
    /// Counts as a stall (a minor Nagle hold costs one RTT and is reported apart).
    pub is_stall: bool,
    /// What held the data.
    pub holder: Holder,
    /// What released it.
    pub release: Release,
    /// What a claim needs from the capture.
    pub proof: Proof,
    /// The rule that finds it; `None` when another kind's rule does (one check, two outcomes).
    pub rule: Option<Rule>,
    /// What the packets must show for a claim to stand, checked in order; the first that fails
    /// sets the claim apart, undecided. A kind that is no stall (a minor hold) drops a claim
    /// that fails one: it claims no stall.
    pub obligations: &'static [Obligation],
    /// How far a claim's timing clears the rule's thresholds, for the capture clock's
    /// resolution to be judged against ([`super::evidence::Resolution`]); `None` for kinds that
    /// claim no stall.
    pub margin: Option<Margin>,
    /// A resend by a timer that backs off until answered: further resends before the peer's
    /// answer are steps of one episode, one event (RFC 6298 §5.5).
    pub timer_episode: bool,
    /// For a kind counted apart from the stalls: how a report's summary names a count of it,
    /// after the number.
    pub aside: Option<&'static str>,
    /// Header of its column in `analyze --flows`.
    pub column: &'static str,
    /// Header of its column in the HTML tables (stall kinds only).
    pub page_column: &'static str,
    /// The ladder's sentence on the gap, after `N ms: `; `{held}` and `{peer}` name the sides.
    pub gap: &'static str,
    /// One sentence naming the pattern of an event in application terms.
    pub explain: fn(&StallEvent) -> String,
    /// The fixes in order of preference for the held side; the example is an event of the
    /// kind (for the ACKing side's stack and the writer's address).
    pub fixes: fn(Side, Option<&StallEvent>) -> Vec<String>,
}

impl KindInfo {
    /// A Nagle hold released by a delayed ACK: the stall the project is named for, the one a
    /// quick ACK or TCP_NODELAY cures and a delayed-ACK cap shortens.
    pub const fn nagle_delayed_ack(&self) -> bool {
        matches!(
            (self.holder, self.release),
            (Holder::Nagle, Release::DelayedAck)
        )
    }

    /// The ladder's gap sentence for the held side.
    pub fn gap_text(&self, held: Side) -> String {
        self.gap
            .replace("{held}", held.name())
            .replace("{peer}", held.peer().name())
    }
}

/// The rules of `kinds` ordered by [`Rule::rank`] (ties in report order), kinds without a
/// rule of their own last: computed at compile time.
pub(super) const fn ranked<const N: usize>(kinds: [StallKind; N]) -> [Option<Rule>; N] {
    const fn rank(rule: Option<Rule>) -> u16 {
        match rule {
            Some(r) => r.rank as u16,
            None => u16::MAX,
        }
    }
    let mut rules = [None; N];
    let mut i = 0;
    while i < N {
        rules[i] = kinds[i].info().rule;
        i += 1;
    }
    // Insertion sort: stable, and a handful of kinds.
    let mut i = 1;
    while i < N {
        let mut j = i;
        while j > 0 && rank(rules[j - 1]) > rank(rules[j]) {
            let t = rules[j - 1];
            rules[j - 1] = rules[j];
            rules[j] = t;
            j -= 1;
        }
        i += 1;
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::super::{KindCounts, RULES};
    use super::*;

    /// The rules run in rank order, each kind's rule once, and the kinds without a rule of
    /// their own come last.
    #[test]
    fn rules_run_in_rank_order() {
        let ranks: Vec<u8> = RULES.iter().flatten().map(|r| r.rank).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{ranks:?}");
        let with_rule = StallKind::ALL.iter().filter(|k| k.info().rule.is_some());
        assert_eq!(ranks.len(), with_rule.count());
        let first_none = RULES.iter().position(Option::is_none);
        assert!(first_none.map_or(true, |i| RULES[i..].iter().all(Option::is_none)));
        // The window before the retransmission timer (a probe of a closed window resends).
        let rank = |k: StallKind| k.info().rule.map(|r| r.rank);
        assert!(rank(StallKind::ZeroWindow) < rank(StallKind::Rto));
    }

    /// Every rule judges some segments: one that judges none would never run.
    #[test]
    fn every_rule_judges_data_or_syns() {
        for rule in RULES.iter().flatten() {
            assert!(
                rule.judges != 0,
                "rule of rank {} judges nothing",
                rule.rank
            );
            assert_eq!(
                rule.judges & !(Rule::DATA | Rule::SYN),
                0,
                "rank {}",
                rule.rank
            );
        }
    }

    /// Names are distinct (they are JSON keys and metric labels), and the counts serialise as
    /// one key per kind, in report order.
    #[test]
    fn counts_serialise_every_kind_under_its_name() {
        let counts: KindCounts = StallKind::ALL
            .iter()
            .enumerate()
            .flat_map(|(i, k)| std::iter::repeat(*k).take(i + 1))
            .collect();
        let json = serde_json::to_string(&counts).expect("serialises");
        let expected: Vec<String> = StallKind::ALL
            .iter()
            .enumerate()
            .map(|(i, k)| format!("\"{}\":{}", k.name(), i + 1))
            .collect();
        assert_eq!(json, format!("{{{}}}", expected.join(",")));
        let mut names: Vec<&str> = StallKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), StallKind::ALL.len());
    }

    /// The gap sentence names the sides for the held side given.
    #[test]
    fn gap_text_names_the_sides() {
        let text = StallKind::NagleDelayedAck.info().gap_text(Side::Server);
        assert_eq!(text, "server holds data until client's delayed ACK");
        for kind in StallKind::ALL {
            let text = kind.info().gap_text(Side::Client);
            assert!(!text.contains('{'), "{}: {text}", kind.name());
        }
    }
}
