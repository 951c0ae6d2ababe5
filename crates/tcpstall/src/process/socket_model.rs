//! The model behind `trace`: from the events of the traced threads ([`Event`]) it keeps the fd
//! tables, one record per TCP socket (one per socket, not per fd: a socket shared through dup,
//! fork or exec is one), and the sends on each socket since its last read, and decides which of
//! those are a write-write-read ([`WritesSinceRead`]); of each, how long the kernel kept back
//! the tail of its last write ([`Hold`]), which is the stall, apart from the rest of the read's
//! wait, which is the peer's time (a keep-alive server's read waits for the next request).
//!
//! It holds no process and no socket: what an fd is, and a socket's options and addresses, it
//! asks of an [`Inspector`] (the tracer's looks at the fd through pidfd_getfd; a scripted world
//! in the tests).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use super::events::{Actor, Event, TcpOption};
use super::fd_table::{FdTable, Slot, SocketId};
use super::pattern::WritesSinceRead;
use crate::host::call_stack::{CallSites, RawSites};
pub(crate) use crate::report::model::trace::{Hold, TracedSocket};
use crate::tcp_rules;

/// MSS assumed when the socket's cannot be read (Ethernet with timestamps).
const FALLBACK_MSS: u64 = tcp_rules::payload_mss(tcp_rules::DEFAULT_MSS_V4, true) as u64;

impl TracedSocket {
    /// A socket first seen at fd `fd` of `pid`, nothing known of it yet.
    pub fn new(pid: u32, fd: i32) -> TracedSocket {
        TracedSocket {
            pid,
            fd,
            local: None,
            remote: None,
            nodelay: false,
            nodelay_ever_set: false,
            cork: false,
            quickack_sets: 0,
            mss: FALLBACK_MSS,
            sends: 0,
            reads: 0,
            write_write_read: 0,
            waits_over_30ms: 0,
            unmeasured_holds_over_30ms: 0,
            idle_waits_over_30ms: 0,
            longest_idle_wait_ms: None,
            example: None,
            kernel_held_sends: 0,
        }
    }

    /// Fills options and addresses from what the socket itself shows.
    fn learn(&mut self, facts: SocketFacts) {
        self.local = facts.local.or(self.local);
        self.remote = facts.remote.or(self.remote);
        self.nodelay = facts.nodelay;
        self.nodelay_ever_set |= facts.nodelay;
        self.cork = facts.cork;
        if let Some(mss) = facts.mss.filter(|&m| m > 0) {
            self.mss = mss;
        }
    }
}

/// What a TCP socket shows when looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SocketFacts {
    /// Inode of the socket: the same socket behind other fds, in other processes, or after
    /// an exec, has the same one.
    pub inode: Option<u64>,
    /// Local address.
    pub local: Option<SocketAddr>,
    /// Remote address.
    pub remote: Option<SocketAddr>,
    /// TCP_NODELAY.
    pub nodelay: bool,
    /// TCP_CORK.
    pub cork: bool,
    /// TCP_MAXSEG.
    pub mss: Option<u64>,
    /// The send queue now (TCP_INFO), when it could be read.
    pub queue: Option<SendQueue>,
}

