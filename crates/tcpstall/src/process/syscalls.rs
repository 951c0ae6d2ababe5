//! The socket-related syscalls `trace` follows, in one table used twice: by the seccomp filter
//! (which syscalls stop the tracee) and by the tracer (what a stop means); and what their
//! arguments and return values mean, as [`Event`]s for the socket model.

use nix::unistd::Pid;

use super::events::{Event, TcpOption};
use super::tracee_memory;

/// What a followed syscall does, as far as the write-write-read rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyscallKind {
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
pub(crate) enum WaitKind {
    /// `poll`/`ppoll(fds, nfds, ...)`: an array of `struct pollfd`.
    Poll,
    /// `select`/`pselect6(nfds, readfds, writefds, ...)`: fd bitmaps.
    Select,
    /// `epoll_wait` and friends: the fds are in the epoll set, not in the call.
    Epoll,
}

/// The followed syscalls of this architecture.
pub(crate) const FOLLOWED: &[(libc::c_long, SyscallKind)] = &[
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
pub(crate) fn kind_of(nr: u64) -> Option<SyscallKind> {
    FOLLOWED
        .iter()
        .find(|(n, _)| *n as u64 == nr)
        .map(|&(_, kind)| kind)
}

/// `socket(domain, type, protocol)` asks for a TCP socket: IPv4/IPv6, stream, protocol 0 or TCP.
pub(crate) fn opens_tcp(args: &[u64; 6]) -> bool {
    let family = args[0] as i32;
    let stream = args[1] as i32 & 0xf == libc::SOCK_STREAM;
    let tcp_protocol = args[2] == 0 || args[2] == libc::IPPROTO_TCP as u64;
    (family == libc::AF_INET || family == libc::AF_INET6) && stream && tcp_protocol
}

/// `setsockopt(fd, level, name, value, len)` sets one of the TCP options the rule cares about:
/// its name, whose value (an int at `args[3]`) is then worth reading.
pub(crate) fn followed_tcp_option(args: &[u64; 6]) -> Option<libc::c_int> {
    if args[1] != libc::IPPROTO_TCP as u64 {
        return None;
    }
    [libc::TCP_NODELAY, libc::TCP_CORK, libc::TCP_QUICKACK]
        .into_iter()
        .find(|&name| args[2] == name as u64)
}

/// The option `name` (one [`followed_tcp_option`] returned) set to `value`.
pub(crate) fn tcp_option(name: libc::c_int, value: i32) -> TcpOption {
    match name {
        libc::TCP_NODELAY => TcpOption::NoDelay(value != 0),
        libc::TCP_CORK => TcpOption::Cork(value != 0),
        _ => TcpOption::QuickAck(value != 0),
    }
}

/// `fcntl(fd, cmd, ...)` duplicates the fd (F_DUPFD, F_DUPFD_CLOEXEC).
pub(crate) fn fcntl_duplicates(args: &[u64; 6]) -> bool {
    args[1] == libc::F_DUPFD as u64 || args[1] == libc::F_DUPFD_CLOEXEC as u64
}

/// The send flags of a call (`flags_arg` of [`SyscallKind::Send`]) hold MSG_MORE.
pub(crate) fn has_msg_more(args: &[u64; 6], flags_arg: Option<usize>) -> bool {
    flags_arg.is_some_and(|i| args[i] & libc::MSG_MORE as u64 != 0)
}

/// A followed syscall as its entry showed it, kept until it returns: what its return means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Call {
    /// `socket()`, asking for a TCP socket or not.
    Socket {
        /// [`opens_tcp`].
        tcp: bool,
    },
    /// `accept`/`accept4` on a TCP listener.
    Accept,
    /// setsockopt of a TCP option on a TCP socket.
    SetOption {
        /// The socket's fd.
        fd: i32,
        /// The option and the value passed.
        option: TcpOption,
    },
    /// A send on a TCP socket.
    Send {
        /// The socket's fd.
        fd: i32,
        /// MSG_MORE.
        more: bool,
    },
    /// `sendmmsg` on a TCP socket: one send per message sent.
    SendMessages {
        /// The socket's fd.
        fd: i32,
        /// Address of the `struct mmsghdr` array in the tracee.
        msgvec: u64,
        /// MSG_MORE.
        more: bool,
    },
    /// A read on a TCP socket.
    Read {
        /// The socket's fd.
        fd: i32,
    },
    /// A wait for readiness.
    Wait {
        /// The fds waited on for reading (`None`: every socket of the thread).
        readable: Option<Vec<i32>>,
    },
    /// dup, dup2, dup3, fcntl F_DUPFD*.
    Duplicate {
        /// The fd duplicated.
        from: i32,
        /// The new fd, when the call names it (dup2, dup3); else the return value is it.
        to: Option<i32>,
    },
}

