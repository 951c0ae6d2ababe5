//! The command line of `tcpstall lab`.

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

use clap::Args;
use serde::Serialize;

use crate::tcp_rules::{DELACK_MIN, STALL_MARGIN, STALL_THRESHOLD};

/// Shortest and longest `--rtt`, in milliseconds.
pub const RTT_RANGE_MS: (u64, u64) = (1, 400);

/// The largest `--size` any scenario accepts, for the command line's own check.
pub const MAX_SIZE: usize = 1 << 20;

/// Arguments of `tcpstall lab`.
#[derive(Args, Debug, Clone)]
#[command(after_help = after_help())]
pub struct LabArgs {
    /// Run only these scenarios (comma-separated or repeated); see --list.
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// Run only these variants of the selected scenarios (comma-separated or repeated).
    #[arg(long, value_delimiter = ',')]
    pub variant: Vec<String>,
    /// Requests per row (1-100000; at least 3 when a keep-alive row is selected: a new
    /// connection starts in quick-ACK mode, so its first request is never held and the
    /// median must land on a later one); stream rows use --connections and --writes instead;
    /// pipeline and concurrent rows run this many rounds, each with every request in flight
    /// (but for server-nagle, at least the 51 their capture's pacing check needs).
    #[arg(long, default_value_t = 20, value_parser = in_range("--requests", 1_usize, 100_000, ""))]
    pub requests: usize,
    /// Payload size in bytes, replacing each row's own: echo line, HTTP body, memcached
    /// value, stream write. memcached's value-N rows then become one row named by the size
    /// (value-2400), as do quickack-N and nodelay-N.
    #[arg(long, value_parser = in_range("--size", 1, MAX_SIZE, " bytes"))]
    pub size: Option<usize>,
    /// TCP_MAXSEG on both ends (88-32767), e.g. 1460 to emulate a 1500-byte MTU on loopback.
    // Linux refuses TCP_MAXSEG outside [TCP_MIN_MSS, MAX_TCP_WINDOW] (do_tcp_setsockopt).
    #[arg(long, value_parser = in_range("--mss", 88_u32, 32_767, ""))]
    pub mss: Option<u32>,
    /// Write the lab's own traffic to this pcap file (needs CAP_NET_RAW); with --rtt, as
    /// the server's TUN device sees it (raw IP, link type 101). On loopback the capture holds
    /// the sender's GSO packets: one packet may carry several segments, so count segments as
    /// payload bytes split at the MSS (TCP_INFO's data_segments), not as packets.
    #[arg(long, value_name = "FILE.pcap")]
    pub capture: Option<PathBuf>,
    /// Also write a self-contained HTML report to FILE: the catalogue as a chart (each row's
    /// p50 and p99, stalled rows against their fixes), the table of rows and, when the lab can
    /// capture (CAP_NET_RAW), the ladder diagram of each stalled row.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Draw the ladder diagram of one stalled request of each stalled row, from the lab's own
    /// capture (needs CAP_NET_RAW).
    #[arg(long, conflicts_with = "json")]
    pub ladder: bool,
    /// Print the catalogue with a description of each entry and exit (as JSON with --json).
    #[arg(long)]
    pub list: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// One line per row with the whole explanation, the kernel's names (tcp_nagle_check,
    /// ICSK_ACK_PUSHED2) and the source documents included, however wide; by default the table
    /// fits the terminal (COLUMNS, else its width, else 100) and says why in plain words.
    #[arg(long)]
    pub wide: bool,
    /// Stream scenario: connections per row (1-10000; document 001 used 1000).
    #[arg(long, default_value_t = 20, value_parser = in_range("--connections", 1_usize, 10_000, ""))]
    pub connections: usize,
    /// Stream scenario: writes per connection (1-1000).
    #[arg(long, default_value_t = 10, value_parser = in_range("--writes", 1_usize, 1_000, ""))]
    pub writes: usize,
    /// Stream scenario: connections running at once (1-64).
    #[arg(long, default_value_t = 5, value_parser = in_range("--parallel", 1_usize, 64, ""))]
    pub parallel: usize,
    /// No row runs longer than this many seconds (1-3600).
    #[arg(long, default_value_t = 60, value_parser = in_range("--row-timeout", 1_u64, 3_600, " seconds"))]
    pub row_timeout: u64,
    /// Exit 1 when a row stalls that is not expected to.
    #[arg(long)]
    pub fail_on_stall: bool,
    /// Run over an emulated path with this round-trip time in ms (1-400): client and server in
    /// their own network namespaces, packets delayed by a relay (needs root).
    #[arg(
        long,
        value_name = "MS",
        value_parser = in_range("--rtt", RTT_RANGE_MS.0, RTT_RANGE_MS.1, " milliseconds")
    )]
    pub rtt: Option<u64>,
    /// Start the server of the one row selected by --scenario and --variant, set up as the
    /// row's run sets it up, on 127.0.0.1; print `serving S/V on ADDRESS` and serve until
    /// Ctrl-C, SIGTERM or --row-timeout, for any client to meet (e.g. `tcpstall probe`).
    #[arg(long, conflicts_with_all = ["list", "json", "rtt", "capture", "html", "ladder", "fail_on_stall"])]
    pub serve: bool,
    /// With --serve: the port to listen on (default: a free one the kernel picks).
    #[arg(long, requires = "serve", value_parser = in_range("--port", 1_u16, u16::MAX, ""))]
    pub port: Option<u16>,
    /// With --rtt: the relay loses the Nth segment carrying data of every connection, client
    /// to server, once, between the middle of the path and the server (what repairs it, a
    /// tail-loss probe, a fast retransmit or the retransmission timer, is the kernel's choice).
    #[arg(long, value_name = "N", requires = "rtt", value_parser = in_range("--lose-segment", 1_u32, 1_000_000, ""))]
    pub lose_segment: Option<u32>,
    /// With --rtt: bottleneck rate of the path in Mbit/s (0.1-10000), both directions.
    #[arg(
        long,
        value_name = "MBIT",
        requires = "rtt",
        value_parser = in_range("--rate", 0.1, 10_000.0, " Mbit/s")
    )]
    pub rate: Option<f64>,
    /// With --rtt: one end of every row is a user-space TCP stack behaving like this system's
    /// (its delayed ACK, ACK frequency, Nagle); the other end stays this kernel.
    #[arg(long, value_enum, requires = "rtt")]
    pub peer: Option<Profile>,
    /// With --rtt: where the lab captures its own traffic: on the server's TUN device (the
    /// default), on the client's, or mid-path (a copy of each packet halfway through the
    /// relay's delay, RTT/4 from each end). The detector's verdict must be the same from
    /// every point.
    #[arg(long, value_enum, requires = "rtt", default_value = "server")]
    pub capture_at: CaptureAt,
    /// With --peer: the end the peer plays.
    #[arg(long, value_enum, requires = "peer", default_value = "client")]
    pub peer_side: PeerSide,
}

