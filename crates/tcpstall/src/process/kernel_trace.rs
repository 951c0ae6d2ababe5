//! `trace -p` without stopping the target: BPF programs on the kernel's tracepoints
//! (`bpf/trace.bpf.c`, committed as `bpf/trace.bpf.o` and embedded) see the followed syscalls
//! of the target's processes, keep only those on TCP sockets (the kernel filters by thread
//! group and by fd), and put one record each into a ring buffer without waking tcpstall
//! (BPF_RB_NO_WAKEUP). This module polls the ring every [`POLL`], turns each record into the
//! [`Event`] the ptrace driver would have made, with the kernel's timestamp, and feeds the
//! same [`SocketModel`]: the verdicts, the report and its patterns are those of the ptrace
//! route. What an fd is comes from the records themselves (the socket's inode, options and
//! addresses as the kernel had them at that call), not from a look at the fd afterwards.
//! Each send says whether Nagle kept its tail back, and a record from tcp_probe says when a
//! kept-back tail left: the hold is timed by the kernel, not by the read after it.
//!
//! The target runs on untouched: no thread is ever stopped, and nothing is left behind when
//! tcpstall ends (the programs go with their file descriptors).

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::Ebpf;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{self, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::events::{Actor, Event, TcpOption};
use super::launch;
use super::signals::{self, SignalGuard};
use super::socket_model::{Inspector, Probe, SocketFacts, SocketModel};
use super::tracee_memory::{poll_readable, select_readable};
use super::tracer::{self, Mode, Traced};
use crate::host::call_stack::{
    CallSites, CallStack, RawSites, StackNamer, STACK_MAPS, TAKE_STACKS_GLOBAL, USER_STACK_LEN,
};
use crate::host::pidfd::PidFd;
use crate::host::privilege;
use crate::host::procfs;
use crate::host::record::RecordBytes;
use crate::host::tracepoints::{chain, clock_ns, load_btf_tracepoints_with, KernelError};

/// The writes' stacks kept per socket (`last_send`, bpf/user_stack.h: 16384 entries for
/// `watch --kernel`'s whole host) when one process tree is followed: 4096, as trace.bpf.c's own
/// per-socket maps (an LRU map is made whole as it is created, before the command may start).
const STACK_SIZES: [(&str, u32); 1] = [(STACK_MAPS[0], 4096)];
/// `--no-stacks`: the stack maps are not used, and made with one entry.
const NO_STACK_SIZES: [(&str, u32); 2] = [(STACK_MAPS[0], 1), (STACK_MAPS[1], 1)];

/// The compiled BPF programs (`scripts/build-bpf` rebuilds it from `bpf/trace.bpf.c`),
/// aligned for the ELF reader.
pub static TRACE_BPF: &[u8] = aya::include_bytes_aligned!("../../../../bpf/trace.bpf.o");

/// The tracepoints the programs attach to, by program name (= tracepoint name).
const TRACEPOINTS: [&str; 8] = [
    "sys_enter",
    "sys_exit",
    "sock_send_length",
    "tcp_probe",
    "tcp_cong_state_set",
    "sched_process_fork",
    "sched_process_exec",
    "sched_process_exit",
];

/// How often the ring is read: the kernel never wakes tcpstall.
const POLL: Duration = Duration::from_millis(10);

/// How often the followed processes are looked at, to end when all have exited.
const ALIVE_CHECK: Duration = Duration::from_millis(100);

/// Size of one record (`struct record` in `bpf/trace.bpf.c`).
const RECORD_LEN: usize = 160;

/// Size of a held send's record (`struct held_record`): the record, then the call stacks of
/// the send and of the write before it (`struct hold_stacks`), which start at [`RECORD_LEN`].
const HELD_RECORD_LEN: usize = RECORD_LEN + 2 * USER_STACK_LEN;

/// What an example's stacks say when its last send was not held: the kernel takes stacks at
/// held sends only.
const NOT_HELD: &str = "none taken: the kernel saw this write sent at once, not held by \
                        Nagle (stacks are taken at held writes only)";

/// Where each field of `struct record` (`bpf/trace.bpf.c`) lies in a record: the parser reads
/// these, and a test checks them against the C struct (`host::c_layout`).
mod record_at {
    pub const TS_NS: usize = 0;
    pub const INODE: usize = 8;
    pub const RET: usize = 16;
    pub const TID: usize = 24;
    pub const TGID: usize = 28;
    pub const FD: usize = 32;
    pub const ARG: usize = 36;
    pub const VALUE: usize = 40;
    pub const MSS: usize = 44;
    pub const KIND: usize = 48;
    pub const FLAGS: usize = 49;
    pub const NONAGLE: usize = 50;
    pub const WAIT: usize = 51;
    pub const FAMILY: usize = 52;
    pub const LPORT: usize = 54;
    pub const RPORT: usize = 56;
    pub const SADDR: usize = 64;
    pub const DADDR: usize = 80;
    pub const DATA: usize = 96;
}

/// Record kinds (`REC_*` in `bpf/trace.bpf.c`).
const REC_SENT: u8 = 1;
const REC_READ: u8 = 2;
const REC_WAIT_BEGUN: u8 = 3;
const REC_WAIT_ENDED: u8 = 4;
const REC_CLOSED: u8 = 5;
const REC_DUP: u8 = 6;
const REC_OPTION: u8 = 7;
const REC_FORK: u8 = 8;
const REC_EXEC: u8 = 9;
const REC_EXIT: u8 = 10;
const REC_OPENED: u8 = 11;
const REC_RELEASED: u8 = 12;

/// Record flags (`FLAG_*`).
const FLAG_MORE: u8 = 1;
const FLAG_HELD: u8 = 2;
const FLAG_EAGAIN: u8 = 4;
const FLAG_OVERFLOW: u8 = 8;
const FLAG_NO_READFDS: u8 = 16;
const FLAG_LATE: u8 = 32;

/// How a wait names its fds (`WAIT_*`).
const WAIT_POLL: u8 = 1;
const WAIT_SELECT: u8 = 2;

/// `tcp_sock.nonagle` bits (include/net/tcp.h): TCP_NAGLE_OFF is TCP_NODELAY, TCP_NAGLE_CORK
/// is TCP_CORK.
const TCP_NAGLE_OFF: u8 = 1;
const TCP_NAGLE_CORK: u8 = 2;

/// Slots of the kernel's per-CPU counters (`COUNT_*`).
const COUNT_RING_FULL: u32 = 1;

/// Capability numbers (include/uapi/linux/capability.h).
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// One record of the ring, decoded.
#[derive(Debug, Clone, PartialEq)]
struct Record {
    ts_ns: u64,
    actor: Actor,
    kind: u8,
    flags: u8,
    fd: i32,
    ret: i64,
    arg: u32,
    value: u32,
    wait: u8,
    facts: Option<SocketFacts>,
    data: [u8; 64],
    /// A held send's call stacks, when the kernel took them.
    stacks: Option<RawSites>,
}

impl Record {
    fn parse(bytes: &[u8]) -> Option<Record> {
        let stacks =
            RecordBytes::new(bytes, HELD_RECORD_LEN).map(|held| RawSites::parse(&held, RECORD_LEN));
        let rec = RecordBytes::new(bytes, RECORD_LEN)?;
        let inode = rec.u64(record_at::INODE)?;
        let family = rec.u16(record_at::FAMILY)?;
        let ip = |at: usize| rec.ip(family, at);
        let nonagle = rec.u8(record_at::NONAGLE)?;
        let (lport, rport) = (rec.u16(record_at::LPORT)?, rec.u16(record_at::RPORT)?);
        let mss = rec.u32(record_at::MSS)?;
        // Records on a socket carry its inode; the others (waits, forks) none.
        let facts = (inode != 0).then(|| SocketFacts {
            inode: Some(inode),
            local: ip(record_at::SADDR).map(|a| SocketAddr::new(a, lport)),
            // An unconnected socket has port 0 for its peer.
            remote: ip(record_at::DADDR)
                .filter(|_| rport != 0)
                .map(|a| SocketAddr::new(a, rport)),
            nodelay: nonagle & TCP_NAGLE_OFF != 0,
            cork: nonagle & TCP_NAGLE_CORK != 0,
            mss: (mss > 0).then_some(u64::from(mss)),
            queue: None,
        });
        Some(Record {
            ts_ns: rec.u64(record_at::TS_NS)?,
            ret: rec.u64(record_at::RET)? as i64,
            actor: Actor {
                tid: rec.u32(record_at::TID)?,
                tgid: rec.u32(record_at::TGID)?,
            },
            fd: rec.u32(record_at::FD)? as i32,
            arg: rec.u32(record_at::ARG)?,
            value: rec.u32(record_at::VALUE)?,
            kind: rec.u8(record_at::KIND)?,
            flags: rec.u8(record_at::FLAGS)?,
            wait: rec.u8(record_at::WAIT)?,
            facts,
            data: rec.bytes(record_at::DATA, 64)?.try_into().ok()?,
            stacks,
        })
    }

    /// The fds a wait waits on for reading; `None` when it does not name them all (epoll, or
    /// more than the record holds): every socket of the thread.
    fn readable(&self) -> Option<Vec<i32>> {
        if self.flags & FLAG_OVERFLOW != 0 {
            return None;
        }
        match self.wait {
            WAIT_POLL => {
                let entries = (self.arg as usize).min(self.data.len() / 8);
                Some(poll_readable(&self.data[..entries * 8]))
            }
            WAIT_SELECT if self.flags & FLAG_NO_READFDS != 0 => Some(Vec::new()),
            WAIT_SELECT => Some(select_readable(&self.data, u64::from(self.arg))),
            _ => None,
        }
    }
}

/// Why the tracepoint route cannot run here, before trying: the architecture (the programs
/// read x86-64 syscall registers), the capabilities, or the kernel's BTF.
pub(crate) fn unavailable() -> Option<String> {
    if !cfg!(target_arch = "x86_64") {
        return Some("its BPF programs are built for x86-64 syscalls only".into());
    }
    let has = |cap| privilege::has_effective_cap(cap).unwrap_or(false);
    let allowed = has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON));
    if !allowed {
        return Some(
            "it needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN, or root), which tcpstall does \
             not have"
                .into(),
        );
    }
    if !std::path::Path::new("/sys/kernel/btf/vmlinux").exists() {
        return Some(
            "the kernel has no BTF (/sys/kernel/btf/vmlinux, CONFIG_DEBUG_INFO_BTF)".into(),
        );
    }
    None
}

