//! `sockets --all` from the kernel: every TCP socket of tcpstall's network namespace in one
//! pass of a BPF iterator (`bpf/sockets.bpf.c` on `iter/tcp`), with what getsockopt cannot
//! show from outside (a pending delayed ACK, the ping-pong count, autocorking, `snd_cwnd`)
//! and what it can (TCP_NODELAY, TCP_CORK, the TCP_INFO fields `sockets` prints), read under
//! the socket's lock by the kernel itself: no duplicate fd, no getsockopt per socket.
//!
//! The owners come from `/proc/PID/fd` by inode, as `ss -p` finds them: one scan of every
//! process (or of the asked process tree).

use std::collections::HashMap;
use std::net::SocketAddr;

use super::bpf_iter::{Iter, IterError};
use super::sockets::{Holder, InfoView, SocketView};
use crate::host::kernel::{self, KernelFacts};
use crate::host::procfs::{self, FdListError, TcpEntry, TcpState};
use crate::host::record::RecordBytes;

/// The compiled iterator (`scripts/build-bpf` rebuilds it from `bpf/sockets.bpf.c`), aligned
/// for the ELF reader.
pub static SOCKETS_BPF: &[u8] = aya::include_bytes_aligned!("../../../../bpf/sockets.bpf.o");

/// SHA-256 of the sources the committed object was built from, as `scripts/build-bpf` wrote it.
pub const SOCKETS_BPF_STAMP: &str = include_str!("../../../../bpf/sockets.bpf.stamp");

/// The program's name in the object.
const PROGRAM: &str = "sockets";

/// Size of one record (`struct sock_rec` in `bpf/sockets.bpf.c`).
const RECORD_LEN: usize = 96;

/// Where each field of `struct sock_rec` (`bpf/sockets.bpf.c`) lies in a record: the parser reads
/// these, and a test checks them against the C struct (`host::c_layout`).
mod sock_rec_at {
    pub const INODE: usize = 0;
    pub const UID: usize = 8;
    pub const UNSENT: usize = 12;
    pub const PACKETS_OUT: usize = 16;
    pub const SND_CWND: usize = 20;
    pub const MSS_CACHE: usize = 24;
    pub const SRTT_US: usize = 28;
    pub const DATA_SEGS_IN: usize = 32;
    pub const DATA_SEGS_OUT: usize = 36;
    pub const DELACK_DUE: usize = 40;
    pub const DELACK_MAX: usize = 44;
    pub const FAMILY: usize = 48;
    pub const LPORT: usize = 50;
    pub const RPORT: usize = 52;
    pub const STATE: usize = 54;
    pub const FULL: usize = 55;
    pub const NONAGLE: usize = 56;
    pub const ACK_PENDING: usize = 57;
    pub const ACK_QUICK: usize = 58;
    pub const ACK_PINGPONG: usize = 59;
    pub const ATO: usize = 60;
    pub const THROTTLED: usize = 61;
    pub const SADDR: usize = 64;
    pub const DADDR: usize = 80;
}

/// include/net/tcp.h: `nonagle` bits.
const TCP_NAGLE_OFF: u8 = 1;
const TCP_NAGLE_CORK: u8 = 2;
/// include/net/inet_connection_sock.h: `icsk_ack.pending` bit of an armed delayed-ACK timer.
const ICSK_ACK_TIMER: u8 = 2;

/// One socket as the iterator wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SockRecord {
    inode: u64,
    uid: u32,
    unsent: u32,
    packets_out: u32,
    snd_cwnd: u32,
    mss_cache: u32,
    srtt_us: u32,
    data_segs_in: u32,
    data_segs_out: u32,
    delack_due_jiffies: i32,
    delack_max_jiffies: u32,
    local: SocketAddr,
    remote: SocketAddr,
    state: u8,
    full: bool,
    nonagle: u8,
    ack_pending: u8,
    ack_quick: u8,
    ack_pingpong: u8,
    ato_jiffies: u8,
    throttled: bool,
}

