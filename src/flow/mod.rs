//! The TCP flow table: per-connection, per-direction sequence state.
//!
//! Sequence numbers are kept as the raw 32-bit values of the wire and compared with serial
//! arithmetic (RFC 1982, RFC 9293 §3.4), so a connection that wraps around 2^32 keeps working;
//! [`Direction::relative`] turns them into ISN-relative offsets for people.
//!
//! Memory is bounded by the number of *active* flows: [`FlowTable::evict`] retires flows that
//! closed (FIN both ways or RST, then a grace period) or went idle, and hands them back so the
//! caller can keep a compact summary.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;

use rustc_hash::FxHasher;

use crate::decode::{flags, Segment};
use crate::tcp_rules;

/// `a` comes strictly before `b` in sequence space (RFC 1982 serial arithmetic on 32 bits).
pub fn seq_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `a` comes at or before `b` in sequence space.
pub fn seq_le(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) <= 0
}

/// Lowest port of Linux's default ephemeral range (`net.ipv4.ip_local_port_range` 32768-60999;
/// Windows and macOS use 49152-65535, within it): a port below it is a service's.
pub const EPHEMERAL_PORT_MIN: u16 = 32768;

/// Closed flows stay this long (capture time) so late ACKs and retransmitted FINs still match.
pub const CLOSE_GRACE_NS: u64 = 2_000_000_000;
/// Flows silent this long (capture time) are retired as idle.
pub const IDLE_TIMEOUT_NS: u64 = 300_000_000_000;

/// One end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Endpoint {
    /// IP address.
    pub addr: IpAddr,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// Appends the endpoint as its `Display` writes it; IPv4 digits through itoa, several times
    /// faster than `core::fmt` for the thousands of flows of a large capture's report.
    pub fn push_to(&self, out: &mut String) {
        let mut digits = itoa::Buffer::new();
        match self.addr {
            IpAddr::V4(a) => {
                for (i, octet) in a.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    out.push_str(digits.format(octet));
                }
            }
            IpAddr::V6(a) => {
                use fmt::Write as _;
                // Writing to a String cannot fail.
                let _ = write!(out, "[{a}]");
            }
        }
        out.push(':');
        out.push_str(digits.format(self.port));
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// Normalised 4-tuple: the lower (address, port) first, so both directions find the same
/// flow. Addresses are stored as 128-bit numbers (IPv4 mapped into IPv6, RFC 4291 §2.5.5.2):
/// cheap to hash and compare on every packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Address of the endpoint that sorts first.
    pub low_addr: u128,
    /// Address of the endpoint that sorts second.
    pub high_addr: u128,
    /// Port of `low_addr` in the high half, port of `high_addr` in the low half.
    pub ports: u32,
}

fn addr_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(a.to_ipv6_mapped()),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl FlowKey {
    /// The key of a segment and whether the segment travels from the low to the high endpoint.
    pub fn of(seg: &Segment) -> (FlowKey, bool) {
        let src = (addr_bits(seg.src), seg.src_port);
        let dst = (addr_bits(seg.dst), seg.dst_port);
        let ports = |lo: u16, hi: u16| (u32::from(lo) << 16) | u32::from(hi);
        if src <= dst {
            let key = FlowKey {
                low_addr: src.0,
                high_addr: dst.0,
                ports: ports(src.1, dst.1),
            };
            (key, true)
        } else {
            let key = FlowKey {
                low_addr: dst.0,
                high_addr: src.0,
                ports: ports(dst.1, src.1),
            };
            (key, false)
        }
    }
}

/// Which end of the connection: the client opened it (sent the SYN).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// The connection initiator.
    Client,
    /// The side that accepted the connection.
    Server,
}

impl Side {
    /// The other end.
    pub fn peer(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }

    /// Index into per-direction arrays.
    pub fn index(self) -> usize {
        match self {
            Side::Client => 0,
            Side::Server => 1,
        }
    }

    /// Stable lower-case name (`client`, `server`), as in the JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Side::Client => "client",
            Side::Server => "server",
        }
    }
}

/// How the client of a flow was identified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientGuess {
    /// The client sent the SYN: certain.
    Syn,
    /// Only the SYN-ACK was seen: its receiver is the client.
    SynAck,
    /// The capture starts mid-flow; one port is below the ephemeral range
    /// ([`EPHEMERAL_PORT_MIN`]) and the other in it: the lower one is the server's.
    ServicePort,
    /// The capture starts mid-flow and both ports are on the same side of the ephemeral range,
    /// so they tell little: the side with the larger port. With both ports ephemeral this
    /// holds only until the first data is seen ([`ClientGuess::FirstData`]).
    EphemeralPort,
    /// The capture starts mid-flow with both ports ephemeral (a server on a port the kernel
    /// picked): the side that sent the first data, since a client speaks first in
    /// request/response protocols (a capture cut just after the handshake shows its request).
    FirstData,
}

