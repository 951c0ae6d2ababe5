//! The lab's capture of its own traffic, fed through the detector `analyze` uses: on `lo`, or
//! over an emulated path on the server namespace's TUN device (each packet as the server's
//! kernel sends and receives it), the client's, or mid-path (the relay's copy halfway). Every row then says what the detector found in its flows
//! (told apart by the row's server port), beside what its latency says.
//!
//! Capturing needs CAP_NET_RAW. Without it the lab runs as before and says so once; with
//! `--capture FILE` the capture is required and its absence is an error.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::sync::Mutex;

use anyhow::Context;

use super::path::PathEnds;
use crate::capture::live::{
    CaptureOptions, CaptureSummary, LiveCapture, OpenError, PacketSocket, PortFilter,
};
use crate::detect::{Analysis, Detector, DetectorConfig, StallEvent, StallKind};
use crate::host::netns::TUN_NAME;
pub use crate::report::model::lab::DetectorVerdict;
use crate::Side;

/// A running capture of the lab's rows, every segment pushed into a [`Detector`].
pub struct OwnTraffic {
    capture: LiveCapture<Detector>,
    /// The address every row's server binds.
    server_addr: IpAddr,
    /// Each row's server port and when the row started (ns since the Unix epoch, the clock of
    /// the kernel's packet timestamps), in run order.
    rows: Mutex<Vec<(u16, u64)>>,
}

impl OwnTraffic {
    /// Starts capturing before the first row (ports are added as rows start), writing `file`
    /// too when given. Without CAP_NET_RAW: an error when `file` is `Required`, otherwise a
    /// note on stderr and `None` (the rows get no detector verdict).
    pub fn start(
        file: CaptureFile<'_>,
        path: Option<&PathEnds>,
        at: super::CaptureAt,
    ) -> anyhow::Result<Option<Self>> {
        let socket = match (open_socket(path, at), file) {
            (Ok(socket), _) => socket,
            (Err(err), CaptureFile::Required(_)) => return Err(err).context("--capture"),
            (Err(err), CaptureFile::IfPossible(_) | CaptureFile::None) => {
                let why = match err.downcast_ref::<OpenError>() {
                    Some(OpenError::NoPermission { .. }) => {
                        "needs CAP_NET_RAW to capture the lab's own traffic: run as root or \
                         grant it with `sudo setcap cap_net_raw+ep $(command -v tcpstall)`"
                            .to_string()
                    }
                    _ => format!("is left empty: {err:#}"),
                };
                eprintln!(
                    "tcpstall: note: the detector column {why}; the rows are measured as usual"
                );
                return Ok(None);
            }
        };
        let options = CaptureOptions {
            ports: PortFilter::Only(Vec::new()),
            pcap: file.path().map(Path::to_path_buf),
        };
        // Minor holds too: the batched rows' expected kind is one of them.
        let detector = Detector::new(DetectorConfig {
            keep_minor_events: true,
            ..DetectorConfig::default()
        });
        Ok(Some(OwnTraffic {
            capture: LiveCapture::start(socket, options, detector)?,
            server_addr: path.map_or(IpAddr::V4(Ipv4Addr::LOCALHOST), |p| {
                IpAddr::V4(p.server_addr)
            }),
            rows: Mutex::new(Vec::new()),
        }))
    }

    /// A row starts with its server on `port`; call before its first connect. The row lasts
    /// until the next one starts: rows run one after the other, so the previous row's port
    /// gets no new connection kept (the kernel may give it to another program on `lo`).
    pub fn row_started(&self, port: u16) {
        if let Ok(mut rows) = self.rows.lock() {
            if let Some(&(previous, _)) = rows.last() {
                self.capture.unwatch_port(previous);
            }
            rows.push((port, crate::capture::live::now_ns()));
        }
        self.capture.watch_port(port);
    }

    /// Stops once the rows' connections have closed; what was captured, and what the
    /// detector found in each row.
    pub fn finish(self) -> anyhow::Result<(CaptureSummary, RowVerdicts)> {
        let finished = self.capture.finish()?;
        let verdicts = RowVerdicts {
            analysis: finished.consumer.finish(),
            server_addr: self.server_addr,
            rows: self.rows.into_inner().unwrap_or_default(),
        };
        Ok((finished.summary, verdicts))
    }
}

/// Where the lab's own traffic is written, besides the detector.
#[derive(Debug, Clone, Copy)]
pub enum CaptureFile<'a> {
    /// Nowhere.
    None,
    /// `--capture FILE`: the user asked for it, so capturing is required.
    Required(&'a Path),
    /// A file the lab reads back itself (the ladders of `--ladder`/`--html`), when it can
    /// capture at all.
    IfPossible(&'a Path),
}

impl CaptureFile<'_> {
    /// The file, if any.
    pub fn path(&self) -> Option<&Path> {
        match *self {
            CaptureFile::None => None,
            CaptureFile::Required(p) | CaptureFile::IfPossible(p) => Some(p),
        }
    }
}

