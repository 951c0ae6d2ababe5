//! The ptrace loop behind `trace`: starts or attaches to the target, follows its threads and
//! forks, turns each followed syscall into socket events and feeds the write-write-read rule.
//!
//! Two ways in:
//! - `trace -- CMD`: the child is seized (PTRACE_SEIZE) while it waits stopped, then installs a
//!   seccomp filter before exec, so it stops only at socket-related syscalls
//!   (PTRACE_EVENT_SECCOMP); the exit of a syscall whose result matters is caught by resuming
//!   with PTRACE_SYSCALL from that stop (since Linux 4.8 the seccomp stop comes after
//!   syscall-entry, so the next stop is the exit).
//! - `trace -p PID`: every thread is seized (PTRACE_SEIZE) and stepped from syscall to syscall
//!   (PTRACE_SYSCALL): a filter cannot be installed in a running process from outside. On the
//!   way out every thread is interrupted and detached, and the target runs on (a syscall
//!   blocked at that moment may return EINTR, as with strace).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use socket2::{Domain, Protocol, SockRef};

use super::pattern::{Burst, Example};
use super::pidfd::PidFd;
use super::procfs;
use super::seccomp;
use super::syscalls::{kind_of, SyscallKind, WaitKind};
use super::AccessError;
use crate::sockopt;
use crate::tcp_rules;

/// A wait this long after a write-write-read is the delayed ACK at work
/// ([`tcp_rules::STALL_THRESHOLD`]).
pub const LONG_WAIT: Duration = tcp_rules::STALL_THRESHOLD;

/// MSS assumed when the socket's cannot be read (Ethernet with timestamps).
const FALLBACK_MSS: u64 = tcp_rules::payload_mss(tcp_rules::DEFAULT_MSS_V4, true) as u64;

/// Set by SIGINT/SIGTERM: stop tracing (detach or end the command).
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

extern "C" fn on_tick(_: libc::c_int) {}

/// SIGINT/SIGTERM handlers and a 100 ms SIGALRM tick, none with SA_RESTART, so that a blocked
/// `waitpid` returns EINTR and the loop can look at the clock and the stop flag. Dropping it
/// restores the previous handlers and stops the tick.
struct SignalGuard {
    previous: Vec<(Signal, SigAction)>,
}

impl SignalGuard {
    fn install() -> anyhow::Result<SignalGuard> {
        STOP_REQUESTED.store(false, Ordering::SeqCst);
        let mut previous = Vec::new();
        let handlers: [(Signal, extern "C" fn(libc::c_int)); 3] = [
            (Signal::SIGINT, on_stop_signal),
            (Signal::SIGTERM, on_stop_signal),
            (Signal::SIGALRM, on_tick),
        ];
        for (sig, handler) in handlers {
            let action = SigAction::new(
                SigHandler::Handler(handler),
                SaFlags::empty(),
                SigSet::empty(),
            );
            // SAFETY: the handlers only store to an atomic (async-signal-safe).
            let old = unsafe { signal::sigaction(sig, &action) }
                .context("cannot install a signal handler")?;
            previous.push((sig, old));
        }
        set_tick(Duration::from_millis(100));
        Ok(SignalGuard { previous })
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        set_tick(Duration::ZERO);
        for (sig, old) in &self.previous {
            // SAFETY: restores the handler that was there before.
            let _ = unsafe { signal::sigaction(*sig, old) };
        }
    }
}

fn set_tick(every: Duration) {
    let tv = libc::timeval {
        tv_sec: every.as_secs() as libc::time_t,
        tv_usec: every.subsec_micros() as libc::suseconds_t,
    };
    let timer = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    // SAFETY: plain syscall on a local struct.
    unsafe { libc::setitimer(libc::ITIMER_REAL, &timer, std::ptr::null_mut()) };
}

/// What the tracer knows about one TCP socket it saw used; serialised as is in `trace --json`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TracedSocket {
    /// Process (thread-group id) that used it first.
    pub pid: u32,
    /// Its fd there.
    pub fd: i32,
    /// Local address, once known.
    pub local: Option<SocketAddr>,
    /// Remote address, once known.
    pub remote: Option<SocketAddr>,
    /// TCP_NODELAY as last seen (read from the socket or from a setsockopt call).
    pub nodelay: bool,
    /// TCP_NODELAY was switched on at some point (setsockopt seen or read on the socket).
    pub nodelay_ever_set: bool,
    /// TCP_CORK as last seen.
    pub cork: bool,
    /// setsockopt(TCP_QUICKACK, 1) calls: the program re-arms immediate ACKs on this socket.
    pub quickack_sets: u64,
    /// MSS for sending (TCP_MAXSEG).
    pub mss: u64,
    /// Send syscalls that moved data.
    pub sends: u64,
    /// Read calls on the socket.
    pub reads: u64,
    /// Write-write-read sequences found.
    pub write_write_read: u64,
    /// Of those, how many were followed by a wait of at least 30 ms.
    pub waits_over_30ms: u64,
    /// The write-write-read with the longest wait.
    pub example: Option<Example>,
    /// Options and addresses have been read from the socket itself.
    #[serde(skip)]
    resolved: bool,
    /// The last send had MSG_MORE: the next one joins it in one segment.
    #[serde(skip)]
    more_pending: bool,
    /// Sends since the last read: the burst, its thread, and when its last send ended.
    #[serde(skip)]
    burst: Option<(Burst, Pid, Instant)>,
    /// Thread of the last send: a read by another thread may be blocked while it sends.
    #[serde(skip)]
    last_sender: Option<Pid>,
}

