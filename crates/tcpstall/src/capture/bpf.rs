//! The kernel-side filter of a live capture: a classic BPF program (the `SO_ATTACH_FILTER`
//! kind tcpdump compiles, `Documentation/networking/filter.rst`) that keeps only TCP packets
//! to or from the watched ports, and drops `lo`'s outgoing copies. Without it every packet on
//! the interface is queued on the capture socket until user space looks at it: on a busy
//! `lo` the socket's buffer fills while the reader waits for a CPU, and packets the capture
//! needs are dropped with the rest.
//!
//! The program is rebuilt and attached again when a port is added (the kernel swaps it
//! atomically, `sk_attach_filter`); packets queued before that are judged again in user space.
//! Jumps: conditional jumps only skip one instruction (their offsets are 8 bits), longer ones
//! are `ja` with a 32-bit offset, so any number of ports fits.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::filter::program::Program;
use super::filter::Framing;
use crate::decode::numbers::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, IPPROTO_TCP,
};

/// Bytes of a kept packet the kernel hands over: all of it (the live capture's snap length).
const KEEP: u32 = 0x0004_0000;

/// Keeps the packet when the port in A is watched; falls through otherwise.
fn keep_if_watched(p: &mut Program, ports: Option<&HashSet<u16>>) {
    match ports {
        None => p.ret(KEEP),
        Some(ports) => {
            // Sorted, so that the same set always gives the same program.
            let mut ports: Vec<u16> = ports.iter().copied().collect();
            ports.sort_unstable();
            for port in ports {
                p.return_if_equal(u32::from(port), KEEP);
            }
        }
    }
}

/// The filter for frames of `framing`, keeping TCP packets to or from `ports` (every TCP
/// packet for `None`); `skip_outgoing` drops the copies `lo` shows of packets leaving.
/// Packets it cannot judge (VLAN-tagged, IPv6 with extension headers) are kept for the user
/// space decoder to judge.
pub(crate) fn port_filter(
    framing: Framing,
    skip_outgoing: bool,
    ports: Option<&HashSet<u16>>,
) -> Vec<libc::sock_filter> {
    let mut p = Program::default();
    let abs = |size: u32| libc::BPF_LD | size | libc::BPF_ABS;
    if skip_outgoing {
        // The packet type is an ancillary load (SKF_AD_PKTTYPE, `ld #type`).
        p.op(
            abs(libc::BPF_W),
            (libc::SKF_AD_OFF + libc::SKF_AD_PKTTYPE) as u32,
        );
        p.return_if_equal(u32::from(libc::PACKET_OUTGOING), 0);
    }
    let jeq = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
    let (to_v4, to_v6) = (p.label(), p.label());
    let ip = match framing {
        Framing::Ethernet => {
            p.op(abs(libc::BPF_H), 12);
            p.jump_if(jeq, u32::from(ETHERTYPE_IPV4), to_v4);
            p.jump_if(jeq, u32::from(ETHERTYPE_IPV6), to_v6);
            p.return_if_equal(u32::from(ETHERTYPE_VLAN), KEEP);
            p.return_if_equal(u32::from(ETHERTYPE_QINQ), KEEP);
            14
        }
        // The network header first (a TUN device, or a cooked socket's frame): its version
        // nibble.
        Framing::RawIp | Framing::Cooked => {
            p.op(abs(libc::BPF_B), 0);
            p.op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K, 4);
            p.jump_if(jeq, 4, to_v4);
            p.jump_if(jeq, 6, to_v6);
            0
        }
        Framing::Ieee80211 | Framing::Radiotap => {
            // 802.11 headers vary in length: every frame goes to the user space decoder.
            p.ret(KEEP);
            return p
                .finish()
                .expect("the port filter's conditional jumps skip one instruction");
        }
    };
    p.ret(0);

    // IPv4 (RFC 791): TCP, first fragment, ports after the header of IHL words.
    p.place(to_v4);
    p.op(abs(libc::BPF_B), ip + 9);
    p.return_if_not_equal(u32::from(IPPROTO_TCP), 0);
    p.op(abs(libc::BPF_H), ip + 6);
    p.raw(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K, 0, 1, 0x1fff);
    p.ret(0);
    // X = 4 * (IHL), the BPF_MSH load made for this.
    p.op(libc::BPF_LDX | libc::BPF_B | libc::BPF_MSH, ip);
    let ind = libc::BPF_LD | libc::BPF_H | libc::BPF_IND;
    p.op(ind, ip);
    keep_if_watched(&mut p, ports);
    p.op(ind, ip + 2);
    keep_if_watched(&mut p, ports);
    p.ret(0);

    // IPv6 (RFC 8200): TCP right after the fixed header; extension headers go to user space.
    p.place(to_v6);
    p.op(abs(libc::BPF_B), ip + 6);
    p.return_if_not_equal(u32::from(IPPROTO_TCP), KEEP);
    p.op(abs(libc::BPF_H), ip + 40);
    keep_if_watched(&mut p, ports);
    p.op(abs(libc::BPF_H), ip + 42);
    keep_if_watched(&mut p, ports);
    p.ret(0);
    // Conditional jumps here skip one instruction; the long ones are `ja`: always resolved.
    p.finish()
        .expect("the port filter's conditional jumps skip one instruction")
}

