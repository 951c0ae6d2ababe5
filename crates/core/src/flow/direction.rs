//! The state of the data one side sends: its sequence space as the wire shows it, the
//! peer's window, and counters.

use super::guess::MssSource;
use super::turns::Burst;
use crate::decode::Segment;
use crate::tcp_rules;
use crate::units::{SeqNumber, Span, Timestamp};

/// The peer's receive window as it limits one side's sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PeerWindow {
    /// Open (or never seen closed).
    #[default]
    Open,
    /// The peer advertised a zero window at `since` and has not opened it since.
    Closed {
        /// When it closed.
        since: Timestamp,
    },
    /// The peer's last packet, at `at`, opened a window closed since `since`: data this side
    /// sends next, at once, was waiting for it.
    Reopened {
        /// When it closed.
        since: Timestamp,
        /// When it opened again.
        at: Timestamp,
    },
}

impl PeerWindow {
    /// The window after the peer advertised `window` (scaled) at `at` (RFC 9293 §3.8.6.1).
    pub fn advertised(self, window: u64, at: Timestamp) -> PeerWindow {
        match (self, window) {
            (PeerWindow::Closed { since }, 0) => PeerWindow::Closed { since },
            (_, 0) => PeerWindow::Closed { since: at },
            (PeerWindow::Closed { since }, _) => PeerWindow::Reopened { since, at },
            // The reopening packet was not followed by data at once: nothing was waiting.
            (PeerWindow::Reopened { .. } | PeerWindow::Open, _) => PeerWindow::Open,
        }
    }
}

/// How far below a side's newest IPv4 identification a repeated one is taken for a copy
/// ([`Direction::copy_of_earlier`]).
const COPY_WINDOW: u16 = 64;

