//! The peer's TCP/IP stack: a smoltcp interface on the peer's TUN device, driven by blocking
//! calls (connect, accept, write, read a message, close), each bounded by a deadline. One
//! thread owns it; every call polls the interface until its condition holds.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpEndpoint};

use super::ack_policy::AckPolicy;
use super::device::PolicyTun;
use super::profile::{NagleRule, StackRules};
use crate::exchange::framing::FrameEnd;
use crate::tcp_rules;

/// Socket buffers of each connection: 64 KiB, Linux's default `tcp_rmem` order of magnitude.
const BUFFER_BYTES: usize = 64 * 1024;

/// First local port of the peer's connections: IANA's dynamic range, Windows' default.
const FIRST_PORT: u16 = 49_152;

/// Longest single wait on the device, so that a deadline is never overslept by much.
const MAX_WAIT: Duration = Duration::from_millis(50);

/// Milliseconds since the stack started: the RFC 7323 timestamp clock.
fn tsval() -> u32 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u32
}

/// Bytes a Minshall sender holds back (smoltcp's Nagle is the classic one).
#[derive(Debug, Default)]
struct MinshallSend {
    /// Written by the application, not yet handed to the socket.
    pending: Vec<u8>,
    /// Bytes handed to the socket so far.
    pushed: u64,
    /// Stream offset just past the last sub-MSS segment handed over (`snd_sml`).
    small_end: u64,
}

impl MinshallSend {
    /// Bytes of `pending` that may go to the socket now, `acked` bytes of the stream being
    /// acknowledged: full segments always; the partial tail only when no earlier partial
    /// segment is unacknowledged (`tcp_nagle_check` -> `tcp_minshall_check`).
    fn releasable(&self, acked: u64, mss: u64) -> usize {
        if acked >= self.small_end {
            self.pending.len()
        } else {
            let mss = mss.max(1) as usize;
            self.pending.len() / mss * mss
        }
    }

    /// `sent` bytes went to the socket: one ending in a partial segment becomes `snd_sml`
    /// (`tcp_minshall_update`).
    fn handed_over(&mut self, sent: usize, mss: u64) {
        self.pending.drain(..sent);
        self.pushed += sent as u64;
        if tcp_rules::is_sub_mss(sent as u64, mss) {
            self.small_end = self.pushed;
        }
    }
}

/// Options of one connection.
#[derive(Debug, Clone, Copy)]
pub struct ConnOptions {
    /// TCP_NODELAY: Nagle off.
    pub nodelay: bool,
}

/// The peer's stack.
pub struct PeerStack {
    iface: Interface,
    sockets: SocketSet<'static>,
    device: PolicyTun,
    rules: StackRules,
    /// Payload bytes of a full segment on the path.
    payload_mss: usize,
    next_port: u16,
    minshall: HashMap<SocketHandle, MinshallSend>,
}

/// `what` timed out.
fn timed_out(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, format!("{what}: timed out"))
}

impl PeerStack {
    /// A stack with address `addr` on the TUN device `tun`, following `rules`; `mss` is the
    /// MSS the other end announces (its TCP_MAXSEG), if it sets one.
    pub fn new(
        tun: std::fs::File,
        addr: Ipv4Addr,
        rules: StackRules,
        mss: Option<u32>,
    ) -> io::Result<PeerStack> {
        let epoch = Instant::now();
        let mut device = PolicyTun::new(tun, AckPolicy::new(rules, epoch), rules.timestamps)?;
        let config = Config::new(HardwareAddress::Ip);
        let mut iface = Interface::new(config, &mut device, smoltcp::time::Instant::now());
        iface.update_ip_addrs(|addrs| {
            let _ = addrs.push(IpCidr::new(IpAddress::Ipv4(addr), 24));
        });
        // A full segment's payload: the smaller MSS less the timestamp option, as Linux's
        // `tcp_current_mss` (the device clamps the MSS smoltcp reads, see `PolicyTun::new`).
        let own_mss = super::device::PEER_MTU as u32 - tcp_rules::IPV4_TCP_HEADERS;
        let full_segment =
            tcp_rules::payload_mss(mss.map_or(own_mss, |m| m.min(own_mss)), rules.timestamps);
        Ok(PeerStack {
            iface,
            sockets: SocketSet::new(Vec::new()),
            device,
            rules,
            payload_mss: full_segment as usize,
            next_port: FIRST_PORT,
            minshall: HashMap::new(),
        })
    }

