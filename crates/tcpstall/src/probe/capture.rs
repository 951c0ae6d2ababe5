//! The probe watching its own traffic: a live capture ([`crate::capture::live`]) on the
//! interface the route to the target leaves by (`lo` for loopback), keeping only the probe's
//! own local ports, each segment fed to the same [`Detector`] `analyze` uses and kept in a
//! small log for the evidence of a stalled turn.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use super::captured::{Captured, NoCapture, WireSegment};
use crate::capture::live::{
    CaptureOptions, Finished, LiveCapture, OpenError, PacketSocket, PortFilter, SegmentConsumer,
};
use crate::decode::Segment;
use crate::detect::{Detector, DetectorConfig};

/// What capturing takes, in the report's words.
pub const NEEDS: &str = "CAP_NET_RAW";

/// How to let the probe place a hold its socket saw, in the report's words.
pub const TO_PLACE_THE_HOLD: &str =
    "run it with CAP_NET_RAW to compare the hold with the path's round trip";

/// Most segments kept for evidence (a bounded run makes far fewer).
const MAX_LOGGED: usize = 1 << 20;
/// Whole segments kept for the ladder: the latest ones, where the example stall is.
const MAX_RAW: usize = 1 << 16;

/// The capture's consumer: the detector and the log.
struct Recorder {
    detector: Detector,
    segments: Vec<WireSegment>,
    raw: VecDeque<Segment>,
    ports: Arc<Mutex<HashSet<u16>>>,
}

impl SegmentConsumer for Recorder {
    fn segment(&mut self, seg: &Segment) {
        let (outgoing, local_port) = match self.ports.lock() {
            Ok(ports) if ports.contains(&seg.src_port) => (true, seg.src_port),
            Ok(ports) if ports.contains(&seg.dst_port) => (false, seg.dst_port),
            _ => return,
        };
        self.detector.push(seg);
        if self.raw.len() == MAX_RAW {
            self.raw.pop_front();
        }
        self.raw.push_back(*seg);
        if self.segments.len() < MAX_LOGGED {
            self.segments.push(WireSegment {
                ts_ns: seg.ts_ns.as_nanos(),
                local_port,
                outgoing,
                payload: seg.payload_len,
                flags: seg.flags,
            });
        }
    }
}

/// A running capture of the probe's traffic.
pub struct OwnCapture {
    capture: LiveCapture<Recorder>,
    ports: Arc<Mutex<HashSet<u16>>>,
    interface: String,
}

impl OwnCapture {
    /// Starts capturing on the interface the route to `remote` leaves by.
    pub fn start(remote: SocketAddr) -> Result<OwnCapture, NoCapture> {
        let interface = route_interface(remote.ip()).map_err(NoCapture::Failed)?;
        let socket = PacketSocket::open(&interface).map_err(|err| match err {
            OpenError::NoPermission { .. } => NoCapture::NoPermission,
            other => NoCapture::Failed(other.to_string()),
        })?;
        let ports = Arc::new(Mutex::new(HashSet::new()));
        let recorder = Recorder {
            detector: Detector::new(DetectorConfig {
                keep_minor_events: true,
                keep_turns: false,
                keep_socket_settled: false,
            }),
            segments: Vec::new(),
            raw: VecDeque::new(),
            ports: ports.clone(),
        };
        let options = CaptureOptions {
            ports: PortFilter::Only(Vec::new()),
            pcap: None,
        };
        let capture = LiveCapture::start(socket, options, recorder)
            .map_err(|err| NoCapture::Failed(format!("{err:#}")))?;
        Ok(OwnCapture {
            capture,
            ports,
            interface,
        })
    }

    /// Keeps the traffic of local port `port` from now on (before its SYN leaves).
    pub fn watch(&self, port: u16) {
        if let Ok(mut ports) = self.ports.lock() {
            ports.insert(port);
        }
        self.capture.watch_port(port);
    }

    /// Waits for the connections' last FINs (bounded), then hands over what was seen.
    pub fn finish(self) -> anyhow::Result<Captured> {
        let interface = self.interface;
        Ok(Self::hand_over(self.capture.finish()?, interface))
    }

    /// Stops now, once the packets already queued are read, without waiting for FINs (a
    /// connection abandoned on a timeout may never get the server's), and hands over what
    /// was seen.
    pub fn stop(self) -> anyhow::Result<Captured> {
        let interface = self.interface;
        Ok(Self::hand_over(self.capture.stop()?, interface))
    }

    fn hand_over(finished: Finished<Recorder>, interface: String) -> Captured {
        let recorder = finished.consumer;
        Captured {
            analysis: recorder.detector.finish(),
            segments: recorder.segments,
            raw: recorder.raw.into(),
            interface,
            dropped: finished.summary.dropped,
        }
    }
}

/// The interface whose address the kernel picks to reach `remote`: a UDP socket connected to
/// it sends nothing but learns the route's source address, and the interface holding that
/// address is the one the probe's packets leave by.
pub fn route_interface(remote: IpAddr) -> Result<String, String> {
    if remote.is_loopback() {
        return Ok("lo".to_string());
    }
    let any: SocketAddr = match remote {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let local = UdpSocket::bind(any)
        .and_then(|udp| udp.connect((remote, 9)).and_then(|()| udp.local_addr()))
        .map_err(|err| format!("no route to {remote}: {err}"))?
        .ip();
    // An address of this host itself is reached over `lo` (the kernel's local table), whichever
    // interface holds it: capturing on that interface would see nothing.
    if local.is_loopback() || local == remote {
        return Ok("lo".to_string());
    }
    let addrs =
        nix::ifaddrs::getifaddrs().map_err(|err| format!("cannot list interfaces: {err}"))?;
    let mut holder = None;
    for ifaddr in addrs {
        let Some(address) = ifaddr.address else {
            continue;
        };
        let ip = match (address.as_sockaddr_in(), address.as_sockaddr_in6()) {
            (Some(v4), _) => IpAddr::V4(v4.ip()),
            (_, Some(v6)) => IpAddr::V6(v6.ip()),
            _ => continue,
        };
        if ip == remote {
            return Ok("lo".to_string());
        }
        if ip == local && holder.is_none() {
            holder = Some(ifaddr.interface_name);
        }
    }
    if let Some(interface) = holder {
        return Ok(interface);
    }
    Err(format!(
        "no interface holds {local}, the source address of the route to {remote}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A non-loopback address of this host is still reached over `lo`.
    #[test]
    fn this_hosts_own_addresses_route_by_lo() {
        let own = nix::ifaddrs::getifaddrs()
            .expect("interfaces")
            .filter_map(|i| i.address?.as_sockaddr_in().map(|a| IpAddr::V4(a.ip())))
            .filter(|ip| !ip.is_loopback())
            .collect::<Vec<_>>();
        for ip in own {
            assert_eq!(route_interface(ip).as_deref(), Ok("lo"), "{ip}");
        }
    }

    #[test]
    fn loopback_routes_by_lo() {
        assert_eq!(
            route_interface("127.0.0.1".parse().unwrap()).as_deref(),
            Ok("lo")
        );
        assert_eq!(route_interface("::1".parse().unwrap()).as_deref(), Ok("lo"));
    }
}
