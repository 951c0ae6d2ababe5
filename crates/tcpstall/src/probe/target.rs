//! What `probe` talks to: the URL parsed (by the `url` crate, WHATWG rules) into a protocol,
//! a host, a port, the credentials of its userinfo (percent-decoded), for HTTP the request
//! target and for redis the database; and the escapes of `--send`/`--until`.
//!
//! The password never leaves this file in a form that prints: [`Secret`] shows `***` to
//! `Debug`, [`Target::display`] writes `***` for it, and [`shown`] masks it in the URL as the
//! user wrote it, for the errors that quote that.

use std::fmt;

use anyhow::{anyhow, bail, Context};
use percent_encoding::percent_decode_str;
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
    /// RESP over TLS (`rediss://`).
    Rediss,
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
            Protocol::Rediss => "rediss",
            Protocol::Line => "tcp",
        }
    }

    /// Whether the bytes travel inside TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Protocol::Https | Protocol::Rediss)
    }

    /// Whether it speaks RESP.
    pub fn is_redis(self) -> bool {
        matches!(self, Protocol::Redis | Protocol::Rediss)
    }
}

/// Bytes that must not be printed: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// The bytes, for the one place that sends them.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// The userinfo of the URL (`USER:PASSWORD@`), percent-decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user name, decoded; empty for a password alone (`:PASSWORD@`).
    pub user: Vec<u8>,
    /// The user name as the URL spells it (percent-encoded), for reports.
    user_in_url: String,
    /// The password, decoded.
    pub password: Option<Secret>,
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
    /// The URL's user and password, when it gives them.
    pub credentials: Option<Credentials>,
    /// redis: the database of the URL's path (`/N`), selected on each connection.
    pub database: Option<u32>,
}

impl Target {
    /// The URL as reports show it: the password written `***`.
    pub fn display(&self) -> String {
        let userinfo = match &self.credentials {
            None => String::new(),
            Some(c) if c.password.is_some() => format!("{}:***@", c.user_in_url),
            Some(c) => format!("{}@", c.user_in_url),
        };
        let base = format!(
            "{}://{userinfo}{}",
            self.protocol.scheme(),
            self.authority()
        );
        match (self.protocol, self.database) {
            (Protocol::Http | Protocol::Https, _) => format!("{base}{}", self.path),
            (_, Some(db)) => format!("{base}/{db}"),
            _ => base,
        }
    }

