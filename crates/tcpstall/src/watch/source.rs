//! The live capture `watch` reads: a TPACKET_V3 ring on each interface
//! ([`crate::capture::ring`]), tcpdump's filter syntax compiled into the kernel's filter
//! ([`crate::capture::filter`]), headers only; each frame decoded to a [`Segment`] by the same
//! link-layer code `analyze` uses. An interface that goes away ends its ring, not the watch,
//! while another interface is watched.

use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use crate::capture::filter::interpret;
use crate::capture::filter::{self, FilterError, Framing};
use crate::capture::live::OpenError;
use crate::capture::nflog::{LoggedPacket, NflogSocket};
use crate::capture::ring::{Frame, Ring, RingError, RingOptions};
use crate::decode::link::LinkType;
use crate::decode::{Decap, Decoded, PacketMeta, Segment};
pub use crate::report::model::watch::{DropStats, PacketCounts};

/// Bytes kept of each packet: every header up to the end of TCP's options (link 20 + IPv6 40 +
/// extension headers + TCP 60). The payload's length comes from the IP header (see
/// [`crate::decode`]), so the payload itself is never needed.
pub const SNAPLEN: u32 = 200;

/// How long one wait for packets lasts before the loop looks at the clock and the signals.
const READ_TIMEOUT_MS: u16 = 100;

/// Why the capture could not start or go on. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The filter is not valid, or needs a libpcap this host lacks.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// No interface of that name.
    #[error(
        "no network interface named `{0}`: `ip link` lists them; `-i any` (the default) \
         captures on all of them"
    )]
    NoSuchInterface(String),
    /// Capturing needs CAP_NET_RAW.
    #[error(
        "cannot capture on `{interface}`: live capture needs CAP_NET_RAW: run as root, or give \
         the binary the capability (`setcap cap_net_raw+ep $(command -v tcpstall)`; `-i nflog:N` \
         needs CAP_NET_ADMIN besides)"
    )]
    NoCapNetRaw {
        /// The interface asked for.
        interface: String,
    },
    /// The interface carries no link layer this crate decodes.
    #[error(
        "interface `{interface}` has hardware type {hatype} (ARPHRD_*), which carries no IP \
         that tcpstall decodes: pick an Ethernet, loopback or tunnel interface, or `-i any`"
    )]
    UnsupportedLink {
        /// The interface.
        interface: String,
        /// `ARPHRD_*` number.
        hatype: u16,
    },
    /// Every interface watched has gone away.
    #[error("cannot capture on {interfaces}: the interface disappeared")]
    Gone {
        /// The interfaces, comma-separated.
        interfaces: String,
    },
    /// Anything else the system said.
    #[error("cannot capture on `{interface}`: {reason}")]
    System {
        /// The interface.
        interface: String,
        /// What failed.
        reason: String,
    },
}

impl From<RingError> for SourceError {
    fn from(err: RingError) -> SourceError {
        match err {
            RingError::Filter(e) => SourceError::Filter(e),
            RingError::Open(OpenError::NoPermission { interface }) => {
                SourceError::NoCapNetRaw { interface }
            }
            RingError::Open(OpenError::NoInterface { interface }) => {
                SourceError::NoSuchInterface(interface)
            }
            RingError::Open(OpenError::UnsupportedLink { interface, hatype }) => {
                SourceError::UnsupportedLink { interface, hatype }
            }
            RingError::Open(OpenError::System {
                interface,
                what,
                error,
            }) => SourceError::System {
                interface,
                reason: format!("{what}: {error}"),
            },
        }
    }
}

/// A change in what is watched, for the user to hear of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceNotice {
    /// The interface went down: nothing arrives until it is up again.
    Down(String),
    /// The interface was removed: its capture ended.
    Gone(String),
}

/// Where one interface's packets come from.
#[derive(Debug)]
enum Tap {
    /// A packet socket's ring, filtered in the kernel.
    Ring(Ring),
    /// Netfilter's log (`nflog:GROUP`), filtered here: no kernel filter runs on a netlink
    /// socket's messages (libpcap filters its nflog captures in user space too).
    Nflog {
        socket: NflogSocket,
        program: Vec<libc::sock_filter>,
        dropped: u64,
    },
}

