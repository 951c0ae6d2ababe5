//! One TCP connection as the capture shows it, and how each segment moves its state: the
//! handshake, the sender's data and the receiver's ACK, each a step of its own.

use super::cadence::Cadence;
use super::direction::Direction;
use super::endpoint::Endpoint;
use super::guess::{client_by_ports, ClientGuess, MssSource, PathSource};
use super::key::sorts_before;
use super::side::Side;
use super::turns::{Burst, Turns};
use crate::decode::{flags, Segment};
use crate::tcp_rules;
use crate::units::{SeqNumber, Span, Timestamp};

/// Closed flows stay this long (capture time) so late ACKs and retransmitted FINs still match.
pub const CLOSE_GRACE: Span = Span::from_millis(2_000);
/// Flows silent this long (capture time) are retired as idle.
pub const IDLE_TIMEOUT: Span = Span::from_millis(300_000);
/// How far a segment may come stamped before the flow's latest before the flow counts as
/// read twice ([`Flow::rewound`]): capture buffers of several CPUs interleave by microseconds.
const REWIND_SLACK: Span = Span::from_millis(1);
/// Scheduling slack allowed for a segment to follow the packet that released it.
const FOLLOW_SLACK: Span = Span::from_millis(1);

/// Connection life, as far as the capture tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// SYN seen, handshake not finished.
    Opening,
    /// Data may flow both ways (also: capture started mid-flow).
    Established,
    /// A FIN was seen from one side.
    HalfClosed,
    /// FIN both ways or RST: retired after [`CLOSE_GRACE`].
    Closed {
        /// Capture time of the closing packet.
        since: Timestamp,
    },
}

/// The flow's previous packet, kept for the rules that ask "what came just before".
#[derive(Debug, Clone, Copy)]
pub struct PrevPacket {
    /// Who sent it.
    pub side: Side,
    /// Capture time.
    pub at: Timestamp,
    /// Its position among the segments of the input (0-based).
    pub ordinal: u64,
    /// Its number in its capture (tshark's `frame.number`).
    pub packet_number: u64,
    /// A pure ACK (no payload, SYN, FIN or RST).
    pub pure_ack: bool,
    /// Payload length.
    pub payload_len: u32,
    /// Its ACK field (when the ACK flag was set).
    pub ack: Option<SeqNumber>,
    /// The receiving side's `snd_una` before this packet acknowledged anything.
    pub una_before: SeqNumber,
    /// It moved the receiving side's `snd_una` forward.
    pub advanced_una: bool,
    /// Window it advertised, scaled.
    pub window: u64,
    /// Before it, the receiving side had filled the window its sender advertised earlier:
    /// that side was window-limited, not held by Nagle (judged only when the window scale is
    /// known).
    pub window_limited: bool,
}

/// What the ACK step saw, for the record of the packet ([`PrevPacket`]).
struct AckSeen {
    una_before: SeqNumber,
    advanced_una: bool,
    window: u64,
    window_before: u64,
}

/// Whether the server took the handshake, as far as the capture shows: a listener whose
/// accept queue is full drops the handshake's ACK and the data it carries, and resends its
/// SYN-ACK later (`tcp_check_req`'s `listen_overflow`, [`crate::tcp_rules::LISTEN_OVERFLOWS`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Handshake {
    /// Capture time of the client's first segment after a SYN-ACK (the handshake's ACK).
    pub client_ack_at: Option<Timestamp>,
    /// The server resent its SYN-ACK after that ACK had passed the capture point: it had not
    /// taken it (still in SYN_RECV).
    pub syn_ack_after_ack: bool,
    /// The server sent a segment without SYN: it took the handshake (or answered otherwise).
    pub server_spoke: bool,
}

