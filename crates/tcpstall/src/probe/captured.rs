//! What a capture of the probe's own traffic gave: the detector's findings and the segments
//! of the probe's connections, the evidence of a stalled turn and its ladder.

use crate::decode::Segment;
use crate::detect::Analysis;

/// One segment of the probe's connections, as the capture saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireSegment {
    /// Capture time, ns since the Unix epoch.
    pub ts_ns: u64,
    /// The probe's local port (names the connection).
    pub local_port: u16,
    /// Sent by the probe (client → server).
    pub outgoing: bool,
    /// Payload bytes.
    pub payload: u32,
    /// TCP flags ([`crate::decode::flags`]).
    pub flags: u8,
}

/// What the capture saw.
#[derive(Debug, Clone)]
pub struct Captured {
    /// The detector's findings.
    pub analysis: Analysis,
    /// Every segment of the probe's connections, in capture order.
    pub segments: Vec<WireSegment>,
    /// The latest segments whole (at most 65,536), in capture order, for the ladder.
    pub raw: Vec<Segment>,
    /// The interface captured on.
    pub interface: String,
    /// Packets the kernel dropped from the capture's buffer.
    pub dropped: u64,
}

/// Why the probe cannot capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoCapture {
    /// No CAP_NET_RAW: the usual case for an unprivileged user.
    // Only Linux's capture asks for a permission.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    NoPermission,
    /// Anything else, in words.
    Failed(String),
}
