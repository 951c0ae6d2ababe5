//! Live capture without libpcap: an AF_PACKET socket bound to one interface, kernel
//! timestamps (SO_TIMESTAMPNS), every TCP segment decoded by [`crate::decode`] (the decoder
//! `analyze` reads files with) and handed to a [`SegmentConsumer`] (a [`Detector`]), and
//! optionally written to a classic pcap file.
//!
//! Opening and running are apart so that the socket can be opened in another network
//! namespace ([`PacketSocket::open`] works in the calling thread's namespace) and run from
//! anywhere:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use tcpstall::capture::live::{CaptureOptions, LiveCapture, PacketSocket, PortFilter};
//! use tcpstall::detect::{Detector, DetectorConfig};
//! let socket = PacketSocket::open("lo")?;
//! let options = CaptureOptions { ports: PortFilter::Only(vec![8080]), pcap: None };
//! let capture = LiveCapture::start(socket, options, Detector::new(DetectorConfig::default()))?;
//! // ... traffic to and from port 8080 ...
//! let finished = capture.finish()?;
//! let analysis = finished.consumer.finish();
//! # Ok(()) }
//! ```
//!
//! Only packets to or from the watched ports are kept (other programs share the interface),
//! filtered in the kernel by a BPF program (`bpf.rs`) and again in user space. On `lo` every
//! packet passes the tap twice, once leaving (PACKET_OUTGOING) and once arriving; like
//! libpcap, only the arriving copy is kept. On any other device (Ethernet, a
//! TUN device) each packet is seen once, leaving or arriving, and both are kept.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufWriter, IoSliceMut};
use std::net::IpAddr;
use std::ops::Range;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context};
use nix::errno::Errno;
use nix::sys::socket::{self, sockopt, AddressFamily, LinkAddr, MsgFlags, SockFlag, SockType};
use nix::sys::time::{TimeVal, TimeValLike};

use super::bpf;
use super::pcap_writer::{PcapWriter, LINKTYPE_ETHERNET};
use super::stamps::{kernel_timestamp_ns, receive_timestamps};
use crate::decode::link::LinkType;
use crate::decode::{flags, Decap, Decoded, PacketMeta, Segment};
use crate::detect::Detector;

/// LINKTYPE_RAW: each packet starts with its IPv4 or IPv6 header (a TUN device's packets).
pub const LINKTYPE_RAW: u32 = 101;

/// `ARPHRD_RAWIP` (include/uapi/linux/if_arp.h): raw IP devices (e.g. cellular modems),
/// missing from the libc crate.
pub(super) const ARPHRD_RAWIP: u16 = 519;

/// Largest frame on `lo` (MTU 65536 plus the Ethernet header), so nothing is cut.
const SNAPLEN: u32 = 65_536 + 14;

/// After the last flow closed, stop once no watched packet came for this long (the final ACK).
const QUIET_AFTER_CLOSE: Duration = Duration::from_millis(30);

/// Upper bound on waiting for FINs once [`LiveCapture::finish`] was called.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// How often the reader wakes to look at the stop flag when no packet comes.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Why a packet socket could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The process lacks CAP_NET_RAW (checked by the kernel when the socket is created).
    #[error(
        "capturing on {interface} needs CAP_NET_RAW to open a packet socket: run as root \
         (sudo) or grant it once with `sudo setcap cap_net_raw+ep $(command -v tcpstall)`"
    )]
    NoPermission {
        /// The interface asked for.
        interface: String,
    },
    /// No interface of that name in the calling thread's network namespace.
    #[error("no network interface named {interface}: see `ip link` for the names")]
    NoInterface {
        /// The interface asked for.
        interface: String,
    },
    /// The interface's frames carry a link header this crate does not decode.
    #[error(
        "interface {interface} has hardware type {hatype} (ARPHRD_*), whose frames tcpstall \
         cannot decode; capture on an Ethernet, loopback or TUN interface"
    )]
    UnsupportedLink {
        /// The interface asked for.
        interface: String,
        /// Its `ARPHRD_*` type.
        hatype: u16,
    },
    /// Any other failure of the system calls that set the socket up.
    #[error("cannot set up a packet socket on {interface}: {what}: {error}")]
    System {
        /// The interface asked for.
        interface: String,
        /// The step that failed.
        what: &'static str,
        /// What the system said.
        error: io::Error,
    },
}

