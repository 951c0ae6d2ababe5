//! Why another process could not be reached: the error every verb that duplicates a
//! process's sockets or traces it reports, with the cause told from `/proc` and the
//! capabilities (`__ptrace_may_access`, Yama's `ptrace_scope`).

use super::{privilege, procfs};

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
    /// Refused for want of privilege, with the cause told from the credentials of both sides:
    /// a process that is not dumpable, or the capability tcpstall lacks.
    #[error("cannot {action} of pid {pid}: {cause}")]
    Denied {
        /// What was attempted.
        action: String,
        /// The target process.
        pid: u32,
        /// What is missing and what to do.
        cause: String,
    },
    /// The kernel refused although a capability is not what is missing: the target is a kernel
    /// thread, a zombie, tcpstall itself, or out of reach even with CAP_SYS_PTRACE.
    #[error("cannot {action} of pid {pid}: {cause}")]
    Refused {
        /// What was attempted.
        action: String,
        /// The target process.
        pid: u32,
        /// Why, as far as /proc tells.
        cause: String,
    },
    /// The id names a thread, not a process (thread-group leader).
    #[error("{pid} is a thread of process {tgid}: give the process id, {tgid}")]
    Thread {
        /// The thread id given.
        pid: u32,
        /// Its process.
        tgid: u32,
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
    #[error("cannot {action} of pid {pid}: {cause}")]
    Io {
        /// What was attempted.
        action: String,
        /// The target process.
        pid: u32,
        /// The kernel's error (in the message, not chained: it would be printed twice).
        cause: std::io::Error,
    },
}

impl AccessError {
    /// Maps an errno from a pidfd or ptrace call on `pid` to the error that names what is missing.
    pub(crate) fn from_errno(
        err: std::io::Error,
        pid: u32,
        action: impl Into<String>,
    ) -> AccessError {
        let action = action.into();
        match err.raw_os_error() {
            Some(libc::ESRCH) => AccessError::NoSuchProcess { pid },
            Some(libc::EPERM) | Some(libc::EACCES) => AccessError::refused(pid, action),
            Some(libc::ENOSYS) => AccessError::KernelTooOld {
                action,
                pid,
                release: crate::host::kernel::KernelFacts::read().release,
            },
            _ => AccessError::Io {
                action,
                pid,
                cause: err,
            },
        }
    }

    /// The kernel said EPERM/EACCES to `action` on `pid`: a missing capability, unless /proc
    /// shows a reason no capability would overcome.
    pub(crate) fn refused(pid: u32, action: impl Into<String>) -> AccessError {
        let action = action.into();
        if let Some(cause) = refusal_cause(pid) {
            return AccessError::Refused { action, pid, cause };
        }
        if let Some(cause) = privilege::ptrace_refusal(pid) {
            return AccessError::Denied { action, pid, cause };
        }
        match cap_sys_ptrace_refusal() {
            Some(cause) => AccessError::Refused { action, pid, cause },
            None => AccessError::PermissionDenied {
                action,
                pid,
                yama: yama_hint(),
            },
        }
    }

    /// `/proc/PID/fd` could not be listed: why, from the credentials of both sides (the
    /// directory needs CAP_DAC_READ_SEARCH of another user, besides the ptrace check).
    pub(crate) fn fd_list_refused(pid: u32) -> AccessError {
        let action = "list the fds";
        if refusal_cause(pid).is_none() {
            if let Some(cause) = privilege::fd_list_refusal(pid) {
                return AccessError::Denied {
                    action: action.into(),
                    pid,
                    cause,
                };
            }
        }
        AccessError::refused(pid, action)
    }

    /// `pid` names a thread that is not its process's leader (pidfd_open and ptrace want the
    /// process).
    pub(crate) fn thread_of(pid: u32) -> Option<AccessError> {
        procfs::status_field(pid, "Tgid")
            .filter(|&tgid| tgid != pid)
            .map(|tgid| AccessError::Thread { pid, tgid })
    }

    /// True when the error is a refused permission (the caller may still show what /proc allows).
    pub(crate) fn is_permission(&self) -> bool {
        matches!(
            self,
            AccessError::PermissionDenied { .. } | AccessError::Denied { .. }
        )
    }
}

/// Why ptrace access to `pid` is refused when no capability would help, from /proc: tcpstall
/// itself (`ptrace_attach` refuses the tracer's own thread group), a kernel thread (no `mm`,
/// `__ptrace_may_access` refuses), a zombie.
pub(crate) fn refusal_cause(pid: u32) -> Option<String> {
    if pid == std::process::id() {
        return Some("it is tcpstall itself".into());
    }
    if procfs::status_text(pid, "Kthread").as_deref() == Some("1") {
        return Some("it is a kernel thread: it has no user-space sockets or syscalls".into());
    }
    if is_zombie(pid) {
        return Some(ZOMBIE.into());
    }
    None
}

/// A refusal that CAP_SYS_PTRACE did not overcome.
fn cap_sys_ptrace_refusal() -> Option<String> {
    has_cap_sys_ptrace().then(|| {
        format!(
            "refused although tcpstall has CAP_SYS_PTRACE: the process is in another user \
             namespace (a container's), or a security module forbids it (AppArmor, SELinux){}",
            yama_hint()
        )
    })
}

const ZOMBIE: &str = "it has exited (a zombie waiting for its parent to reap it)";

/// `pid` has exited and waits to be reaped (state Z, or X while it goes).
fn is_zombie(pid: u32) -> bool {
    procfs::status_text(pid, "State").is_some_and(|s| s.starts_with('Z') || s.starts_with('X'))
}

/// The error for `action` on `pid` when it has exited and waits to be reaped: its fds and
/// sockets are gone.
pub(crate) fn zombie(pid: u32, action: &str) -> Option<AccessError> {
    is_zombie(pid).then(|| AccessError::Refused {
        action: action.into(),
        pid,
        cause: ZOMBIE.into(),
    })
}

/// CAP_SYS_PTRACE (bit 19) is in this process's effective set (`CapEff` of /proc/self/status).
pub(crate) fn has_cap_sys_ptrace() -> bool {
    privilege::has_cap_sys_ptrace()
}

/// Yama's `kernel.yama.ptrace_scope` (security/yama/yama_lsm.c) narrows ptrace beyond the classic
/// same-user rule: 1 allows only descendants, 2 only CAP_SYS_PTRACE, 3 nobody.
fn yama_hint() -> String {
    match crate::host::kernel::read_sysctl_u64("/proc/sys/kernel/yama/ptrace_scope") {
        Some(1) => {
            "; kernel.yama.ptrace_scope=1 also limits same-user access to descendants".into()
        }
        Some(2) => "; kernel.yama.ptrace_scope=2 requires CAP_SYS_PTRACE".into(),
        Some(3) => "; kernel.yama.ptrace_scope=3 forbids ptrace attach for everyone".into(),
        _ => String::new(),
    }
}