/// Where the lab captures its own traffic over an emulated path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CaptureAt {
    /// The client's TUN device: the server is one round trip away.
    Client,
    /// The server's TUN device: the client is one round trip away.
    #[default]
    Server,
    /// The middle of the path (the relay's copy halfway): each end half a round trip away.
    Path,
}

/// The stall rule and what `--rtt` sets up, with the figures of `crate::tcp_rules`.
fn after_help() -> String {
    let (threshold, floor, margin) = (
        STALL_THRESHOLD.as_millis(),
        DELACK_MIN.as_millis(),
        STALL_MARGIN.as_millis(),
    );
    format!(
        "A row is stalled when its median latency is >= {threshold} ms: the {floor} ms \
         delayed-ACK floor (TCP_DELACK_MIN) minus a {margin} ms margin. Every server binds \
         127.0.0.1 port 0; nothing leaves loopback.\n\nWith --rtt MS the client and the server \
         run in two network namespaces (tcpstall-lab-<pid>-client/-server, 169.254.77.1 and .2, \
         deleted at the end) joined by TUN devices and a relay that delays each packet by RTT/2 \
         (needs CAP_NET_ADMIN and CAP_SYS_ADMIN: run as root). A row is then stalled when its \
         p50 is >= RTT + {threshold} ms, or 2 RTT + {threshold} ms for rows whose split message \
         Nagle holds until the first part is acknowledged (those cost 2 RTT even when the ACK \
         is immediate)."
    )
}

/// A value parser for a number from `min` to `max` (`unit` follows `max` in the error), whose
/// error names the flag and the range allowed.
pub(crate) fn in_range<T>(
    flag: &'static str,
    min: T,
    max: T,
    unit: &'static str,
) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: FromStr + PartialOrd + Display + Copy + Send + Sync + 'static,
    T::Err: Display,
{
    move |text| {
        let value: T = text
            .parse()
            .map_err(|err| format!("{err}: use a number from {min} to {max}{unit}"))?;
        // `contains` is false for NaN, which is refused too.
        if !(min..=max).contains(&value) {
            return Err(format!(
                "{flag} {value} is out of range: use {min} to {max}{unit}"
            ));
        }
        Ok(value)
    }
}

/// A TCP stack the emulated peer behaves like.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    /// Windows 10/11 and Server: 200 ms delayed-ACK timer, an ACK every second segment.
    Windows,
    /// macOS (XNU): delayed ACK with a 100 ms timer that fires 100-200 ms after the data.
    Macos,
    /// Linux, the control: 40 ms timer, quick-ACK at connection start, ping-pong mode.
    Linux,
}

/// Which end of a row the peer plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerSide {
    /// The client (documents 000-003 had the other system on the client).
    Client,
    /// The server.
    Server,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked_with_errors_that_say_what_is_allowed() {
        let mss = in_range("--mss", 88_u32, 32_767, "");
        assert_eq!(mss("1460"), Ok(1460));
        assert_eq!(
            mss("40"),
            Err("--mss 40 is out of range: use 88 to 32767".to_string())
        );
        assert!(mss("many")
            .unwrap_err()
            .contains("use a number from 88 to 32767"));
        let rtt = in_range("--rtt", RTT_RANGE_MS.0, RTT_RANGE_MS.1, " milliseconds");
        assert_eq!(rtt("20"), Ok(20));
        assert!(rtt("0").unwrap_err().contains("use 1 to 400 milliseconds"));
        assert!(rtt("401").is_err());
        let rate = in_range("--rate", 0.1, 10_000.0, " Mbit/s");
        assert_eq!(rate("10"), Ok(10.0));
        assert!(rate("0").is_err() && rate("NaN").is_err() && rate("inf").is_err());
    }
}
