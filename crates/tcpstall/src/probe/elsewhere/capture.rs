//! Elsewhere than Linux the probe captures nothing: its live capture is a Linux packet ring
//! (AF_PACKET). It then judges from its own socket, as on Linux without CAP_NET_RAW, and the
//! report says so.

use std::net::SocketAddr;

use crate::probe::captured::{Captured, NoCapture};

/// Why there is no capture here, in the report's words.
const NO_PACKET_RING: &str = "this system has no packet ring the probe captures with \
                              (Linux's AF_PACKET)";

/// What capturing takes, in the report's words.
pub const NEEDS: &str = "Linux's packet capture";

/// How to let the probe place a hold its socket saw, in the report's words.
pub const TO_PLACE_THE_HOLD: &str = "a capture compares the hold with the path's round trip: \
                                     take one (Wireshark, tcpdump) and read it with `tcpstall \
                                     analyze`, or run the probe on Linux";

/// No capture runs here: the type has no value.
pub enum OwnCapture {}

impl OwnCapture {
    /// Says why the probe does not capture here.
    pub fn start(_remote: SocketAddr) -> Result<OwnCapture, NoCapture> {
        Err(NoCapture::Failed(NO_PACKET_RING.to_string()))
    }

    /// Never called: no capture exists.
    pub fn watch(&self, _port: u16) {
        match *self {}
    }

    /// Never called: no capture exists.
    pub fn finish(self) -> anyhow::Result<Captured> {
        match self {}
    }

    /// Never called: no capture exists.
    pub fn stop(self) -> anyhow::Result<Captured> {
        match self {}
    }
}
