//! A route as one line in `ip route`'s words (`local 127.0.0.1 dev lo table local proto kernel
//! scope host src 127.0.0.1 quickack 1`), so that what `fix --route` shows can be compared
//! with `ip route show table all`.

use std::fmt::Write as _;

use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteMetric, RoutePreference, RouteProtocol,
    RouteScope, RouteType,
};

use super::rtnetlink;
use crate::tcp_rules::RTAX_RTO_MIN;

/// The route as one line. Interface names are looked up in the calling thread's namespace,
/// so call it on a thread inside the route's namespace.
pub fn route_line(route: &RouteMessage) -> String {
    let mut line = String::new();
    if !matches!(route.header.kind, RouteType::Unicast | RouteType::Unspec) {
        line.push_str(&lower(&format!("{:?}", route.header.kind)));
        line.push(' ');
    }
    line.push_str(&rtnetlink::destination(route));
    for attr in &route.attributes {
        match attr {
            RouteAttribute::Gateway(address) => push_address(&mut line, "via", address),
            RouteAttribute::Oif(index) => {
                let _ = write!(line, " dev {}", interface_name(*index));
            }
            RouteAttribute::MultiPath(hops) => {
                let _ = write!(line, " ({} next hops)", hops.len());
            }
            _ => {}
        }
    }
    let _ = write!(line, " table {}", table_name(rtnetlink::table(route)));
    let _ = write!(line, " proto {}", protocol_name(route.header.protocol));
    if route.header.scope != RouteScope::Universe {
        let _ = write!(
            line,
            " scope {}",
            lower(&format!("{:?}", route.header.scope))
        );
    }
    for attr in &route.attributes {
        match attr {
            RouteAttribute::PrefSource(address) => push_address(&mut line, "src", address),
            RouteAttribute::Priority(priority) => {
                let _ = write!(line, " metric {priority}");
            }
            _ => {}
        }
    }
    line.push_str(&metrics_text(rtnetlink::metrics(route)));
    for attr in &route.attributes {
        if let RouteAttribute::Preference(preference) = attr {
            let name = match preference {
                RoutePreference::Low => "low",
                RoutePreference::Medium => "medium",
                RoutePreference::High => "high",
                _ => "?",
            };
            let _ = write!(line, " pref {name}");
        }
    }
    line
}

/// The metrics as `ip route` writes them (` quickack 1 rto_min lock 5ms`), each with a leading
/// space; empty for none.
pub fn metrics_text(metrics: &[RouteMetric]) -> String {
    let locked = metrics
        .iter()
        .find_map(|m| match m {
            RouteMetric::Lock(bits) => Some(*bits),
            _ => None,
        })
        .unwrap_or(0);
    let lock = |bit: u16| {
        if locked & (1 << bit) != 0 {
            "lock "
        } else {
            ""
        }
    };
    let mut text = String::new();
    for metric in metrics {
        match metric {
            RouteMetric::Lock(_) => {}
            RouteMetric::QuickAck(value) => {
                let _ = write!(text, " quickack {value}");
            }
            RouteMetric::RtoMin(ms) => {
                let _ = write!(text, " rto_min {}{ms}ms", lock(RTAX_RTO_MIN));
            }
            other => {
                let _ = write!(
                    text,
                    " {}",
                    lower(&format!("{other:?}")).replace(['(', ')'], " ")
                );
            }
        }
    }
    text.trim_end().to_string()
}

fn push_address(line: &mut String, word: &str, address: &RouteAddress) {
    match address {
        RouteAddress::Inet(a) => {
            let _ = write!(line, " {word} {a}");
        }
        RouteAddress::Inet6(a) => {
            let _ = write!(line, " {word} {a}");
        }
        _ => {}
    }
}

/// `ip route`'s names of the reserved tables (`/etc/iproute2/rt_tables`).
fn table_name(table: u32) -> String {
    match table {
        255 => "local".into(),
        254 => "main".into(),
        253 => "default".into(),
        other => other.to_string(),
    }
}

fn protocol_name(protocol: RouteProtocol) -> String {
    match protocol {
        RouteProtocol::Other(number) => number.to_string(),
        RouteProtocol::Unspec => "unspec".into(),
        other => lower(&format!("{other:?}")),
    }
}

fn interface_name(index: u32) -> String {
    nix::net::if_::if_indextoname(index)
        .ok()
        .and_then(|name| name.into_string().ok())
        .unwrap_or_else(|| format!("if{index}"))
}

fn lower(text: &str) -> String {
    text.to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_as_ip_route_writes_them() {
        let metrics = [
            RouteMetric::Lock(1 << RTAX_RTO_MIN),
            RouteMetric::RtoMin(5),
            RouteMetric::QuickAck(1),
        ];
        assert_eq!(metrics_text(&metrics), " rto_min lock 5ms quickack 1");
        assert_eq!(metrics_text(&[]), "");
        assert_eq!(table_name(100), "100");
    }
}