/// What the detector found, to be told apart by row.
pub struct RowVerdicts {
    analysis: Analysis,
    server_addr: IpAddr,
    rows: Vec<(u16, u64)>,
}

impl RowVerdicts {
    /// The verdict of the `index`-th row run, whose server listened on `port`: the stalls of
    /// the flows to that address and port released while the row ran. The time tells apart
    /// two rows the kernel gave the same port, and another program's later use of it on `lo`.
    pub fn of(&self, index: usize, port: u16) -> DetectorVerdict {
        DetectorVerdict::of(self.events_of(index, port))
    }

    /// The latest stall of the `index`-th row: the example its ladder draws.
    pub fn example(&self, index: usize, port: u16) -> Option<&StallEvent> {
        self.events_of(index, port)
            .filter(|e| e.finding.kind.is_stall())
            .last()
    }

    /// The events of the flows to the row's address and port released while the row ran.
    fn events_of(&self, index: usize, port: u16) -> impl Iterator<Item = &StallEvent> {
        let window = self
            .rows
            .get(index)
            .filter(|(p, _)| *p == port)
            .map(|&(_, start)| {
                let end = self.rows.get(index + 1).map_or(u64::MAX, |(_, at)| *at);
                start..end
            });
        self.analysis.events.iter().filter(move |e| {
            window
                .as_ref()
                .is_some_and(|w| w.contains(&e.ts_ns.as_nanos()))
                && e.server.port == port
                && e.server.addr == self.server_addr
        })
    }
}

/// Opens the packet socket the lab captures with: `lo`, or the server's (or, `--capture-at
/// client`, the client's; `--capture-at path`, the middle namespace's) TUN device when the rows
/// run over an emulated path.
fn open_socket(path: Option<&PathEnds>, at: super::CaptureAt) -> anyhow::Result<PacketSocket> {
    match path {
        None => Ok(PacketSocket::open("lo")?),
        Some(ends) => {
            let ns = match at {
                super::CaptureAt::Client => &ends.client,
                super::CaptureAt::Server => &ends.server,
                super::CaptureAt::Path => &ends.middle,
            };
            let opened = ns.run(|| Ok(PacketSocket::open(TUN_NAME)))?;
            Ok(opened.with_context(|| format!("in namespace {}", ns.name()))?)
        }
    }
}

/// Fewest rounds a batched row runs (`--requests` counts rounds): enough for the detector's
/// pacing rule to decide on loopback, where a hold is told only when the writes gathered behind
/// the small segment in flight, about one hold per round (measured), and a direction is paced
/// from [`crate::detect::PACED_HOLDS`] holds. Three times that leaves room for the rounds a
/// busy machine lets through unheld; a round costs microseconds there, two round trips over a
/// path.
pub(crate) const MIN_PACED_ROUNDS: usize = 3 * crate::detect::PACED_HOLDS as usize;

