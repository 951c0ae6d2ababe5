//! `lab --rtt`: an emulated network path. The client runs in one network namespace, the server
//! in another, both created by tcpstall (`tcpstall-lab-<pid>-client`, `-server`) and deleted
//! when the run ends. Each holds one TUN device; a relay in this process moves every IP packet
//! from one TUN device to the other after RTT/2, like netem's delay but in user space, since
//! netem may be missing from the kernel.
//!
//! The relay delays each packet in two equal halves and, between them, copies it to a third
//! TUN device in a third namespace (`-path`, no address, no route: the kernel there drops what
//! it receives): a packet socket on that device sees the traffic mid-path, RTT/4 one way from
//! each end, so the round trip from there to either host is RTT/2 (`lab --capture-at path`,
//! or tcpdump in that namespace). A rate is a `tbf` qdisc on each TUN device: packets
//! wait in the sender's own kernel, still charged to its socket, as behind a slow NIC, so that
//! TCP small queues and autocorking (`tcp_should_autocork`) see them.
//!
//! Addresses are link-local (169.254.77.1 client, .2 server, RFC 3927) and exist only inside the
//! two namespaces, whose only route is the TUN device: nothing can reach the host's networks.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::decode::{decode_ip, flags, Decap, Decoded, PacketMeta, Segment};
use crate::flow::SeqNumber;
use crate::host::netns::{open_tun, run};
use crate::host::netns::{NetNs, CLIENT_ADDR, SERVER_ADDR, TUN_NAME};

/// Prefix of every namespace the lab creates.
pub const NAMESPACE_PREFIX: &str = "tcpstall-lab-";

/// MTU of the TUN devices: an Ethernet path, so that the MSS is 1460 as in the documents.
const TUN_MTU: u32 = 1500;

/// Packets waiting in one direction before the relay drops (a tail-drop queue, like a qdisc's
/// limit).
const QUEUE_PACKETS: usize = 4096;

/// Shape of the emulated path.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathShape {
    /// Round-trip time added by the relay (RTT/2 each way).
    pub rtt: Duration,
    /// Bottleneck rate in bits per second, both directions (a `tbf` qdisc); `None`: none.
    pub rate_bps: Option<u64>,
    /// The relay loses the Nth segment carrying data of every connection, client to server,
    /// once, after the middle of the path (`--lose-segment`).
    pub lose_segment: Option<u32>,
}

/// The data segments of one client connection as the relay forwarded them toward the server.
#[derive(Debug, Default, Clone)]
pub struct FlowSegments {
    /// The client's initial sequence number, from its SYN.
    isn: Option<SeqNumber>,
    /// Each data segment: offset of its first byte in the client's stream, its length, and
    /// whether it carries PSH (the sender pushed it: the end of a write sent as written, or
    /// the tail a close or an ACK released).
    pub segments: Vec<(u32, usize, bool)>,
}

/// Client data segments per (client port, server port), recorded by the client-to-server relay:
/// what a capture on the wire would show, without one (no CAP_NET_RAW needed).
pub type SegmentLog = Arc<Mutex<HashMap<(u16, u16), FlowSegments>>>;

/// Share of `writes` writes of `size` bytes to the server at `server_port` that left as a packet
/// of their own (one whole write, nothing more, nothing less): source document 001's measure.
pub fn own_packet_share(log: &SegmentLog, server_port: u16, size: usize, writes: usize) -> f64 {
    let Ok(flows) = log.lock() else { return 0.0 };
    let own = flows
        .iter()
        .filter(|((_, server), _)| *server == server_port)
        .flat_map(|(_, flow)| &flow.segments)
        .filter(|(offset, len, _)| *len == size && *offset as usize % size == 0)
        .count();
    own as f64 / writes.max(1) as f64
}

