//! Facts about the running kernel that explain the figures tcpstall prints: release, timer
//! frequency (HZ rounds the 40 ms delayed-ACK timer up by one jiffy), autocorking, and the
//! TcpExt counters of `/proc/net/netstat`.

use std::fs;
use std::time::Duration;

use serde::Serialize;

use crate::tcp_rules;

/// What the lab and the reports print at the top, so that "44 ms" reads as "40 ms + one jiffy".
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct KernelFacts {
    /// `uname -r`.
    pub release: String,
    /// CONFIG_HZ from the kernel's config, when the config is readable.
    pub hz: Option<u32>,
    /// `net.ipv4.tcp_autocorking` (1 by default): small sends wait while the qdisc holds data.
    pub tcp_autocorking: Option<bool>,
    /// `net.ipv4.tcp_delack_min`-style floor is not a sysctl on Linux; this is the compiled
    /// minimum, `TCP_DELACK_MIN = HZ/25` jiffies, in milliseconds (40 for any HZ).
    pub delack_min_ms: u32,
}

impl KernelFacts {
    /// Reads the facts of the running kernel; what cannot be read is left `None`.
    pub fn read() -> KernelFacts {
        let release = fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let tcp_autocorking = read_sysctl_u64("/proc/sys/net/ipv4/tcp_autocorking").map(|v| v != 0);
        KernelFacts {
            hz: config_hz(&release),
            release,
            tcp_autocorking,
            delack_min_ms: tcp_rules::DELACK_MIN.as_millis() as u32,
        }
    }

    /// One jiffy (1/HZ); `None` when HZ is unknown.
    pub fn jiffy(&self) -> Option<Duration> {
        self.hz
            .filter(|hz| *hz > 0)
            .map(|hz| Duration::from_secs(1) / hz)
    }

    /// The delayed-ACK window this kernel fires in: (40 ms, 40 ms + 1 jiffy], from
    /// `TCP_DELACK_MIN` and the timer wheel's round-up (`__mod_timer` → `calc_wheel_index`).
    pub fn delack_window_ms(&self) -> (f64, f64) {
        let jiffy_ms = self
            .hz
            .map_or(tcp_rules::JIFFY_UNKNOWN_HZ.as_secs_f64() * 1e3, |hz| {
                1000.0 / hz as f64
            });
        let min = tcp_rules::DELACK_MIN.as_secs_f64() * 1e3;
        (min, min + jiffy_ms)
    }

    /// Whether the release is `major.minor` or later; `None` when `uname -r` does not start
    /// with two numbers.
    pub fn release_at_least(&self, (major, minor): (u32, u32)) -> Option<bool> {
        let mut parts = self
            .release
            .split(|c: char| !c.is_ascii_digit())
            .map(str::parse::<u32>);
        let (have_major, have_minor) = (parts.next()?.ok()?, parts.next()?.ok()?);
        Some((have_major, have_minor) >= (major, minor))
    }

    /// One line for the head of a report.
    pub fn summary_line(&self) -> String {
        let hz = self
            .hz
            .map(|hz| format!("HZ={hz}"))
            .unwrap_or_else(|| "HZ unknown".to_string());
        let cork = match self.tcp_autocorking {
            Some(true) => "tcp_autocorking=1",
            Some(false) => "tcp_autocorking=0",
            None => "tcp_autocorking unknown",
        };
        let (lo, hi) = self.delack_window_ms();
        format!(
            "kernel {} ({hz}, {cork}): delayed ACK fires in ({lo:.0} ms, {hi:.0} ms]",
            self.release
        )
    }
}

/// A numeric sysctl (`/proc/sys/...`), or `None` when the file is missing or not a number.
pub fn read_sysctl_u64(path: &str) -> Option<u64> {
    fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The ping-pong count from which a socket delays its ACKs (`inet_csk_in_pingpong_mode`:
/// `icsk_ack.pingpong >= threshold`, what TCP_QUICKACK reads back inverted): the namespace's
/// `net.ipv4.tcp_pingpong_thresh` where the kernel has it, else the compiled
/// `TCP_PINGPONG_THRESH` of the release ([`tcp_rules::pingpong_threshold`]).
pub fn pingpong_threshold(facts: &KernelFacts) -> u8 {
    read_sysctl_u64("/proc/sys/net/ipv4/tcp_pingpong_thresh")
        .and_then(|v| u8::try_from(v).ok())
        .unwrap_or_else(|| {
            tcp_rules::pingpong_threshold(
                facts
                    .release_at_least(tcp_rules::PINGPONG_THRESH_1_SINCE)
                    .unwrap_or(true),
            )
        })
}

/// CONFIG_HZ from `/boot/config-RELEASE`, else from `/proc/config.gz` (CONFIG_IKCONFIG_PROC).
fn config_hz(release: &str) -> Option<u32> {
    let text = fs::read_to_string(format!("/boot/config-{release}"))
        .ok()
        .or_else(proc_config_gz)?;
    text.lines()
        .find_map(|line| line.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
}

/// The running kernel's config as exposed gzip-compressed in `/proc/config.gz`.
fn proc_config_gz() -> Option<String> {
    use std::io::Read;
    let file = fs::File::open("/proc/config.gz").ok()?;
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

/// One counter of the `TcpExt:` block of `/proc/net/netstat` (e.g. `TCPAutoCorking`), or `None`
/// when the file or the counter is missing. The block is a header line of names followed by a
/// line of values in the same order.
pub fn tcpext_counter(name: &str) -> Option<u64> {
    tcpext_counter_in("/proc/net/netstat", name)
}

/// Like [`tcpext_counter`], from another netstat file: `/proc/thread-self/net/netstat` read by
/// a thread inside a network namespace gives that namespace's counters.
pub fn tcpext_counter_in(netstat: &str, name: &str) -> Option<u64> {
    let text = fs::read_to_string(netstat).ok()?;
    let mut lines = text.lines();
    while let Some(header) = lines.next() {
        let values = lines.next()?;
        if let Some(names) = header.strip_prefix("TcpExt:") {
            let values = values.strip_prefix("TcpExt:")?;
            return names
                .split_whitespace()
                .zip(values.split_whitespace())
                .find(|(n, _)| *n == name)
                .and_then(|(_, v)| v.parse().ok());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_release_and_a_known_counter() {
        let facts = KernelFacts::read();
        assert_ne!(facts.release, "unknown");
        assert!(tcpext_counter("DelayedACKs").is_some());
        assert!(tcpext_counter("NoSuchCounter").is_none());
    }

    #[test]
    fn compares_releases() {
        let facts = |release: &str| KernelFacts {
            release: release.into(),
            hz: None,
            tcp_autocorking: None,
            delack_min_ms: tcp_rules::DELACK_MIN.as_millis() as u32,
        };
        assert_eq!(facts("6.18.44-fc").release_at_least((6, 7)), Some(true));
        assert_eq!(facts("6.6.1").release_at_least((6, 7)), Some(false));
        assert_eq!(facts("7.0").release_at_least((6, 7)), Some(true));
        assert_eq!(facts("unknown").release_at_least((6, 7)), None);
    }
}
