//! The kernel's TCP sockets through `sock_diag` netlink (`NETLINK_SOCK_DIAG`, `inet_diag_req_v2`,
//! answered by `inet_diag_dump` in net/ipv4/inet_diag.c): the same rows as `/proc/net/tcp`, as
//! binary messages, with the state filter applied in the kernel. TIME_WAIT and request sockets
//! are left out there: they have no inode (`inet_twsk_diag_fill` and `inet_req_diag_fill` write
//! 0), so no process holds them, and on a busy host they are most of the table: 14,000 TIME_WAIT
//! rows made the text table slow enough that a young socket had closed before it was matched.
//!
//! The messages come from `netlink-packet-sock-diag`, the socket from `netlink-sys`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::SocketAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::constants::{AF_INET, AF_INET6, IPPROTO_TCP};
use netlink_packet_sock_diag::inet::{
    ExtensionFlags, InetRequest, InetResponseHeader, SocketId, StateFlags,
};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr as NetlinkAddr};

use super::procfs::{unmapped, TcpEntry, TcpState};

/// The TCP sockets of tcpstall's own network namespace whose inode is in `wanted`, by inode.
/// An error means netlink itself was refused or failed (the caller falls back to the text
/// tables); a socket closed meanwhile is simply absent.
pub(crate) fn tcp_sockets(wanted: &HashSet<u64>) -> io::Result<HashMap<u64, TcpEntry>> {
    let mut found = HashMap::new();
    if wanted.is_empty() {
        return Ok(found);
    }
    each_socket(held_states(), &mut |header| {
        let inode = u64::from(header.inode);
        if wanted.contains(&inode) {
            if let Some(entry) = entry_of(header) {
                found.insert(inode, entry);
            }
        }
    })?;
    Ok(found)
}

/// The one TCP socket at `local` talking to `remote`, by an exact lookup in the kernel
/// (`inet_diag_find_one_icsk`: the established table, then the listeners, so a connection gone
/// since finds its server's listening socket; a TIME_WAIT one is returned with inode 0).
/// `Ok(None)`: no such socket. The cost does not grow with the number of sockets on the host.
pub(crate) fn socket_at(local: SocketAddr, remote: SocketAddr) -> io::Result<Option<TcpEntry>> {
    let (local, remote) = (unmapped(local), unmapped(remote));
    let (family, mut id) = match (local, remote) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) => (AF_INET, SocketId::new_v4()),
        (SocketAddr::V6(_), SocketAddr::V6(_)) => (AF_INET6, SocketId::new_v6()),
        _ => return Ok(None),
    };
    id.source_address = local.ip();
    id.source_port = local.port();
    id.destination_address = remote.ip();
    id.destination_port = remote.port();
    // INET_DIAG_NOCOOKIE: any socket with that tuple.
    id.cookie = [0xff; 8];
    let socket = Socket::new(NETLINK_SOCK_DIAG)?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states: StateFlags::all(),
            socket_id: id,
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0u8; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send_to(&buf, &NetlinkAddr::new(0, 0), 0)?;
    let (datagram, _) = socket.recv_from_full()?;
    let message = NetlinkMessage::<SockDiagMessage>::deserialize(&datagram)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {err}")))?;
    match message.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
            Ok(entry_of(&response.header))
        }
        NetlinkPayload::Error(err) if err.raw_code() == -libc::ENOENT => Ok(None),
        NetlinkPayload::Error(err) => Err(io::Error::from_raw_os_error(-err.raw_code())),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "sock_diag: an unexpected answer to a socket lookup",
        )),
    }
}

/// A listening TCP socket and its accept queue, as `inet_diag` reports it
/// (`tcp_diag_get_info`: for a listener, `idiag_rqueue` is `sk_ack_backlog`, `idiag_wqueue`
/// `sk_max_ack_backlog`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ListenQueue {
    /// The address it listens on.
    pub(crate) local: SocketAddr,
    /// Its inode.
    pub(crate) inode: u64,
    /// Connections waiting for `accept()` now.
    pub(crate) queued: u32,
    /// The backlog the kernel keeps: `listen()`'s, capped by `net.core.somaxconn`.
    pub(crate) backlog: u32,
}

/// Every listening TCP socket of tcpstall's own network namespace.
pub(crate) fn listeners() -> io::Result<Vec<ListenQueue>> {
    let mut found = Vec::new();
    each_socket(StateFlags::LISTEN, &mut |header| {
        found.push(ListenQueue {
            local: unmapped(SocketAddr::new(
                header.socket_id.source_address,
                header.socket_id.source_port,
            )),
            inode: u64::from(header.inode),
            queued: header.recv_queue,
            backlog: header.send_queue,
        });
    })?;
    Ok(found)
}

/// Dumps the TCP sockets in `states`, both families, handing each to `seen`.
fn each_socket(states: StateFlags, seen: &mut dyn FnMut(&InetResponseHeader)) -> io::Result<()> {
    let mut socket = Socket::new(NETLINK_SOCK_DIAG)?;
    socket.bind_auto()?;
    socket.connect(&NetlinkAddr::new(0, 0))?;
    for (family, id) in [
        (AF_INET, SocketId::new_v4()),
        (AF_INET6, SocketId::new_v6()),
    ] {
        dump(&socket, family, id, states.clone(), seen)?;
    }
    Ok(())
}