impl TracedSocket {
    fn new(pid: u32, fd: i32) -> TracedSocket {
        TracedSocket {
            pid,
            fd,
            local: None,
            remote: None,
            nodelay: false,
            nodelay_ever_set: false,
            cork: false,
            quickack_sets: 0,
            mss: FALLBACK_MSS,
            sends: 0,
            reads: 0,
            write_write_read: 0,
            waits_over_30ms: 0,
            example: None,
            resolved: false,
            more_pending: false,
            burst: None,
            last_sender: None,
        }
    }

    /// Fills options and addresses from a duplicate of the socket.
    fn learn(&mut self, facts: SocketFacts) {
        self.local = facts.local.or(self.local);
        self.remote = facts.remote.or(self.remote);
        self.nodelay = facts.nodelay;
        self.nodelay_ever_set |= facts.nodelay;
        self.cork = facts.cork;
        if let Some(mss) = facts.mss.filter(|&m| m > 0) {
            self.mss = mss;
        }
        self.resolved = self.remote.is_some();
    }
}

/// What a duplicate of a TCP socket tells.
struct SocketFacts {
    /// Inode of the socket: the same socket behind other fds, in other processes, or after
    /// an exec, has the same one.
    inode: Option<u64>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    nodelay: bool,
    cork: bool,
    mss: Option<u64>,
}

/// What an fd of a process is, once looked at.
#[derive(Debug, Clone, Copy)]
enum Slot {
    /// A TCP socket: index into the tracer's sockets.
    Tcp(usize),
    /// Anything else (file, pipe, UDP, unix socket...).
    Other,
}

/// One traced process (thread group).
#[derive(Default)]
struct Process {
    pidfd: Option<PidFd>,
    fds: HashMap<i32, Slot>,
}

/// A syscall seen at entry whose exit is awaited.
#[derive(Debug, Clone)]
struct Pending {
    kind: SyscallKind,
    args: [u64; 6],
    /// The TCP socket of fd arg 0, when it is one.
    socket: Option<usize>,
    /// The int a setsockopt call passes.
    option_value: Option<i32>,
    /// For a wait: the fds it waits to become readable; `None` when the call does not say
    /// (epoll), taken as every socket of the thread.
    readable: Option<Vec<i32>>,
}

/// One traced thread.
struct Thread {
    tgid: u32,
    /// It has reported its first stop (the SIGSTOP or PTRACE_EVENT_STOP of a new tracee).
    started: bool,
    pending: Option<Pending>,
    /// Sockets with a burst of sends by this thread, closed by this thread's next wait.
    open_bursts: Vec<usize>,
}

/// How the tracee is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A command started by the tracer, stopped only at filtered syscalls.
    Seccomp,
    /// A running process, stepped from syscall to syscall.
    Attached,
}

/// The result of a trace.
pub struct Traced {
    /// How the target was followed.
    pub mode: Mode,
    /// Every TCP socket seen.
    pub sockets: Vec<TracedSocket>,
    /// Followed syscalls seen.
    pub syscalls: u64,
    /// Exit status of the command (`trace -- CMD`): code, or 128 + signal.
    pub exit_status: Option<i32>,
    /// How long the trace ran.
    pub elapsed: Duration,
    /// Stopped by Ctrl-C/SIGTERM or the end of `--duration` rather than by the target ending.
    pub interrupted: bool,
}

/// The tracer's state.
struct Tracer {
    mode: Mode,
    root: Pid,
    threads: HashMap<Pid, Thread>,
    processes: HashMap<u32, Process>,
    sockets: Vec<TracedSocket>,
    /// Socket inode → index into `sockets`, for sockets whose fd has been looked at.
    by_inode: HashMap<u64, usize>,
    syscalls: u64,
    exit_status: Option<i32>,
}

fn nix_io(err: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(err as i32)
}

/// Finds `program` the way execvp will, so that a missing one is reported before the child
/// starts (once the filter is in, the child could not report a failed exec).
fn find_program(program: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        p.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return runnable(&path).then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| runnable(p))
}

/// Where the child failed before its program ran, as it reports through the pipe.
const STAGE_SECCOMP: u32 = 2;
const STAGE_EXEC: u32 = 3;

/// Runs `command` under the tracer until it ends, or until `limit` or Ctrl-C (then it is killed).
///
/// The child is forked by hand rather than with `std::process::Command`: `Command::spawn`
/// waits for the exec inside the call, while the child must be seized by the tracer first; and
/// once the filter is in, a failed exec could only report through a filtered `write` that
/// nobody would answer. So the child stops itself, the tracer seizes it with its options, and
/// then the child installs the filter and execs; a failure at any step comes back through a
/// close-on-exec pipe.
pub fn trace_command(command: &[String], limit: Option<Duration>) -> anyhow::Result<Traced> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let Some(program) = command.first() else {
        bail!("no command given: use `tcpstall trace -- CMD ARGS` or `tcpstall trace -p PID`");
    };
    let path = find_program(program).with_context(|| {
        format!("cannot run {program:?}: not found or not executable (PATH searched)")
    })?;
    // Everything the child touches is made before fork: it may not allocate after it.
    let c_path = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("cannot run {program:?}: the path holds a NUL byte"))?;
    let c_args = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot run {program:?}: an argument holds a NUL byte"))?;
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let filter = seccomp::filter();
    let (report_read, report_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(nix_io)
        .context("cannot create a pipe for the traced command")?;

    let guard = SignalGuard::install()?;
    // SAFETY: this process has one thread here (the tracer runs on the main thread), and the
    // child makes only raw syscalls on data prepared above before it execs or exits.
    let root = match unsafe { nix::unistd::fork() } {
        Err(err) => return Err(nix_io(err)).context("cannot fork the traced command"),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: async-signal-safe calls only; the child exits if anything fails.
            unsafe {
                exec_traced_child(
                    &c_path,
                    &argv,
                    &filter,
                    &guard.previous,
                    report_write.as_raw_fd(),
                )
            }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
    };
    drop(report_write);
    if let Err(err) = take_over(root, program, &report_read) {
        // Without the options the child would run on with socket calls failing (ENOSYS from
        // the filter with no tracer listening): end it.
        let _ = signal::kill(root, Signal::SIGKILL);
        let _ = waitpid(root, Some(WaitPidFlag::__WALL));
        return Err(err);
    }
    let mut tracer = Tracer::new(Mode::Seccomp, root);
    tracer.adopt(root, true);
    ptrace::cont(root, None)
        .map_err(nix_io)
        .context("PTRACE_CONT")?;
    let traced = tracer.run(limit);
    drop(guard);
    traced
}

