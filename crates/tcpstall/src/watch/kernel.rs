//! `watch --kernel`: Nagle holds as the kernel sees them, from BTF tracepoints, instead of
//! inferred from the timing of captured packets.
//!
//! The BPF object (`bpf/nagle.bpf.c`, built by `scripts/build-bpf`, committed as
//! `bpf/nagle.bpf.o`) is embedded in the binary and loaded with aya, a loader in Rust: no
//! clang, no libbpf and no capture at run time. Its programs (`tp_btf`, allowed where
//! lockdown refuses kprobes and fentry) keep each hold in progress in a kernel hash map keyed
//! by the socket and put only completed holds of 1 ms or more (every hold with `--minor`) into
//! a ring buffer, without waking the reader: this module polls the ring every [`POLL`], so the
//! cost per hold on a busy host is a few map operations, not a wake-up. A record the full ring
//! cannot take is counted, and shown as lost in the summary and the metrics.
//!
//! With each hold come the user-space call stacks of the write held and of the write before
//! it, taken in the kernel (`bpf/user_stack.h`) and named here ([`StackNamer`]) only for the
//! holds printed, while their process still runs.
//!
//! Each hold becomes a [`StallEvent`] (the type every verb's detector produces) for the
//! printer, the metrics and the summary of `watch`: the local socket is the writer, so the
//! held side is the server when its local port is a listening one, else the client.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use aya::maps::{MapData, PerCpuArray, RingBuf};
use aya::Ebpf;
use rustc_hash::FxHashMap;

use super::metrics::{KernelTotals, Metrics, Totals};
use super::printer::{self, KernelSaw, ToPrinter};
use super::WatchArgs;
use crate::detect::{hold_kind, Finding, HoldEnd, KindCounts, PeerStack, StallEvent, StallKind};
use crate::flow::{Endpoint, Side, Span, Timestamp};
use crate::host::call_stack::{
    RawSites, StackNamer, STACK_MAPS, TAKE_STACKS_GLOBAL, USER_STACK_LEN,
};
use crate::host::procfs;
use crate::host::record::RecordBytes;
pub use crate::host::tracepoints::KernelError;
pub(crate) use crate::host::tracepoints::{chain, clock_ns, load_btf_tracepoints_with};
use crate::report::model::watch::WatchSummary;
use crate::tcp_rules;

/// The compiled BPF programs (`scripts/build-bpf` rebuilds it from `bpf/nagle.bpf.c`),
/// aligned: the ELF reader reads its headers in place, which `include_bytes!` alone does not
/// allow.
pub static NAGLE_BPF: &[u8] = aya::include_bytes_aligned!("../../../../bpf/nagle.bpf.o");

/// The tracepoints the programs attach to, by program name (= tracepoint name).
const TRACEPOINTS: [&str; 5] = [
    "sock_send_length",
    "tcp_probe",
    "tcp_retransmit_skb",
    "tcp_cong_state_set",
    "inet_sock_set_state",
];

/// How often the ring buffer is read: a hold is printed at most this late, and the kernel
/// never wakes tcpstall (the records are submitted with BPF_RB_NO_WAKEUP).
pub const POLL: Duration = Duration::from_millis(10);

/// How often the kernel's counters are read and idle sockets forgotten.
const TICK: Duration = Duration::from_millis(500);

/// A socket with no hold for this long is forgotten by the owner lookup.
const IDLE: Duration = Duration::from_secs(60);

/// The object's global (`const volatile` in `bpf/nagle.bpf.c`): holds shorter than this many
/// ns are not sent to user space.
const MIN_EMIT_GLOBAL: &str = "min_emit_ns";

/// The maps `--no-stacks` leaves unused, made with one entry: the writes' stacks
/// (`STACK_MAPS`) and the holds' (`hold_stacks` in `bpf/nagle.bpf.c`).
const UNUSED_WITHOUT_STACKS: [(&str, u32); 3] =
    [(STACK_MAPS[0], 1), (STACK_MAPS[1], 1), ("hold_stacks", 1)];

/// The kernel's bound for a short hold (`SHORT_NS` in `bpf/nagle.bpf.c`): released by its ACK
/// sooner, a hold is counted in `short`, also when it is sent.
pub const SHORT: Duration = Duration::from_millis(1);

