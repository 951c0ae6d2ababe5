//! Who owns a stalled flow's local socket: the process (pid, command) and that socket's
//! TCP_NODELAY and TCP_CORK read now, on a duplicate of the process's own fd, as `sockets`
//! reads them.
//!
//! The socket is found by its 4-tuple in one exact `sock_diag` lookup (a cost that does not
//! grow with the host's sockets), then the process holding an fd on its inode: an inode -> fd
//! map read from `/proc/PID/fd`, lazily, the recent owners first, every process at most twice a
//! second (a stall whose socket is not known meanwhile is printed as not searched, and searched
//! again at its flow's next stall). The owner is remembered per flow (a socket keeps its
//! process), the options are read again at every event; flows forgotten when they retire, so
//! memory follows the active flows.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::detect::StallEvent;
use crate::flow::{Endpoint, Side};
use crate::host::pidfd::{socket_inode, PidFd};
use crate::host::procfs::{self, TcpEntry, TcpState};
use crate::host::runtime::{Runtime, RuntimeCache};
use crate::host::sock_diag;
use crate::host::sockopt;

/// Processes found owning stalled sockets, looked at first on the next search: a server that
/// stalls on one connection usually stalls on the next.
const RECENT_OWNERS: usize = 16;

/// Where a flow's local socket was found.
#[derive(Debug, Clone)]
struct Located {
    side: Side,
    pid: u32,
    command: String,
    fd: i32,
    inode: u64,
    port: u16,
    listener: bool,
    /// Read once, when found: a process keeps its runtime.
    runtime: Option<Runtime>,
}

/// Finds and remembers the owners of stalled flows' sockets.
#[derive(Debug, Default)]
pub struct OwnerLookup {
    /// By flow id, found or why not, with the flow's ends: `watch --kernel`'s flow id is the
    /// socket's kernel address, which a later socket may take once this one is freed.
    by_flow: FxHashMap<u64, Remembered>,
    recent_pids: VecDeque<u32>,
    holders: Holders,
    costs: LookupCosts,
    runtimes: RuntimeCache,
}

/// A flow's owner as found, with the flow's ends it was found for.
#[derive(Debug, Clone)]
struct Remembered {
    ends: (Endpoint, Endpoint),
    found: Result<Located, NoOwner>,
}

/// What the owner searches cost so far, counted where the work is done: the figures that
/// show a stall's owner is found by one exact socket lookup per flow, not by reading every
/// socket and process of the host at every stall (`watch --metrics` exports them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupCosts {
    /// Stalls whose flow's owner (or why there is none) was remembered: nothing read.
    pub cached: u64,
    /// Stalls whose flow was searched.
    pub searched: u64,
    /// Exact lookups of one socket by its addresses through `sock_diag`.
    pub sock_diag_queries: u64,
    /// Reads of the whole `/proc/net/tcp{,6}` tables (only when netlink is refused).
    pub table_reads: u64,
    /// Reads of one recent owner's `/proc/PID/fd`.
    pub process_fd_reads: u64,
    /// Reads of every process's `/proc/PID/fd` (each at most twice a second).
    pub all_fd_reads: u64,
}

impl OwnerLookup {
    /// A lookup with nothing remembered.
    pub fn new() -> OwnerLookup {
        OwnerLookup::default()
    }

