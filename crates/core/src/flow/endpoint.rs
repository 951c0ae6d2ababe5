//! A connection's end, and how reports name it (`10.0.0.1:80`, `[::1]:443`).

use std::fmt;
use std::net::IpAddr;

/// One end of a connection.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Endpoint {
    /// IP address.
    pub addr: IpAddr,
    /// TCP port.
    pub port: u16,
}

impl Endpoint {
    /// Appends the endpoint as its `Display` writes it; IPv4 digits through itoa, several times
    /// faster than `core::fmt` for the thousands of flows of a large capture's report.
    pub fn push_to(&self, out: &mut String) {
        let mut digits = itoa::Buffer::new();
        match self.addr {
            IpAddr::V4(a) => {
                for (i, octet) in a.octets().into_iter().enumerate() {
                    if i > 0 {
                        out.push('.');
                    }
                    out.push_str(digits.format(octet));
                }
            }
            IpAddr::V6(a) => {
                use fmt::Write as _;
                // Writing to a String cannot fail.
                let _ = write!(out, "[{a}]");
            }
        }
        out.push(':');
        out.push_str(digits.format(self.port));
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_to_writes_what_display_writes() {
        for text in [
            "0.0.0.0:0",
            "127.0.0.1:8080",
            "255.255.255.255:65535",
            "10.2.0.26:20026",
            "[::1]:443",
            "[::ffff:192.0.2.1]:80",
            "[2001:db8::1:0:0:1]:5",
        ] {
            let addr: std::net::SocketAddr = text.parse().expect("a valid socket address");
            let e = Endpoint {
                addr: addr.ip(),
                port: addr.port(),
            };
            let mut pushed = String::new();
            e.push_to(&mut pushed);
            assert_eq!(pushed, e.to_string());
            assert_eq!(pushed, text);
        }
    }
}
