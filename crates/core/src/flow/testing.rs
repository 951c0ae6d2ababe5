//! Conversations scripted segment by segment, for the unit tests of the flow state and of
//! the detector's rules: no sockets, no capture files.
use std::net::{IpAddr, Ipv4Addr};

use super::{SeqNumber, Span, Timestamp};
use crate::decode::{flags, Segment};

/// Builds a conversation between 10.0.0.1:40000 (client) and 10.0.0.2:80 (server), segment
/// by segment, each side's sequence numbers following what it sent.
pub struct Wire {
    pub segments: Vec<Segment>,
    pub client_seq: SeqNumber,
    pub server_seq: SeqNumber,
}

/// One millisecond.
pub const MS: Span = Span::from_millis(1);

impl Wire {
    /// A handshake at t=0 captured on the client host: the SYN-ACK comes one RTT later.
    pub fn handshake(rtt_us: u64, mss: u16) -> Wire {
        Wire::handshake_between(10, rtt_us, mss)
    }

    /// A handshake at t=0 seen from a capture point `client_us` (round trip) from the
    /// client host and `server_us` from the server host.
    pub fn handshake_between(client_us: u64, server_us: u64, mss: u16) -> Wire {
        Wire::handshake_from(client_us, server_us, mss, (1000, 90_000))
    }

    /// As [`Wire::handshake_between`], with the client's and the server's ISN.
    pub fn handshake_from(client_us: u64, server_us: u64, mss: u16, isns: (u32, u32)) -> Wire {
        let mut w = Wire {
            segments: Vec::new(),
            client_seq: SeqNumber(isns.0),
            server_seq: SeqNumber(isns.1),
        };
        let mut syn = w.seg(true, 0, flags::SYN, 0, SeqNumber(0));
        syn.mss = Some(mss);
        syn.window_scale = Some(7);
        w.segments.push(syn);
        w.client_seq += 1;
        let t = server_us * 1000;
        let mut syn_ack = w.seg(false, t, flags::SYN | flags::ACK, 0, w.client_seq);
        syn_ack.mss = Some(mss);
        syn_ack.window_scale = Some(7);
        w.segments.push(syn_ack);
        w.server_seq += 1;
        let ack = w.seg(true, t + client_us * 1000, flags::ACK, 0, w.server_seq);
        w.segments.push(ack);
        w
    }

    /// The sequence number `from_client`'s side sends next, and the one it acknowledges.
    fn seqs(&self, from_client: bool) -> (SeqNumber, SeqNumber) {
        if from_client {
            (self.client_seq, self.server_seq)
        } else {
            (self.server_seq, self.client_seq)
        }
    }

    /// Moves `from_client`'s side's next sequence number on by `len`.
    fn sent(&mut self, from_client: bool, len: u32) {
        if from_client {
            self.client_seq += len;
        } else {
            self.server_seq += len;
        }
    }

    /// A FIN from one side at `t_us`.
    pub fn fin(&mut self, from_client: bool, t_us: u64) -> &mut Wire {
        let ack = self.seqs(from_client).1;
        let s = self.seg(from_client, t_us * 1000, flags::FIN | flags::ACK, 0, ack);
        self.segments.push(s);
        self.sent(from_client, 1);
        self
    }

    fn seg(&self, from_client: bool, ts_ns: u64, fl: u8, len: u32, ack: SeqNumber) -> Segment {
        let c = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let s = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        let seq = self.seqs(from_client).0;
        let (src, dst, sp, dp) = if from_client {
            (c, s, 40000, 80)
        } else {
            (s, c, 80, 40000)
        };
        Segment {
            ts_ns: Timestamp::from_nanos(ts_ns),
            packet_number: self.segments.len() as u64 + 1,
            src,
            dst,
            src_port: sp,
            dst_port: dp,
            seq,
            ack,
            flags: fl,
            window: 512,
            payload_len: len,
            mss: None,
            window_scale: None,
            timestamps: None,
            has_sack: false,
            first_sack: None,
            ttl: 64,
            ip_id: 0,
        }
    }

    /// Data from one side at `t_us`, acknowledging everything of the other side.
    pub fn data(&mut self, from_client: bool, t_us: u64, len: u32) -> &mut Wire {
        let ack = self.seqs(from_client).1;
        let s = self.seg(from_client, t_us * 1000, flags::ACK | flags::PSH, len, ack);
        self.segments.push(s);
        self.sent(from_client, len);
        self
    }

    /// A pure ACK from one side at `t_us` with `window` (unscaled field).
    pub fn ack_window(&mut self, from_client: bool, t_us: u64, window: u16) -> &mut Wire {
        let ack = self.seqs(from_client).1;
        let mut s = self.seg(from_client, t_us * 1000, flags::ACK, 0, ack);
        s.window = window;
        self.segments.push(s);
        self
    }

    /// A pure ACK from one side at `t_us`.
    pub fn ack(&mut self, from_client: bool, t_us: u64) -> &mut Wire {
        self.ack_window(from_client, t_us, 512)
    }

    /// Resends `len` bytes ending at the side's current sequence number.
    pub fn retransmit(&mut self, from_client: bool, t_us: u64, len: u32) -> &mut Wire {
        let ack = self.seqs(from_client).1;
        let mut s = self.seg(from_client, t_us * 1000, flags::ACK | flags::PSH, len, ack);
        s.seq = s.seq - len;
        self.segments.push(s);
        self
    }

    /// The last segment added, to adjust what the builders do not set (options, fields).
    pub fn last(&mut self) -> &mut Segment {
        self.segments.last_mut().expect("a segment was added")
    }
}
