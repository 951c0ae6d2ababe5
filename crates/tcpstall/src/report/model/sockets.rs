//! What `tcpstall sockets` and `tcpstall fix` hand their renderer ([`crate::report::sockets`]):
//! the sockets of a process tree as read, and fix's plan and result, plain data the verbs fill in.

pub use crate::host::tcp_state::TcpState;

use serde::Serialize;

use super::Runtime;
use crate::host::sockopt;

/// A process holding a socket, and the socket's fd there.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Holder {
    /// The process.
    pub pid: u32,
    /// The fd in that process.
    pub fd: i32,
}

/// A process and its command name.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ProcessName {
    /// The process.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`); `None` when unreadable.
    pub command: Option<String>,
}

impl ProcessName {
    /// `pid 12 (nginx)`, or `pid 12` without a name.
    pub fn describe(&self) -> String {
        match &self.command {
            Some(command) => format!("pid {} ({command})", self.pid),
            None => format!("pid {}", self.pid),
        }
    }
}

/// The TCP_INFO fields that explain a stall, from the kernel's `tcp_get_info`.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct InfoView {
    /// Smoothed RTT, microseconds.
    pub rtt_us: u32,
    /// Delayed-ACK timeout the socket predicts (`icsk_ack.ato`), microseconds.
    pub ato_us: u32,
    /// Segments in flight (`packets_out`).
    pub unacked: u32,
    /// Bytes written and not yet sent (what Nagle or cork holds).
    pub notsent_bytes: u32,
    /// MSS used for sending.
    pub snd_mss: u32,
    /// Data segments sent.
    pub data_segs_out: u32,
    /// Data segments received.
    pub data_segs_in: u32,
}

impl From<sockopt::TcpInfo> for InfoView {
    fn from(info: sockopt::TcpInfo) -> InfoView {
        InfoView {
            rtt_us: info.rtt,
            ato_us: info.ato,
            unacked: info.unacked,
            notsent_bytes: info.notsent_bytes,
            snd_mss: info.snd_mss,
            data_segs_out: info.data_segs_out,
            data_segs_in: info.data_segs_in,
        }
    }
}

/// One TCP socket of a process. Option fields are `None` (JSON null) when they could not be read.
#[derive(Debug, Clone, Serialize)]
pub struct SocketView {
    /// Process holding the socket; `None` (JSON null) when /proc did not tell which process
    /// holds it (its fds were not readable).
    pub pid: Option<u32>,
    /// Its fd in that process; `None` when /proc/PID/fd was not readable.
    pub fd: Option<i32>,
    /// Socket inode (`socket:[N]`).
    pub inode: u64,
    /// Local address.
    pub local: String,
    /// Remote address (`0.0.0.0:0` for listeners).
    pub remote: String,
    /// Kernel TCP state.
    pub state: TcpState,
    /// A listening socket: connections it accepts copy its options (`inet_csk_clone_lock`).
    pub listening: bool,
    /// TCP_NODELAY: true when Nagle is off.
    pub nodelay: Option<bool>,
    /// TCP_CORK.
    pub cork: Option<bool>,
    /// TCP_QUICKACK as read back: true while not in ping-pong (delayed-ACK) mode.
    pub quickack: Option<bool>,
    /// TCP_INFO summary.
    pub tcp_info: Option<InfoView>,
    /// The socket can meet a Nagle × delayed-ACK stall: Nagle on, not corked, and either
    /// request/response traffic so far or a listener whose accepted sockets inherit Nagle.
    pub can_stall: Option<bool>,
    /// Why `can_stall` is false for a socket with Nagle on: a listener whose accepted
    /// connections all have TCP_NODELAY (the server sets it after `accept()`); null otherwise.
    pub can_stall_reason: Option<String>,
    /// Caught in the act: bytes written but not sent while a segment is unacknowledged, on a
    /// socket with Nagle on and no cork, i.e. `tcp_nagle_check` is holding data until an ACK.
    pub held_now: Option<bool>,
    /// What could not be read and why.
    pub unknown_reason: Option<String>,
    /// Every process holding the socket (a listener a master shares with its workers, a
    /// socket inherited across fork), by pid; `pid`/`fd` name the first. Empty when unknown.
    pub holders: Vec<Holder>,
    /// TCP_DELACK_MAX_US, the socket's cap on its delayed ACK, in microseconds; `None` when
    /// unreadable or the kernel lacks the option.
    pub delack_max_us: Option<u32>,
    /// A listener made by a process above the tree shown, which its children inherited across
    /// fork (an nginx master's listener, shown from a worker): that process, which owns it and
    /// shares it; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inherited_from: Option<ProcessName>,
    /// The holder's command name (`sockets --all` from the kernel); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// What the kernel's socket says besides the options (`sockets --all` from the kernel's
    /// iterator); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelView>,
    /// The holder's language runtime and framework, and their fix, for a socket that can
    /// stall; null otherwise, or when tcpstall does not know the runtime.
    pub runtime: Option<Runtime>,
}