/// An AF_PACKET socket bound to one interface, with kernel timestamps on; packets are queued
/// by the kernel from the moment it is open, so a connection made afterwards is captured from
/// its SYN.
#[derive(Debug)]
pub struct PacketSocket {
    /// Shared with the capture, which narrows the kernel's filter as ports are added.
    fd: Arc<OwnedFd>,
    interface: String,
    /// `LINKTYPE_*` of the frames read (and of the pcap file written).
    linktype: u32,
    /// `lo`: each packet is read twice, leaving and arriving.
    loopback: bool,
}

impl PacketSocket {
    /// Opens a packet socket on `interface` of the calling thread's network namespace (call
    /// it from a thread that entered a namespace to capture there, e.g. with
    /// [`crate::host::netns::NetNs::run`]). Needs CAP_NET_RAW: without it the error is
    /// [`OpenError::NoPermission`], which is how a caller checks whether it may capture.
    pub fn open(interface: &str) -> Result<PacketSocket, OpenError> {
        let system = |what: &'static str| {
            move |error: Errno| OpenError::System {
                interface: interface.to_string(),
                what,
                error: error.into(),
            }
        };
        // Protocol 0: nothing is queued until the filter is on and the bind below names the
        // protocol (packet_create registers no hook for 0, packet_do_bind then does).
        let fd = socket::socket(
            AddressFamily::Packet,
            SockType::Raw,
            SockFlag::SOCK_CLOEXEC,
            None,
        )
        .map_err(|err| match err {
            Errno::EPERM | Errno::EACCES => OpenError::NoPermission {
                interface: interface.to_string(),
            },
            other => system("socket(AF_PACKET)")(other),
        })?;
        let ifindex = nix::net::if_::if_nametoindex(interface)
            .ok()
            .and_then(|index| i32::try_from(index).ok())
            .ok_or_else(|| OpenError::NoInterface {
                interface: interface.to_string(),
            })?;
        bind_packet_socket(&fd, ifindex, 0).map_err(system("bind"))?;
        let hatype = hardware_type(&fd).map_err(system("getsockname"))?;
        let (linktype, loopback) = match hatype {
            // Linux `lo` frames carry an Ethernet header with zero addresses.
            libc::ARPHRD_LOOPBACK => (LINKTYPE_ETHERNET, true),
            libc::ARPHRD_ETHER => (LINKTYPE_ETHERNET, false),
            // TUN, WireGuard and other layer-3 devices: the IP header comes first.
            libc::ARPHRD_NONE | ARPHRD_RAWIP | libc::ARPHRD_PPP => (LINKTYPE_RAW, false),
            other => {
                return Err(OpenError::UnsupportedLink {
                    interface: interface.to_string(),
                    hatype: other,
                })
            }
        };
        receive_timestamps(&fd).map_err(system("SO_TIMESTAMPNS"))?;
        let timeout = TimeVal::milliseconds(POLL_INTERVAL.as_millis() as i64);
        socket::setsockopt(&fd, sockopt::ReceiveTimeout, &timeout)
            .map_err(system("SO_RCVTIMEO"))?;
        // A large buffer so that bursts are not dropped while the file is written; forcing it
        // needs CAP_NET_ADMIN, so fall back to the ordinary limit.
        let buffer = 8 << 20;
        if socket::setsockopt(&fd, sockopt::RcvBufForce, &buffer).is_err() {
            let _ = socket::setsockopt(&fd, sockopt::RcvBuf, &buffer);
        }
        let socket = PacketSocket {
            fd: Arc::new(fd),
            interface: interface.to_string(),
            linktype,
            loopback,
        };
        // Nothing until a capture starts and says which ports it keeps.
        socket
            .filter_ports(Some(&HashSet::new()))
            .map_err(|err| OpenError::System {
                interface: interface.to_string(),
                what: "SO_ATTACH_FILTER",
                error: err,
            })?;
        bind_packet_socket(&socket.fd, ifindex, libc::ETH_P_ALL as u16).map_err(system("bind"))?;
        Ok(socket)
    }

    /// Another handle on the same socket.
    fn handle(&self) -> PacketSocket {
        PacketSocket {
            fd: self.fd.clone(),
            interface: self.interface.clone(),
            linktype: self.linktype,
            loopback: self.loopback,
        }
    }

    /// Lets the kernel queue only TCP packets to or from `ports` (any port for `None`), and
    /// on `lo` only the arriving copy of each.
    fn filter_ports(&self, ports: Option<&HashSet<u16>>) -> io::Result<()> {
        let framing = super::filter::Framing::of_linktype(self.linktype);
        let mut program = bpf::port_filter(framing, self.loopback, ports);
        bpf::attach(self.fd.as_fd(), &mut program)
    }

    /// The interface the socket is bound to.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The `LINKTYPE_*` of its frames: [`LINKTYPE_ETHERNET`] on `lo` and Ethernet devices,
    /// [`LINKTYPE_RAW`] on TUN devices.
    pub fn linktype(&self) -> u32 {
        self.linktype
    }
}