    /// The owner of `event`'s flow's local socket (the held side's when it is local), with its
    /// options read now, or why there is none to name.
    pub fn owner_of(&mut self, event: &StallEvent) -> Result<Owner, NoOwner> {
        let ends = (event.client, event.server);
        let located = match self.by_flow.get(&event.flow_id) {
            Some(r) if r.ends == ends => {
                self.costs.cached += 1;
                r.found.clone()
            }
            _ => {
                self.costs.searched += 1;
                let found = self.locate(event);
                // Not searched yet: the flow's next stall searches again.
                if matches!(found, Err(NoOwner::Deferred)) {
                    self.by_flow.remove(&event.flow_id);
                } else {
                    let found = found.clone();
                    self.by_flow
                        .insert(event.flow_id, Remembered { ends, found });
                }
                found
            }
        }?;
        let mut owner = Owner {
            side: located.side,
            pid: located.pid,
            command: located.command.clone(),
            fd: located.fd,
            port: located.port,
            nodelay: None,
            cork: None,
            unreadable: None,
            listener: located.listener,
            container: None,
            runtime: located.runtime.clone(),
        };
        match read_options(&located) {
            Ok(Some((nodelay, cork))) => {
                owner.nodelay = Some(nodelay);
                owner.cork = Some(cork);
            }
            // The fd holds another file now: the socket was closed since it was found.
            Ok(None) => {
                self.by_flow.remove(&event.flow_id);
                self.holders.forget(located.inode);
                owner.unreadable = Some("the socket has been closed".into());
            }
            Err(reason) => owner.unreadable = Some(reason),
        }
        Ok(owner)
    }

    /// The runtime of `pid`, read once per process: for an owner the kernel named
    /// ([`Owner::writer`]), which no search found.
    pub fn runtime_of(&mut self, pid: u32) -> Option<Runtime> {
        self.runtimes.runtime_of(pid)
    }

    /// Looks at `pid` first on the next search: the kernel named it as the writer.
    pub fn prefer(&mut self, pid: u32) {
        self.recent_pids.retain(|p| *p != pid);
        if self.recent_pids.len() == RECENT_OWNERS {
            self.recent_pids.pop_back();
        }
        self.recent_pids.push_front(pid);
    }

    /// What the searches cost so far.
    pub fn costs(&self) -> LookupCosts {
        LookupCosts {
            process_fd_reads: self.holders.process_reads,
            all_fd_reads: self.holders.full_reads,
            ..self.costs
        }
    }

    /// Forgets `flow_id`: the flow left the detector.
    pub fn forget(&mut self, flow_id: u64) {
        self.by_flow.remove(&flow_id);
    }

    /// Flows remembered (for tests of the memory bound).
    #[cfg(test)]
    pub fn remembered(&self) -> usize {
        self.by_flow.len()
    }

    /// Searches the held side's socket, then its peer's: each by one exact lookup in the
    /// kernel (`sock_diag`), the text tables only when netlink is refused.
    fn locate(&mut self, event: &StallEvent) -> Result<Located, NoOwner> {
        let held = event.finding.held_side;
        let (client, server) = (socket_addr(event.client), socket_addr(event.server));
        let ends = |side: Side| match side {
            Side::Client => (client, server),
            Side::Server => (server, client),
        };
        let mut table = None;
        let mut seen = false;
        let mut deferred = false;
        // Every process was read in this search: a later "read too recently" is no deferral.
        let mut read_all = false;
        for side in [held, held.peer()] {
            let (local, remote) = ends(side);
            let entries = match find_socket(local, remote, side, &mut self.costs) {
                Ok(found) => found,
                Err(_) => {
                    if table.is_none() {
                        self.costs.table_reads += 1;
                        table = Some(
                            procfs::tcp_table(std::process::id()).map_err(|_| NoOwner::NotLocal)?,
                        );
                    }
                    table
                        .as_ref()
                        .and_then(|t| in_table(t, local, remote, side))
                }
            };
            // A connection the process has just closed may linger, held by no fd.
            if let Some(entry) = entries {
                seen = true;
                match self.holders.holder_of(entry.inode, &mut self.recent_pids) {
                    Found::Holder(pid, fd) => {
                        return Ok(Located {
                            side,
                            pid,
                            command: procfs::comm_of(pid).unwrap_or_else(|| "?".into()),
                            fd,
                            inode: entry.inode,
                            port: local.port(),
                            listener: entry.state == TcpState::Listen,
                            runtime: self.runtimes.runtime_of(pid),
                        })
                    }
                    Found::Deferred => deferred = true,
                    Found::Nobody => read_all = true,
                }
            }
        }
        Err(match (seen, deferred && !read_all) {
            (_, true) => NoOwner::Deferred,
            (true, false) => NoOwner::Hidden,
            (false, false) => NoOwner::NotLocal,
        })
    }
}

