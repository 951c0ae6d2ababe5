//! Why the kernel refuses to show or lend another process's fds, told from the credentials on
//! both sides instead of guessed. Two checks stand between tcpstall and a socket:
//!
//! - listing `/proc/PID/fd`: the directory is mode 0500, owned by the process's euid while it
//!   is dumpable and by root when it is not (`task_dump_owner`, fs/proc/base.c), so another
//!   user needs CAP_DAC_READ_SEARCH (or CAP_DAC_OVERRIDE) to read it, on top of the ptrace read
//!   check (`proc_fd_access_allowed` → `ptrace_may_access(PTRACE_MODE_READ_FSCREDS)`);
//! - `pidfd_getfd` and ptrace attach: `__ptrace_may_access` with PTRACE_MODE_ATTACH_REALCREDS,
//!   passed by the same user only while the process is dumpable, else by CAP_SYS_PTRACE.
//!
//! A process that changed credentials (started as root, dropped to `-u nobody`) is not dumpable
//! (`commit_creds` clears it): the same user is then refused both, and only root or
//! CAP_SYS_PTRACE with CAP_DAC_READ_SEARCH get in.

use std::fs;
use std::os::unix::fs::MetadataExt;

use super::procfs;

/// CAP_DAC_OVERRIDE (include/uapi/linux/capability.h).
const CAP_DAC_OVERRIDE: u32 = 1;
/// CAP_DAC_READ_SEARCH.
const CAP_DAC_READ_SEARCH: u32 = 2;
/// CAP_SYS_PTRACE.
const CAP_SYS_PTRACE: u32 = 19;

/// The credentials `/proc/PID/status` shows: uids (real, effective, saved, filesystem) and the
/// effective capabilities.
#[derive(Debug, Clone, Copy)]
struct Credentials {
    uids: [u32; 4],
    cap_eff: u64,
}

impl Credentials {
    fn of(pid: u32) -> Option<Credentials> {
        let uid_line = procfs::status_text(pid, "Uid")?;
        let mut uids = [0u32; 4];
        let mut fields = uid_line.split_whitespace();
        for slot in &mut uids {
            *slot = fields.next()?.parse().ok()?;
        }
        let cap_eff = u64::from_str_radix(&procfs::status_text(pid, "CapEff")?, 16).ok()?;
        Some(Credentials { uids, cap_eff })
    }

    fn mine() -> Option<Credentials> {
        Credentials::of(std::process::id())
    }

    fn has(&self, cap: u32) -> bool {
        self.cap_eff & (1 << cap) != 0
    }

    fn real(&self) -> u32 {
        self.uids[0]
    }

    fn effective(&self) -> u32 {
        self.uids[1]
    }

    fn filesystem(&self) -> u32 {
        self.uids[3]
    }
}

/// Capability `cap` (its bit number, include/uapi/linux/capability.h: CAP_NET_ADMIN is 12,
/// CAP_SYS_ADMIN 21) is in tcpstall's effective set; `None` when /proc does not say.
pub(crate) fn has_effective_cap(cap: u32) -> Option<bool> {
    Credentials::mine().map(|me| me.has(cap))
}

/// CAP_SYS_PTRACE is in tcpstall's effective set.
pub(crate) fn has_cap_sys_ptrace() -> bool {
    Credentials::mine().is_some_and(|me| me.has(CAP_SYS_PTRACE))
}

/// The target runs as `uid` in all of real, effective and saved uid: the "same user" of
/// `__ptrace_may_access`.
fn runs_only_as(target: &Credentials, uid: u32) -> bool {
    target.uids[..3].iter().all(|&u| u == uid)
}

/// The process is not dumpable: `/proc/PID/status` belongs to root although the process's
/// euid is another user (`task_dump_owner` hands a non-dumpable process's /proc files to root;
/// the /proc/PID directory itself keeps the euid).
fn not_dumpable(pid: u32, target: &Credentials) -> bool {
    target.effective() != 0
        && fs::metadata(format!("/proc/{pid}/status")).is_ok_and(|meta| meta.uid() == 0)
}

/// What lets tcpstall in to a process that is not dumpable: ptrace access alone (`trace`,
/// `pidfd_getfd`) needs CAP_SYS_PTRACE; listing its fds needs CAP_DAC_READ_SEARCH as well.
const NOT_DUMPABLE_PTRACE_FIX: &str = "run tcpstall as root, or give it CAP_SYS_PTRACE";
const NOT_DUMPABLE_FD_FIX: &str = "run tcpstall as root, or give it CAP_SYS_PTRACE and \
                                   CAP_DAC_READ_SEARCH (e.g. setpriv --ambient-caps \
                                   +sys_ptrace,+dac_read_search)";