/// Size of one record in the ring (`struct hold` in `bpf/nagle.bpf.c`, padded to 8).
const RECORD_LEN: usize = 104 + 2 * USER_STACK_LEN;

/// Where each field of `struct hold` (`bpf/nagle.bpf.c`) lies in a record: the parser reads
/// these, and a test checks them against the C struct (`host::c_layout`).
mod hold_at {
    pub const SK: usize = 0;
    pub const START_NS: usize = 8;
    pub const END_NS: usize = 16;
    pub const TGID: usize = 24;
    pub const UNSENT: usize = 28;
    pub const WRITE_BYTES: usize = 32;
    pub const MSS: usize = 36;
    pub const MIN_RTT_US: usize = 40;
    pub const FAMILY: usize = 44;
    pub const LPORT: usize = 46;
    pub const RPORT: usize = 48;
    pub const RELEASE: usize = 50;
    pub const RETRANS: usize = 51;
    pub const SADDR: usize = 52;
    pub const DADDR: usize = 68;
    pub const COMM: usize = 84;
    pub const SENT_AGO: usize = 100;
    /// `stacks.held`, a `struct user_stack` (`host::call_stack::user_stack_at`).
    pub const HELD_STACK: usize = 104;
    /// `stacks.previous` (read through `RawSites::parse`).
    #[cfg(test)]
    pub const PREVIOUS_STACK: usize = HELD_STACK + super::USER_STACK_LEN;
}

/// Slots of the kernel's per-CPU counters (`enum` in `bpf/nagle.bpf.c`).
const COUNT_HOLDS: u32 = 0;
const COUNT_SHORT: u32 = 1;
const COUNT_RING_FULL: u32 = 2;
const COUNT_BY_WRITE: u32 = 3;
const COUNT_BY_CLOSE: u32 = 4;
const COUNT_BY_RESET: u32 = 5;

/// What ended a hold (`RELEASE_*` in `bpf/nagle.bpf.c`, in that order from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The ACK of the small segment in flight: Nagle's own release.
    Ack,
    /// The tail-loss probe timer: it sent the held bytes (tcp_send_loss_probe ignores Nagle),
    /// or resent the small segment whose ACK then released them.
    Tlp,
    /// The retransmission timer resent the small segment; its ACK released the bytes.
    Rto,
    /// Sent with no ACK and no timer: TCP_NODELAY switched on, or uncorked.
    Pushed,
    /// close(): the FIN pushed them out (tcp_send_fin). The hold ended; nothing was lost.
    Close,
    /// A reset or abort closed the socket: the bytes were discarded with it.
    Reset,
}

impl Release {
    const ALL: [Release; 6] = [
        Release::Ack,
        Release::Tlp,
        Release::Rto,
        Release::Pushed,
        Release::Close,
        Release::Reset,
    ];

    fn from_code(code: u8) -> Option<Release> {
        Release::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }

    /// Stable name, the `release` key of `watch --kernel --json`.
    pub fn name(self) -> &'static str {
        match self {
            Release::Ack => "ack",
            Release::Tlp => "tlp",
            Release::Rto => "rto",
            Release::Pushed => "pushed",
            Release::Close => "close",
            Release::Reset => "reset",
        }
    }

    /// The socket closed: the hold ended with it, not released to the peer in turn.
    pub fn is_closing(self) -> bool {
        matches!(self, Release::Close | Release::Reset)
    }
}

/// One completed hold, as the kernel recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The kernel's socket address: the same socket while it lives.
    pub socket: u64,
    /// The process (thread group) that wrote the held bytes.
    pub pid: u32,
    /// Its command name at the time of the write.
    pub command: String,
    /// The writer's end of the connection.
    pub local: SocketAddr,
    /// The peer's end.
    pub remote: SocketAddr,
    /// When the write left bytes waiting, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// When the hold ended, CLOCK_MONOTONIC ns: the releasing ACK's arrival, the close, or
    /// (a timer release) when the bytes were sent, to the jiffy.
    pub end_ns: u64,
    /// Bytes waiting (write_seq - snd_nxt) after the latest write of the hold.
    pub unsent: u32,
    /// Size of that write.
    pub write_bytes: u32,
    /// The socket's MSS (`mss_cache`).
    pub mss: u32,
    /// Its minimum RTT when the hold began (`tcp_sock.rtt_min`), µs.
    pub min_rtt_us: u32,
    /// What ended it.
    pub release: Release,
    /// Segments resent while it waited.
    pub retransmits: u8,
    /// Jiffies before `end_ns` (as recorded) that the bytes left: a timer release is seen at
    /// the next segment received, not when it fired. [`KernelSource::read`] applies it.
    pub sent_ago_jiffies: u32,
    /// The user stacks of the write the hold began with and of the write before it, whose
    /// small segment the hold waited behind (each `None`: not taken, or not seen).
    pub stacks: RawSites,
}