/// What the search for a socket's holder gave.
enum Found {
    Holder(u32, i32),
    /// Not among the sockets known, and the processes were read too recently to read again.
    Deferred,
    /// No process tcpstall may inspect holds it.
    Nobody,
}

/// The least time between two reads of every process's fds: with tens of thousands of sockets
/// on the host one read costs tens of milliseconds.
const FULL_SCAN_EVERY: Duration = Duration::from_millis(500);

/// The least time between two reads of one recent owner's fds.
const PID_SCAN_EVERY: Duration = Duration::from_millis(20);

/// Socket inodes remembered at most between two full reads.
const MAX_INODES: usize = 1 << 20;

/// Socket inode -> (pid, fd), read from `/proc/PID/fd` lazily: when an inode is missing, the
/// recent owners are read again, then every process, each at most so often.
#[derive(Debug, Default)]
struct Holders {
    by_inode: FxHashMap<u64, (u32, i32)>,
    pid_read: FxHashMap<u32, Instant>,
    full_read: Option<Instant>,
    /// Reads of one recent owner's fds, and of every process's, so far.
    process_reads: u64,
    full_reads: u64,
}

impl Holders {
    fn holder_of(&mut self, inode: u64, recent: &mut VecDeque<u32>) -> Found {
        if let Some((pid, fd)) = self.by_inode.get(&inode) {
            return Found::Holder(*pid, *fd);
        }
        let now = Instant::now();
        let mut skipped = false;
        let candidates: Vec<u32> = recent.iter().copied().collect();
        for pid in candidates {
            if self
                .pid_read
                .get(&pid)
                .is_some_and(|at| now.duration_since(*at) < PID_SCAN_EVERY)
            {
                skipped = true;
                continue;
            }
            self.pid_read.insert(pid, now);
            self.process_reads += 1;
            self.read_pid(pid);
            if let Some((pid, fd)) = self.by_inode.get(&inode) {
                return Found::Holder(*pid, *fd);
            }
        }
        self.pid_read.retain(|pid, _| recent.contains(pid));
        if self
            .full_read
            .is_some_and(|at| now.duration_since(at) < FULL_SCAN_EVERY)
        {
            return Found::Deferred;
        }
        self.full_read = Some(now);
        self.full_reads += 1;
        // Sockets closed since the last full read are forgotten here.
        self.by_inode.clear();
        for pid in procfs::all_pids().unwrap_or_default() {
            self.read_pid(pid);
        }
        match self.by_inode.get(&inode) {
            Some((pid, fd)) => {
                let (pid, fd) = (*pid, *fd);
                if !recent.contains(&pid) {
                    if recent.len() == RECENT_OWNERS {
                        recent.pop_back();
                    }
                    recent.push_front(pid);
                }
                Found::Holder(pid, fd)
            }
            None if skipped => Found::Deferred,
            None => Found::Nobody,
        }
    }

    fn read_pid(&mut self, pid: u32) {
        if self.by_inode.len() >= MAX_INODES {
            self.by_inode.clear();
        }
        if let Ok(fds) = procfs::socket_fds(pid) {
            for (fd, inode) in fds {
                self.by_inode.insert(inode, (pid, fd));
            }
        }
    }

    /// Forgets `inode`: its fd holds another file now.
    fn forget(&mut self, inode: u64) {
        self.by_inode.remove(&inode);
    }
}

/// The socket at `local` talking to `remote`, by an exact lookup; for the server's side, once
/// the connection has closed, its listening socket, which still names the process (its
/// options are what accepted sockets start with, `inet_csk_clone_lock`). TIME_WAIT sockets,
/// held by no process (inode 0), are left out. Each lookup is counted in `costs`.
fn find_socket(
    local: SocketAddr,
    remote: SocketAddr,
    side: Side,
    costs: &mut LookupCosts,
) -> std::io::Result<Option<TcpEntry>> {
    let usable =
        |e: &TcpEntry| e.inode != 0 && (e.state != TcpState::Listen || side == Side::Server);
    costs.sock_diag_queries += 1;
    if let Some(e) = sock_diag::socket_at(local, remote)?.filter(usable) {
        return Ok(Some(e));
    }
    if side != Side::Server {
        return Ok(None);
    }
    let anywhere = SocketAddr::new(
        match local {
            SocketAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        },
        0,
    );
    costs.sock_diag_queries += 1;
    Ok(sock_diag::socket_at(local, anywhere)?
        .filter(|e| e.inode != 0 && e.state == TcpState::Listen))
}

