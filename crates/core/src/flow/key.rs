//! The flow key: a segment's 4-tuple, the same for both directions.

use std::net::IpAddr;

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

/// `addr` as a 128-bit number, IPv4 mapped into IPv6 (`::ffff:a.b.c.d`, RFC 4291 §2.5.5.2).
#[inline]
fn addr_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => 0xffff_u128 << 32 | u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

/// The two halves of an address's 128 bits XORed: for a hash, all of an IPv4 address and
/// what either half of an IPv6 one carries.
#[inline]
fn fold(bits: u128) -> u64 {
    (bits as u64) ^ ((bits >> 64) as u64)
}

/// The (address, port) end `(a, pa)` sorts at or before `(b, pb)`: the order of the key's two
/// ends.
#[inline]
fn sorts_first(a: u128, pa: u16, b: u128, pb: u16) -> bool {
    a < b || (a == b && pa <= pb)
}

impl FlowKey {
    /// The key of `seg`'s flow, whichever way the segment travels, and whether the segment's source is the key's first end.
    #[inline]
    fn with_source_end(seg: &Segment) -> (FlowKey, bool) {
        let (src, dst) = (addr_bits(seg.src), addr_bits(seg.dst));
        let src_first = sorts_first(src, seg.src_port, dst, seg.dst_port);
        let key = if src_first {
            FlowKey {
                low_addr: src,
                high_addr: dst,
                ports: (u32::from(seg.src_port) << 16) | u32::from(seg.dst_port),
            }
        } else {
            FlowKey {
                low_addr: dst,
                high_addr: src,
                ports: (u32::from(seg.dst_port) << 16) | u32::from(seg.src_port),
            }
        };
        (key, src_first)
    }

    /// The flow table's hash of the key: one folded multiply of the two ends (foldhash's
    /// mixing step), the ports beside the second address. An IPv4 key's 96 bits reach the
    /// multiply unchanged.
    #[inline]
    pub(super) fn table_hash(&self) -> u64 {
        let x = fold(self.low_addr) ^ 0x243f_6a88_85a3_08d3;
        let y = fold(self.high_addr) ^ (u64::from(self.ports) << 32) ^ 0x1319_8a2e_0370_7344;
        let full = u128::from(x) * u128::from(y);
        (full as u64) ^ ((full >> 64) as u64)
    }
}

/// Whether `end` sorts first of the two ends of its flow's key (as [`FlowKey`] orders them):
/// against the bit a segment's [`HashedKey`] carries, which end sent it.
pub(super) fn sorts_before(end: &super::Endpoint, other: &super::Endpoint) -> bool {
    sorts_first(
        addr_bits(end.addr),
        end.port,
        addr_bits(other.addr),
        other.port,
    )
}

/// A cheap hash of `seg`'s flow, the same both ways and for an IPv4 address however it is
/// written (as [`FlowKey`] maps it): enough to choose which detector owns the flow, on the
/// thread that decodes, which leaves the flow table's own hash ([`HashedKey`]) to the
/// detector's thread.
#[inline]
pub fn owner_hash(seg: &Segment) -> u64 {
    let ports = u64::from(seg.src_port ^ seg.dst_port);
    // XOR is symmetric in the two ends; the multiply (Fibonacci hashing) spreads it to the
    // top bits, which the owner's choice reads.
    (fold(addr_bits(seg.src)) ^ fold(addr_bits(seg.dst)) ^ (ports << 48))
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A segment's flow key with its hash, for the flow table's lookup, and which end of the
/// key sent the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashedKey {
    /// The key.
    pub(super) key: FlowKey,
    /// Its [`FlowKey::table_hash`].
    pub(super) hash: u64,
    /// The segment's source is the key's first end.
    pub(super) source_first: bool,
}

impl HashedKey {
    /// The key of `seg`'s flow, hashed.
    #[inline]
    pub fn of(seg: &Segment) -> HashedKey {
        let (key, source_first) = FlowKey::with_source_end(seg);
        HashedKey {
            key,
            hash: key.table_hash(),
            source_first,
        }
    }

    /// The key's hash, the same for both directions of a flow.
    #[inline]
    pub fn hash(&self) -> u64 {
        self.hash
    }
}
