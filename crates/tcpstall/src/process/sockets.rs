//! `tcpstall sockets`: the TCP sockets of a process with what `ss` cannot show: TCP_NODELAY,
//! TCP_CORK and the quick-ACK (ping-pong) state, read on a duplicate of each socket
//! (`pidfd_getfd`), plus the TCP_INFO fields that show a live Nagle hold (`unacked:1 notsent:>0`).

use std::collections::{HashMap, HashSet};
use std::os::fd::AsFd;

use anyhow::{bail, Context};

use super::AccessError;
use crate::host::pidfd::{socket_inode, PidFd, PidFds};
use crate::host::procfs::{self, FdListError, TcpEntry, TcpState};
use crate::host::runtime::RuntimeCache;
use crate::host::sockopt;
pub use crate::report::model::sockets::{Holder, InfoView, ProcessName, SocketView};
use crate::Outcome;

pub use crate::args::sockets::{SocketsArgs, Source};

impl SocketView {
    pub(crate) fn from_proc(pid: Option<u32>, fd: Option<i32>, entry: &TcpEntry) -> SocketView {
        SocketView {
            pid,
            fd,
            inode: entry.inode,
            local: entry.local.to_string(),
            remote: entry.remote.to_string(),
            state: entry.state,
            listening: entry.state == TcpState::Listen,
            nodelay: None,
            cork: None,
            quickack: None,
            tcp_info: None,
            can_stall: None,
            can_stall_reason: None,
            held_now: None,
            unknown_reason: None,
            holders: match (pid, fd) {
                (Some(pid), Some(fd)) => vec![Holder { pid, fd }],
                _ => Vec::new(),
            },
            delack_max_us: None,
            inherited_from: None,
            command: None,
            kernel: None,
            runtime: None,
        }
    }

    /// True when the local or remote port is `port`.
    pub fn uses_port(&self, port: u16) -> bool {
        let port_of = |addr: &str| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
        };
        port_of(&self.local) == Some(port) || port_of(&self.remote) == Some(port)
    }

    pub(crate) fn judge(&mut self) {
        self.can_stall = match (self.nodelay, self.cork) {
            (None, _) => None,
            (Some(true), _) | (_, Some(true)) => Some(false),
            (Some(false), _) if self.listening => Some(true),
            (Some(false), _) => Some(
                self.state == TcpState::Established
                    && self
                        .tcp_info
                        .is_some_and(|i| i.data_segs_in > 0 && i.data_segs_out > 0),
            ),
        };
        self.held_now = match (self.nodelay, self.cork, self.tcp_info) {
            (Some(false), Some(false), Some(info)) => {
                Some(info.unacked > 0 && info.notsent_bytes > 0)
            }
            (Some(_), Some(_), _) => Some(false),
            _ => None,
        };
    }
}

/// What a listener with Nagle on says when the server sets TCP_NODELAY on what it accepts.
pub const SETS_NODELAY_AFTER_ACCEPT: &str =
    "the server sets TCP_NODELAY after accept(): its accepted connections have Nagle off";

/// Settles the listeners with Nagle on: one whose accepted connections (same local port, held
/// by a process holding the listener) are all seen with TCP_NODELAY on cannot stall, since the
/// server sets the option itself after `accept()` (redis, nginx `tcp_nodelay on`, haproxy);
/// its `can_stall` becomes false with the reason. A listener with no connection to judge by,
/// or one accepted connection with Nagle on, stays as `judge` left it.
pub fn settle_listeners(views: &mut [SocketView]) {
    let port = |addr: &str| addr.rsplit_once(':').map(|(_, p)| p.to_string());
    let pids =
        |v: &SocketView| -> HashSet<u32> { v.holders.iter().map(|h| h.pid).chain(v.pid).collect() };
    let settled: Vec<usize> = views
        .iter()
        .enumerate()
        .filter(|(_, l)| l.listening && l.can_stall == Some(true))
        .filter(|(_, l)| {
            let owners = pids(l);
            let mut accepted = views
                .iter()
                .filter(|c| {
                    !c.listening
                        && c.state == TcpState::Established
                        && port(&c.local) == port(&l.local)
                        && !pids(c).is_disjoint(&owners)
                })
                .peekable();
            accepted.peek().is_some() && accepted.all(|c| c.nodelay == Some(true))
        })
        .map(|(i, _)| i)
        .collect();
    for i in settled {
        views[i].can_stall = Some(false);
        views[i].can_stall_reason = Some(SETS_NODELAY_AFTER_ACCEPT.to_string());
    }
}