/// Share of the client's data packets to the server at `server_port` that carry PSH: what a
/// Wireshark count of pushed packets over all data packets gives. Document 001's figures are
/// shares of packets (22.22 % = 2 of 9: ten 1200 B writes merged behind the first make 9),
/// and Linux pushes the first write, sent alone, and the tail sent last; the full segments cut
/// from the merged writes between them carry no PSH (`tcp_mark_push` marks the write's last
/// skb, `tso_fragment` keeps the flag on the part left behind).
pub fn pushed_packet_share(log: &SegmentLog, server_port: u16) -> f64 {
    let Ok(flows) = log.lock() else { return 0.0 };
    let (pushed, all) = flows
        .iter()
        .filter(|((_, server), _)| *server == server_port)
        .flat_map(|(_, flow)| &flow.segments)
        .fold((0, 0), |(pushed, all), (_, _, psh)| {
            (pushed + usize::from(*psh), all + 1)
        });
    pushed as f64 / all.max(1) as f64
}

/// Notes a client-to-server segment in `log`: where its payload starts in the client's
/// stream, counted from the SYN's sequence number.
fn log_segment(log: &SegmentLog, segment: &Segment) {
    let Ok(mut flows) = log.lock() else { return };
    let flow = flows
        .entry((segment.src_port, segment.dst_port))
        .or_default();
    if segment.has(flags::SYN) {
        flow.isn = Some(segment.seq);
    } else if let (Some(isn), true) = (flow.isn, segment.payload_len > 0) {
        // The SYN takes one sequence number (RFC 9293).
        let offset = (segment.seq - isn).wrapping_sub(1);
        let pushed = segment.has(flags::PSH);
        flow.segments
            .push((offset, segment.payload_len as usize, pushed));
    }
}

/// Decodes a packet the relay moves (raw IP, as TUN devices carry it) with the decoder every
/// capture uses.
fn decode_packet(packet: &[u8], decap: &mut Decap) -> Option<Segment> {
    let meta = PacketMeta {
        ts_ns: 0,
        packet_number: 0,
    };
    let mut segment = Segment::UNSET;
    let wire_len = u32::try_from(packet.len()).ok()?;
    (decode_ip(packet, wire_len, meta, &mut segment, decap) == Decoded::Tcp(())).then_some(segment)
}

/// The ends of a running path, as the lab's clients and servers need them.
#[derive(Debug, Clone)]
pub struct PathEnds {
    /// Where clients create their sockets.
    pub client: NetNs,
    /// Where servers create their sockets.
    pub server: NetNs,
    /// Where the traffic can be captured mid-path: the namespace whose TUN device receives a
    /// copy of every packet halfway through its delay.
    pub middle: NetNs,
    /// The address servers bind.
    pub server_addr: Ipv4Addr,
    /// The path's shape.
    pub shape: PathShape,
    /// Client data segments forwarded so far.
    pub segments: SegmentLog,
}

/// A namespace created with `ip netns add`, deleted when dropped.
struct NamedNamespace {
    name: String,
    registry: Arc<Mutex<Vec<String>>>,
}

impl Drop for NamedNamespace {
    fn drop(&mut self) {
        delete_namespace(&self.name);
        if let Ok(mut names) = self.registry.lock() {
            names.retain(|n| n != &self.name);
        }
    }
}

/// A running emulated path: two namespaces, their TUN devices and the relay between them (and
/// the middle namespace its copies go to).
/// Dropping it stops the relay and deletes the namespaces.
pub struct EmulatedPath {
    ends: PathEnds,
    stop: Arc<AtomicBool>,
    relays: Vec<JoinHandle<()>>,
    // Deleted after the relay threads have stopped (see `Drop`).
    namespaces: Vec<NamedNamespace>,
}

