//! The one TCP segment type every source produces (capture files, live capture, the lab's own
//! capture) and the flow table consumes.
//!
//! Lengths come from the IP headers, never from the captured bytes: a snap-length-truncated
//! packet still tells how much payload it carried. Captures taken on the sending host show
//! TSO/GSO super-packets, so `payload_len` may exceed the MSS.

use std::net::IpAddr;

/// TCP header flag bits, as in the header's 13th byte (RFC 9293 §3.1, RFC 3168 for ECE/CWR).
pub mod flags {
    /// No more data from the sender.
    pub const FIN: u8 = 0x01;
    /// Synchronise sequence numbers.
    pub const SYN: u8 = 0x02;
    /// Reset the connection.
    pub const RST: u8 = 0x04;
    /// Push function.
    pub const PSH: u8 = 0x08;
    /// The acknowledgment field is significant.
    pub const ACK: u8 = 0x10;
    /// Urgent pointer field is significant.
    pub const URG: u8 = 0x20;
    /// ECN-Echo.
    pub const ECE: u8 = 0x40;
    /// Congestion Window Reduced.
    pub const CWR: u8 = 0x80;
}

/// One TCP segment as seen on the wire, decoded from any link type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// 1-based number of the packet in its capture, for warnings that point at it.
    pub packet_number: u64,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number of the first payload byte (of the SYN when SYN is set).
    pub seq: u32,
    /// Acknowledgment number (meaningful when `flags::ACK` is set).
    pub ack: u32,
    /// Header flags, bits of [`flags`].
    pub flags: u8,
    /// Receive window as carried in the header, before window scaling (RFC 7323 §2.3).
    pub window: u16,
    /// Payload bytes, from the IP total/payload length minus the IP and TCP headers.
    pub payload_len: u32,
    /// MSS option (SYN only).
    pub mss: Option<u16>,
    /// Window-scale shift option (SYN only).
    pub window_scale: Option<u8>,
    /// Timestamps option (TSval, TSecr), RFC 7323 §3.
    pub timestamps: Option<(u32, u32)>,
    /// SACK blocks are present (RFC 2018): the receiver saw a hole.
    pub has_sack: bool,
}

impl Segment {
    /// True when any of `bits` is set.
    pub fn has(&self, bits: u8) -> bool {
        self.flags & bits != 0
    }

    /// A pure ACK: no payload, no SYN, FIN or RST.
    pub fn is_pure_ack(&self) -> bool {
        self.payload_len == 0
            && self.has(flags::ACK)
            && !self.has(flags::SYN | flags::FIN | flags::RST)
    }

    /// Sequence space the segment occupies: payload plus one for SYN and one for FIN.
    pub fn seq_len(&self) -> u32 {
        self.payload_len + u32::from(self.has(flags::SYN)) + u32::from(self.has(flags::FIN))
    }
}
