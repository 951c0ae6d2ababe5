//! The lab's live capture of its own loopback traffic, without libpcap: an AF_PACKET socket
//! bound to `lo`, kernel timestamps (SO_TIMESTAMPNS), written as a classic pcap file.
//!
//! Only packets to or from the ports given to [`LiveCapture::watch_port`] are kept: other
//! programs (and other lab instances) share `lo`. On loopback every packet passes the tap twice,
//! once leaving (PACKET_OUTGOING) and once arriving; like libpcap, only the arriving copy is kept.
//!
//! Over an emulated path (`lab --rtt`) the capture taps the server namespace's TUN device
//! instead: raw IP packets (LINKTYPE_RAW), each seen once, in either direction, as the server's
//! kernel sends and receives them.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use etherparse::{SlicedPacket, TransportSlice};
use nix::errno::Errno;
use nix::sys::socket::{
    self, sockopt, AddressFamily, ControlMessageOwned, LinkAddr, MsgFlags, SockFlag, SockProtocol,
    SockType, SockaddrLike,
};
use nix::sys::time::{TimeVal, TimeValLike};

use super::pcap_writer::{PcapWriter, LINKTYPE_ETHERNET};
use crate::lab::path::NetNs;

/// LINKTYPE_RAW: each packet starts with its IPv4 or IPv6 header (a TUN device's packets).
const LINKTYPE_RAW: u32 = 101;

/// Which kind of device a capture taps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tap {
    /// `lo`: Ethernet frames, every packet seen twice.
    Loopback,
    /// A TUN device: raw IP packets, each seen once.
    Tun,
}

/// Largest frame on `lo` (MTU 65536 plus the Ethernet header), so nothing is cut.
const SNAPLEN: u32 = 65_536 + 14;

/// After the last flow closed, stop once no watched packet came for this long (the final ACK).
const QUIET_AFTER_CLOSE: Duration = Duration::from_millis(30);

/// Upper bound on waiting for FINs once stopping was asked for.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// What a finished capture wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Packets written to the file.
    pub packets: u64,
    /// TCP connections seen (by port pair).
    pub flows: u64,
    /// Flows that had not closed (FIN both ways, or RST) when the capture stopped.
    pub unclosed_flows: u64,
    /// Packets the kernel dropped because the capture socket's buffer was full (any port).
    pub dropped: u64,
}

/// A running capture of loopback traffic to a file.
pub struct LiveCapture {
    path: PathBuf,
    ports: Arc<Mutex<HashSet<u16>>>,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<io::Result<CaptureSummary>>>,
}

impl LiveCapture {
    /// Opens the capture socket on `lo` and the pcap file; packets are buffered by the kernel
    /// from this call on, so a connection opened afterwards is captured from its SYN.
    pub fn start_loopback(path: &Path) -> anyhow::Result<LiveCapture> {
        let fd = open_packet_socket("lo")?;
        LiveCapture::start(path, fd, Tap::Loopback)
    }

    /// Like [`LiveCapture::start_loopback`] but on the TUN device `interface` of namespace `ns`
    /// (the server end of an emulated path), written as raw IP packets.
    pub fn start_tun(path: &Path, ns: &NetNs, interface: &str) -> anyhow::Result<LiveCapture> {
        let fd = ns
            .run(|| {
                open_packet_socket(interface).map_err(|err| io::Error::other(format!("{err:#}")))
            })
            .with_context(|| format!("cannot capture on {interface} in {}", ns.name()))?;
        LiveCapture::start(path, fd, Tap::Tun)
    }

    fn start(path: &Path, fd: OwnedFd, tap: Tap) -> anyhow::Result<LiveCapture> {
        let file = File::create(path)
            .with_context(|| format!("cannot create capture file {}", path.display()))?;
        let linktype = match tap {
            Tap::Loopback => LINKTYPE_ETHERNET,
            Tap::Tun => LINKTYPE_RAW,
        };
        let writer = PcapWriter::new(BufWriter::new(file), linktype, SNAPLEN)
            .with_context(|| format!("cannot write to {}", path.display()))?;
        let ports = Arc::new(Mutex::new(HashSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (ports, stop) = (ports.clone(), stop.clone());
            std::thread::Builder::new()
                .name("lab-capture".into())
                .spawn(move || capture_loop(fd, writer, tap, &ports, &stop))?
        };
        Ok(LiveCapture {
            path: path.to_path_buf(),
            ports,
            stop,
            reader: Some(reader),
        })
    }

    /// Keeps packets to or from `port` from now on. Call before the first connect to it.
    pub fn watch_port(&self, port: u16) {
        if let Ok(mut ports) = self.ports.lock() {
            ports.insert(port);
        }
    }

    /// Stops after the last FIN of the watched flows has been seen (bounded by a grace
    /// period), flushes the file and says what was written.
    pub fn finish(mut self) -> anyhow::Result<CaptureSummary> {
        self.stop.store(true, Ordering::SeqCst);
        let reader = self
            .reader
            .take()
            .ok_or_else(|| anyhow!("capture already finished"))?;
        reader
            .join()
            .map_err(|_| anyhow!("the capture thread panicked"))?
            .with_context(|| format!("capture to {} failed", self.path.display()))
    }
}

impl Drop for LiveCapture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

fn open_packet_socket(interface: &str) -> anyhow::Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Packet,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::EthAll,
    )
    .map_err(|err| match err {
        Errno::EPERM | Errno::EACCES => anyhow!(
            "--capture needs CAP_NET_RAW to open a packet socket: run as root (sudo tcpstall lab \
             --capture ...) or grant it once with `sudo setcap cap_net_raw+ep $(command -v tcpstall)`"
        ),
        other => anyhow!("cannot open a packet socket: {other}"),
    })?;
    let ifindex = nix::net::if_::if_nametoindex(interface)
        .with_context(|| format!("no network interface named {interface}"))?;
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value before the fields are set.
    let mut raw: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    raw.sll_family = libc::AF_PACKET as u16;
    raw.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    raw.sll_ifindex = i32::try_from(ifindex).context("interface index out of range")?;
    // SAFETY: raw is a live, fully initialised sockaddr_ll of the length given.
    let addr = unsafe {
        LinkAddr::from_raw(
            (&raw as *const libc::sockaddr_ll).cast(),
            Some(std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t),
        )
    }
    .ok_or_else(|| anyhow!("cannot build the link-layer address of {interface}"))?;
    socket::bind(fd.as_raw_fd(), &addr).with_context(|| format!("cannot bind to {interface}"))?;
    socket::setsockopt(&fd, sockopt::ReceiveTimestampns, &true)
        .context("cannot enable kernel timestamps (SO_TIMESTAMPNS)")?;
    // A short timeout so that the reader sees the stop flag.
    socket::setsockopt(&fd, sockopt::ReceiveTimeout, &TimeVal::milliseconds(10))
        .context("cannot set a receive timeout on the packet socket")?;
    // A large buffer so that bursts are not dropped while the file is written; forcing it
    // needs CAP_NET_ADMIN, so fall back to the ordinary limit.
    let buffer = 8 << 20;
    if socket::setsockopt(&fd, sockopt::RcvBufForce, &buffer).is_err() {
        let _ = socket::setsockopt(&fd, sockopt::RcvBuf, &buffer);
    }
    Ok(fd)
}