/// Attaches `program` to the socket, replacing the one before (`SO_ATTACH_FILTER`).
pub(crate) fn attach(fd: BorrowedFd<'_>, program: &mut [libc::sock_filter]) -> io::Result<()> {
    let fprog = libc::sock_fprog {
        len: u16::try_from(program.len())
            .map_err(|_| io::Error::other("the port filter is too long for the kernel"))?,
        filter: program.as_mut_ptr(),
    };
    // `fprog` points into `program`, alive for the whole call; the kernel copies it.
    set_socket_option(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
}

/// Removes the socket's filter (`SO_DETACH_FILTER`): every packet is queued again.
pub(crate) fn detach(fd: BorrowedFd<'_>) -> io::Result<()> {
    // The kernel ignores the value.
    set_socket_option(
        fd,
        libc::SOL_SOCKET,
        libc::SO_DETACH_FILTER,
        &0 as &libc::c_int,
    )
}

/// `setsockopt(level, name, value)` for the options nix does not wrap.
pub(super) fn set_socket_option<T>(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: value is a live reference of the length given, read by the kernel only.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::filter::interpret::{self, Packet};

    /// An IPv4 TCP segment from port `sport` to `dport`, after `link` bytes of link header.
    fn ipv4_tcp(link: &[u8], sport: u16, dport: u16) -> Vec<u8> {
        let mut frame = link.to_vec();
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = IPPROTO_TCP;
        frame.extend_from_slice(&ip);
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&dport.to_be_bytes());
        frame.extend_from_slice(&tcp);
        frame
    }

    fn kept(program: &[libc::sock_filter], data: &[u8], pkttype: u8) -> bool {
        let packet = Packet {
            data,
            protocol: ETHERTYPE_IPV4,
            pkttype,
            ifindex: 1,
            vlan_tci: None,
        };
        interpret::run(program, &packet) > 0
    }

    #[test]
    fn the_watched_ports_are_kept_in_every_framing_that_shows_ip() {
        let ports: HashSet<u16> = [8000].into();
        let mut ethernet = vec![0u8; 12];
        ethernet.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        for (framing, link) in [
            (Framing::Ethernet, &ethernet[..]),
            (Framing::RawIp, &[][..]),
            (Framing::Cooked, &[][..]),
        ] {
            let program = port_filter(framing, false, Some(&ports));
            let host = libc::PACKET_HOST;
            assert!(
                kept(&program, &ipv4_tcp(link, 8000, 5555), host),
                "{framing:?}"
            );
            assert!(
                kept(&program, &ipv4_tcp(link, 5555, 8000), host),
                "{framing:?}"
            );
            assert!(
                !kept(&program, &ipv4_tcp(link, 5555, 5556), host),
                "{framing:?}"
            );
            // lo's copy of a packet leaving is dropped when asked.
            let skipping = port_filter(framing, true, Some(&ports));
            let out = libc::PACKET_OUTGOING;
            assert!(
                !kept(&skipping, &ipv4_tcp(link, 8000, 5555), out),
                "{framing:?}"
            );
        }
        // 802.11 frames are left to the decoder: all kept.
        let wireless = port_filter(Framing::Radiotap, false, Some(&ports));
        assert!(kept(&wireless, &[0u8; 64], libc::PACKET_HOST));
    }
}
