//! A Nagle hold released by an ordinary, undelayed ACK: about one round trip, reported apart
//! and not counted as a stall. [`super::nagle`]'s rule finds it, from the same wire pattern
//! as a delayed-ACK hold whose ACK came sooner than `TCP_DELACK_MIN`.

use super::nagle::{explain_hold, hold_fixes, release_margin, HOLD};
use super::{Holder, KindInfo, Proof, Release};

/// A minor Nagle hold.
pub const KIND: KindInfo = KindInfo {
    name: "nagle_minor",
    is_stall: false,
    holder: Holder::Nagle,
    release: Release::Ack,
    proof: Proof::Timing,
    rule: None,
    obligations: &HOLD,
    margin: Some(|flow, side, _, finding| release_margin(flow, side, finding)),
    timer_episode: false,
    aside: Some("minor Nagle holds released by an ordinary ACK (one RTT each)"),
    column: "minor",
    page_column: "minor",
    gap: "{held} holds data one RTT (Nagle)",
    explain: |event| explain_hold(event, ""),
    fixes: |held, example| hold_fixes(held, example, false),
};