impl Tap {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Tap::Ring(ring) => ring.fd(),
            Tap::Nflog { socket, .. } => socket.fd(),
        }
    }

    fn name(&self) -> String {
        match self {
            Tap::Ring(ring) => ring.interface().to_string(),
            Tap::Nflog { socket, .. } => socket.name(),
        }
    }
}

/// The NFLOG group of an interface name as tcpdump spells it (`nflog`, `nflog:5`).
fn nflog_group(interface: &str) -> Option<Result<u16, SourceError>> {
    let rest = interface.strip_prefix("nflog")?;
    Some(match rest.strip_prefix(':') {
        None if rest.is_empty() => Ok(0),
        Some(group) => group
            .parse()
            .map_err(|_| SourceError::NoSuchInterface(interface.into())),
        None => return None,
    })
}

/// How often interfaces seen down are looked up, to find the ones removed.
const DOWN_LOOKUP_EVERY: std::time::Duration = std::time::Duration::from_millis(200);

/// An open live capture: one tap per interface.
#[derive(Debug)]
pub struct LiveSource {
    taps: Vec<Tap>,
    /// Interfaces whose ring ended because they were removed.
    gone: Vec<String>,
    /// Interfaces seen down, and when they were last looked up: a device being removed goes
    /// down first, and the packet socket is told only then (`packet_notifier`: its hook is
    /// already off at NETDEV_UNREGISTER), so its removal is found by looking.
    down: Vec<String>,
    down_checked: Option<std::time::Instant>,
    drops: DropStats,
    /// `rx_dropped` of each named interface when the watch began.
    interface_drops_at_start: Vec<(String, u64)>,
    notices: Vec<SourceNotice>,
    packet_number: u64,
    /// Overlays (VXLAN, Geneve, GRE, ...) are read through to the inner connections, as
    /// `analyze` reads them.
    decap: Decap,
}

/// Checks `filter` without any privilege for the framing `interface` will likely have, so
/// that a typo is reported before the capture needs CAP_NET_RAW. The compile on the opened
/// ring has the last word (a filter on link-layer fields may suit one device, not another).
pub fn check_filter(interface: &str, filter: &str) -> Result<(), SourceError> {
    let framings: &[Framing] = if interface == "any" || nflog_group(interface).is_some() {
        &[Framing::Cooked]
    } else {
        &[Framing::Ethernet, Framing::RawIp]
    };
    let mut first_error = None;
    for &framing in framings {
        match filter::compile(filter, framing, SNAPLEN) {
            Ok(_) => return Ok(()),
            Err(err) => {
                first_error.get_or_insert(err);
            }
        }
    }
    first_error.map_or(Ok(()), |err| Err(err.into()))
}

impl LiveSource {
    /// Opens a ring on each of `interfaces` (`any` for all) with `filter` (tcpdump syntax,
    /// may be empty), rings of `buffer_bytes` each whose blocks are handed over at most
    /// `block_timeout` after their first packet: fewer wake-ups the longer it is, a stall
    /// printed that much later.
    pub fn open(
        interfaces: &[String],
        filter: &str,
        buffer_bytes: usize,
        block_timeout: Duration,
    ) -> Result<LiveSource, SourceError> {
        for interface in interfaces {
            check_filter(interface, filter)?;
        }
        let options = RingOptions {
            keep: SNAPLEN,
            buffer_bytes,
            block_timeout,
        };
        let mut taps = Vec::new();
        for interface in interfaces {
            if let Some(group) = nflog_group(interface) {
                let compiled = filter::compile(filter, Framing::Cooked, SNAPLEN)?;
                let socket = NflogSocket::open(group?, SNAPLEN).map_err(RingError::from)?;
                taps.push(Tap::Nflog {
                    socket,
                    // An empty filter (TCP only) is the common case; it is still run.
                    program: compiled.program,
                    dropped: 0,
                });
                continue;
            }
            if interface != "any" && nix::net::if_::if_nametoindex(interface.as_str()).is_err() {
                return Err(SourceError::NoSuchInterface(interface.clone()));
            }
            taps.push(Tap::Ring(Ring::open(interface, filter, options)?));
        }
        let interface_drops_at_start = interfaces
            .iter()
            .filter(|i| *i != "any" && nflog_group(i).is_none())
            .map(|i| (i.clone(), interface_rx_dropped(i).unwrap_or(0)))
            .collect();
        Ok(LiveSource {
            taps,
            gone: Vec::new(),
            down: Vec::new(),
            down_checked: None,
            drops: DropStats::default(),
            interface_drops_at_start,
            notices: Vec::new(),
            packet_number: 0,
            decap: Decap::default(),
        })
    }