/// One TCP connection (or, after port reuse, one incarnation of a 4-tuple).
#[derive(Debug, Clone)]
pub struct Flow {
    /// Position of the flow's first segment among all segments analysed (0-based): unique,
    /// and in order of first appearance.
    pub id: u64,
    /// The connection initiator.
    pub client: Endpoint,
    /// The acceptor.
    pub server: Endpoint,
    /// `client` sorts first of the flow key's two ends: with a segment's own bit
    /// ([`super::HashedKey`]), which side sent it, without comparing addresses.
    client_first: bool,
    /// How `client` was identified.
    pub client_guess: ClientGuess,
    /// Life state.
    pub state: FlowState,
    /// Per side, indexed by [`Side::index`]: the data that side sends.
    pub dirs: [Direction; 2],
    /// Both SYNs carried the window-scale option, so window fields are scaled (RFC 7323 §2.2).
    pub scaling: bool,
    /// Capture time of the first packet.
    pub first_seen: Timestamp,
    /// The previous packet of the flow (before the one being processed).
    pub prev: Option<PrevPacket>,
    /// Request/response turns.
    pub turns: Turns,
    /// Both legs of the path were timed by the handshake.
    pub handshake_timed: bool,
    /// Time of the client's latest SYN, for the handshake RTT and a SYN's resend.
    pub syn_at: Option<Timestamp>,
    /// Time of the server's latest SYN-ACK.
    pub syn_ack_at: Option<Timestamp>,
    /// The server reset the connection since the client's latest SYN: a SYN after that is
    /// the client connecting again, refused, not its SYN timer.
    pub syn_refused: bool,
    /// A segment came stamped earlier than the flow's latest (by more than a millisecond): the
    /// same traffic read again from another file, or a clock stepped back. A packet then
    /// repeats its own copy, and a repeat is no proof of a resend.
    pub rewound: bool,
    /// A sequence or acknowledgment number lay farther than any window
    /// ([`tcp_rules::MAX_WINDOW`]) from what its side had sent: the flow's numbers are damaged
    /// or crafted (a fuzzer's, a corrupt record), and a repeat or gap in them proves nothing.
    pub numbers_out_of_window: bool,
    /// What the handshake showed of the server taking it.
    pub handshake: Handshake,
    /// The client guess may still change at the flow's first data ([`ClientGuess::FirstData`]).
    pub(super) guess_open: bool,
    /// The continuation of a connection that had closed (its late retransmissions and
    /// ACKs): counted in the flow, judged by no rule.
    pub after_close: bool,
    /// Rejoins a connection that retired before (same id).
    pub continued: bool,
    /// Its packets' gaps: evenly spaced ones are generated timing.
    pub cadence: Cadence,
    /// Both addresses are loopback addresses ([`Flow::on_loopback`]).
    loopback: bool,
}

/// The segment acknowledges: its ACK field counts (a RST's does not move `snd_una`).
#[inline]
fn acknowledges(seg: &Segment) -> bool {
    seg.has(flags::ACK) && !seg.has(flags::RST)
}

/// The segment opens the connection from the client (SYN without ACK).
#[inline]
pub fn is_client_syn(seg: &Segment) -> bool {
    seg.has(flags::SYN) && !seg.has(flags::ACK)
}

impl Flow {
    /// A flow whose first captured segment is `seg`, the `id`-th of the input.
    pub fn new(id: u64, seg: &Segment) -> Flow {
        let src = Endpoint {
            addr: seg.src,
            port: seg.src_port,
        };
        let dst = Endpoint {
            addr: seg.dst,
            port: seg.dst_port,
        };
        let syn = seg.has(flags::SYN);
        let by_ports = client_by_ports(src.port, dst.port);
        let (src_is_client, guess) = if is_client_syn(seg) {
            (true, ClientGuess::Syn)
        } else if syn {
            (false, ClientGuess::SynAck)
        } else {
            (by_ports.src_is_client, by_ports.guess)
        };
        let (client, server) = if src_is_client {
            (src, dst)
        } else {
            (dst, src)
        };
        let v6 = seg.src.is_ipv6();
        let loopback = seg.src.is_loopback() && seg.dst.is_loopback();
        let dir = Direction::assuming_mss(v6, loopback);
        Flow {
            id,
            client_first: sorts_before(&client, &server),
            client,
            server,
            client_guess: guess,
            state: if syn {
                FlowState::Opening
            } else {
                FlowState::Established
            },
            dirs: [dir.clone(), dir],
            scaling: false,
            first_seen: seg.ts_ns,
            prev: None,
            turns: Turns::default(),
            handshake_timed: false,
            syn_at: None,
            syn_ack_at: None,
            syn_refused: false,
            rewound: false,
            numbers_out_of_window: false,
            handshake: Handshake::default(),
            guess_open: !syn && by_ports.open,
            after_close: false,
            continued: false,
            cadence: Cadence::default(),
            loopback,
        }
    }

