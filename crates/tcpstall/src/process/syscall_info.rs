//! `PTRACE_GET_SYSCALL_INFO` (Linux 5.3+) for any libc: what a stopped tracee is doing at a
//! syscall stop (entry, exit, seccomp). The libc crate and nix declare it for glibc only, so the
//! request and the kernel's `struct ptrace_syscall_info` (include/uapi/linux/ptrace.h) are
//! declared here, and the static (musl) build traces as the glibc one does.

use nix::errno::Errno;
use nix::unistd::Pid;

/// `PTRACE_GET_SYSCALL_INFO`.
const PTRACE_GET_SYSCALL_INFO: libc::c_uint = 0x420e;
const OP_ENTRY: u8 = 1;
const OP_EXIT: u8 = 2;
const OP_SECCOMP: u8 = 3;

/// The kernel's `struct ptrace_syscall_info`, its union as the largest member (seccomp's).
#[repr(C)]
#[derive(Default)]
struct RawInfo {
    op: u8,
    pad: [u8; 3],
    arch: u32,
    instruction_pointer: u64,
    stack_pointer: u64,
    /// entry and seccomp: nr, args[6] (seccomp: then ret_data); exit: rval (s64), is_error.
    data: [u64; 7],
    ret_data: u32,
}

/// What a syscall stop is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyscallStop {
    /// A syscall begins (PTRACE_SYSCALL's entry stop): its number and arguments.
    Entry { nr: u64, args: [u64; 6] },
    /// A syscall returns: its return value, negative errno on failure.
    Exit { sval: i64 },
    /// A seccomp filter returned SECCOMP_RET_TRACE for this syscall.
    Seccomp { nr: u64, args: [u64; 6] },
    /// Any other stop.
    Other,
}

/// The syscall stop `tid` is in.
pub(crate) fn get(tid: Pid) -> nix::Result<SyscallStop> {
    let mut raw = RawInfo::default();
    // SAFETY: the kernel writes at most `size` bytes into `raw`, which is that large and
    // lives across the call.
    let rc = unsafe {
        libc::ptrace(
            PTRACE_GET_SYSCALL_INFO as _,
            tid.as_raw(),
            std::mem::size_of::<RawInfo>(),
            std::ptr::addr_of_mut!(raw),
        )
    };
    if rc < 0 {
        return Err(Errno::last());
    }
    let args = |d: &[u64; 7]| [d[1], d[2], d[3], d[4], d[5], d[6]];
    Ok(match raw.op {
        OP_ENTRY => SyscallStop::Entry {
            nr: raw.data[0],
            args: args(&raw.data),
        },
        OP_EXIT => SyscallStop::Exit {
            sval: raw.data[0] as i64,
        },
        OP_SECCOMP => SyscallStop::Seccomp {
            nr: raw.data[0],
            args: args(&raw.data),
        },
        _ => SyscallStop::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_kernels() {
        // 8 bytes of op, pad and arch, two pointers, seccomp's nr, 6 args and ret_data,
        // padded to 8: sizeof(struct ptrace_syscall_info) on 64-bit Linux.
        assert_eq!(std::mem::size_of::<RawInfo>(), 88);
        assert_eq!(std::mem::offset_of!(RawInfo, data), 24);
    }
}