impl SockRecord {
    fn parse(rec: &[u8]) -> Option<SockRecord> {
        let rec = RecordBytes::new(rec, RECORD_LEN)?;
        let family = rec.u16(sock_rec_at::FAMILY)?;
        Some(SockRecord {
            inode: rec.u64(sock_rec_at::INODE)?,
            uid: rec.u32(sock_rec_at::UID)?,
            unsent: rec.u32(sock_rec_at::UNSENT)?,
            packets_out: rec.u32(sock_rec_at::PACKETS_OUT)?,
            snd_cwnd: rec.u32(sock_rec_at::SND_CWND)?,
            mss_cache: rec.u32(sock_rec_at::MSS_CACHE)?,
            srtt_us: rec.u32(sock_rec_at::SRTT_US)?,
            data_segs_in: rec.u32(sock_rec_at::DATA_SEGS_IN)?,
            data_segs_out: rec.u32(sock_rec_at::DATA_SEGS_OUT)?,
            delack_due_jiffies: rec.i32(sock_rec_at::DELACK_DUE)?,
            delack_max_jiffies: rec.u32(sock_rec_at::DELACK_MAX)?,
            local: procfs::unmapped(SocketAddr::new(
                rec.ip(family, sock_rec_at::SADDR)?,
                rec.u16(sock_rec_at::LPORT)?,
            )),
            remote: procfs::unmapped(SocketAddr::new(
                rec.ip(family, sock_rec_at::DADDR)?,
                rec.u16(sock_rec_at::RPORT)?,
            )),
            state: rec.u8(sock_rec_at::STATE)?,
            full: rec.u8(sock_rec_at::FULL)? != 0,
            nonagle: rec.u8(sock_rec_at::NONAGLE)?,
            ack_pending: rec.u8(sock_rec_at::ACK_PENDING)?,
            ack_quick: rec.u8(sock_rec_at::ACK_QUICK)?,
            ack_pingpong: rec.u8(sock_rec_at::ACK_PINGPONG)?,
            ato_jiffies: rec.u8(sock_rec_at::ATO)?,
            throttled: rec.u8(sock_rec_at::THROTTLED)? != 0,
        })
    }
}

pub use crate::report::model::sockets::KernelView;

/// The sockets read in one pass, and notes on what could not be named.
#[derive(Debug, Clone)]
pub struct HostSockets {
    /// Every TCP socket of the namespace (or of the process tree asked for).
    pub sockets: Vec<SocketView>,
    /// What the reader should know: processes whose fds could not be read.
    pub notes: Vec<String>,
}

/// Reads every TCP socket of tcpstall's network namespace with the BPF iterator. `tree`
/// restricts the result to the sockets those processes hold (a process tree); `None` keeps
/// every socket, each named by the process holding it where /proc tells.
pub fn read(tree: Option<&[u32]>) -> Result<HostSockets, IterError> {
    let iter = Iter::load(SOCKETS_BPF, PROGRAM, "tcp")?;
    let bytes = iter
        .read_pass()
        .map_err(|e| IterError::Load(format!("reading the iterator: {e}")))?;
    let records: Vec<SockRecord> = bytes
        .chunks_exact(RECORD_LEN)
        .filter_map(SockRecord::parse)
        .collect();
    let pids = match tree {
        Some(pids) => pids.to_vec(),
        None => procfs::all_pids().unwrap_or_default(),
    };
    let me = std::process::id();
    let (holders, unreadable) = holders_by_inode(pids.iter().copied().filter(|p| *p != me));
    let facts = KernelFacts::read();
    let threshold = kernel::pingpong_threshold(&facts);
    let mut commands: HashMap<u32, Option<String>> = HashMap::new();
    let mut sockets: Vec<SocketView> = records
        .iter()
        .filter(|r| tree.is_none() || holders.contains_key(&r.inode))
        .filter_map(|r| {
            let mut view = view_of(r, holders.get(&r.inode), facts.hz, threshold)?;
            if let Some(pid) = view.pid {
                view.command = commands
                    .entry(pid)
                    .or_insert_with(|| procfs::comm_of(pid))
                    .clone();
            }
            Some(view)
        })
        .collect();
    // Owned sockets by process and fd, then the rest (no file: TIME_WAIT, orphans) by port.
    sockets.sort_by(|a, b| {
        (a.pid.is_none(), a.pid, a.fd, &a.local).cmp(&(b.pid.is_none(), b.pid, b.fd, &b.local))
    });
    let mut notes = Vec::new();
    if unreadable > 0 {
        let why = crate::host::privilege::missing_for_other_users().unwrap_or(
            "refused even with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (other user namespaces, \
             processes that are not dumpable, or a security module)",
        );
        notes.push(format!(
            "the fds of {unreadable} process(es) could not be read: {why}; their sockets are \
             listed with pid ?"
        ));
    }
    Ok(HostSockets { sockets, notes })
}