impl ClientGuess {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ClientGuess::Syn => "syn",
            ClientGuess::SynAck => "syn_ack",
            ClientGuess::ServicePort => "service_port",
            ClientGuess::EphemeralPort => "ephemeral_port",
            ClientGuess::FirstData => "first_data",
        }
    }

    /// The capture has no SYN of the flow: client and server are guessed.
    pub fn is_guess(self) -> bool {
        !matches!(self, ClientGuess::Syn | ClientGuess::SynAck)
    }

    /// How the client was told apart, in words.
    pub fn describe(self) -> &'static str {
        match self {
            ClientGuess::Syn => "the client sent the SYN",
            ClientGuess::SynAck => "capture starts at the SYN-ACK: its receiver is the client",
            ClientGuess::ServicePort => {
                "capture starts mid-flow: client guessed from ports (the server's is below the \
                 ephemeral range)"
            }
            ClientGuess::EphemeralPort => {
                "capture starts mid-flow: client guessed from ports (the larger one)"
            }
            ClientGuess::FirstData => {
                "capture starts mid-flow: client guessed as the side that sent data first"
            }
        }
    }
}

/// Where the MSS of a direction comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MssSource {
    /// The MSS option of the peer's SYN (what this side may send, RFC 9293 §3.7.1).
    Syn,
    /// The peer's SYN was not seen, this side's was: the MSS this side announced, as both ends
    /// of a path usually announce the same (each derives it from its interface's MTU); raised
    /// to the largest segment seen when larger.
    OwnSyn,
    /// No SYN seen: Ethernet's MSS ([`tcp_rules::DEFAULT_MSS_V4`]; loopback's on `lo` addresses), or the
    /// largest segment seen when larger.
    #[default]
    Assumed,
}

impl MssSource {
    /// Stable name for reports.
    pub fn name(self) -> &'static str {
        match self {
            MssSource::Syn => "syn",
            MssSource::OwnSyn => "own_syn",
            MssSource::Assumed => "assumed",
        }
    }
}

/// Connection life, as far as the capture tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// SYN seen, handshake not finished.
    Opening,
    /// Data may flow both ways (also: capture started mid-flow).
    Established,
    /// A FIN was seen from one side.
    HalfClosed,
    /// FIN both ways or RST: retired after [`CLOSE_GRACE_NS`].
    Closed {
        /// Capture time of the closing packet.
        since_ns: u64,
    },
}

/// The peer's receive window as it limits one side's sending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PeerWindow {
    /// Open (or never seen closed).
    #[default]
    Open,
    /// The peer advertised a zero window at `since_ns` and has not opened it since.
    Closed {
        /// When it closed.
        since_ns: u64,
    },
    /// The peer's last packet, at `at_ns`, opened a window closed since `since_ns`: data this
    /// side sends next, at once, was waiting for it.
    Reopened {
        /// When it closed.
        since_ns: u64,
        /// When it opened again.
        at_ns: u64,
    },
}

/// Sizes of the data segments one side sent in the current turn (since the peer last sent
/// data): the application's writes as far as the wire shows them. Fixed size: no allocation
/// per packet.
#[derive(Debug, Clone, Copy, Default)]
pub struct Burst {
    /// Payload sizes, first ones kept when more than fit.
    pub sizes: [u32; 8],
    /// Number of data segments in the turn (may exceed `sizes.len()`).
    pub count: u32,
    /// Payload bytes in the turn.
    pub bytes: u64,
    /// Capture time of the turn's first data segment.
    pub first_ns: u64,
}

impl Burst {
    fn push(&mut self, len: u32, ts_ns: u64) {
        if self.count == 0 {
            self.first_ns = ts_ns;
        }
        if let Some(slot) = self.sizes.get_mut(self.count as usize) {
            *slot = len;
        }
        self.count = self.count.saturating_add(1);
        self.bytes += u64::from(len);
    }

    /// The recorded sizes.
    pub fn recorded(&self) -> &[u32] {
        &self.sizes[..(self.count as usize).min(self.sizes.len())]
    }
}