/// Why process `pid` cannot be followed through the tracepoints when the kernel allows them:
/// it runs a 32-bit program ([`is_32_bit`], on /proc/PID/exe).
pub(crate) fn unavailable_for(pid: u32) -> Option<String> {
    is_32_bit(std::path::Path::new(&format!("/proc/{pid}/exe"))).then(|| {
        format!(
            "pid {pid} runs a 32-bit program, whose syscall numbers its BPF programs do not read"
        )
    })
}

/// Why the program at `path` cannot be followed through the tracepoints once started: it is a
/// 32-bit program ([`is_32_bit`]).
pub(crate) fn unavailable_for_program(path: &std::path::Path) -> Option<String> {
    is_32_bit(path).then(|| {
        format!(
            "{} is a 32-bit program, whose syscall numbers its BPF programs do not read",
            path.display()
        )
    })
}

/// Whether the file at `path` is a 32-bit ELF program, which makes its syscalls with other
/// numbers (arch/x86/entry/syscalls/syscall_32.tbl) than the programs read. Its ELF class;
/// an unreadable file, or a script (its interpreter is what runs), is left to the programs.
fn is_32_bit(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 5];
    let read = std::fs::File::open(path).and_then(|mut exe| exe.read_exact(&mut head));
    // EI_CLASS 1: ELFCLASS32.
    read.is_ok() && head[..4] == *b"\x7fELF" && head[4] == 1
}