    fn new_socket(&mut self, options: ConnOptions) -> SocketHandle {
        let mut socket = tcp::Socket::new(
            tcp::SocketBuffer::new(vec![0; BUFFER_BYTES]),
            tcp::SocketBuffer::new(vec![0; BUFFER_BYTES]),
        );
        // The profile's ACK policy decides; the socket ACKs every segment at once.
        socket.set_ack_delay(None);
        socket.set_nagle_enabled(!options.nodelay && self.rules.nagle == NagleRule::Classic);
        if self.rules.timestamps {
            socket.set_tsval_generator(Some(tsval));
        }
        let handle = self.sockets.add(socket);
        if !options.nodelay && self.rules.nagle == NagleRule::Minshall {
            self.minshall.insert(handle, MinshallSend::default());
        }
        handle
    }

    /// One round of the interface: packets in, packets out, held ACKs whose time came, and
    /// the Minshall sender's queue.
    fn poll(&mut self) {
        loop {
            self.iface.poll(
                smoltcp::time::Instant::now(),
                &mut self.device,
                &mut self.sockets,
            );
            self.device.send_due(Instant::now());
            if !self.push_minshall() {
                break;
            }
        }
    }

    /// Hands the socket what Minshall's rule lets leave; says whether anything moved.
    fn push_minshall(&mut self) -> bool {
        let mss = self.payload_mss.max(1) as u64;
        let mut moved = false;
        for (handle, send) in &mut self.minshall {
            if send.pending.is_empty() {
                continue;
            }
            let socket = self.sockets.get_mut::<tcp::Socket>(*handle);
            let acked = send.pushed - socket.send_queue() as u64;
            let take = send.releasable(acked, mss);
            if take == 0 {
                continue;
            }
            let Ok(sent) = socket.send_slice(&send.pending[..take]) else {
                continue;
            };
            if sent == 0 {
                continue;
            }
            send.handed_over(sent, mss);
            moved = true;
        }
        moved
    }

    /// Waits for a packet, a timer, or `deadline`, whichever is first.
    fn wait(&mut self, deadline: Instant) {
        let now = Instant::now();
        let mut wait = deadline.saturating_duration_since(now).min(MAX_WAIT);
        if let Some(delay) = self
            .iface
            .poll_delay(smoltcp::time::Instant::now(), &self.sockets)
        {
            wait = wait.min(Duration::from_micros(delay.total_micros()));
        }
        if let Some(due) = self.device.policy().next_due() {
            wait = wait.min(due.saturating_duration_since(now));
        }
        if wait.is_zero() {
            return;
        }
        let mut fds = [PollFd::new(self.device.fd(), PollFlags::POLLIN)];
        let ms = wait.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16;
        let _ = poll(&mut fds, PollTimeout::from(ms));
    }

    /// Polls until `done` holds for the socket, or fails at `deadline`.
    fn until(
        &mut self,
        handle: SocketHandle,
        deadline: Instant,
        what: &str,
        mut done: impl FnMut(&mut tcp::Socket<'static>) -> io::Result<bool>,
    ) -> io::Result<()> {
        loop {
            self.poll();
            if done(self.sockets.get_mut::<tcp::Socket>(handle))? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(timed_out(what));
            }
            self.wait(deadline);
        }
    }