    /// Settles an open client guess at the flow's first data segment: with both ports
    /// ephemeral, the side that speaks first is taken as the client. Runs before any rule
    /// sees the segment, so no stall is ever reported with the other guess.
    #[cold]
    #[inline(never)]
    pub(super) fn settle_guess(&mut self, seg: &Segment) {
        if !self.guess_open || seg.payload_len == 0 {
            return;
        }
        self.guess_open = false;
        self.client_guess = ClientGuess::FirstData;
        if self.side_of(seg) == Side::Server {
            // Nothing but pure ACKs so far: swapping the roles loses nothing.
            self.swap_roles();
        }
    }

    /// Swaps client and server, with everything kept per side.
    pub(super) fn swap_roles(&mut self) {
        std::mem::swap(&mut self.client, &mut self.server);
        self.client_first = sorts_before(&self.client, &self.server);
        self.dirs.swap(0, 1);
        if let Some(prev) = &mut self.prev {
            prev.side = prev.side.peer();
        }
    }

    /// Which side sent `seg` (the segment must belong to this flow).
    pub fn side_of(&self, seg: &Segment) -> Side {
        if seg.src == self.client.addr && seg.src_port == self.client.port {
            Side::Client
        } else {
            Side::Server
        }
    }

    /// Which side sent a segment of this flow whose source is its key's first end when
    /// `source_first` (the table's lookup: [`Flow::side_of`] without comparing addresses).
    #[inline]
    pub(super) fn side_of_source(&self, source_first: bool) -> Side {
        if source_first == self.client_first {
            Side::Client
        } else {
            Side::Server
        }
    }

    /// The state of the data `side` sends.
    pub fn dir(&self, side: Side) -> &Direction {
        &self.dirs[side.index()]
    }

    /// Where the path legs ([`Direction::near_rtt`]) come from.
    pub fn path_source(&self) -> PathSource {
        if self.handshake_timed {
            PathSource::Handshake
        } else if self.dirs.iter().any(|d| d.near_rtt.is_some()) {
            PathSource::Answers
        } else {
            PathSource::Unknown
        }
    }

    /// Capture time of the flow's last packet.
    pub fn last_seen(&self) -> Timestamp {
        self.dirs[0].last_seen.max(self.dirs[1].last_seen)
    }

    /// Closed, or finished long enough ago / idle long enough to retire at `now`.
    pub fn retirable(&self, now: Timestamp) -> bool {
        match self.state {
            FlowState::Closed { since } => now.since(since) >= CLOSE_GRACE,
            _ => now.since(self.last_seen()) >= IDLE_TIMEOUT,
        }
    }

    /// Both ends are addresses of one host's loopback: no path between them, every round trip
    /// the two stacks' own time (RFC 1122 §3.2.1.3).
    #[inline]
    pub fn on_loopback(&self) -> bool {
        self.loopback
    }

    /// Allowance for a segment of `side` to follow the packet that released it: the round trip
    /// from the capture point to `side`'s host, plus scheduling slack (1 ms, and 50 %).
    pub fn follow_allowance(&self, side: Side) -> Span {
        let near = self.dirs[side.index()].near_rtt.unwrap_or(Span::ZERO);
        near + near / 2 + FOLLOW_SLACK
    }

    /// Updates the state with `seg`, sent by `side`, the `ordinal`-th segment of the input.
    /// Rules that need the state *before* the segment run before this.
    pub fn update(&mut self, seg: &Segment, side: Side, ordinal: u64) {
        if seg.ts_ns + REWIND_SLACK < self.last_seen() {
            self.rewound = true;
        }
        self.window_step(seg, side);
        if let Some(prev) = &self.prev {
            self.cadence.observe(prev.at, seg.ts_ns);
        }
        self.handshake_step(seg, side);
        self.answer_step(seg, side);
        self.data_step(seg, side);
        let ack = self.ack_step(seg, side);
        self.close_step(seg, side);
        self.prev = Some(self.record(seg, side, &ack, ordinal));
    }

    /// Marks the flow when `seg`'s numbers lie farther than any window from what was sent
    /// ([`Flow::numbers_out_of_window`]). A SYN starts a sequence space and a RST may answer
    /// anything: neither is judged.
    #[inline]
    fn window_step(&mut self, seg: &Segment, side: Side) {
        if seg.flags & (flags::SYN | flags::RST) != 0 {
            return;
        }
        let (me, peer) = (&self.dirs[side.index()], &self.dirs[side.peer().index()]);
        let far = |n: SeqNumber, sent: SeqNumber| !n.within(sent, tcp_rules::MAX_WINDOW);
        let seq_far = me.seen && far(seg.seq, me.snd_nxt);
        let ack_far = seg.has(flags::ACK) && peer.seen && far(seg.ack, peer.snd_nxt);
        self.numbers_out_of_window |= seq_far || ack_far;
    }

