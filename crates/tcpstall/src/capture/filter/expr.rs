//! The part of tcpdump's filter language (pcap-filter(7)) that tcpstall compiles itself, for
//! hosts without libpcap: `host`, `net` (CIDR or `mask`), `port`, `portrange`, each with
//! `src`/`dst`, `tcp`/`udp` before `port`, `ip`, `ip6`, `tcp`, `udp`, `vlan [ID]`, joined by
//! `and`/`&&`, `or`/`||`, `not`/`!` and parentheses, with tcpdump's precedence (`not` binds
//! tightest, `and` and `or` alike, left to right).

use std::net::IpAddr;

/// Which address or port of a packet a primitive looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// The source.
    Src,
    /// The destination.
    Dst,
    /// Either (tcpdump's default, `src or dst`).
    Either,
}

/// A transport protocol named in the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Tcp,
    Udp,
}

impl Transport {
    /// The IP protocol number (IANA).
    pub(crate) fn number(self) -> u8 {
        match self {
            Transport::Tcp => 6,
            Transport::Udp => 17,
        }
    }
}

/// One test on a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Primitive {
    /// `ip`: IPv4.
    Ipv4,
    /// `ip6`: IPv6.
    Ipv6,
    /// `tcp`, `udp`.
    Transport(Transport),
    /// `[src|dst] host ADDR`.
    Host(Direction, IpAddr),
    /// `[src|dst] net ADDR/LEN` (or `net ADDR mask MASK`), as the address and its prefix length.
    Net(Direction, IpAddr, u8),
    /// `[tcp|udp] [src|dst] port N` / `portrange N-M`: ports `first..=last`.
    Port {
        direction: Direction,
        transport: Option<Transport>,
        first: u16,
        last: u16,
    },
    /// `vlan [ID]`: the frame carried an 802.1Q tag (with this VLAN ID).
    Vlan(Option<u16>),
}

/// A filter expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expr {
    Primitive(Primitive),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
}

/// Why an expression is not one the built-in compiler takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Unsupported(pub(crate) String);

/// Parses `text`; `None` for an empty filter.
pub(crate) fn parse(text: &str) -> Result<Option<Expr>, Unsupported> {
    let tokens = tokenize(text)?;
    if tokens.is_empty() {
        return Ok(None);
    }
    let mut parser = Parser { tokens, at: 0 };
    let expr = parser.expression()?;
    match parser.peek() {
        None => Ok(Some(expr)),
        Some(token) => Err(Unsupported(format!("unexpected `{token}`"))),
    }
}

/// Words, parentheses and the operators `!`, `&&`, `||`.
fn tokenize(text: &str) -> Result<Vec<String>, Unsupported> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            c if c.is_whitespace() => {
                chars.next();
            }
            '(' | ')' | '!' => {
                tokens.push(c.to_string());
                chars.next();
            }
            '&' | '|' => {
                chars.next();
                if chars.next() != Some(c) {
                    return Err(Unsupported(format!("`{c}` alone: write `{c}{c}`")));
                }
                tokens.push(format!("{c}{c}"));
            }
            c if c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '/' | '-' | '_') => {
                let mut word = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '/' | '-' | '_') {
                        word.push(c.to_ascii_lowercase());
                        chars.next();
                    } else {
                        break;
                    }
                }
                tokens.push(word);
            }
            other => return Err(Unsupported(format!("the character `{other}`"))),
        }
    }
    Ok(tokens)
}

struct Parser {
    tokens: Vec<String>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.tokens.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Option<String> {
        let token = self.tokens.get(self.at).cloned();
        self.at += 1;
        token
    }

    fn expect_word(&mut self, after: &str) -> Result<String, Unsupported> {
        match self.next() {
            Some(word) if !matches!(word.as_str(), "(" | ")" | "!" | "&&" | "||") => Ok(word),
            _ => Err(Unsupported(format!("`{after}` needs a value after it"))),
        }
    }