    /// `HOST:PORT`, an IPv6 literal in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// The URL as the user wrote it, with the password replaced by `***`: for the errors that
/// quote it. A URL the parser cannot read is masked from the first `:` after the scheme to
/// its last `@`: a password may hold any byte the user left unencoded, and masking too much
/// of a URL that is wrong anyway does no harm.
pub fn shown(text: &str) -> String {
    if let Ok(mut url) = Url::parse(text) {
        if url.password().is_some() && url.set_password(Some("***")).is_ok() {
            return url.to_string();
        }
        return text.to_string();
    }
    let Some(scheme_end) = text.find("://").map(|i| i + 3) else {
        return text.to_string();
    };
    let rest = &text[scheme_end..];
    match (rest.find(':'), rest.rfind('@')) {
        (Some(colon), Some(at)) if colon < at => format!(
            "{}{}:***{}",
            &text[..scheme_end],
            &rest[..colon],
            &rest[at..]
        ),
        _ => text.to_string(),
    }
}

/// Parses `http://[USER:PASSWORD@]host[:port]/path`, `https://…`, `memcached://host[:port]`,
/// `redis://[[USER]:PASSWORD@]host[:port][/DB]`, `rediss://…` or `tcp://host:port`.
/// A password given in [`PASSWORD_ENV`] fills the URL's when it gives none.
pub fn parse(text: &str) -> anyhow::Result<Target> {
    let from_env = std::env::var_os(PASSWORD_ENV).map(|v| v.into_encoded_bytes());
    parse_with(text, from_env)
}

/// The environment variable a password can come from instead of the command line, which other
/// local users see in `ps` (as redis-cli's `REDISCLI_AUTH`).
pub const PASSWORD_ENV: &str = "TCPSTALL_PASSWORD";

/// [`parse`], the password of the environment given.
fn parse_with(text: &str, from_env: Option<Vec<u8>>) -> anyhow::Result<Target> {
    let quoted = format!("{:?}", shown(text));
    let url = Url::parse(text).map_err(|err| {
        anyhow!(
            "cannot read {quoted} as a URL ({err}); write it as http://HOST:PORT/PATH, \
             https://…, memcached://HOST:PORT, redis://HOST:PORT, rediss://… or tcp://HOST:PORT"
        )
    })?;
    let (protocol, default_port) = match url.scheme() {
        "http" => (Protocol::Http, Some(80)),
        "https" => (Protocol::Https, Some(443)),
        "memcached" => (Protocol::Memcached, Some(11211)),
        // redis-cli's default for both: a TLS redis listens where its --tls-port says.
        "redis" => (Protocol::Redis, Some(6379)),
        "rediss" => (Protocol::Rediss, Some(6379)),
        "tcp" => (Protocol::Line, None),
        other => bail!(
            "unknown scheme {other}:// in {quoted}; probe speaks http, https, memcached, redis, \
             rediss (redis over TLS) and tcp (a line protocol, with --send and --until)"
        ),
    };
    let host = match url.host() {
        Some(url::Host::Ipv6(addr)) => addr.to_string(),
        Some(host) => host.to_string(),
        None => bail!(
            "{quoted} names no host; write it as {}://HOST:PORT",
            url.scheme()
        ),
    };
    let port = url
        .port()
        .or(default_port)
        .with_context(|| format!("{quoted} needs a port: tcp://HOST:PORT"))?;
    if port == 0 {
        bail!("port 0 in {quoted} is not a port a server listens on");
    }
    let path = match protocol {
        Protocol::Http | Protocol::Https => match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_string(),
        },
        _ => "/".to_string(),
    };
    let credentials = credentials(&url, protocol, &quoted, from_env)?;
    let database = if protocol.is_redis() {
        database(url.path(), &quoted)?
    } else {
        None
    };
    Ok(Target {
        protocol,
        host,
        port,
        path,
        credentials,
        database,
    })
}

/// The userinfo, decoded, where the protocol can send it; `from_env`, a password from
/// [`PASSWORD_ENV`], where the URL gives none: for redis alone or with a user, for HTTP with a
/// user (Basic needs one), never where the protocol sends no credentials.
fn credentials(
    url: &Url,
    protocol: Protocol,
    quoted: &str,
    from_env: Option<Vec<u8>>,
) -> anyhow::Result<Option<Credentials>> {
    let password = url.password();
    let decode = |s: &str| percent_decode_str(s).collect::<Vec<u8>>();
    if let (None, Some(secret)) = (password, from_env) {
        let takes_it = match protocol {
            Protocol::Redis | Protocol::Rediss => true,
            Protocol::Http | Protocol::Https => !url.username().is_empty(),
            Protocol::Memcached | Protocol::Line => false,
        };
        if takes_it {
            return Ok(Some(Credentials {
                user: decode(url.username()),
                user_in_url: url.username().to_string(),
                password: Some(Secret(secret)),
            }));
        }
    }
    if url.username().is_empty() && password.is_none() {
        return Ok(None);
    }
    match protocol {
        Protocol::Memcached => bail!(
            "{quoted} gives credentials, but probe does not speak memcached's SASL \
             authentication (binary protocol only), nor the ASCII authentication of its \
             --auth-file: probe a memcached that takes the text protocol without credentials"
        ),
        Protocol::Line => bail!(
            "{quoted} gives credentials, but tcp:// sends only what --send says: put a login \
             the protocol needs into --send, or drop USER:PASSWORD@ from the URL"
        ),
        Protocol::Redis | Protocol::Rediss if password.is_none() => bail!(
            "{quoted} gives a user but no password: write {0}://:PASSWORD@HOST:PORT for a \
             password alone, or {0}://USER:PASSWORD@HOST:PORT for an ACL user (redis 6+), or \
             set {PASSWORD_ENV}",
            url.scheme()
        ),
        _ => {}
    }
    Ok(Some(Credentials {
        user: decode(url.username()),
        user_in_url: url.username().to_string(),
        password: password.map(|p| Secret(decode(p))),
    }))
}

