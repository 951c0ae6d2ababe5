//! The ptrace driver behind `trace`: starts or attaches to the target, follows its threads and
//! forks, decodes each followed syscall into [`Event`]s for the socket model, and asks the model
//! which syscall returns it needs, so that the tracee stops no more than the verdict requires.
//!
//! Two ways in:
//! - `trace -- CMD`: the child is seized (PTRACE_SEIZE) while it waits stopped, then installs a
//!   seccomp filter before exec ([`launch`]), so it stops only at socket-related syscalls
//!   (PTRACE_EVENT_SECCOMP); the exit of a syscall whose result matters is caught by resuming
//!   with PTRACE_SYSCALL from that stop (since Linux 4.8 the seccomp stop comes after
//!   syscall-entry, so the next stop is the exit).
//! - `trace -p PID`: every thread is seized (PTRACE_SEIZE) and stepped from syscall to syscall
//!   (PTRACE_SYSCALL): a filter cannot be installed in a running process from outside. On the
//!   way out every thread is interrupted and detached, and the target runs on (a syscall
//!   blocked at that moment may return EINTR, as with strace).
//!
//! Whatever ends the trace, no tracee is left stopped: a command is killed with everything it
//! started, a process traced with `-p` is detached thread by thread.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::events::{Actor, Event};
use super::fd_probe::PidfdInspector;
use super::launch::{self, nix_io};
use super::signals::{self, SignalGuard};
use super::socket_model::{SocketModel, TracedSocket};
use super::syscall_info::{self, SyscallStop};
use super::syscalls::{self, kind_of, Call, SyscallKind};
use super::tracee_memory::{read_int, readable_fds};
use super::AccessError;
use crate::host::procfs;

/// One traced thread, as the driver needs it.
struct Thread {
    tgid: u32,
    /// It has reported its first stop (the SIGSTOP or PTRACE_EVENT_STOP of a new tracee).
    started: bool,
    /// The followed syscall it is in, whose return is awaited.
    pending: Option<Call>,
}

impl Thread {
    fn new(tgid: u32, started: bool) -> Thread {
        Thread {
            tgid,
            started,
            pending: None,
        }
    }
}

/// How the tracee is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A command started by the tracer, stopped only at filtered syscalls.
    Seccomp,
    /// A running process, stepped from syscall to syscall.
    Attached,
    /// A running process, never stopped: its syscalls seen by BPF programs on the kernel's
    /// tracepoints ([`super::kernel_trace`]).
    Tracepoints,
}

/// The result of a trace.
pub(crate) struct Traced {
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

/// The driver's state.
struct Tracer {
    mode: Mode,
    root: Pid,
    threads: HashMap<Pid, Thread>,
    model: SocketModel<PidfdInspector>,
    syscalls: u64,
    exit_status: Option<i32>,
}

/// Runs `command` under the tracer until it ends, or until `limit` or Ctrl-C (then it is killed).
pub(crate) fn trace_command(command: &[String], limit: Option<Duration>) -> anyhow::Result<Traced> {
    let guard = SignalGuard::install()?;
    let root = launch::start_seized(command, &guard)?;
    trace_seized(root, limit, guard)
}

/// Follows the command `root`, seized and stopped at its exec ([`launch::start_seized`]),
/// until it ends, or until `limit` or Ctrl-C (then it is killed); `guard` ends with the trace.
pub(crate) fn trace_seized(
    root: Pid,
    limit: Option<Duration>,
    guard: SignalGuard,
) -> anyhow::Result<Traced> {
    let mut tracer = Tracer::new(Mode::Seccomp, root);
    tracer.adopt(root, true);
    ptrace::cont(root, None)
        .map_err(nix_io)
        .context("PTRACE_CONT")?;
    let traced = tracer.run(limit);
    drop(guard);
    traced
}

/// Follows the running process `pid` for at most `limit`, then detaches from every thread.
pub(crate) fn trace_process(pid: u32, limit: Duration) -> anyhow::Result<Traced> {
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
                    tracer.model.apply(
                        Actor { tid, tgid: pid },
                        Instant::now(),
                        Event::ThreadStarted { parent: None },
                    );
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
    let traced = tracer.run(Some(limit));
    drop(guard);
    traced
}

impl Tracer {
    fn new(mode: Mode, root: Pid) -> Tracer {
        Tracer {
            mode,
            root,
            threads: HashMap::new(),
            model: SocketModel::new(PidfdInspector::default()),
            syscalls: 0,
            exit_status: None,
        }
    }

