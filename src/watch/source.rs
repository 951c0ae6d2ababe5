//! The live capture `watch` reads: libpcap (through the `pcap` crate) with tcpdump's filter
//! syntax, headers only, in immediate mode, with a sizeable kernel buffer; each frame decoded to
//! a [`Segment`] by the same link-layer code `analyze` uses.

use std::fmt;

use std::os::fd::BorrowedFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use pcap::{Active, Capture, Linktype, Precision};

use crate::capture::link::{link_type_name, LinkType};
use crate::decode::{Decap, Decoded, PacketMeta, Segment};

/// Bytes kept of each packet: every header up to the end of TCP's options (link 20 + IPv6 40 +
/// extension headers + TCP 60). The payload's length comes from the IP header (see
/// [`crate::decode`]), so the payload itself is never needed.
pub const SNAPLEN: i32 = 200;

/// How long one read waits for packets before the loop looks at the clock and the signals.
const READ_TIMEOUT_MS: u16 = 100;

/// Linux capability bit of CAP_NET_RAW (`include/uapi/linux/capability.h`).
const CAP_NET_RAW: u32 = 13;

/// Why the capture could not start. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The filter is not valid tcpdump syntax.
    #[error(
        "bad capture filter `{filter}`: {reason}; the filter uses tcpdump's syntax \
         (pcap-filter(7)), e.g. `tcp port 8080` or `host 127.0.0.1 and port 6379`"
    )]
    BadFilter {
        /// The filter as given.
        filter: String,
        /// libpcap's message.
        reason: String,
    },
    /// No interface of that name.
    #[error(
        "no network interface named `{0}`: `ip link` lists them; `-i any` (the default) \
         captures on all of them"
    )]
    NoSuchInterface(String),
    /// Capturing needs CAP_NET_RAW.
    #[error(
        "cannot capture on `{interface}`: live capture needs CAP_NET_RAW: run as root, or give \
         the binary the capability (`setcap cap_net_raw,cap_net_admin+eip $(which tcpstall)`) \
         ({reason})"
    )]
    NoCapNetRaw {
        /// The interface asked for.
        interface: String,
        /// libpcap's message.
        reason: String,
    },
    /// The interface carries no link layer this crate decodes.
    #[error(
        "interface `{interface}` has link type {code} ({name}), which carries no IP that \
         tcpstall decodes: pick an Ethernet, loopback or tunnel interface, or `-i any`"
    )]
    UnsupportedLink {
        /// The interface.
        interface: String,
        /// `DLT_*` number.
        code: i32,
        /// Its name.
        name: String,
    },
    /// Anything else libpcap said.
    #[error("cannot capture on `{interface}`: {reason}")]
    Pcap {
        /// The interface.
        interface: String,
        /// libpcap's message.
        reason: String,
    },
}

/// The kernel's packet counters for the capture, since it started (`pcap_stats`: on Linux
/// `PACKET_STATISTICS`, summed by libpcap). Counts are 64-bit here: libpcap's are 32-bit and
/// wrap on a busy host within hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropStats {
    /// Packets dropped because the capture buffer was full (tcpstall did not keep up).
    pub dropped: u64,
    /// Packets dropped by the interface or its driver.
    pub if_dropped: u64,
}

/// What a pass over the captured packets handed on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketCounts {
    /// Packets captured.
    pub packets: u64,
    /// TCP segments decoded and handed on.
    pub tcp_segments: u64,
    /// Packets that are not TCP, non-first fragments, or undecodable.
    pub skipped: u64,
}

impl PacketCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: PacketCounts) {
        self.packets += other.packets;
        self.tcp_segments += other.tcp_segments;
        self.skipped += other.skipped;
    }
}

/// An open live capture.
pub struct LiveSource {
    /// Non-blocking: the loop waits in `poll` itself, which a signal interrupts (libpcap's
    /// own wait goes back to sleep on EINTR).
    capture: Capture<Active>,
    /// `pcap_get_selectable_fd`: the packet socket, ready when frames wait in the ring.
    fd: std::os::fd::RawFd,
    link: LinkType,
    interface: String,
    /// Last raw 32-bit counters read, to extend them to 64 bits.
    last_raw: (u32, u32),
    drops: DropStats,
    packet_number: u64,
    /// Overlays (VXLAN, Geneve, GRE, ...) are read through to the inner connections, as
    /// `analyze` reads them.
    decap: Decap,
}