/// What a socket's TCP_INFO says of its sending side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendQueue {
    /// Bytes written and not yet sent (`tcpi_notsent_bytes`: write_seq - snd_nxt).
    pub notsent: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`: packets_out).
    pub unacked: u32,
    /// Since the socket last sent data (`tcpi_last_data_sent`: lsndtime, to the jiffy).
    pub since_last_sent: Duration,
}

impl SendQueue {
    /// Nagle keeps bytes back: fewer than a segment unsent behind segments in flight
    /// (`tcp_nagle_check`; a full segment unsent waits for the window, not for Nagle).
    fn nagle_holds(&self, mss: u64) -> bool {
        self.notsent > 0 && u64::from(self.notsent) < mss && self.unacked > 0
    }

    /// When the socket last sent data, seen at `now`; never before `floor`.
    fn last_sent(&self, now: Instant, floor: Instant) -> Instant {
        now.checked_sub(self.since_last_sent)
            .map_or(floor, |t| t.max(floor))
    }
}

/// What an fd turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Probe {
    /// An IPv4/IPv6 stream socket of protocol TCP.
    Tcp(SocketFacts),
    /// Anything else.
    Other,
    /// Could not be looked at (closed, no permission): ask again next time.
    Unknown,
}

/// Looks at the fds of the traced processes.
pub(crate) trait Inspector {
    /// What fd `fd` of process `pid` is, now.
    fn inspect(&mut self, pid: u32, fd: i32) -> Probe;
}

/// Sends on a socket since its last read.
#[derive(Debug)]
struct OpenSends {
    writes: WritesSinceRead,
    /// The thread that sent first: its next wait ends them.
    thread: u32,
    /// When the last send returned.
    last_send: Instant,
    /// What tells whether the last send's tail is kept back, and until when.
    clues: HoldClues,
    /// The call stacks of the last send and of the write before it, when the kernel took
    /// them (a held send).
    stacks: Option<RawSites>,
}

/// What the sources say of the tail of a socket's last send: the kernel's records (the send
/// held as it returned, then the moment it left), or the socket's TCP_INFO when the read
/// began and when it ended (ptrace).
#[derive(Debug, Default, Clone, Copy)]
struct HoldClues {
    /// The kernel's word as the send returned.
    held_at_send: Option<bool>,
    /// Nagle kept bytes back when the read began (TCP_INFO).
    held_at_read: Option<bool>,
    /// When the tail left, once seen.
    left: Option<Instant>,
    /// A segment or more was unsent when looked at: the window kept it back, not Nagle.
    not_nagle: bool,
}

impl HoldClues {
    /// What the socket's send queue, read at `now`, says of a tail sent at `last_send`: once
    /// nothing is unsent, it left when the socket last sent data (TCP_INFO's lsndtime, the
    /// latest send after it: never earlier than it truly left).
    fn look(&mut self, queue: &SendQueue, mss: u64, last_send: Instant, now: Instant) {
        if self.left.is_some() {
            return;
        }
        if queue.nagle_holds(mss) {
            self.held_at_read.get_or_insert(true);
        } else if queue.notsent == 0 {
            self.held_at_read.get_or_insert(false);
            self.left = Some(queue.last_sent(now, last_send));
        } else {
            self.not_nagle = true;
        }
    }

    /// How long the tail was kept back, the read or wait ending at `now` after a last send at
    /// `last_send`; `queue`: the socket's send queue now, when readable.
    fn verdict(
        mut self,
        mss: u64,
        last_send: Instant,
        now: Instant,
        queue: Option<&SendQueue>,
    ) -> Hold {
        let wait = now.saturating_duration_since(last_send);
        if self.held_at_send == Some(false) {
            return Hold::Nothing;
        }
        if let Some(queue) = queue {
            if self.left.is_none() && queue.nagle_holds(mss) {
                // Still kept back as the read returns: at least the whole wait.
                return Hold::Proven(wait);
            }
            self.look(queue, mss, last_send, now);
        }
        let seen_held = self.held_at_send == Some(true) || self.held_at_read == Some(true);
        match self.left {
            Some(left) => {
                let hold = left.saturating_duration_since(last_send);
                // Never seen unsent, and the socket's last send within the clean bound (a
                // jiffy or two) of the write's: it went out with it.
                if !seen_held && (self.not_nagle || hold < tcp_rules::CLEAN_BOUND) {
                    Hold::Nothing
                } else {
                    Hold::Proven(hold)
                }
            }
            None if self.not_nagle && !seen_held => Hold::Nothing,
            // Unseen leaving: the read's end bounds it.
            None => Hold::AtMost(wait),
        }
    }
}

/// A socket and what the rule needs to know of it.
#[derive(Debug)]
struct Tracked {
    seen: TracedSocket,
    /// Options and addresses have been read from the socket itself (or that was tried).
    resolved: bool,
    /// The last send had MSG_MORE: the next one joins it in one segment.
    more_pending: bool,
    /// Sends since the last read.
    open: Option<OpenSends>,
    /// Thread of the last send: a read by another thread may be blocked while it sends.
    last_sender: Option<u32>,
}

/// A traced thread.
#[derive(Debug)]
struct ThreadState {
    tgid: u32,
    /// Sockets with sends by this thread that its next wait ends.
    open: Vec<SocketId>,
}

/// The fd tables, sockets and threads of the traced program, and the verdicts so far.
pub(crate) struct SocketModel<I> {
    inspector: I,
    fds: FdTable,
    threads: HashMap<u32, ThreadState>,
    sockets: Vec<Tracked>,
    /// Socket inode → socket, for sockets that have been looked at.
    by_inode: HashMap<u64, SocketId>,
    /// Call stacks are taken: an example is given its writes' stacks ([`Self::name_examples`]).
    keeps_stacks: bool,
    /// Sockets whose example changed since [`Self::name_examples`], with its last send's raw
    /// stacks.
    new_examples: Vec<(SocketId, Option<RawSites>)>,
}

impl<I: Inspector> SocketModel<I> {
    /// An empty model that looks at fds through `inspector`.
    pub fn new(inspector: I) -> SocketModel<I> {
        SocketModel {
            inspector,
            fds: FdTable::default(),
            threads: HashMap::new(),
            sockets: Vec::new(),
            by_inode: HashMap::new(),
            keeps_stacks: false,
            new_examples: Vec::new(),
        }
    }

    /// Each socket's example is to carry the call stacks of its writes, told by
    /// [`Self::held_send_stacks`] and named by [`Self::name_examples`].
    pub fn keep_stacks(&mut self) {
        self.keeps_stacks = true;
    }

    /// The call stacks of the send `actor` just made on `fd` ([`Event::Sent`]) and of the
    /// write before it.
    pub fn held_send_stacks(&mut self, actor: Actor, fd: i32, stacks: RawSites) {
        let open = self
            .socket_of(actor.tgid, fd)
            .and_then(|idx| self.sockets[idx].open.as_mut());
        if let Some(open) = open {
            open.stacks = Some(stacks);
        }
    }

    /// Gives the examples chosen since the last call their call sites, named by `name` from
    /// the raw stacks of their last send (`None`: the kernel took none, the send not held),
    /// while their process still runs.
    pub fn name_examples(&mut self, mut name: impl FnMut(Option<&RawSites>) -> CallSites) {
        for (idx, raw) in std::mem::take(&mut self.new_examples) {
            if let Some(example) = self.sockets[idx].seen.example.as_mut() {
                example.call_sites = Some(name(raw.as_ref()));
            }
        }
    }

    /// Every TCP socket seen, in the order first seen.
    pub fn into_sockets(self) -> Vec<TracedSocket> {
        self.sockets.into_iter().map(|t| t.seen).collect()
    }

    /// The inspector, for a driver that tells it what fds are as events arrive.
    pub fn inspector_mut(&mut self) -> &mut I {
        &mut self.inspector
    }

    /// The process has been seen (its fd table is known).
    pub fn knows_process(&self, pid: u32) -> bool {
        self.fds.knows(pid)
    }

    /// Fd `fd` of `pid` holds a TCP socket (looked at the first time it is asked).
    pub fn is_tcp(&mut self, pid: u32, fd: i32) -> bool {
        self.socket_of(pid, fd).is_some()
    }

    /// Whether the return of a read on `fd` by `actor` matters: `None` when `fd` is no TCP
    /// socket. The return decides when sends are waiting (a read that returns ends them, EAGAIN
    /// does not). With none waiting, it still matters when another thread or process may send
    /// on the socket while this read blocks, as a reader thread does: the socket's last sender
    /// was another thread, or, before any send, the program has more than one thread or process.
    pub fn read_can_end_sends(&mut self, actor: Actor, fd: i32) -> Option<bool> {
        let idx = self.socket_of(actor.tgid, fd)?;
        let socket = &self.sockets[idx];
        if socket.open.is_some() {
            return Some(true);
        }
        Some(match socket.last_sender {
            Some(sender) => sender != actor.tid,
            None => {
                self.fds.process_count() > 1
                    || self
                        .threads
                        .values()
                        .filter(|t| t.tgid == actor.tgid)
                        .nth(1)
                        .is_some()
            }
        })
    }

    /// The thread has sent on some socket since that socket's last read.
    pub fn has_open_sends(&self, tid: u32) -> bool {
        self.threads.get(&tid).is_some_and(|t| !t.open.is_empty())
    }

    /// A wait by `actor` on `readable` fds ends sends that may be a write-write-read, so its
    /// length matters. Asked after [`Event::WaitBegun`], which has ended the others.
    pub fn wait_ends_held_sends(&self, actor: Actor, readable: &Option<Vec<i32>>) -> bool {
        !self.waited_on(actor, readable).is_empty()
    }

    /// Takes in one event of thread `actor`, at time `at`.
    pub fn apply(&mut self, actor: Actor, at: Instant, event: Event) {
        let Actor { tid, tgid } = actor;
        match event {
            Event::ThreadStarted { parent } => {
                if !self.threads.contains_key(&tid) {
                    self.fds.add_process(tgid, parent);
                    self.threads.insert(
                        tid,
                        ThreadState {
                            tgid,
                            open: Vec::new(),
                        },
                    );
                }
            }
            Event::ThreadExited => {
                if let Some(thread) = self.threads.remove(&tid) {
                    for idx in thread.open {
                        self.sockets[idx].open = None;
                    }
                }
            }
            Event::Exec { former } => {
                if former != tid {
                    self.threads.remove(&former);
                }
                self.fds.forget_fds(tgid);
            }
            Event::SocketOpened { fd, tcp } => {
                let slot = if tcp {
                    Slot::Tcp(self.new_socket(tgid, fd))
                } else {
                    Slot::Other
                };
                self.fds.set(tgid, fd, Some(slot));
            }
            Event::Accepted { fd } => {
                // Options are read at first use: they come from the listener.
                let slot = Slot::Tcp(self.new_socket(tgid, fd));
                self.fds.set(tgid, fd, Some(slot));
            }
            Event::Sent {
                fd,
                bytes,
                more,
                held,
            } => {
                if let Some(idx) = self.socket_of(tgid, fd) {
                    self.on_send(tid, idx, bytes, more, at);
                    self.sockets[idx].seen.kernel_held_sends += u64::from(held == Some(true));
                    if let Some(open) = self.sockets[idx].open.as_mut() {
                        open.clues = HoldClues {
                            held_at_send: held,
                            ..HoldClues::default()
                        };
                        open.stacks = None;
                    }
                }
            }
            Event::HeldTailLeft { fd } => {
                let open = self
                    .socket_of(tgid, fd)
                    .and_then(|idx| self.sockets[idx].open.as_mut());
                if let Some(open) = open.filter(|o| o.clues.held_at_send == Some(true)) {
                    open.clues.left = Some(at.max(open.last_send));
                }
            }
            Event::ReadBegun { fd } => {
                if let Some(idx) = self.socket_of(tgid, fd) {
                    self.look_at_queue(idx, at);
                }
            }
            Event::Read { fd, returned } => {
                if let Some(idx) = self.socket_of(tgid, fd) {
                    self.sockets[idx].seen.reads += 1;
                    if returned {
                        self.end_sends(idx, at);
                    }
                }
            }
            Event::WaitBegun { readable } => {
                // Sends that cannot be a write-write-read end here; the others end when the
                // wait returns, which times it.
                for idx in self.waited_on(actor, &readable) {
                    let held = self.sockets[idx]
                        .open
                        .as_ref()
                        .is_some_and(|o| o.writes.is_write_write_read());
                    if held {
                        self.look_at_queue(idx, at);
                    } else {
                        self.end_sends(idx, at);
                    }
                }
            }
            Event::WaitEnded { readable } => {
                for idx in self.waited_on(actor, &readable) {
                    self.end_sends(idx, at);
                }
            }
            Event::OptionSet { fd, option } => {
                if let Some(idx) = self.socket_of(tgid, fd) {
                    let socket = &mut self.sockets[idx].seen;
                    match option {
                        TcpOption::NoDelay(on) => {
                            socket.nodelay = on;
                            socket.nodelay_ever_set |= on;
                        }
                        TcpOption::Cork(on) => socket.cork = on,
                        // Not sticky (ping-pong mode returns at the next turn): count the calls.
                        TcpOption::QuickAck(on) => socket.quickack_sets += u64::from(on),
                    }
                }
            }
            Event::Closed { fd } => {
                // Sends without a read after them are no write-write-read once the socket is
                // gone; but it lives on while another fd (a dup, a forked copy) holds it.
                if let Some(Slot::Tcp(idx)) = self.fds.close(tgid, fd) {
                    if !self.fds.holds(idx) {
                        self.drop_sends(idx);
                    }
                }
            }
            Event::Duplicated { from, to } => self.fds.duplicate(tgid, from, to),
        }
    }

    /// The sockets with sends of thread `actor` that a wait on `readable` fds waits on
    /// (`None`: the call does not say, so all of them).
    fn waited_on(&self, actor: Actor, readable: &Option<Vec<i32>>) -> Vec<SocketId> {
        let Some(thread) = self.threads.get(&actor.tid) else {
            return Vec::new();
        };
        thread
            .open
            .iter()
            .copied()
            .filter(|&idx| match readable {
                None => true,
                Some(list) => list
                    .iter()
                    .any(|&fd| self.fds.get(actor.tgid, fd) == Some(Slot::Tcp(idx))),
            })
            .collect()
    }

    fn new_socket(&mut self, pid: u32, fd: i32) -> SocketId {
        self.sockets.push(Tracked {
            seen: TracedSocket::new(pid, fd),
            resolved: false,
            more_pending: false,
            open: None,
            last_sender: None,
        });
        self.sockets.len() - 1
    }

    /// The TCP socket behind fd `fd` of process `pid`, looking at the fd itself the first time
    /// it is used.
    fn socket_of(&mut self, pid: u32, fd: i32) -> Option<SocketId> {
        if fd < 0 {
            return None;
        }
        match self.fds.get(pid, fd) {
            Some(Slot::Tcp(idx)) => return Some(idx),
            Some(Slot::Other) => return None,
            None => {}
        }
        let facts = match self.inspector.inspect(pid, fd) {
            Probe::Tcp(facts) => facts,
            Probe::Other => {
                self.fds.set(pid, fd, Some(Slot::Other));
                return None;
            }
            Probe::Unknown => return None,
        };
        // A socket seen before through another fd, process or program (inherited over fork
        // or exec, passed on as stdin...) stays one socket.
        let known = facts.inode.and_then(|ino| self.by_inode.get(&ino).copied());
        let idx = match known {
            Some(idx) => idx,
            None => {
                let idx = self.new_socket(pid, fd);
                self.learn(idx, facts);
                idx
            }
        };
        self.fds.set(pid, fd, Some(Slot::Tcp(idx)));
        Some(idx)
    }

    /// Records what socket `idx` showed, and its inode.
    fn learn(&mut self, idx: SocketId, facts: SocketFacts) {
        if let Some(ino) = facts.inode {
            self.by_inode.entry(ino).or_insert(idx);
        }
        let socket = &mut self.sockets[idx];
        socket.seen.learn(facts);
        socket.resolved = socket.seen.remote.is_some();
    }

    /// Reads socket `idx`'s options and addresses again through the fd it was first seen
    /// at, if that fd still holds it (or holds a socket not yet told apart by inode).
    /// Returns its send queue, when read.
    fn look_again(&mut self, idx: SocketId) -> Option<SendQueue> {
        let (pid, fd) = (self.sockets[idx].seen.pid, self.sockets[idx].seen.fd);
        if !self.fds.knows(pid) {
            return None;
        }
        let Probe::Tcp(facts) = self.inspector.inspect(pid, fd) else {
            return None;
        };
        let same = facts.inode.map_or(true, |ino| {
            self.by_inode.get(&ino).map_or(true, |&i| i == idx)
        });
        if !same {
            return None;
        }
        let queue = facts.queue;
        self.learn(idx, facts);
        queue
    }

    /// A read or wait begins after sends that may be a write-write-read: whether the kernel
    /// still keeps their tail back (TCP_INFO), when no record of the kernel's said it.
    fn look_at_queue(&mut self, idx: SocketId, now: Instant) {
        let wanted = self.sockets[idx].open.as_ref().is_some_and(|o| {
            o.writes.is_write_write_read()
                && o.clues.held_at_send.is_none()
                && o.clues.held_at_read.is_none()
        });
        if !wanted {
            return;
        }
        let Some(queue) = self.look_again(idx) else {
            return;
        };
        let mss = self.sockets[idx].seen.mss;
        if let Some(open) = self.sockets[idx].open.as_mut() {
            open.clues.look(&queue, mss, open.last_send, now);
        }
    }

    fn on_send(&mut self, tid: u32, idx: SocketId, bytes: u64, more: bool, now: Instant) {
        if !self.sockets[idx].resolved {
            self.look_again(idx);
            // Try once: a socket that cannot be read keeps the options the syscalls showed.
            self.sockets[idx].resolved = true;
        }
        let socket = &mut self.sockets[idx];
        socket.seen.sends += 1;
        socket.last_sender = Some(tid);
        let (mss, nodelay, cork) = (socket.seen.mss, socket.seen.nodelay, socket.seen.cork);
        let joins = std::mem::replace(&mut socket.more_pending, more);
        let open = socket.open.get_or_insert_with(|| OpenSends {
            writes: WritesSinceRead::default(),
            thread: tid,
            last_send: now,
            clues: HoldClues::default(),
            stacks: None,
        });
        if joins && open.writes.sends > 0 {
            open.writes.extend_last(bytes);
        } else {
            open.writes.push(bytes, mss, nodelay, cork);
        }
        open.last_send = now;
        let owner = open.thread;
        if let Some(thread) = self.threads.get_mut(&owner) {
            if !thread.open.contains(&idx) {
                thread.open.push(idx);
            }
        }
    }

    /// A read or a wait ends the socket's sends: judge them.
    fn end_sends(&mut self, idx: SocketId, now: Instant) {
        let Some(open) = self.take_sends(idx) else {
            return;
        };
        self.sockets[idx].more_pending = false;
        if !open.writes.is_write_write_read() {
            return;
        }
        // TCP_NODELAY may have been switched on from outside (`tcpstall fix`) since the
        // socket was last looked at: look again before blaming Nagle.
        let queue = self.look_again(idx);
        let socket = &mut self.sockets[idx].seen;
        if socket.nodelay {
            return;
        }
        let wait = now.saturating_duration_since(open.last_send);
        let hold = open
            .clues
            .verdict(socket.mss, open.last_send, now, queue.as_ref());
        let example = socket.count(open.writes.sizes, open.writes.sends, wait, hold);
        if example && self.keeps_stacks {
            self.new_examples.push((idx, open.stacks));
        }
    }

    /// The socket is closed: sends without a read after them are no write-write-read.
    fn drop_sends(&mut self, idx: SocketId) {
        self.take_sends(idx);
    }

    /// Takes the socket's open sends away from it and from the thread waiting on them.
    fn take_sends(&mut self, idx: SocketId) -> Option<OpenSends> {
        let open = self.sockets[idx].open.take()?;
        if let Some(thread) = self.threads.get_mut(&open.thread) {
            thread.open.retain(|&i| i != idx);
        }
        Some(open)
    }
}

#[cfg(test)]
mod scenarios;