/// State of the data one side sends (one direction of the flow), in that side's sequence
/// space. Field names follow the sender's view of RFC 9293 §3.3.1.
#[derive(Debug, Clone, Default)]
pub struct Direction {
    /// A segment from this side has been seen; the fields below are meaningful.
    pub seen: bool,
    /// Initial sequence number: the SYN's, or (mid-flow) the first segment's seq minus one, so
    /// that the first payload byte is relative 1 either way.
    pub isn: SeqNumber,
    /// One past the highest sequence number sent (`SND.NXT` as the wire shows it): a segment
    /// starting below it repeats sequence space (retransmission, probe or keepalive).
    pub snd_nxt: SeqNumber,
    /// Oldest unacknowledged sequence number (`SND.UNA`): the highest ACK the peer sent.
    /// `snd_nxt - snd_una` bytes are in flight.
    pub snd_una: SeqNumber,
    /// The peer has acknowledged something: `snd_una` is meaningful.
    pub una_known: bool,
    /// End of the last sub-MSS data segment sent (Linux `tp->snd_sml`, `tcp_minshall_update`):
    /// while `snd_una` is below it, Nagle holds the next partial segment (`tcp_minshall_check`).
    pub snd_sml: SeqNumber,
    /// The last data segment this side sent was sub-MSS (so `snd_sml` is its end).
    pub last_data_small: bool,
    /// This side sent a sub-MSS segment while an earlier sub-MSS one was unacknowledged:
    /// Nagle would have held it (`tcp_minshall_check`), so the side runs with Nagle off.
    pub nagle_off: bool,
    /// `snd_sml` holds the end of a sub-MSS segment this side sent.
    pub small_sent: bool,
    /// Whether this side's SYN carried TCP timestamps, when seen: part of its stack's
    /// fingerprint.
    pub syn_timestamps: Option<bool>,
    /// The IP TTL (hop limit) of this side's SYN, 0 when not seen: part of its fingerprint.
    pub syn_ttl: u8,
    /// Data (payload) was seen from this side: `data_from..data_nxt` holds what it sent.
    pub data_seen: bool,
    /// Start of the first payload seen from this side.
    pub data_from: SeqNumber,
    /// End of the highest payload seen from this side (a pure ACK or SYN moving `snd_nxt`
    /// ahead does not move it).
    pub data_nxt: SeqNumber,
    /// Maximum segment size this side may send.
    pub mss: u32,
    /// Where `mss` comes from.
    pub mss_source: MssSource,
    /// The largest segment this side sent, as it counts against the MSS (payload and
    /// timestamp option).
    pub largest_sent: u32,
    /// The MSS this side announced in its SYN, when seen.
    pub announced_mss: Option<u32>,
    /// Window-scale shift this side announced in its SYN (RFC 7323 §2.2); applied to its
    /// window field once both SYNs carried the option.
    pub wscale: Option<u8>,
    /// Receive window this side last advertised, scaled: the peer may send up to
    /// `ack + window`.
    pub window: u64,
    /// Capture time of this side's last packet.
    pub last_seen: Timestamp,
    /// Capture time of this side's last new-data segment.
    pub last_data: Timestamp,
    /// Capture time of this side's last transmission of payload, new or repeated (its first
    /// packet until it sends any): a retransmission timer runs from the previous send, and
    /// each backoff step from the one before it (RFC 6298 §5.5, `tcp_retransmit_timer`).
    pub last_sent: Timestamp,
    /// A timeout retransmission of this side awaits the peer's ACK: a further timer-driven
    /// resend before it is a backoff step of the same episode, not a new timeout.
    pub rto_open: bool,
    /// Whether the peer's receive window stopped this side (RFC 9293 §3.8.6.1).
    pub peer_window: PeerWindow,
    /// Round trip from the capture point to this side's host and back: 0 when captured on that
    /// host. From the handshake, then the quickest answer seen.
    pub near_rtt: Option<Span>,
    /// An upper bound of the leg from this side's immediate ACKs (of more than one full
    /// segment), when no answer timed it.
    pub leg_bound: Option<Span>,
    /// The leg as the handshake timed it, when it did.
    pub handshake_leg: Option<Span>,
    /// An answer far quicker than the handshake's leg, waiting for a second to corroborate it.
    pub quick_answer: Option<Span>,
    /// Data segments in the current turn.
    pub burst: Burst,
    /// Packets sent.
    pub packets: u64,
    /// New payload bytes sent (retransmissions excluded).
    pub bytes: u64,
    /// Segments that repeated sequence space already sent.
    pub retransmissions: u64,
    /// Retransmissions that were tail-loss probes (RFC 8985 §7), not timeouts
    /// (`detect::rto::loss_probe`).
    pub loss_probes: u64,
    /// Segments that started beyond `snd_nxt`: the capture missed data before them (dropped
    /// by the capturing host, or taken on another path).
    pub gaps: u64,
    /// A FIN was sent.
    pub fin: bool,
    /// Bytes this side's data skipped over when it jumped ahead (`gaps`), not yet seen since
    /// from their start: sent before the capture saw them, or never; data there is no resend
    /// the capture can time. The oldest such range and the newest (a resend goes from
    /// `snd_una` up); an empty range is none.
    pub unseen: [(SeqNumber, SeqNumber); 2],
    /// The peer's duplicate ACKs of this side's data since `snd_una` last moved (RFC 5681 §2:
    /// no data, same ACK, same open window, data outstanding).
    pub dup_acks: u8,
    /// This side is in loss recovery until the peer acknowledges this point (RFC 6582 §3.2
    /// `recover`: `snd_nxt` when it began): entered on the third duplicate ACK (RFC 5681
    /// §3.2) or one carrying SACK blocks (RFC 6675; Linux's RACK, RFC 8985 §6, marks losses
    /// from SACKs). Resends then follow the peer's ACKs, not only the timer.
    pub recovery_until: Option<SeqNumber>,
    /// The delay of this side's latest timeout while the loss recovery it began lasts
    /// (`recovery_until`): the timer stays backed off that long (RFC 6298 §5.5, Karn).
    pub timeout_before: Option<Span>,
    /// Capture time of the peer's latest ACK during this side's loss recovery: recovery
    /// resends answer such ACKs (RFC 6675 §5, RACK RFC 8985 §6.2).
    pub recovery_ack_at: Timestamp,
    /// The newest IPv4 identification this side's data segments and SYNs carried (the packets
    /// that can be resent; 0 while none carried one): see [`Direction::copy_of_earlier`].
    pub ip_id_newest: u16,
}

