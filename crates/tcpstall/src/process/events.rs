//! What a traced program did with its fds, as the socket model hears it: the tracer decodes
//! each followed syscall into these events; the model turns them into per-socket verdicts.

/// The thread an event comes from, and its process (thread-group id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Actor {
    /// Thread id.
    pub tid: u32,
    /// Process (thread-group) id.
    pub tgid: u32,
}

/// A TCP-level option set with setsockopt, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TcpOption {
    /// TCP_NODELAY on or off: Nagle's algorithm off or on.
    NoDelay(bool),
    /// TCP_CORK on or off.
    Cork(bool),
    /// TCP_QUICKACK on or off (not sticky: quick-ACK mode ends at the next turn).
    QuickAck(bool),
}

/// One thing a thread did, in the order the tracer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// The thread is seen for the first time. A process seen for the first time starts with a
    /// copy of `parent`'s fd table (fork).
    ThreadStarted {
        /// The process that forked the thread's process, when known.
        parent: Option<u32>,
    },
    /// The thread ended.
    ThreadExited,
    /// The thread ran exec: the process keeps only the fds that survived close-on-exec, and a
    /// non-leader thread that execs takes over the leader's id (`former` is its old id).
    Exec {
        /// The id the thread had before exec.
        former: u32,
    },
    /// `socket()` returned `fd`.
    SocketOpened {
        /// The new fd.
        fd: i32,
        /// An IPv4/IPv6 stream socket of protocol TCP.
        tcp: bool,
    },
    /// `accept`/`accept4` on a TCP listener returned `fd`, a new connection.
    Accepted {
        /// The new fd.
        fd: i32,
    },
    /// One send of `bytes` on `fd` (write, writev, send*, sendfile: one each; sendmmsg: one per
    /// message, as `__sys_sendmmsg` calls `tcp_sendmsg` once per message).
    Sent {
        /// The fd sent on.
        fd: i32,
        /// Bytes the call moved.
        bytes: u64,
        /// MSG_MORE: the next send joins this one in one segment.
        more: bool,
        /// The kernel's word, as the send returned, on whether Nagle keeps its tail back
        /// (tracepoints); `None` when not told (ptrace: the socket is looked at later).
        held: Option<bool>,
    },
    /// The kernel sent the tail of the last send on `fd` that Nagle kept back (the ACK that
    /// released it came, or a timer sent it), at the event's time.
    HeldTailLeft {
        /// The fd of that send.
        fd: i32,
    },
    /// A read on `fd` begins whose return may end sends (ptrace sees its entry): what the
    /// socket still keeps back now tells a Nagle hold from the peer's own time.
    ReadBegun {
        /// The fd read from.
        fd: i32,
    },
    /// A read on `fd`.
    Read {
        /// The fd read from.
        fd: i32,
        /// Seen returning with data, end of file or an error other than EAGAIN, which ends the
        /// sends before it. False for a read whose return was not followed: the tracer follows
        /// every read that could end sends ([`crate::process::socket_model`]'s
        /// `read_can_end_sends`), so such a read only counts.
        returned: bool,
    },
    /// The thread starts waiting for some fds to become readable (poll, select, epoll).
    WaitBegun {
        /// The fds waited on for reading; `None` when the call does not name them (epoll):
        /// every socket of the thread.
        readable: Option<Vec<i32>>,
    },
    /// The wait begun before returned.
    WaitEnded {
        /// As in [`Event::WaitBegun`].
        readable: Option<Vec<i32>>,
    },
    /// setsockopt(`fd`, IPPROTO_TCP, ...) succeeded.
    OptionSet {
        /// The fd.
        fd: i32,
        /// The option and its value.
        option: TcpOption,
    },
    /// `close(fd)`.
    Closed {
        /// The fd closed.
        fd: i32,
    },
    /// `to` now refers to what `from` refers to (dup, dup2, dup3, fcntl F_DUPFD*).
    Duplicated {
        /// The fd duplicated.
        from: i32,
        /// The fd that now refers to the same file.
        to: i32,
    },
}
