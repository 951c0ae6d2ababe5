//! `pidfd_open` + `pidfd_getfd` (Linux 5.6): a duplicate of another process's fd. For a socket the
//! duplicate is the same open file, so getsockopt/setsockopt on it act on the process's socket;
//! closing the duplicate only drops our reference (`fput`), never the target's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use super::access::AccessError;

/// An open pidfd of one process (thread-group leader).
#[derive(Debug)]
pub(crate) struct PidFd {
    fd: OwnedFd,
    pid: u32,
}

impl PidFd {
    /// Opens a pidfd for `pid`. Needs no permission; `get_fd` does.
    pub(crate) fn open(pid: u32) -> Result<PidFd, AccessError> {
        let raw_pid = libc::pid_t::try_from(pid).map_err(|_| AccessError::NoSuchProcess { pid })?;
        // SAFETY: plain syscall with integer arguments.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, raw_pid, 0 as libc::c_uint) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            // pidfd_open refuses a thread that is not its group's leader (EINVAL; ENOENT on
            // newer kernels, which look it up as a process).
            if matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
                if let Some(thread) = AccessError::thread_of(pid) {
                    return Err(thread);
                }
                if err.raw_os_error() == Some(libc::ENOENT) {
                    return Err(AccessError::NoSuchProcess { pid });
                }
            }
            return Err(AccessError::from_errno(err, pid, "open a pidfd"));
        }
        // SAFETY: the kernel returned a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) };
        Ok(PidFd { fd, pid })
    }

    /// The process this pidfd refers to.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The pidfd itself: readable once the process has ended (poll(2) on a pidfd).
    pub(crate) fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Duplicates fd `target_fd` of the process into this one (close-on-exec). Needs ptrace
    /// attach permission over the target (`pidfd_getfd` → `__ptrace_may_access`).
    pub(crate) fn get_fd(&self, target_fd: i32) -> Result<OwnedFd, AccessError> {
        // SAFETY: plain syscall with integer arguments; the pidfd is alive for the call.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_pidfd_getfd,
                self.fd.as_fd().as_raw_fd(),
                target_fd,
                0 as libc::c_uint,
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EBADF) {
                return Err(AccessError::FdClosed {
                    fd: target_fd,
                    pid: self.pid,
                });
            }
            return Err(AccessError::from_errno(
                err,
                self.pid,
                format!("duplicate fd {target_fd}"),
            ));
        }
        // SAFETY: the kernel returned a new fd that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
    }
}

/// Pidfds opened on demand and kept for the processes of a tree, one per process.
#[derive(Debug, Default)]
pub(crate) struct PidFds(std::collections::HashMap<u32, PidFd>);

impl PidFds {
    /// The pidfd of `pid`, opened the first time it is asked for.
    pub(crate) fn get(&mut self, pid: u32) -> Result<&PidFd, AccessError> {
        use std::collections::hash_map::Entry;
        match self.0.entry(pid) {
            Entry::Occupied(entry) => Ok(entry.into_mut()),
            Entry::Vacant(entry) => Ok(entry.insert(PidFd::open(pid)?)),
        }
    }
}

/// The inode of the socket behind `fd` (`st_ino` of a socket is its inode number, the one
/// `/proc/PID/fd` shows as `socket:[N]`): tells whether a duplicate is still the socket listed.
pub(crate) fn socket_inode(fd: &OwnedFd) -> io::Result<u64> {
    let stat = nix::sys::stat::fstat(fd).map_err(io::Error::from)?;
    Ok(stat.st_ino)
}
