//! Network namespaces tcpstall enters, and the layout of the emulated path made of two of them
//! (`lab --rtt`): the client's and the server's address and the TUN device each namespace
//! holds. The lab's relay builds the path; the lab's peer (`lab --peer`) takes over one end of
//! it; `fix --route --netns` changes a route inside a namespace.
//!
//! Addresses are link-local (169.254.77.1 client, .2 server, RFC 3927) and exist only inside the
//! two namespaces, whose only route is the TUN device: nothing can reach the host's networks.

use std::fs::{File, OpenOptions};
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::process::Command;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use nix::sched::CloneFlags;
use socket2::{Domain, Socket, Type};

/// The client's address inside its namespace.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 1);

/// The server's address inside its namespace.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(169, 254, 77, 2);

/// Name of the TUN device in each namespace.
pub const TUN_NAME: &str = "tcpstall0";

/// A network namespace, entered by threads that create sockets or devices in it: one of the
/// emulated path's (`lab --rtt`), or any named by `fix --route --netns`.
#[derive(Debug, Clone)]
pub struct NetNs {
    name: String,
    fd: Arc<OwnedFd>,
}

impl NetNs {
    /// The network namespace of the file at `path` (`/run/netns/NAME`, `/proc/PID/ns/net`),
    /// called `name` in messages.
    pub fn open(name: &str, path: &str) -> io::Result<NetNs> {
        let fd = File::open(path)?;
        Ok(NetNs {
            name: name.to_string(),
            fd: Arc::new(OwnedFd::from(fd)),
        })
    }

    /// The namespace's inode: with the device, what tells two namespaces apart while they live.
    pub fn inode(&self) -> io::Result<u64> {
        Ok(nix::sys::stat::fstat(self.fd.as_fd())?.st_ino)
    }

    /// Its name under /run/netns.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `work` on a thread that entered this namespace: a socket or device created there
    /// belongs to the namespace for its whole life, whichever thread uses it later.
    pub fn run<T: Send>(&self, work: impl FnOnce() -> io::Result<T> + Send) -> io::Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    nix::sched::setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET).map_err(
                        |err| {
                            io::Error::other(format!(
                                "cannot enter network namespace {} (needs CAP_SYS_ADMIN): {err}",
                                self.name
                            ))
                        },
                    )?;
                    work()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("a namespace thread panicked")))
        })
    }

    /// A new socket in this namespace.
    pub fn socket(&self, domain: Domain, ty: Type) -> io::Result<Socket> {
        self.run(|| Socket::new(domain, ty, None))
    }
}

/// Runs `program` (`ip` or `tc`, from iproute2) with `args`, saying what failed.
pub(crate) fn run(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new(program).args(args).output().map_err(|err| {
        anyhow!("cannot run `{program}` (install iproute2: apt-get install iproute2): {err}")
    })?;
    if !out.status.success() {
        bail!(
            "`{program} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Opens a TUN device (raw IP packets, no packet-information header) in the calling thread's
/// namespace (`tun_set_iff` in drivers/net/tun.c).
pub(crate) fn open_tun(name: &str) -> io::Result<OwnedFd> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
        .map_err(|err| io::Error::other(format!("cannot open /dev/net/tun: {err}")))?;
    // SAFETY: ifreq is plain data; all zeroes is a valid value before the fields are set.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in request.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = byte as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
    // SAFETY: TUNSETIFF reads and writes one ifreq, which lives for the whole call.
    let result = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut request) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(OwnedFd::from(file))
}
