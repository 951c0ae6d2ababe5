//! The two rtnetlink requests `fix --route` makes: the route the kernel uses for a destination
//! (RTM_GETROUTE with RTM_F_FIB_MATCH, as `ip route get ADDR fibmatch`), and that route put back
//! with other metrics (RTM_NEWROUTE with NLM_F_REPLACE and without NLM_F_CREATE, so that it
//! replaces the route in place and never adds one).

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_DUMP, NLM_F_REPLACE,
    NLM_F_REQUEST,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr as NetlinkAddr};

/// Replies read for one request before giving up: a request gets its answer and, at most, an
/// acknowledgement; anything past this bound is a kernel talking of something else.
const MAX_REPLIES: usize = 16;
/// Seconds to wait for each answer of the kernel.
const REPLY_TIMEOUT_S: i64 = 5;
/// Datagrams read for one route dump (each holds many routes): a bound far above a full
/// Internet table's.
const MAX_DUMP_DATAGRAMS: usize = 1 << 20;

/// A NETLINK_ROUTE socket in the namespace of the thread that opened it (it keeps that
/// namespace whichever thread uses it later).
pub struct RouteSocket {
    socket: Socket,
    sequence: u32,
}

impl RouteSocket {
    /// Opens the socket in the calling thread's network namespace.
    pub fn open() -> io::Result<RouteSocket> {
        let mut socket = Socket::new(NETLINK_ROUTE)?;
        socket.bind_auto()?;
        socket.connect(&NetlinkAddr::new(0, 0))?;
        // The kernel answers at once; a bound on each wait keeps a lost answer from hanging.
        let timeout = nix::sys::time::TimeVal::new(REPLY_TIMEOUT_S, 0);
        nix::sys::socket::setsockopt(&socket, nix::sys::socket::sockopt::ReceiveTimeout, &timeout)
            .map_err(io::Error::from)?;
        Ok(RouteSocket {
            socket,
            sequence: 0,
        })
    }

    /// The route the kernel uses for `dest`, every table and policy rule considered: the
    /// FIB entry itself (`RTM_F_FIB_MATCH`, `inet_rtm_getroute` / `inet6_rtm_getroute`), not
    /// the cached result of the lookup that a plain `ip route get` shows.
    pub fn matching_route(&mut self, dest: IpAddr) -> io::Result<RouteMessage> {
        let mut request = RouteMessage::default();
        request.header.address_family = family_of(dest);
        request.header.destination_prefix_length = if dest.is_ipv4() { 32 } else { 128 };
        request.header.flags = RouteFlags::FibMatch;
        request
            .attributes
            .push(RouteAttribute::Destination(RouteAddress::from(dest)));
        let reply = self.request(RouteNetlinkMessage::GetRoute(request), NLM_F_REQUEST)?;
        let matched = reply
            .ok_or_else(|| io::Error::other("the kernel answered RTM_GETROUTE with no route"))?;
        self.as_stored(matched)
    }

    /// The route as the table dump holds it. While no policy rule of its own exists, IPv4 keeps
    /// table local's routes in table main's trie (`fib_unmerge` undoes it when a rule is added),
    /// and RTM_F_FIB_MATCH reports that trie's id: `local 127.0.0.1` comes back as table main,
    /// where a replace would not find it. The dump gives each route its own table
    /// (`fa_tb_id`); the entry with the same key and attributes is taken, in the reported table
    /// if it is there.
    fn as_stored(&mut self, matched: RouteMessage) -> io::Result<RouteMessage> {
        let key = |route: &RouteMessage| {
            let mut header = route.header.clone();
            header.table = 0;
            header.flags = RouteFlags::empty();
            let attributes: Vec<RouteAttribute> = as_request(route)
                .attributes
                .into_iter()
                .filter(|a| !matches!(a, RouteAttribute::Table(_)))
                .collect();
            (header, attributes)
        };
        let wanted = key(&matched);
        let reported = table(&matched);
        let mut candidates: Vec<RouteMessage> = self
            .dump(matched.header.address_family)?
            .into_iter()
            .filter(|route| key(route) == wanted)
            .collect();
        candidates.sort_by_key(|route| table(route) != reported);
        Ok(candidates.into_iter().next().unwrap_or(matched))
    }