    /// The handshake: ISN, MSS and window scale (RFC 9293 §3.7.1, RFC 7323 §2.2), and the
    /// near-side RTTs: SYN→SYN-ACK is the server side's, SYN-ACK→ACK the client side's.
    fn handshake_step(&mut self, seg: &Segment, side: Side) {
        let me = side.index();
        if !seg.has(flags::SYN) {
            if side == Side::Server {
                self.handshake.server_spoke = true;
            }
            self.handshake_ack_step(seg, side);
            return;
        }
        let d = &mut self.dirs[me];
        d.isn = seg.seq;
        d.wscale = seg.window_scale;
        d.syn_timestamps = Some(seg.timestamps.is_some());
        d.syn_ttl = seg.ttl;
        if let Some(mss) = seg.mss {
            self.announced_mss(side, u32::from(mss));
        }
        if seg.has(flags::ACK) {
            // A SYN-ACK resent by its timer times nothing: only the first answer to the
            // latest SYN times the server's leg.
            let answers_syn = self
                .syn_at
                .is_some_and(|s| self.syn_ack_at.map_or(true, |a| a < s));
            self.syn_ack_at = Some(seg.ts_ns);
            if self.handshake.client_ack_at.is_some() && side == Side::Server {
                self.handshake.syn_ack_after_ack = true;
            }
            if let Some(syn_at) = self.syn_at.filter(|_| answers_syn) {
                self.dirs[me].near_rtt = Some(seg.ts_ns.since(syn_at));
                self.dirs[me].handshake_leg = self.dirs[me].near_rtt;
            }
            self.scaling = self.dirs[0].wscale.is_some() && self.dirs[1].wscale.is_some();
        } else {
            self.syn_at = Some(seg.ts_ns);
        }
    }

    /// `side` announced `mss` in its SYN.
    fn announced_mss(&mut self, side: Side, mss: u32) {
        self.dirs[side.index()].announced_mss = Some(mss);
        for sender in [Side::Client, Side::Server] {
            let own = self.dirs[sender.index()].announced_mss;
            let peer = self.dirs[sender.peer().index()].announced_mss;
            let d = &mut self.dirs[sender.index()];
            match (peer, own) {
                // The MSS a side announces limits what the *peer* sends; the sender's own
                // announcement derives from its own MTU and limits it too (`tcp_sync_mss`
                // clamps `mss_cache` to the path MTU the sender knows): the smaller of the two
                // SYNs' MSS is the one in effect.
                (Some(peer), own) => {
                    d.mss = own.map_or(peer, |own| own.min(peer));
                    d.mss_source = MssSource::Syn;
                }
                // Until the peer's own SYN is seen (it may not be: a capture starting at the
                // SYN-ACK), this side's announced MSS is the best guess for its own sending.
                (None, Some(own)) if d.mss_source == MssSource::Assumed => {
                    d.mss = own;
                    d.mss_source = MssSource::OwnSyn;
                }
                _ => {}
            }
        }
    }

    /// The client's first segment after the SYN-ACK completes the handshake and times the
    /// client side's near RTT.
    fn handshake_ack_step(&mut self, seg: &Segment, side: Side) {
        let Some(syn_ack_at) = self.syn_ack_at else {
            return;
        };
        if side != Side::Client {
            return;
        }
        if self.handshake.client_ack_at.is_none() {
            self.handshake.client_ack_at = Some(seg.ts_ns);
        }
        let d = &mut self.dirs[side.index()];
        if d.near_rtt.is_some() {
            return;
        }
        d.near_rtt = Some(seg.ts_ns.since(syn_ack_at));
        d.handshake_leg = d.near_rtt;
        self.handshake_timed = self.dirs[side.peer().index()].near_rtt.is_some();
        if self.state == FlowState::Opening {
            self.state = FlowState::Established;
        }
    }