    /// tcpdump's `and` and `or` have equal precedence and associate to the left.
    fn expression(&mut self) -> Result<Expr, Unsupported> {
        let mut left = self.unary()?;
        loop {
            match self.peek() {
                Some("and" | "&&") => {
                    self.next();
                    left = Expr::And(Box::new(left), Box::new(self.unary()?));
                }
                Some("or" | "||") => {
                    self.next();
                    left = Expr::Or(Box::new(left), Box::new(self.unary()?));
                }
                _ => return Ok(left),
            }
        }
    }

    fn unary(&mut self) -> Result<Expr, Unsupported> {
        match self.peek() {
            Some("not" | "!") => {
                self.next();
                Ok(Expr::Not(Box::new(self.unary()?)))
            }
            Some("(") => {
                self.next();
                let inner = self.expression()?;
                match self.next().as_deref() {
                    Some(")") => Ok(inner),
                    _ => Err(Unsupported("a `(` without its `)`".into())),
                }
            }
            Some(_) => self.primitive().map(Expr::Primitive),
            None => Err(Unsupported(
                "the filter ends where a test was expected".into(),
            )),
        }
    }

    fn primitive(&mut self) -> Result<Primitive, Unsupported> {
        let first = self.next().unwrap_or_default();
        let transport = match first.as_str() {
            "tcp" => Some(Transport::Tcp),
            "udp" => Some(Transport::Udp),
            _ => None,
        };
        let word = match transport {
            // `tcp` alone, or `tcp [src|dst] port|portrange ...`.
            Some(t) => match self.peek() {
                Some("src" | "dst" | "port" | "portrange") => self.next().unwrap_or_default(),
                _ => return Ok(Primitive::Transport(t)),
            },
            None => first,
        };
        let (direction, word) = match word.as_str() {
            "src" => (Direction::Src, self.expect_word("src")?),
            "dst" => (Direction::Dst, self.expect_word("dst")?),
            _ => (Direction::Either, word),
        };
        if transport.is_some() && !matches!(word.as_str(), "port" | "portrange") {
            return Err(Unsupported(format!(
                "`{word}` after a protocol: only `port` and `portrange` are compiled without \
                 libpcap"
            )));
        }
        match word.as_str() {
            "ip" if direction == Direction::Either => Ok(Primitive::Ipv4),
            "ip6" if direction == Direction::Either => Ok(Primitive::Ipv6),
            "vlan" if direction == Direction::Either => match self.peek() {
                Some(id) if id.bytes().all(|b| b.is_ascii_digit()) => {
                    let id = parse_number(id, 4095, "VLAN ID")?;
                    self.next();
                    Ok(Primitive::Vlan(Some(id)))
                }
                _ => Ok(Primitive::Vlan(None)),
            },
            "host" => {
                let value = self.expect_word("host")?;
                let addr = value.parse::<IpAddr>().map_err(|_| {
                    Unsupported(format!(
                        "host `{value}`: without libpcap a host is an IPv4 or IPv6 address, \
                         not a name"
                    ))
                })?;
                Ok(Primitive::Host(direction, addr))
            }
            "net" => {
                let value = self.expect_word("net")?;
                let (addr, len) = if self.peek() == Some("mask") {
                    self.next();
                    let mask = self.expect_word("mask")?;
                    (parse_addr(&value)?, mask_length(&mask)?)
                } else {
                    parse_network(&value)?
                };
                Ok(Primitive::Net(direction, addr, len))
            }
            "port" => {
                let value = self.expect_word("port")?;
                let port = parse_number(&value, u16::MAX, "port")?;
                Ok(Primitive::Port {
                    direction,
                    transport,
                    first: port,
                    last: port,
                })
            }
            "portrange" => {
                let value = self.expect_word("portrange")?;
                let (a, b) = value
                    .split_once('-')
                    .ok_or_else(|| Unsupported(format!("portrange `{value}`: write N-M")))?;
                let (a, b) = (
                    parse_number(a, u16::MAX, "port")?,
                    parse_number(b, u16::MAX, "port")?,
                );
                Ok(Primitive::Port {
                    direction,
                    transport,
                    first: a.min(b),
                    last: a.max(b),
                })
            }
            other if other.parse::<IpAddr>().is_ok() => Err(Unsupported(format!(
                "`{other}` alone: write `host {other}`"
            ))),
            other => Err(Unsupported(format!("`{other}`"))),
        }
    }
}