/// What `fix` does to one socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// TCP_NODELAY is switched on.
    SetNodelay,
    /// TCP_NODELAY was already on.
    AlreadyNodelay,
    /// The state has no future traffic to speed up (closing, time-wait...).
    SkippedState,
    /// TCP_DELACK_MAX_US is set (`--delack-max`).
    SetDelackMax,
    /// TCP_DELACK_MAX_US already holds the value asked for.
    AlreadyDelackMax,
}

/// One socket's line of the plan and of the result.
#[derive(Debug, Clone, Serialize)]
pub struct FixedSocket {
    /// The socket as `sockets` shows it before the change; its inode guards the change (the fd
    /// is changed only while it still holds this socket).
    #[serde(flatten)]
    pub socket: SocketView,
    /// What is (or would be) done.
    pub action: Action,
    /// TCP_NODELAY before.
    pub nodelay_before: Option<bool>,
    /// TCP_NODELAY read back after setting it; `None` for a dry run or when not applied.
    pub nodelay_after: Option<bool>,
    /// With `--delack-max`: TCP_DELACK_MAX_US read back after setting it, microseconds (the
    /// value before is the socket's `delack_max_us`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delack_max_us_after: Option<u32>,
}

/// What `--delack-max` asks and what the running kernel was checked to do with it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DelackPlan {
    /// The cap asked for, microseconds.
    pub requested_us: u32,
    /// What the kernel keeps for it (it counts in jiffies, rounding up), microseconds.
    pub kept_us: u32,
    /// The smallest value the kernel accepts (2 jiffies), microseconds.
    pub floor_us: u32,
    /// The largest value the kernel accepts (`TCP_DELACK_MAX`), microseconds.
    pub ceiling_us: u32,
    /// Connections accepted later by a listener with the cap inherit it.
    pub listener_inherited: bool,
}

/// The result of `fix --json`.
#[derive(Debug, Clone, Serialize)]
pub struct FixReport {
    /// The target.
    pub pid: u32,
    /// Nothing was changed.
    pub dry_run: bool,
    /// Changes were applied.
    pub applied: bool,
    /// Whether, on this kernel, an accepted socket inherits TCP_NODELAY from its listener.
    pub listener_nodelay_inherited: bool,
    /// Every TCP socket in the plan.
    pub sockets: Vec<FixedSocket>,
    /// The processes whose sockets are in the plan: the target, then its descendants.
    pub pids: Vec<u32>,
    /// With `--delack-max`: the cap asked for and what the kernel does with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delack_max: Option<DelackPlan>,
    /// The target's language runtime and framework, and their fix: what lasts past the
    /// sockets `fix` changes live; null when tcpstall does not know the runtime.
    pub runtime: Option<Runtime>,
}

/// What the kernel's socket says that getsockopt does not: `sockets --all`'s extra columns.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernelView {
    /// `tp->nonagle`: TCP_NAGLE_OFF (1, TCP_NODELAY), TCP_NAGLE_CORK (2), TCP_NAGLE_PUSH (4).
    pub nonagle: u8,
    /// Autocorking (or TCP small queues) holds written bytes now: TSQ_THROTTLED is set and
    /// bytes wait unsent, sent when the earlier data leaves the qdisc (`tcp_should_autocork`).
    pub autocork_pending: bool,
    /// A delayed ACK is owed: the delayed-ACK timer is armed (`icsk_ack.pending &
    /// ICSK_ACK_TIMER`), the peer's next small write may wait for it.
    pub delack_pending: bool,
    /// When that timer fires, ms from now (null when none is armed or HZ is unknown).
    pub delack_due_ms: Option<f64>,
    /// `icsk_ack.pingpong`: request/response turns seen; at the threshold the socket delays
    /// its ACKs (`inet_csk_in_pingpong_mode`).
    pub pingpong: u8,
    /// `icsk_ack.quick`: quick ACKs left before it may delay them again.
    pub quick: u8,
    /// Bytes written and not sent (`write_seq - snd_nxt`).
    pub unsent: u32,
    /// Segments in flight (`packets_out`).
    pub packets_out: u32,
    /// Congestion window, segments.
    pub snd_cwnd: u32,
    /// MSS used for sending (`mss_cache`).
    pub mss_cache: u32,
    /// The socket's owner uid, as `ss -e` shows it.
    pub uid: u32,
}

impl KernelView {
    /// When the owed delayed ACK goes out, as the table shows it (`12ms`).
    pub fn delay_text(&self) -> Option<String> {
        self.delack_due_ms.map(|ms| format!("{ms:.0}ms"))
    }
}