fn not_dumpable_cause(pid: u32, uid: u32, fix: &str) -> String {
    format!(
        "pid {pid} runs as uid {uid} like tcpstall, but it is not dumpable (it changed its \
         credentials, e.g. started as root and dropped to uid {uid}, or cleared \
         PR_SET_DUMPABLE): the kernel then gives /proc/{pid}/fd to root (mode 0500) and \
         refuses ptrace access to the same user; {fix}"
    )
}

/// Why ptrace access to `pid` (attach, `pidfd_getfd`) is refused, when the credentials tell:
/// the same user meeting a non-dumpable process. `None` when it is the ordinary case (another
/// user and no CAP_SYS_PTRACE) or cannot be told.
pub(crate) fn ptrace_refusal(pid: u32) -> Option<String> {
    let me = Credentials::mine()?;
    let target = Credentials::of(pid)?;
    (runs_only_as(&target, me.real()) && not_dumpable(pid, &target))
        .then(|| not_dumpable_cause(pid, me.real(), NOT_DUMPABLE_PTRACE_FIX))
}

/// Why `/proc/PID/fd` cannot be listed, naming what is missing: the process is not dumpable,
/// or the capability tcpstall lacks (CAP_SYS_PTRACE for the ptrace check, CAP_DAC_READ_SEARCH
/// for the directory's mode). `None` when tcpstall has both and is still refused (another user
/// namespace, a security module) or the credentials cannot be read.
pub(crate) fn fd_list_refusal(pid: u32) -> Option<String> {
    let me = Credentials::mine()?;
    let target = Credentials::of(pid)?;
    let uid = me.filesystem();
    if runs_only_as(&target, uid) {
        // The same user is refused only when the process is not dumpable (or by a security
        // module, which the credentials do not show).
        return not_dumpable(pid, &target)
            .then(|| not_dumpable_cause(pid, uid, NOT_DUMPABLE_FD_FIX));
    }
    let (owner, mode) = fs::metadata(format!("/proc/{pid}/fd"))
        .map(|meta| (meta.uid(), meta.mode() & 0o7777))
        .unwrap_or((target.effective(), 0o500));
    let dac_allowed = owner == uid || me.has(CAP_DAC_READ_SEARCH) || me.has(CAP_DAC_OVERRIDE);
    let owner_text = format!("/proc/{pid}/fd belongs to uid {owner} (mode {mode:04o})");
    let users = format!(
        "pid {pid} runs as uid {} and tcpstall as uid {uid}",
        target.effective()
    );
    match (me.has(CAP_SYS_PTRACE), dac_allowed) {
        (true, true) => None,
        (true, false) => Some(format!(
            "{owner_text}: tcpstall (uid {uid}) has CAP_SYS_PTRACE but not \
             CAP_DAC_READ_SEARCH, which reading another user's /proc/PID/fd needs too; add \
             CAP_DAC_READ_SEARCH (e.g. setpriv --ambient-caps +sys_ptrace,+dac_read_search), \
             or run tcpstall as uid {owner}"
        )),
        (false, true) => Some(format!(
            "{users}: tcpstall may read the directory (CAP_DAC_READ_SEARCH) but needs \
             CAP_SYS_PTRACE too, or the same user"
        )),
        (false, false) => Some(format!(
            "{users}: needs the same user, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH \
             ({owner_text})"
        )),
    }
}

/// What another user's processes need, for the summary of `sockets --all`: the capabilities
/// tcpstall lacks, or `None` when it has them all.
pub(crate) fn missing_for_other_users() -> Option<&'static str> {
    let me = Credentials::mine()?;
    let dac = me.has(CAP_DAC_READ_SEARCH) || me.has(CAP_DAC_OVERRIDE);
    match (me.has(CAP_SYS_PTRACE), dac) {
        (true, true) => None,
        (true, false) => Some("needs CAP_DAC_READ_SEARCH besides CAP_SYS_PTRACE, or the same user"),
        (false, true) => Some("needs CAP_SYS_PTRACE, or the same user"),
        (false, false) => Some("needs the same user, or CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_credentials() {
        let me = Credentials::mine().expect("own status is readable");
        // SAFETY: getuid/geteuid have no preconditions.
        let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
        assert_eq!(me.real(), uid);
        assert_eq!(me.effective(), euid);
        assert!(runs_only_as(&me, uid) || uid != euid);
        assert!(!not_dumpable(std::process::id(), &me));
        assert!(fd_list_refusal(std::process::id()).is_none());
    }
}