/// The TCP sockets of one process (and its children), and what could not be seen.
#[derive(Debug, Clone)]
pub struct ProcessSockets {
    /// The processes looked at: the target, then its descendants unless restricted to it.
    pub pids: Vec<u32>,
    /// Its TCP sockets, in the order first seen: by process (parents first), then by fd.
    pub sockets: Vec<SocketView>,
    /// What was missing, when the options (or the fds) could not be read.
    pub missing: Option<String>,
    /// What is shown instead, when the fds themselves could not be listed.
    pub shown_instead: Option<String>,
    /// Notes on the tree: children whose fds could not be read, or, restricted to the process,
    /// the connections its children hold.
    pub notes: Vec<String>,
}

/// Reads the TCP sockets of `pid` alone, each through a duplicate (`pidfd_getfd`): addresses,
/// state and options. A refused permission is not an error: the sockets come back from the
/// kernel's tables with unknown options and `missing` says why. A process that does not exist
/// or exits meanwhile is.
pub fn inspect(pid: u32) -> Result<ProcessSockets, AccessError> {
    inspect_scope(pid, false)
}

/// Reads the TCP sockets of `pid` and its descendants (or of `pid` alone unless `tree`), each
/// socket once with every process holding it. The fds are listed first and each socket read
/// through a duplicate straight after, so a young socket is not lost (reading the tables first
/// missed every socket opened meanwhile); the tables, by inode (sock_diag), serve the rest.
pub fn inspect_scope(pid: u32, tree: bool) -> Result<ProcessSockets, AccessError> {
    if !procfs::process_exists(pid) {
        return Err(AccessError::NoSuchProcess { pid });
    }
    if let Some(refusal) =
        AccessError::thread_of(pid).or_else(|| crate::host::access::zombie(pid, "read the sockets"))
    {
        return Err(refusal);
    }
    let family = crate::host::tree::process_tree(pid);
    let mut notes = Vec::new();
    // (inode, holders) in the order first seen: by process (parents first), then by fd.
    let mut held: Vec<(u64, Vec<Holder>)> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let mut held_by_children: Vec<(u64, u32)> = Vec::new();
    let mut unreadable_children = Vec::new();
    for &p in &family {
        let fds = match procfs::socket_fds(p) {
            Ok(fds) => fds,
            Err(FdListError::NoSuchProcess) if p == pid => {
                return Err(AccessError::NoSuchProcess { pid })
            }
            Err(FdListError::PermissionDenied) if p == pid => return owned_by_uid(pid),
            Err(FdListError::Io(err)) if p == pid => {
                return Err(AccessError::from_errno(err, pid, "list /proc/PID/fd"))
            }
            Err(FdListError::PermissionDenied) => {
                unreadable_children.push(p);
                continue;
            }
            Err(_) => continue, // a child that exited meanwhile
        };
        for (fd, inode) in fds {
            if p != pid && !tree {
                held_by_children.push((inode, p));
                continue;
            }
            match index.get(&inode) {
                Some(&i) => held[i].1.push(Holder { pid: p, fd }),
                None => {
                    index.insert(inode, held.len());
                    held.push((inode, vec![Holder { pid: p, fd }]));
                }
            }
        }
    }
    // Each socket read live through a duplicate, right after the listing: a connection that
    // lives a millisecond is still there. The kernel's tables serve only what the duplicates
    // cannot (permission refused) and the children's sockets left out by --no-tree.
    let mut pidfds = PidFds::default();
    let mut missing: Option<String> = None;
    let mut sockets = Vec::new();
    let mut unread: Vec<(usize, u64, Vec<Holder>, Option<String>)> = Vec::new();
    for (order, (inode, holders)) in held.into_iter().enumerate() {
        if missing.is_none() {
            let first = holders[0];
            let read = pidfds
                .get(first.pid)
                .and_then(|pidfd| read_live(pidfd, first.fd, inode));
            match read {
                Ok(Some(mut view)) => {
                    view.holders = holders;
                    view.judge();
                    sockets.push((order, view));
                    continue;
                }
                // Not TCP (UDP, unix...), a TCP socket neither bound nor connected, or gone.
                Ok(None) | Err(AccessError::FdClosed { .. }) => continue,
                Err(AccessError::NoSuchProcess { pid: gone }) if gone == pid => {
                    return Err(AccessError::NoSuchProcess { pid })
                }
                Err(AccessError::NoSuchProcess { .. }) => continue,
                Err(err) => {
                    if err.is_permission()
                        || matches!(
                            err,
                            AccessError::KernelTooOld { .. } | AccessError::Refused { .. }
                        )
                    {
                        missing = Some(err.to_string());
                    } else {
                        unread.push((order, inode, holders, Some(err.to_string())));
                        continue;
                    }
                }
            }
        }
        unread.push((order, inode, holders, None));
    }
    let mut inodes: HashSet<u64> = unread.iter().map(|(_, inode, _, _)| *inode).collect();
    inodes.extend(held_by_children.iter().map(|&(inode, _)| inode));
    let table = procfs::tcp_entries(pid, &inodes).map_err(|err| {
        if procfs::process_exists(pid) {
            AccessError::from_errno(err, pid, "read the TCP sockets of")
        } else {
            AccessError::NoSuchProcess { pid }
        }
    })?;
    if !unreadable_children.is_empty() {
        let first = unreadable_children[0];
        notes.push(format!(
            "the fds of {} {} could not be read ({}): their sockets are not shown",
            if unreadable_children.len() == 1 {
                "child process"
            } else {
                "child processes"
            },
            join_pids(&unreadable_children),
            AccessError::fd_list_refused(first)
        ));
    }
    let shown: HashSet<u64> = index.keys().copied().collect();
    if let Some(note) = children_note(pid, &held_by_children, &shown, &table) {
        notes.push(note);
    }
    for (order, inode, holders, reason) in unread {
        let Some(entry) = table.get(&inode) else {
            continue;
        };
        let first = holders[0];
        let mut view = SocketView::from_proc(Some(first.pid), Some(first.fd), entry);
        view.holders = holders;
        view.unknown_reason = reason.or_else(|| missing.clone());
        view.judge();
        sockets.push((order, view));
    }
    sockets.sort_by_key(|(order, _)| *order);
    let mut sockets: Vec<SocketView> = sockets.into_iter().map(|(_, view)| view).collect();
    for view in sockets.iter_mut().filter(|v| v.listening) {
        view.inherited_from =
            crate::host::tree::ancestor_holding(pid, view.inode).map(|owner| ProcessName {
                pid: owner,
                command: procfs::comm_of(owner),
            });
    }
    Ok(ProcessSockets {
        pids: if tree { family } else { vec![pid] },
        sockets,
        missing,
        shown_instead: None,
        notes,
    })
}

