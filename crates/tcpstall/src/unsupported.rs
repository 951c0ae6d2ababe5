//! The verbs that need Linux, on the systems without it (Windows, macOS): their command lines
//! parse as on Linux ([`crate::args`]), so `--help`, completions and manual pages are the same,
//! and each one then says what it needs and what works here instead: `analyze` (and `probe`,
//! which runs everywhere from its own socket).
//!
//! `main` takes the verbs from here instead of their modules where `target_os` is not Linux;
//! this is the one place that decides which verbs run on which system.

use crate::Outcome;

/// The error of a verb that needs Linux: what it uses, and how to get its answer here.
fn needs_linux(verb: &str, uses: &str) -> anyhow::Result<Outcome> {
    anyhow::bail!(
        "tcpstall {verb} needs Linux (it uses {uses}); on this system, `tcpstall analyze` \
         reads captures: take one with tcpdump or Wireshark on the host to examine and analyze \
         it here (e.g. `tcpdump -i any -w stalls.pcap tcp port 8080`, then \
         `tcpstall analyze stalls.pcap`)"
    )
}

/// `tcpstall lab` where it cannot run.
pub mod lab {
    use crate::args::lab::LabArgs;
    use crate::Outcome;

    /// Says that the lab needs Linux.
    pub fn run(_args: &LabArgs) -> anyhow::Result<Outcome> {
        super::needs_linux(
            "lab",
            "Linux's TCP socket options and delayed-ACK timer, and network namespaces for --rtt",
        )
    }

    /// No lab runs here, so none is ending on a signal.
    pub fn wait_if_ending_on_signal() {}
}

/// `tcpstall sockets` where it cannot run.
pub mod sockets {
    use crate::args::sockets::SocketsArgs;
    use crate::Outcome;

    /// Says that `sockets` needs Linux.
    pub fn run(_args: &SocketsArgs) -> anyhow::Result<Outcome> {
        super::needs_linux(
            "sockets",
            "/proc and pidfd_getfd to read another process's sockets, or a BPF socket iterator",
        )
    }
}

/// `tcpstall fix` where it cannot run.
pub mod fix {
    use crate::args::fix::FixArgs;
    use crate::Outcome;

    /// Says that `fix` needs Linux.
    pub fn run(_args: &FixArgs) -> anyhow::Result<Outcome> {
        super::needs_linux(
            "fix",
            "pidfd_getfd to set options on another process's sockets, and rtnetlink for --route",
        )
    }
}

/// `tcpstall trace` where it cannot run.
pub mod trace {
    use crate::args::trace::TraceArgs;
    use crate::Outcome;

    /// Says that `trace` needs Linux.
    pub fn run(_args: &TraceArgs) -> anyhow::Result<Outcome> {
        super::needs_linux(
            "trace",
            "BPF on the kernel's tracepoints, or ptrace and seccomp",
        )
    }
}

/// `tcpstall watch` where it cannot run.
pub mod watch {
    use crate::args::watch::WatchArgs;
    use crate::Outcome;

    /// Says that `watch` needs Linux.
    pub fn run(_args: &WatchArgs) -> anyhow::Result<Outcome> {
        super::needs_linux(
            "watch",
            "Linux's packet rings (AF_PACKET), or BPF on its tracepoints with --kernel",
        )
    }
}
