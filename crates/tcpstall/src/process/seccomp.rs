//! The seccomp filter `trace -- CMD` installs in the child before exec: SECCOMP_RET_TRACE (a
//! ptrace stop) for the followed syscalls, SECCOMP_RET_ALLOW for the rest, so that the program
//! runs at full speed between socket calls. Classic BPF over `struct seccomp_data`
//! (`nr` at offset 0, `arch` at 4), as in Documentation/userspace-api/seccomp_filter.rst.

use std::io;

use super::syscalls::FOLLOWED;

/// `AUDIT_ARCH_*` of this build (include/uapi/linux/audit.h): syscall numbers mean something
/// only for this ABI.
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// x32 syscalls share the x86_64 arch value and set this bit in `nr`.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;

fn stmt(code: u32, k: u32) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> libc::sock_filter {
    libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

/// The filter program: foreign ABIs and x32 run untraced (their numbers differ), each followed
/// syscall jumps to the TRACE return.
pub(crate) fn filter() -> Vec<libc::sock_filter> {
    use libc::{BPF_ABS, BPF_JEQ, BPF_JGE, BPF_JMP, BPF_K, BPF_LD, BPF_RET, BPF_W};
    let count = FOLLOWED.len();
    let mut prog = vec![
        stmt(BPF_LD | BPF_W | BPF_ABS, OFFSET_ARCH),
        jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW),
        stmt(BPF_LD | BPF_W | BPF_ABS, OFFSET_NR),
        jump(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, count as u8, 0),
    ];
    // Instruction i of the list jumps over the (count - 1 - i) checks left and the ALLOW
    // return to reach TRACE.
    for (i, &(nr, _)) in FOLLOWED.iter().enumerate() {
        prog.push(jump(
            BPF_JMP | BPF_JEQ | BPF_K,
            nr as u32,
            (count - i) as u8,
            0,
        ));
    }
    prog.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_ALLOW));
    prog.push(stmt(BPF_RET | BPF_K, libc::SECCOMP_RET_TRACE));
    prog
}

/// Installs `prog` on the calling thread. Runs between fork and exec, so it only makes raw
/// syscalls and allocates nothing. Without CAP_SYS_ADMIN the kernel demands no_new_privs
/// first (`seccomp_prepare_filter`); it is set only then, so a privileged command keeps setuid.
///
/// # Safety
/// Only to be called in the child between fork and exec.
pub(crate) unsafe fn install(prog: &[libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut libc::sock_filter,
    };
    let set = || unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0 as libc::c_uint,
            &fprog as *const libc::sock_fprog,
        )
    };
    if set() == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EACCES) {
        return Err(err);
    }
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if set() == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_followed_syscall_jumps_to_trace() {
        let prog = filter();
        let trace_at = prog.len() - 1;
        assert_eq!(prog[trace_at].k, libc::SECCOMP_RET_TRACE);
        for (i, &(nr, _)) in FOLLOWED.iter().enumerate() {
            let at = 5 + i;
            assert_eq!(prog[at].k, nr as u32);
            assert_eq!(at + 1 + prog[at].jt as usize, trace_at, "syscall {nr}");
        }
        // The x32 check falls through to ALLOW.
        assert_eq!(4 + 1 + prog[4].jt as usize, trace_at - 1);
        assert!(prog.len() < 256, "jump offsets fit in u8");
    }
}