/// Binds a packet socket to interface `ifindex` for `protocol` (an `ETH_P_*`, host order; 0
/// receives nothing).
pub(super) fn bind_packet_socket(fd: &OwnedFd, ifindex: i32, protocol: u16) -> Result<(), Errno> {
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value before the fields are set.
    let mut raw: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    raw.sll_family = libc::AF_PACKET as u16;
    raw.sll_protocol = protocol.to_be();
    raw.sll_ifindex = ifindex;
    // SAFETY: raw is a live, fully initialised sockaddr_ll of the length given.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    Errno::result(rc).map(drop)
}

/// The `ARPHRD_*` type of the device a bound packet socket is on: `packet_getname` fills
/// `sll_hatype`. (Read with libc: the address is shorter than a whole `sockaddr_ll`, which
/// nix's `LinkAddr` refuses.)
pub(super) fn hardware_type(fd: &OwnedFd) -> Result<u16, Errno> {
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value for the kernel to fill.
    let mut bound: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: bound and len are live locals of the sizes the kernel is told.
    let rc = unsafe {
        libc::getsockname(
            fd.as_raw_fd(),
            (&mut bound as *mut libc::sockaddr_ll).cast(),
            &mut len,
        )
    };
    Errno::result(rc).map(|_| bound.sll_hatype)
}

/// Which packets a capture keeps, by TCP port (either end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortFilter {
    /// Every TCP packet on the interface.
    All,
    /// Packets to or from these ports; [`LiveCapture::watch_port`] adds more while it runs,
    /// [`LiveCapture::unwatch_port`] ends one's new connections.
    Only(Vec<u16>),
}

/// How a capture runs.
#[derive(Debug, Clone)]
pub struct CaptureOptions {
    /// The packets kept.
    pub ports: PortFilter,
    /// Also write the kept packets to this classic pcap file (nanosecond timestamps, the
    /// socket's link type).
    pub pcap: Option<PathBuf>,
}

/// What receives the decoded segments, in capture order, on the capture's thread.
pub trait SegmentConsumer: Send + 'static {
    /// One TCP segment the capture kept.
    fn segment(&mut self, segment: &Segment);
}

impl SegmentConsumer for Detector {
    fn segment(&mut self, segment: &Segment) {
        self.push(segment);
    }
}

/// No consumer: the capture only writes its file.
impl SegmentConsumer for () {
    fn segment(&mut self, _: &Segment) {}
}

impl<F: FnMut(&Segment) + Send + 'static> SegmentConsumer for F {
    fn segment(&mut self, segment: &Segment) {
        self(segment)
    }
}

/// What a finished capture kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaptureSummary {
    /// Packets kept (written to the file, when there is one).
    pub packets: u64,
    /// TCP connections seen (by address and port pair).
    pub flows: u64,
    /// Flows that had not closed (FIN both ways, or RST) when the capture stopped.
    pub unclosed_flows: u64,
    /// Packets the kernel dropped because the capture socket's buffer was full.
    pub dropped: u64,
    /// Packets the kernel's port filter let through to the socket, dropped ones included:
    /// `packets` plus what user space still set aside (packets queued before a filter
    /// change, non-TCP packets it could not judge).
    pub queued: u64,
}