    /// What changed since the last call (interfaces down or gone).
    pub fn take_notices(&mut self) -> Vec<SourceNotice> {
        std::mem::take(&mut self.notices)
    }

    /// Hands every TCP segment of the packets that arrived (waiting up to the read timeout
    /// for the first) to `on_segment`, decoded into one reused segment. An error only when
    /// no interface is left to watch.
    pub fn read_batch(
        &mut self,
        segment: &mut Segment,
        mut on_segment: impl FnMut(&Segment),
    ) -> Result<PacketCounts, SourceError> {
        let mut counts = PacketCounts::default();
        // Per tap: whether poll reported an error (the interface went down or away).
        let mut failed = Vec::with_capacity(self.taps.len());
        {
            let mut fds: Vec<PollFd<'_>> = self
                .taps
                .iter()
                .map(|t| PollFd::new(t.fd(), PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::from(READ_TIMEOUT_MS)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(errno) => {
                    return Err(SourceError::System {
                        interface: self.interfaces(),
                        reason: format!("waiting for packets: {errno}"),
                    })
                }
            }
            for fd in &fds {
                let events = fd.revents().unwrap_or(PollFlags::empty());
                failed.push(events.intersects(PollFlags::POLLERR | PollFlags::POLLHUP));
            }
        }
        // Blocks are drained even without POLLIN: a timed-out poll may race a hand-over.
        let decap = &mut self.decap;
        let packet_number = &mut self.packet_number;
        let mut decode = |ts_ns: u64,
                          decoded: &mut dyn FnMut(
            &mut Decap,
            PacketMeta,
            &mut Segment,
        ) -> Decoded<()>| {
            *packet_number += 1;
            counts.packets += 1;
            let meta = PacketMeta {
                ts_ns,
                packet_number: *packet_number,
            };
            match decoded(decap, meta, segment) {
                Decoded::Tcp(()) => {
                    counts.tcp_segments += 1;
                    on_segment(segment);
                }
                _ => counts.skipped += 1,
            }
        };
        for tap in &mut self.taps {
            match tap {
                Tap::Ring(ring) => {
                    let link = match ring.framing() {
                        Framing::Ethernet => Some(LinkType::Ethernet),
                        Framing::RawIp => Some(LinkType::RawIp),
                        Framing::Ieee80211 => Some(LinkType::Ieee80211),
                        Framing::Radiotap => Some(LinkType::Radiotap),
                        Framing::Cooked => None,
                    };
                    ring.drain(|frame: &Frame<'_>| {
                        decode(frame.ts_ns, &mut |decap, meta, segment| match link {
                            Some(link) => {
                                link.decode_into(frame.data, frame.wire_len, meta, segment, decap)
                            }
                            None => decap.ethertype(
                                frame.protocol,
                                frame.data,
                                frame.wire_len,
                                meta,
                                segment,
                            ),
                        })
                    });
                }
                Tap::Nflog {
                    socket,
                    program,
                    dropped,
                    ..
                } => {
                    let keep = |p: &LoggedPacket<'_>| {
                        let packet = interpret::Packet {
                            data: p.data,
                            protocol: p.protocol,
                            pkttype: 0,
                            ifindex: 0,
                            vlan_tci: None,
                        };
                        interpret::run(program, &packet) > 0
                    };
                    let drained = socket.drain(dropped, |p| {
                        if keep(p) {
                            decode(p.ts_ns, &mut |decap, meta, segment| {
                                let len = p.data.len() as u32;
                                decap.ethertype(p.protocol, p.data, len, meta, segment)
                            });
                        }
                    });
                    if let Err(err) = drained {
                        return Err(SourceError::System {
                            interface: socket.name(),
                            reason: format!("reading the netfilter log: {err}"),
                        });
                    }
                }
            }
        }
        let mut index = 0;
        self.taps.retain(|tap| {
            let error = failed.get(index).copied().unwrap_or(false);
            index += 1;
            let Tap::Ring(ring) = tap else {
                return true; // a netlink socket's overruns are counted as it is read
            };
            if !error || ring.take_error().is_none() {
                return true;
            }
            let name = ring.interface().to_string();
            if name != "any" && nix::net::if_::if_nametoindex(name.as_str()).is_err() {
                self.notices.push(SourceNotice::Gone(name.clone()));
                self.gone.push(name);
                false
            } else {
                // Down, not removed: the kernel hooks the socket in again when it comes up.
                if !self.down.contains(&name) {
                    self.down.push(name.clone());
                }
                self.notices.push(SourceNotice::Down(name));
                true
            }
        });
        self.look_for_removed();
        if self.taps.is_empty() {
            return Err(SourceError::Gone {
                interfaces: self.gone.join(", "),
            });
        }
        Ok(counts)
    }

    /// Ends the rings of interfaces seen down that have since been removed, looked up at
    /// most every [`DOWN_LOOKUP_EVERY`].
    fn look_for_removed(&mut self) {
        if self.down.is_empty()
            || self
                .down_checked
                .is_some_and(|at| at.elapsed() < DOWN_LOOKUP_EVERY)
        {
            return;
        }
        self.down_checked = Some(std::time::Instant::now());
        let removed: Vec<String> = self
            .down
            .iter()
            .filter(|name| nix::net::if_::if_nametoindex(name.as_str()).is_err())
            .cloned()
            .collect();
        for name in removed {
            self.down.retain(|d| *d != name);
            self.taps
                .retain(|tap| !matches!(tap, Tap::Ring(ring) if ring.interface() == name));
            self.notices.push(SourceNotice::Gone(name.clone()));
            self.gone.push(name);
        }
    }

    /// The interfaces still watched, comma-separated.
    fn interfaces(&self) -> String {
        let names: Vec<String> = self.taps.iter().map(Tap::name).collect();
        names.join(", ")
    }

    /// The kernel's drop counters, read now.
    pub fn drops(&mut self) -> DropStats {
        for tap in &mut self.taps {
            match tap {
                Tap::Ring(ring) => self.drops.dropped += ring.take_drops(),
                Tap::Nflog { dropped, .. } => self.drops.dropped += std::mem::take(dropped),
            }
        }
        self.drops.if_dropped = self
            .interface_drops_at_start
            .iter()
            .filter_map(|(name, start)| {
                interface_rx_dropped(name).map(|now| now.saturating_sub(*start))
            })
            .sum();
        self.drops
    }
}

/// Packets the interface's driver dropped (`/sys/class/net/IF/statistics/rx_dropped`, what
/// libpcap reports as `ps_ifdrop`); `None` once the interface is gone.
fn interface_rx_dropped(interface: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{interface}/statistics/rx_dropped"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_without_privilege() {
        assert!(check_filter("any", "").is_ok());
        assert!(check_filter("any", "port 8080 and host 127.0.0.1").is_ok());
        let err = check_filter("lo", "port eighty").expect_err("not a filter");
        assert!(err.to_string().contains("port eighty"), "{err}");
        assert!(
            err.to_string().contains("pcap-filter") || err.to_string().contains("libpcap"),
            "{err}"
        );
    }
}
