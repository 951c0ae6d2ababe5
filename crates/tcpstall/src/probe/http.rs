//! `http://` and `https://` targets: HTTP/1.1 requests on a kept-alive connection, and the
//! response framing of RFC 9112 §6 (Content-Length, chunked, or until close), parsed with
//! `httparse`.

use base64::Engine as _;

use super::reply::{excerpt, Parsed};
use super::target::Credentials;

/// Largest response head accepted before the reply is called malformed.
const MAX_HEAD: usize = 64 * 1024;
/// Headers read per response.
const MAX_HEADERS: usize = 64;

/// The `Authorization` header's value for the URL's user and password: HTTP Basic
/// (RFC 7617 §2: base64 of `user:password`; no password is an empty one, as curl sends it).
pub fn basic_authorization(credentials: &Credentials) -> String {
    let mut pair = credentials.user.clone();
    pair.push(b':');
    if let Some(password) = &credentials.password {
        pair.extend_from_slice(password.expose());
    }
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// The writes of one request: the head and the body in one buffer, as a careful client sends
/// them, or in two writes (`split`) as many clients do (head, then body). `authorization`:
/// the `Authorization` header's value, when the URL gives credentials.
pub fn request(
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    authorization: Option<String>,
    body: usize,
    split: bool,
) -> Vec<Vec<u8>> {
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: tcpstall-probe/{}\r\n\
         Accept: */*\r\nConnection: keep-alive\r\n",
        env!("CARGO_PKG_VERSION")
    );
    if let Some(value) = authorization {
        head.push_str(&format!("Authorization: {value}\r\n"));
    }
    if body > 0 || method.eq_ignore_ascii_case("POST") || method.eq_ignore_ascii_case("PUT") {
        head.push_str(&format!(
            "Content-Type: application/octet-stream\r\nContent-Length: {body}\r\n"
        ));
    }
    head.push_str("\r\n");
    let mut head = head.into_bytes();
    let body = vec![b'x'; body];
    if body.is_empty() {
        vec![head]
    } else if split {
        vec![head, body]
    } else {
        head.extend_from_slice(&body);
        vec![head]
    }
}

/// The status code of the response at the start of `buf`, when its head is whole.
pub fn status(buf: &[u8]) -> Option<u16> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(_)) => response.code,
        _ => None,
    }
}

/// The authentication scheme a 401 response at the start of `buf` asks for: the first word
/// of its first `WWW-Authenticate` (RFC 9110 §11.6.1).
pub fn auth_scheme(buf: &[u8]) -> Option<String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(_)) if response.code == Some(401) => {}
        _ => return None,
    }
    let value = response
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("www-authenticate"))?
        .value;
    let scheme = String::from_utf8_lossy(value)
        .split_whitespace()
        .next()?
        .trim_end_matches(',')
        .to_string();
    Some(scheme)
}

/// How the body of a response is delimited (RFC 9112 §6.3).
enum BodyLength {
    None,
    Length(usize),
    Chunked,
    UntilClose,
}

/// Whether `buf` holds a whole response; interim 1xx responses are skipped.
pub fn parse_response(buf: &[u8], head_request: bool) -> Result<Parsed, String> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(format!("response head longer than {MAX_HEAD} B"))
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Incomplete),
        Err(err) => {
            return Err(format!(
                "not an HTTP/1.x response ({err}): {}",
                excerpt(buf)
            ))
        }
    };
    let code = response.code.unwrap_or(0);
    if (100..200).contains(&code) && code != 101 {
        return Ok(match parse_response(&buf[head_len..], head_request)? {
            Parsed::Complete { len, close } => Parsed::Complete {
                len: head_len + len,
                close,
            },
            other => other,
        });
    }
    let header = |name: &str| {
        response
            .headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| String::from_utf8_lossy(h.value).to_ascii_lowercase())
            .collect::<Vec<_>>()
    };
    let connection = header("connection");
    let close = connection.iter().any(|v| v.contains("close"))
        || (response.version == Some(0) && !connection.iter().any(|v| v.contains("keep-alive")));
    let framing = if head_request || code == 204 || code == 304 || code == 101 {
        BodyLength::None
    } else if header("transfer-encoding")
        .iter()
        .any(|v| v.contains("chunked"))
    {
        BodyLength::Chunked
    } else if let Some(value) = header("content-length").first() {
        BodyLength::Length(
            value
                .trim()
                .parse()
                .map_err(|_| format!("bad Content-Length {value:?}"))?,
        )
    } else {
        BodyLength::UntilClose
    };
    let body = &buf[head_len..];
    let body_len = match framing {
        BodyLength::None => Some(0),
        BodyLength::Length(n) => (body.len() >= n).then_some(n),
        BodyLength::Chunked => chunked_len(body)?,
        BodyLength::UntilClose => return Ok(Parsed::UntilClose),
    };
    Ok(match body_len {
        Some(n) => Parsed::Complete {
            len: head_len + n,
            close,
        },
        None => Parsed::Incomplete,
    })
}

/// Length of a complete chunked body at the start of `body` (RFC 9112 §7.1), trailers
/// included, or `None` when more is needed.
fn chunked_len(body: &[u8]) -> Result<Option<usize>, String> {
    let mut pos = 0;
    loop {
        let (size_line, size) = match httparse::parse_chunk_size(&body[pos..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err(format!("bad chunk size line: {}", excerpt(&body[pos..]))),
        };
        pos += size_line;
        if size == 0 {
            // Trailer section: empty (CRLF) or header lines ended by an empty line.
            let rest = &body[pos..];
            if rest.len() < 2 {
                return Ok(None);
            }
            if rest.starts_with(b"\r\n") {
                return Ok(Some(pos + 2));
            }
            return Ok(rest
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|at| pos + at + 4));
        }
        let size = usize::try_from(size).map_err(|_| "chunk larger than memory".to_string())?;
        let end = pos.saturating_add(size).saturating_add(2);
        if body.len() < end {
            return Ok(None);
        }
        if &body[end - 2..end] != b"\r\n" {
            return Err(format!("chunk of {size} B not followed by CRLF"));
        }
        pos = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(len: usize, close: bool) -> Result<Parsed, String> {
        Ok(Parsed::Complete { len, close })
    }

    #[test]
    fn requests_in_one_or_two_writes() {
        let one = request("GET", "127.0.0.1", 80, "/", None, 0, false);
        assert_eq!(one.len(), 1);
        assert!(one[0].starts_with(b"GET / HTTP/1.1\r\nHost: 127.0.0.1:80\r\n"));
        let two = request("POST", "::1", 8080, "/x", None, 10, true);
        assert_eq!(two.len(), 2);
        assert_eq!(two[1].len(), 10);
        assert!(String::from_utf8_lossy(&two[0]).contains("Host: [::1]:8080\r\n"));
        assert!(String::from_utf8_lossy(&two[0]).contains("Content-Length: 10\r\n"));
        assert_eq!(request("POST", "h", 1, "/", None, 10, false).len(), 1);
    }

    #[test]
    fn framings() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(parse_response(r, false), complete(r.len(), false));
        assert_eq!(
            parse_response(&r[..r.len() - 1], false),
            Ok(Parsed::Incomplete)
        );
        assert_eq!(parse_response(&r[..10], false), Ok(Parsed::Incomplete));
        let c = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(parse_response(c, false), complete(c.len(), false));
        assert_eq!(
            parse_response(&c[..c.len() - 2], false),
            Ok(Parsed::Incomplete)
        );
        let closing = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(
            parse_response(closing, false),
            complete(closing.len(), true)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\n\r\nabc", false),
            Ok(Parsed::UntilClose)
        );
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n";
        assert_eq!(parse_response(head, true), complete(head.len(), false));
        let interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(
            parse_response(interim, false),
            complete(interim.len(), false)
        );
    }

    #[test]
    fn status_codes() {
        assert_eq!(status(b"HTTP/1.1 404 Not Found\r\n\r\n"), Some(404));
        assert_eq!(status(b"HTTP/1.1 404 Not"), None);
        let challenge = b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\n\r\n";
        assert_eq!(auth_scheme(challenge).as_deref(), Some("Basic"));
        assert_eq!(auth_scheme(b"HTTP/1.1 401 Unauthorized\r\n\r\n"), None);
        assert_eq!(
            auth_scheme(b"HTTP/1.1 200 OK\r\nWWW-Authenticate: Basic\r\n\r\n"),
            None
        );
    }

    #[test]
    fn malformed() {
        assert!(parse_response(b"SSH-2.0-OpenSSH\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", false).is_err());
        let bad_chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
        assert!(parse_response(bad_chunk, false).is_err());
    }
}
