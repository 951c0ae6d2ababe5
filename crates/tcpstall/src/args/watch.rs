//! The command line of `tcpstall watch`.

use std::net::SocketAddr;

use clap::Args;

/// Arguments of `tcpstall watch`.
#[derive(Args, Debug, Clone)]
pub struct WatchArgs {
    /// Interface to capture on; `any` captures on all of them. Repeat it to watch several:
    /// one that goes away ends its capture, not the watch.
    #[arg(short = 'i', long, value_name = "IFACE", default_value = "any")]
    pub interface: Vec<String>,
    /// Capture filter in tcpdump's syntax (pcap-filter(7)), e.g. `port 8080`; only TCP is
    /// captured whatever the filter.
    #[arg(value_name = "FILTER")]
    pub filter: Vec<String>,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Print one JSON object per stall, one per line, and a `{"summary":...}` line at the end.
    #[arg(long)]
    pub json: bool,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9465), at /metrics.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics: Option<SocketAddr>,
    /// Kernel capture buffer, MiB: a larger one absorbs longer bursts without drops.
    #[arg(long, value_name = "MIB", default_value_t = 64,
          value_parser = clap::value_parser!(u32).range(1..=2047))]
    pub buffer_mib: u32,
    /// Let the kernel hand packets over in blocks up to 100 ms old instead of 10 ms: fewer
    /// wake-ups on a quiet host kept as a metrics exporter, stalls printed up to 100 ms later.
    #[arg(long)]
    pub buffered: bool,
    /// Also print minor Nagle holds (released by an ordinary ACK, about one RTT). With
    /// --kernel every hold is sent to tcpstall, also those under 1 ms: a busy host may fill
    /// the kernel's ring, and the holds it could not take are counted as lost (summary,
    /// metrics).
    #[arg(long)]
    pub minor: bool,
    /// Exit 1 when a stall was found.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Watch Nagle holds in the kernel (BPF on BTF tracepoints) instead of capturing
    /// packets: every held write on the host with its process, whatever the interface or
    /// encryption. Needs CAP_BPF and CAP_PERFMON (or root) and a kernel with BTF.
    #[arg(long, conflicts_with_all = ["filter", "buffered"])]
    pub kernel: bool,
    /// With --kernel, take no call stacks: by default the user-space stack of each held
    /// write and of the write before it is taken in the kernel and named (function,
    /// file:line) for the holds printed.
    #[arg(long, requires = "kernel")]
    pub no_stacks: bool,
    /// Follow at most this many connections at once (each costs about 1 KB): past it, the
    /// packets of further connections are counted in the summary, not followed, until
    /// followed ones close or go idle.
    #[arg(long, value_name = "N", default_value_t = 1_000_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_flows: u64,
}