/// State of the data one side sends (one direction of the flow), in that side's sequence
/// space. Field names follow the sender's view of RFC 9293 §3.3.1.
#[derive(Debug, Clone, Default)]
pub struct Direction {
    /// A segment from this side has been seen; the fields below are meaningful.
    pub seen: bool,
    /// Initial sequence number: the SYN's, or (mid-flow) the first segment's seq minus one, so
    /// that the first payload byte is relative 1 either way.
    pub isn: u32,
    /// One past the highest sequence number sent (`SND.NXT` as the wire shows it): a segment
    /// starting below it repeats sequence space (retransmission, probe or keepalive).
    pub snd_nxt: u32,
    /// Oldest unacknowledged sequence number (`SND.UNA`): the highest ACK the peer sent.
    /// `snd_nxt - snd_una` bytes are in flight.
    pub snd_una: u32,
    /// The peer has acknowledged something: `snd_una` is meaningful.
    pub una_known: bool,
    /// End of the last sub-MSS data segment sent (Linux `tp->snd_sml`, `tcp_minshall_update`):
    /// while `snd_una` is below it, Nagle holds the next partial segment (`tcp_minshall_check`).
    pub snd_sml: u32,
    /// The last data segment this side sent was sub-MSS (so `snd_sml` is its end).
    pub last_data_small: bool,
    /// Maximum segment size this side may send.
    pub mss: u32,
    /// Where `mss` comes from.
    pub mss_source: MssSource,
    /// Largest payload seen from this side (TSO/GSO super-packets included).
    pub largest_payload: u32,
    /// Window-scale shift this side announced in its SYN (RFC 7323 §2.2); applied to its
    /// window field once both SYNs carried the option.
    pub wscale: Option<u8>,
    /// Receive window this side last advertised, scaled: the peer may send up to
    /// `ack + window`.
    pub window: u64,
    /// Capture time of this side's last packet.
    pub last_ns: u64,
    /// Capture time of this side's last new-data segment.
    pub last_data_ns: u64,
    /// Last TSval this side sent (RFC 7323 §3).
    pub last_tsval: Option<u32>,
    /// Whether the peer's receive window stopped this side (RFC 9293 §3.8.6.1).
    pub peer_window: PeerWindow,
    /// Round trip from the capture point to this side's host and back: 0 when captured on that
    /// host. From the handshake, then the quickest answer seen.
    pub near_rtt_ns: Option<u64>,
    /// Data segments in the current turn.
    pub burst: Burst,
    /// Packets sent.
    pub packets: u64,
    /// New payload bytes sent (retransmissions excluded).
    pub bytes: u64,
    /// Segments that repeated sequence space already sent.
    pub retransmissions: u64,
    /// Segments that started beyond `snd_nxt`: the capture missed data before them (dropped
    /// by the capturing host, or taken on another path).
    pub gaps: u64,
    /// A FIN was sent.
    pub fin: bool,
}

impl Direction {
    /// Offset of `seq` from the ISN, for display (wraps correctly).
    pub fn relative(&self, seq: u32) -> u32 {
        seq.wrapping_sub(self.isn)
    }

    /// Bytes sent and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        if self.una_known && seq_lt(self.snd_una, self.snd_nxt) {
            self.snd_nxt.wrapping_sub(self.snd_una)
        } else {
            0
        }
    }

    /// The last sub-MSS data segment is still unacknowledged (`tcp_minshall_check`).
    pub fn small_unacked(&self) -> bool {
        self.last_data_small && self.una_known && seq_lt(self.snd_una, self.snd_sml)
    }

    /// `seg` from this side is shorter than a full segment: its payload plus the timestamp
    /// option is below the MSS (`tcp_current_mss` takes the options off; `tcp_minshall_update`
    /// marks a segment small against that).
    #[inline]
    pub fn is_small(&self, seg: &Segment) -> bool {
        let full = tcp_rules::payload_mss(self.mss, seg.timestamps.is_some());
        tcp_rules::is_sub_mss(u64::from(seg.payload_len), u64::from(full))
    }

    fn assume_mss(&mut self, v6: bool, loopback: bool) {
        self.mss = tcp_rules::assumed_mss(v6, loopback);
        self.mss_source = MssSource::Assumed;
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

/// Turn latencies reserved at a flow's first answered turn.
const LATENCIES_RESERVED: usize = 32;
/// Longest list of turn latencies kept per flow: enough for a p99, bounded memory.
pub const MAX_TURNS_KEPT: usize = 65_536;

/// Request/response turns: a request starts when the client sends new data after the server
/// answered (or first); its latency runs to the last server data before the next request.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    /// Requests seen.
    pub requests: u64,
    /// Latency of each finished turn that got an answer, microseconds (first
    /// [`MAX_TURNS_KEPT`]).
    pub latencies_us: Vec<u32>,
    /// Capture time of each turn of `latencies_us`, the same index.
    pub starts_ns: Vec<u64>,
    /// Capture time of the current request's first byte.
    start_ns: u64,
    /// Capture time of the server's last data in the current turn, if it answered yet.
    answered_ns: Option<u64>,
}

impl Turns {
    fn client_data(&mut self, ts_ns: u64) {
        if self.requests > 0 && self.answered_ns.is_none() {
            return; // still the same request
        }
        self.finish();
        self.requests += 1;
        self.start_ns = ts_ns;
    }

    fn server_data(&mut self, ts_ns: u64) {
        if self.requests > 0 {
            self.answered_ns = Some(ts_ns);
        }
    }