fn parse_number(text: &str, max: u16, what: &str) -> Result<u16, Unsupported> {
    text.parse::<u16>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| {
            Unsupported(format!(
                "{what} `{text}`: without libpcap a {what} is a number up to {max}, not a name"
            ))
        })
}

fn parse_addr(text: &str) -> Result<IpAddr, Unsupported> {
    text.parse::<IpAddr>()
        .map_err(|_| Unsupported(format!("`{text}` is not an IPv4 or IPv6 address")))
}

/// `ADDR/LEN`, or an address alone (a whole-length prefix, as tcpdump reads `net 10.1.2.3`;
/// tcpdump's short forms such as `net 10` are left to libpcap).
fn parse_network(text: &str) -> Result<(IpAddr, u8), Unsupported> {
    let (addr, len) = match text.split_once('/') {
        Some((addr, len)) => (parse_addr(addr)?, Some(len)),
        None => (parse_addr(text)?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(len) => len
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= max)
            .ok_or_else(|| Unsupported(format!("net `{text}`: the prefix length is 0 to {max}")))?,
    };
    Ok((addr, len))
}

/// The prefix length of a dotted IPv4 netmask (contiguous ones only).
fn mask_length(text: &str) -> Result<u8, Unsupported> {
    let bad = || {
        Unsupported(format!(
            "mask `{text}`: an IPv4 netmask such as 255.255.0.0"
        ))
    };
    let mask = match parse_addr(text).map_err(|_| bad())? {
        IpAddr::V4(mask) => u32::from(mask),
        IpAddr::V6(_) => return Err(bad()),
    };
    let len = mask.leading_ones();
    if len < 32 && mask << len != 0 {
        return Err(bad());
    }
    Ok(len as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prim(p: Primitive) -> Expr {
        Expr::Primitive(p)
    }

    #[test]
    fn precedence_is_tcpdumps() {
        // `a or b and c` is `(a or b) and c` in pcap-filter(7).
        let parsed = parse("ip or ip6 and tcp").unwrap().unwrap();
        assert_eq!(
            parsed,
            Expr::And(
                Box::new(Expr::Or(
                    Box::new(prim(Primitive::Ipv4)),
                    Box::new(prim(Primitive::Ipv6))
                )),
                Box::new(prim(Primitive::Transport(Transport::Tcp)))
            )
        );
        let parsed = parse("not ip && !(tcp)").unwrap().unwrap();
        assert!(matches!(parsed, Expr::And(a, b)
            if matches!(*a, Expr::Not(_)) && matches!(*b, Expr::Not(_))));
    }

    #[test]
    fn primitives() {
        assert_eq!(
            parse("tcp dst portrange 9000-8000").unwrap(),
            Some(prim(Primitive::Port {
                direction: Direction::Dst,
                transport: Some(Transport::Tcp),
                first: 8000,
                last: 9000
            }))
        );
        assert_eq!(
            parse("net 10.0.0.0 mask 255.255.0.0").unwrap(),
            Some(prim(Primitive::Net(
                Direction::Either,
                "10.0.0.0".parse().unwrap(),
                16
            )))
        );
        assert_eq!(
            parse("src net fd00::/8").unwrap(),
            Some(prim(Primitive::Net(
                Direction::Src,
                "fd00::".parse().unwrap(),
                8
            )))
        );
        assert_eq!(
            parse("vlan 100").unwrap(),
            Some(prim(Primitive::Vlan(Some(100))))
        );
        assert_eq!(parse("  ").unwrap(), None);
    }

    #[test]
    fn what_is_left_to_libpcap_is_named() {
        for (text, says) in [
            ("port http", "not a name"),
            ("host example.org", "not a name"),
            ("ether host 00:11:22:33:44:55", "`ether`"),
            ("tcp[13] & 2 != 0", "character"),
            ("port 80 or", "ends"),
            ("(port 80", "`)`"),
            ("net 10.0.0.0 mask 255.0.255.0", "mask"),
            ("port 70000", "up to 65535"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.0.contains(says), "{text}: {}", err.0);
        }
    }
}