/// Every state a socket held by a process can be in: all but TIME_WAIT (request sockets,
/// NEW_SYN_RECV, are not in `StateFlags` at all).
fn held_states() -> StateFlags {
    StateFlags::all() - StateFlags::TIME_WAIT
}

fn dump(
    socket: &Socket,
    family: u8,
    socket_id: SocketId,
    states: StateFlags,
    seen: &mut dyn FnMut(&InetResponseHeader),
) -> io::Result<()> {
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_REQUEST | NLM_F_DUMP;
    let mut request = NetlinkMessage::new(
        header,
        SockDiagMessage::InetRequest(InetRequest {
            family,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::empty(),
            states,
            socket_id,
        })
        .into(),
    );
    request.finalize();
    let mut buf = vec![0u8; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;
    loop {
        let (datagram, _) = socket.recv_from_full()?;
        if datagram.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "sock_diag: the dump ended without NLMSG_DONE",
            ));
        }
        let mut offset = 0;
        while offset < datagram.len() {
            let message = NetlinkMessage::<SockDiagMessage>::deserialize(&datagram[offset..])
                .map_err(|err| {
                    io::Error::new(io::ErrorKind::InvalidData, format!("sock_diag: {err}"))
                })?;
            let length = message.header.length as usize;
            match message.payload {
                NetlinkPayload::Done(_) => return Ok(()),
                NetlinkPayload::Error(err) => {
                    return Err(io::Error::from_raw_os_error(-err.raw_code()))
                }
                NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(response)) => {
                    seen(&response.header);
                }
                _ => {}
            }
            if length == 0 {
                break;
            }
            // Messages are aligned to 4 bytes (NLMSG_ALIGN).
            offset += (length + 3) & !3;
        }
    }
}

fn entry_of(header: &InetResponseHeader) -> Option<TcpEntry> {
    let id = &header.socket_id;
    Some(TcpEntry {
        local: unmapped(SocketAddr::new(id.source_address, id.source_port)),
        remote: unmapped(SocketAddr::new(id.destination_address, id.destination_port)),
        state: TcpState::from_code(header.state)?,
        uid: header.uid,
        inode: u64::from(header.inode),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    fn inode_of(fd: std::os::fd::BorrowedFd<'_>) -> u64 {
        nix::sys::stat::fstat(fd).expect("fstat").st_ino
    }

    #[test]
    fn an_exact_lookup_finds_the_connection_then_its_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let server = listener.local_addr().expect("addr");
        let client = TcpStream::connect(server).expect("connect");
        let (accepted, _) = listener.accept().expect("accept");
        let peer = client.local_addr().expect("addr");
        let found = socket_at(server, peer).expect("sock_diag").expect("found");
        assert_eq!(found.inode, inode_of(accepted.as_fd()));
        assert_eq!(found.state, TcpState::Established);
        let found = socket_at(peer, server).expect("sock_diag").expect("found");
        assert_eq!(found.inode, inode_of(client.as_fd()));
        // Closed from the client first: the server's side is gone once both closed, and the
        // lookup falls to the listener. The FINs cross loopback in softirq context, which a
        // loaded host defers: the lookup is repeated for up to two seconds.
        drop(client);
        drop(accepted);
        let mut found = socket_at(server, peer).expect("sock_diag").expect("found");
        for _ in 0..200 {
            if found.state == TcpState::Listen {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            found = socket_at(server, peer).expect("sock_diag").expect("found");
        }
        assert_eq!(found.state, TcpState::Listen);
        assert_eq!(found.inode, inode_of(listener.as_fd()));
        let nobody: SocketAddr = "127.0.0.1:1".parse().expect("addr");
        assert!(socket_at(nobody, peer).expect("sock_diag").is_none());
    }

    #[test]
    fn finds_own_sockets_by_inode_with_their_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let v6 = TcpListener::bind("[::1]:0").ok();
        let mut wanted: HashSet<u64> =
            [inode_of(listener.as_fd()), inode_of(client.as_fd())].into();
        if let Some(v6) = &v6 {
            wanted.insert(inode_of(v6.as_fd()));
        }
        let found = tcp_sockets(&wanted).expect("sock_diag answers");
        let listen = &found[&inode_of(listener.as_fd())];
        assert_eq!(listen.state, TcpState::Listen);
        assert_eq!(listen.local, listener.local_addr().expect("addr"));
        let connected = &found[&inode_of(client.as_fd())];
        assert_eq!(connected.state, TcpState::Established);
        assert_eq!(connected.local, client.local_addr().expect("addr"));
        assert_eq!(connected.remote, listener.local_addr().expect("addr"));
        if let Some(v6) = &v6 {
            assert_eq!(
                found[&inode_of(v6.as_fd())].local,
                v6.local_addr().expect("addr")
            );
        }
        assert_eq!(found.len(), wanted.len(), "only the inodes asked for");
        // The text tables, the kernel's other rendering of the same sockets, agree row by row.
        let text = crate::host::procfs::tcp_table(std::process::id()).expect("/proc/net/tcp");
        for (inode, entry) in &found {
            assert_eq!(text.get(inode), Some(entry), "inode {inode}");
        }
    }
}
