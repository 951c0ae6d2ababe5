//! TCP sequence numbers: 32-bit values compared modulo 2^32 (RFC 9293 §3.4, "Sequence
//! Numbers"; RFC 1982 serial-number arithmetic), so a connection that sends more than 4 GiB,
//! or starts near the top of the space, keeps its order across the wrap.

use std::cmp::Ordering;
use std::fmt;
use std::ops::{Add, AddAssign, Sub};

/// A sequence (or acknowledgment) number as carried in the TCP header.
///
/// `a < b` means `a` comes before `b` in sequence space: their difference, taken as a signed
/// 32-bit number, is negative (the kernel's `before()` in `include/net/tcp.h`). The order is
/// only meaningful between numbers less than 2^31 apart, so it is partial and there is no
/// `Ord`. Adding a length moves forward; subtracting two numbers gives the length between them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// `self - other` as a signed distance: negative when `self` comes first.
    #[inline]
    fn distance(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// Whether `self` lies at most `span` from `other`, either way round.
    #[inline]
    pub fn within(self, other: SeqNumber, span: u32) -> bool {
        self.distance(other).unsigned_abs() <= span
    }
}

impl PartialOrd for SeqNumber {
    #[inline]
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some(self.distance(*other).cmp(&0))
    }

    // Spelt out so each comparison stays one subtraction and one sign test.
    #[inline]
    fn lt(&self, other: &SeqNumber) -> bool {
        self.distance(*other) < 0
    }

    #[inline]
    fn le(&self, other: &SeqNumber) -> bool {
        self.distance(*other) <= 0
    }

    #[inline]
    fn gt(&self, other: &SeqNumber) -> bool {
        self.distance(*other) > 0
    }

    #[inline]
    fn ge(&self, other: &SeqNumber) -> bool {
        self.distance(*other) >= 0
    }
}

/// Moves forward by a length (wrapping at 2^32).
impl Add<u32> for SeqNumber {
    type Output = SeqNumber;

    #[inline]
    fn add(self, len: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(len))
    }
}

impl AddAssign<u32> for SeqNumber {
    #[inline]
    fn add_assign(&mut self, len: u32) {
        *self = *self + len;
    }
}

/// Moves back by a length (wrapping at 2^32).
impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;

    #[inline]
    fn sub(self, len: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(len))
    }
}

/// The length from `earlier` up to `self`, wrapping: meaningful when `earlier <= self`.
impl Sub for SeqNumber {
    type Output = u32;

    #[inline]
    fn sub(self, earlier: SeqNumber) -> u32 {
        self.0.wrapping_sub(earlier.0)
    }
}

/// The number as the header carries it (as tcpdump and tshark print it, absolute).
impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::SeqNumber;

    #[test]
    fn order_wraps_around_2_pow_32() {
        let top = SeqNumber(u32::MAX - 5);
        let past = top + 16;
        assert_eq!(past, SeqNumber(10));
        assert!(top < past);
        assert!(past > top);
        assert!(past >= top);
        assert_eq!(past.partial_cmp(&top), Some(std::cmp::Ordering::Greater));
        assert!(top <= top);
        assert_eq!(past - top, 16);
        assert_eq!(past - 16, top);
    }

    /// Half the space apart is the edge of the order (RFC 1982 §3.2): up to 2^31 - 1 ahead
    /// a number is later, beyond 2^31 it is taken as earlier.
    #[test]
    fn order_holds_up_to_half_the_space() {
        let a = SeqNumber(1000);
        assert!(a < a + (i32::MAX as u32));
        assert!(a > a + ((1u32 << 31) + 1));
    }
}