/// The redis database of the URL's path: none, or `/N` (as redis-cli reads it).
fn database(path: &str, quoted: &str) -> anyhow::Result<Option<u32>> {
    let number = path.trim_start_matches('/');
    if number.is_empty() {
        return Ok(None);
    }
    number.parse().map(Some).map_err(|_| {
        anyhow!(
            "{quoted} names the database {number:?}: redis databases are numbers, \
             redis://HOST:PORT/3"
        )
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
    fn credentials_are_decoded_and_never_shown() {
        let t = parse("redis://:p%40ss@127.0.0.1:6390/3").unwrap();
        let c = t.credentials.as_ref().unwrap();
        assert_eq!(
            (c.user.as_slice(), c.password.as_ref().unwrap().expose()),
            (&b""[..], &b"p@ss"[..])
        );
        assert_eq!(t.database, Some(3));
        assert_eq!(t.display(), "redis://:***@127.0.0.1:6390/3");
        assert!(!format!("{t:?}").contains("p%40ss") && !format!("{t:?}").contains("p@ss"));
        let t = parse("rediss://al%20ice:secret@localhost").unwrap();
        assert_eq!((t.protocol, t.port), (Protocol::Rediss, 6379));
        assert_eq!(t.credentials.as_ref().unwrap().user, b"al ice");
        assert_eq!(t.display(), "rediss://al%20ice:***@localhost:6379");
        let t = parse("http://u:pw@127.0.0.1:8080/x").unwrap();
        assert_eq!(t.display(), "http://u:***@127.0.0.1:8080/x");
        assert_eq!(parse("http://u@h/").unwrap().display(), "http://u@h:80/");
        assert_eq!(parse("redis://h/").unwrap().database, None);
    }

    #[test]
    fn credentials_where_they_cannot_go_say_so() {
        let err = |s: &str| format!("{:#}", parse(s).unwrap_err());
        assert!(err("memcached://u:secret@h").contains("SASL"));
        assert!(!err("memcached://u:secret@h").contains("secret"));
        assert!(err("tcp://u:secret@h:1").contains("--send"));
        assert!(err("redis://secret@h").contains("redis://:PASSWORD@"));
        assert!(err("redis://:secret@h/x").contains("databases are numbers"));
        assert!(!err("redis://:secret@h/x").contains("secret"));
        assert!(!err("redis://:sec ret@h:99999").contains("sec ret"));
    }

    #[test]
    fn a_password_from_the_environment_fills_the_urls() {
        let secret = || Some(b"s3cret".to_vec());
        let password = |t: &Target| {
            t.credentials
                .as_ref()
                .and_then(|c| c.password.as_ref())
                .map(|p| p.expose().to_vec())
        };
        // redis alone or with a user; the URL's own password wins.
        let t = parse_with("redis://127.0.0.1:6390", secret()).unwrap();
        assert_eq!(password(&t), secret());
        assert_eq!(t.display(), "redis://:***@127.0.0.1:6390");
        let t = parse_with("redis://alice@127.0.0.1", secret()).unwrap();
        assert_eq!(password(&t), secret());
        let t = parse_with("redis://:given@127.0.0.1", secret()).unwrap();
        assert_eq!(password(&t), Some(b"given".to_vec()));
        // HTTP Basic needs a user; memcached and tcp:// send none.
        let t = parse_with("http://bob@127.0.0.1:8080/", secret()).unwrap();
        assert_eq!(password(&t), secret());
        assert!(parse_with("http://127.0.0.1:8080/", secret())
            .unwrap()
            .credentials
            .is_none());
        assert!(parse_with("memcached://127.0.0.1", secret())
            .unwrap()
            .credentials
            .is_none());
        assert!(parse_with("tcp://127.0.0.1:7", secret())
            .unwrap()
            .credentials
            .is_none());
    }

    #[test]
    fn shown_masks_the_password() {
        assert_eq!(shown("redis://:pw@h:1/2"), "redis://:***@h:1/2");
        assert_eq!(shown("http://u@h/"), "http://u@h/");
        assert_eq!(shown("http://h/a:b@c"), "http://h/a:b@c");
        assert_eq!(shown("not a url"), "not a url");
        // Unreadable as URLs: a password with an unencoded '#', '/' or bad port.
        assert_eq!(shown("redis://:p#w@h:99999"), "redis://:***@h:99999");
        assert_eq!(shown("redis://:pa/ss@h"), "redis://:***@h");
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