/// Why loading failed, in the words of `trace` (the loader's own errors speak of `watch`).
pub(crate) fn load_failure(err: &KernelError) -> String {
    // The verifier's refusal comes as EACCES with its whole log: its last lines say why.
    let text = err.to_string();
    if let Some((head, log)) = text.split_once("Verifier output:") {
        let program = head.split(':').next().unwrap_or("a program").trim();
        // The log ends with its statistics, after the refusal itself.
        let lines: Vec<&str> = log
            .lines()
            .map(str::trim)
            .take_while(|l| !l.starts_with("verification time"))
            .filter(|l| !l.is_empty())
            .collect();
        let why = lines[lines.len().saturating_sub(2)..].join("; ");
        return format!("the kernel's verifier refused its program ({program}: {why})");
    }
    match err {
        KernelError::NotAllowed(why) => format!(
            "the kernel refused its BPF programs ({why}): it needs CAP_BPF and CAP_PERFMON and \
             a kernel whose lockdown allows BPF tracepoints"
        ),
        KernelError::NoBtf(why) => format!("the kernel has no BTF ({why})"),
        KernelError::Hook { hook, why } => {
            format!("the kernel lacks the {hook} tracepoint or refused its program ({why})")
        }
        KernelError::Load(why) => format!("its BPF programs could not be loaded ({why})"),
    }
}