impl Direction {
    /// A side not seen yet, sending with the MSS assumed for its address family and path
    /// ([`tcp_rules::assumed_mss`]) until a SYN tells otherwise.
    pub fn assuming_mss(v6: bool, loopback: bool) -> Direction {
        Direction {
            mss: tcp_rules::assumed_mss(v6, loopback),
            mss_source: MssSource::Assumed,
            ..Direction::default()
        }
    }

    /// Bytes sent and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        if self.una_known && self.snd_una < self.snd_nxt {
            self.snd_nxt - self.snd_una
        } else {
            0
        }
    }

    /// `seg` from this side starts below `snd_nxt`: it repeats sequence space already sent.
    #[inline]
    pub fn resends(&self, seg: &Segment) -> bool {
        seg.seq < self.snd_nxt
    }

    /// `seg` from this side starts beyond `snd_nxt`: the capture missed what came between.
    #[inline]
    pub fn skips_ahead(&self, seg: &Segment) -> bool {
        self.snd_nxt < seg.seq
    }

    /// `seg` from this side carries data not sent before.
    #[inline]
    pub fn is_new_data(&self, seg: &Segment) -> bool {
        seg.payload_len > 0 && !self.resends(seg)
    }

    /// `seg` from this side is shorter than a full segment: its payload, cut into segments of
    /// the MSS less the timestamp option (`tcp_current_mss` takes the options off), ends in a
    /// partial one (`tcp_minshall_update`, [`tcp_rules::is_sub_mss`]).
    #[inline]
    pub fn is_small(&self, seg: &Segment) -> bool {
        let full = tcp_rules::payload_mss(self.mss, seg.timestamps.is_some());
        tcp_rules::is_sub_mss(u64::from(seg.payload_len), u64::from(full))
    }

    /// The leg to this side as far as a delay of its ACK is concerned: timed (handshake,
    /// answers), or bounded from above by its immediate ACKs.
    pub(crate) fn ack_leg(&self) -> Option<Span> {
        self.near_rtt.or(self.leg_bound)
    }

    /// The leg when the handshake timed it (refined by answers since): a round trip measured,
    /// that a release cannot beat. A leg from answers alone is an upper bound (the answer
    /// includes its writer's own time), and proves no release too soon.
    pub(crate) fn measured_leg(&self) -> Option<Span> {
        self.handshake_leg.and(self.near_rtt)
    }

    /// Takes `answer`, quicker than the leg known so far, for the leg. One far below the
    /// handshake's (under a quarter of it) may be an answer to something else than the packet
    /// before it; it is taken only when a second such answer corroborates it (within a factor
    /// of two), and then the larger of the two.
    pub(crate) fn refine_leg(&mut self, answer: Span) {
        let far_below = self.handshake_leg.is_some_and(|h| answer * 4 < h);
        if !far_below {
            self.near_rtt = Some(answer);
            return;
        }
        match self.quick_answer {
            Some(q) if answer <= q * 2 && q <= answer * 2 => {
                self.near_rtt = Some(q.max(answer));
            }
            _ => self.quick_answer = Some(answer),
        }
    }

    /// `seg` repeats payload this side was seen sending before (not merely sequence space a
    /// pure ACK or the SYN ran ahead to): it starts within what was seen, and does not lie
    /// wholly in a range the capture missed.
    #[inline]
    pub(crate) fn sent_before(&self, seg: &Segment) -> bool {
        let end = seg.seq + seg.payload_len;
        let unseen = self
            .unseen
            .iter()
            .any(|&(from, to)| from <= seg.seq && seg.seq < to && end <= to);
        self.data_seen && self.data_from <= seg.seq && seg.seq < self.data_nxt && !unseen
    }

    /// `seg` carries an IPv4 identification this side already used, or one just below its
    /// newest: the same packet captured twice (one capture over several VLANs or
    /// interfaces) or replayed, not a new transmission, which numbers upward. Within
    /// [`COPY_WINDOW`] of the newest: a stack that numbers at random lands there 1 time in
    /// 1,000. The ID 0 (Linux before a socket has a peer, `ip_select_ident_segs`) says
    /// nothing.
    #[inline]
    pub(crate) fn copy_of_earlier(&self, seg: &Segment) -> bool {
        seg.ip_id != 0
            && self.ip_id_newest != 0
            && self.ip_id_newest.wrapping_sub(seg.ip_id) < COPY_WINDOW
    }

    /// Counts `seg`'s IPv4 identification (see [`Direction::copy_of_earlier`]).
    #[inline]
    pub(crate) fn number(&mut self, seg: &Segment) {
        if seg.ip_id == 0 {
            return;
        }
        // Newer modulo 2^16 (RFC 1982's serial-number order, as for sequence numbers). An ID
        // of 0 is never kept, so 0 marks "none yet".
        if self.ip_id_newest == 0 || (seg.ip_id.wrapping_sub(self.ip_id_newest) as i16) > 0 {
            self.ip_id_newest = seg.ip_id;
        }
    }

    /// `seg`'s payload is below one full segment (the MSS less the timestamp option): a
    /// segment Nagle may hold. A full or larger one (a TSO/GSO super-packet) it never holds.
    #[inline]
    pub(crate) fn below_mss(&self, seg: &Segment) -> bool {
        seg.payload_len < tcp_rules::payload_mss(self.mss, seg.timestamps.is_some())
    }

    /// With no SYN to give the MSS, `seg` is the size of the largest segment this side sent
    /// before, and no smaller than any path's MSS ([`tcp_rules::MSS_DEFAULT`]): a size a
    /// sender repeats at its top is where it cuts its data, the MSS in effect, so `seg` may
    /// be a full segment.
    #[inline]
    pub(crate) fn repeats_largest(&self, seg: &Segment) -> bool {
        let size = size_against_mss(seg);
        self.mss_source != MssSource::Syn
            && size == self.largest_sent
            && size >= tcp_rules::MSS_DEFAULT
    }

    /// Notes the bytes from `data_nxt` to `seg`, which jumps ahead of them, as unseen; and
    /// what `seg` fills of an unseen range from its start as seen.
    #[inline]
    pub(crate) fn track_unseen(&mut self, seg: &Segment) {
        let end = seg.seq + seg.payload_len;
        let empty = |(from, to): (SeqNumber, SeqNumber)| from == to;
        if self.data_nxt < seg.seq {
            let slot = usize::from(!empty(self.unseen[0]));
            self.unseen[slot] = (self.data_nxt, seg.seq);
            return;
        }
        for slot in &mut self.unseen {
            let (from, to) = *slot;
            if !empty(*slot) && seg.seq <= from && from < end {
                *slot = if end < to { (end, to) } else { (to, to) };
            }
        }
        if empty(self.unseen[0]) {
            self.unseen = [self.unseen[1], self.unseen[0]];
        }
    }

    /// Raises a guessed MSS to what `seg` takes of it: a guess must at least fit what was sent
    /// (a larger MTU, or TSO/GSO super-packets on the sending host). Starting from Ethernet's
    /// rather than from the largest payload keeps a 1400 B write below it, as the kernel sees
    /// it.
    #[inline]
    pub fn fit_mss_to(&mut self, seg: &Segment) {
        let size = size_against_mss(seg);
        self.largest_sent = self.largest_sent.max(size);
        if size <= self.mss {
            return;
        }
        // The MSS in effect is never less than the largest segment sent; from the SYNs, it is
        // also never more than the larger of the two announced (a bigger payload is a GSO/TSO
        // super-packet of the sending host, cut on the wire).
        match (self.mss_source, self.announced_mss) {
            (MssSource::Syn, Some(own)) if size <= own => self.mss = size,
            (MssSource::Syn, _) => {}
            _ => self.mss = size,
        }
    }
}

/// What `seg` takes of the MSS: its payload plus the option bytes that count against it
/// (timestamps; SACK blocks are rare on data and ignored).
#[inline]
fn size_against_mss(seg: &Segment) -> u32 {
    let options = if seg.timestamps.is_some() {
        tcp_rules::TIMESTAMP_OPTION_LEN
    } else {
        0
    };
    seg.payload_len + options
}
