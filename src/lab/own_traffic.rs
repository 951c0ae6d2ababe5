//! The lab's capture of its own traffic, fed through the detector `analyze` uses: on `lo`, or
//! over an emulated path on the server namespace's TUN device (each packet as the server's
//! kernel sends and receives it). Every row then says what the detector found in its flows
//! (told apart by the row's server port), beside what its latency says.
//!
//! Capturing needs CAP_NET_RAW. Without it the lab runs as before and says so once; with
//! `--capture FILE` the capture is required and its absence is an error.

use std::fmt;
use std::path::Path;

use anyhow::Context;
use serde::ser::{Serialize, SerializeMap, SerializeStruct, Serializer};

use super::path::{PathEnds, TUN_NAME};
use crate::capture::live::{
    CaptureOptions, CaptureSummary, LiveCapture, OpenError, PacketSocket, PortFilter,
};
use crate::detect::{Analysis, Detector, DetectorConfig, StallKind};
use crate::Side;

/// A running capture of the lab's rows, every segment pushed into a [`Detector`].
pub struct OwnTraffic {
    capture: LiveCapture<Detector>,
}

impl OwnTraffic {
    /// Starts capturing before the first row (ports are added as rows start), writing `file`
    /// too when given. Without CAP_NET_RAW: an error when `file` is given, otherwise a note
    /// on stderr and `None` (the rows get no detector verdict).
    pub fn start(file: Option<&Path>, path: Option<&PathEnds>) -> anyhow::Result<Option<Self>> {
        let socket = match (open_socket(path), file) {
            (Ok(socket), _) => socket,
            (Err(err), Some(_)) => return Err(err).context("--capture"),
            (Err(err), None) => {
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
            pcap: file.map(Path::to_path_buf),
        };
        let detector = Detector::new(DetectorConfig::default());
        Ok(Some(OwnTraffic {
            capture: LiveCapture::start(socket, options, detector)?,
        }))
    }

    /// Captures the row whose server listens on `port`; call before its first connect.
    pub fn watch_port(&self, port: u16) {
        self.capture.watch_port(port);
    }

    /// Stops once the rows' connections have closed; what was captured, and what the
    /// detector found in it.
    pub fn finish(self) -> anyhow::Result<(CaptureSummary, Analysis)> {
        let finished = self.capture.finish()?;
        Ok((finished.summary, finished.consumer.finish()))
    }
}

/// Opens the packet socket the lab captures with: `lo`, or the server's TUN device when the
/// rows run over an emulated path.
fn open_socket(path: Option<&PathEnds>) -> anyhow::Result<PacketSocket> {
    match path {
        None => Ok(PacketSocket::open("lo")?),
        Some(ends) => {
            let opened = ends.server.run(|| Ok(PacketSocket::open(TUN_NAME)))?;
            Ok(opened.with_context(|| format!("in namespace {}", ends.server.name()))?)
        }
    }
}

/// What the detector found in one row's flows: stalls by kind, and the side whose data
/// waited. JSON: `{"stalls": {"nagle_delayed_ack": N, "cork_timer": N, "rto": N,
/// "zero_window": N}, "held_side": "client" | "server" | null}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetectorVerdict {
    /// Stalls of each kind that counts as a stall ([`StallKind::is_stall`]), in report order.
    pub stalls: Vec<(StallKind, u64)>,
    /// The side whose data most stalls held; `None` when there was no stall.
    pub held_side: Option<Side>,
}

impl DetectorVerdict {
    /// The stalls of the flows whose server port is `server_port`.
    pub fn of(analysis: &Analysis, server_port: u16) -> DetectorVerdict {
        let events: Vec<_> = analysis
            .events
            .iter()
            .filter(|e| e.server.port == server_port && e.finding.kind.is_stall())
            .collect();
        let stalls = StallKind::ALL
            .into_iter()
            .filter(|kind| kind.is_stall())
            .map(|kind| {
                let n = events.iter().filter(|e| e.finding.kind == kind).count();
                (kind, n as u64)
            })
            .collect();
        let held_by = |side: Side| {
            events
                .iter()
                .filter(|e| e.finding.held_side == side)
                .count()
        };
        let held_side = match (held_by(Side::Client), held_by(Side::Server)) {
            (0, 0) => None,
            (client, server) if client >= server => Some(Side::Client),
            _ => Some(Side::Server),
        };
        DetectorVerdict { stalls, held_side }
    }

    /// Stalls of every kind.
    pub fn total(&self) -> u64 {
        self.stalls.iter().map(|(_, n)| n).sum()
    }
}

/// The table's column: `nagle_delayed_ack×19 client`, kinds joined by commas; `-` for none.
impl fmt::Display for DetectorVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found: Vec<String> = self
            .stalls
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(kind, n)| format!("{}×{n}", kind.name()))
            .collect();
        let text = match (found.is_empty(), self.held_side) {
            (true, _) => "-".to_string(),
            (false, Some(side)) => format!("{} {}", found.join(","), side.name()),
            (false, None) => found.join(","),
        };
        f.pad(&text)
    }
}

impl Serialize for DetectorVerdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The kinds by their stable names.
        struct Stalls<'a>(&'a [(StallKind, u64)]);
        impl Serialize for Stalls<'_> {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(Some(self.0.len()))?;
                for (kind, n) in self.0 {
                    map.serialize_entry(kind.name(), n)?;
                }
                map.end()
            }
        }
        let mut verdict = serializer.serialize_struct("DetectorVerdict", 2)?;
        verdict.serialize_field("stalls", &Stalls(&self.stalls))?;
        verdict.serialize_field("held_side", &self.held_side.map(Side::name))?;
        verdict.end()
    }
}
