//! Starting the command of `trace -- CMD`, two ways. Under ptrace ([`start_seized`]): fork,
//! the child stops itself, the tracer seizes it (PTRACE_SEIZE) with its options, the child
//! takes back the signal state it would have untraced, installs the seccomp filter and execs.
//! Through the tracepoints ([`start_held`]): fork, the child takes back its signal state and
//! waits on a pipe, never stopped, until its pid is followed; then it execs.

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

/// What the child of a launch uses, made before fork: the child may not allocate after it.
struct Prepared {
    program: String,
    path: std::ffi::CString,
    /// Keeps the strings `argv` points into.
    _args: Vec<std::ffi::CString>,
    argv: Vec<*const libc::c_char>,
    /// The child's report of a failure before its program ran: read end, write end
    /// (close-on-exec, so an exec that succeeds closes it).
    report: (std::os::fd::OwnedFd, std::os::fd::OwnedFd),
}

/// Finds the program of `command` (a missing one is reported before anything starts) and
/// prepares its path, arguments and report pipe.
fn prepare(command: &[String]) -> anyhow::Result<Prepared> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    let path = program_path(command)?;
    let program = &command[0];
    let c_path = CString::new(path.as_os_str().as_bytes())
        .with_context(|| format!("cannot run {program:?}: the path holds a NUL byte"))?;
    let c_args = command
        .iter()
        .map(|a| CString::new(a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot run {program:?}: an argument holds a NUL byte"))?;
    let mut argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let report = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(nix_io)
        .context("cannot create a pipe for the traced command")?;
    Ok(Prepared {
        program: program.clone(),
        path: c_path,
        _args: c_args,
        argv,
        report,
    })
}

/// The path `command`'s program would run from, or why it cannot run.
pub(crate) fn program_path(command: &[String]) -> anyhow::Result<std::path::PathBuf> {
    let Some(program) = command.first() else {
        bail!("no command given: use `tcpstall trace -- CMD ARGS` or `tcpstall trace -p PID`");
    };
    find_program(program).map_err(|why| anyhow!("cannot run {program:?}: {why}"))
}

/// The command of `trace -- CMD` forked and waiting, before exec, to be let go
/// ([`HeldChild::release`]); killed and reaped if dropped before.
pub(crate) struct HeldChild {
    pid: Pid,
    program: String,
    /// Closing it without a byte written ends the child before exec.
    release: Option<std::os::fd::OwnedFd>,
    report: std::os::fd::OwnedFd,
}

impl HeldChild {
    /// The child's pid (its program's, once it execs).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// Lets the child exec; returns its pid once its program runs, or why it could not.
    pub fn release(mut self) -> anyhow::Result<u32> {
        self.send(GO_EXEC)?;
        // The report pipe closes on a successful exec; a failure writes its reason first.
        if let Err(err) = exec_outcome(&self.report, &self.program) {
            let _ = waitpid(self.pid, None);
            // Reaped: nothing for Drop to end.
            self.pid = Pid::from_raw(0);
            return Err(err);
        }
        let pid = self.pid();
        self.pid = Pid::from_raw(0);
        Ok(pid)
    }

    /// Lets the child go on under ptrace instead, as [`start_seized`]'s child: it stops, is
    /// seized, installs the seccomp filter and execs. Returns it stopped at its exec, as
    /// [`start_seized`] does.
    pub fn release_to_ptrace(mut self) -> anyhow::Result<Pid> {
        self.send(GO_PTRACE)?;
        let pid = std::mem::replace(&mut self.pid, Pid::from_raw(0));
        seize(pid, &self.program, &self.report)
    }

    /// Writes the child's go, `how` it is to exec.
    fn send(&mut self, how: u8) -> anyhow::Result<()> {
        let release = self.release.take();
        let written = release
            .as_ref()
            .map(|fd| nix::unistd::write(fd, &[how]))
            .transpose()
            .map_err(nix_io)
            .context("cannot let the traced command go")?;
        drop(release);
        if written != Some(1) {
            bail!("cannot let the traced command go: the pipe took nothing");
        }
        Ok(())
    }
}

/// The held child's go: exec now, or under ptrace ([`HeldChild::release_to_ptrace`]).
const GO_EXEC: u8 = b'x';
const GO_PTRACE: u8 = b'p';

impl Drop for HeldChild {
    fn drop(&mut self) {
        if self.pid.as_raw() > 0 {
            // Still before exec: closing the pipe ends it (the read sees end of file).
            self.release = None;
            let _ = signal::kill(self.pid, Signal::SIGKILL);
            let _ = waitpid(self.pid, None);
        }
    }
}

/// Forks the command of `trace -- CMD` for the tracepoints: the child takes back the signal
/// state it would have untraced and waits on a pipe, neither stopped nor traced, until
/// [`HeldChild::release`]; then it execs, so that its program's first syscall comes after its
/// pid was put in the programs' map. It is forked before the programs load, which starts a
/// thread: glibc's first thread installs a handler for its internal signal 33 (SIGSETXID),
/// which a child forked later could not get back ignored, as its parent may have left it.
pub(crate) fn start_held(command: &[String], guard: &SignalGuard) -> anyhow::Result<HeldChild> {
    let prepared = prepare(command)?;
    let filter = seccomp::filter();
    let (release_read, release_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
        .map_err(nix_io)
        .context("cannot create a pipe for the traced command")?;
    let (report_read, report_write) = prepared.report;
    // SAFETY: this process has one thread here, and the child makes only raw syscalls on data
    // prepared above before it execs or exits.
    let pid = match unsafe { nix::unistd::fork() } {
        Err(err) => return Err(nix_io(err)).context("cannot fork the traced command"),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: async-signal-safe calls only; the child exits if anything fails.
            unsafe {
                exec_held_child(
                    &prepared.path,
                    &prepared.argv,
                    &filter,
                    guard.previous(),
                    release_read.as_raw_fd(),
                    release_write.as_raw_fd(),
                    report_write.as_raw_fd(),
                )
            }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
    };
    drop((release_read, report_write));
    Ok(HeldChild {
        pid,
        program: prepared.program,
        release: Some(release_write),
        report: report_read,
    })
}

/// The child's side of [`start_held`]: signal state as untraced, wait for the go, exec.
/// # Safety
/// Only in the child between fork and exec: makes raw syscalls only, allocates nothing.
unsafe fn exec_held_child(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    filter: &[libc::sock_filter],
    dispositions: &[(Signal, SigAction)],
    release: std::os::fd::RawFd,
    release_write: std::os::fd::RawFd,
    report: std::os::fd::RawFd,
) -> ! {
    // SAFETY: raw syscalls on valid arguments.
    unsafe {
        restore_signal_state(dispositions);
        // Its own copy of the write end would keep the read from seeing tcpstall's end.
        libc::close(release_write);
        let mut go = 0u8;
        loop {
            match libc::read(release, (&mut go as *mut u8).cast(), 1) {
                1 => break,
                -1 if *libc::__errno_location() == libc::EINTR => continue,
                // End of file: tcpstall gave up (or ended) before letting it go.
                _ => libc::_exit(127),
            }
        }
        if go == GO_PTRACE {
            seized_exec(path, argv, filter, report);
        }
        libc::execv(path.as_ptr(), argv.as_ptr());
        report_failure(report, STAGE_EXEC)
    }
}

/// The signal state tcpstall was started with, as from a shell, for the command: the
/// dispositions the tracer replaced, SIGPIPE back to default (the Rust runtime ignores it, and
/// an ignored signal stays ignored across exec), no signal blocked.
/// # Safety
/// Only in the child between fork and exec.
unsafe fn restore_signal_state(dispositions: &[(Signal, SigAction)]) {
    // SAFETY: raw syscalls on valid arguments.
    unsafe {
        for (sig, old) in dispositions {
            let _ = signal::sigaction(*sig, old);
        }
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// The child's report of the `stage` that failed, with errno, then its end.
/// # Safety
/// Only in the child between fork and exec.
unsafe fn report_failure(report: std::os::fd::RawFd, stage: u32) -> ! {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as u32;
    let mut message = [0u8; 8];
    message[..4].copy_from_slice(&stage.to_ne_bytes());
    message[4..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: plain write and _exit.
    unsafe {
        libc::write(report, message.as_ptr().cast(), message.len());
        libc::_exit(127)
    }
}

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
    let prepared = prepare(command)?;
    let program = prepared.program.as_str();
    let filter = seccomp::filter();
    let (report_read, report_write) = prepared.report;

    // SAFETY: this process has one thread here (the tracer runs on the main thread), and the
    // child makes only raw syscalls on data prepared above before it execs or exits.
    let root = match unsafe { nix::unistd::fork() } {
        Err(err) => return Err(nix_io(err)).context("cannot fork the traced command"),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: async-signal-safe calls only; the child exits if anything fails.
            unsafe {
                exec_traced_child(
                    &prepared.path,
                    &prepared.argv,
                    &filter,
                    guard.previous(),
                    report_write.as_raw_fd(),
                )
            }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => child,
    };
    drop(report_write);
    seize(root, program, &report_read)
}

/// Seizes the child that stops itself before it installs the filter and execs
/// ([`take_over`]); returns it once its program runs, or ends it and says why not.
fn seize(root: Pid, program: &str, report: &std::os::fd::OwnedFd) -> anyhow::Result<Pid> {
    if let Err(err) = take_over(root, program, report) {
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
    // SAFETY: raw syscalls on valid arguments.
    unsafe {
        restore_signal_state(dispositions);
        seized_exec(path, argv, filter, report)
    }
}

/// Stops until the tracer has seized it with its options ([`take_over`]), installs the
/// filter, execs.
/// # Safety
/// Only in the child between fork and exec.
unsafe fn seized_exec(
    path: &std::ffi::CStr,
    argv: &[*const libc::c_char],
    filter: &[libc::sock_filter],
    report: std::os::fd::RawFd,
) -> ! {
    // SAFETY: raw syscalls on valid arguments.
    unsafe {
        libc::raise(libc::SIGSTOP);
        if seccomp::install(filter).is_err() {
            report_failure(report, STAGE_SECCOMP);
        }
        libc::execv(path.as_ptr(), argv.as_ptr());
        report_failure(report, STAGE_EXEC)
    }
}

/// Reads what the child reported before it exited without running its program.
fn child_failure(report: &std::os::fd::OwnedFd, program: &str) -> anyhow::Error {
    exec_outcome(report, program)
        .err()
        .unwrap_or_else(|| anyhow!("{program:?} exited before it started"))
}

/// Whether the child's exec succeeded: the report pipe closed with nothing in it (close-on-
/// exec), or the failure the child reported before its end.
fn exec_outcome(report: &std::os::fd::OwnedFd, program: &str) -> anyhow::Result<()> {
    let mut message = [0u8; 8];
    let read = loop {
        match nix::unistd::read(report, &mut message) {
            Err(Errno::EINTR) => continue,
            other => break other.unwrap_or(0),
        }
    };
    if read == 0 {
        return Ok(());
    }
    if read != message.len() {
        bail!("{program:?} exited before it started");
    }
    let word =
        |i: usize| u32::from_ne_bytes([message[i], message[i + 1], message[i + 2], message[i + 3]]);
    let (stage, errno) = (word(0), word(4) as i32);
    let cause = std::io::Error::from_raw_os_error(errno);
    Err(match stage {
        STAGE_SECCOMP => anyhow::anyhow!(
            "cannot trace {program:?}: the seccomp filter was refused: {cause} (a kernel without \
             CONFIG_SECCOMP_FILTER, or a container that forbids seccomp)"
        ),
        _ if errno == libc::ENOENT => anyhow::anyhow!(
            "cannot run {program:?}: {cause}; the file exists, so the interpreter on its `#!` line \
             or its dynamic loader is missing"
        ),
        _ => anyhow::anyhow!("cannot run {program:?}: {cause}"),
    })
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