    /// Closes the current turn, recording its latency when it was answered.
    pub fn finish(&mut self) {
        if let Some(end) = self.answered_ns.take() {
            if self.latencies_us.len() < MAX_TURNS_KEPT {
                // Room for a keep-alive connection's turns at once, instead of growing from 4
                // through five reallocations.
                if self.latencies_us.is_empty() {
                    self.latencies_us.reserve(LATENCIES_RESERVED);
                }
                let us = end.saturating_sub(self.start_ns) / 1000;
                self.latencies_us
                    .push(u32::try_from(us).unwrap_or(u32::MAX));
                self.starts_ns.push(self.start_ns);
            }
        }
    }
}

/// The flow's previous packet, kept for the rules that ask "what came just before".
#[derive(Debug, Clone, Copy)]
pub struct PrevPacket {
    /// Who sent it.
    pub side: Side,
    /// Capture time.
    pub ts_ns: u64,
    /// A pure ACK (no payload, SYN, FIN or RST).
    pub pure_ack: bool,
    /// Payload length.
    pub payload_len: u32,
    /// Its ACK field (when the ACK flag was set).
    pub ack: Option<u32>,
    /// The receiving side's `snd_una` before this packet acknowledged anything.
    pub una_before: u32,
    /// It moved the receiving side's `snd_una` forward.
    pub advanced_una: bool,
    /// Window it advertised, scaled.
    pub window: u64,
    /// Before it, the receiving side had filled the window its sender advertised earlier:
    /// that side was window-limited, not held by Nagle (judged only when the window scale is
    /// known).
    pub window_limited: bool,
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
    /// How `client` was identified.
    pub client_guess: ClientGuess,
    /// Life state.
    pub state: FlowState,
    /// Per side, indexed by [`Side::index`]: the data that side sends.
    pub dirs: [Direction; 2],
    /// Both SYNs carried the window-scale option, so window fields are scaled (RFC 7323 §2.2).
    pub scaling: bool,
    /// Capture time of the first packet.
    pub first_ns: u64,
    /// The previous packet of the flow (before the one being processed).
    pub prev: Option<PrevPacket>,
    /// Request/response turns.
    pub turns: Turns,
    /// Time of the SYN, for the handshake RTT.
    syn_ns: Option<u64>,
    /// Time of the SYN-ACK, for the handshake RTT.
    syn_ack_ns: Option<u64>,
    /// The client guess may still change at the flow's first data ([`ClientGuess::FirstData`]).
    guess_open: bool,
}

impl Flow {
    fn new(id: u64, seg: &Segment) -> Flow {
        let src = Endpoint {
            addr: seg.src,
            port: seg.src_port,
        };
        let dst = Endpoint {
            addr: seg.dst,
            port: seg.dst_port,
        };
        let syn = seg.has(flags::SYN);
        let ack = seg.has(flags::ACK);
        // Mid-flow: a port below the ephemeral range is a service's; when both are ephemeral
        // (or both below), the larger port is taken as the client's for now.
        let src_ephemeral = src.port >= EPHEMERAL_PORT_MIN;
        let dst_ephemeral = dst.port >= EPHEMERAL_PORT_MIN;
        let (src_is_client_by_ports, port_guess) = if src_ephemeral != dst_ephemeral {
            (src_ephemeral, ClientGuess::ServicePort)
        } else {
            (src.port > dst.port, ClientGuess::EphemeralPort)
        };
        let (client, server, guess) = if syn && !ack {
            (src, dst, ClientGuess::Syn)
        } else if syn {
            (dst, src, ClientGuess::SynAck)
        } else if src_is_client_by_ports {
            (src, dst, port_guess)
        } else {
            (dst, src, port_guess)
        };
        let v6 = seg.src.is_ipv6();
        let loopback = seg.src.is_loopback() && seg.dst.is_loopback();
        let mut dirs: [Direction; 2] = Default::default();
        for d in &mut dirs {
            d.assume_mss(v6, loopback);
        }
        Flow {
            id,
            client,
            server,
            client_guess: guess,
            state: if syn {
                FlowState::Opening
            } else {
                FlowState::Established
            },
            dirs,
            scaling: false,
            first_ns: seg.ts_ns,
            prev: None,
            turns: Turns::default(),
            syn_ns: None,
            syn_ack_ns: None,
            guess_open: !syn && src_ephemeral && dst_ephemeral,
        }
    }