    /// Opens a connection to `remote`.
    pub fn connect(
        &mut self,
        remote: SocketAddrV4,
        options: ConnOptions,
        deadline: Instant,
    ) -> io::Result<SocketHandle> {
        let handle = self.new_socket(options);
        let port = self.next_port;
        self.next_port = self.next_port.checked_add(1).unwrap_or(FIRST_PORT);
        let endpoint = IpEndpoint::new(IpAddress::Ipv4(*remote.ip()), remote.port());
        self.sockets
            .get_mut::<tcp::Socket>(handle)
            .connect(self.iface.context(), endpoint, port)
            .map_err(|err| io::Error::other(format!("connect to {remote}: {err}")))?;
        let result = self.until(
            handle,
            deadline,
            &format!("connect to {remote}"),
            |s| match s.state() {
                State::Established => Ok(true),
                State::Closed => Err(io::Error::new(
                    io::ErrorKind::ConnectionRefused,
                    format!("connect to {remote}: refused"),
                )),
                _ => Ok(false),
            },
        );
        if let Err(err) = result {
            self.remove(handle);
            return Err(err);
        }
        Ok(handle)
    }

    /// A socket listening on `port`: the next connection to it.
    pub fn listen(&mut self, port: u16, options: ConnOptions) -> io::Result<SocketHandle> {
        let handle = self.new_socket(options);
        if let Err(err) = self.sockets.get_mut::<tcp::Socket>(handle).listen(port) {
            self.remove(handle);
            return Err(io::Error::other(format!("listen on port {port}: {err}")));
        }
        Ok(handle)
    }

    /// Waits until the listening socket `handle` holds a connection; `Ok(false)` when
    /// `deadline` came first (the socket keeps listening).
    pub fn accepted(&mut self, handle: SocketHandle, deadline: Instant) -> io::Result<bool> {
        let result = self.until(handle, deadline, "accept", |s| {
            Ok(matches!(s.state(), State::Established | State::CloseWait))
        });
        match result {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == io::ErrorKind::TimedOut => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// Writes `data` as one write: the socket sends what its rules allow at once, the rest
    /// when ACKs come (the call returns once all is queued, as `write` on a kernel socket).
    pub fn write(
        &mut self,
        handle: SocketHandle,
        data: &[u8],
        deadline: Instant,
    ) -> io::Result<()> {
        if let Some(send) = self.minshall.get_mut(&handle) {
            send.pending.extend_from_slice(data);
            self.poll();
            return Ok(());
        }
        let mut written = 0;
        self.until(handle, deadline, "write", |s| {
            if !s.may_send() {
                return Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "write: the connection is closed",
                ));
            }
            written += s
                .send_slice(&data[written..])
                .map_err(|err| io::Error::other(format!("write: {err}")))?;
            Ok(written == data.len())
        })?;
        // Out now, before the caller's next write: a write is a segment boundary.
        self.poll();
        Ok(())
    }

