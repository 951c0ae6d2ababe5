//! The command line of `tcpstall trace`.

use clap::Args;

/// Arguments of `tcpstall trace`.
#[derive(Args, Debug, Clone)]
#[command(
    override_usage = "tcpstall trace [OPTIONS] -- <CMD>...\n       tcpstall trace [OPTIONS] -p <PID>"
)]
pub struct TraceArgs {
    /// Follow this running process (all its threads, and the processes it starts) instead of
    /// starting a command, without stopping it: BPF programs on the kernel's tracepoints see
    /// its socket syscalls (needs CAP_BPF and CAP_PERFMON, or root). Where the kernel does not
    /// allow them, ptrace is used instead, saying why.
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// Follow with ptrace even where the tracepoints are available. A command then stops at
    /// its socket syscalls (a seccomp filter installed before exec picks them). A process
    /// given with -p stops at every syscall (no seccomp filter can be installed in a running
    /// process from outside), and is detached at the end (as under strace, a syscall blocked
    /// at the moment of attaching or detaching may return EINTR, which programs retry).
    #[arg(long)]
    pub ptrace: bool,
    /// Stop after this many seconds (default with -p: 10; a command runs until it and every
    /// process it started have ended, a daemon it leaves behind included, as under
    /// `strace -f`, and is killed when the time is up).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Write the report to FILE instead of standard output (which the traced command shares).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Exit 1 when a write-write-read pattern is found.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Take no call stacks: through the tracepoints, by default, the user-space stack of each
    /// write Nagle holds and of the write before it are taken, and each socket's example
    /// names the two lines of code (function, file:line where the program has DWARF).
    #[arg(long)]
    pub no_stacks: bool,
    /// The command to run and trace, after `--`.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<String>,
}