/// Every process's socket fds by inode (`/proc/PID/fd`), and how many processes refused.
fn holders_by_inode(pids: impl Iterator<Item = u32>) -> (HashMap<u64, Vec<Holder>>, usize) {
    let mut by_inode: HashMap<u64, Vec<Holder>> = HashMap::new();
    let mut unreadable = 0;
    for pid in pids {
        match procfs::socket_fds(pid) {
            Ok(fds) => {
                for (fd, inode) in fds {
                    by_inode.entry(inode).or_default().push(Holder { pid, fd });
                }
            }
            Err(FdListError::PermissionDenied) => unreadable += 1,
            Err(_) => {} // exited meanwhile
        }
    }
    (by_inode, unreadable)
}

fn jiffies_to_us(jiffies: u64, hz: u32) -> u64 {
    jiffies.saturating_mul(1_000_000) / u64::from(hz.max(1))
}

/// The `sockets` row of one record: the options from `nonagle` and the ping-pong count, the
/// TCP_INFO fields as `tcp_get_info` computes them (which needs HZ for `ato`), the owner.
fn view_of(
    r: &SockRecord,
    holders: Option<&Vec<Holder>>,
    hz: Option<u32>,
    pingpong_threshold: u8,
) -> Option<SocketView> {
    let state = TcpState::from_code(r.state)?;
    let entry = TcpEntry {
        local: r.local,
        remote: r.remote,
        state,
        uid: r.uid,
        inode: r.inode,
    };
    let first = holders.and_then(|h| h.first()).copied();
    let mut view = SocketView::from_proc(first.map(|h| h.pid), first.map(|h| h.fd), &entry);
    view.holders = holders.cloned().unwrap_or_default();
    if !r.full {
        view.unknown_reason = Some(format!(
            "{}: a socket without options (the kernel keeps only its addresses)",
            state.name()
        ));
        return Some(view);
    }
    view.nodelay = Some(r.nonagle & TCP_NAGLE_OFF != 0);
    view.cork = Some(r.nonagle & TCP_NAGLE_CORK != 0);
    view.quickack = Some(r.ack_pingpong < pingpong_threshold);
    if let Some(hz) = hz {
        view.tcp_info = Some(InfoView {
            rtt_us: r.srtt_us >> 3,
            ato_us: jiffies_to_us(u64::from(r.ato_jiffies), hz) as u32,
            // tcp_get_info reports a listener's accept backlog here; the kernel row its
            // packets in flight, none for a listener.
            unacked: r.packets_out,
            notsent_bytes: r.unsent,
            snd_mss: r.mss_cache,
            data_segs_out: r.data_segs_out,
            data_segs_in: r.data_segs_in,
        });
        view.delack_max_us = (r.delack_max_jiffies > 0)
            .then(|| u32::try_from(jiffies_to_us(u64::from(r.delack_max_jiffies), hz)).ok())
            .flatten();
    }
    let delack_pending = r.ack_pending & ICSK_ACK_TIMER != 0;
    view.kernel = Some(KernelView {
        nonagle: r.nonagle,
        autocork_pending: r.throttled && r.unsent > 0,
        delack_pending,
        delack_due_ms: hz
            .filter(|_| delack_pending)
            .map(|hz| (f64::from(r.delack_due_jiffies) * 1000.0 / f64::from(hz)).max(0.0)),
        pingpong: r.ack_pingpong,
        quick: r.ack_quick,
        unsent: r.unsent,
        packets_out: r.packets_out,
        snd_cwnd: r.snd_cwnd,
        mss_cache: r.mss_cache,
        uid: r.uid,
    });
    view.judge();
    Some(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_reads_struct_sock_rec_where_the_c_source_lays_it_out() {
        use sock_rec_at::*;
        crate::host::c_layout::assert_layout(
            "sockets.bpf.c",
            "sock_rec",
            RECORD_LEN,
            &[
                ("inode", INODE),
                ("uid", UID),
                ("unsent", UNSENT),
                ("packets_out", PACKETS_OUT),
                ("snd_cwnd", SND_CWND),
                ("mss_cache", MSS_CACHE),
                ("srtt_us", SRTT_US),
                ("data_segs_in", DATA_SEGS_IN),
                ("data_segs_out", DATA_SEGS_OUT),
                ("delack_due", DELACK_DUE),
                ("delack_max", DELACK_MAX),
                ("family", FAMILY),
                ("lport", LPORT),
                ("rport", RPORT),
                ("state", STATE),
                ("full", FULL),
                ("nonagle", NONAGLE),
                ("ack_pending", ACK_PENDING),
                ("ack_quick", ACK_QUICK),
                ("ack_pingpong", ACK_PINGPONG),
                ("ato", ATO),
                ("throttled", THROTTLED),
                ("saddr", SADDR),
                ("daddr", DADDR),
            ],
        );
    }

    fn record(state: u8, nonagle: u8, pending: u8) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_LEN];
        r[0..8].copy_from_slice(&4242u64.to_ne_bytes());
        r[12..16].copy_from_slice(&10u32.to_ne_bytes());
        r[16..20].copy_from_slice(&1u32.to_ne_bytes());
        r[24..28].copy_from_slice(&65_483u32.to_ne_bytes());
        r[28..32].copy_from_slice(&800u32.to_ne_bytes());
        r[40..44].copy_from_slice(&10i32.to_ne_bytes());
        r[48..50].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        r[50..52].copy_from_slice(&8000u16.to_ne_bytes());
        r[52..54].copy_from_slice(&40000u16.to_ne_bytes());
        r[54] = state;
        r[55] = 1;
        r[56] = nonagle;
        r[57] = pending;
        r[59] = 1;
        r[60] = 10;
        r[64..68].copy_from_slice(&[127, 0, 0, 1]);
        r[80..84].copy_from_slice(&[127, 0, 0, 1]);
        r
    }

    #[test]
    fn a_record_reads_as_a_sockets_row() {
        let r = SockRecord::parse(&record(1, 0, 3)).expect("parses");
        assert_eq!(r.local, "127.0.0.1:8000".parse().expect("addr"));
        let view = view_of(&r, None, Some(250), 1).expect("a view");
        assert_eq!(view.state, TcpState::Established);
        assert_eq!((view.nodelay, view.cork), (Some(false), Some(false)));
        assert_eq!(view.quickack, Some(false), "ping-pong at the threshold");
        let info = view.tcp_info.expect("info with HZ");
        assert_eq!(
            (info.rtt_us, info.ato_us, info.notsent_bytes),
            (100, 40_000, 10)
        );
        assert_eq!(
            view.held_now,
            Some(true),
            "unsent behind a segment in flight"
        );
        let k = view.kernel.expect("kernel view");
        assert!(k.delack_pending);
        assert_eq!(k.delack_due_ms, Some(40.0));
        let corked = view_of(
            &SockRecord::parse(&record(1, TCP_NAGLE_CORK, 0)).expect("parses"),
            None,
            None,
            1,
        )
        .expect("a view");
        assert_eq!((corked.nodelay, corked.cork), (Some(false), Some(true)));
        assert!(corked.tcp_info.is_none(), "HZ unknown: no ato");
        assert!(!corked.kernel.expect("kernel view").delack_pending);
        assert!(SockRecord::parse(&[0u8; 40]).is_none(), "short record");
    }

    /// The client side of a connection after request/response turns (ping-pong mode), once
    /// a small answer arrived: its ACK waits for the delayed-ACK timer (40 ms), and the
    /// kernel's record says so while it runs.
    #[test]
    fn a_delayed_ack_owed_shows_while_its_timer_runs() {
        use std::io::Write;
        use std::time::{Duration, Instant};
        let iter = match Iter::load(SOCKETS_BPF, PROGRAM, "tcp") {
            Ok(iter) => iter,
            Err(err) => {
                eprintln!("skipped: the socket iterator cannot load here: {err}");
                return;
            }
        };
        let owed = |local: SocketAddr| -> Option<SockRecord> {
            let bytes = iter.read_pass().expect("a pass");
            bytes
                .chunks_exact(RECORD_LEN)
                .filter_map(SockRecord::parse)
                .find(|r| r.local == local && r.ack_pending & ICSK_ACK_TIMER != 0)
        };
        // Attempts absorb a descheduled test: the timer runs 40 ms.
        for _ in 0..20 {
            let (_listener, client, mut server) = super::super::sockets::ping_pong_pair(4);
            server.write_all(b"x").expect("a small answer");
            let local = client.local_addr().expect("addr");
            let sent = Instant::now();
            while sent.elapsed() < Duration::from_millis(30) {
                if let Some(r) = owed(local) {
                    assert!(r.ack_pingpong >= 1, "{r:?}");
                    assert!(r.delack_due_jiffies > 0, "the timer is ahead: {r:?}");
                    return;
                }
            }
        }
        panic!("no delayed ACK seen owed on the client side in 20 attempts");
    }
}