/// Close state of one TCP connection, keyed by its port pair.
#[derive(Debug, Default)]
struct FlowClose {
    /// Source ports that sent a FIN.
    fin_from: HashSet<u16>,
    reset: bool,
}

impl FlowClose {
    fn closed(&self) -> bool {
        self.reset || self.fin_from.len() == 2
    }
}

fn capture_loop(
    fd: OwnedFd,
    mut writer: PcapWriter<BufWriter<File>>,
    tap: Tap,
    ports: &Mutex<HashSet<u16>>,
    stop: &AtomicBool,
) -> io::Result<CaptureSummary> {
    let mut frame = vec![0u8; SNAPLEN as usize];
    let mut flows: HashMap<(u16, u16), FlowClose> = HashMap::new();
    let mut stop_asked: Option<Instant> = None;
    let mut last_watched = Instant::now();
    loop {
        if stop_asked.is_none() && stop.load(Ordering::SeqCst) {
            stop_asked = Some(Instant::now());
        }
        if let Some(asked) = stop_asked {
            let all_closed = flows.values().all(FlowClose::closed);
            if (all_closed && last_watched.elapsed() >= QUIET_AFTER_CLOSE)
                || asked.elapsed() >= CLOSE_GRACE
            {
                break;
            }
        }
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let mut iov = [IoSliceMut::new(&mut frame)];
        let received = socket::recvmsg::<LinkAddr>(
            fd.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_TRUNC,
        );
        let (len, outgoing, ts_ns) = match received {
            Ok(msg) => {
                let outgoing = msg
                    .address
                    .is_some_and(|a| a.pkttype() == libc::PACKET_OUTGOING);
                let ts_ns = msg
                    .cmsgs()
                    .ok()
                    .and_then(|mut cmsgs| {
                        cmsgs.find_map(|c| match c {
                            ControlMessageOwned::ScmTimestampns(ts) => {
                                Some(ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64)
                            }
                            _ => None,
                        })
                    })
                    .unwrap_or_else(now_ns);
                (msg.bytes, outgoing, ts_ns)
            }
            Err(Errno::EAGAIN | Errno::EINTR) => continue,
            Err(err) => return Err(err.into()),
        };
        if outgoing && tap == Tap::Loopback {
            continue;
        }
        let data = &frame[..len.min(frame.len())];
        let Some(tcp) = tcp_ports_and_flags(data, tap) else {
            continue;
        };
        let watched = ports
            .lock()
            .map(|p| p.contains(&tcp.src) || p.contains(&tcp.dst))
            .unwrap_or(false);
        if !watched {
            continue;
        }
        last_watched = Instant::now();
        writer.write_packet(ts_ns, data, len as u32)?;
        let flow = flows
            .entry((tcp.src.min(tcp.dst), tcp.src.max(tcp.dst)))
            .or_default();
        if tcp.fin {
            flow.fin_from.insert(tcp.src);
        }
        flow.reset |= tcp.rst;
    }
    let packets = writer.packets();
    writer.finish()?;
    let (_, dropped) = crate::sockopt::packet_statistics(fd.as_fd())?;
    Ok(CaptureSummary {
        packets,
        flows: flows.len() as u64,
        unclosed_flows: flows.values().filter(|f| !f.closed()).count() as u64,
        dropped: u64::from(dropped),
    })
}

struct TcpSummary {
    src: u16,
    dst: u16,
    fin: bool,
    rst: bool,
}

fn tcp_ports_and_flags(frame: &[u8], tap: Tap) -> Option<TcpSummary> {
    let packet = match tap {
        Tap::Loopback => SlicedPacket::from_ethernet(frame).ok()?,
        Tap::Tun => SlicedPacket::from_ip(frame).ok()?,
    };
    match packet.transport? {
        TransportSlice::Tcp(tcp) => Some(TcpSummary {
            src: tcp.source_port(),
            dst: tcp.destination_port(),
            fin: tcp.fin(),
            rst: tcp.rst(),
        }),
        _ => None,
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
