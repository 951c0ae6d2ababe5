//! `tcpstall trace`: follows a program's socket syscalls and names write-write-read sequences:
//! two or more sends on a socket with Nagle on, the later ones small, then a wait for the peer.
//! On Linux the small send waits in the kernel for the ACK of the earlier one, which the peer
//! delays by 40 ms or more (`tcp_nagle_check` meeting `tcp_send_delayed_ack`).

use std::io::{self, Write};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Context};

use super::tracer::{self, Mode, Traced};
use super::{kernel_trace, launch, AccessError};
use crate::host::procfs;
use crate::host::runtime::RuntimeCache;
use crate::report::trace::{write_json, write_text, PeerProcess, SocketReport, TraceReport};
use crate::Outcome;

/// How long `trace -p` follows a process when `--duration` is not given.
const DEFAULT_ATTACH_SECONDS: f64 = 10.0;

pub use crate::args::trace::TraceArgs;

fn seconds(value: f64) -> anyhow::Result<Duration> {
    if !value.is_finite() || value <= 0.0 || value > 7.0 * 86400.0 {
        bail!("--duration must be a number of seconds above 0 and at most a week, not {value}");
    }
    Ok(Duration::from_secs_f64(value))
}

/// Where the report goes.
enum ReportTo<'a> {
    /// `--output FILE`, created once the trace is over.
    File(&'a std::path::Path),
    /// Standard output, checked before the trace ([`report_stdout`]).
    Stdout(std::fs::File),
}

/// Runs `tcpstall trace`.
pub fn run(args: &TraceArgs) -> anyhow::Result<Outcome> {
    let limit = match args.pid {
        Some(_) => Some(seconds(args.duration.unwrap_or(DEFAULT_ATTACH_SECONDS))?),
        None => args.duration.map(seconds).transpose()?,
    };
    let destination = match &args.output {
        Some(path) => ReportTo::File(path),
        None => ReportTo::Stdout(report_stdout()?),
    };
    let traced = match (args.pid, limit) {
        (Some(pid), Some(limit)) => trace_running(pid, limit, args)?,
        _ => trace_command(&args.command, limit, args)?,
    };
    let tracepoints = traced.mode == Mode::Tracepoints;
    let mut runtimes = RuntimeCache::default();
    let mut sockets: Vec<SocketReport> = traced
        .sockets
        .into_iter()
        .filter(|s| s.sends > 0 || s.reads > 0)
        .map(|s| {
            let held = s.kernel_held_sends;
            let mut report = SocketReport::new(s);
            report.kernel_holds = tracepoints.then_some(held);
            if report.socket.write_write_read > 0 {
                report.runtime = runtimes.runtime_of(report.socket.pid);
            }
            // The ACKing peer, when its end is a socket of this host still open: the advice
            // to cap its delayed ACK names it.
            if report.socket.waits_over_30ms > 0 {
                if let (Some(local), Some(remote)) = (report.socket.local, report.socket.remote) {
                    report.peer_process = procfs::connection_owner(remote, local)
                        .map(|(pid, command)| PeerProcess { pid, command });
                }
            }
            report
        })
        .collect();
    sockets.sort_by_key(|s| std::cmp::Reverse(s.socket.write_write_read));
    let report = TraceReport {
        command: args.pid.is_none().then(|| args.command.clone()),
        pid: args.pid,
        method: match traced.mode {
            Mode::Seccomp => "seccomp",
            Mode::Attached => "ptrace_syscall",
            Mode::Tracepoints => "tracepoints",
        },
        duration_s: traced.elapsed.as_secs_f64(),
        syscalls: traced.syscalls,
        exit_status: traced.exit_status,
        interrupted: traced.interrupted,
        write_write_read: sockets.iter().map(|s| s.socket.write_write_read).sum(),
        sockets,
    };
    let write = |out: &mut dyn Write| -> io::Result<()> {
        let mut out = io::BufWriter::new(out);
        if args.json {
            write_json(&report, &mut out)?;
        } else {
            write_text(&report, &mut out)?;
        }
        out.flush()
    };
    match destination {
        ReportTo::File(path) => std::fs::File::create(path)
            .and_then(|mut file| write(&mut file))
            .with_context(|| format!("cannot write the report to {}", path.display()))?,
        ReportTo::Stdout(mut stdout) => {
            write(&mut stdout).context("cannot write the report to standard output")?
        }
    }
    Ok(if report.write_write_read > 0 {
        Outcome::StallsFound
    } else {
        Outcome::Done
    })
}