/// The child's side of [`trace_command`]: stop until the tracer has seized it, install the
/// filter, exec. Never returns.
///
/// # Safety
/// Only in the child between fork and exec: makes raw syscalls only, allocates nothing.
unsafe fn exec_traced_child(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    filter: &[libc::sock_filter],
    dispositions: &[(Signal, SigAction)],
    report: std::os::fd::RawFd,
) -> ! {
    let fail = |stage: u32| -> ! {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u32;
        let mut message = [0u8; 8];
        message[..4].copy_from_slice(&stage.to_ne_bytes());
        message[4..].copy_from_slice(&errno.to_ne_bytes());
        // SAFETY: plain write and _exit.
        unsafe {
            libc::write(report, message.as_ptr().cast(), message.len());
            libc::_exit(127)
        }
    };
    // SAFETY: raw syscalls on valid arguments.
    unsafe {
        // The command gets the signal state tcpstall was started with, as from a shell: the
        // dispositions the tracer replaced, SIGPIPE back to default (the Rust runtime ignores
        // it, and an ignored signal stays ignored across exec), no signal blocked.
        for (sig, old) in dispositions {
            let _ = signal::sigaction(*sig, old);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Stopped until the tracer has seized us with its options.
        libc::raise(libc::SIGSTOP);
        if seccomp::install(filter).is_err() {
            fail(STAGE_SECCOMP);
        }
        libc::execv(path.as_ptr(), argv.as_ptr());
    }
    fail(STAGE_EXEC)
}

/// Reads what the child reported before it exited without running its program.
fn child_failure(report: &std::os::fd::OwnedFd, program: &str) -> anyhow::Error {
    let mut message = [0u8; 8];
    let read = nix::unistd::read(report, &mut message).unwrap_or(0);
    if read != message.len() {
        return anyhow::anyhow!("{program:?} exited before it started");
    }
    let word =
        |i: usize| u32::from_ne_bytes([message[i], message[i + 1], message[i + 2], message[i + 3]]);
    let (stage, errno) = (word(0), word(4) as i32);
    let cause = std::io::Error::from_raw_os_error(errno);
    match stage {
        STAGE_SECCOMP => anyhow::anyhow!(
            "cannot trace {program:?}: the seccomp filter was refused: {cause} (a kernel without \
             CONFIG_SECCOMP_FILTER, or a container that forbids seccomp)"
        ),
        _ if errno == libc::ENOENT => anyhow::anyhow!(
            "cannot run {program:?}: {cause}; the file exists, so the interpreter on its `#!` line \
             or its dynamic loader is missing"
        ),
        _ => anyhow::anyhow!("cannot run {program:?}: {cause}"),
    }
}

/// Sets up the child of [`trace_command`]: once it has stopped itself, seizes it with the
/// options that make the seccomp filter report to us and follow threads and forks, and lets it
/// go on to exec. PTRACE_SEIZE rather than PTRACE_TRACEME: a seized tracee reports job-control
/// stops as such (PTRACE_EVENT_STOP), so a SIGSTOP sent to the command stops it, as it would
/// untraced. Returns once the exec succeeded (the child is then stopped at PTRACE_EVENT_EXEC),
/// or with the reason it failed.
fn take_over(root: Pid, program: &str, report: &std::os::fd::OwnedFd) -> anyhow::Result<()> {
    let mut seized = false;
    loop {
        match waitpid(root, Some(WaitPidFlag::__WALL | WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Stopped(_, Signal::SIGSTOP)) if !seized => {
                let options = Options::PTRACE_O_TRACESECCOMP
                    | Options::PTRACE_O_TRACESYSGOOD
                    | Options::PTRACE_O_TRACECLONE
                    | Options::PTRACE_O_TRACEFORK
                    | Options::PTRACE_O_TRACEVFORK
                    | Options::PTRACE_O_TRACEEXEC
                    | Options::PTRACE_O_EXITKILL;
                ptrace::seize(root, options)
                    .map_err(nix_io)
                    .context("PTRACE_SEIZE of the command")?;
                seized = true;
                // The seized child reports its stop again (PTRACE_EVENT_STOP); SIGCONT ends it.
                signal::kill(root, Signal::SIGCONT)
                    .map_err(nix_io)
                    .context("cannot resume the command")?;
            }
            Ok(WaitStatus::PtraceEvent(_, _, libc::PTRACE_EVENT_EXEC)) => return Ok(()),
            // The stop reported after the seize, and the filter's stop at the child's report of
            // a failed exec (a write): let it run on.
            Ok(WaitStatus::PtraceEvent(..)) => {
                ptrace::cont(root, None)
                    .map_err(nix_io)
                    .context("PTRACE_CONT")?;
            }
            // A signal on its way to the child (our SIGCONT): deliver it.
            Ok(WaitStatus::Stopped(_, sig)) if seized => {
                ptrace::cont(root, Some(sig))
                    .map_err(nix_io)
                    .context("PTRACE_CONT")?;
            }
            Ok(WaitStatus::Exited(..)) => return Err(child_failure(report, program)),
            Ok(WaitStatus::Signaled(_, sig, _)) => {
                bail!("{program:?} was killed by {sig} before it started")
            }
            Ok(_) | Err(Errno::EINTR) => {
                if STOP_REQUESTED.load(Ordering::SeqCst) {
                    bail!("interrupted before {program:?} started");
                }
            }
            Err(err) => return Err(nix_io(err)).context("waitpid on the traced command"),
        }
    }
}

/// Follows the running process `pid` for at most `limit`, then detaches from every thread.
pub fn trace_process(pid: u32, limit: Duration) -> anyhow::Result<Traced> {
    if !procfs::process_exists(pid) {
        return Err(AccessError::NoSuchProcess { pid }.into());
    }
    if let Some(thread) = AccessError::thread_of(pid) {
        return Err(thread.into());
    }
    // A thread has at most one tracer (PTRACE_SEIZE fails with EPERM, which would otherwise
    // read as a missing capability).
    if let Some(tracer) = procfs::status_field(pid, "TracerPid").filter(|&t| t != 0) {
        let name = procfs::comm_of(tracer).unwrap_or_else(|| "?".into());
        bail!(
            "pid {pid} is already traced by pid {tracer} ({name}); a process can have only one \
             tracer: end or detach that one first"
        );
    }
    let guard = SignalGuard::install()?;
    let options = Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACEEXEC;
    let root = Pid::from_raw(pid as i32);
    let mut tracer = Tracer::new(Mode::Attached, root);
    // Threads may start while we seize: list again until no new one appears (threads started
    // by a seized thread are seized by the kernel, PTRACE_O_TRACECLONE).
    let mut seized: HashSet<u32> = HashSet::new();
    loop {
        let tids = match procfs::thread_ids(pid) {
            Ok(tids) => tids,
            Err(_) if seized.is_empty() => return Err(AccessError::NoSuchProcess { pid }.into()),
            Err(_) => break,
        };
        let fresh: Vec<u32> = tids.into_iter().filter(|t| !seized.contains(t)).collect();
        if fresh.is_empty() {
            break;
        }
        for tid in fresh {
            let thread = Pid::from_raw(tid as i32);
            match ptrace::seize(thread, options) {
                Ok(()) => {
                    seized.insert(tid);
                    tracer.threads.insert(thread, Thread::new(pid, false));
                    let _ = ptrace::interrupt(thread);
                }
                Err(Errno::ESRCH) => {}
                Err(err) => {
                    tracer.detach_all();
                    return Err(AccessError::from_errno(
                        nix_io(err),
                        pid,
                        "trace the threads (PTRACE_SEIZE)",
                    )
                    .into());
                }
            }
        }
    }
    if seized.is_empty() {
        return Err(AccessError::NoSuchProcess { pid }.into());
    }
    tracer.processes.entry(pid).or_default();
    let traced = tracer.run(Some(limit));
    drop(guard);
    traced
}

impl Thread {
    fn new(tgid: u32, started: bool) -> Thread {
        Thread {
            tgid,
            started,
            pending: None,
            open_bursts: Vec::new(),
        }
    }
}

impl Tracer {
    fn new(mode: Mode, root: Pid) -> Tracer {
        Tracer {
            mode,
            root,
            threads: HashMap::new(),
            processes: HashMap::new(),
            sockets: Vec::new(),
            by_inode: HashMap::new(),
            syscalls: 0,
            exit_status: None,
        }
    }

    /// Registers a thread seen for the first time. A new process starts with a copy of its
    /// parent's fd table (fork), so the fds it inherited keep pointing at the same sockets.
    fn adopt(&mut self, tid: Pid, started: bool) {
        if self.threads.contains_key(&tid) {
            return;
        }
        let raw = tid.as_raw() as u32;
        let tgid = procfs::status_field(raw, "Tgid").unwrap_or(raw);
        if !self.processes.contains_key(&tgid) {
            let parent_fds = procfs::status_field(tgid, "PPid")
                .and_then(|ppid| self.processes.get(&ppid))
                .map(|p| p.fds.clone())
                .unwrap_or_default();
            self.processes.insert(
                tgid,
                Process {
                    pidfd: None,
                    fds: parent_fds,
                },
            );
        }
        self.threads.insert(tid, Thread::new(tgid, started));
    }

    fn resume(&self, tid: Pid, sig: Option<Signal>) {
        // ESRCH: the thread was killed meanwhile; its exit will be reported.
        let _ = match self.mode {
            Mode::Seccomp => ptrace::cont(tid, sig),
            Mode::Attached => ptrace::syscall(tid, sig),
        };
    }

    fn run(mut self, limit: Option<Duration>) -> anyhow::Result<Traced> {
        let started = Instant::now();
        let mut interrupted = false;
        while !self.threads.is_empty() {
            let over = limit.is_some_and(|l| started.elapsed() >= l);
            if over || STOP_REQUESTED.load(Ordering::SeqCst) {
                interrupted = true;
                match self.mode {
                    Mode::Attached => {
                        self.detach_all();
                        break;
                    }
                    Mode::Seccomp => self.kill_all(),
                }
            }
            match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(status) => self.handle(status),
                Err(Errno::EINTR) => continue,
                Err(Errno::ECHILD) => break,
                Err(err) => return Err(nix_io(err)).context("waitpid"),
            }
        }
        Ok(Traced {
            mode: self.mode,
            sockets: self.sockets,
            syscalls: self.syscalls,
            exit_status: self.exit_status,
            elapsed: started.elapsed(),
            interrupted,
        })
    }

    /// Ends `trace -- CMD` early: the command and everything it started is killed (as
    /// PTRACE_O_EXITKILL would do when the tracer exits).
    fn kill_all(&mut self) {
        let groups: HashSet<u32> = self.threads.values().map(|t| t.tgid).collect();
        for tgid in groups {
            let _ = signal::kill(Pid::from_raw(tgid as i32), Signal::SIGKILL);
        }
    }

    /// Interrupts every thread and detaches from each at its next stop, passing on a pending
    /// signal, so that the target runs on (a blocked syscall may see EINTR).
    fn detach_all(&mut self) {
        for tid in self.threads.keys() {
            let _ = ptrace::interrupt(*tid);
        }
        let give_up = Instant::now() + Duration::from_secs(5);
        while !self.threads.is_empty() && Instant::now() < give_up {
            let status = match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(status) => status,
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            };
            match status {
                WaitStatus::Stopped(tid, sig) => {
                    let started = self.threads.get(&tid).map_or(true, |t| t.started);
                    let deliver = (started || sig != Signal::SIGSTOP).then_some(sig);
                    let _ = ptrace::detach(tid, deliver);
                    self.threads.remove(&tid);
                }
                WaitStatus::PtraceEvent(tid, _, event) => {
                    if is_fork_event(event) {
                        if let Ok(child) = ptrace::getevent(tid) {
                            let child = Pid::from_raw(child as i32);
                            // The new thread or process reports a stop of its own: detach it then.
                            self.threads
                                .entry(child)
                                .or_insert_with(|| Thread::new(0, false));
                            let _ = ptrace::interrupt(child);
                        }
                    }
                    let _ = ptrace::detach(tid, None);
                    self.threads.remove(&tid);
                }
                WaitStatus::PtraceSyscall(tid) => {
                    let _ = ptrace::detach(tid, None);
                    self.threads.remove(&tid);
                }
                WaitStatus::Exited(tid, _) | WaitStatus::Signaled(tid, _, _) => {
                    self.threads.remove(&tid);
                }
                _ => {}
            }
        }
    }

    fn handle(&mut self, status: WaitStatus) {
        match status {
            WaitStatus::PtraceEvent(tid, sig, event) => {
                self.adopt(tid, true);
                match event {
                    libc::PTRACE_EVENT_SECCOMP => return self.on_seccomp_stop(tid),
                    e if is_fork_event(e) => {
                        if let Ok(child) = ptrace::getevent(tid) {
                            self.adopt(Pid::from_raw(child as i32), false);
                        }
                    }
                    libc::PTRACE_EVENT_EXEC => self.on_exec(tid),
                    libc::PTRACE_EVENT_STOP => {
                        if let Some(thread) = self.threads.get_mut(&tid) {
                            thread.started = true;
                        }
                        // Our interrupt or a new thread's first stop reports SIGTRAP; a stop
                        // signal means the process is stopped by job control (maybe since
                        // before we attached): it must stay stopped, reporting to us
                        // (PTRACE_LISTEN) until SIGCONT, and not be resumed by the tracer.
                        let group_stop = matches!(
                            sig,
                            Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
                        );
                        if group_stop {
                            // SAFETY: plain ptrace request on a tracee in a stop.
                            unsafe {
                                libc::ptrace(libc::PTRACE_LISTEN, tid.as_raw(), 0, 0);
                            }
                            return;
                        }
                    }
                    _ => {}
                }
                self.resume(tid, None);
            }
            WaitStatus::PtraceSyscall(tid) => {
                self.adopt(tid, true);
                self.on_syscall_stop(tid);
            }
            WaitStatus::Stopped(tid, sig) => {
                let first = !self.threads.get(&tid).is_some_and(|t| t.started);
                self.adopt(tid, true);
                if let Some(thread) = self.threads.get_mut(&tid) {
                    thread.started = true;
                }
                // A new tracee's first SIGSTOP is the tracer's, not the program's.
                let deliver = (!(first && sig == Signal::SIGSTOP)).then_some(sig);
                self.resume(tid, deliver);
            }
            WaitStatus::Exited(tid, code) => {
                self.forget(tid);
                if tid == self.root {
                    self.exit_status = Some(code);
                }
            }
            WaitStatus::Signaled(tid, sig, _) => {
                self.forget(tid);
                if tid == self.root {
                    self.exit_status = Some(128 + sig as i32);
                }
            }
            _ => {}
        }
    }

    fn forget(&mut self, tid: Pid) {
        if let Some(thread) = self.threads.remove(&tid) {
            for idx in thread.open_bursts {
                self.sockets[idx].burst = None;
            }
        }
    }

    /// After exec the fd table is what survived close-on-exec: forget it, fds are looked at
    /// again when used. A non-leader thread that execs takes over the leader's id.
    fn on_exec(&mut self, tid: Pid) {
        if let Ok(former) = ptrace::getevent(tid) {
            let former = Pid::from_raw(former as i32);
            if former != tid {
                self.threads.remove(&former);
            }
        }
        if let Some(thread) = self.threads.get(&tid) {
            if let Some(process) = self.processes.get_mut(&thread.tgid) {
                process.fds.clear();
                process.pidfd = None;
            }
        }
    }

    fn on_seccomp_stop(&mut self, tid: Pid) {
        let wants_exit = match ptrace::syscall_info(tid) {
            Ok(info) if info.op == libc::PTRACE_SYSCALL_INFO_SECCOMP => {
                // SAFETY: op SECCOMP says the seccomp member of the union is filled.
                let seccomp = unsafe { info.u.seccomp };
                self.on_entry(tid, seccomp.nr, seccomp.args)
            }
            _ => false,
        };
        // PTRACE_SYSCALL from a seccomp stop leads to the syscall-exit stop of this call.
        let _ = if wants_exit {
            ptrace::syscall(tid, None)
        } else {
            ptrace::cont(tid, None)
        };
    }

    fn on_syscall_stop(&mut self, tid: Pid) {
        if let Ok(info) = ptrace::syscall_info(tid) {
            match info.op {
                libc::PTRACE_SYSCALL_INFO_ENTRY => {
                    // SAFETY: op ENTRY says the entry member of the union is filled.
                    let entry = unsafe { info.u.entry };
                    self.on_entry(tid, entry.nr, entry.args);
                }
                libc::PTRACE_SYSCALL_INFO_EXIT => {
                    // SAFETY: op EXIT says the exit member of the union is filled.
                    let exit = unsafe { info.u.exit };
                    let pending = self.threads.get_mut(&tid).and_then(|t| t.pending.take());
                    if let Some(pending) = pending {
                        self.on_exit(tid, pending, exit.sval);
                    }
                }
                _ => {}
            }
        }
        self.resume(tid, None);
    }

    fn tgid_of(&self, tid: Pid) -> u32 {
        self.threads
            .get(&tid)
            .map_or(tid.as_raw() as u32, |t| t.tgid)
    }

    /// A followed syscall begins. Returns true when its result is needed.
    fn on_entry(&mut self, tid: Pid, nr: u64, args: [u64; 6]) -> bool {
        let Some(kind) = kind_of(nr) else {
            return false;
        };
        self.syscalls += 1;
        let tgid = self.tgid_of(tid);
        let fd = args[0] as i32;
        let mut socket = None;
        let mut option_value = None;
        let mut readable = None;
        let wanted = match kind {
            SyscallKind::Socket | SyscallKind::Dup | SyscallKind::DupTo => true,
            SyscallKind::Connect => false,
            SyscallKind::Accept | SyscallKind::Send { .. } | SyscallKind::SendMessages => {
                socket = self.socket_of(tgid, fd);
                socket.is_some()
            }
            SyscallKind::Recv => {
                socket = self.socket_of(tgid, fd);
                match socket {
                    Some(idx) if self.read_may_end_a_burst(idx, tid, tgid) => true,
                    Some(idx) => {
                        self.sockets[idx].reads += 1;
                        false
                    }
                    None => false,
                }
            }
            SyscallKind::SetSockOpt => {
                let tcp_option = args[1] == libc::IPPROTO_TCP as u64
                    && [libc::TCP_NODELAY, libc::TCP_CORK, libc::TCP_QUICKACK]
                        .iter()
                        .any(|&name| args[2] == name as u64);
                if tcp_option {
                    socket = self.socket_of(tgid, fd);
                    option_value = read_int(tid, args[3]);
                }
                socket.is_some() && option_value.is_some()
            }
            SyscallKind::Wait(how) => {
                let waiting_bursts = self
                    .threads
                    .get(&tid)
                    .is_some_and(|t| !t.open_bursts.is_empty());
                if !waiting_bursts {
                    return false;
                }
                readable = readable_fds(tid, how, &args);
                // Bursts that cannot be a write-write-read end here at no cost; the exit of
                // the wait is needed only to time the wait after one that can.
                let mut timed = false;
                for idx in self.waited_on(tid, tgid, &readable) {
                    if self.sockets[idx]
                        .burst
                        .as_ref()
                        .is_some_and(|(b, _, _)| b.is_write_write_read())
                    {
                        timed = true;
                    } else {
                        self.close_burst(idx, Instant::now());
                    }
                }
                timed
            }
            SyscallKind::Close => {
                let slot = self
                    .processes
                    .get_mut(&tgid)
                    .and_then(|p| p.fds.remove(&fd));
                // Sends without a read after them are no write-write-read once the socket is
                // gone; but it lives on while another fd (a dup, a forked copy) holds it.
                if let Some(Slot::Tcp(idx)) = slot {
                    let still_open = self.processes.values().any(|p| {
                        p.fds
                            .values()
                            .any(|s| matches!(s, Slot::Tcp(i) if *i == idx))
                    });
                    if !still_open {
                        self.drop_burst(idx);
                    }
                }
                false
            }
            SyscallKind::Fcntl => {
                args[1] == libc::F_DUPFD as u64 || args[1] == libc::F_DUPFD_CLOEXEC as u64
            }
        };
        if wanted {
            if let Some(thread) = self.threads.get_mut(&tid) {
                thread.pending = Some(Pending {
                    kind,
                    args,
                    socket,
                    option_value,
                    readable,
                });
            }
        }
        wanted
    }

    /// A followed syscall returned `ret` (negative errno on failure).
    fn on_exit(&mut self, tid: Pid, call: Pending, ret: i64) {
        let tgid = self.tgid_of(tid);
        let now = Instant::now();
        let args = call.args;
        match call.kind {
            SyscallKind::Socket if ret >= 0 => {
                let family = args[0] as i32;
                let stream = args[1] as i32 & 0xf == libc::SOCK_STREAM;
                let tcp_protocol = args[2] == 0 || args[2] == libc::IPPROTO_TCP as u64;
                let slot = if (family == libc::AF_INET || family == libc::AF_INET6)
                    && stream
                    && tcp_protocol
                {
                    self.new_socket(tgid, ret as i32)
                } else {
                    Slot::Other
                };
                self.set_slot(tgid, ret as i32, Some(slot));
            }
            SyscallKind::Accept if ret >= 0 => {
                // Options are read at first use: they come from the listener.
                let slot = self.new_socket(tgid, ret as i32);
                self.set_slot(tgid, ret as i32, Some(slot));
            }
            SyscallKind::SetSockOpt if ret == 0 => {
                if let (Some(idx), Some(value)) = (call.socket, call.option_value) {
                    let socket = &mut self.sockets[idx];
                    match args[2] as libc::c_int {
                        libc::TCP_NODELAY => {
                            socket.nodelay = value != 0;
                            socket.nodelay_ever_set |= value != 0;
                        }
                        libc::TCP_CORK => socket.cork = value != 0,
                        // Not sticky (ping-pong mode returns at the next turn): count the calls.
                        _ => socket.quickack_sets += u64::from(value != 0),
                    }
                }
            }
            SyscallKind::SendMessages if ret > 0 => {
                if let Some(idx) = call.socket {
                    let more = args[3] & libc::MSG_MORE as u64 != 0;
                    for bytes in sent_message_lengths(tid, args[1], ret as usize) {
                        self.on_send(tid, idx, bytes, more, now);
                    }
                }
            }
            SyscallKind::Send { flags_arg } if ret > 0 => {
                if let Some(idx) = call.socket {
                    let more = flags_arg.is_some_and(|i| args[i] & libc::MSG_MORE as u64 != 0);
                    self.on_send(tid, idx, ret as u64, more, now);
                }
            }
            SyscallKind::Recv if ret != -(libc::EAGAIN as i64) => {
                if let Some(idx) = call.socket {
                    self.sockets[idx].reads += 1;
                    self.close_burst(idx, now);
                }
            }
            SyscallKind::Wait(_) => {
                for idx in self.waited_on(tid, tgid, &call.readable) {
                    self.close_burst(idx, now);
                }
            }
            SyscallKind::Dup | SyscallKind::Fcntl if ret >= 0 => {
                let slot = self
                    .processes
                    .get(&tgid)
                    .and_then(|p| p.fds.get(&(args[0] as i32)).copied());
                self.set_slot(tgid, ret as i32, slot);
            }
            SyscallKind::DupTo if ret >= 0 => {
                let slot = self
                    .processes
                    .get(&tgid)
                    .and_then(|p| p.fds.get(&(args[0] as i32)).copied());
                self.set_slot(tgid, args[1] as i32, slot);
            }
            _ => {}
        }
    }

    /// The sockets with open bursts of thread `tid` that a wait on `readable` fds waits on
    /// (`None`: the call does not say, so all of them).
    fn waited_on(&self, tid: Pid, tgid: u32, readable: &Option<Vec<i32>>) -> Vec<usize> {
        let Some(thread) = self.threads.get(&tid) else {
            return Vec::new();
        };
        let fds = self.processes.get(&tgid).map(|p| &p.fds);
        thread
            .open_bursts
            .iter()
            .copied()
            .filter(|&idx| match (readable, fds) {
                (None, _) => true,
                (Some(list), Some(fds)) => list
                    .iter()
                    .any(|fd| matches!(fds.get(fd), Some(Slot::Tcp(i)) if *i == idx)),
                (Some(_), None) => false,
            })
            .collect()
    }

    fn set_slot(&mut self, tgid: u32, fd: i32, slot: Option<Slot>) {
        let fds = &mut self.processes.entry(tgid).or_default().fds;
        match slot {
            Some(slot) => {
                fds.insert(fd, slot);
            }
            None => {
                fds.remove(&fd);
            }
        }
    }

    fn new_socket(&mut self, tgid: u32, fd: i32) -> Slot {
        self.sockets.push(TracedSocket::new(tgid, fd));
        Slot::Tcp(self.sockets.len() - 1)
    }

    /// The TCP socket behind fd `fd` of process `tgid`, looking at the fd itself (a duplicate)
    /// the first time it is used.
    fn socket_of(&mut self, tgid: u32, fd: i32) -> Option<usize> {
        if fd < 0 {
            return None;
        }
        let process = self.processes.entry(tgid).or_default();
        match process.fds.get(&fd) {
            Some(Slot::Tcp(idx)) => return Some(*idx),
            Some(Slot::Other) => return None,
            None => {}
        }
        let facts = match probe(process, tgid, fd) {
            Probe::Tcp(facts) => facts,
            Probe::Other => {
                process.fds.insert(fd, Slot::Other);
                return None;
            }
            Probe::Unknown => return None,
        };
        // A socket seen before through another fd, process or program (inherited over fork
        // or exec, passed on as stdin...) stays one socket.
        let known = facts.inode.and_then(|ino| self.by_inode.get(&ino).copied());
        let idx = match known {
            Some(idx) => idx,
            None => {
                let Slot::Tcp(idx) = self.new_socket(tgid, fd) else {
                    return None;
                };
                self.learn(idx, facts);
                idx
            }
        };
        self.set_slot(tgid, fd, Some(Slot::Tcp(idx)));
        Some(idx)
    }

    /// Whether a read of socket `idx` by thread `tid` needs its exit stop. The result decides
    /// when sends are waiting (a read that returns ends their burst, EAGAIN keeps it open). With
    /// none waiting, it still does when another thread or process may send on the socket while
    /// this read blocks, as a reader thread does: the socket's last sender was another thread,
    /// or, before any send, the program has more than one thread or process.
    fn read_may_end_a_burst(&self, idx: usize, tid: Pid, tgid: u32) -> bool {
        let socket = &self.sockets[idx];
        if socket.burst.is_some() {
            return true;
        }
        match socket.last_sender {
            Some(sender) => sender != tid,
            None => {
                self.processes.len() > 1
                    || self
                        .threads
                        .values()
                        .filter(|t| t.tgid == tgid)
                        .nth(1)
                        .is_some()
            }
        }
    }

    /// Records what a duplicate of socket `idx` showed, and its inode.
    fn learn(&mut self, idx: usize, facts: SocketFacts) {
        if let Some(ino) = facts.inode {
            self.by_inode.entry(ino).or_insert(idx);
        }
        self.sockets[idx].learn(facts);
    }

    /// Reads socket `idx`'s options and addresses again through the fd it was first seen
    /// at, if that fd still holds it (or holds a socket not yet told apart by inode).
    fn look_again(&mut self, idx: usize) {
        let (pid, fd) = (self.sockets[idx].pid, self.sockets[idx].fd);
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        if let Probe::Tcp(facts) = probe(process, pid, fd) {
            let same = facts.inode.map_or(true, |ino| {
                self.by_inode.get(&ino).map_or(true, |&i| i == idx)
            });
            if same {
                self.learn(idx, facts);
            }
        }
    }

    fn on_send(&mut self, tid: Pid, idx: usize, bytes: u64, more: bool, now: Instant) {
        if !self.sockets[idx].resolved {
            self.look_again(idx);
            // Try once: a socket that cannot be read keeps the options the syscalls showed.
            self.sockets[idx].resolved = true;
        }
        let socket = &mut self.sockets[idx];
        socket.sends += 1;
        socket.last_sender = Some(tid);
        let (mss, nodelay, cork, joins) =
            (socket.mss, socket.nodelay, socket.cork, socket.more_pending);
        socket.more_pending = more;
        let (burst, owner, last) = socket
            .burst
            .get_or_insert_with(|| (Burst::default(), tid, now));
        if joins && burst.sends > 0 {
            burst.extend_last(bytes);
        } else {
            burst.push(bytes, mss, nodelay, cork);
        }
        *last = now;
        let owner = *owner;
        if let Some(thread) = self.threads.get_mut(&owner) {
            if !thread.open_bursts.contains(&idx) {
                thread.open_bursts.push(idx);
            }
        }
    }

    /// A read or a wait ends the socket's burst: judge it.
    fn close_burst(&mut self, idx: usize, now: Instant) {
        let Some((burst, owner, last_send)) = self.sockets[idx].burst.take() else {
            return;
        };
        if let Some(thread) = self.threads.get_mut(&owner) {
            thread.open_bursts.retain(|&i| i != idx);
        }
        self.sockets[idx].more_pending = false;
        if !burst.is_write_write_read() {
            return;
        }
        // TCP_NODELAY may have been switched on from outside (`tcpstall fix`) since the
        // socket was last looked at: look again before blaming Nagle.
        self.look_again(idx);
        let socket = &mut self.sockets[idx];
        if socket.nodelay {
            return;
        }
        let wait = now.saturating_duration_since(last_send);
        socket.write_write_read += 1;
        if wait >= LONG_WAIT {
            socket.waits_over_30ms += 1;
        }
        let wait_ms = wait.as_secs_f64() * 1000.0;
        if socket
            .example
            .as_ref()
            .map_or(true, |e| e.wait_ms < wait_ms)
        {
            socket.example = Some(Example {
                writes: burst.sizes,
                sends: burst.sends,
                wait_ms,
            });
        }
    }

    /// The socket is closed: sends without a read after them are no write-write-read.
    fn drop_burst(&mut self, idx: usize) {
        if let Some((_, owner, _)) = self.sockets[idx].burst.take() {
            if let Some(thread) = self.threads.get_mut(&owner) {
                thread.open_bursts.retain(|&i| i != idx);
            }
        }
    }
}