/// The loaded programs and the maps user space reads and writes.
pub(crate) struct KernelTracer {
    _bpf: Ebpf,
    /// The programs take the call stacks of held sends.
    stacks: bool,
    ring: RingBuf<MapData>,
    targets: BpfHashMap<MapData, u32, u8>,
    counts: PerCpuArray<MapData, u64>,
}

impl KernelTracer {
    /// Loads the programs and attaches them, following no process yet ([`Self::follow`]);
    /// `stacks`: they take the call stacks of held sends.
    pub fn open(stacks: bool) -> Result<KernelTracer, KernelError> {
        let mut bpf = load_btf_tracepoints_with(
            TRACE_BPF,
            &TRACEPOINTS,
            &[(TAKE_STACKS_GLOBAL, u64::from(stacks))],
            if stacks {
                &STACK_SIZES
            } else {
                &NO_STACK_SIZES
            },
        )?;
        let map = |bpf: &mut Ebpf, name: &str| {
            bpf.take_map(name)
                .ok_or_else(|| KernelError::Load(format!("the object has no map `{name}`")))
        };
        let ring = RingBuf::try_from(map(&mut bpf, "records")?)
            .map_err(|e| KernelError::Load(chain(&e)))?;
        let targets = BpfHashMap::try_from(map(&mut bpf, "targets")?)
            .map_err(|e| KernelError::Load(chain(&e)))?;
        let counts = PerCpuArray::try_from(map(&mut bpf, "counts")?)
            .map_err(|e| KernelError::Load(chain(&e)))?;
        Ok(KernelTracer {
            _bpf: bpf,
            stacks,
            ring,
            targets,
            counts,
        })
    }

    /// Follows process `pid` from its next syscall, and the processes it starts from then on
    /// (`sched_process_fork` adds them).
    pub fn follow(&mut self, pid: u32) -> Result<(), KernelError> {
        self.targets
            .insert(pid, 1, 0)
            .map_err(|e| KernelError::Load(chain(&e)))
    }

    /// Records lost because the ring was full.
    fn lost(&self) -> u64 {
        self.counts
            .get(&COUNT_RING_FULL, 0)
            .map(|v| v.iter().sum::<u64>())
            .unwrap_or(0)
    }
}

/// The [`Inspector`] of this route: what the records said of each fd, last.
#[derive(Default)]
struct RecordedFacts {
    facts: HashMap<(u32, i32), SocketFacts>,
}

impl Inspector for RecordedFacts {
    fn inspect(&mut self, pid: u32, fd: i32) -> Probe {
        match self.facts.get(&(pid, fd)) {
            Some(facts) => Probe::Tcp(facts.clone()),
            // The kernel sends records on TCP sockets only; an fd without one is unknown.
            None => Probe::Unknown,
        }
    }
}

/// Turns the records into the model's events.
struct Feeder {
    model: SocketModel<RecordedFacts>,
    threads: HashSet<u32>,
    /// The fds each thread's current wait named, for its end.
    waits: HashMap<u32, Option<Vec<i32>>>,
    /// Followed processes: the target and the children the kernel added.
    processes: HashSet<u32>,
    syscalls: u64,
    /// CLOCK_MONOTONIC (the records' clock) now, and the same moment as an Instant.
    base: (u64, Instant),
    /// One jiffy (CONFIG_HZ), for a tail that left before the record told it; `None` when
    /// the kernel's config is unreadable.
    jiffy: Option<Duration>,
    /// Names the examples' call stacks, when taken.
    namer: Option<StackNamer>,
}

impl Feeder {
    fn at(&self, ts_ns: u64) -> Instant {
        let (ns, instant) = self.base;
        if ts_ns >= ns {
            instant + Duration::from_nanos(ts_ns - ns)
        } else {
            instant
                .checked_sub(Duration::from_nanos(ns - ts_ns))
                .unwrap_or(instant)
        }
    }

    /// A thread seen for the first time: the model starts it (a process new to it with an
    /// empty fd table, or its parent's when the fork was seen).
    fn start(&mut self, actor: Actor, parent: Option<u32>, at: Instant) {
        if self.threads.insert(actor.tid) {
            let event = Event::ThreadStarted { parent };
            self.model.apply(actor, at, event);
        }
    }

