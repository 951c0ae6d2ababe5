//! What `/proc` tells about a process's TCP sockets without any special permission beyond
//! reading it: which fds are sockets (`/proc/PID/fd/N` → `socket:[INODE]`) and the kernel's TCP
//! tables of the process's network namespace (`/proc/PID/net/tcp`, `tcp6`, written by
//! `tcp4_seq_show`/`tcp6_seq_show`).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

pub use super::tcp_state::TcpState;

/// One row of `/proc/net/tcp` or `tcp6`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TcpEntry {
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port (unspecified for listeners).
    pub remote: SocketAddr,
    /// Connection state.
    pub state: TcpState,
    /// Owner of the socket (the creator's effective uid).
    pub uid: u32,
    /// Socket inode, as in `/proc/PID/fd/N` → `socket:[INODE]`.
    pub inode: u64,
}

/// The TCP sockets among `inodes` (from [`socket_fds`], listed first so that a socket opened
/// meanwhile cannot be missing from an older table), by inode, looked up in `pid`'s network
/// namespace: through sock_diag netlink when it is tcpstall's own namespace (netlink answers
/// for the namespace of the asking socket), else, or when netlink is refused, from the text
/// tables `/proc/PID/net/tcp{,6}`.
pub(crate) fn tcp_entries(pid: u32, inodes: &HashSet<u64>) -> io::Result<HashMap<u64, TcpEntry>> {
    if inodes.is_empty() {
        return Ok(HashMap::new());
    }
    if same_network_namespace(pid) {
        if let Ok(found) = super::sock_diag::tcp_sockets(inodes) {
            return Ok(found);
        }
    }
    let mut table = tcp_table(pid)?;
    table.retain(|inode, _| inodes.contains(inode));
    Ok(table)
}

/// The process holding the socket of the connection from `local` to `remote` in tcpstall's
/// network namespace (pid, command): `None` when no socket of this host has those ends, or
/// its process cannot be read (another user's, without CAP_SYS_PTRACE).
pub(crate) fn connection_owner(local: SocketAddr, remote: SocketAddr) -> Option<(u32, String)> {
    let (local, remote) = (unmapped(local), unmapped(remote));
    let table = tcp_table(std::process::id()).ok()?;
    let inode = table
        .values()
        .find(|e| unmapped(e.local) == local && unmapped(e.remote) == remote)?
        .inode;
    process_holding(inode).ok()?
}

/// The first process (pid, command) with an fd on socket `inode`, among those whose fds
/// tcpstall may read; `Ok(None)` when none of them holds it.
pub(crate) fn process_holding(inode: u64) -> io::Result<Option<(u32, String)>> {
    Ok(all_pids()?.into_iter().find_map(|pid| {
        let fds = socket_fds(pid).ok()?;
        fds.iter()
            .any(|(_, i)| *i == inode)
            .then(|| (pid, comm_of(pid).unwrap_or_else(|| "?".into())))
    }))
}

/// `pid` shares tcpstall's network namespace (`/proc/PID/ns/net` names the same one); false
/// when that cannot be read.
fn same_network_namespace(pid: u32) -> bool {
    let ns = |p: &str| fs::read_link(format!("/proc/{p}/ns/net")).ok();
    match (ns(&pid.to_string()), ns("self")) {
        (Some(theirs), Some(ours)) => theirs == ours,
        _ => false,
    }
}

/// The TCP tables (IPv4 and IPv6) of `pid`'s network namespace, by socket inode. Request
/// sockets (inode 0) are left out: no process holds them.
pub(crate) fn tcp_table(pid: u32) -> io::Result<HashMap<u64, TcpEntry>> {
    let mut table = HashMap::new();
    for name in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{name}");
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            // A kernel without IPv6 has no tcp6.
            Err(err) if err.kind() == io::ErrorKind::NotFound && name == "tcp6" => continue,
            Err(err) => return Err(err),
        };
        for line in text.lines().skip(1) {
            if let Some(entry) = parse_tcp_line(line) {
                if entry.inode != 0 {
                    table.insert(entry.inode, entry);
                }
            }
        }
    }
    Ok(table)
}

/// The ports `pid`'s network namespace listens on (IPv4 and IPv6), read a line at a time:
/// only the LISTEN rows (state `0A`, `TCP_LISTEN`) are parsed, so a host with hundreds of
/// thousands of connections costs a pass over the text, not a table of them.
pub(crate) fn listening_ports(pid: u32) -> io::Result<HashSet<u16>> {
    use std::io::BufRead;
    let mut ports = HashSet::new();
    for name in ["tcp", "tcp6"] {
        let path = format!("/proc/{pid}/net/{name}");
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            // A kernel without IPv6 has no tcp6.
            Err(err) if err.kind() == io::ErrorKind::NotFound && name == "tcp6" => continue,
            Err(err) => return Err(err),
        };
        let mut lines = io::BufReader::new(file).lines();
        // The heading.
        lines.next().transpose()?;
        for line in lines {
            let line = line?;
            let mut fields = line.split_whitespace();
            let local = fields.nth(1);
            if fields.nth(1) != Some("0A") {
                continue;
            }
            if let Some(local) = local.and_then(parse_hex_endpoint) {
                ports.insert(local.port());
            }
        }
    }
    Ok(ports)
}

/// Parses one line of `/proc/net/tcp{,6}`:
/// `sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode ...`.
fn parse_tcp_line(line: &str) -> Option<TcpEntry> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 10 {
        return None;
    }
    Some(TcpEntry {
        local: parse_hex_endpoint(fields[1])?,
        remote: parse_hex_endpoint(fields[2])?,
        state: TcpState::from_code(u8::from_str_radix(fields[3], 16).ok()?)?,
        uid: fields[7].parse().ok()?,
        inode: fields[9].parse().ok()?,
    })
}

