//! The socket-related syscalls `trace` follows, in one table used twice: by the seccomp filter
//! (which syscalls stop the tracee) and by the tracer (what a stop means).

/// What a followed syscall does, as far as the write-write-read rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyscallKind {
    /// `socket(domain, type, protocol)` → new fd.
    Socket,
    /// `connect(fd, ...)`.
    Connect,
    /// `accept`/`accept4(fd, ...)` → new fd, a child of the listener.
    Accept,
    /// `setsockopt(fd, level, name, value, len)`.
    SetSockOpt,
    /// Data sent on fd (arg 0); `flags_arg` holds the send flags (MSG_MORE) when the call has them.
    Send {
        /// Index of the flags argument.
        flags_arg: Option<usize>,
    },
    /// `sendmmsg(fd, msgvec, vlen, flags)`: several messages, each its own send
    /// (`__sys_sendmmsg` calls `tcp_sendmsg` once per message); returns how many were sent.
    SendMessages,
    /// Data read from fd (arg 0).
    Recv,
    /// The thread waits for readiness of some fds.
    Wait(WaitKind),
    /// `close(fd)`.
    Close,
    /// `dup(old)` → new fd as return value.
    Dup,
    /// `dup2`/`dup3(old, new)`.
    DupTo,
    /// `fcntl(fd, cmd, ...)`: F_DUPFD and F_DUPFD_CLOEXEC duplicate.
    Fcntl,
}

/// How a wait names the fds it waits on, which tells a wait for the peer (readable) from a
/// wait for buffer space (writable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitKind {
    /// `poll`/`ppoll(fds, nfds, ...)`: an array of `struct pollfd`.
    Poll,
    /// `select`/`pselect6(nfds, readfds, writefds, ...)`: fd bitmaps.
    Select,
    /// `epoll_wait` and friends: the fds are in the epoll set, not in the call.
    Epoll,
}

/// The followed syscalls of this architecture.
pub const FOLLOWED: &[(libc::c_long, SyscallKind)] = &[
    (libc::SYS_socket, SyscallKind::Socket),
    (libc::SYS_connect, SyscallKind::Connect),
    (libc::SYS_accept, SyscallKind::Accept),
    (libc::SYS_accept4, SyscallKind::Accept),
    (libc::SYS_setsockopt, SyscallKind::SetSockOpt),
    (libc::SYS_write, SyscallKind::Send { flags_arg: None }),
    (libc::SYS_writev, SyscallKind::Send { flags_arg: None }),
    (libc::SYS_sendto, SyscallKind::Send { flags_arg: Some(3) }),
    (libc::SYS_sendmsg, SyscallKind::Send { flags_arg: Some(2) }),
    (libc::SYS_sendmmsg, SyscallKind::SendMessages),
    (libc::SYS_sendfile, SyscallKind::Send { flags_arg: None }),
    (libc::SYS_read, SyscallKind::Recv),
    (libc::SYS_readv, SyscallKind::Recv),
    (libc::SYS_recvfrom, SyscallKind::Recv),
    (libc::SYS_recvmsg, SyscallKind::Recv),
    (libc::SYS_recvmmsg, SyscallKind::Recv),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_poll, SyscallKind::Wait(WaitKind::Poll)),
    (libc::SYS_ppoll, SyscallKind::Wait(WaitKind::Poll)),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_select, SyscallKind::Wait(WaitKind::Select)),
    (libc::SYS_pselect6, SyscallKind::Wait(WaitKind::Select)),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_epoll_wait, SyscallKind::Wait(WaitKind::Epoll)),
    (libc::SYS_epoll_pwait, SyscallKind::Wait(WaitKind::Epoll)),
    (libc::SYS_epoll_pwait2, SyscallKind::Wait(WaitKind::Epoll)),
    (libc::SYS_close, SyscallKind::Close),
    (libc::SYS_dup, SyscallKind::Dup),
    #[cfg(target_arch = "x86_64")]
    (libc::SYS_dup2, SyscallKind::DupTo),
    (libc::SYS_dup3, SyscallKind::DupTo),
    (libc::SYS_fcntl, SyscallKind::Fcntl),
];

/// What syscall number `nr` is, if followed.
pub fn kind_of(nr: u64) -> Option<SyscallKind> {
    FOLLOWED
        .iter()
        .find(|(n, _)| *n as u64 == nr)
        .map(|&(_, kind)| kind)
}