    /// Reads into `buf` until `end` finds a whole message in it; returns the message's length
    /// (the bytes past it stay in `buf`).
    pub fn read_message(
        &mut self,
        handle: SocketHandle,
        buf: &mut Vec<u8>,
        end: FrameEnd,
        deadline: Instant,
    ) -> io::Result<usize> {
        let mut found = end(buf);
        if let Some(len) = found {
            return Ok(len);
        }
        self.until(handle, deadline, "read", |s| {
            if s.can_recv() {
                s.recv(|bytes| {
                    buf.extend_from_slice(bytes);
                    (bytes.len(), ())
                })
                .map_err(|err| io::Error::other(format!("read: {err}")))?;
                found = end(buf);
                return Ok(found.is_some());
            }
            if !s.may_recv() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "read: the connection closed after {} bytes of a message",
                        buf.len()
                    ),
                ));
            }
            Ok(false)
        })?;
        found.ok_or_else(|| io::Error::other("read: no message"))
    }

    /// Waits until everything written is acknowledged.
    pub fn wait_until_acked(&mut self, handle: SocketHandle, deadline: Instant) -> io::Result<()> {
        let pending = |stack: &PeerStack| {
            stack
                .minshall
                .get(&handle)
                .is_some_and(|m| !m.pending.is_empty())
        };
        loop {
            self.poll();
            let queued = self.sockets.get_mut::<tcp::Socket>(handle).send_queue();
            if queued == 0 && !pending(self) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(timed_out("waiting for the ACK of the data written"));
            }
            self.wait(deadline);
        }
    }

    /// Closes the connection: the FIN follows the data written, which leaves now whatever
    /// Nagle held (Linux: `tcp_send_fin` pushes with `TCP_NAGLE_OFF`; smoltcp sends the rest
    /// once a FIN is wanted); then waits, bounded, for the other end's FIN and drops the socket.
    pub fn close(&mut self, handle: SocketHandle, deadline: Instant) {
        if let Some(send) = self.minshall.get_mut(&handle) {
            let socket = self.sockets.get_mut::<tcp::Socket>(handle);
            while !send.pending.is_empty() {
                match socket.send_slice(&send.pending) {
                    Ok(sent) if sent > 0 => {
                        send.pending.drain(..sent);
                    }
                    _ => break,
                }
            }
        }
        self.sockets.get_mut::<tcp::Socket>(handle).close();
        let _ = self.until(handle, deadline, "close", |s| {
            Ok(matches!(s.state(), State::Closed | State::TimeWait))
        });
        self.remove(handle);
    }

    /// Drops a socket, resetting its connection if it is still open.
    pub fn remove(&mut self, handle: SocketHandle) {
        let socket = self.sockets.get_mut::<tcp::Socket>(handle);
        if !matches!(socket.state(), State::Closed | State::TimeWait) {
            // A connection given up on: a reset tells the other end.
            socket.abort();
            self.poll();
        }
        self.minshall.remove(&handle);
        self.sockets.remove(handle);
    }

    /// Data segments the peer sent on the connection (TCP_INFO's `data_segs_out`).
    pub fn data_segments_out(&self, handle: SocketHandle) -> u32 {
        let socket = self.sockets.get::<tcp::Socket>(handle);
        match (socket.local_endpoint(), socket.remote_endpoint()) {
            (Some(local), Some(remote)) => self
                .device
                .policy()
                .data_segments_out((local.port, remote.port)),
            _ => 0,
        }
    }

    /// The connection's local port.
    pub fn local_port(&self, handle: SocketHandle) -> Option<u16> {
        self.sockets
            .get::<tcp::Socket>(handle)
            .local_endpoint()
            .map(|e| e.port)
    }

    /// Packets the TUN device refused.
    pub fn dropped_packets(&self) -> u64 {
        self.device.dropped
    }
}

impl PeerStack {
    /// Keeps the stack running (ACKs, timers, held data) for `span`, as a thread sleeping
    /// between writes while its kernel works on.
    pub fn idle(&mut self, span: Duration) {
        let until = Instant::now() + span;
        while Instant::now() < until {
            self.poll();
            self.wait(until);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minshall_holds_a_partial_segment_only_behind_an_unacknowledged_partial_one() {
        let mss = 1448;
        let mut send = MinshallSend::default();
        send.pending.extend_from_slice(&[0; 1200]);
        // Nothing in flight: the 1200 B write leaves.
        assert_eq!(send.releasable(0, mss), 1200);
        send.handed_over(1200, mss);
        // Two more writes while it is unacknowledged: one full segment may go, the
        // 952 B tail waits.
        send.pending.extend_from_slice(&[0; 2400]);
        assert_eq!(send.releasable(0, mss), 1448);
        send.handed_over(1448, mss);
        assert_eq!(send.releasable(0, mss), 0);
        // The partial segment is acknowledged: the tail goes although the full one is
        // still in flight (the classic rule would hold it).
        assert_eq!(send.releasable(1200, mss), 952);
        send.handed_over(952, mss);
        assert_eq!(send.small_end, 3600);
    }
}