impl Call {
    /// Passes to `emit` what the call, returning `ret` (negative errno on failure) in thread
    /// `tid`, means.
    pub fn returned(self, ret: i64, tid: Pid, mut emit: impl FnMut(Event)) {
        match self {
            Call::Socket { tcp } if ret >= 0 => emit(Event::SocketOpened {
                fd: ret as i32,
                tcp,
            }),
            Call::Accept if ret >= 0 => emit(Event::Accepted { fd: ret as i32 }),
            Call::SetOption { fd, option } if ret == 0 => emit(Event::OptionSet { fd, option }),
            Call::Send { fd, more } if ret > 0 => emit(Event::Sent {
                fd,
                bytes: ret as u64,
                more,
                held: None,
            }),
            Call::SendMessages { fd, msgvec, more } if ret > 0 => {
                for bytes in tracee_memory::sent_message_lengths(tid, msgvec, ret as usize) {
                    emit(Event::Sent {
                        fd,
                        bytes,
                        more,
                        held: None,
                    });
                }
            }
            Call::Read { fd } if ret != -(libc::EAGAIN as i64) => {
                emit(Event::Read { fd, returned: true })
            }
            Call::Wait { readable } => emit(Event::WaitEnded { readable }),
            Call::Duplicate { from, to } if ret >= 0 => emit(Event::Duplicated {
                from,
                to: to.unwrap_or(ret as i32),
            }),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: [i64; 3]) -> [u64; 6] {
        [a[0] as u64, a[1] as u64, a[2] as u64, 0, 0, 0]
    }

    /// The events a call returning `ret` in this process means.
    fn events(call: Call, ret: i64) -> Vec<Event> {
        let mut out = Vec::new();
        call.returned(ret, Pid::this(), |e| out.push(e));
        out
    }

    #[test]
    fn tcp_sockets_are_told_from_others_at_socket() {
        let stream = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as i64;
        assert!(opens_tcp(&args([libc::AF_INET as i64, stream, 0])));
        assert!(opens_tcp(&args([
            libc::AF_INET6 as i64,
            stream,
            libc::IPPROTO_TCP as i64
        ])));
        assert!(!opens_tcp(&args([libc::AF_UNIX as i64, stream, 0])));
        let dgram = libc::SOCK_DGRAM as i64;
        assert!(!opens_tcp(&args([libc::AF_INET as i64, dgram, 0])));
        let sctp = libc::IPPROTO_SCTP as i64;
        assert!(!opens_tcp(&args([libc::AF_INET as i64, stream, sctp])));
    }

    #[test]
    fn only_the_tcp_options_of_the_rule_are_followed() {
        let tcp = libc::IPPROTO_TCP as i64;
        let opt =
            |level: i64, name: libc::c_int| followed_tcp_option(&args([3, level, name as i64]));
        assert_eq!(opt(tcp, libc::TCP_NODELAY), Some(libc::TCP_NODELAY));
        assert_eq!(opt(tcp, libc::TCP_CORK), Some(libc::TCP_CORK));
        assert_eq!(opt(tcp, libc::TCP_QUICKACK), Some(libc::TCP_QUICKACK));
        assert_eq!(opt(tcp, libc::TCP_MAXSEG), None);
        // At SOL_SOCKET the number of TCP_NODELAY is SO_DEBUG.
        assert_eq!(opt(libc::SOL_SOCKET as i64, libc::TCP_NODELAY), None);
        assert_eq!(tcp_option(libc::TCP_NODELAY, 1), TcpOption::NoDelay(true));
        assert_eq!(tcp_option(libc::TCP_CORK, 0), TcpOption::Cork(false));
        assert_eq!(tcp_option(libc::TCP_QUICKACK, 2), TcpOption::QuickAck(true));
    }

    #[test]
    fn a_return_means_what_the_call_did() {
        let eagain = -(libc::EAGAIN as i64);
        assert_eq!(events(Call::Read { fd: 3 }, eagain), vec![]);
        let read = Event::Read {
            fd: 3,
            returned: true,
        };
        assert_eq!(events(Call::Read { fd: 3 }, 0), vec![read.clone()]);
        assert_eq!(
            events(Call::Read { fd: 3 }, -(libc::ECONNRESET as i64)),
            vec![read]
        );
        let send = Call::Send { fd: 3, more: true };
        assert_eq!(events(send.clone(), -(libc::EPIPE as i64)), vec![]);
        let sent = Event::Sent {
            fd: 3,
            bytes: 76,
            more: true,
            held: None,
        };
        assert_eq!(events(send, 76), vec![sent]);
        let dup = Call::Duplicate { from: 3, to: None };
        assert_eq!(events(dup, 8), vec![Event::Duplicated { from: 3, to: 8 }]);
        let dup2 = Call::Duplicate {
            from: 3,
            to: Some(0),
        };
        assert_eq!(events(dup2, 0), vec![Event::Duplicated { from: 3, to: 0 }]);
        let failed = Call::Duplicate { from: 3, to: None };
        assert_eq!(events(failed, -(libc::EMFILE as i64)), vec![]);
        // A wait ends however it returns (EINTR included): the time waited is what counts.
        let wait = Call::Wait { readable: None };
        let ended = Event::WaitEnded { readable: None };
        assert_eq!(events(wait, -(libc::EINTR as i64)), vec![ended]);
        let option = Call::SetOption {
            fd: 3,
            option: TcpOption::NoDelay(true),
        };
        assert_eq!(events(option.clone(), -(libc::EINVAL as i64)), vec![]);
        let set = Event::OptionSet {
            fd: 3,
            option: TcpOption::NoDelay(true),
        };
        assert_eq!(events(option, 0), vec![set]);
    }

    #[test]
    fn sendmmsg_is_one_send_per_message_sent() {
        // Real memory of this process, as the kernel leaves it after sendmmsg: msg_len of each
        // message sent; the third was not sent (the call returned 2).
        // SAFETY: mmsghdr is plain data.
        let mut messages: [libc::mmsghdr; 3] = unsafe { std::mem::zeroed() };
        messages[0].msg_len = 76;
        messages[1].msg_len = 10;
        messages[2].msg_len = 99;
        let call = Call::SendMessages {
            fd: 3,
            msgvec: messages.as_ptr() as u64,
            more: false,
        };
        let sent = |bytes| Event::Sent {
            fd: 3,
            bytes,
            more: false,
            held: None,
        };
        assert_eq!(events(call, 2), vec![sent(76), sent(10)]);
    }
}