impl Hold {
    /// How long the bytes waited.
    pub fn duration(&self) -> Span {
        Span::from_nanos(self.end_ns.saturating_sub(self.start_ns))
    }

    /// Parses one ring record; `None` when it is not one (short).
    pub fn parse(rec: &[u8]) -> Option<Hold> {
        let rec = RecordBytes::new(rec, RECORD_LEN)?;
        let family = rec.u16(hold_at::FAMILY)?;
        let comm = rec.bytes(hold_at::COMM, 16)?;
        let comm_len = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
        Some(Hold {
            socket: rec.u64(hold_at::SK)?,
            start_ns: rec.u64(hold_at::START_NS)?,
            end_ns: rec.u64(hold_at::END_NS)?,
            pid: rec.u32(hold_at::TGID)?,
            unsent: rec.u32(hold_at::UNSENT)?,
            write_bytes: rec.u32(hold_at::WRITE_BYTES)?,
            mss: rec.u32(hold_at::MSS)?,
            min_rtt_us: rec.u32(hold_at::MIN_RTT_US)?,
            local: SocketAddr::new(rec.ip(family, hold_at::SADDR)?, rec.u16(hold_at::LPORT)?),
            remote: SocketAddr::new(rec.ip(family, hold_at::DADDR)?, rec.u16(hold_at::RPORT)?),
            release: Release::from_code(rec.u8(hold_at::RELEASE)?)?,
            retransmits: rec.u8(hold_at::RETRANS)?,
            command: String::from_utf8_lossy(&comm[..comm_len]).into_owned(),
            sent_ago_jiffies: rec.u32(hold_at::SENT_AGO)?,
            stacks: RawSites::parse(&rec, hold_at::HELD_STACK),
        })
    }

    /// The stall event of this hold: `held` is the writer's side of the connection,
    /// `realtime_offset_ns` turns the kernel's monotonic clock into the realtime clock the
    /// printer shows.
    pub fn to_event(&self, held: Side, realtime_offset_ns: i64, ordinal: u64) -> StallEvent {
        let delay = self.duration();
        // The detector's rule (detect::hold_kind), on the hold less the socket's quickest
        // round trip: how long the ACK took beyond the path. The kernel sees what released
        // the data: the peer's ACK, or a loss-recovery timer (TLP, RTO).
        let beyond_path = Span::from_nanos(
            delay
                .as_nanos()
                .saturating_sub(u64::from(self.min_rtt_us) * 1000),
        );
        let end = match self.release {
            Release::Tlp | Release::Rto => HoldEnd::LossTimer,
            _ => HoldEnd::PeerAck,
        };
        let kind = hold_kind(beyond_path, end);
        let ack_delay = (kind == StallKind::NagleDelayedAck).then_some(beyond_path);
        let (local, remote) = (endpoint(self.local), endpoint(self.remote));
        let (client, server) = match held {
            Side::Server => (remote, local),
            Side::Client => (local, remote),
        };
        StallEvent {
            finding: Finding {
                kind,
                held_side: held,
                ack_side: Some(held.peer()),
                delay_ns: delay,
                ack_delay_ns: ack_delay,
                // The kernel sees the release itself, at the sender: no path in between.
                release_ns: None,
            },
            flow_id: self.socket,
            ordinal,
            client,
            server,
            ts_ns: Timestamp::from_nanos(self.end_ns.saturating_add_signed(realtime_offset_ns)),
            packet_number: 0,
            released_by: None,
            released_bytes: self.unsent,
            writes: vec![self.unsent],
            mss: self.mss,
            peer_stack: ack_delay.map(PeerStack::from_ack_delay),
            backoffs: 0,
            backoff_ns: Span::ZERO,
            handshake_not_taken: None,
            paced: None,
        }
    }
}

