//! The frames of a capture that were not read as TCP, counted by reason, so that nothing is
//! skipped in silence: a capture whose TCP sits behind an encapsulation tcpstall does not
//! read, or is encrypted, says so instead of looking like a capture without TCP.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Frames not read as TCP segments, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkippedFrames {
    /// Well-formed packets of another protocol (UDP, ICMP, ARP, spanning tree...).
    pub not_tcp: u64,
    /// Non-first IP fragments: no TCP header in them, and fragments are not reassembled.
    pub fragments: u64,
    /// Cut short by the snap length, or malformed.
    pub undecodable: u64,
    /// Payloads that cannot be seen into, by what they are: encrypted (IPsec ESP, protected
    /// 802.11), compressed (IPComp).
    pub opaque: Vec<(Cow<'static, str>, u64)>,
    /// Encapsulations and link types tcpstall does not read, by name.
    pub unsupported: Vec<(Cow<'static, str>, u64)>,
}

/// Reasons named one by one in a list; past them, the rest are counted under [`OTHERS`]: a
/// file with thousands of distinct link types is read in linear time and said in one line.
pub const MAX_NAMED: usize = 32;

/// The name the reasons past [`MAX_NAMED`] are counted under.
pub const OTHERS: &str = "others, past the first 32 kinds";

/// Adds `n` to `what`'s count; true when it is the first of its name (or the first counted
/// under [`OTHERS`]).
fn count(list: &mut Vec<(Cow<'static, str>, u64)>, what: Cow<'static, str>, n: u64) -> bool {
    if let Some((_, total)) = list.iter_mut().find(|(name, _)| *name == what) {
        *total += n;
        return false;
    }
    if list.len() < MAX_NAMED {
        list.push((what, n));
        return true;
    }
    match list.iter_mut().find(|(name, _)| name == OTHERS) {
        Some((_, total)) => {
            *total += n;
            false
        }
        None => {
            list.push((Cow::Borrowed(OTHERS), n));
            true
        }
    }
}

impl SkippedFrames {
    /// Counts an opaque payload; true for the first of its kind (to warn about it once).
    pub fn opaque(&mut self, what: impl Into<Cow<'static, str>>) -> bool {
        count(&mut self.opaque, what.into(), 1)
    }

    /// Counts an unsupported encapsulation; true for the first of its kind.
    pub fn unsupported(&mut self, what: impl Into<Cow<'static, str>>) -> bool {
        count(&mut self.unsupported, what.into(), 1)
    }

    /// Frames skipped that may have held TCP: everything but other protocols.
    pub fn may_hold_tcp(&self) -> u64 {
        self.fragments
            + self.undecodable
            + self.opaque.iter().map(|(_, n)| n).sum::<u64>()
            + self.unsupported.iter().map(|(_, n)| n).sum::<u64>()
    }

    /// Every frame skipped.
    pub fn total(&self) -> u64 {
        self.not_tcp + self.may_hold_tcp()
    }

    /// Adds another file's counts.
    pub fn add(&mut self, other: &SkippedFrames) {
        self.not_tcp += other.not_tcp;
        self.fragments += other.fragments;
        self.undecodable += other.undecodable;
        for (what, n) in &other.opaque {
            count(&mut self.opaque, what.clone(), *n);
        }
        for (what, n) in &other.unsupported {
            count(&mut self.unsupported, what.clone(), *n);
        }
    }

    /// One line of reasons and counts, most telling first: `"5 encrypted (IPsec ESP), 3
    /// unsupported (802.11 in PPI), 12 not TCP"`; empty when nothing was skipped.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        for (what, n) in &self.unsupported {
            parts.push(format!("{n} unsupported ({what})"));
        }
        for (what, n) in &self.opaque {
            parts.push(format!("{n} {what}"));
        }
        if self.fragments > 0 {
            parts.push(format!("{} IP fragments (not reassembled)", self.fragments));
        }
        if self.undecodable > 0 {
            parts.push(format!("{} truncated or malformed", self.undecodable));
        }
        if self.not_tcp > 0 {
            parts.push(format!("{} not TCP", self.not_tcp));
        }
        let mut out = String::new();
        for (i, part) in parts.iter().enumerate() {
            let _ = write!(out, "{}{part}", if i > 0 { ", " } else { "" });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_by_name() {
        let mut a = SkippedFrames::default();
        assert!(a.opaque("encrypted (IPsec ESP)"));
        assert!(!a.opaque("encrypted (IPsec ESP)"));
        a.not_tcp = 4;
        let mut b = SkippedFrames::default();
        b.opaque("encrypted (IPsec ESP)");
        b.unsupported(String::from("link type 999"));
        b.fragments = 1;
        a.add(&b);
        assert_eq!(a.opaque, vec![("encrypted (IPsec ESP)".into(), 3)]);
        assert_eq!(a.unsupported, vec![("link type 999".into(), 1)]);
        assert_eq!((a.may_hold_tcp(), a.total()), (5, 9));
        assert_eq!(
            a.describe(),
            "1 unsupported (link type 999), 3 encrypted (IPsec ESP), 1 IP fragments (not \
             reassembled), 4 not TCP"
        );
    }
}