/// A finished capture: its summary and the consumer, holding what it made of the segments.
#[derive(Debug)]
pub struct Finished<C> {
    /// What was kept.
    pub summary: CaptureSummary,
    /// The consumer given to [`LiveCapture::start`].
    pub consumer: C,
}

/// When the reader thread ends (held in an `AtomicU8`, read on every wake-up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum StopMode {
    Running = 0,
    /// Once every watched flow has closed, or after [`CLOSE_GRACE`].
    WhenClosed = 1,
    /// Once the packets the kernel has queued are read.
    Now = 2,
}

impl StopMode {
    fn load(flag: &AtomicU8) -> StopMode {
        match flag.load(Ordering::SeqCst) {
            0 => StopMode::Running,
            1 => StopMode::WhenClosed,
            _ => StopMode::Now,
        }
    }
}

/// A running capture: a thread reads the socket, decodes, filters, writes and consumes.
pub struct LiveCapture<C: SegmentConsumer> {
    description: String,
    /// The socket's kernel filter is narrowed to `ports` through this handle.
    filter: PacketSocket,
    ports: Arc<Mutex<Option<WatchedPorts>>>,
    stop: Arc<AtomicU8>,
    reader: Option<JoinHandle<io::Result<Finished<C>>>>,
}

impl<C: SegmentConsumer> LiveCapture<C> {
    /// Starts reading `socket` on a thread of its own, creating the pcap file first if one
    /// is asked for.
    pub fn start(
        socket: PacketSocket,
        options: CaptureOptions,
        consumer: C,
    ) -> anyhow::Result<LiveCapture<C>> {
        let writer = match &options.pcap {
            Some(path) => {
                let file = File::create(path)
                    .with_context(|| format!("cannot create capture file {}", path.display()))?;
                Some(
                    PcapWriter::new(BufWriter::new(file), socket.linktype, SNAPLEN)
                        .with_context(|| format!("cannot write to {}", path.display()))?,
                )
            }
            None => None,
        };
        // Before any packet of the capture: stamped as they arrive, from the first.
        super::stamps::keep_arrival_stamps();
        let link = LinkType::from_code(socket.linktype)
            .ok_or_else(|| anyhow!("internal error: link type {} not decoded", socket.linktype))?;
        let description = match &options.pcap {
            Some(path) => format!("capture on {} to {}", socket.interface, path.display()),
            None => format!("capture on {}", socket.interface),
        };
        let ports = match options.ports {
            PortFilter::All => None,
            PortFilter::Only(ports) => Some(WatchedPorts::from_start(ports)),
        };
        socket
            .filter_ports(ports.as_ref().map(WatchedPorts::ports).as_ref())
            .with_context(|| format!("cannot filter the {description} by port"))?;
        let filter = socket.handle();
        let ports = Arc::new(Mutex::new(ports));
        let stop = Arc::new(AtomicU8::new(StopMode::Running as u8));
        let reader = {
            let tap = Tap {
                socket,
                link,
                writer,
                consumer,
                ports: ports.clone(),
                stop: stop.clone(),
            };
            std::thread::Builder::new()
                .name("live-capture".into())
                .spawn(move || tap.run())
                .context("cannot start the capture thread")?
        };
        Ok(LiveCapture {
            description,
            filter,
            ports,
            stop,
            reader: Some(reader),
        })
    }

    /// Keeps packets to or from `port` from now on. Call before the first connect to it.
    /// (With [`PortFilter::All`] every port is kept already.)
    pub fn watch_port(&self, port: u16) {
        let Ok(mut ports) = self.ports.lock() else {
            return;
        };
        if let Some(ports) = ports.as_mut() {
            if ports.watch(port, now_ns())
                && self.filter.filter_ports(Some(&ports.ports())).is_err()
            {
                // The old program would drop the new port: let everything through to the
                // reader, which filters by port itself.
                let _ = bpf::detach(self.filter.fd.as_fd());
            }
        }
    }