fn endpoint(addr: SocketAddr) -> Endpoint {
    Endpoint {
        addr: addr.ip(),
        port: addr.port(),
    }
}

/// The kernel's counters, summed over the CPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCounts {
    /// Holds that began.
    pub holds: u64,
    /// Holds released by their ACK in under 1 ms ([`SHORT`]; recorded only with `--minor`).
    pub short: u64,
    /// Records lost because the ring was full.
    pub ring_full: u64,
    /// Holds that a later write ended by sending everything (no ACK waited for).
    pub by_write: u64,
    /// Holds ended by close(): the FIN pushed the bytes.
    pub by_close: u64,
    /// Holds ended by a reset or abort.
    pub by_reset: u64,
}

/// The loaded programs and the maps read from user space. Dropping it detaches the programs.
pub struct KernelSource {
    _bpf: Ebpf,
    ring: RingBuf<MapData>,
    counts: PerCpuArray<MapData, u64>,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, ns, when loaded.
    realtime_offset_ns: i64,
    /// One jiffy, ns (CONFIG_HZ); `None` when the kernel's config is unreadable.
    jiffy_ns: Option<u64>,
}

impl std::fmt::Debug for KernelSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSource").finish_non_exhaustive()
    }
}

impl KernelSource {
    /// Loads and attaches the programs; `every_hold` sends holds shorter than [`SHORT`] to
    /// the ring too, not only counts them; `stacks` takes the writes' call stacks.
    pub fn open(every_hold: bool, stacks: bool) -> Result<KernelSource, KernelError> {
        let min_emit_ns = if every_hold {
            0
        } else {
            SHORT.as_nanos() as u64
        };
        let mut bpf = load_btf_tracepoints_with(
            NAGLE_BPF,
            &TRACEPOINTS,
            &[
                (MIN_EMIT_GLOBAL, min_emit_ns),
                (TAKE_STACKS_GLOBAL, u64::from(stacks)),
            ],
            if stacks { &[] } else { &UNUSED_WITHOUT_STACKS },
        )?;
        let ring = bpf
            .take_map("events")
            .ok_or_else(|| KernelError::Load("the object has no map `events`".into()))
            .and_then(|m| RingBuf::try_from(m).map_err(|e| KernelError::Load(chain(&e))))?;
        let counts = bpf
            .take_map("counts")
            .ok_or_else(|| KernelError::Load("the object has no map `counts`".into()))
            .and_then(|m| PerCpuArray::try_from(m).map_err(|e| KernelError::Load(chain(&e))))?;
        Ok(KernelSource {
            _bpf: bpf,
            ring,
            counts,
            realtime_offset_ns: realtime_offset_ns(),
            jiffy_ns: crate::host::kernel::KernelFacts::read()
                .jiffy()
                .map(tcp_rules::nanos),
        })
    }

    /// CLOCK_REALTIME - CLOCK_MONOTONIC, ns: the records' clock to the printer's.
    pub fn realtime_offset_ns(&self) -> i64 {
        self.realtime_offset_ns
    }

    /// Reads every completed hold waiting in the ring; a record the kernel wrote wrong is
    /// skipped. The ring's size bounds one call.
    pub fn read(&mut self, mut each: impl FnMut(Hold)) {
        while let Some(item) = self.ring.next() {
            if let Some(mut hold) = Hold::parse(&item) {
                // A timer's release: the bytes left when lsndtime says, before the segment
                // that revealed it.
                if let Some(jiffy) = self.jiffy_ns {
                    let ago = u64::from(hold.sent_ago_jiffies).saturating_mul(jiffy);
                    hold.end_ns = hold.end_ns.saturating_sub(ago).max(hold.start_ns);
                }
                each(hold);
            }
        }
    }

    /// The kernel's counters now.
    pub fn counts(&self) -> KernelCounts {
        let sum = |slot: u32| {
            self.counts
                .get(&slot, 0)
                .map(|v| v.iter().sum::<u64>())
                .unwrap_or(0)
        };
        KernelCounts {
            holds: sum(COUNT_HOLDS),
            short: sum(COUNT_SHORT),
            ring_full: sum(COUNT_RING_FULL),
            by_write: sum(COUNT_BY_WRITE),
            by_close: sum(COUNT_BY_CLOSE),
            by_reset: sum(COUNT_BY_RESET),
        }
    }
}

fn realtime_offset_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

