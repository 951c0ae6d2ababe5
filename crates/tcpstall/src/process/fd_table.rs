//! The fd tables of the traced processes, as far as the tracer has looked: which fds hold a TCP
//! socket (and which one, across dup, fork and exec) and which hold something else.

use std::collections::HashMap;

/// Index of a socket in the model's list.
pub(crate) type SocketId = usize;

/// What an fd of a process is, once looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// A TCP socket.
    Tcp(SocketId),
    /// Anything else (file, pipe, UDP, unix socket...).
    Other,
}

/// Per process (thread-group id), its fds that have been looked at.
#[derive(Debug, Default)]
pub(crate) struct FdTable {
    processes: HashMap<u32, HashMap<i32, Slot>>,
}

impl FdTable {
    /// The process has been seen.
    pub fn knows(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Processes seen (exited ones included).
    pub fn process_count(&self) -> usize {
        self.processes.len()
    }

    /// Registers process `pid` if new: a forked process starts with a copy of its parent's
    /// table, so the fds it inherited keep pointing at the same sockets.
    pub fn add_process(&mut self, pid: u32, parent: Option<u32>) {
        if self.knows(pid) {
            return;
        }
        let inherited = parent
            .and_then(|p| self.processes.get(&p))
            .cloned()
            .unwrap_or_default();
        self.processes.insert(pid, inherited);
    }

    /// What fd `fd` of `pid` is, if known.
    pub fn get(&self, pid: u32, fd: i32) -> Option<Slot> {
        self.processes.get(&pid)?.get(&fd).copied()
    }

    /// Records what fd `fd` of `pid` is; `None` forgets it.
    pub fn set(&mut self, pid: u32, fd: i32, slot: Option<Slot>) {
        let fds = self.processes.entry(pid).or_default();
        match slot {
            Some(slot) => fds.insert(fd, slot),
            None => fds.remove(&fd),
        };
    }

    /// `to` now refers to what `from` refers to (unknown if `from` is).
    pub fn duplicate(&mut self, pid: u32, from: i32, to: i32) {
        let slot = self.get(pid, from);
        self.set(pid, to, slot);
    }

    /// Closes fd `fd` of `pid`; returns what it held.
    pub fn close(&mut self, pid: u32, fd: i32) -> Option<Slot> {
        self.processes.get_mut(&pid)?.remove(&fd)
    }

    /// After exec: the fds that survived close-on-exec are looked at again when used.
    pub fn forget_fds(&mut self, pid: u32) {
        if let Some(fds) = self.processes.get_mut(&pid) {
            fds.clear();
        }
    }

    /// Some fd of some process still holds `socket` (a dup, a forked copy).
    pub fn holds(&self, socket: SocketId) -> bool {
        self.processes
            .values()
            .any(|fds| fds.values().any(|&s| s == Slot::Tcp(socket)))
    }
}