    /// Keeps no new connection to or from `port` from now on; the connections already kept go
    /// on being kept until they close (their last ACKs may come later). Another program may be
    /// given the port once its user is done with it: its traffic is not ours to record.
    pub fn unwatch_port(&self, port: u16) {
        if let Ok(mut ports) = self.ports.lock() {
            if let Some(ports) = ports.as_mut() {
                ports.unwatch(port, now_ns());
            }
        }
    }

    /// Stops after the last FIN of the kept connections has been seen (bounded by a grace
    /// period of 2 s; no new connection of a watched port is kept meanwhile), flushes the file
    /// and returns the summary and the consumer.
    pub fn finish(self) -> anyhow::Result<Finished<C>> {
        self.end(StopMode::WhenClosed)
    }

    /// Stops once the packets the kernel has queued are read (packets still in flight are
    /// not waited for), flushes the file and returns the summary and the consumer.
    pub fn stop(self) -> anyhow::Result<Finished<C>> {
        self.end(StopMode::Now)
    }

    fn end(mut self, mode: StopMode) -> anyhow::Result<Finished<C>> {
        // What is waited for is the connections already kept; a new one is somebody else's.
        if let Ok(mut ports) = self.ports.lock() {
            if let Some(ports) = ports.as_mut() {
                ports.unwatch_all(now_ns());
            }
        }
        self.stop.store(mode as u8, Ordering::SeqCst);
        let reader = self
            .reader
            .take()
            .ok_or_else(|| anyhow!("capture already finished"))?;
        reader
            .join()
            .map_err(|_| anyhow!("the capture thread panicked"))?
            .with_context(|| format!("{} failed", self.description))
    }
}