/// Which local ports are listening in a writer's network namespace, to name the writer's side:
/// read from /proc/PID/net/tcp{,6} of the writer (its namespace, a container's too), again at
/// most once a second when a port is not among them.
#[derive(Debug, Default)]
struct Listening {
    by_pid: FxHashMap<u32, (HashSet<u16>, Instant)>,
}

/// Writers whose listening ports are remembered at most; more start the memory afresh.
const LISTENING_KEPT: usize = 1024;

impl Listening {
    fn side_of(&mut self, pid: u32, local_port: u16) -> Side {
        let stale = match self.by_pid.get(&pid) {
            Some((ports, read)) => {
                !ports.contains(&local_port) && read.elapsed() >= Duration::from_secs(1)
            }
            None => true,
        };
        if stale {
            if self.by_pid.len() >= LISTENING_KEPT {
                self.by_pid.clear();
            }
            // The writer's own view; if it has gone, this process's namespace.
            let ports = procfs::listening_ports(pid)
                .or_else(|_| procfs::listening_ports(std::process::id()))
                .unwrap_or_default();
            self.by_pid.insert(pid, (ports, Instant::now()));
        }
        // tcp_v4_syn_recv_sock gives an accepted socket the listener's port.
        match self.by_pid.get(&pid) {
            Some((ports, _)) if ports.contains(&local_port) => Side::Server,
            _ => Side::Client,
        }
    }
}