    /// Every route of `family`, all tables (RTM_GETROUTE with NLM_F_DUMP).
    fn dump(&mut self, family: AddressFamily) -> io::Result<Vec<RouteMessage>> {
        let mut request = RouteMessage::default();
        request.header.address_family = family;
        self.send(
            RouteNetlinkMessage::GetRoute(request),
            NLM_F_REQUEST | NLM_F_DUMP,
        )?;
        let mut routes = Vec::new();
        for _ in 0..MAX_DUMP_DATAGRAMS {
            let (datagram, _) = self.socket.recv_from_full()?;
            let mut offset = 0;
            while offset < datagram.len() {
                let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram[offset..])
                    .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
                let length = reply.header.length as usize;
                match reply.payload {
                    NetlinkPayload::Done(_) => return Ok(routes),
                    NetlinkPayload::Error(err) if err.code.is_some() => {
                        return Err(io::Error::from_raw_os_error(-err.raw_code()))
                    }
                    NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
                        routes.push(route)
                    }
                    _ => {}
                }
                if length == 0 {
                    break;
                }
                offset += (length + 3) & !3;
            }
        }
        Err(io::Error::other(format!(
            "rtnetlink: the route dump did not end within {MAX_DUMP_DATAGRAMS} messages"
        )))
    }

    /// Replaces the route with the same key (table, destination, TOS, priority) by `route`,
    /// in place (`fib_table_insert` / `fib6_add_rt2node` with NLM_F_REPLACE); without
    /// NLM_F_CREATE the kernel refuses rather than adds when no such route exists.
    pub fn replace(&mut self, route: &RouteMessage) -> io::Result<()> {
        let message = RouteNetlinkMessage::NewRoute(route.clone());
        self.request(message, NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE)
            .map(|_| ())
    }

    /// Sends one request under a new sequence number.
    fn send(&mut self, message: RouteNetlinkMessage, flags: u16) -> io::Result<()> {
        self.sequence = self.sequence.wrapping_add(1);
        let mut header = NetlinkHeader::default();
        header.flags = flags;
        header.sequence_number = self.sequence;
        let mut packet = NetlinkMessage::new(header, NetlinkPayload::from(message));
        packet.finalize();
        let mut buf = vec![0u8; packet.buffer_len()];
        packet.serialize(&mut buf);
        self.socket.send(&buf, 0).map(|_| ())
    }

    /// Sends one request and reads until its answer: a route, an acknowledgement (`None`), or
    /// the kernel's error.
    fn request(
        &mut self,
        message: RouteNetlinkMessage,
        flags: u16,
    ) -> io::Result<Option<RouteMessage>> {
        self.send(message, flags)?;
        for _ in 0..MAX_REPLIES {
            let (datagram, _) = self.socket.recv_from_full()?;
            if datagram.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "rtnetlink: the socket closed before the answer",
                ));
            }
            let reply = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&datagram)
                .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))?;
            if reply.header.sequence_number != self.sequence {
                continue;
            }
            match reply.payload {
                NetlinkPayload::Error(err) if err.code.is_none() => return Ok(None),
                NetlinkPayload::Error(err) => {
                    return Err(io::Error::from_raw_os_error(-err.raw_code()))
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewRoute(route)) => {
                    return Ok(Some(route))
                }
                NetlinkPayload::Done(_) => return Ok(None),
                _ => {}
            }
        }
        Err(io::Error::other(format!(
            "rtnetlink: no answer among {MAX_REPLIES} messages"
        )))
    }
}

fn family_of(addr: IpAddr) -> AddressFamily {
    match addr {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    }
}

/// `RTNH_F_ONLINK`: the one next-hop flag a route is created with (`ip route ... onlink`); the
/// others the kernel reports are state (dead, link down, offloaded), not configuration.
const RTNH_F_ONLINK: u32 = 4;

/// The route as a request that recreates it: what the kernel reported, less what it reports
/// but does not take (cache information, state flags, the lookup's own attributes).
pub fn as_request(route: &RouteMessage) -> RouteMessage {
    let mut request = RouteMessage::default();
    request.header = RouteHeader {
        flags: RouteFlags::from_bits_retain(route.header.flags.bits() & RTNH_F_ONLINK),
        ..route.header.clone()
    };
    request.attributes = route
        .attributes
        .iter()
        .filter(|attr| {
            !matches!(
                attr,
                RouteAttribute::CacheInfo(_)
                    | RouteAttribute::MfcStats(_)
                    | RouteAttribute::Uid(_)
                    | RouteAttribute::Iif(_)
                    | RouteAttribute::Mark(_)
                    | RouteAttribute::IpProto(_)
                    | RouteAttribute::Sport(_)
                    | RouteAttribute::Dport(_)
                    | RouteAttribute::Flowlabel(_)
                    | RouteAttribute::MulticastExpires(_)
            )
        })
        .cloned()
        .collect();
    request
}

/// The route's metrics (RTA_METRICS), empty when it has none.
pub fn metrics(route: &RouteMessage) -> &[RouteMetric] {
    attribute(route, |attr| match attr {
        RouteAttribute::Metrics(metrics) => Some(metrics.as_slice()),
        _ => None,
    })
    .unwrap_or(&[])
}

