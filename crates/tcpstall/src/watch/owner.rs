//! Who owns a stalled flow's local socket: the process (pid, command) and that socket's
//! TCP_NODELAY and TCP_CORK read now, on a duplicate of the process's own fd, as `sockets`
//! reads them.
//!
//! The socket is found the way `ss -p` finds it: its inode in the namespace's TCP table
//! (`/proc/net/tcp{,6}`), then the process holding an fd on that inode (`/proc/PID/fd`). The
//! owner is remembered per flow (a socket keeps its process), the options are read again at
//! every event; flows forgotten when they retire, so memory follows the active flows.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;

use rustc_hash::FxHashMap;

use crate::detect::StallEvent;
use crate::flow::{Endpoint, Side};
use crate::process::pidfd::{socket_inode, PidFd};
use crate::process::procfs::{self, TcpState};
use crate::sockopt;

pub use crate::report::model::watch::{NoOwner, Owner};

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
}

/// Finds and remembers the owners of stalled flows' sockets.
#[derive(Debug, Default)]
pub struct OwnerLookup {
    /// By flow id, found or why not.
    by_flow: FxHashMap<u64, Result<Located, NoOwner>>,
    recent_pids: VecDeque<u32>,
}

impl OwnerLookup {
    /// A lookup with nothing remembered.
    pub fn new() -> OwnerLookup {
        OwnerLookup::default()
    }

    /// The owner of `event`'s flow's local socket (the held side's when it is local), with its
    /// options read now, or why there is none to name.
    pub fn owner_of(&mut self, event: &StallEvent) -> Result<Owner, NoOwner> {
        let located = match self.by_flow.get(&event.flow_id) {
            Some(found) => found.clone(),
            None => {
                let found = self.locate(event);
                self.by_flow.insert(event.flow_id, found.clone());
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
        };
        match read_options(&located) {
            Ok(Some((nodelay, cork))) => {
                owner.nodelay = Some(nodelay);
                owner.cork = Some(cork);
            }
            // The fd holds another file now: the socket was closed since it was found.
            Ok(None) => {
                self.by_flow.remove(&event.flow_id);
                owner.unreadable = Some("the socket has been closed".into());
            }
            Err(reason) => owner.unreadable = Some(reason),
        }
        Ok(owner)
    }

    /// Looks at `pid` first on the next search: the kernel named it as the writer.
    pub fn prefer(&mut self, pid: u32) {
        self.recent_pids.retain(|p| *p != pid);
        if self.recent_pids.len() == RECENT_OWNERS {
            self.recent_pids.pop_back();
        }
        self.recent_pids.push_front(pid);
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

    /// Searches the held side's socket, then its peer's.
    fn locate(&mut self, event: &StallEvent) -> Result<Located, NoOwner> {
        let held = event.finding.held_side;
        let (client, server) = (socket_addr(event.client), socket_addr(event.server));
        let ends = |side: Side| match side {
            Side::Client => (client, server),
            Side::Server => (server, client),
        };
        let table = procfs::tcp_table(std::process::id()).map_err(|_| NoOwner::NotLocal)?;
        let mut seen = false;
        for side in [held, held.peer()] {
            let (local, remote) = ends(side);
            let connected = table
                .values()
                .find(|e| same_addr(e.local, local) && same_addr(e.remote, remote));
            // A connection closed before it was looked up (a short exchange) has left the
            // table; the server's listening socket still names the process, and its options
            // are what accepted sockets start with (`inet_csk_clone_lock`).
            let listening = || {
                (side == Side::Server)
                    .then(|| {
                        table.values().find(|e| {
                            e.state == TcpState::Listen
                                && e.local.port() == local.port()
                                && (e.local.ip().is_unspecified() || same_addr(e.local, local))
                        })
                    })
                    .flatten()
            };
            // A connection the process has just closed may linger, held by no fd.
            for entry in connected.into_iter().chain(listening()) {
                seen = true;
                if let Some((pid, fd)) = self.holder_of(entry.inode) {
                    return Ok(Located {
                        side,
                        pid,
                        command: procfs::comm_of(pid).unwrap_or_else(|| "?".into()),
                        fd,
                        inode: entry.inode,
                        port: local.port(),
                        listener: entry.state == TcpState::Listen,
                    });
                }
            }
        }
        Err(if seen {
            NoOwner::Hidden
        } else {
            NoOwner::NotLocal
        })
    }

    /// The process and fd holding socket `inode`: the recent owners first, then every process.
    fn holder_of(&mut self, inode: u64) -> Option<(u32, i32)> {
        let recent: Vec<u32> = self.recent_pids.iter().copied().collect();
        let all = procfs::all_pids().unwrap_or_default();
        let found = recent
            .into_iter()
            .chain(all.into_iter().filter(|p| !self.recent_pids.contains(p)))
            .find_map(|pid| {
                let fds = procfs::socket_fds(pid).ok()?;
                fds.iter()
                    .find(|(_, i)| *i == inode)
                    .map(|(fd, _)| (pid, *fd))
            })?;
        if !self.recent_pids.contains(&found.0) {
            if self.recent_pids.len() == RECENT_OWNERS {
                self.recent_pids.pop_back();
            }
            self.recent_pids.push_front(found.0);
        }
        Some(found)
    }
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

    #[test]
    fn the_held_socket_is_found_then_the_listener_once_it_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("addr");
        let client = TcpStream::connect(server).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        let client_addr = client.local_addr().expect("addr");
        let mut lookup = OwnerLookup::new();
        // Looked for here first: a scan of every process would slow the tests running beside
        // this one (the sockets test catches a 40 ms hold in the act).
        lookup.recent_pids.push_front(std::process::id());
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
}