    /// Settles an open client guess at the flow's first data segment: with both ports
    /// ephemeral, the side that speaks first is taken as the client. Runs before any rule
    /// sees the segment, so no stall is ever reported with the other guess.
    #[cold]
    #[inline(never)]
    fn settle_guess(&mut self, seg: &Segment) {
        if !self.guess_open || seg.payload_len == 0 {
            return;
        }
        self.guess_open = false;
        self.client_guess = ClientGuess::FirstData;
        if self.side_of(seg) == Side::Server {
            // Nothing but pure ACKs so far: swapping the roles loses nothing.
            std::mem::swap(&mut self.client, &mut self.server);
            self.dirs.swap(0, 1);
            if let Some(prev) = &mut self.prev {
                prev.side = prev.side.peer();
            }
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

    /// The state of the data `side` sends.
    pub fn dir(&self, side: Side) -> &Direction {
        &self.dirs[side.index()]
    }

    /// Closed, or finished long enough ago / idle long enough to retire at `now_ns`.
    pub fn retirable(&self, now_ns: u64) -> bool {
        let last = self.dirs[0].last_ns.max(self.dirs[1].last_ns);
        match self.state {
            FlowState::Closed { since_ns } => now_ns.saturating_sub(since_ns) >= CLOSE_GRACE_NS,
            _ => now_ns.saturating_sub(last) >= IDLE_TIMEOUT_NS,
        }
    }

    /// Allowance for a segment of `side` to follow the packet that released it: the round trip
    /// from the capture point to `side`'s host, plus scheduling slack (1 ms, and 50 %).
    pub fn follow_allowance_ns(&self, side: Side) -> u64 {
        let near = self.dirs[side.index()].near_rtt_ns.unwrap_or(0);
        near + near / 2 + 1_000_000
    }

    /// Updates the sequence state with `seg`, sent by `side`. Rules that need the state
    /// *before* the segment run before this.
    pub fn update(&mut self, seg: &Segment, side: Side) {
        let me = side.index();
        let peer = side.peer().index();
        let syn = seg.has(flags::SYN);
        let seq_end = seg.seq.wrapping_add(seg.seq_len());

        // Handshake: ISN, MSS and window scale (RFC 9293 §3.7.1, RFC 7323 §2.2), and the
        // near-side RTTs: SYN→SYN-ACK is the server side's, SYN-ACK→ACK the client side's.
        if syn {
            let d = &mut self.dirs[me];
            d.isn = seg.seq;
            d.wscale = seg.window_scale;
            if let Some(mss) = seg.mss {
                // The MSS a side announces limits what the *peer* sends.
                self.dirs[peer].mss = u32::from(mss);
                self.dirs[peer].mss_source = MssSource::Syn;
                // Until the peer's own SYN is seen (it may not be: a capture starting at the
                // SYN-ACK), this side's announced MSS is the best guess for its own sending.
                if self.dirs[me].mss_source == MssSource::Assumed {
                    self.dirs[me].mss = u32::from(mss);
                    self.dirs[me].mss_source = MssSource::OwnSyn;
                }
            }
            if seg.has(flags::ACK) {
                self.syn_ack_ns = Some(seg.ts_ns);
                if let Some(syn_ns) = self.syn_ns {
                    self.dirs[me].near_rtt_ns = Some(seg.ts_ns.saturating_sub(syn_ns));
                }
                self.scaling = self.dirs[0].wscale.is_some() && self.dirs[1].wscale.is_some();
            } else {
                self.syn_ns = Some(seg.ts_ns);
            }
        } else if let (Some(syn_ack_ns), None) = (self.syn_ack_ns, self.dirs[me].near_rtt_ns) {
            if side == Side::Client {
                self.dirs[me].near_rtt_ns = Some(seg.ts_ns.saturating_sub(syn_ack_ns));
                if self.state == FlowState::Opening {
                    self.state = FlowState::Established;
                }
            }
        }

        // Quickest answer seen from this side: data acknowledging the peer's data bounds this
        // side's near RTT from above (undelayed exchanges; needed when the handshake is missing).
        if let (Some(prev), Some(ack)) = (self.prev, seg.has(flags::ACK).then_some(seg.ack)) {
            let peer_dir = &self.dirs[peer];
            // Only answers carrying data: a pure ACK may have been delayed on purpose.
            let answers = prev.side != side && prev.payload_len > 0 && seg.payload_len > 0;
            if answers && seq_lt(peer_dir.snd_una, ack) {
                let answer = seg.ts_ns.saturating_sub(prev.ts_ns);
                let d = &mut self.dirs[me];
                if d.near_rtt_ns.map_or(true, |n| answer < n) {
                    d.near_rtt_ns = Some(answer);
                }
            }
        }

        // Sequence space of the sender.
        let d = &mut self.dirs[me];
        if !d.seen {
            d.seen = true;
            if !syn {
                d.isn = seg.seq.wrapping_sub(1);
            }
            d.snd_nxt = seq_end;
        }
        d.packets += 1;
        d.last_ns = seg.ts_ns;
        if let Some((tsval, _)) = seg.timestamps {
            d.last_tsval = Some(tsval);
        }
        d.largest_payload = d.largest_payload.max(seg.payload_len);
        // A guessed MSS must at least fit what was sent (a larger MTU, or TSO/GSO super-packets
        // on the sending host); starting from Ethernet's rather than from the largest payload
        // keeps a 1400 B write below it, as the kernel sees it.
        let size = size_against_mss(seg);
        if d.mss_source != MssSource::Syn && size > d.mss {
            d.mss = size;
        }
        if seg.payload_len > 0 {
            if d.packets > 1 && seq_lt(d.snd_nxt, seg.seq) {
                d.gaps += 1;
            }
            if seq_lt(seg.seq, d.snd_nxt) && d.packets > 1 {
                d.retransmissions += 1;
            } else {
                d.bytes += u64::from(seg.payload_len);
                d.last_data_ns = seg.ts_ns;
                d.last_data_small = d.is_small(seg);
                if d.last_data_small {
                    d.snd_sml = seq_end;
                }
                d.peer_window = PeerWindow::Open;
                d.burst.push(seg.payload_len, seg.ts_ns);
                match side {
                    Side::Client => self.turns.client_data(seg.ts_ns),
                    Side::Server => self.turns.server_data(seg.ts_ns),
                }
            }
        }
        if seq_lt(d.snd_nxt, seq_end) {
            d.snd_nxt = seq_end;
        }
        if seg.has(flags::FIN) {
            d.fin = true;
        }
        if seg.payload_len > 0 {
            // The peer's turn is over once this side sends data.
            self.dirs[peer].burst = Burst::default();
        }

        // The ACK moves the peer's SND.UNA; the window limits what the peer may send.
        let shift = if self.scaling && !syn {
            self.dirs[me].wscale.unwrap_or(0).min(14)
        } else {
            0
        };
        let window = u64::from(seg.window) << shift;
        let mut una_before = self.dirs[peer].snd_una;
        let mut advanced = false;
        let window_before = self.dirs[me].window;
        if seg.has(flags::ACK) && !seg.has(flags::RST) {
            let p = &mut self.dirs[peer];
            if !p.una_known {
                // Mid-flow: take the first byte the capture saw from the peer as the old SND.UNA.
                una_before = if p.seen {
                    p.isn.wrapping_add(1)
                } else {
                    seg.ack
                };
                advanced = seq_lt(una_before, seg.ack);
                p.snd_una = seg.ack;
                p.una_known = true;
            } else if seq_lt(p.snd_una, seg.ack) {
                p.snd_una = seg.ack;
                advanced = true;
            }
            p.peer_window = match (p.peer_window, window) {
                (PeerWindow::Closed { since_ns }, 0) => PeerWindow::Closed { since_ns },
                (_, 0) => PeerWindow::Closed {
                    since_ns: seg.ts_ns,
                },
                (PeerWindow::Closed { since_ns }, _) => PeerWindow::Reopened {
                    since_ns,
                    at_ns: seg.ts_ns,
                },
                // The reopening packet was not followed by data at once: nothing was waiting.
                (PeerWindow::Reopened { .. } | PeerWindow::Open, _) => PeerWindow::Open,
            };
            self.dirs[me].window = window;
        }

        // Closing: FIN both ways or a RST.
        if seg.has(flags::RST) || (self.dirs[0].fin && self.dirs[1].fin) {
            if !matches!(self.state, FlowState::Closed { .. }) {
                self.state = FlowState::Closed {
                    since_ns: seg.ts_ns,
                };
            }
        } else if seg.has(flags::FIN) {
            self.state = FlowState::HalfClosed;
        } else if self.state == FlowState::Opening && !syn {
            self.state = FlowState::Established;
        }

        self.prev = Some(PrevPacket {
            side,
            ts_ns: seg.ts_ns,
            pure_ack: seg.is_pure_ack(),
            payload_len: seg.payload_len,
            ack: seg.has(flags::ACK).then_some(seg.ack),
            una_before,
            advanced_una: advanced,
            window,
            // Only with window scaling seen in both SYNs: a snap length that cuts the SYN's
            // options hides the scale and leaves windows that look tiny.
            window_limited: self.scaling
                && self.dirs[me].seen
                && u64::from(self.dirs[peer].snd_nxt.wrapping_sub(una_before)) >= window_before
                && window_before > 0,
        });
    }
}

/// All active flows, keyed by normalised 4-tuple (FxHash: the key is not attacker-chosen in a
/// way that matters for an offline analysis, and the hash is cheap).
#[derive(Debug, Default)]
pub struct FlowTable {
    /// 4-tuple hash → index into `slots`.
    index: SlotIndex,
    /// The flows; `None` marks a free slot listed in `free`.
    slots: Vec<Option<(FlowKey, Flow)>>,
    free: Vec<u32>,
}

/// What [`FlowTable::lookup`] found.
pub struct Lookup<'a> {
    /// The flow the segment belongs to.
    pub flow: &'a mut Flow,
    /// Which side sent the segment.
    pub side: Side,
}

/// A flow key with its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HashedKey {
    key: FlowKey,
    hash: u64,
}

