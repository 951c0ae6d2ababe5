//! The tracer's [`Inspector`]: looks at an fd of a traced process through a duplicate of it
//! (pidfd_getfd), and reads a TCP socket's addresses, options and send queue (TCP_INFO) there.

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef};

use super::socket_model::{Inspector, Probe, SendQueue, SocketFacts};
use crate::host::pidfd::PidFd;
use crate::host::sockopt;

/// One pidfd per traced process, opened when first needed.
#[derive(Default)]
pub(crate) struct PidfdInspector {
    pidfds: HashMap<u32, PidFd>,
}

impl Inspector for PidfdInspector {
    /// A TCP socket (IPv4/IPv6 stream, protocol TCP) or something else; for a socket, its
    /// addresses and options.
    fn inspect(&mut self, pid: u32, fd: i32) -> Probe {
        let pidfd = match self.pidfds.entry(pid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => match PidFd::open(pid) {
                Ok(pidfd) => e.insert(pidfd),
                Err(_) => return Probe::Unknown,
            },
        };
        let Ok(dup) = pidfd.get_fd(fd) else {
            return Probe::Unknown;
        };
        let sock = SockRef::from(&dup);
        let is_tcp = matches!(sock.domain(), Ok(d) if d == Domain::IPV4 || d == Domain::IPV6)
            && matches!(sock.protocol(), Ok(Some(p)) if p == Protocol::TCP);
        if !is_tcp {
            return Probe::Other;
        }
        let fd = dup.as_fd();
        Probe::Tcp(SocketFacts {
            inode: nix::sys::stat::fstat(fd).ok().map(|st| st.st_ino),
            local: sock.local_addr().ok().and_then(|a| a.as_socket()),
            remote: sock.peer_addr().ok().and_then(|a| a.as_socket()),
            nodelay: sockopt::nodelay(fd).unwrap_or(false),
            cork: sockopt::cork(fd).unwrap_or(false),
            mss: sockopt::maxseg(fd).ok().map(u64::from),
            queue: sockopt::tcp_info(fd).ok().map(|info| SendQueue {
                notsent: info.notsent_bytes,
                unacked: info.unacked,
                since_last_sent: Duration::from_millis(u64::from(info.last_data_sent)),
            }),
        })
    }
}
