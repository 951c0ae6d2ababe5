//! What `tcpstall watch` hands its renderer ([`crate::report::watch`]): the process owning a
//! stalled flow's socket, and what a run saw, for the closing summary: packets and drops, flows,
//! stalls by kind and held side, and the local processes whose sockets stalled.

use rustc_hash::FxHashMap;

use crate::detect::{KindCounts, StallEvent};
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

/// The process holding a flow's local socket, and the socket's options now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// Which side of the flow the socket is: the held side when it is local, else its peer.
    pub side: Side,
    /// The process.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// The fd in that process; -1 when unknown (a socket of another network namespace).
    pub fd: i32,
    /// The socket's local port (what `tcpstall fix PID --port N` selects by).
    pub port: u16,
    /// TCP_NODELAY now; `None` when it could not be read.
    pub nodelay: Option<bool>,
    /// TCP_CORK now; `None` when it could not be read.
    pub cork: Option<bool>,
    /// Why the options could not be read.
    pub unreadable: Option<String>,
    /// The socket found is the server's listening socket: the connection itself had closed.
    pub listener: bool,
    /// The container the process runs in, from its cgroup; `None` outside any.
    pub container: Option<Container>,
}

/// A container, as its process's cgroup path names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    /// The runtime the path names: `containerd`, `cri-o`, `docker`, `podman`; `kubernetes`
    /// (the kubelet's cgroupfs layout, runtime unnamed) or `container` (a bare id).
    pub runtime: &'static str,
    /// The container's id, 64 hex digits.
    pub id: String,
    /// Under Kubernetes, the pod's UID.
    pub pod_uid: Option<String>,
}

impl Container {
    /// The id's first 12 digits, as `docker ps` and `crictl ps` show it.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

impl Owner {
    /// The process the kernel saw write `event`'s held bytes, when its socket is not in this
    /// network namespace (a container's): no fd to name, no options to read.
    pub fn writer(event: &StallEvent, pid: u32, command: String, why: &str) -> Owner {
        let held = event.finding.held_side;
        Owner {
            side: held,
            pid,
            command,
            fd: -1,
            port: match held {
                Side::Client => event.client.port,
                Side::Server => event.server.port,
            },
            nodelay: None,
            cork: None,
            unreadable: Some(format!("{why}; the kernel named its writer")),
            listener: false,
            container: None,
        }
    }
}

/// Why a stalled flow has no process to name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoOwner {
    /// Neither endpoint is a socket in this host's network namespace: traffic passing through,
    /// another namespace (a container's), or a connection closed before it was looked up.
    NotLocal,
    /// A socket of this host, held by no process tcpstall may inspect: another user's
    /// `/proc/PID/fd` needs CAP_SYS_PTRACE (`proc_fd_permission`).
    Hidden,
    /// Not searched for now: the sockets known did not hold it and the processes were read
    /// under a second ago (the read is rate-bounded); the flow's next stall searches again.
    Deferred,
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
