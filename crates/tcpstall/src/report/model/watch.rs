//! What `tcpstall watch` hands its renderer ([`crate::report::watch`]): the process owning a
//! stalled flow's socket, and what a run saw, for the closing summary: packets and drops, flows,
//! stalls by kind and held side, and the local processes whose sockets stalled.

use rustc_hash::FxHashMap;

pub use crate::host::call_stack::{CallSites, CallStack, Frame};
pub use crate::host::owner::{Container, NoOwner, Owner};
use crate::report::model::Runtime;

use crate::detect::{KindCounts, StallEvent, Untracked};
use crate::flow::Side;

/// Processes listed in the summary at most; a host with more stalling (pid, port) pairs is
/// counted, not listed, so a run of days keeps a bounded table.
pub const OWNERS_KEPT: usize = 1000;

/// Stalls of one local process on one port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerStalls {
    /// The process.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// Its socket's local port.
    pub port: u16,
    /// Which side of the stalled flows it was: the held side, or its peer.
    pub side: Side,
    /// Whether its side's data was the data held (then `fix` applies to it).
    pub held: bool,
    /// Its runtime, when one tcpstall knows (the fix in its terms).
    pub runtime: Option<Runtime>,
    /// Stalls by kind.
    pub stalls: KindCounts,
}

impl OwnerStalls {
    /// All stalls.
    pub fn total(&self) -> u64 {
        self.stalls.total()
    }
}

/// The processes whose sockets stalled, by (pid, port, side), bounded by [`OWNERS_KEPT`].
#[derive(Debug, Clone, Default)]
pub struct OwnerTally {
    by_owner: FxHashMap<(u32, u16, Side), OwnerStalls>,
    /// Stalls of owners not listed because the table was full.
    pub unlisted: u64,
}

impl OwnerTally {
    /// Counts `event` for `owner`.
    pub fn add(&mut self, event: &StallEvent, owner: &Owner) {
        let key = (owner.pid, owner.port, owner.side);
        if !self.by_owner.contains_key(&key) && self.by_owner.len() >= OWNERS_KEPT {
            self.unlisted += 1;
            return;
        }
        let entry = self.by_owner.entry(key).or_insert_with(|| OwnerStalls {
            pid: owner.pid,
            command: owner.command.clone(),
            port: owner.port,
            side: owner.side,
            held: owner.side == event.finding.held_side,
            runtime: owner.runtime.clone(),
            stalls: KindCounts::default(),
        });
        entry.stalls.add(event.finding.kind);
    }

    /// The owners, most stalls first.
    pub fn sorted(&self) -> Vec<OwnerStalls> {
        let mut all: Vec<OwnerStalls> = self.by_owner.values().cloned().collect();
        all.sort_by(|a, b| {
            b.total()
                .cmp(&a.total())
                .then(a.pid.cmp(&b.pid))
                .then(a.port.cmp(&b.port))
        });
        all
    }
}

/// The closing summary of a run.
#[derive(Debug, Clone, Default)]
pub struct WatchSummary {
    /// Interface captured on.
    pub interface: String,
    /// The user's filter (empty: all TCP).
    pub filter: String,
    /// Seconds watched.
    pub duration_s: f64,
    /// Packets captured and decoded.
    pub packets: PacketCounts,
    /// The kernel's drop counters.
    pub drops: DropStats,
    /// Flows seen (retired and still active).
    pub flows: u64,
    /// Flows active at the end.
    pub active_flows: u64,
    /// What was not followed because `--max-flows` connections were followed already.
    pub untracked: Untracked,
    /// Stalls and minor holds by kind.
    pub counts: KindCounts,
    /// Stalls by the side whose data waited (client, server).
    pub held: [u64; 2],
    /// Events printed without an owner because none of their endpoints is a local socket.
    pub without_owner: u64,
    /// The local processes whose sockets stalled.
    pub owners: Vec<OwnerStalls>,
    /// Stalls of owners not listed.
    pub owners_unlisted: u64,
}

/// The kernel's packet counters for the capture, since it started (`pcap_stats`: on Linux
/// `PACKET_STATISTICS`, summed by libpcap). Counts are 64-bit here: libpcap's are 32-bit and
/// wrap on a busy host within hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Packets dropped because the capture buffer was full (tcpstall did not keep up).
    pub dropped: u64,
    /// Packets dropped by the interface or its driver.
    pub if_dropped: u64,
}

/// What a pass over the captured packets handed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketCounts {
    /// Packets captured.
    pub packets: u64,
    /// TCP segments decoded and handed on.
    pub tcp_segments: u64,
    /// Packets that are not TCP, non-first fragments, or undecodable.
    pub skipped: u64,
}

impl PacketCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: PacketCounts) {
        self.packets += other.packets;
        self.tcp_segments += other.tcp_segments;
        self.skipped += other.skipped;
    }
}