    /// Quickest answer seen from this side: data acknowledging the peer's data bounds this
    /// side's near RTT from above (undelayed exchanges; needed when the handshake is missing).
    fn answer_step(&mut self, seg: &Segment, side: Side) {
        let Some(prev) = self.prev else {
            return;
        };
        // Only answers carrying data: a pure ACK may have been delayed on purpose. And only
        // an answer that acknowledges the whole of the peer's packet before it: two segments
        // that crossed on the path (each sent before the other arrived) time nothing.
        let answers_data = prev.side != side && prev.payload_len > 0 && seg.payload_len > 0;
        let peer = &self.dirs[side.peer().index()];
        // A pure ACK of more than one full segment of the peer's data is sent at once
        // (`__tcp_ack_snd_check`; Windows ACKs every second segment): its delay after the
        // last of them bounds this side's leg from above.
        let immediate_ack = peer.data_seen
            && seg.is_pure_ack()
            && peer.una_known
            && peer.snd_nxt <= seg.ack
            && seg.ack - peer.snd_una > peer.mss;
        if immediate_ack {
            let bound = seg.ts_ns.since(peer.last_data);
            let d = &mut self.dirs[side.index()];
            if d.leg_bound.map_or(true, |b| bound < b) {
                d.leg_bound = Some(bound);
            }
        }
        let peer = &self.dirs[side.peer().index()];
        let covers = peer.snd_una < seg.ack && peer.snd_nxt <= seg.ack;
        if answers_data && seg.has(flags::ACK) && covers {
            let answer = seg.ts_ns.since(prev.at);
            let d = &mut self.dirs[side.index()];
            if d.near_rtt.map_or(true, |n| answer < n) {
                d.refine_leg(answer);
            }
        }
    }

    /// The sender's sequence space: new data, retransmission or gap, and the turn it belongs to.
    fn data_step(&mut self, seg: &Segment, side: Side) {
        let seq_end = seg.seq + seg.seq_len();
        let d = &mut self.dirs[side.index()];
        let first = !d.seen;
        if first {
            d.seen = true;
            if !seg.has(flags::SYN) {
                d.isn = seg.seq - 1;
            }
            d.snd_nxt = seq_end;
            d.last_sent = seg.ts_ns;
        }
        d.packets += 1;
        d.last_seen = seg.ts_ns;
        d.fit_mss_to(seg);
        // The packets that can be resent: their copies are told by the IPv4 identification.
        if seg.payload_len > 0 || seg.has(flags::SYN) {
            d.number(seg);
        }
        if seg.payload_len > 0 {
            d.last_sent = seg.ts_ns;
            let data_end = seg.seq + seg.payload_len;
            if !d.data_seen {
                d.data_seen = true;
                d.data_from = seg.seq;
                d.data_nxt = data_end;
            } else {
                if seg.seq < d.data_from {
                    d.data_from = seg.seq;
                }
                d.track_unseen(seg);
                if d.data_nxt < data_end {
                    d.data_nxt = data_end;
                }
            }
            // A side's first segment defines its sequence space: neither gap nor repeat.
            if !first && d.skips_ahead(seg) {
                d.gaps += 1;
            }
            if !first && d.resends(seg) {
                d.retransmissions += 1;
            } else {
                d.bytes += u64::from(seg.payload_len);
                d.last_data = seg.ts_ns;
                d.rto_open = false;
                // Two small segments in a row, the first unacknowledged. The partial tail of a
                // write whose full segments just left is not counted: Windows sends it (its
                // Nagle is not Minshall's), and Linux's own send path may have it queued.
                let small_unacked = d.small_sent && d.una_known && d.snd_una < d.snd_sml;
                let small_after_small = d.last_data_small && d.below_mss(seg);
                if small_unacked && small_after_small && !seg.has(flags::FIN) {
                    d.nagle_off = true;
                }
                d.last_data_small = d.is_small(seg);
                if d.last_data_small {
                    d.small_sent = true;
                    d.snd_sml = seq_end;
                }
                d.peer_window = super::direction::PeerWindow::Open;
                d.burst.push(seg.payload_len);
                self.turns.data(side, seg.ts_ns);
            }
        }
        if d.snd_nxt < seq_end {
            d.snd_nxt = seq_end;
        }
        if seg.has(flags::FIN) {
            d.fin = true;
        }
        if seg.payload_len > 0 {
            // The peer's turn is over once this side sends data.
            self.dirs[side.peer().index()].burst = Burst::default();
        }
    }