impl EmulatedPath {
    /// Creates the namespaces, their TUN devices and addresses, and starts the relay.
    /// `registry` lists the namespaces alive, for a Ctrl-C handler to delete.
    pub fn create(
        shape: PathShape,
        registry: Arc<Mutex<Vec<String>>>,
    ) -> anyhow::Result<EmulatedPath> {
        check_capabilities()?;
        let pid = std::process::id();
        // Deleted by their Drop if anything below fails.
        let mut namespaces = Vec::new();
        let client = create_namespace(
            &format!("{NAMESPACE_PREFIX}{pid}-client"),
            &registry,
            &mut namespaces,
        )?;
        let server = create_namespace(
            &format!("{NAMESPACE_PREFIX}{pid}-server"),
            &registry,
            &mut namespaces,
        )?;
        let middle = create_namespace(
            &format!("{NAMESPACE_PREFIX}{pid}-path"),
            &registry,
            &mut namespaces,
        )?;
        let mid_tun = middle
            .run(|| open_tun(TUN_NAME))
            .with_context(|| format!("cannot create TUN device {TUN_NAME} in {}", middle.name()))?;
        configure_middle(middle.name())?;
        let mid_tun = File::from(mid_tun);
        let mut tuns = Vec::with_capacity(2);
        for (ns, local, peer) in [
            (&client, CLIENT_ADDR, SERVER_ADDR),
            (&server, SERVER_ADDR, CLIENT_ADDR),
        ] {
            let tun = ns
                .run(|| open_tun(TUN_NAME))
                .with_context(|| format!("cannot create TUN device {TUN_NAME} in {}", ns.name()))?;
            configure(ns.name(), local, peer, shape.rate_bps)?;
            tuns.push(File::from(tun));
        }
        let (Some(server_tun), Some(client_tun)) = (tuns.pop(), tuns.pop()) else {
            bail!("internal error: a TUN device is missing");
        };
        let mut path = EmulatedPath {
            ends: PathEnds {
                client,
                server,
                middle,
                server_addr: SERVER_ADDR,
                shape,
                segments: SegmentLog::default(),
            },
            stop: Arc::new(AtomicBool::new(false)),
            relays: Vec::new(),
            namespaces,
        };
        let log = Some(path.ends.segments.clone());
        let lose = shape.lose_segment;
        path.start_direction(
            "c2s",
            client_tun.try_clone()?,
            server_tun.try_clone()?,
            mid_tun.try_clone()?,
            log,
            lose,
        )?;
        path.start_direction("s2c", server_tun, client_tun, mid_tun, None, None)?;
        Ok(path)
    }

    /// The namespaces and addresses for clients and servers.
    pub fn ends(&self) -> &PathEnds {
        &self.ends
    }

    /// One direction: a reader that stamps each packet with its due times, a midpoint that
    /// copies it to the middle namespace's TUN device halfway, a sender that writes it out
    /// when due.
    fn start_direction(
        &mut self,
        label: &str,
        from: File,
        to: File,
        middle: File,
        log: Option<SegmentLog>,
        lose: Option<u32>,
    ) -> io::Result<()> {
        let (queue, halfway) = mpsc::sync_channel(QUEUE_PACKETS);
        let (onward, due) = mpsc::sync_channel(QUEUE_PACKETS);
        let shape = self.ends.shape;
        let stop = self.stop.clone();
        self.relays.push(
            std::thread::Builder::new()
                .name(format!("path-read-{label}"))
                .spawn(move || read_packets(from, queue, shape, log, lose, &stop))?,
        );
        let stop = self.stop.clone();
        self.relays.push(
            std::thread::Builder::new()
                .name(format!("path-mid-{label}"))
                .spawn(move || copy_halfway(middle, halfway, onward, &stop))?,
        );
        let stop = self.stop.clone();
        self.relays.push(
            std::thread::Builder::new()
                .name(format!("path-send-{label}"))
                .spawn(move || send_packets(to, due, &stop))?,
        );
        Ok(())
    }
}

impl Drop for EmulatedPath {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for relay in self.relays.drain(..) {
            let _ = relay.join();
        }
        // Only now that nothing uses the TUN devices: each namespace's Drop deletes it.
        self.namespaces.clear();
    }
}

/// A packet on its way: when it reaches the middle of the path, when it is due at the other
/// end (`None`: lost after the middle), its bytes.
type InFlight = (Instant, Option<Instant>, Vec<u8>);