/// The detector kind a row's capture is checked against, for the kind the rules expect
/// (`expect::WireOutcome::detector_kind`) after `rounds` rounds; `None`: too few rounds to
/// decide. `nagle_ack_paced` is a flow's verdict over many holds, not one per request: a row
/// cut short (the row timeout) before [`MIN_PACED_ROUNDS`] is left unchecked rather than
/// failed.
pub(crate) fn kind_checked(expected: &'static str, rounds: usize) -> Option<&'static str> {
    match expected {
        super::expect::ACK_PACED_KIND if rounds < MIN_PACED_ROUNDS => None,
        other => Some(other),
    }
}

/// Whether the capture point can show `kind`: a hold released by the peer's reply carrying the
/// ACK (a pipelining client's, over a path) is told from the application answering only on the
/// held side's host (`ack_paced`), the client's for the batched rows; over a path captured
/// elsewhere the check is not made.
pub(crate) fn seen_from(
    kind: &str,
    settings: &super::runner::RunSettings,
    at: super::CaptureAt,
) -> bool {
    kind != super::expect::ACK_PACED_KIND
        || settings.path.is_none()
        || at == super::CaptureAt::Client
}

impl DetectorVerdict {
    /// The verdict on a row's stall events.
    fn of<'a>(events: impl Iterator<Item = &'a StallEvent>) -> DetectorVerdict {
        let all: Vec<&StallEvent> = events.collect();
        let count = |stall: bool| -> Vec<(StallKind, u64)> {
            StallKind::ALL
                .into_iter()
                .filter(|kind| kind.is_stall() == stall)
                .map(|kind| {
                    let n = all.iter().filter(|e| e.finding.kind == kind).count();
                    (kind, n as u64)
                })
                .collect()
        };
        let (stalls, holds) = (count(true), count(false));
        // The side most events of the kinds `of` held, if any.
        let side_of = |of: &dyn Fn(StallKind) -> bool| {
            let held_by = |side: Side| {
                all.iter()
                    .filter(|e| of(e.finding.kind) && e.finding.held_side == side)
                    .count()
            };
            match (held_by(Side::Client), held_by(Side::Server)) {
                (0, 0) => None,
                (client, server) if client >= server => Some(Side::Client),
                _ => Some(Side::Server),
            }
        };
        DetectorVerdict {
            stalls,
            holds,
            held_side: side_of(&StallKind::is_stall),
            paced_side: side_of(&|kind| kind == StallKind::NagleAckPaced),
        }
    }

    /// Events of the kind named `name`, stall or not.
    pub fn count_of(&self, name: &str) -> u64 {
        self.stalls
            .iter()
            .chain(&self.holds)
            .filter(|(kind, _)| kind.name() == name)
            .map(|(_, n)| n)
            .sum()
    }

    /// Stalls of every kind.
    #[cfg(test)]
    pub fn total(&self) -> u64 {
        self.stalls.iter().map(|(_, n)| n).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Finding;
    use crate::flow::{Endpoint, Span, Timestamp};

    fn event(server: (IpAddr, u16), ts_ns: u64, kind: StallKind, held: Side) -> StallEvent {
        StallEvent {
            finding: Finding::own_timer(kind, held, Span::from_millis(40)),
            flow_id: 0,
            ordinal: 0,
            client: Endpoint {
                addr: server.0,
                port: 40_000,
            },
            server: Endpoint {
                addr: server.0,
                port: server.1,
            },
            ts_ns: Timestamp::from_nanos(ts_ns),
            packet_number: 0,
            released_by: None,
            released_bytes: 7,
            writes: vec![6, 7],
            mss: 65_483,
            peer_stack: None,
            backoffs: 0,
            backoff_ns: crate::flow::Span::ZERO,
            handshake_not_taken: None,
            paced: None,
        }
    }

    #[test]
    fn rows_are_told_apart_by_address_port_and_time() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let other = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        let nagle = StallKind::NagleDelayedAck;
        let analysis = Analysis {
            events: vec![
                event((lo, 5000), 150, nagle, Side::Client),
                event((lo, 5000), 160, StallKind::Rto, Side::Client),
                // The kernel gave port 5000 again to the third row.
                event((lo, 5000), 350, nagle, Side::Server),
                // Another program's server on another loopback address, same port.
                event((other, 5000), 170, nagle, Side::Server),
                // Before the first row started.
                event((lo, 5000), 50, nagle, Side::Server),
            ],
            ..Analysis::default()
        };
        let verdicts = RowVerdicts {
            analysis,
            server_addr: lo,
            rows: vec![(5000, 100), (6000, 200), (5000, 300)],
        };
        let first = verdicts.of(0, 5000);
        assert_eq!(first.held_side, Some(Side::Client));
        assert_eq!(first.to_string(), "nagle_delayed_ack×1,rto×1 client");
        assert_eq!(verdicts.of(1, 6000).to_string(), "-");
        assert_eq!(verdicts.of(1, 6000).held_side, None);
        let third = verdicts.of(2, 5000);
        assert_eq!(third.to_string(), "nagle_delayed_ack×1 server");
        assert_eq!(third.total(), 1);
        // A row that never started (or another port) has nothing.
        assert_eq!(verdicts.of(3, 5000).total(), 0);
        assert_eq!(verdicts.of(1, 5000).total(), 0);
        let json = serde_json::to_string(&first).unwrap();
        assert_eq!(
            json,
            r#"{"stalls":{"nagle_delayed_ack":1,"cork_timer":0,"rto":1,"syn_retry":0,"zero_window":0},"holds":{"nagle_ack_paced":0,"nagle_minor":0},"held_side":"client","paced_side":null}"#
        );
    }

    #[test]
    fn a_paced_row_names_the_paced_side() {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let paced = StallKind::NagleAckPaced;
        let analysis = Analysis {
            events: vec![
                event((lo, 5000), 150, paced, Side::Client),
                event((lo, 5000), 160, StallKind::NagleMinor, Side::Server),
            ],
            ..Analysis::default()
        };
        let verdicts = RowVerdicts {
            analysis,
            server_addr: lo,
            rows: vec![(5000, 100)],
        };
        let row = verdicts.of(0, 5000);
        assert_eq!((row.held_side, row.paced_side), (None, Some(Side::Client)));
        assert_eq!(row.to_string(), "nagle_ack_paced×1 client");
        assert_eq!(row.count_of("nagle_ack_paced"), 1);
    }
}
