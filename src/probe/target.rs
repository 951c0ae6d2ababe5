//! What `probe` talks to: the URL parsed (by the `url` crate, WHATWG rules) into a protocol,
//! a host, a port and, for HTTP, the request target; and the escapes of `--send`/`--until`.

use anyhow::{anyhow, bail, Context};
use url::Url;

/// The request/response protocol spoken to the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 with keep-alive, in the clear.
    Http,
    /// HTTP/1.1 with keep-alive over TLS.
    Https,
    /// The memcached text protocol: one `set`, then `get`s.
    Memcached,
    /// RESP (redis): one `SET`, then `GET`s.
    Redis,
    /// Any line protocol: `--send` bytes out, read until `--until`.
    Line,
}

impl Protocol {
    /// The URL scheme naming it.
    pub fn scheme(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Https => "https",
            Protocol::Memcached => "memcached",
            Protocol::Redis => "redis",
            Protocol::Line => "tcp",
        }
    }

    /// Whether the bytes travel inside TLS.
    pub fn is_tls(self) -> bool {
        self == Protocol::Https
    }
}

/// A parsed probe target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The protocol.
    pub protocol: Protocol,
    /// Host name or address literal, as written (no brackets around IPv6 literals).
    pub host: String,
    /// TCP port (the scheme's well-known port when the URL gives none).
    pub port: u16,
    /// HTTP request target (path and query); `/` elsewhere.
    pub path: String,
}

impl Target {
    /// The URL as reports show it.
    pub fn display(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match self.protocol {
            Protocol::Http | Protocol::Https => {
                format!(
                    "{}://{host}:{}{}",
                    self.protocol.scheme(),
                    self.port,
                    self.path
                )
            }
            _ => format!("{}://{host}:{}", self.protocol.scheme(), self.port),
        }
    }
}

/// Parses `http://host[:port]/path`, `https://…`, `memcached://host[:port]`,
/// `redis://host[:port]` or `tcp://host:port`.
pub fn parse(text: &str) -> anyhow::Result<Target> {
    let url = Url::parse(text).map_err(|err| {
        anyhow!(
            "cannot read {text:?} as a URL ({err}); write it as http://HOST:PORT/PATH, \
             https://…, memcached://HOST:PORT, redis://HOST:PORT or tcp://HOST:PORT"
        )
    })?;
    let (protocol, default_port) = match url.scheme() {
        "http" => (Protocol::Http, Some(80)),
        "https" => (Protocol::Https, Some(443)),
        "memcached" => (Protocol::Memcached, Some(11211)),
        "redis" => (Protocol::Redis, Some(6379)),
        "tcp" => (Protocol::Line, None),
        other => bail!(
            "unknown scheme {other}:// in {text:?}; probe speaks http, https, memcached, redis \
             and tcp (a line protocol, with --send and --until)"
        ),
    };
    let host = match url.host() {
        Some(url::Host::Ipv6(addr)) => addr.to_string(),
        Some(host) => host.to_string(),
        None => bail!(
            "{text:?} names no host; write it as {}://HOST:PORT",
            url.scheme()
        ),
    };
    let port = url
        .port()
        .or(default_port)
        .with_context(|| format!("{text:?} needs a port: tcp://HOST:PORT"))?;
    if port == 0 {
        bail!("port 0 in {text:?} is not a port a server listens on");
    }
    let path = match protocol {
        Protocol::Http | Protocol::Https => match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        },
        _ => "/".to_string(),
    };
    Ok(Target {
        protocol,
        host,
        port,
        path,
    })
}

/// Turns the escapes of `--send`/`--until` into bytes: `\r`, `\n`, `\t`, `\0`, `\\` and `\xHH`.
pub fn unescape(text: &str) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut utf8 = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            continue;
        }
        match chars.next() {
            Some('r') => out.push(b'\r'),
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                let byte = u8::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| hex.len() == 2)
                    .with_context(|| format!("\\x{hex} in {text:?} needs two hex digits"))?;
                out.push(byte);
            }
            Some(other) => {
                bail!("unknown escape \\{other} in {text:?}; known: \\r \\n \\t \\0 \\\\ \\xHH")
            }
            None => bail!("{text:?} ends in a lone backslash; write \\\\ for one"),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_of_every_scheme() {
        let t = parse("http://127.0.0.1:8080/a/b?x=1").unwrap();
        assert_eq!(
            (t.protocol, t.host.as_str(), t.port, t.path.as_str()),
            (Protocol::Http, "127.0.0.1", 8080, "/a/b?x=1")
        );
        assert_eq!(parse("https://localhost").unwrap().port, 443);
        assert_eq!(parse("memcached://127.0.0.1").unwrap().port, 11211);
        assert_eq!(parse("redis://[::1]:7000").unwrap().host, "::1");
        assert_eq!(
            parse("redis://[::1]:7000").unwrap().display(),
            "redis://[::1]:7000"
        );
        assert_eq!(parse("tcp://127.0.0.1:9").unwrap().protocol, Protocol::Line);
    }

    #[test]
    fn bad_urls_say_what_to_write() {
        let err = |s: &str| format!("{:#}", parse(s).unwrap_err());
        assert!(err("tcp://127.0.0.1").contains("needs a port"));
        assert!(err("ftp://x").contains("unknown scheme"));
        assert!(err("127.0.0.1:80").contains("scheme") || err("127.0.0.1:80").contains("URL"));
        assert!(err("http://127.0.0.1:0/").contains("port 0"));
    }

    #[test]
    fn escapes() {
        assert_eq!(unescape(r"PING\r\n").unwrap(), b"PING\r\n");
        assert_eq!(unescape(r"a\x41\\").unwrap(), b"aA\\");
        assert!(unescape(r"\q").is_err());
        assert!(unescape(r"\x4").is_err());
        assert!(unescape("end\\").is_err());
    }
}