impl fmt::Debug for LiveSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveSource")
            .field("interface", &self.interface)
            .field("link", &self.link)
            .finish()
    }
}

/// The filter handed to libpcap: TCP only (the kernel drops the rest before copying it), and
/// the user's filter within that.
pub fn effective_filter(user: &str) -> String {
    if user.trim().is_empty() {
        "tcp".to_string()
    } else {
        format!("tcp and ({user})")
    }
}

/// Checks `filter` without any privilege, on dead handles of the usual link types, so that a
/// typo is reported before the capture needs CAP_NET_RAW. A filter valid on either link type
/// passes (`ether host` needs Ethernet, `any` gives Linux cooked); the compile on the opened
/// capture has the last word. The reason given is the one for `interface`'s likely link type.
pub fn check_filter(interface: &str, filter: &str) -> Result<(), SourceError> {
    let compile = |link: Linktype| -> Result<(), String> {
        let dead = Capture::dead(link).map_err(|e| e.to_string())?;
        dead.compile(&effective_filter(filter), true)
            .map(|_| ())
            .map_err(|e| pcap_message(&e))
    };
    let order = if interface == "any" {
        [Linktype::LINUX_SLL, Linktype::ETHERNET]
    } else {
        [Linktype::ETHERNET, Linktype::LINUX_SLL]
    };
    match (compile(order[0]), compile(order[1])) {
        (Err(reason), Err(_)) => Err(SourceError::BadFilter {
            filter: filter.to_string(),
            reason,
        }),
        _ => Ok(()),
    }
}

impl LiveSource {
    /// Opens `interface` (`any` for all) with `filter` (tcpdump syntax, may be empty) and a
    /// kernel buffer of `buffer_bytes`; `immediate` hands each packet over as it arrives,
    /// otherwise the kernel fills blocks of its ring (TPACKET_V3) and hands a block over when
    /// it is full or [`READ_TIMEOUT_MS`] old: fewer wake-ups, a stall printed up to that late.
    pub fn open(
        interface: &str,
        filter: &str,
        buffer_bytes: i32,
        immediate: bool,
    ) -> Result<LiveSource, SourceError> {
        check_filter(interface, filter)?;
        if interface != "any" && nix::net::if_::if_nametoindex(interface).is_err() {
            return Err(SourceError::NoSuchInterface(interface.to_string()));
        }
        let pcap_error = |e: pcap::Error| {
            let reason = pcap_message(&e);
            if !has_cap_net_raw() {
                SourceError::NoCapNetRaw {
                    interface: interface.to_string(),
                    reason,
                }
            } else if reason.contains("No such device") {
                SourceError::NoSuchInterface(interface.to_string())
            } else {
                SourceError::Pcap {
                    interface: interface.to_string(),
                    reason,
                }
            }
        };
        let mut capture = Capture::from_device(interface)
            .map_err(pcap_error)?
            .snaplen(SNAPLEN)
            // Immediate: libpcap then uses TPACKET_V2, one frame and one wake-up per packet.
            .immediate_mode(immediate)
            .buffer_size(buffer_bytes)
            .timeout(i32::from(READ_TIMEOUT_MS))
            .precision(Precision::Nano)
            .promisc(false)
            .open()
            .map_err(pcap_error)?;
        let dlt = capture.get_datalink();
        let link = u32::try_from(dlt.0)
            .ok()
            .and_then(LinkType::from_code)
            .ok_or_else(|| SourceError::UnsupportedLink {
                interface: interface.to_string(),
                code: dlt.0,
                name: u32::try_from(dlt.0).map_or_else(|_| "unknown".into(), link_type_name),
            })?;
        capture
            .filter(&effective_filter(filter), true)
            .map_err(|e| SourceError::BadFilter {
                filter: filter.to_string(),
                reason: pcap_message(&e),
            })?;
        let capture = capture.setnonblock().map_err(pcap_error)?;
        // SAFETY: the handle is a live, activated capture owned by `capture`.
        let fd = unsafe { pcap_get_selectable_fd(capture.as_ptr().cast()) };
        if fd < 0 {
            return Err(SourceError::Pcap {
                interface: interface.to_string(),
                reason: "libpcap gave no descriptor to wait on".into(),
            });
        }
        Ok(LiveSource {
            capture,
            fd,
            link,
            interface: interface.to_string(),
            last_raw: (0, 0),
            drops: DropStats::default(),
            packet_number: 0,
            decap: Decap::default(),
        })
    }