/// The same from the text tables: the connection, then (server side) a listener.
fn in_table(
    table: &std::collections::HashMap<u64, TcpEntry>,
    local: SocketAddr,
    remote: SocketAddr,
    side: Side,
) -> Option<TcpEntry> {
    table
        .values()
        .find(|e| same_addr(e.local, local) && same_addr(e.remote, remote))
        .or_else(|| {
            (side == Side::Server)
                .then(|| {
                    table.values().find(|e| {
                        e.state == TcpState::Listen
                            && e.local.port() == local.port()
                            && (e.local.ip().is_unspecified() || same_addr(e.local, local))
                    })
                })
                .flatten()
        })
        .cloned()
}

/// TCP_NODELAY and TCP_CORK of the located socket, on a duplicate of the owner's fd
/// (`pidfd_getfd`); `Ok(None)` when the fd no longer holds that socket.
fn read_options(at: &Located) -> Result<Option<(bool, bool)>, String> {
    let pidfd = PidFd::open(at.pid).map_err(|e| e.to_string())?;
    let dup = pidfd.get_fd(at.fd).map_err(|e| e.to_string())?;
    match socket_inode(&dup) {
        Ok(inode) if inode == at.inode => {}
        Ok(_) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    }
    let read = |f: fn(std::os::fd::BorrowedFd<'_>) -> std::io::Result<bool>| {
        f(dup.as_fd()).map_err(|e| format!("cannot read the options of fd {}: {e}", at.fd))
    };
    Ok(Some((read(sockopt::nodelay)?, read(sockopt::cork)?)))
}

fn socket_addr(e: Endpoint) -> SocketAddr {
    SocketAddr::new(e.addr, e.port)
}

/// Equal addresses, an IPv4-mapped IPv6 address equal to its IPv4 one (procfs already
/// prints dual-stack sockets' IPv4 peers as IPv4; a capture may carry either).
fn same_addr(a: SocketAddr, b: SocketAddr) -> bool {
    let plain = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    a.port() == b.port() && plain(a.ip()) == plain(b.ip())
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
    /// Its language runtime and framework, when tcpstall knows their fix.
    pub runtime: Option<Runtime>,
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
    /// Under Kubernetes, the pod's names, where the node's files show them.
    pub pod: Option<PodName>,
}

/// A Kubernetes pod's namespace and name, and its container's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub pod: String,
    /// The container's name in the pod, when the node shows it.
    pub container: Option<String>,
}

impl Container {
    /// The id's first 12 digits, as `docker ps` and `crictl ps` show it.
    pub fn short_id(&self) -> &str {
        self.id.get(..12).unwrap_or(&self.id)
    }
}

impl Owner {
    /// The process the kernel saw write `event`'s held bytes, when its socket is not in this
    /// network namespace (a container's): no fd to name, no options to read, its runtime
    /// left to [`OwnerLookup::runtime_of`].
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
            runtime: None,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::{Finding, StallKind};
    use std::net::{TcpListener, TcpStream};

    fn endpoint(addr: SocketAddr) -> Endpoint {
        Endpoint {
            addr: addr.ip(),
            port: addr.port(),
        }
    }

