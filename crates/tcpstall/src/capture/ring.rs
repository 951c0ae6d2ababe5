//! A packet socket with a TPACKET_V3 receive ring (`Documentation/networking/packet_mmap.rst`):
//! the kernel writes each packet the filter keeps straight into memory shared with tcpstall,
//! in blocks that it hands over when they are full or a timeout old. One wake-up serves a
//! whole block, and no packet is copied again: what tcpdump gets from libpcap, without libpcap.
//!
//! `-i any` is a cooked (`SOCK_DGRAM`) socket on every interface: each frame starts at its
//! network header, the protocol comes with it (as libpcap's "any" device does).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType};

use super::bpf;
use super::filter::{self, CompiledFilter, FilterError, Framing};
use super::live::{bind_packet_socket, hardware_type, OpenError, ARPHRD_RAWIP};

/// Bytes of one ring block: large enough for thousands of header-only packets, small enough
/// that a ring of the default size has dozens of blocks to rotate through.
const BLOCK_BYTES: usize = 1 << 20;

/// The ring's frame size: an upper bound the kernel checks, not a slot (V3 packs packets).
const FRAME_BYTES: u32 = 2048;

/// How a ring is set up.
#[derive(Debug, Clone, Copy)]
pub struct RingOptions {
    /// Bytes of packets kept per packet (the filter returns it; the rest is not copied).
    pub keep: u32,
    /// Size of the ring, rounded down to whole blocks (at least two).
    pub buffer_bytes: usize,
    /// A block is handed over when full or this old (`tp_retire_blk_tov`): the most a packet
    /// waits before tcpstall sees it.
    pub block_timeout: Duration,
}

/// Why a ring could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// The socket (permission, interface, link type, system calls).
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The capture filter.
    #[error(transparent)]
    Filter(#[from] FilterError),
}

/// One packet in a block.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// The bytes captured, from the frame's first header (see [`Framing`]).
    pub data: &'a [u8],
    /// The packet's length on the wire, from the same header.
    pub wire_len: u32,
    /// Kernel receive time, nanoseconds since the Unix epoch.
    pub ts_ns: u64,
    /// The packet's protocol (`ETH_P_*`, an EtherType), from the socket address: what a
    /// cooked frame has instead of a link header.
    pub protocol: u16,
}

/// An open ring on one interface (or all, `any`).
pub struct Ring {
    fd: OwnedFd,
    map: NonNull<u8>,
    blocks: usize,
    next_block: usize,
    framing: Framing,
    interface: String,
}

// SAFETY: the mapping belongs to the ring alone and lives as long as it; nothing else in the
// process touches it.
unsafe impl Send for Ring {}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("interface", &self.interface)
            .field("framing", &self.framing)
            .field("blocks", &self.blocks)
            .finish()
    }
}