impl HashedKey {
    /// The key of `seg`'s flow, hashed.
    #[inline]
    fn of(seg: &Segment) -> HashedKey {
        HashedKey::of_key(FlowKey::of(seg).0)
    }

    #[inline]
    fn of_key(key: FlowKey) -> HashedKey {
        let mut hasher = FxHasher::default();
        key.hash(&mut hasher);
        HashedKey {
            key,
            hash: hasher.finish(),
        }
    }
}

/// Open-addressing index from a key's hash to its slot, linear probing. Eight bytes an entry
/// (32 bits of hash, the slot) keep the index of a few thousand flows in the nearest caches,
/// where a map holding the 48-byte keys themselves missed on most segments; the key is
/// compared in the slot, which the segment needs next anyway.
#[derive(Debug, Default)]
struct SlotIndex {
    /// `hash32 << 32 | slot`, or [`SlotIndex::EMPTY`]; the length is a power of two.
    entries: Vec<u64>,
    len: usize,
}

impl SlotIndex {
    const EMPTY: u64 = u64::MAX;
    const MIN_CAPACITY: usize = 64;

    fn hash32(hash: u64) -> u64 {
        hash >> 32
    }

    fn mask(&self) -> usize {
        self.entries.len().wrapping_sub(1)
    }

    /// The slot under `hash` for which `is_key` holds, and where its entry is.
    #[inline]
    fn find(&self, hash: u64, is_key: impl Fn(u32) -> bool) -> Option<(usize, u32)> {
        if self.entries.is_empty() {
            return None;
        }
        let tag = Self::hash32(hash);
        let mut pos = tag as usize & self.mask();
        loop {
            let entry = self.entries[pos];
            if entry == Self::EMPTY {
                return None;
            }
            let slot = entry as u32;
            if entry >> 32 == tag && is_key(slot) {
                return Some((pos, slot));
            }
            pos = (pos + 1) & self.mask();
        }
    }