    fn take(&mut self, r: Record) {
        let at = self.at(r.ts_ns);
        let actor = r.actor;
        if r.kind == REC_RELEASED {
            // From the softirq that saw the ACK: the sender named is the hold's, and maybe
            // gone since; no thread to start. A tail gone `arg` jiffies before needs the
            // jiffy, else its time is unknown (the read's end then bounds the hold).
            let left = if r.flags & FLAG_LATE != 0 {
                self.jiffy
                    .and_then(|j| at.checked_sub(j.saturating_mul(r.arg)))
            } else {
                Some(at)
            };
            if let Some(left) = left.filter(|_| self.threads.contains(&actor.tid)) {
                self.model
                    .apply(actor, left, Event::HeldTailLeft { fd: r.fd });
            }
            return;
        }
        if r.kind == REC_FORK {
            self.processes.insert(actor.tgid);
            self.start(actor, Some(r.arg), at);
            return;
        }
        self.start(actor, None, at);
        if let Some(facts) = &r.facts {
            self.model
                .inspector_mut()
                .facts
                .insert((actor.tgid, r.fd), facts.clone());
        }
        let event = match r.kind {
            REC_SENT => Event::Sent {
                fd: r.fd,
                bytes: r.ret.max(0) as u64,
                more: r.flags & FLAG_MORE != 0,
                held: Some(r.flags & FLAG_HELD != 0),
            },
            // connect or accept: the model opens a socket at this fd, as for an accept.
            REC_OPENED => Event::Accepted { fd: r.fd },
            REC_READ => Event::Read {
                fd: r.fd,
                returned: r.flags & FLAG_EAGAIN == 0,
            },
            REC_WAIT_BEGUN => {
                let readable = r.readable();
                self.waits.insert(actor.tid, readable.clone());
                Event::WaitBegun { readable }
            }
            REC_WAIT_ENDED => {
                let readable = self.waits.remove(&actor.tid).unwrap_or(None);
                Event::WaitEnded { readable }
            }
            REC_CLOSED => {
                self.model.apply(actor, at, Event::Closed { fd: r.fd });
                self.model.inspector_mut().facts.remove(&(actor.tgid, r.fd));
                self.syscalls += 1;
                return;
            }
            REC_DUP => {
                let to = r.arg as i32;
                if let Some(facts) = &r.facts {
                    self.model
                        .inspector_mut()
                        .facts
                        .insert((actor.tgid, to), facts.clone());
                }
                Event::Duplicated { from: r.fd, to }
            }
            REC_OPTION => {
                let on = r.value != 0;
                let option = match r.arg as i32 {
                    libc::TCP_NODELAY => TcpOption::NoDelay(on),
                    libc::TCP_CORK => TcpOption::Cork(on),
                    _ => TcpOption::QuickAck(on),
                };
                Event::OptionSet { fd: r.fd, option }
            }
            REC_EXEC => {
                self.threads.remove(&r.arg);
                Event::Exec { former: r.arg }
            }
            REC_EXIT => {
                self.threads.remove(&actor.tid);
                self.waits.remove(&actor.tid);
                self.model.apply(actor, at, Event::ThreadExited);
                return;
            }
            _ => return,
        };
        if matches!(
            r.kind,
            REC_SENT | REC_READ | REC_WAIT_BEGUN | REC_DUP | REC_OPTION
        ) {
            self.syscalls += 1;
        }
        self.model.apply(actor, at, event);
        if let Some(stacks) = r.stacks {
            self.model.held_send_stacks(actor, r.fd, stacks);
        }
        // Named now, while the writer runs: its maps are read.
        if let Some(namer) = &self.namer {
            self.model.name_examples(|raw| call_sites(namer, raw));
        }
    }
}

/// The named call sites of an example's last send: its stacks as the kernel took them, or
/// why there are none.
fn call_sites(namer: &StackNamer, raw: Option<&RawSites>) -> CallSites {
    match raw {
        Some(raw) => namer.name_sites(raw),
        None => {
            let none = CallStack {
                frames: Vec::new(),
                missing: Some(NOT_HELD.into()),
            };
            CallSites {
                held: none.clone(),
                previous: Some(none),
            }
        }
    }
}

/// Whether process `pid` has ended (gone, or a zombie waiting to be reaped).
fn ended(pid: u32) -> bool {
    !procfs::process_exists(pid)
        || procfs::status_text(pid, "State")
            .map_or(true, |s| s.starts_with('Z') || s.starts_with('X'))
}

