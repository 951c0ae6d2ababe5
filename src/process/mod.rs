//! Seeing and changing what a running process does with its TCP sockets: `sockets` lists them with
//! their Nagle, cork and quick-ACK state, `fix` switches TCP_NODELAY on live, `trace` follows the
//! socket syscalls of a program and names write-write-read sequences.
//!
//! All three reach into another process the same two ways: `/proc` (which fds are sockets, the
//! kernel's TCP tables) and `pidfd_getfd` (a duplicate of the process's own socket, so that
//! getsockopt/setsockopt act on it).

pub mod fix;
pub mod pidfd;
pub mod procfs;
pub mod sockets;
pub mod trace;

mod pattern;
mod seccomp;
mod syscalls;
mod tracer;

/// Why another process's sockets could not be reached. Every message says what is missing.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The pid names no process (never existed, or exited before or while it was inspected).
    #[error("no process with pid {pid}: it does not exist or has exited")]
    NoSuchProcess {
        /// The pid asked for.
        pid: u32,
    },
    /// ptrace access was refused (`__ptrace_may_access`): another user without CAP_SYS_PTRACE,
    /// a non-dumpable process, or Yama's `ptrace_scope`.
    #[error(
        "cannot {action} of pid {pid}: needs CAP_SYS_PTRACE or the same user \
         (ptrace access mode PTRACE_MODE_ATTACH_REALCREDS){yama}"
    )]
    PermissionDenied {
        /// What was attempted, e.g. "duplicate fd 5".
        action: String,
        /// The target process.
        pid: u32,
        /// A hint about Yama's `ptrace_scope` when it is stricter than classic ptrace rules.
        yama: String,
    },
    /// `pidfd_open`/`pidfd_getfd` returned ENOSYS.
    #[error(
        "cannot {action} of pid {pid}: this kernel ({release}) lacks pidfd_open/pidfd_getfd, \
         which need Linux 5.6 or later"
    )]
    KernelTooOld {
        /// What was attempted.
        action: String,
        /// The target process.
        pid: u32,
        /// `uname -r`.
        release: String,
    },
    /// The fd was closed by the process between listing and duplicating it.
    #[error("fd {fd} of pid {pid} was closed meanwhile")]
    FdClosed {
        /// The fd number in the target.
        fd: i32,
        /// The target process.
        pid: u32,
    },
    /// Anything else the kernel said.
    #[error("cannot {action} of pid {pid}: {source}")]
    Io {
        /// What was attempted.
        action: String,
        /// The target process.
        pid: u32,
        /// The kernel's error.
        source: std::io::Error,
    },
}

impl AccessError {
    /// Maps an errno from a pidfd or ptrace call on `pid` to the error that names what is missing.
    pub fn from_errno(err: std::io::Error, pid: u32, action: impl Into<String>) -> AccessError {
        let action = action.into();
        match err.raw_os_error() {
            Some(libc::ESRCH) => AccessError::NoSuchProcess { pid },
            Some(libc::EPERM) | Some(libc::EACCES) => AccessError::PermissionDenied {
                action,
                pid,
                yama: yama_hint(),
            },
            Some(libc::ENOSYS) => AccessError::KernelTooOld {
                action,
                pid,
                release: crate::kernel::KernelFacts::read().release,
            },
            _ => AccessError::Io {
                action,
                pid,
                source: err,
            },
        }
    }

    /// True when the error is a refused permission (the caller may still show what /proc allows).
    pub fn is_permission(&self) -> bool {
        matches!(self, AccessError::PermissionDenied { .. })
    }
}

/// Yama's `kernel.yama.ptrace_scope` (security/yama/yama_lsm.c) narrows ptrace beyond the classic
/// same-user rule: 1 allows only descendants, 2 only CAP_SYS_PTRACE, 3 nobody.
fn yama_hint() -> String {
    match std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    {
        Some(1) => {
            "; kernel.yama.ptrace_scope=1 also limits same-user access to descendants".into()
        }
        Some(2) => "; kernel.yama.ptrace_scope=2 requires CAP_SYS_PTRACE".into(),
        Some(3) => "; kernel.yama.ptrace_scope=3 forbids ptrace attach for everyone".into(),
        _ => String::new(),
    }
}
