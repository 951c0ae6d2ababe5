//! The command line of `tcpstall fix`.

use std::net::IpAddr;
use std::time::Duration;

use clap::Args;

/// Arguments of `tcpstall fix`.
#[derive(Args, Debug, Clone)]
pub struct FixArgs {
    /// Process whose TCP sockets get TCP_NODELAY.
    #[arg(required_unless_present = "route")]
    pub pid: Option<u32>,
    /// Apply without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Show what would change and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only sockets whose local or remote port is N.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub port: Option<u16>,
    /// Print JSON (before/after of each socket) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Only the process itself, not its child processes (a master's workers).
    #[arg(long)]
    pub no_tree: bool,
    /// Instead of TCP_NODELAY, cap the delayed ACK of the process's sockets at DURATION
    /// (TCP_DELACK_MAX_US, e.g. 5ms): for the receiving side when the writer cannot be changed.
    /// With --route: the route's delayed ACK capped just under DURATION (its rto_min).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub delack_max: Option<Duration>,
    /// Instead of a process, the host: change the route the kernel uses for DEST (an IP
    /// address), for every connection it carries (with --quickack or --delack-max, or --undo).
    #[arg(long, value_name = "DEST", conflicts_with_all = ["pid", "port", "no_tree"])]
    pub route: Option<IpAddr>,
    /// With --route: quick ACKs on every connection of the route (`quickack 1`).
    #[arg(long, requires = "route", conflicts_with = "delack_max")]
    pub quickack: bool,
    /// Put back what tcpstall changed: the options `fix PID` set on the process's sockets
    /// (kept in /run/tcpstall/fixes/), or with --route the route as it was.
    #[arg(long, conflicts_with_all = ["quickack", "delack_max", "port"])]
    pub undo: bool,
    /// With --route: confirms that the default route may be changed when DEST has no route
    /// of its own (every connection leaving by the default route takes the change).
    #[arg(long, requires = "route")]
    pub default_route: bool,
    /// With --route: the route of network namespace NAME (/run/netns/NAME).
    #[arg(
        long,
        value_name = "NAME",
        requires = "route",
        conflicts_with = "netns_of"
    )]
    pub netns: Option<String>,
    /// With --route: the route of the network namespace of process PID (a container's).
    #[arg(long, value_name = "PID", requires = "route")]
    pub netns_of: Option<u32>,
}

/// `5ms`, `4001us` (or `µs`), `0.008s`: a duration with its unit.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("'{text}' has no unit: write e.g. 5ms, 8000us or 0.01s"))?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a number followed by a unit (e.g. 5ms)"))?;
    let seconds = match unit.trim() {
        "s" => value,
        "ms" => value / 1e3,
        "us" | "µs" => value / 1e6,
        other => return Err(format!("unknown unit '{other}': use s, ms or us")),
    };
    if !(seconds > 0.0 && seconds < 3600.0) {
        return Err(format!(
            "'{text}' is out of range: give a positive duration"
        ));
    }
    Ok(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_need_a_unit() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("4001us"), Ok(Duration::from_micros(4001)));
        assert_eq!(parse_duration("4001µs"), Ok(Duration::from_micros(4001)));
        assert_eq!(parse_duration("0.02s"), Ok(Duration::from_millis(20)));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_duration("5h").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("0ms").is_err());
        assert!(parse_duration("ms").is_err());
    }
}