/// Restricted to the process itself: what its children hold that it does not, so that a
/// master's workers and their connections are not silently left out.
fn children_note(
    pid: u32,
    held_by_children: &[(u64, u32)],
    shown: &HashSet<u64>,
    table: &HashMap<u64, TcpEntry>,
) -> Option<String> {
    let mut inodes = HashSet::new();
    let mut pids = Vec::new();
    let mut connections = 0;
    for &(inode, child) in held_by_children {
        let Some(entry) = table.get(&inode) else {
            continue;
        };
        if shown.contains(&inode) || !inodes.insert(inode) {
            continue;
        }
        connections += usize::from(entry.state != TcpState::Listen);
        if !pids.contains(&child) {
            pids.push(child);
        }
    }
    (!inodes.is_empty()).then(|| {
        format!(
            "{} more, {connections} of them {}, {} held by {} {} of pid {pid}: leave out \
             --no-tree to include them",
            crate::report::counted(inodes.len() as u64, "TCP socket", "TCP sockets"),
            if connections == 1 {
                "a connection"
            } else {
                "connections"
            },
            if inodes.len() == 1 { "is" } else { "are" },
            if pids.len() == 1 {
                "child process"
            } else {
                "child processes"
            },
            join_pids(&pids)
        )
    })
}

fn join_pids(pids: &[u32]) -> String {
    pids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads socket `inode`, fd `fd` of the process, through a duplicate: what it is (family,
/// protocol, addresses and state as the socket itself tells them) and its options. `None`
/// when it is not a TCP socket with an address, or the fd no longer holds that socket.
fn read_live(pidfd: &PidFd, fd: i32, inode: u64) -> Result<Option<SocketView>, AccessError> {
    let dup = pidfd.get_fd(fd)?;
    let io_err =
        |err| AccessError::from_errno(err, pidfd.pid(), format!("read options of fd {fd}"));
    if socket_inode(&dup).map_err(io_err)? != inode {
        return Ok(None);
    }
    let Some(entry) = live_entry(&dup, inode) else {
        return Ok(None);
    };
    let mut view = SocketView::from_proc(Some(pidfd.pid()), Some(fd), &entry);
    let sock = dup.as_fd();
    view.nodelay = Some(sockopt::nodelay(sock).map_err(io_err)?);
    view.cork = Some(sockopt::cork(sock).map_err(io_err)?);
    view.quickack = Some(sockopt::quickack(sock).map_err(io_err)?);
    view.tcp_info = sockopt::tcp_info(sock).ok().map(InfoView::from);
    view.delack_max_us = sockopt::delack_max(sock)
        .ok()
        .and_then(|max| u32::try_from(max.as_micros()).ok());
    Ok(Some(view))
}

/// The row the kernel's TCP table would show for a live socket: IPv4/IPv6 and TCP
/// (`SO_DOMAIN`, `SO_PROTOCOL`), its addresses, its state from TCP_INFO, its owner (the
/// socket inode's uid, which `sock_i_uid` prints). `None` for any other socket, and for one
/// not yet bound or connected (CLOSE), which the tables do not list either.
fn live_entry(dup: &std::os::fd::OwnedFd, inode: u64) -> Option<TcpEntry> {
    let sock = socket2::SockRef::from(dup);
    let domain = sock.domain().ok()?;
    if !(domain == socket2::Domain::IPV4 || domain == socket2::Domain::IPV6)
        || sock.protocol().ok()? != Some(socket2::Protocol::TCP)
    {
        return None;
    }
    let state = TcpState::from_code(sockopt::tcp_info(dup.as_fd()).ok()?.state)?;
    if state == TcpState::Close {
        return None;
    }
    let local = procfs::unmapped(sock.local_addr().ok()?.as_socket()?);
    let unspecified = if domain == socket2::Domain::IPV4 {
        std::net::SocketAddr::from(([0u8; 4], 0))
    } else {
        std::net::SocketAddr::from(([0u16; 8], 0))
    };
    let remote = match sock.peer_addr() {
        Ok(peer) => procfs::unmapped(peer.as_socket()?),
        Err(_) => unspecified, // listening, or not connected yet
    };
    let uid = nix::sys::stat::fstat(dup).ok()?.st_uid;
    Some(TcpEntry {
        local,
        remote,
        state,
        uid,
        inode,
    })
}

/// Without access to /proc/PID/fd, the sockets cannot be tied to fds: show the TCP sockets of
/// the process's user in its network namespace, which include the process's own. Which process
/// holds each is unknown, so none is named (`pid` null).
fn owned_by_uid(pid: u32) -> Result<ProcessSockets, AccessError> {
    let table = procfs::tcp_table(pid).map_err(|err| {
        if procfs::process_exists(pid) {
            AccessError::from_errno(err, pid, "read /proc/PID/net/tcp")
        } else {
            AccessError::NoSuchProcess { pid }
        }
    })?;
    let uid = procfs::uid_of(pid);
    let reason = AccessError::fd_list_refused(pid).to_string();
    let mut sockets: Vec<SocketView> = table
        .values()
        .filter(|e| Some(e.uid) == uid)
        .map(|e| {
            let mut view = SocketView::from_proc(None, None, e);
            view.unknown_reason = Some(reason.clone());
            view
        })
        .collect();
    sockets.sort_by_key(|v| v.inode);
    let uid_text = crate::report::or_unknown(uid);
    Ok(ProcessSockets {
        pids: vec![pid],
        sockets,
        missing: Some(reason),
        shown_instead: Some(format!(
            "shown instead: every TCP socket of uid {uid_text} in the process's network \
             namespace, pid {pid}'s among them (owner and fd unknown, options unknown)"
        )),
        notes: Vec::new(),
    })
}

/// Runs `tcpstall sockets`.
pub fn run(args: &SocketsArgs) -> anyhow::Result<Outcome> {
    let mut notes = Vec::new();
    let kernel_asked = match args.source {
        Source::Kernel => true,
        Source::Proc => false,
        Source::Auto => args.pid.is_none(),
    };
    let mut views = None;
    if kernel_asked {
        match from_kernel(args) {
            Ok(found) => {
                notes.extend(found.notes);
                views = Some(found.sockets);
            }
            Err(err) if args.source == Source::Kernel => return Err(err),
            Err(err) => eprintln!(
                "tcpstall: {err}; reading each process's sockets instead (its fds, getsockopt \
                 on duplicates, sock_diag)"
            ),
        }
    }
    let kernel_rows = views.is_some();
    let mut views = match views {
        Some(views) => views,
        None => per_process(args, &mut notes)?,
    };
    settle_listeners(&mut views);
    if let Some(port) = args.port {
        views.retain(|v| v.uses_port(port));
    }
    name_runtimes(&mut views);
    if args.all && !args.time_wait {
        let before = views.len();
        views.retain(|v| !(v.state == TcpState::TimeWait && v.pid.is_none()));
        let hidden = before - views.len();
        if hidden > 0 {
            let (count, are) = if hidden == 1 {
                ("1 TIME_WAIT socket".to_string(), "is")
            } else {
                (format!("{hidden} TIME_WAIT sockets"), "are")
            };
            notes.push(format!(
                "{count} (closed connections waiting out 2 MSL, held by no process) {are} not \
                 shown: --time-wait shows them"
            ));
        }
    }
    for note in &notes {
        eprintln!("tcpstall: {note}");
    }
    if args.json {
        crate::report::print_stdout(&(serde_json::to_string_pretty(&views)? + "\n"))?;
    } else {
        let mut stdout = std::io::stdout().lock();
        let fix_pid = args.pid.filter(|_| !args.no_tree);
        if kernel_rows {
            crate::report::sockets::write_kernel_table(&mut stdout, &views, fix_pid)?;
        } else {
            crate::report::sockets::write_table(&mut stdout, &views, fix_pid)?;
        }
        std::io::Write::flush(&mut stdout)?;
    }
    Ok(Outcome::Done)
}

/// The runtime of each process holding a socket that can stall, read once per process.
pub fn name_runtimes(views: &mut [SocketView]) {
    let mut runtimes = RuntimeCache::default();
    for v in views.iter_mut().filter(|v| v.can_stall == Some(true)) {
        v.runtime = v.pid.and_then(|pid| runtimes.runtime_of(pid));
    }
}

/// Every socket of the host (or of the PID's tree) in one pass of the kernel's iterator.
fn from_kernel(args: &SocketsArgs) -> anyhow::Result<super::host_sockets::HostSockets> {
    let tree = match args.pid {
        Some(pid) if !procfs::process_exists(pid) => {
            return Err(AccessError::NoSuchProcess { pid }.into())
        }
        Some(pid) if args.no_tree => Some(vec![pid]),
        Some(pid) => Some(crate::host::tree::process_tree(pid)),
        None => None,
    };
    Ok(super::host_sockets::read(tree.as_deref())?)
}

/// The sockets of the PID's tree, or of every process, each read through a duplicate.
fn per_process(args: &SocketsArgs, notes: &mut Vec<String>) -> anyhow::Result<Vec<SocketView>> {
    let mut views = Vec::new();
    if let Some(pid) = args.pid {
        let found = inspect_scope(pid, !args.no_tree)?;
        if found.shown_instead.is_some() {
            // Without its fds nothing tells the process's sockets from its user's others (root:
            // the whole host's): none is shown as its own.
            let why = found.missing.unwrap_or_default();
            bail!(
                "cannot read the sockets of pid {pid}: {why}; nothing of that process could be \
                 read (its fds say which sockets are its own: the kernel's table alone would \
                 list every socket of its user under it)"
            );
        }
        notes.extend(found.missing);
        notes.extend(found.shown_instead);
        notes.extend(found.notes);
        views = found.sockets;
    } else {
        let me = std::process::id();
        let mut refused = 0usize;
        let mut unreadable = false;
        for pid in procfs::all_pids().context("cannot list /proc")? {
            if pid == me {
                continue;
            }
            match procfs::socket_fds(pid) {
                Err(FdListError::PermissionDenied) => {
                    refused += 1;
                    unreadable = true;
                    continue;
                }
                Err(_) => continue,
                Ok(fds) if fds.is_empty() => continue,
                Ok(_) => {}
            }
            match inspect(pid) {
                Ok(found) => {
                    if found.missing.is_some() {
                        refused += 1;
                    }
                    unreadable |= found.shown_instead.is_some();
                    views.extend(found.sockets.into_iter().filter(|v| v.pid.is_some()));
                }
                Err(AccessError::NoSuchProcess { .. }) => {}
                Err(err) => notes.push(err.to_string()),
            }
        }
        if unreadable {
            // What /proc allows: the namespace's TCP table names every socket and its uid,
            // only not the process holding it.
            let claimed: std::collections::HashSet<u64> = views.iter().map(|v| v.inode).collect();
            let table = procfs::tcp_table(me).context("cannot read /proc/net/tcp")?;
            let mut unclaimed: Vec<SocketView> = table
                .values()
                .filter(|e| e.inode != 0 && !claimed.contains(&e.inode))
                .map(|e| SocketView::from_proc(None, None, e))
                .collect();
            unclaimed.sort_by_key(|v| v.inode);
            views.extend(unclaimed);
        }
        if refused > 0 {
            let why = crate::host::privilege::missing_for_other_users().unwrap_or(
                "refused even with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (other user \
                 namespaces, kernel threads, processes that are not dumpable, or a security \
                 module)",
            );
            let processes = if refused == 1 { "process" } else { "processes" };
            notes.push(format!(
                "{refused} {processes} not fully readable: {why}; their sockets are listed with \
                 pid ?"
            ));
        }
    }
    Ok(views)
}

/// A loopback connection after `turns` one-byte request/response turns: (listener, client,
/// server), the client in ping-pong mode (it delays its ACKs, `inet_csk_enter_pingpong_mode`).
#[cfg(test)]
pub(crate) fn ping_pong_pair(
    turns: usize,
) -> (
    std::net::TcpListener,
    std::net::TcpStream,
    std::net::TcpStream,
) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut client =
        std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
    let (mut server, _) = listener.accept().expect("accept");
    let mut byte = [0u8; 1];
    for _ in 0..turns {
        client.write_all(b"q").expect("request");
        server.read_exact(&mut byte).expect("read request");
        server.write_all(b"a").expect("response");
        client.read_exact(&mut byte).expect("read response");
    }
    (listener, client, server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn inspect_reads_the_options_of_this_process_sockets() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        sockopt::set_nodelay(accepted.as_fd(), true).expect("nodelay");
        let found = inspect(std::process::id()).expect("own sockets are readable");
        assert!(found.missing.is_none());
        let by_local = |addr: std::net::SocketAddr, remote: std::net::SocketAddr| {
            found
                .sockets
                .iter()
                .find(|v| v.local == addr.to_string() && v.remote == remote.to_string())
                .unwrap_or_else(|| panic!("{addr} not found in {:?}", found.sockets))
        };
        let unspecified: std::net::SocketAddr = "0.0.0.0:0".parse().expect("addr");
        let listen = by_local(listener.local_addr().expect("addr"), unspecified);
        assert!(listen.listening);
        assert_eq!(listen.nodelay, Some(false));
        assert_eq!(
            listen.can_stall,
            Some(true),
            "accepted sockets inherit Nagle"
        );
        let server_side = by_local(
            accepted.local_addr().expect("addr"),
            client.local_addr().expect("addr"),
        );
        assert_eq!(server_side.nodelay, Some(true));
        assert_eq!(server_side.can_stall, Some(false));
        let client_side = by_local(
            client.local_addr().expect("addr"),
            accepted.local_addr().expect("addr"),
        );
        assert_eq!(client_side.nodelay, Some(false));
        assert_eq!(client_side.state, TcpState::Established);
        assert!(client_side.tcp_info.is_some());
    }

    #[test]
    fn a_live_socket_reads_as_the_kernel_table_shows_it() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        let v6 = TcpListener::bind("[::1]:0").ok();
        let table = procfs::tcp_table(std::process::id()).expect("/proc/net/tcp");
        let mut fds: Vec<std::os::fd::OwnedFd> = [&listener as &dyn AsFd, &client, &accepted]
            .iter()
            .map(|s| s.as_fd().try_clone_to_owned().expect("dup"))
            .collect();
        if let Some(v6) = &v6 {
            fds.push(v6.as_fd().try_clone_to_owned().expect("dup"));
        }
        for fd in &fds {
            let inode = socket_inode(fd).expect("fstat");
            assert_eq!(
                live_entry(fd, inode).as_ref(),
                table.get(&inode),
                "inode {inode}"
            );
        }
    }

    /// What one attempt saw.
    enum Attempt {
        /// The second write showed as held.
        Held,
        /// Not held, although `inspect` ended within the hold: a real miss.
        Missed,
        /// `inspect` took longer than the delayed ACK holds the write: it could not tell.
        TooSlow,
    }

    /// One attempt: a few request/response turns put the client in ping-pong mode (its ACKs
    /// are delayed), then the server writes twice; the second write waits for the ACK of the
    /// first, one delayed-ACK timeout (40 ms).
    fn hold_seen_once() -> Attempt {
        use std::io::Write;
        let (_listener, client, mut server) = ping_pong_pair(4);
        server.write_all(&[1u8; 10]).expect("first write");
        let written = std::time::Instant::now();
        server.write_all(&[2u8; 10]).expect("second write");
        let found = inspect(std::process::id()).expect("own sockets");
        let local = server.local_addr().expect("addr").to_string();
        let remote = client.local_addr().expect("addr").to_string();
        let held = found
            .sockets
            .iter()
            .any(|v| v.local == local && v.remote == remote && v.held_now == Some(true));
        // Within the delayed-ACK floor less the margin the hold surely lasted.
        let within = written.elapsed() < crate::tcp_rules::STALL_THRESHOLD;
        match (held, within) {
            (true, _) => Attempt::Held,
            (false, true) => Attempt::Missed,
            (false, false) => Attempt::TooSlow,
        }
    }

    #[test]
    fn a_nagle_hold_is_caught_in_the_act() {
        // The hold lasts one delayed ACK (40 ms); attempts absorb a descheduled test, and say
        // why none saw it.
        let (mut missed, mut too_slow) = (0, 0);
        for _ in 0..20 {
            match hold_seen_once() {
                Attempt::Held => return,
                Attempt::Missed => missed += 1,
                Attempt::TooSlow => too_slow += 1,
            }
        }
        panic!(
            "the second small write never showed as held (unacked > 0, notsent > 0): {missed} \
             attempts read the sockets within the hold and missed it, {too_slow} took longer \
             than the hold"
        );
    }

    /// A connection of this process after a few turns in which the server writes each reply in
    /// two parts: the client side delays its ACKs.
    #[test]
    fn the_table_advises_the_delack_cap_on_the_client_side_only() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (mut server, _) = listener.accept().expect("accept");
        let mut buf = [0u8; 64];
        for _ in 0..6 {
            client.write_all(b"request").expect("request");
            server.read_exact(&mut buf[..7]).expect("read request");
            server.write_all(b"head").expect("head");
            server.write_all(b"body").expect("body");
            client.read_exact(&mut buf[..8]).expect("reply");
        }
        let found = inspect(std::process::id()).expect("own sockets");
        let client_local = client.local_addr().expect("addr").to_string();
        let server_local = server.local_addr().expect("addr").to_string();
        let mine: Vec<SocketView> = found
            .sockets
            .into_iter()
            .filter(|v| v.local == client_local || v.local == server_local)
            .collect();
        let mut text = Vec::new();
        crate::report::sockets::write_table(&mut text, &mine, None).expect("written");
        let text = String::from_utf8(text).expect("utf-8");
        let kernel_has_cap = mine.iter().all(|v| v.delack_max_us.is_some());
        assert_eq!(
            text.contains(&format!("delayed ACKs: pid {}", std::process::id()))
                && text.contains(&client_local),
            kernel_has_cap,
            "{text}"
        );
        assert!(
            !text.lines().any(
                |l| l.starts_with("delayed ACKs:") && l.contains(&format!("{server_local} ->"))
            ),
            "the listener's side is a server: {text}"
        );
        assert!(!text.contains("shared:"), "one holder each: {text}");
    }
}