impl Ring {
    /// Opens a ring on `interface` (`any` for all) in the calling thread's network namespace,
    /// keeping what `filter` (tcpdump syntax, within TCP) matches. Needs CAP_NET_RAW.
    pub fn open(
        interface: &str,
        user_filter: &str,
        options: RingOptions,
    ) -> Result<Ring, RingError> {
        let system = |what: &'static str| {
            move |error: Errno| OpenError::System {
                interface: interface.to_string(),
                what,
                error: error.into(),
            }
        };
        let any = interface == "any";
        let ifindex = if any {
            0
        } else {
            nix::net::if_::if_nametoindex(interface)
                .ok()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(|| OpenError::NoInterface {
                    interface: interface.to_string(),
                })?
        };
        let kind = if any {
            SockType::Datagram
        } else {
            SockType::Raw
        };
        // Protocol 0: nothing is queued before the filter and the ring are in place.
        let fd = socket::socket(AddressFamily::Packet, kind, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|err| match err {
                Errno::EPERM | Errno::EACCES => OpenError::NoPermission {
                    interface: interface.to_string(),
                },
                other => system("socket(AF_PACKET)")(other),
            })?;
        bind_packet_socket(&fd, ifindex, 0).map_err(system("bind"))?;
        let framing = if any {
            Framing::Cooked
        } else {
            match hardware_type(&fd).map_err(system("getsockname"))? {
                libc::ARPHRD_LOOPBACK | libc::ARPHRD_ETHER => Framing::Ethernet,
                libc::ARPHRD_NONE | ARPHRD_RAWIP | libc::ARPHRD_PPP => Framing::RawIp,
                // Monitor interfaces: 802.11 frames, bare or behind radiotap.
                libc::ARPHRD_IEEE80211 => Framing::Ieee80211,
                libc::ARPHRD_IEEE80211_RADIOTAP => Framing::Radiotap,
                other => {
                    return Err(OpenError::UnsupportedLink {
                        interface: interface.to_string(),
                        hatype: other,
                    }
                    .into())
                }
            }
        };
        // Radio and 802.11 headers come before IP: keep room for them too.
        let keep = if framing.is_wireless() {
            options.keep + 200
        } else {
            options.keep
        };
        let CompiledFilter { program, .. } = filter::compile(user_filter, framing, keep)?;
        let loopback = nix::net::if_::if_nametoindex("lo").unwrap_or(1);
        let mut program = filter::drop_loopback_outgoing(&program, loopback);
        let io_error = |what: &'static str| {
            move |error: io::Error| OpenError::System {
                interface: interface.to_string(),
                what,
                error,
            }
        };
        bpf::attach(fd.as_fd(), &mut program).map_err(io_error("SO_ATTACH_FILTER"))?;
        let version = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        bpf::set_socket_option(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(io_error("PACKET_VERSION"))?;
        let blocks = (options.buffer_bytes / BLOCK_BYTES).max(2);
        let request = libc::tpacket_req3 {
            tp_block_size: BLOCK_BYTES as u32,
            tp_block_nr: blocks as u32,
            tp_frame_size: FRAME_BYTES,
            tp_frame_nr: (BLOCK_BYTES as u32 / FRAME_BYTES) * blocks as u32,
            tp_retire_blk_tov: options.block_timeout.as_millis().clamp(1, 10_000) as u32,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        bpf::set_socket_option(fd.as_fd(), libc::SOL_PACKET, libc::PACKET_RX_RING, &request)
            .map_err(io_error("PACKET_RX_RING"))?;
        // SAFETY: a shared read-write mapping of the ring the kernel just made for this fd.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                blocks * BLOCK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(system("mmap of the ring")(Errno::last()).into());
        }
        let map = NonNull::new(map.cast::<u8>())
            .ok_or_else(|| system("mmap of the ring")(Errno::EINVAL))?;
        let ring = Ring {
            fd,
            map,
            blocks,
            next_block: 0,
            framing,
            interface: interface.to_string(),
        };
        bind_packet_socket(&ring.fd, ifindex, libc::ETH_P_ALL as u16).map_err(system("bind"))?;
        Ok(ring)
    }

    /// The interface the ring captures on.
    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// How its frames begin.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// The socket, to wait on with `poll` (readable when a block is handed over; an error
    /// when the interface goes down or away).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn block(&self, index: usize) -> *mut libc::tpacket_block_desc {
        // SAFETY: index < blocks, so the block lies inside the mapping.
        unsafe { self.map.as_ptr().add(index * BLOCK_BYTES).cast() }
    }

    /// Hands every packet of every block the kernel has handed over to `on_frame`, returns
    /// the block to the kernel, and returns how many packets there were.
    pub fn drain(&mut self, mut on_frame: impl FnMut(&Frame<'_>)) -> u64 {
        let mut packets = 0;
        for _ in 0..self.blocks {
            let block = self.block(self.next_block);
            // SAFETY: the block header is inside the mapping; the kernel writes the status
            // last (with a barrier) when it hands the block over, so once TP_STATUS_USER is
            // read, after an acquire fence, the block's packets are complete.
            let header = unsafe { std::ptr::addr_of!((*block).hdr.bh1) };
            let status =
                unsafe { std::ptr::read_volatile(std::ptr::addr_of!((*header).block_status)) };
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            fence(Ordering::Acquire);
            // SAFETY: as above; the counts and offsets are the kernel's, bounded by the block.
            let (count, first) = unsafe { ((*header).num_pkts, (*header).offset_to_first_pkt) };
            let mut offset = first as usize;
            for _ in 0..count {
                if offset + libc::TPACKET3_HDRLEN > BLOCK_BYTES {
                    break;
                }
                // SAFETY: the packet header lies inside the block (checked above).
                let packet =
                    unsafe { &*(block.cast::<u8>().add(offset) as *const libc::tpacket3_hdr) };
                // The socket address follows the header, aligned (TPACKET_ALIGN).
                let address_at =
                    offset + std::mem::size_of::<libc::tpacket3_hdr>().div_ceil(16) * 16;
                // SAFETY: inside the block, as TPACKET3_HDRLEN covers it.
                let address =
                    unsafe { &*(block.cast::<u8>().add(address_at) as *const libc::sockaddr_ll) };
                let start = offset + usize::from(packet.tp_mac);
                let len = packet.tp_snaplen as usize;
                if start + len <= BLOCK_BYTES {
                    // SAFETY: the frame lies inside the block (checked).
                    let data =
                        unsafe { std::slice::from_raw_parts(block.cast::<u8>().add(start), len) };
                    on_frame(&Frame {
                        data,
                        wire_len: packet.tp_len,
                        ts_ns: u64::from(packet.tp_sec) * 1_000_000_000 + u64::from(packet.tp_nsec),
                        protocol: u16::from_be(address.sll_protocol),
                    });
                    packets += 1;
                }
                if packet.tp_next_offset == 0 {
                    break;
                }
                offset += packet.tp_next_offset as usize;
            }
            fence(Ordering::Release);
            // SAFETY: the block is ours until this store gives it back.
            unsafe {
                std::ptr::write_volatile(
                    std::ptr::addr_of_mut!((*block).hdr.bh1.block_status),
                    libc::TP_STATUS_KERNEL,
                );
            }
            self.next_block = (self.next_block + 1) % self.blocks;
        }
        packets
    }

    /// Packets the kernel dropped because the ring was full, since the last call (the
    /// kernel resets its counters when they are read).
    pub fn take_drops(&self) -> u64 {
        let mut stats = libc::tpacket_stats_v3 {
            tp_packets: 0,
            tp_drops: 0,
            tp_freeze_q_cnt: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
        // SAFETY: stats and len are live locals of the sizes the kernel is told.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut stats as *mut libc::tpacket_stats_v3).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            u64::from(stats.tp_drops)
        } else {
            0
        }
    }

    /// The socket's pending error (`SO_ERROR`, which reading clears): ENETDOWN when the
    /// interface went down or away (`packet_notifier`).
    pub fn take_error(&self) -> Option<io::Error> {
        match socket::getsockopt(&self.fd, socket::sockopt::SocketError) {
            Ok(0) => None,
            Ok(errno) => Some(io::Error::from_raw_os_error(errno)),
            Err(errno) => Some(errno.into()),
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, of that length, unmapped once.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.blocks * BLOCK_BYTES);
        }
    }
}