    /// The receiver's side of the segment: its ACK moves the peer's `SND.UNA`, its window
    /// limits what the peer may send (scaled once both SYNs carried the option; a SYN's own
    /// window never is, RFC 7323 §2.2).
    fn ack_step(&mut self, seg: &Segment, side: Side) -> AckSeen {
        let (me, peer) = (side.index(), side.peer().index());
        let shift = if self.scaling && !seg.has(flags::SYN) {
            self.dirs[me].wscale.unwrap_or(0).min(14)
        } else {
            0
        };
        let window = u64::from(seg.window) << shift;
        let mut seen = AckSeen {
            una_before: self.dirs[peer].snd_una,
            advanced_una: false,
            window,
            window_before: self.dirs[me].window,
        };
        if !acknowledges(seg) {
            return seen;
        }
        let window_before = self.dirs[me].window;
        let p = &mut self.dirs[peer];
        // A duplicate ACK (RFC 5681 §2; a closed window's ACKs answer probes, not losses),
        // and the loss recovery it may start.
        if seg.ack == p.snd_una && p.una_known && p.snd_una < p.snd_nxt && seg.is_pure_ack() {
            if window > 0 && window == window_before {
                p.dup_acks = p.dup_acks.saturating_add(1);
            }
            let sacked = seg.has_sack && seg.dsack().is_none();
            if p.recovery_until.is_none() && (p.dup_acks >= tcp_rules::DUP_THRESH || sacked) {
                p.recovery_until = Some(p.snd_nxt);
            }
        }
        if !p.una_known {
            // Mid-flow: take the first byte the capture saw from the peer as the old SND.UNA.
            seen.una_before = if p.seen { p.isn + 1 } else { seg.ack };
            seen.advanced_una = seen.una_before < seg.ack;
            p.snd_una = seg.ack;
            p.una_known = true;
        } else if p.snd_una < seg.ack {
            p.snd_una = seg.ack;
            p.dup_acks = 0;
            if p.recovery_until.is_some_and(|r| r <= seg.ack) {
                p.recovery_until = None;
                p.timeout_before = None;
            }
            seen.advanced_una = true;
            // The timeout episode ends when the peer acknowledges progress.
            p.rto_open = false;
        }
        if p.recovery_until.is_some() && !seg.has(flags::SYN) {
            p.recovery_ack_at = seg.ts_ns;
        }
        p.peer_window = p.peer_window.advertised(window, seg.ts_ns);
        self.dirs[me].window = window;
        seen
    }

    /// Closing: FIN both ways or a RST.
    fn close_step(&mut self, seg: &Segment, side: Side) {
        if seg.has(flags::RST) && side == Side::Server {
            self.syn_refused = true;
        }
        if is_client_syn(seg) {
            self.syn_refused = false;
        }
        // A client in SYN-SENT answers a stale ACK with a RST and goes on waiting for its
        // SYN-ACK (`tcp_rcv_synsent_state_process`): its SYN resent later is the same
        // connection.
        let connecting = side == Side::Client && self.syn_ack_at.is_none() && self.syn_at.is_some();
        if (seg.has(flags::RST) && !connecting) || (self.dirs[0].fin && self.dirs[1].fin) {
            if !matches!(self.state, FlowState::Closed { .. }) {
                self.state = FlowState::Closed { since: seg.ts_ns };
            }
        } else if seg.has(flags::FIN) {
            self.state = FlowState::HalfClosed;
        } else if self.state == FlowState::Opening && !seg.has(flags::SYN) {
            self.state = FlowState::Established;
        }
    }

    /// What the rules will need to know of `seg` when the next segment comes.
    fn record(&self, seg: &Segment, side: Side, ack: &AckSeen, ordinal: u64) -> PrevPacket {
        let sent_unacked = || self.dirs[side.peer().index()].snd_nxt - ack.una_before;
        PrevPacket {
            side,
            at: seg.ts_ns,
            ordinal,
            packet_number: seg.packet_number,
            pure_ack: seg.is_pure_ack(),
            payload_len: seg.payload_len,
            ack: seg.has(flags::ACK).then_some(seg.ack),
            una_before: ack.una_before,
            advanced_una: ack.advanced_una,
            window: ack.window,
            // Only with window scaling seen in both SYNs: a snap length that cuts the SYN's
            // options hides the scale and leaves windows that look tiny.
            window_limited: self.scaling
                && ack.window_before > 0
                && u64::from(sent_unacked()) >= ack.window_before,
        }
    }
}