impl<C: SegmentConsumer> Drop for LiveCapture<C> {
    fn drop(&mut self) {
        self.stop.store(StopMode::Now as u8, Ordering::SeqCst);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// The ports a capture keeps, when not every one, and when.
#[derive(Debug)]
struct WatchedPorts {
    /// Each port ever watched, with its watched spans (ns since the Unix epoch, the clock of
    /// the kernel's packet timestamps; the last one open while watched). The kernel's filter
    /// lets every one of these ports through, so the last packets of a connection of an
    /// unwatched port still come; the packet's stamp decides, not when it is read: the reader
    /// may lag behind.
    spans: HashMap<u16, Vec<Range<u64>>>,
}

impl WatchedPorts {
    /// `ports`, watched from the start.
    fn from_start(ports: Vec<u16>) -> WatchedPorts {
        WatchedPorts {
            spans: ports
                .into_iter()
                .map(|p| (p, std::iter::once(0..u64::MAX).collect()))
                .collect(),
        }
    }

    /// The ports the kernel's filter lets through: every one ever watched.
    fn ports(&self) -> HashSet<u16> {
        self.spans.keys().copied().collect()
    }

    /// Watches `port` from `now`; whether it is new to the kernel's filter.
    fn watch(&mut self, port: u16, now: u64) -> bool {
        let new = !self.spans.contains_key(&port);
        let spans = self.spans.entry(port).or_default();
        if !spans.last().is_some_and(|s| s.end == u64::MAX) {
            spans.push(now..u64::MAX);
        }
        new
    }

    /// Ends `port`'s watched span at `now`.
    fn unwatch(&mut self, port: u16, now: u64) {
        if let Some(last) = self.spans.get_mut(&port).and_then(|s| s.last_mut()) {
            last.end = last.end.min(now);
        }
    }

    /// Ends every port's watched span at `now`.
    fn unwatch_all(&mut self, now: u64) {
        for last in self.spans.values_mut().filter_map(|s| s.last_mut()) {
            last.end = last.end.min(now);
        }
    }

    /// Whether `segment` is kept: stamped while one of its ports was watched, or, to or from a
    /// port watched before, of a connection kept then (`kept_before`).
    fn keep(&self, segment: &Segment, kept_before: impl FnOnce() -> bool) -> bool {
        let at = segment.ts_ns.as_nanos();
        let watched_then = |port: u16| {
            self.spans
                .get(&port)
                .is_some_and(|spans| spans.iter().rev().any(|s| s.contains(&at)))
        };
        let watched_ever = |port: u16| self.spans.contains_key(&port);
        watched_then(segment.src_port)
            || watched_then(segment.dst_port)
            || ((watched_ever(segment.src_port) || watched_ever(segment.dst_port)) && kept_before())
    }
}

/// A connection by its two endpoints, the lower first: both directions map to one key.
type ConnectionKey = ((IpAddr, u16), (IpAddr, u16));

fn connection_key(segment: &Segment) -> ConnectionKey {
    let (a, b) = (
        (segment.src, segment.src_port),
        (segment.dst, segment.dst_port),
    );
    (a.min(b), a.max(b))
}

/// A closed connection is forgotten this long after it closed: Linux's TIME_WAIT
/// (`TCP_TIMEWAIT_LEN`, 60 s), after which no packet of it can come. Keeps a long capture's
/// memory bounded.
const FORGET_CLOSED_AFTER: Duration = Duration::from_secs(60);

/// How far one connection has closed.
#[derive(Debug, Default)]
struct Closing {
    /// Endpoints that sent a FIN, by whether they are the lower of the two.
    fin_from: [bool; 2],
    reset: bool,
    /// When FINs both ways or an RST were seen.
    closed_at: Option<Instant>,
}

/// Whether the kept connections have closed, for the capture's stopping rule only (the
/// detector's flow table judges everything else): FIN both ways, or RST.
#[derive(Debug, Default)]
struct Connections {
    state: HashMap<ConnectionKey, Closing>,
    /// Connections seen, forgotten ones included.
    seen: u64,
    last_forget: Option<Instant>,
}

impl Connections {
    fn note(&mut self, segment: &Segment, now: Instant) {
        let key = connection_key(segment);
        let seen = &mut self.seen;
        let closing = self.state.entry(key).or_insert_with(|| {
            *seen += 1;
            Closing::default()
        });
        let from_lower = key.0 == (segment.src, segment.src_port);
        closing.fin_from[usize::from(from_lower)] |= segment.has(flags::FIN);
        closing.reset |= segment.has(flags::RST);
        if closing.closed_at.is_none() && (closing.reset || closing.fin_from == [true, true]) {
            closing.closed_at = Some(now);
        }
        if !self
            .last_forget
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.last_forget = Some(now);
            self.state.retain(|_, c| {
                !c.closed_at
                    .is_some_and(|at| now.duration_since(at) >= FORGET_CLOSED_AFTER)
            });
        }
    }

    fn unclosed(&self) -> usize {
        self.state
            .values()
            .filter(|c| c.closed_at.is_none())
            .count()
    }
}

/// What one read of the packet socket gave.
enum Received {
    /// A frame: its captured length, its length on the wire, its kernel timestamp (ns since
    /// the Unix epoch).
    Frame {
        len: usize,
        wire_len: u32,
        ts_ns: u64,
    },
    /// A frame not kept (`lo`'s outgoing copy) or an interrupted read.
    Skipped,
    /// Nothing queued within the wait.
    Nothing,
}

/// The reader thread's state.
struct Tap<C> {
    socket: PacketSocket,
    link: LinkType,
    writer: Option<PcapWriter<BufWriter<File>>>,
    consumer: C,
    ports: Arc<Mutex<Option<WatchedPorts>>>,
    stop: Arc<AtomicU8>,
}

impl<C: SegmentConsumer> Tap<C> {
    fn run(mut self) -> io::Result<Finished<C>> {
        let mut frame = vec![0u8; SNAPLEN as usize];
        let mut segment = Segment::UNSET;
        let mut decap = Decap::default();
        let mut connections = Connections::default();
        let mut drained = false;
        let mut stop_asked: Option<Instant> = None;
        let mut last_kept = Instant::now();
        let mut packets = 0u64;
        loop {
            let mode = StopMode::load(&self.stop);
            if mode != StopMode::Running {
                let asked = *stop_asked.get_or_insert_with(Instant::now);
                let done = match mode {
                    StopMode::Now => drained,
                    _ => connections.unclosed() == 0 && last_kept.elapsed() >= QUIET_AFTER_CLOSE,
                };
                if done || asked.elapsed() >= CLOSE_GRACE {
                    break;
                }
            }
            let (len, wire_len, ts_ns) = match self.receive(&mut frame, mode == StopMode::Now)? {
                Received::Frame {
                    len,
                    wire_len,
                    ts_ns,
                } => (len, wire_len, ts_ns),
                Received::Skipped => continue,
                Received::Nothing => {
                    // Stopping at once still takes what the kernel had queued.
                    drained = mode == StopMode::Now;
                    continue;
                }
            };
            let data = &frame[..len];
            let meta = PacketMeta {
                ts_ns,
                packet_number: packets + 1,
            };
            if self
                .link
                .decode_into(data, wire_len, meta, &mut segment, &mut decap)
                != Decoded::Tcp(())
            {
                continue;
            }
            if !self.watched(&segment, &connections) {
                continue;
            }
            packets += 1;
            last_kept = Instant::now();
            if let Some(writer) = self.writer.as_mut() {
                writer.write_packet(ts_ns, data, wire_len)?;
            }
            connections.note(&segment, last_kept);
            self.consumer.segment(&segment);
        }
        if let Some(writer) = self.writer.take() {
            writer.finish()?;
        }
        let (queued, dropped) =
            match crate::host::sockopt::packet_statistics(self.socket.fd.as_fd()) {
                Ok(counts) => counts,
                // qemu-user does not pass PACKET_STATISTICS through: the drops go uncounted,
                // and the user is told so rather than shown a count of 0.
                Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    eprintln!(
                        "tcpstall: warning: the capture on {} cannot count the packets the \
                         kernel dropped (PACKET_STATISTICS: {err}); any drop goes unnoticed",
                        self.socket.interface
                    );
                    (u32::try_from(packets).unwrap_or(u32::MAX), 0)
                }
                Err(err) => return Err(err),
            };
        Ok(Finished {
            summary: CaptureSummary {
                packets,
                flows: connections.seen,
                unclosed_flows: connections.unclosed() as u64,
                dropped: u64::from(dropped),
                queued: u64::from(queued),
            },
            consumer: self.consumer,
        })
    }