/// Runs `watch --kernel` until a signal or the deadline; returns the summary.
pub(super) fn watch(
    args: &WatchArgs,
    metrics: &Metrics,
    stop: &AtomicBool,
    started: Instant,
) -> anyhow::Result<WatchSummary> {
    let mut source = KernelSource::open(args.minor, !args.no_stacks)?;
    let namer = (!args.no_stacks).then(StackNamer::default);
    eprintln!(
        "tcpstall: watching every TCP socket's Nagle holds in the kernel (BTF tracepoints {}); {} ends it with a summary",
        TRACEPOINTS.join(", "),
        match args.duration {
            Some(d) => format!("{d} s or Ctrl-C"),
            None => "Ctrl-C".to_string(),
        }
    );
    let deadline = args
        .duration
        .map(|d| started + Duration::from_secs_f64(d.min(1e9)));
    let (mut tx, printer) = printer::spawn(args.json, metrics)?;
    let mut unprinted = 0;
    let mut summary = WatchSummary {
        interface: "kernel".into(),
        ..WatchSummary::default()
    };
    let mut counts = KindCounts::default();
    let mut listening = Listening::default();
    let mut sockets: FxHashMap<u64, Instant> = FxHashMap::default();
    let offset = source.realtime_offset_ns();
    let mut ordinal = 0u64;
    let mut minor = 0u64;
    let mut last_tick = Instant::now();
    let mut printer_gone = false;
    let mut done = false;
    // Bounded by the deadline or the signal; the last pass reads what the ring still holds.
    while !done {
        done = stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d);
        let mut holds = Vec::new();
        source.read(|h| holds.push(h));
        for hold in holds {
            let side = listening.side_of(hold.pid, hold.local.port());
            let event = hold.to_event(side, offset, ordinal);
            ordinal += 1;
            if hold.release.is_closing() {
                // Ended with its socket: reported as such (the kernel counts them), a short one
                // (write, write, close) only with --minor.
                let long =
                    event.finding.delay_ns >= Span::from_duration(tcp_rules::STALL_THRESHOLD);
                if long || args.minor {
                    let line = crate::report::watch::ended_text(
                        &event,
                        hold.pid,
                        &hold.command,
                        hold.release.name(),
                        args.json,
                    );
                    printer_gone |= tx.line(line).is_err();
                }
                continue;
            }
            // The kernel counts those under 1 ms itself (`short`), sent or not.
            if event.finding.kind == StallKind::NagleMinor
                && event.finding.delay_ns >= Span::from_duration(SHORT)
            {
                minor += 1;
            }
            counts.add(event.finding.kind);
            metrics.record_stall(&event);
            if event.finding.kind.is_stall() {
                summary.held[event.finding.held_side.index()] += 1;
            } else if !args.minor {
                continue;
            }
            sockets.insert(hold.socket, Instant::now());
            // Named now, while the writer still runs; not for a stall the printer has no
            // room for.
            let call_sites = namer
                .as_ref()
                .filter(|_| tx.backlog() < printer::QUEUE)
                .map(|namer| namer.name_sites(&hold.stacks));
            // The writer is searched first among the processes holding the socket.
            let saw = KernelSaw {
                pid: hold.pid,
                command: hold.command.clone(),
                release: hold.release.name(),
                call_sites,
            };
            printer_gone |= tx.stall(event, Some(saw)).is_err();
        }
        if last_tick.elapsed() >= TICK || done {
            last_tick = Instant::now();
            let idle: Vec<u64> = sockets
                .iter()
                .filter(|(_, t)| t.elapsed() >= IDLE)
                .map(|(s, _)| *s)
                .collect();
            for s in &idle {
                sockets.remove(s);
            }
            summary.flows += idle.len() as u64;
            if !idle.is_empty() {
                printer_gone |= tx.send(ToPrinter::Retired(idle)).is_err();
            }
            printer::say_backlog(&tx, unprinted);
            unprinted = tx.unprinted();
            metrics.printer(tx.backlog(), unprinted);
            let k = source.counts();
            summary.drops.dropped = k.ring_full;
            metrics.update(Totals {
                packets: 0,
                tcp_segments: 0,
                kernel_dropped: k.ring_full,
                interface_dropped: 0,
                active_flows: sockets.len() as u64,
                untracked_segments: 0,
            });
            metrics.update_kernel(KernelTotals {
                holds: k.holds,
                short: k.short,
                minor,
                by_write: k.by_write,
                by_close: k.by_close,
                by_reset: k.by_reset,
            });
        }
        if printer_gone {
            break; // the printer failed (standard output closed): its error says why
        }
        if !done {
            std::thread::sleep(POLL);
        }
    }
    summary.flows += sockets.len() as u64;
    summary.counts = counts;
    super::finish_printing(tx, printer, &mut summary)?;
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(family: u16, start: u64, end: u64) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_LEN];
        r[0..8].copy_from_slice(&0xffff_8880_1234_5678u64.to_ne_bytes());
        r[8..16].copy_from_slice(&start.to_ne_bytes());
        r[16..24].copy_from_slice(&end.to_ne_bytes());
        r[24..28].copy_from_slice(&4242u32.to_ne_bytes());
        r[28..32].copy_from_slice(&100u32.to_ne_bytes());
        r[32..36].copy_from_slice(&100u32.to_ne_bytes());
        r[36..40].copy_from_slice(&65_483u32.to_ne_bytes());
        r[40..44].copy_from_slice(&20u32.to_ne_bytes());
        r[44..46].copy_from_slice(&family.to_ne_bytes());
        r[46..48].copy_from_slice(&8000u16.to_ne_bytes());
        r[48..50].copy_from_slice(&51234u16.to_ne_bytes());
        r[50] = 1; // RELEASE_ACK
        r[52..56].copy_from_slice(&[127, 0, 0, 1]);
        r[68..72].copy_from_slice(&[127, 0, 0, 2]);
        r[84..90].copy_from_slice(b"python");
        r
    }

    #[test]
    fn a_record_parses_and_becomes_a_delayed_ack_stall_of_the_writer() {
        let hold =
            Hold::parse(&record(libc::AF_INET as u16, 1_000_000, 41_000_000)).expect("parses");
        assert_eq!(hold.pid, 4242);
        assert_eq!(hold.command, "python");
        assert_eq!(hold.local, "127.0.0.1:8000".parse().expect("addr"));
        assert_eq!(hold.remote, "127.0.0.2:51234".parse().expect("addr"));
        assert_eq!(hold.release, Release::Ack);
        let event = hold.to_event(Side::Server, 1_000, 7);
        assert_eq!(event.finding.kind, StallKind::NagleDelayedAck);
        assert_eq!(event.finding.held_side, Side::Server);
        assert_eq!(event.finding.delay_ns, Span::from_millis(40));
        assert_eq!(event.server.port, 8000);
        assert_eq!(event.client.port, 51234);
        assert_eq!(event.ts_ns.as_nanos(), 41_001_000);
        assert_eq!(event.peer_stack, Some(PeerStack::Linux));
        assert_eq!(event.released_bytes, 100);
    }

    #[test]
    fn the_path_is_taken_off_the_hold_before_the_rule() {
        // 35 ms held on a socket whose quickest round trip is 20 ms: the ACK came 15 ms after
        // the path allowed, an ordinary ACK, not a delayed one (detect::hold_kind).
        let mut over_a_path = record(libc::AF_INET as u16, 0, 35_000_000);
        over_a_path[40..44].copy_from_slice(&20_000u32.to_ne_bytes());
        let hold = Hold::parse(&over_a_path).expect("parses");
        let event = hold.to_event(Side::Server, 0, 0);
        assert_eq!(event.finding.kind, StallKind::NagleMinor);
        // 60 ms on the same path: 40 ms beyond it, the delayed ACK.
        over_a_path[16..24].copy_from_slice(&60_000_000u64.to_ne_bytes());
        let event = Hold::parse(&over_a_path)
            .expect("parses")
            .to_event(Side::Server, 0, 0);
        assert_eq!(event.finding.kind, StallKind::NagleDelayedAck);
        assert_eq!(event.finding.ack_delay_ns, Some(Span::from_millis(40)));
    }

    #[test]
    fn a_short_hold_is_minor_and_a_bad_record_is_none() {
        let hold = Hold::parse(&record(libc::AF_INET as u16, 0, 2_000_000)).expect("parses");
        assert_eq!(
            hold.to_event(Side::Client, 0, 0).finding.kind,
            StallKind::NagleMinor
        );
        assert!(Hold::parse(&record(99, 0, 1)).is_none(), "unknown family");
        let mut by_tlp = record(libc::AF_INET as u16, 0, 250_000_000);
        by_tlp[50] = 2;
        let tlp = Hold::parse(&by_tlp).expect("parses");
        assert_eq!(tlp.release, Release::Tlp);
        assert_eq!(
            tlp.to_event(Side::Client, 0, 0).finding.kind,
            StallKind::Rto
        );
        let mut by_close = by_tlp.clone();
        by_close[50] = 6;
        assert!(Hold::parse(&by_close).expect("parses").release.is_closing());
        by_close[50] = 8;
        assert!(Hold::parse(&by_close).is_none(), "unknown release");
        assert!(Hold::parse(&[0u8; 50]).is_none(), "short record");
    }

    #[test]
    fn the_parser_reads_struct_hold_where_the_c_source_lays_it_out() {
        use crate::host::call_stack::user_stack_at;
        use hold_at::*;
        crate::host::c_layout::assert_layout(
            "nagle.bpf.c",
            "hold",
            RECORD_LEN,
            &[
                ("sk", SK),
                ("start_ns", START_NS),
                ("end_ns", END_NS),
                ("tgid", TGID),
                ("unsent", UNSENT),
                ("write_bytes", WRITE_BYTES),
                ("mss", MSS),
                ("min_rtt_us", MIN_RTT_US),
                ("family", FAMILY),
                ("lport", LPORT),
                ("rport", RPORT),
                ("release", RELEASE),
                ("retrans", RETRANS),
                ("saddr", SADDR),
                ("daddr", DADDR),
                ("comm", COMM),
                ("sent_ago", SENT_AGO),
                ("stacks.held.ips", HELD_STACK + user_stack_at::IPS),
                ("stacks.held.top", HELD_STACK + user_stack_at::TOP),
                ("stacks.held.tgid", HELD_STACK + user_stack_at::TGID),
                ("stacks.held.frames", HELD_STACK + user_stack_at::FRAMES),
                ("stacks.previous.ips", PREVIOUS_STACK + user_stack_at::IPS),
                (
                    "stacks.previous.frames",
                    PREVIOUS_STACK + user_stack_at::FRAMES,
                ),
                (
                    "stacks.previous.line_only",
                    PREVIOUS_STACK + user_stack_at::LINE_ONLY,
                ),
            ],
        );
    }

    #[test]
    fn the_embedded_object_has_every_program() {
        let elf = NAGLE_BPF;
        for name in TRACEPOINTS
            .iter()
            .map(|t| format!("tp_btf/{t}"))
            .chain([".BTF.ext", ".rodata", MIN_EMIT_GLOBAL, TAKE_STACKS_GLOBAL].map(String::from))
        {
            assert!(
                elf.windows(name.len()).any(|w| w == name.as_bytes()),
                "{name} missing from bpf/nagle.bpf.o"
            );
        }
    }
}
