//! Starting the command of `trace -- CMD` under the tracer: fork, the child stops itself, the
//! tracer seizes it (PTRACE_SEIZE) with its options, the child takes back the signal state it
//! would have untraced, installs the seccomp filter and execs.

use std::os::fd::AsRawFd;

use anyhow::{anyhow, bail, Context};
use nix::errno::Errno;
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::{self, SigAction, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use super::seccomp;
use super::signals::{self, SignalGuard};

/// An errno from nix as an io::Error, for the error chain.
pub(crate) fn nix_io(err: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(err as i32)
}

/// The search path execvp uses when PATH is unset (glibc's `confstr(_CS_PATH)`).
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// Finds `program` the way execvp will, so that a missing one is reported before the child
/// starts (once the filter is in, the child could not report a failed exec): a name with a
/// slash is that path, with no PATH search; a bare name is looked up in PATH. The error says
/// what is wrong, in words.
fn find_program(program: &str) -> Result<std::path::PathBuf, String> {
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return runnable(&path).map(|()| path);
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into());
    let candidates: Vec<std::path::PathBuf> = std::env::split_paths(&search)
        .map(|dir| dir.join(program))
        .collect();
    if let Some(found) = candidates.iter().find(|p| runnable(p).is_ok()) {
        return Ok(found.clone());
    }
    // Found but not runnable is worth naming: it is the likelier mistake.
    if let Some((path, why)) = candidates
        .iter()
        .find_map(|p| p.exists().then(|| runnable(p).err().map(|why| (p, why)))?)
    {
        return Err(format!("{} (found in PATH) {why}", path.display()));
    }
    Err(format!(
        "no such program in PATH ({}); give its path if it is elsewhere",
        search.to_string_lossy()
    ))
}

/// Whether execve could run the file at `path`, or why not.
fn runnable(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = path.metadata().map_err(|err| match err.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (a directory on the way is not searchable)".to_string()
        }
        _ => err.to_string(),
    })?;
    if meta.is_dir() {
        return Err("is a directory".to_string());
    }
    if !meta.is_file() {
        return Err("is not a regular file".to_string());
    }
    let mode = meta.permissions().mode();
    if mode & 0o111 == 0 {
        return Err(format!(
            "is not executable (mode {:o}; chmod +x it)",
            mode & 0o7777
        ));
    }
    // The execute bits may be someone else's: ask the kernel as execve will.
    nix::unistd::access(path, nix::unistd::AccessFlags::X_OK)
        .map_err(|err| format!("permission denied ({err})"))
}

/// Where the child failed before its program ran, as it reports through the pipe.
const STAGE_SECCOMP: u32 = 2;
const STAGE_EXEC: u32 = 3;

/// Starts `command` seized by this process, the tracer; returns its pid once the exec
/// succeeded (the child is then stopped at PTRACE_EVENT_EXEC), or why it failed (the child is
/// then gone).
///
/// The child is forked by hand rather than with `std::process::Command`: `Command::spawn`
/// waits for the exec inside the call, while the child must be seized by the tracer first; and
/// once the filter is in, a failed exec could only report through a filtered `write` that
/// nobody would answer. So the child stops itself, the tracer seizes it with its options, and
/// then the child installs the filter and execs; a failure at any step comes back through a
/// close-on-exec pipe.
pub(crate) fn start_seized(command: &[String], guard: &SignalGuard) -> anyhow::Result<Pid> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let Some(program) = command.first() else {
        bail!("no command given: use `tcpstall trace -- CMD ARGS` or `tcpstall trace -p PID`");
    };
    let path = find_program(program).map_err(|why| anyhow!("cannot run {program:?}: {why}"))?;
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
                    guard.previous(),
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
    Ok(root)
}

/// The child's side of [`start_seized`]: stop until the tracer has seized it, install the
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

/// Sets up the child of [`start_seized`]: once it has stopped itself, seizes it with the
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
                if signals::stop_requested() {
                    bail!("interrupted before {program:?} started");
                }
            }
            Err(err) => return Err(nix_io(err)).context("waitpid on the traced command"),
        }
    }
}