/// Follows running process `pid` through the kernel's tracepoints for at most `limit`, or
/// until it and the processes it started have ended, or Ctrl-C.
pub(crate) fn trace_process(
    mut kernel: KernelTracer,
    pid: u32,
    limit: Duration,
) -> anyhow::Result<Traced> {
    let guard = SignalGuard::install()?;
    kernel.follow(pid).map_err(|e| anyhow!(load_failure(&e)))?;
    eprintln!(
        "tcpstall: following pid {pid} through the kernel's tracepoints (it is never stopped); \
         {} s, its end or Ctrl-C ends the trace",
        limit.as_secs_f64()
    );
    let traced = follow(kernel, pid, None, Some(limit));
    drop(guard);
    traced
}

/// Runs `command` followed through the kernel's tracepoints from its first syscall, never
/// stopped: the child waits before exec ([`launch::start_held`]) while the programs load and
/// its process is put in their map, then execs. The trace ends when it and every process it
/// started have ended, or at `limit` or Ctrl-C (then they are killed, as under ptrace). Where
/// the kernel refuses the programs, the child goes on under ptrace instead, saying why.
/// `stacks`: the examples carry their writes' call stacks.
pub(crate) fn trace_command(
    command: &[String],
    limit: Option<Duration>,
    stacks: bool,
) -> anyhow::Result<Traced> {
    let guard = SignalGuard::install()?;
    let held = launch::start_held(command, &guard)?;
    let loaded = KernelTracer::open(stacks).and_then(|mut kernel| {
        kernel.follow(held.pid())?;
        Ok(kernel)
    });
    match loaded {
        Ok(kernel) => {
            let root = held.release()?;
            let traced = follow(kernel, root, Some(Launched::new(root)), limit);
            drop(guard);
            traced
        }
        Err(err) => {
            note_ptrace_instead(&command[0], &load_failure(&err));
            let root = held.release_to_ptrace()?;
            tracer::trace_seized(root, limit, guard)
        }
    }
}

/// The one line said when a command is followed with ptrace because the tracepoints cannot
/// be used, and `why`.
pub(crate) fn note_ptrace_instead(program: &str, why: &str) {
    eprintln!(
        "tcpstall: cannot follow {program:?} through the kernel's tracepoints, which never stop \
         it: {why}; following it with ptrace instead, which stops it at its socket syscalls \
         (--ptrace chooses ptrace without this note)"
    );
}

/// The command `trace -- CMD` started: its exit status, once reaped, and a pidfd that wakes
/// the loop as it ends.
struct Launched {
    pid: u32,
    pidfd: Option<PidFd>,
    exit_status: Option<i32>,
}

impl Launched {
    fn new(pid: u32) -> Launched {
        Launched {
            pid,
            pidfd: PidFd::open(pid).ok(),
            exit_status: None,
        }
    }

    /// Reaps the command if it has ended (waits for it when `block`): true once it has.
    fn reap(&mut self, block: bool) -> bool {
        if self.exit_status.is_some() {
            return true;
        }
        let flags = (!block).then_some(WaitPidFlag::WNOHANG);
        loop {
            match waitpid(Pid::from_raw(self.pid as i32), flags) {
                Ok(WaitStatus::Exited(_, code)) => self.exit_status = Some(code),
                Ok(WaitStatus::Signaled(_, sig, _)) => self.exit_status = Some(128 + sig as i32),
                Err(Errno::EINTR) if block => continue,
                // ECHILD cannot come from our own child; anything else leaves it unknown.
                _ => {}
            }
            return self.exit_status.is_some();
        }
    }

    /// Sleeps for at most `timeout`, waking as the command ends.
    fn wait(&self, timeout: Duration) {
        match &self.pidfd {
            Some(pidfd) if self.exit_status.is_none() => {
                let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
                let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
                let _ = poll(&mut fds, PollTimeout::from(ms));
            }
            _ => std::thread::sleep(timeout),
        }
    }
}