    /// Registers a thread seen for the first time, and tells the model, with the parent of its
    /// process when the process is new too (it starts with a copy of the parent's fds).
    fn adopt(&mut self, tid: Pid, started: bool) {
        if self.threads.contains_key(&tid) {
            return;
        }
        let raw = tid.as_raw() as u32;
        let tgid = procfs::status_field(raw, "Tgid").unwrap_or(raw);
        let parent = if self.model.knows_process(tgid) {
            None
        } else {
            procfs::status_field(tgid, "PPid")
        };
        self.threads.insert(tid, Thread::new(tgid, started));
        self.model.apply(
            Actor { tid: raw, tgid },
            Instant::now(),
            Event::ThreadStarted { parent },
        );
    }

    fn resume(&self, tid: Pid, sig: Option<Signal>) {
        // ESRCH: the thread was killed meanwhile; its exit will be reported.
        let _ = match self.mode {
            Mode::Seccomp => ptrace::cont(tid, sig),
            Mode::Attached | Mode::Tracepoints => ptrace::syscall(tid, sig),
        };
    }

    fn run(mut self, limit: Option<Duration>) -> anyhow::Result<Traced> {
        let started = Instant::now();
        let mut interrupted = false;
        while !self.threads.is_empty() {
            let over = limit.is_some_and(|l| started.elapsed() >= l);
            if over || signals::stop_requested() {
                interrupted = true;
                match self.mode {
                    Mode::Attached | Mode::Tracepoints => {
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
            sockets: self.model.into_sockets(),
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
    /// signal, so that the target runs on (a blocked syscall may see EINTR), or stays stopped
    /// when job control stopped it.
    fn detach_all(&mut self) {
        // Threads detached from a group-stop, which must be seen stopped again before we return.
        let mut group_stopped = Vec::new();
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
                WaitStatus::PtraceEvent(tid, sig, event) => {
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
                    if ptrace::detach(tid, None).is_ok()
                        && event == libc::PTRACE_EVENT_STOP
                        && is_stop_signal(sig)
                    {
                        group_stopped.push(tid);
                    }
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
        await_stopped_again(&group_stopped);
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
                        if is_stop_signal(sig) {
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

    /// The thread ended: what it was doing ends with it.
    fn forget(&mut self, tid: Pid) {
        if let Some(thread) = self.threads.remove(&tid) {
            let actor = Actor {
                tid: tid.as_raw() as u32,
                tgid: thread.tgid,
            };
            self.model.apply(actor, Instant::now(), Event::ThreadExited);
        }
    }

    /// After exec the fd table is what survived close-on-exec: the model forgets it, fds are
    /// looked at again when used. A non-leader thread that execs takes over the leader's id.
    fn on_exec(&mut self, tid: Pid) {
        let former = ptrace::getevent(tid).map_or(tid, |f| Pid::from_raw(f as i32));
        if former != tid {
            self.threads.remove(&former);
        }
        if self.threads.contains_key(&tid) {
            let former = former.as_raw() as u32;
            self.model
                .apply(self.actor(tid), Instant::now(), Event::Exec { former });
        }
    }

    fn on_seccomp_stop(&mut self, tid: Pid) {
        let wants_exit = match syscall_info::get(tid) {
            Ok(SyscallStop::Seccomp { nr, args }) => self.on_entry(tid, nr, args),
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
        match syscall_info::get(tid) {
            Ok(SyscallStop::Entry { nr, args }) => {
                self.on_entry(tid, nr, args);
            }
            Ok(SyscallStop::Exit { sval }) => {
                let pending = self.threads.get_mut(&tid).and_then(|t| t.pending.take());
                if let Some(call) = pending {
                    self.on_exit(tid, call, sval);
                }
            }
            _ => {}
        }
        self.resume(tid, None);
    }

    fn actor(&self, tid: Pid) -> Actor {
        let raw = tid.as_raw() as u32;
        Actor {
            tid: raw,
            tgid: self.threads.get(&tid).map_or(raw, |t| t.tgid),
        }
    }

    /// A followed syscall begins. Returns true when its return is needed, after keeping what
    /// the return will mean.
    fn on_entry(&mut self, tid: Pid, nr: u64, args: [u64; 6]) -> bool {
        let Some(kind) = kind_of(nr) else {
            return false;
        };
        self.syscalls += 1;
        let actor = self.actor(tid);
        let fd = args[0] as i32;
        let model = &mut self.model;
        let call = match kind {
            SyscallKind::Socket => Some(Call::Socket {
                tcp: syscalls::opens_tcp(&args),
            }),
            SyscallKind::Dup => Some(Call::Duplicate { from: fd, to: None }),
            SyscallKind::DupTo => Some(Call::Duplicate {
                from: fd,
                to: Some(args[1] as i32),
            }),
            SyscallKind::Fcntl if syscalls::fcntl_duplicates(&args) => {
                Some(Call::Duplicate { from: fd, to: None })
            }
            SyscallKind::Connect | SyscallKind::Fcntl => None,
            SyscallKind::Accept => model.is_tcp(actor.tgid, fd).then_some(Call::Accept),
            SyscallKind::Send { flags_arg } => model.is_tcp(actor.tgid, fd).then(|| Call::Send {
                fd,
                more: syscalls::has_msg_more(&args, flags_arg),
            }),
            SyscallKind::SendMessages => model.is_tcp(actor.tgid, fd).then(|| Call::SendMessages {
                fd,
                msgvec: args[1],
                more: syscalls::has_msg_more(&args, Some(3)),
            }),
            SyscallKind::Recv => match model.read_can_end_sends(actor, fd) {
                Some(true) => {
                    model.apply(actor, Instant::now(), Event::ReadBegun { fd });
                    Some(Call::Read { fd })
                }
                Some(false) => {
                    let read = Event::Read {
                        fd,
                        returned: false,
                    };
                    model.apply(actor, Instant::now(), read);
                    None
                }
                None => None,
            },
            SyscallKind::SetSockOpt => syscalls::followed_tcp_option(&args).and_then(|name| {
                let tcp = model.is_tcp(actor.tgid, fd);
                let value = read_int(tid, args[3]);
                value.filter(|_| tcp).map(|value| Call::SetOption {
                    fd,
                    option: syscalls::tcp_option(name, value),
                })
            }),
            SyscallKind::Wait(how) => {
                if !model.has_open_sends(actor.tid) {
                    return false;
                }
                let readable = readable_fds(tid, how, &args);
                // Sends that cannot be a write-write-read end here at no cost; the return of
                // the wait is needed only to time the wait after those that can.
                let begun = Event::WaitBegun {
                    readable: readable.clone(),
                };
                model.apply(actor, Instant::now(), begun);
                model
                    .wait_ends_held_sends(actor, &readable)
                    .then_some(Call::Wait { readable })
            }
            SyscallKind::Close => {
                model.apply(actor, Instant::now(), Event::Closed { fd });
                None
            }
        };
        let Some(call) = call else {
            return false;
        };
        if let Some(thread) = self.threads.get_mut(&tid) {
            thread.pending = Some(call);
        }
        true
    }

    /// A followed syscall returned `ret` (negative errno on failure).
    fn on_exit(&mut self, tid: Pid, call: Call, ret: i64) {
        let actor = self.actor(tid);
        let now = Instant::now();
        let model = &mut self.model;
        call.returned(ret, tid, |event| model.apply(actor, now, event));
    }
}

fn is_fork_event(event: i32) -> bool {
    matches!(
        event,
        libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK
    )
}

/// A signal that stops the process by job control (a group-stop, `man 2 ptrace`).
fn is_stop_signal(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

/// Waits, at most 2 s, until each thread detached from a group-stop is stopped again.
/// PTRACE_DETACH wakes a tracee even in group-stop (kernel `__ptrace_unlink`: it sets
/// JOBCTL_STOP_PENDING, then `ptrace_signal_wake_up`), and the thread stops again only once
/// scheduled, in `do_signal_stop`; on a loaded machine the tracer could exit first, leaving
/// the process seen running. A thread still running ('R') is on its way back to 'T'; any
/// other state means it stopped, ended, or was continued (SIGCONT) meanwhile (one continued
/// that keeps running costs at most the bound).
fn await_stopped_again(tids: &[Pid]) {
    let give_up = Instant::now() + Duration::from_secs(2);
    for tid in tids {
        while Instant::now() < give_up
            && procfs::status_text(tid.as_raw() as u32, "State").is_some_and(|s| s.starts_with('R'))
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