    fn insert(&mut self, hash: u64, slot: u32) {
        // At most half full: probe sequences stay short.
        if (self.len + 1) * 2 > self.entries.len() {
            self.grow();
        }
        self.place(Self::hash32(hash) << 32 | u64::from(slot));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mut pos = (entry >> 32) as usize & self.mask();
        while self.entries[pos] != Self::EMPTY {
            pos = (pos + 1) & self.mask();
        }
        self.entries[pos] = entry;
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(Self::MIN_CAPACITY);
        let old = std::mem::replace(&mut self.entries, vec![Self::EMPTY; capacity]);
        for entry in old.into_iter().filter(|&e| e != Self::EMPTY) {
            self.place(entry);
        }
    }

    /// Empties the entry at `pos`, shifting back the entries after it that probed past it
    /// (deletion without tombstones, so lookups never slow down with churn).
    fn remove_at(&mut self, mut pos: usize) {
        let mask = self.mask();
        self.entries[pos] = Self::EMPTY;
        self.len -= 1;
        let mut next = (pos + 1) & mask;
        while self.entries[next] != Self::EMPTY {
            let home = (self.entries[next] >> 32) as usize & mask;
            // The entry may fill the hole when the hole lies on its probe path from home.
            if (next.wrapping_sub(home) & mask) >= (next.wrapping_sub(pos) & mask) {
                self.entries[pos] = self.entries[next];
                self.entries[next] = Self::EMPTY;
                pos = next;
            }
            next = (next + 1) & mask;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.len = 0;
    }
}

impl FlowTable {
    /// An empty table.
    pub fn new() -> FlowTable {
        FlowTable::default()
    }

    /// Number of active flows.
    pub fn len(&self) -> usize {
        self.index.len
    }

    /// No active flow.
    pub fn is_empty(&self) -> bool {
        self.index.len == 0
    }

    fn remove_slot(&mut self, slot: u32) -> Option<Flow> {
        let (key, flow) = self.slots.get_mut(slot as usize)?.take()?;
        let hash = HashedKey::of_key(key).hash;
        if let Some((pos, _)) = self.index.find(hash, |s| s == slot) {
            self.index.remove_at(pos);
        }
        self.free.push(slot);
        Some(flow)
    }

