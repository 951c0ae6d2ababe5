//! The flow key: a segment's 4-tuple, the same for both directions.

use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use rustc_hash::FxHasher;

use crate::decode::Segment;

/// Normalised 4-tuple: the lower (address, port) first, so both directions find the same
/// flow. Addresses are stored as 128-bit numbers (IPv4 mapped into IPv6, RFC 4291 §2.5.5.2):
/// cheap to hash and compare on every packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Address of the endpoint that sorts first.
    low_addr: u128,
    /// Address of the endpoint that sorts second.
    high_addr: u128,
    /// Port of `low_addr` in the high half, port of `high_addr` in the low half.
    ports: u32,
}

fn addr_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl FlowKey {
    /// The key of `seg`'s flow, whichever way the segment travels.
    #[inline]
    pub fn of(seg: &Segment) -> FlowKey {
        let src = (addr_bits(seg.src), seg.src_port);
        let dst = (addr_bits(seg.dst), seg.dst_port);
        let ((low, low_port), (high, high_port)) = if src <= dst { (src, dst) } else { (dst, src) };
        FlowKey {
            low_addr: low,
            high_addr: high,
            ports: (u32::from(low_port) << 16) | u32::from(high_port),
        }
    }
}

/// A cheap hash of `seg`'s flow, the same both ways and for an IPv4 address however it is
/// written (as [`FlowKey`] maps it): enough to choose which detector owns the flow, on the
/// thread that decodes, which leaves the flow table's own hash ([`HashedKey`]) to the
/// detector's thread.
#[inline]
pub fn owner_hash(seg: &Segment) -> u64 {
    let fold = |addr: IpAddr| {
        let bits = addr_bits(addr);
        (bits as u64) ^ ((bits >> 64) as u64)
    };
    let ports = u64::from(seg.src_port ^ seg.dst_port);
    // XOR is symmetric in the two ends; the multiply (Fibonacci hashing) spreads it to the
    // top bits, which the owner's choice reads.
    (fold(seg.src) ^ fold(seg.dst) ^ (ports << 48)).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A flow key with its hash, for the flow table's lookup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedKey {
    /// The key.
    pub(super) key: FlowKey,
    /// Its FxHash.
    pub(super) hash: u64,
}

impl HashedKey {
    /// The key of `seg`'s flow, hashed.
    #[inline]
    pub fn of(seg: &Segment) -> HashedKey {
        HashedKey::of_key(FlowKey::of(seg))
    }

    /// `key`, hashed.
    #[inline]
    pub(super) fn of_key(key: FlowKey) -> HashedKey {
        let mut hasher = FxHasher::default();
        key.hash(&mut hasher);
        HashedKey {
            key,
            hash: hasher.finish(),
        }
    }

    /// The key's FxHash, the same for both directions of a flow.
    #[inline]
    pub fn hash(&self) -> u64 {
        self.hash
    }
}