/// Follows running process `pid`: through the kernel's tracepoints, which never stop it, unless
/// `--ptrace` or the kernel does not allow them (then says why on standard error), else
/// with ptrace.
fn trace_running(pid: u32, limit: Duration, args: &TraceArgs) -> anyhow::Result<Traced> {
    if !procfs::process_exists(pid) {
        return Err(AccessError::NoSuchProcess { pid }.into());
    }
    if let Some(thread) = AccessError::thread_of(pid) {
        return Err(thread.into());
    }
    // Tcpstall itself, a kernel thread, a zombie: refused whichever way it would be followed.
    if let Some(cause) = crate::host::access::refusal_cause(pid) {
        let action = "follow the syscalls".to_string();
        return Err(AccessError::Refused { action, pid, cause }.into());
    }
    if !args.ptrace {
        let why = match kernel_trace::unavailable().or_else(|| kernel_trace::unavailable_for(pid)) {
            Some(why) => why,
            None => match kernel_trace::KernelTracer::open(!args.no_stacks) {
                Ok(kernel) => return kernel_trace::trace_process(kernel, pid, limit),
                Err(err) => kernel_trace::load_failure(&err),
            },
        };
        eprintln!(
            "tcpstall: cannot follow pid {pid} through the kernel's tracepoints, which never stop \
             it: {why}; following it with ptrace instead, which stops it at every syscall \
             (--ptrace chooses ptrace without this note)"
        );
    }
    tracer::trace_process(pid, limit)
}

/// Runs `command` followed through the kernel's tracepoints from its first syscall, never
/// stopped, unless `--ptrace` or the kernel does not allow them (then says why on standard
/// error), else under ptrace with the seccomp filter.
fn trace_command(
    command: &[String],
    limit: Option<Duration>,
    args: &TraceArgs,
) -> anyhow::Result<Traced> {
    // A missing program is reported before anything is loaded or started.
    let path = launch::program_path(command)?;
    if args.ptrace {
        return tracer::trace_command(command, limit);
    }
    match kernel_trace::unavailable().or_else(|| kernel_trace::unavailable_for_program(&path)) {
        Some(why) => {
            kernel_trace::note_ptrace_instead(&command[0], &why);
            tracer::trace_command(command, limit)
        }
        None => kernel_trace::trace_command(command, limit, !args.no_stacks),
    }
}

/// Whether fd 1 was closed when tcpstall started. The Rust runtime puts /dev/null on a closed
/// standard fd before `main` (`std::sys::pal::unix::init`), and the report would go there
/// without a word, so this is looked at earlier, by a constructor the C runtime runs.
static STDOUT_CLOSED_AT_START: AtomicBool = AtomicBool::new(false);

extern "C" fn note_closed_stdout() {
    // SAFETY: fcntl on a plain fd number; nothing else runs yet.
    if unsafe { libc::fcntl(libc::STDOUT_FILENO, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED_AT_START.store(true, Ordering::Relaxed);
    }
}

#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STDOUT: extern "C" fn() = note_closed_stdout;

/// Standard output for the report, checked before the trace so that a report with nowhere to
/// go is an error rather than lost: closed when tcpstall started (`>&-`), or open for reading
/// only (the standard library would drop the bytes without a word: it takes EBADF on standard
/// output for a sink). Written through a duplicate of fd 1, so that a write error reaches the
/// caller: EPIPE, a reader that went away (which `main` ends quietly on), or any other.
fn report_stdout() -> anyhow::Result<std::fs::File> {
    const FIX: &str = "give --output FILE, or run with standard output open for writing";
    if STDOUT_CLOSED_AT_START.load(Ordering::Relaxed) {
        bail!("standard output is closed, so the report would be lost: {FIX}");
    }
    // SAFETY: fd 1 is only borrowed for the calls below, which fail cleanly when it is closed.
    let stdout = unsafe { BorrowedFd::borrow_raw(libc::STDOUT_FILENO) };
    match nix::fcntl::fcntl(stdout, nix::fcntl::FcntlArg::F_GETFL) {
        Err(nix::errno::Errno::EBADF) => {
            bail!("standard output is closed, so the report would be lost: {FIX}")
        }
        Err(err) => {
            return Err(io::Error::from_raw_os_error(err as i32))
                .context("cannot look at standard output")
        }
        Ok(flags) if flags & libc::O_ACCMODE == libc::O_RDONLY => {
            bail!("standard output is open for reading only, so the report would be lost: {FIX}")
        }
        Ok(_) => {}
    }
    let dup = stdout
        .try_clone_to_owned()
        .context("cannot duplicate standard output")?;
    Ok(std::fs::File::from(dup))
}
