//! Reading the traced thread's memory (process_vm_readv) for what a syscall's arguments point
//! at: the messages of a sendmmsg, a setsockopt value, the fds a poll or select waits on.

use nix::unistd::Pid;

use super::syscalls::WaitKind;

/// Reads `len` bytes at `addr` of the tracee's memory.
fn read_memory(tid: Pid, addr: u64, len: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; len];
    let remote = [nix::sys::uio::RemoteIoVec {
        base: addr as usize,
        len,
    }];
    let mut local = [std::io::IoSliceMut::new(&mut buf)];
    let read = nix::sys::uio::process_vm_readv(tid, &mut local, &remote).ok()?;
    (read == len).then_some(buf)
}

/// Most messages of one sendmmsg call looked at (the kernel's own limit, `UIO_MAXIOV`).
const MAX_SENDMMSG: usize = 1024;

/// Bytes sent by each of the first `count` messages of a sendmmsg call: the `msg_len` the kernel
/// wrote into each `struct mmsghdr` of `msgvec` in the tracee.
pub(crate) fn sent_message_lengths(tid: Pid, msgvec: u64, count: usize) -> Vec<u64> {
    let count = count.min(MAX_SENDMMSG);
    let entry = std::mem::size_of::<libc::mmsghdr>();
    let len_at = std::mem::size_of::<libc::msghdr>();
    let Some(bytes) = read_memory(tid, msgvec, entry * count) else {
        return Vec::new();
    };
    bytes
        .chunks_exact(entry)
        .filter_map(|m| m.get(len_at..len_at + 4))
        .map(|b| u64::from(u32::from_ne_bytes([b[0], b[1], b[2], b[3]])))
        .filter(|&len| len > 0)
        .collect()
}

/// Reads an int from the tracee's memory (the value a setsockopt call passes).
pub(crate) fn read_int(tid: Pid, addr: u64) -> Option<i32> {
    let bytes = read_memory(tid, addr, 4)?;
    Some(i32::from_ne_bytes(bytes.try_into().ok()?))
}

/// Most fds a wait is read for; a larger set counts as waiting on every socket.
const MAX_WAIT_FDS: u64 = 1024;

/// The fds a poll or select call waits to become readable (POLLIN/POLLPRI/POLLRDHUP, or the
/// read set). `None` when the call does not name them (epoll) or they cannot be read.
pub(crate) fn readable_fds(tid: Pid, how: WaitKind, args: &[u64; 6]) -> Option<Vec<i32>> {
    match how {
        WaitKind::Epoll => None,
        WaitKind::Poll => {
            let count = args[1];
            if count > MAX_WAIT_FDS {
                return None;
            }
            let bytes = read_memory(tid, args[0], count as usize * 8)?;
            Some(poll_readable(&bytes))
        }
        WaitKind::Select => {
            let (nfds, read_set) = (args[0], args[1]);
            if read_set == 0 {
                return Some(Vec::new());
            }
            if nfds > MAX_WAIT_FDS {
                return None;
            }
            let words = nfds.div_ceil(64) as usize;
            let bytes = read_memory(tid, read_set, words * 8)?;
            Some(select_readable(&bytes, nfds))
        }
    }
}

/// The fds of an array of `struct pollfd { int fd; short events; short revents; }` waited on
/// for reading (POLLIN/POLLPRI/POLLRDHUP).
pub(crate) fn poll_readable(pollfds: &[u8]) -> Vec<i32> {
    let wanted: libc::c_short = libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP;
    pollfds
        .chunks_exact(8)
        .filter(|p| i16::from_ne_bytes([p[4], p[5]]) & wanted != 0)
        .map(|p| i32::from_ne_bytes([p[0], p[1], p[2], p[3]]))
        .collect()
}

/// The fds below `nfds` set in a select read set: a bitmap of longs, fd n at bit n % 64 of
/// long n / 64 (little or big endian alike when read as native u64 words).
pub(crate) fn select_readable(read_set: &[u8], nfds: u64) -> Vec<i32> {
    let mut fds = Vec::new();
    for (w, chunk) in read_set.chunks_exact(8).enumerate() {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(chunk);
        let word = u64::from_ne_bytes(bytes);
        for bit in 0..64 {
            let fd = (w * 64 + bit) as u64;
            if fd < nfds && word & (1 << bit) != 0 {
                fds.push(fd as i32);
            }
        }
    }
    fds
}

#[cfg(test)]
mod tests {
    use super::*;

    // process_vm_readv works on the calling process too: these read real memory of this test.

    #[test]
    fn poll_wait_names_only_fds_waited_on_for_reading() {
        let fds = [
            libc::pollfd {
                fd: 7,
                events: libc::POLLOUT,
                revents: 0,
            },
            libc::pollfd {
                fd: 9,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let args = [fds.as_ptr() as u64, fds.len() as u64, 0, 0, 0, 0];
        assert_eq!(
            readable_fds(Pid::this(), WaitKind::Poll, &args),
            Some(vec![9])
        );
    }

    #[test]
    fn select_wait_reads_the_read_set_bitmap() {
        // SAFETY: fd_set is plain data; FD_ZERO/FD_SET write inside it.
        let mut set: libc::fd_set = unsafe { std::mem::zeroed() };
        unsafe {
            libc::FD_ZERO(&mut set);
            libc::FD_SET(3, &mut set);
            libc::FD_SET(70, &mut set);
        }
        let args = [71, &set as *const libc::fd_set as u64, 0, 0, 0, 0];
        assert_eq!(
            readable_fds(Pid::this(), WaitKind::Select, &args),
            Some(vec![3, 70])
        );
        let write_only = [71, 0, &set as *const libc::fd_set as u64, 0, 0, 0];
        assert_eq!(
            readable_fds(Pid::this(), WaitKind::Select, &write_only),
            Some(vec![])
        );
        assert_eq!(readable_fds(Pid::this(), WaitKind::Epoll, &args), None);
    }

    #[test]
    fn setsockopt_value_is_read_from_memory() {
        let value: i32 = 1;
        assert_eq!(read_int(Pid::this(), &value as *const i32 as u64), Some(1));
    }
}
