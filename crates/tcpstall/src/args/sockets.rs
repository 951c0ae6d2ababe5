//! The command line of `tcpstall sockets`.

use clap::Args;

/// Arguments of `tcpstall sockets`.
#[derive(Args, Debug, Clone)]
pub struct SocketsArgs {
    /// Process whose TCP sockets to show.
    #[arg(required_unless_present = "all", conflicts_with = "all")]
    pub pid: Option<u32>,
    /// Show the TCP sockets of every process this user may inspect.
    #[arg(long)]
    pub all: bool,
    /// Only sockets whose local or remote port is N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Print JSON (an array of sockets) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// With --all: also the TIME_WAIT sockets (closed connections waiting out 2 MSL, held by
    /// no process), which are left out by default and counted on stderr, as `ss` leaves them out.
    #[arg(long, requires = "all")]
    pub time_wait: bool,
    /// Only the process itself, not its child processes (by default a master's workers are
    /// shown with it, each socket once with every process holding it).
    #[arg(long, conflicts_with = "all")]
    pub no_tree: bool,
    /// Where the sockets are read: `auto` (with --all, every socket of the host in one pass
    /// of the kernel's socket iterator where it loads, else each process in turn; with a
    /// PID, each process), `kernel` (the iterator, or an error saying what it lacks), `proc`
    /// (each process: its fds, getsockopt on duplicates, sock_diag).
    #[arg(long, value_enum, default_value_t = Source::Auto)]
    pub source: Source,
}

/// Where `sockets` reads the sockets from.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The kernel's iterator for --all where it loads, else each process.
    Auto,
    /// The kernel's socket iterator (BPF `iter/tcp`): CAP_BPF and CAP_PERFMON.
    Kernel,
    /// Each process's fds, read through duplicates (`pidfd_getfd`).
    Proc,
}