fn is_fork_event(event: i32) -> bool {
    matches!(
        event,
        libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK
    )
}

/// What an fd turned out to be.
enum Probe {
    Tcp(SocketFacts),
    Other,
    /// Could not be looked at (closed, no permission): ask again next time.
    Unknown,
}

/// Looks at fd `fd` of `tgid` through a duplicate: a TCP socket (IPv4/IPv6 stream, protocol
/// TCP) or something else; for a socket, its addresses and options.
fn probe(process: &mut Process, tgid: u32, fd: i32) -> Probe {
    if process.pidfd.is_none() {
        process.pidfd = PidFd::open(tgid).ok();
    }
    let Some(pidfd) = &process.pidfd else {
        return Probe::Unknown;
    };
    let dup = match pidfd.get_fd(fd) {
        Ok(dup) => dup,
        Err(_) => return Probe::Unknown,
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
    })
}

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
fn sent_message_lengths(tid: Pid, msgvec: u64, count: usize) -> Vec<u64> {
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
fn read_int(tid: Pid, addr: u64) -> Option<i32> {
    let bytes = read_memory(tid, addr, 4)?;
    Some(i32::from_ne_bytes(bytes.try_into().ok()?))
}

/// Most fds a wait is read for; a larger set counts as waiting on every socket.
const MAX_WAIT_FDS: u64 = 1024;

/// The fds a poll or select call waits to become readable (POLLIN/POLLPRI/POLLRDHUP, or the
/// read set). `None` when the call does not name them (epoll) or they cannot be read.
fn readable_fds(tid: Pid, how: WaitKind, args: &[u64; 6]) -> Option<Vec<i32>> {
    match how {
        WaitKind::Epoll => None,
        WaitKind::Poll => {
            let count = args[1];
            if count > MAX_WAIT_FDS {
                return None;
            }
            // struct pollfd { int fd; short events; short revents; }
            let bytes = read_memory(tid, args[0], count as usize * 8)?;
            let wanted: libc::c_short = libc::POLLIN | libc::POLLPRI | libc::POLLRDHUP;
            Some(
                bytes
                    .chunks_exact(8)
                    .filter(|p| i16::from_ne_bytes([p[4], p[5]]) & wanted != 0)
                    .map(|p| i32::from_ne_bytes([p[0], p[1], p[2], p[3]]))
                    .collect(),
            )
        }
        WaitKind::Select => {
            let (nfds, read_set) = (args[0], args[1]);
            if read_set == 0 {
                return Some(Vec::new());
            }
            if nfds > MAX_WAIT_FDS {
                return None;
            }
            // fd_set: a bitmap of longs, fd n at bit n % 64 of long n / 64 (little or big
            // endian alike when read as native u64 words).
            let words = nfds.div_ceil(64) as usize;
            let bytes = read_memory(tid, read_set, words * 8)?;
            let mut fds = Vec::new();
            for (w, chunk) in bytes.chunks_exact(8).enumerate() {
                let word = u64::from_ne_bytes(chunk.try_into().ok()?);
                for bit in 0..64 {
                    let fd = (w * 64 + bit) as u64;
                    if fd < nfds && word & (1 << bit) != 0 {
                        fds.push(fd as i32);
                    }
                }
            }
            Some(fds)
        }
    }
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