    /// The interface captured on.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// Hands every TCP segment of the packets that arrived (waiting up to the read timeout
    /// for the first) to `on_segment`, decoded into one reused segment.
    pub fn read_batch(
        &mut self,
        segment: &mut Segment,
        mut on_segment: impl FnMut(&Segment),
    ) -> Result<PacketCounts, SourceError> {
        let mut counts = PacketCounts::default();
        // SAFETY: the fd belongs to the capture, which outlives this borrow.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        match poll(
            &mut [PollFd::new(fd, PollFlags::POLLIN)],
            PollTimeout::from(READ_TIMEOUT_MS),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(counts),
            Ok(_) => {}
            Err(errno) => {
                return Err(SourceError::Pcap {
                    interface: self.interface.clone(),
                    reason: format!("waiting for packets: {errno}"),
                })
            }
        }
        let link = self.link;
        let packet_number = &mut self.packet_number;
        let decap = &mut self.decap;
        let result = self.capture.dispatch(None, |packet| {
            *packet_number += 1;
            counts.packets += 1;
            let ts = packet.header.ts;
            // With nanosecond precision libpcap puts nanoseconds in tv_usec.
            let ts_ns = (ts.tv_sec as u64)
                .saturating_mul(1_000_000_000)
                .saturating_add(ts.tv_usec as u64);
            let meta = PacketMeta {
                ts_ns,
                packet_number: *packet_number,
            };
            match link.decode_into(packet.data, packet.header.len, meta, segment, decap) {
                Decoded::Tcp(()) => {
                    counts.tcp_segments += 1;
                    on_segment(segment);
                }
                _ => counts.skipped += 1,
            }
        });
        match result {
            Ok(_) | Err(pcap::Error::TimeoutExpired) => Ok(counts),
            Err(e) => Err(SourceError::Pcap {
                interface: self.interface.clone(),
                reason: pcap_message(&e),
            }),
        }
    }

    /// The kernel's drop counters, read now.
    pub fn drops(&mut self) -> DropStats {
        if let Ok(stat) = self.capture.stats() {
            let (drop, ifdrop) = self.last_raw;
            self.drops.dropped += u64::from(stat.dropped.wrapping_sub(drop));
            self.drops.if_dropped += u64::from(stat.if_dropped.wrapping_sub(ifdrop));
            self.last_raw = (stat.dropped, stat.if_dropped);
        }
        self.drops
    }
}

extern "C" {
    /// libpcap's `pcap_get_selectable_fd(3PCAP)` (the `pcap` crate offers it only with its
    /// async feature): a descriptor to `poll` for packets on.
    fn pcap_get_selectable_fd(p: *mut std::ffi::c_void) -> std::ffi::c_int;
}

/// libpcap's own message, without the crate's prefix.
fn pcap_message(e: &pcap::Error) -> String {
    match e {
        pcap::Error::PcapError(text) if !text.is_empty() => text.clone(),
        other => other.to_string(),
    }
}

/// CAP_NET_RAW is in this process's effective set (`CapEff` of /proc/self/status).
fn has_cap_net_raw() -> bool {
    crate::process::procfs::status_text(std::process::id(), "CapEff")
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_RAW) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_checked_without_privilege() {
        assert!(check_filter("any", "").is_ok());
        assert!(check_filter("any", "port 8080 and host 127.0.0.1").is_ok());
        // Link-specific filters pass here; the opened capture judges them.
        assert!(check_filter("any", "ether host 00:11:22:33:44:55").is_ok());
        assert!(check_filter("eth0", "ether src 00:11:22:33:44:55").is_ok());
        let err = check_filter("lo", "port eighty").expect_err("not a filter");
        assert!(err.to_string().contains("port eighty"), "{err}");
        assert!(err.to_string().contains("pcap-filter"), "{err}");
    }

    #[test]
    fn only_tcp_is_captured() {
        assert_eq!(effective_filter(" "), "tcp");
        assert_eq!(effective_filter("port 80"), "tcp and (port 80)");
    }
}