    /// Reads one frame into `frame`, waiting up to [`POLL_INTERVAL`] unless `dont_wait`.
    fn receive(&self, frame: &mut [u8], dont_wait: bool) -> io::Result<Received> {
        let mut cmsg = nix::cmsg_space!(nix::sys::time::TimeSpec);
        let mut iov = [IoSliceMut::new(frame)];
        // MSG_TRUNC: the length returned is the frame's whole length, even if cut.
        let received = socket::recvmsg::<LinkAddr>(
            self.socket.fd.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            if dont_wait {
                MsgFlags::MSG_TRUNC | MsgFlags::MSG_DONTWAIT
            } else {
                MsgFlags::MSG_TRUNC
            },
        );
        let msg = match received {
            Ok(msg) => msg,
            Err(Errno::EAGAIN) => return Ok(Received::Nothing),
            Err(Errno::EINTR) => return Ok(Received::Skipped),
            Err(err) => return Err(err.into()),
        };
        let outgoing = msg
            .address
            .is_some_and(|a| a.pkttype() == libc::PACKET_OUTGOING);
        if outgoing && self.socket.loopback {
            return Ok(Received::Skipped);
        }
        let ts_ns = kernel_timestamp_ns(&msg).unwrap_or_else(now_ns);
        Ok(Received::Frame {
            len: msg.bytes.min(SNAPLEN as usize),
            wire_len: u32::try_from(msg.bytes).unwrap_or(u32::MAX),
            ts_ns,
        })
    }

    /// Whether `segment` is kept ([`WatchedPorts::keep`]; everything without a port filter).
    fn watched(&self, segment: &Segment, connections: &Connections) -> bool {
        self.ports.lock().is_ok_and(|ports| match ports.as_ref() {
            None => true,
            Some(ports) => ports.keep(segment, || {
                connections.state.contains_key(&connection_key(segment))
            }),
        })
    }
}

pub(crate) use super::now_ns;
