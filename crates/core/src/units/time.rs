//! Capture time: when a packet was seen ([`Timestamp`]) and how long something took
//! ([`Span`]), both whole nanoseconds, as pcapng and Linux's `SO_TIMESTAMPNS` give them.
//!
//! Two newtypes over `u64` rather than `std::time`: a `SystemTime` or `Duration` is 16 bytes
//! and normalises seconds and nanoseconds on every operation, and the flow table does time
//! arithmetic on every packet. Kernel timers, written as `Duration` in [`crate::tcp_rules`],
//! convert at compile time ([`Span::from_duration`]).

use std::fmt;
use std::iter::Sum;
use std::ops::{Add, AddAssign, Div, Mul, Sub};
use std::time::Duration;

/// A capture time: nanoseconds since the Unix epoch.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[repr(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ns` nanoseconds after the Unix epoch.
    #[inline]
    pub const fn from_nanos(ns: u64) -> Timestamp {
        Timestamp(ns)
    }

    /// Nanoseconds since the Unix epoch.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Seconds since the Unix epoch, with the fraction.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// How long after `earlier` this is; zero when it is not after it (capture clocks step
    /// back, and damaged records carry any time).
    #[inline]
    pub const fn since(self, earlier: Timestamp) -> Span {
        Span(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Span> for Timestamp {
    type Output = Timestamp;

    #[inline]
    fn add(self, span: Span) -> Timestamp {
        Timestamp(self.0.saturating_add(span.0))
    }
}

impl AddAssign<Span> for Timestamp {
    #[inline]
    fn add_assign(&mut self, span: Span) {
        *self = *self + span;
    }
}

/// Nanoseconds since the Unix epoch, as a capture file stores them.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// A length of capture time, in nanoseconds.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
)]
#[repr(transparent)]
pub struct Span(u64);

impl Span {
    /// No time.
    pub const ZERO: Span = Span(0);

    /// `ns` nanoseconds.
    #[inline]
    pub const fn from_nanos(ns: u64) -> Span {
        Span(ns)
    }

    /// `us` microseconds.
    #[inline]
    pub const fn from_micros(us: u64) -> Span {
        Span(us.saturating_mul(1_000))
    }

    /// `ms` milliseconds.
    #[inline]
    pub const fn from_millis(ms: u64) -> Span {
        Span(ms.saturating_mul(1_000_000))
    }

    /// A `Duration` (a kernel timer of [`crate::tcp_rules`]), saturating at 584 years.
    pub const fn from_duration(d: Duration) -> Span {
        let ns = d.as_nanos();
        Span(if ns > u64::MAX as u128 {
            u64::MAX
        } else {
            ns as u64
        })
    }

    /// Whole nanoseconds.
    #[inline]
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole microseconds (truncated).
    #[inline]
    pub const fn as_micros(self) -> u64 {
        self.0 / 1_000
    }

    /// Whole milliseconds (truncated).
    #[inline]
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Milliseconds with the fraction.
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// Seconds with the fraction.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - other`, zero when `other` is longer.
    #[inline]
    pub const fn saturating_sub(self, other: Span) -> Span {
        Span(self.0.saturating_sub(other.0))
    }
}

impl Add for Span {
    type Output = Span;

    #[inline]
    fn add(self, other: Span) -> Span {
        Span(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Span {
    #[inline]
    fn add_assign(&mut self, other: Span) {
        *self = *self + other;
    }
}

impl Sub for Span {
    type Output = Span;

    /// Saturating, as [`Span::saturating_sub`]: a span is never negative.
    #[inline]
    fn sub(self, other: Span) -> Span {
        self.saturating_sub(other)
    }
}

impl Sum for Span {
    fn sum<I: Iterator<Item = Span>>(spans: I) -> Span {
        spans.fold(Span::ZERO, Add::add)
    }
}

impl Mul<u64> for Span {
    type Output = Span;

    #[inline]
    fn mul(self, n: u64) -> Span {
        Span(self.0.saturating_mul(n))
    }
}

impl Div<u64> for Span {
    type Output = Span;

    #[inline]
    fn div(self, n: u64) -> Span {
        Span(self.0 / n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_between_timestamps_never_go_negative() {
        let t = Timestamp::from_nanos(5_000_000);
        let later = t + Span::from_millis(40);
        assert_eq!(later.since(t), Span::from_millis(40));
        assert_eq!(t.since(later), Span::ZERO);
        assert_eq!(
            Span::from_duration(Duration::from_millis(200)),
            Span::from_millis(200)
        );
        assert_eq!(Span::from_millis(3).as_micros(), 3_000);
    }
}