    /// Finds or creates the flow of `seg`, the `ordinal`-th segment of the input (0-based; it
    /// becomes the id of a new flow). A SYN on a 4-tuple already in use with another ISN (port
    /// reuse), or any segment of a flow that is retirable by its own times (closed more than
    /// [`CLOSE_GRACE_NS`] ago, idle for [`IDLE_TIMEOUT_NS`]), starts a new flow and returns the
    /// old one to `retire`: the outcome depends on the flow's packets alone, not on when the
    /// table was last swept. (A callback rather than a returned `Option<Flow>`: the flow is
    /// large, and moving it out on every lookup costs a copy per packet.)
    #[inline]
    pub fn lookup(&mut self, seg: &Segment, ordinal: u64, retire: impl FnOnce(Flow)) -> Lookup<'_> {
        let key = HashedKey::of(seg);
        let slots = &self.slots;
        let mut slot = self
            .index
            .find(
                key.hash,
                |s| matches!(slots.get(s as usize), Some(Some((k, _))) if *k == key.key),
            )
            .map(|(_, slot)| slot);
        if let Some(old) = slot {
            if let Some(Some((_, flow))) = self.slots.get(old as usize) {
                let dir = flow.dir(flow.side_of(seg));
                let reused =
                    seg.has(flags::SYN) && !seg.has(flags::ACK) && dir.seen && dir.isn != seg.seq;
                if reused || flow.retirable(seg.ts_ns) {
                    if let Some(old_flow) = self.remove_slot(old) {
                        retire(old_flow);
                    }
                    slot = None;
                }
            }
        }
        let slot = match slot {
            Some(slot) => slot,
            None => {
                let flow = Flow::new(ordinal, seg);
                let slot = match self.free.pop() {
                    Some(free) => free,
                    None => {
                        self.slots.push(None);
                        (self.slots.len() - 1) as u32
                    }
                };
                self.slots[slot as usize] = Some((key.key, flow));
                self.index.insert(key.hash, slot);
                slot
            }
        };
        let (_, flow) = self.slots[slot as usize]
            .as_mut()
            .unwrap_or_else(|| unreachable!("the index only names occupied slots"));
        if flow.guess_open {
            flow.settle_guess(seg);
        }
        let side = flow.side_of(seg);
        Lookup { flow, side }
    }

    /// Removes flows retirable at `now_ns` and passes each to `retire`.
    pub fn evict(&mut self, now_ns: u64, mut retire: impl FnMut(Flow)) {
        for slot in 0..self.slots.len() as u32 {
            let due = matches!(&self.slots[slot as usize], Some((_, f)) if f.retirable(now_ns));
            if due {
                if let Some(f) = self.remove_slot(slot) {
                    retire(f);
                }
            }
        }
    }

    /// Removes every flow, passing each to `retire` in order of first appearance.
    pub fn drain(&mut self, mut retire: impl FnMut(Flow)) {
        let mut all: Vec<Flow> = self.slots.drain(..).flatten().map(|(_, f)| f).collect();
        self.index.clear();
        self.free.clear();
        all.sort_by_key(|f| f.id);
        for f in all {
            retire(f);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index against a map, through inserts and removals whose hashes collide on purpose
    /// (a few distinct home positions, many equal tags), across several growths.
    #[test]
    fn slot_index_finds_what_a_map_finds() {
        let mut index = SlotIndex::default();
        let mut model: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for step in 0..20_000u32 {
            let r = next();
            if r % 3 != 0 || model.is_empty() {
                // Tags from a small set, so that probes run past equal tags of other slots.
                let hash = (r % 24) << 32 | (r >> 40);
                index.insert(hash, step);
                model.insert(step, hash);
            } else {
                let victim = *model
                    .keys()
                    .nth((r >> 8) as usize % model.len())
                    .expect("not empty");
                let hash = model.remove(&victim).expect("present");
                let (pos, slot) = index.find(hash, |s| s == victim).expect("indexed");
                assert_eq!(slot, victim);
                index.remove_at(pos);
                assert!(index.find(hash, |s| s == victim).is_none());
            }
            assert_eq!(index.len, model.len());
            if step % 997 == 0 {
                for (&slot, &hash) in &model {
                    assert_eq!(index.find(hash, |s| s == slot).map(|f| f.1), Some(slot));
                }
            }
        }
        for (&slot, &hash) in &model {
            assert_eq!(index.find(hash, |s| s == slot).map(|f| f.1), Some(slot));
        }
    }

    #[test]
    fn push_to_writes_what_display_writes() {
        for text in [
            "0.0.0.0:0",
            "127.0.0.1:8080",
            "255.255.255.255:65535",
            "10.2.0.26:20026",
            "[::1]:443",
            "[::ffff:192.0.2.1]:80",
            "[2001:db8::1:0:0:1]:5",
        ] {
            let addr: std::net::SocketAddr = text.parse().expect("a valid socket address");
            let e = Endpoint {
                addr: addr.ip(),
                port: addr.port(),
            };
            let mut pushed = String::new();
            e.push_to(&mut pushed);
            assert_eq!(pushed, e.to_string());
            assert_eq!(pushed, text);
        }
    }

    #[test]
    fn serial_comparison_wraps() {
        assert!(seq_lt(u32::MAX - 5, 10));
        assert!(!seq_lt(10, u32::MAX - 5));
        assert!(seq_le(7, 7));
    }
}