/// Reads the ring until the followed processes have ended, `limit` or Ctrl-C; `launched` is the
/// command of `trace -- CMD`, reaped for its exit status and killed with every followed
/// process when the trace is cut short.
fn follow(
    mut kernel: KernelTracer,
    pid: u32,
    mut launched: Option<Launched>,
    limit: Option<Duration>,
) -> anyhow::Result<Traced> {
    let started = Instant::now();
    let mut model = SocketModel::new(RecordedFacts::default());
    if kernel.stacks {
        model.keep_stacks();
    }
    let mut feeder = Feeder {
        model,
        threads: HashSet::new(),
        waits: HashMap::new(),
        processes: HashSet::from([pid]),
        syscalls: 0,
        base: (clock_ns(libc::CLOCK_MONOTONIC) as u64, Instant::now()),
        jiffy: crate::host::kernel::KernelFacts::read().jiffy(),
        namer: kernel.stacks.then(StackNamer::default),
    };
    let mut last_check = Instant::now();
    let mut interrupted = false;
    loop {
        // Reaped before the ring is read: the forks it made before its end are in the ring.
        let root_ended = launched.as_mut().is_some_and(|l| l.reap(false));
        if root_ended {
            feeder.processes.remove(&pid);
        }
        while let Some(item) = kernel.ring.next() {
            if let Some(record) = Record::parse(&item) {
                feeder.take(record);
            }
        }
        if signals::stop_requested() || limit.is_some_and(|l| started.elapsed() >= l) {
            interrupted = true;
            break;
        }
        if root_ended || last_check.elapsed() >= ALIVE_CHECK {
            last_check = Instant::now();
            let gone: Vec<u32> = feeder
                .processes
                .iter()
                .copied()
                .filter(|&p| ended(p))
                .collect();
            for p in gone {
                feeder.processes.remove(&p);
                // A pid used again later is not followed.
                let _ = kernel.targets.remove(&p);
            }
            if feeder.processes.is_empty() {
                break;
            }
        }
        match &launched {
            Some(l) => l.wait(POLL),
            None => std::thread::sleep(POLL),
        }
    }
    let exit_status = launched.as_mut().and_then(|l| {
        if interrupted {
            // The command and what it started end with the trace, as under ptrace.
            for &p in feeder.processes.iter().chain([&l.pid]) {
                let _ = signal::kill(Pid::from_raw(p as i32), Signal::SIGKILL);
            }
        }
        l.reap(true);
        l.exit_status
    });
    // What the kernel recorded before the end.
    while let Some(item) = kernel.ring.next() {
        if let Some(record) = Record::parse(&item) {
            feeder.take(record);
        }
    }
    let lost = kernel.lost();
    if lost > 0 {
        eprintln!(
            "tcpstall: {lost} syscall records were lost (the kernel's ring was full): the \
             counts are low"
        );
    }
    drop(kernel);
    Ok(Traced {
        mode: Mode::Tracepoints,
        sockets: feeder.model.into_sockets(),
        syscalls: feeder.syscalls,
        exit_status,
        elapsed: started.elapsed(),
        interrupted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_reads_struct_record_where_the_c_source_lays_it_out() {
        use record_at::*;
        crate::host::c_layout::assert_layout(
            "trace.bpf.c",
            "record",
            RECORD_LEN,
            &[
                ("ts_ns", TS_NS),
                ("inode", INODE),
                ("ret", RET),
                ("tid", TID),
                ("tgid", TGID),
                ("fd", FD),
                ("arg", ARG),
                ("value", VALUE),
                ("mss", MSS),
                ("kind", KIND),
                ("flags", FLAGS),
                ("nonagle", NONAGLE),
                ("wait", WAIT),
                ("family", FAMILY),
                ("lport", LPORT),
                ("rport", RPORT),
                ("saddr", SADDR),
                ("daddr", DADDR),
                ("data", DATA),
            ],
        );
    }

    #[test]
    fn a_held_record_carries_the_stacks_after_the_record() {
        use crate::host::call_stack::user_stack_at;
        let previous = RECORD_LEN + USER_STACK_LEN;
        crate::host::c_layout::assert_layout(
            "trace.bpf.c",
            "held_record",
            HELD_RECORD_LEN,
            &[
                ("r.ts_ns", record_at::TS_NS),
                ("stacks.held.ips", RECORD_LEN + user_stack_at::IPS),
                ("stacks.held.frames", RECORD_LEN + user_stack_at::FRAMES),
                ("stacks.previous.ips", previous + user_stack_at::IPS),
                ("stacks.previous.top", previous + user_stack_at::TOP),
                ("stacks.previous.tgid", previous + user_stack_at::TGID),
                ("stacks.previous.frames", previous + user_stack_at::FRAMES),
                (
                    "stacks.previous.line_only",
                    previous + user_stack_at::LINE_ONLY,
                ),
            ],
        );
        let mut held = record(REC_SENT);
        held.resize(HELD_RECORD_LEN, 0);
        let frames = RECORD_LEN + user_stack_at::FRAMES;
        held[frames..frames + 4].copy_from_slice(&2u32.to_ne_bytes());
        held[RECORD_LEN..RECORD_LEN + 8].copy_from_slice(&0x5555_0000_1000u64.to_ne_bytes());
        let stacks = Record::parse(&held)
            .and_then(|r| r.stacks)
            .expect("a held record's stacks");
        assert_eq!(
            stacks.held.map(|s| s.ips),
            Some(vec![0x5555_0000_1000]),
            "a walk ends at a null return address"
        );
        assert_eq!(stacks.previous, None, "the write before not seen");
        let plain = Record::parse(&record(REC_SENT)).expect("parses");
        assert_eq!(plain.stacks, None);
    }

    fn record(kind: u8) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_LEN];
        r[0..8].copy_from_slice(&5_000u64.to_ne_bytes());
        r[8..16].copy_from_slice(&777u64.to_ne_bytes());
        r[16..24].copy_from_slice(&76i64.to_ne_bytes());
        r[24..28].copy_from_slice(&101u32.to_ne_bytes());
        r[28..32].copy_from_slice(&100u32.to_ne_bytes());
        r[32..36].copy_from_slice(&5i32.to_ne_bytes());
        r[44..48].copy_from_slice(&1448u32.to_ne_bytes());
        r[48] = kind;
        r[49] = FLAG_MORE | FLAG_HELD;
        r[50] = TCP_NAGLE_CORK;
        r[52..54].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        r[54..56].copy_from_slice(&40000u16.to_ne_bytes());
        r[56..58].copy_from_slice(&8080u16.to_ne_bytes());
        r[64..68].copy_from_slice(&[127, 0, 0, 1]);
        r[80..84].copy_from_slice(&[127, 0, 0, 2]);
        r
    }

    #[test]
    fn a_send_record_carries_the_socket_as_the_kernel_had_it() {
        let r = Record::parse(&record(REC_SENT)).expect("parses");
        assert_eq!(
            r.actor,
            Actor {
                tid: 101,
                tgid: 100
            }
        );
        assert_eq!((r.fd, r.ret, r.kind), (5, 76, REC_SENT));
        let facts = r.facts.expect("a socket record");
        assert_eq!(facts.inode, Some(777));
        assert_eq!(facts.local, Some("127.0.0.1:40000".parse().expect("addr")));
        assert_eq!(facts.remote, Some("127.0.0.2:8080".parse().expect("addr")));
        assert!(facts.cork && !facts.nodelay);
        assert_eq!(facts.mss, Some(1448));
        assert!(Record::parse(&record(REC_SENT)[..100]).is_none(), "short");
    }

    #[test]
    fn a_wait_names_the_fds_read_from_its_arguments() {
        let mut r = record(REC_WAIT_BEGUN);
        r[8..16].copy_from_slice(&0u64.to_ne_bytes());
        r[49] = 0;
        r[51] = WAIT_POLL;
        r[36..40].copy_from_slice(&2u32.to_ne_bytes());
        let pollfds = [(7i32, libc::POLLOUT), (9, libc::POLLIN)];
        for (i, (fd, events)) in pollfds.iter().enumerate() {
            r[96 + i * 8..100 + i * 8].copy_from_slice(&fd.to_ne_bytes());
            r[100 + i * 8..102 + i * 8].copy_from_slice(&events.to_ne_bytes());
        }
        let wait = Record::parse(&r).expect("parses");
        assert!(wait.facts.is_none());
        assert_eq!(wait.readable(), Some(vec![9]));
        r[49] = FLAG_OVERFLOW;
        assert_eq!(Record::parse(&r).expect("parses").readable(), None);
        r[49] = FLAG_NO_READFDS;
        r[51] = WAIT_SELECT;
        assert_eq!(Record::parse(&r).expect("parses").readable(), Some(vec![]));
    }

    #[test]
    fn a_64_bit_program_can_be_followed() {
        assert_eq!(unavailable_for(std::process::id()), None);
    }

    #[test]
    fn the_embedded_object_has_every_program() {
        for name in TRACEPOINTS {
            let section = format!("tp_btf/{name}");
            assert!(
                TRACE_BPF
                    .windows(section.len())
                    .any(|w| w == section.as_bytes()),
                "{section} missing from bpf/trace.bpf.o"
            );
        }
    }
}