/// Reads packets from a TUN device and queues each with the instants it is due mid-path and at
/// the other end.
fn read_packets(
    mut from: File,
    queue: SyncSender<InFlight>,
    shape: PathShape,
    log: Option<SegmentLog>,
    lose: Option<u32>,
    stop: &AtomicBool,
) {
    let one_way = shape.rtt / 2;
    let mut buf = vec![0u8; 65_536];
    let mut decap = Decap::default();
    // Segments carrying data so far, per connection (by ports), for --lose-segment.
    let mut data_segments: HashMap<(u16, u16), u32> = HashMap::new();
    while !stop.load(Ordering::SeqCst) {
        // A short poll so that the stop flag is seen; a packet wakes it at once.
        let mut fds = [PollFd::new(from.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(50u16)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return,
        }
        let len = match from.read(&mut buf) {
            Ok(len) => len,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let now = Instant::now();
        let (halfway, mut due) = (now + one_way / 2, Some(now + one_way));
        if log.is_some() || lose.is_some() {
            if let Some(segment) = decode_packet(&buf[..len], &mut decap) {
                if let Some(log) = &log {
                    log_segment(log, &segment);
                }
                if let (Some(nth), true) = (lose, segment.payload_len > 0) {
                    let count = data_segments
                        .entry((segment.src_port, segment.dst_port))
                        .or_default();
                    *count += 1;
                    if *count == nth {
                        due = None;
                    }
                }
            }
        }
        match queue.try_send((halfway, due, buf[..len].to_vec())) {
            // A full queue drops the packet, as a qdisc at its limit would.
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

/// At each packet's halfway instant, writes a copy to the middle namespace's TUN device (what a
/// capture there sees) and passes the packet on to the sender. The end's due time was fixed
/// when the packet was read: a late midpoint does not lengthen the path.
fn copy_halfway(
    mut middle: File,
    halfway: Receiver<InFlight>,
    onward: SyncSender<(Instant, Vec<u8>)>,
    stop: &AtomicBool,
) {
    while let Some((_, due, packet)) = next_due(&halfway, stop, |p| p.0) {
        // The copy is only looked at: a refused write loses nothing on the path.
        let _ = middle.write(&packet);
        let Some(due) = due else {
            continue; // lost between the middle and the far end
        };
        match onward.try_send((due, packet)) {
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => return,
        }
    }
}

/// Writes queued packets to a TUN device when they are due (the queue is in due order: every
/// packet of a direction gets the same delay).
fn send_packets(mut to: File, due: Receiver<(Instant, Vec<u8>)>, stop: &AtomicBool) {
    while let Some((_, packet)) = next_due(&due, stop, |p| p.0) {
        // A packet the kernel refuses is lost, as on a real path; TCP retransmits.
        let _ = to.write(&packet);
    }
}

/// The next packet of `queue` once its instant (`when` of it) has come; `None` when the relay
/// stops or the queue's writer is gone.
fn next_due<T>(queue: &Receiver<T>, stop: &AtomicBool, when: impl Fn(&T) -> Instant) -> Option<T> {
    while !stop.load(Ordering::SeqCst) {
        match queue.recv_timeout(Duration::from_millis(50)) {
            Ok(next) => {
                let wait = when(&next).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                return Some(next);
            }
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return None,
        }
    }
    None
}

/// Says which capability is missing, before anything is created.
fn check_capabilities() -> anyhow::Result<()> {
    const CAP_NET_ADMIN: u32 = 12;
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status to check capabilities")?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or_else(|| anyhow!("no CapEff line in /proc/self/status"))?;
    let missing: Vec<&str> = [
        (
            CAP_NET_ADMIN,
            "CAP_NET_ADMIN (network namespaces, TUN devices)",
        ),
        (
            CAP_SYS_ADMIN,
            "CAP_SYS_ADMIN (entering the namespaces with setns)",
        ),
    ]
    .into_iter()
    .filter(|(bit, _)| effective & (1 << bit) == 0)
    .map(|(_, name)| name)
    .collect();
    if !missing.is_empty() {
        bail!(
            "--rtt needs {}: run it as root (sudo tcpstall lab --rtt ...); `tcpstall lab` without \
             --rtt needs no privileges",
            missing.join(" and ")
        );
    }
    Ok(())
}

fn create_namespace(
    name: &str,
    registry: &Arc<Mutex<Vec<String>>>,
    created: &mut Vec<NamedNamespace>,
) -> anyhow::Result<NetNs> {
    if let Ok(mut names) = registry.lock() {
        names.push(name.to_string());
    }
    let added = run("ip", &["netns", "add", name]);
    // Registered before the result is checked, so that a half-made namespace is deleted too.
    created.push(NamedNamespace {
        name: name.to_string(),
        registry: registry.clone(),
    });
    added.with_context(|| format!("cannot create network namespace {name}"))?;
    NetNs::open(name, &format!("/run/netns/{name}"))
        .with_context(|| format!("cannot open /run/netns/{name}"))
}

/// Deletes a namespace the lab created; quiet when it is already gone.
pub fn delete_namespace(name: &str) {
    if name.starts_with(NAMESPACE_PREFIX) {
        let _ = Command::new("ip").args(["netns", "delete", name]).output();
    }
}

/// Gives the namespace's TUN device its address, the peer's route, the MTU and the rate, and
/// brings it up.
fn configure(
    ns: &str,
    local: Ipv4Addr,
    peer: Ipv4Addr,
    rate_bps: Option<u64>,
) -> anyhow::Result<()> {
    let (local, peer, mtu) = (local.to_string(), format!("{peer}/32"), TUN_MTU.to_string());
    run("ip", &["-n", ns, "link", "set", "lo", "up"])?;
    run(
        "ip",
        &["-n", ns, "link", "set", TUN_NAME, "mtu", &mtu, "up"],
    )?;
    run(
        "ip",
        &[
            "-n", ns, "addr", "add", &local, "peer", &peer, "dev", TUN_NAME,
        ],
    )?;
    if let Some(rate) = rate_bps {
        // A bucket of two full packets: the rate holds from the third packet of a burst on;
        // 200 ms of queue before tail drop.
        let (rate, burst) = (format!("{rate}bit"), (2 * (TUN_MTU + 14)).to_string());
        run(
            "tc",
            &[
                "-n", ns, "qdisc", "add", "dev", TUN_NAME, "root", "tbf", "rate", &rate, "burst",
                &burst, "latency", "200ms",
            ],
        )?;
    }
    Ok(())
}

/// Brings up the middle namespace's TUN device with no address and no IPv6 link-local one (so
/// the kernel there sends nothing of its own onto it): a tap only.
fn configure_middle(ns: &str) -> anyhow::Result<()> {
    let mtu = TUN_MTU.to_string();
    run(
        "ip",
        &["-n", ns, "link", "set", TUN_NAME, "addrgenmode", "none"],
    )?;
    run(
        "ip",
        &["-n", ns, "link", "set", TUN_NAME, "mtu", &mtu, "up"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn tcp_packet(seq: u32, syn: bool, payload: &[u8]) -> Vec<u8> {
        let builder = PacketBuilder::ipv4(CLIENT_ADDR.octets(), SERVER_ADDR.octets(), 64)
            .tcp(40_000, 5_000, seq, 65_535);
        let builder = if syn { builder.syn() } else { builder.ack(1) };
        let mut packet = Vec::new();
        builder.write(&mut packet, payload).unwrap();
        packet
    }

    #[test]
    fn writes_sent_alone_are_whole_aligned_packets() {
        let log = SegmentLog::default();
        let isn = u32::MAX - 1000; // wraps within the connection
        let log_packet = |packet: Vec<u8>| {
            let segment = decode_packet(&packet, &mut Decap::default()).expect("a TCP packet");
            log_segment(&log, &segment);
        };
        log_packet(tcp_packet(isn, true, &[]));
        // Write 1 alone; writes 2 and 3 merged into 1448 + 952; write 4 alone.
        log_packet(tcp_packet(isn.wrapping_add(1), false, &[0; 1200]));
        log_packet(tcp_packet(isn.wrapping_add(1201), false, &[0; 1448]));
        log_packet(tcp_packet(isn.wrapping_add(2649), false, &[0; 952]));
        log_packet(tcp_packet(isn.wrapping_add(3601), false, &[0; 1200]));
        assert_eq!(own_packet_share(&log, 5_000, 1200, 4), 0.5);
        assert_eq!(own_packet_share(&log, 5_001, 1200, 4), 0.0);
        // No packet built here carries PSH: none of the four is pushed.
        assert_eq!(pushed_packet_share(&log, 5_000), 0.0);
    }
}