/// `0100007F:1F90` → 127.0.0.1:8080. The kernel prints each 32-bit word of the address with
/// `%08X` in host byte order, the port in network order as a number.
fn parse_hex_endpoint(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(unmapped(SocketAddr::new(ip, port)))
}

/// Dual-stack sockets show IPv4 peers as ::ffff:a.b.c.d; shown as IPv4, wherever the address
/// comes from (text tables, sock_diag, the socket itself).
pub(crate) fn unmapped(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

/// Why the fds of a process could not be listed.
#[derive(Debug)]
pub(crate) enum FdListError {
    /// No such process (or it exited).
    NoSuchProcess,
    /// `/proc/PID/fd` is not readable: another user without CAP_SYS_PTRACE
    /// (`proc_fd_permission`, `ptrace_may_access` with PTRACE_MODE_READ_FSCREDS).
    PermissionDenied,
    /// Another I/O error.
    Io(io::Error),
}

/// The fds of `pid` that are sockets, with their inode, sorted by fd.
pub(crate) fn socket_fds(pid: u32) -> Result<Vec<(i32, u64)>, FdListError> {
    let dir = format!("/proc/{pid}/fd");
    let entries = fs::read_dir(&dir).map_err(|err| match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => FdListError::NoSuchProcess,
        Some(libc::EACCES) | Some(libc::EPERM) => FdListError::PermissionDenied,
        _ => FdListError::Io(err),
    })?;
    let mut fds = Vec::new();
    for entry in entries.flatten() {
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        // An fd closed since the listing simply has no link any more.
        match fs::read_link(entry.path()) {
            Ok(target) => {
                if let Some(inode) = target.to_str().and_then(socket_inode_of_link) {
                    fds.push((fd, inode));
                }
            }
            Err(err) if matches!(err.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                return Err(FdListError::PermissionDenied)
            }
            Err(_) => {}
        }
    }
    fds.sort_unstable();
    Ok(fds)
}

/// `socket:[12345]` → 12345.
fn socket_inode_of_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// True when `/proc/PID` exists (a process or a thread).
pub(crate) fn process_exists(pid: u32) -> bool {
    fs::metadata(format!("/proc/{pid}")).is_ok()
}

/// A number of `/proc/PID/stat` by its field number in proc(5) (4: the parent pid, 22: the start
/// time), counted after the command name in parentheses, which may hold spaces and parentheses:
/// the last ')' ends it.
pub(crate) fn stat_field(pid: u32, field: usize) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // Fields 1 (pid) and 2 (comm) come before the ')'.
    rest.split_whitespace()
        .nth(field.checked_sub(3)?)?
        .parse()
        .ok()
}

/// A field of `/proc/PID/status` (`Tgid`, `PPid`, `Uid`...): its first number.
pub(crate) fn status_field(pid: u32, field: &str) -> Option<u32> {
    status_text(pid, field)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// A field of `/proc/PID/status` as text (`State` → `S (sleeping)`).
pub(crate) fn status_text(pid: u32, field: &str) -> Option<String> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|rest| rest.trim().to_string())
}

/// The real uid owning `pid`.
pub(crate) fn uid_of(pid: u32) -> Option<u32> {
    status_field(pid, "Uid")
}

/// The command name of `pid` (`/proc/PID/comm`).
pub(crate) fn comm_of(pid: u32) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end().to_string())
}

/// Every process id in `/proc`, sorted.
pub(crate) fn all_pids() -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> = fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

/// The thread ids of process `pid` (`/proc/PID/task`).
pub(crate) fn thread_ids(pid: u32) -> io::Result<Vec<u32>> {
    let mut tids: Vec<u32> = fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_as_proc5_numbers_them() {
        let me = std::process::id();
        let parent = u64::from(std::os::unix::process::parent_id());
        assert_eq!(stat_field(me, 4), Some(parent));
        assert_eq!(
            stat_field(me, 1),
            None,
            "fields 1 and 2 are before the command's end"
        );
        assert!(stat_field(me, 22).is_some_and(|start| start > 0));
    }
    use std::net::TcpListener;

    #[test]
    fn parses_ipv4_and_mapped_ipv6_rows() {
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0";
        let entry = parse_tcp_line(v4).expect("row parses");
        assert_eq!(entry.local, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(entry.state, TcpState::Listen);
        assert_eq!(entry.uid, 1000);
        assert_eq!(entry.inode, 4242);
        let mapped = parse_hex_endpoint("0000000000000000FFFF00000100007F:0050").expect("parses");
        assert_eq!(mapped, "127.0.0.1:80".parse().unwrap());
        assert!(parse_tcp_line("garbage").is_none());
    }

    #[test]
    fn finds_own_listener_by_inode() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let me = std::process::id();
        let fds = socket_fds(me).unwrap_or_else(|_| panic!("own fds readable"));
        let table = tcp_table(me).unwrap();
        let found = fds
            .iter()
            .filter_map(|(_, inode)| table.get(inode))
            .any(|e| e.local.port() == port && e.state == TcpState::Listen);
        assert!(found, "own listener on port {port} not found in /proc");
    }

    #[test]
    fn listening_ports_are_the_listeners_not_the_connections() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let client_port = client.local_addr().unwrap().port();
        let ports = listening_ports(std::process::id()).unwrap();
        assert!(ports.contains(&port), "{port} not among {ports:?}");
        assert!(
            !ports.contains(&client_port),
            "{client_port} is a connection's"
        );
    }
}