/// The route with its metrics replaced by `metrics` (RTA_METRICS dropped when empty), every
/// other attribute kept in its place.
pub fn with_metrics(route: &RouteMessage, metrics: Vec<RouteMetric>) -> RouteMessage {
    let mut changed = route.clone();
    let position = changed
        .attributes
        .iter()
        .position(|attr| matches!(attr, RouteAttribute::Metrics(_)));
    match (position, metrics.is_empty()) {
        (Some(at), true) => {
            changed.attributes.remove(at);
        }
        (Some(at), false) => changed.attributes[at] = RouteAttribute::Metrics(metrics),
        (None, true) => {}
        (None, false) => changed.attributes.push(RouteAttribute::Metrics(metrics)),
    }
    changed
}

/// The first attribute of `route` that `pick` takes.
fn attribute<'a, T>(
    route: &'a RouteMessage,
    pick: impl Fn(&'a RouteAttribute) -> Option<T>,
) -> Option<T> {
    route.attributes.iter().find_map(pick)
}

/// The route's table: RTA_TABLE, which holds ids above 255, else the header's.
pub fn table(route: &RouteMessage) -> u32 {
    attribute(route, |attr| match attr {
        RouteAttribute::Table(table) => Some(*table),
        _ => None,
    })
    .unwrap_or_else(|| u32::from(route.header.table))
}

/// The route's priority (`metric` in `ip route`), 0 when absent.
pub fn priority(route: &RouteMessage) -> u32 {
    attribute(route, |attr| match attr {
        RouteAttribute::Priority(priority) => Some(*priority),
        _ => None,
    })
    .unwrap_or(0)
}

/// Whether the route is a default route (prefix length 0): it carries whatever has no route
/// of its own.
pub fn is_default(route: &RouteMessage) -> bool {
    route.header.destination_prefix_length == 0
}

/// The route's destination prefix (`default` when it has none), as `ip route` writes it.
pub fn destination(route: &RouteMessage) -> String {
    let len = route.header.destination_prefix_length;
    let full = match route.header.address_family {
        AddressFamily::Inet6 => 128,
        _ => 32,
    };
    let address = attribute(route, |attr| match attr {
        RouteAttribute::Destination(address) => address_text(address),
        _ => None,
    });
    match address {
        None if len == 0 => "default".to_string(),
        None => format!("?/{len}"),
        Some(address) if len == full => address,
        Some(address) => format!("{address}/{len}"),
    }
}

/// The route's expiry in hundredths of a second (RTA_CACHEINFO's `rta_expires`), 0 for none:
/// a route learned from a router advertisement expires; one made through rtnetlink does not.
pub fn expires(route: &RouteMessage) -> u32 {
    attribute(route, |attr| match attr {
        RouteAttribute::CacheInfo(info) => Some(info.expires),
        _ => None,
    })
    .unwrap_or(0)
}

fn address_text(address: &RouteAddress) -> Option<String> {
    match address {
        RouteAddress::Inet(a) => Some(a.to_string()),
        RouteAddress::Inet6(a) => Some(a.to_string()),
        _ => None,
    }
}

/// The route's bytes as the request that recreates it: what the state file keeps.
pub fn to_bytes(route: &RouteMessage) -> Vec<u8> {
    use netlink_packet_core::Emitable;
    let mut buf = vec![0u8; route.buffer_len()];
    route.emit(&mut buf);
    buf
}

/// A route read back from [`to_bytes`].
pub fn from_bytes(bytes: &[u8]) -> io::Result<RouteMessage> {
    use netlink_packet_core::Parseable;
    RouteMessage::parse(bytes)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_route_is_found_and_recreated_whole() {
        let mut socket = RouteSocket::open().expect("a NETLINK_ROUTE socket");
        let route = socket
            .matching_route(IpAddr::from([127, 0, 0, 1]))
            .expect("127.0.0.1 has a route");
        // The more specific `local 127.0.0.1` of table local, not 127.0.0.0/8, and in table
        // local although FIB_MATCH says main while the tables are merged.
        assert_eq!(destination(&route), "127.0.0.1");
        assert_eq!(table(&route), 255);
        let request = as_request(&route);
        assert!(!request
            .attributes
            .iter()
            .any(|a| matches!(a, RouteAttribute::CacheInfo(_))));
        let bytes = to_bytes(&request);
        assert_eq!(from_bytes(&bytes).expect("parses back"), request);
        let quick = with_metrics(&request, vec![RouteMetric::QuickAck(1)]);
        assert_eq!(metrics(&quick), &[RouteMetric::QuickAck(1)]);
        assert_eq!(
            with_metrics(&quick, Vec::new()).attributes,
            request.attributes
        );
    }
}