    fn server_stall(flow_id: u64, client: SocketAddr, server: SocketAddr) -> StallEvent {
        StallEvent {
            finding: Finding {
                kind: StallKind::NagleDelayedAck,
                held_side: Side::Server,
                ack_side: Some(Side::Client),
                delay_ns: crate::flow::Span::from_millis(40),
                ack_delay_ns: None,
                release_ns: None,
            },
            flow_id,
            ordinal: 0,
            client: endpoint(client),
            server: endpoint(server),
            ts_ns: crate::flow::Timestamp::from_nanos(0),
            packet_number: 1,
            released_by: None,
            released_bytes: 6,
            writes: vec![184, 6],
            mss: 65_483,
            peer_stack: None,
            backoffs: 0,
            backoff_ns: crate::flow::Span::ZERO,
            handshake_not_taken: None,
            paced: None,
        }
    }

    /// A flow's later stalls are answered from what its first found: one exact socket
    /// lookup, one read of the holder's fds, whatever the number of stalls; no socket table
    /// read.
    #[test]
    fn the_stalls_of_one_flow_cost_one_search() {
        let (_listener, _client, _accepted, [client_addr, server]) = connection();
        let mut lookup = lookup_here_first();
        for _ in 0..50 {
            let owner = lookup
                .owner_of(&server_stall(7, client_addr, server))
                .expect("this process's socket is found");
            assert_eq!(owner.pid, std::process::id());
        }
        assert_eq!(
            lookup.costs(),
            LookupCosts {
                cached: 49,
                searched: 1,
                sock_diag_queries: 1,
                table_reads: 0,
                process_fd_reads: 1,
                all_fd_reads: 0,
            }
        );
    }

    /// A connection on loopback: the listener, the client's and the server's sockets, and
    /// the client's and server's addresses.
    fn connection() -> (TcpListener, TcpStream, TcpStream, [SocketAddr; 2]) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("addr");
        let client = TcpStream::connect(server).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        let client_addr = client.local_addr().expect("addr");
        (listener, client, accepted, [client_addr, server])
    }

    /// A lookup that reads this process first: a scan of every process would slow the tests
    /// running beside this one (the sockets test catches a 40 ms hold in the act).
    fn lookup_here_first() -> OwnerLookup {
        let mut lookup = OwnerLookup::new();
        lookup.recent_pids.push_front(std::process::id());
        lookup
    }

    #[test]
    fn the_held_socket_is_found_then_the_listener_once_it_closed() {
        let (_listener, client, accepted, [client_addr, server]) = connection();
        let mut lookup = lookup_here_first();
        let owner = lookup
            .owner_of(&server_stall(1, client_addr, server))
            .expect("this process's socket is found");
        assert_eq!(owner.pid, std::process::id());
        assert_eq!((owner.side, owner.port), (Side::Server, server.port()));
        assert_eq!((owner.nodelay, owner.cork), (Some(false), Some(false)));
        assert!(!owner.listener);

        drop(accepted);
        drop(client);
        let owner = lookup
            .owner_of(&server_stall(2, client_addr, server))
            .expect("the listener names the server once the connection is gone");
        assert!(owner.listener, "{owner:?}");
        assert_eq!(owner.pid, std::process::id());
        assert_eq!(lookup.remembered(), 2);
        lookup.forget(1);
        lookup.forget(2);
        assert_eq!(lookup.remembered(), 0, "retired flows are forgotten");
    }

    /// `watch --kernel` names a flow by its socket's kernel address, which a new socket takes
    /// once the old one is freed: a remembered owner is the flow's only while its ends are
    /// the same.
    #[test]
    fn a_flow_id_taken_by_another_connection_is_searched_anew() {
        let (_first_listener, _c1, _a1, [client1, server1]) = connection();
        let (_second_listener, _c2, _a2, [client2, server2]) = connection();
        let mut lookup = lookup_here_first();
        let first = lookup
            .owner_of(&server_stall(9, client1, server1))
            .expect("the first connection's socket is found");
        assert_eq!(first.port, server1.port());
        let second = lookup
            .owner_of(&server_stall(9, client2, server2))
            .expect("the second connection's socket is found");
        assert_eq!(second.port, server2.port(), "{second:?}");
        assert_eq!(lookup.costs().searched, 2);
        assert_eq!(lookup.remembered(), 1);
    }
}
