//! `redis://` targets in RESP (the redis serialization protocol): one `SET` of `--size` bytes
//! per connection, then `GET`s of it, each written in one call as redis clients do.

use super::reply::{excerpt, line_end, sized_body, Parsed};

/// The key the probe sets and reads.
pub const KEY: &str = "tcpstall:probe";

/// `SET KEY value` as a RESP array of bulk strings.
pub fn set_command(value: &[u8]) -> Vec<u8> {
    command(&[b"SET", KEY.as_bytes(), value])
}

/// `GET KEY`.
pub fn get_command() -> Vec<u8> {
    command(&[b"GET", KEY.as_bytes()])
}

fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for part in parts {
        out.extend_from_slice(format!("${}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// `+OK`, or the server's error.
pub fn parse_ok(buf: &[u8]) -> Result<Parsed, String> {
    let Some(end) = line_end(buf) else {
        return Ok(Parsed::Incomplete);
    };
    match buf.first() {
        Some(b'+') => Ok(Parsed::Complete {
            len: end,
            close: false,
        }),
        Some(b'-') => Err(format!(
            "redis refused the SET: {}",
            excerpt(&buf[1..end - 2])
        )),
        _ => Err(format!("not a RESP reply to SET: {}", excerpt(buf))),
    }
}

/// A bulk string `$N\r\n…\r\n`; a nil (`$-1`) or an error is an error.
pub fn parse_bulk(buf: &[u8]) -> Result<Parsed, String> {
    let Some(end) = line_end(buf) else {
        return Ok(Parsed::Incomplete);
    };
    match buf.first() {
        Some(b'$') => {}
        Some(b'-') => {
            return Err(format!(
                "redis refused the GET: {}",
                excerpt(&buf[1..end - 2])
            ))
        }
        _ => return Err(format!("not a RESP reply to GET: {}", excerpt(buf))),
    }
    let size: i64 = std::str::from_utf8(&buf[1..end - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad RESP bulk length: {}", excerpt(&buf[..end])))?;
    let size = usize::try_from(size)
        .map_err(|_| format!("redis has no value under {KEY} (nil reply): was it evicted?"))?;
    sized_body(buf, end, size, b"\r\n", "RESP bulk string", "CRLF")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies() {
        assert_eq!(
            get_command(),
            b"*2\r\n$3\r\nGET\r\n$14\r\ntcpstall:probe\r\n"
        );
        assert_eq!(
            parse_ok(b"+OK\r\n"),
            Ok(Parsed::Complete {
                len: 5,
                close: false
            })
        );
        assert!(parse_ok(b"-ERR oom\r\n").unwrap_err().contains("ERR oom"));
        assert_eq!(parse_bulk(b"$3\r\nab"), Ok(Parsed::Incomplete));
        assert_eq!(
            parse_bulk(b"$3\r\nabc\r\n"),
            Ok(Parsed::Complete {
                len: 9,
                close: false
            })
        );
        assert!(parse_bulk(b"$-1\r\n").unwrap_err().contains("nil"));
        assert!(parse_bulk(b"$3\r\nabcXY").is_err());
        assert!(parse_bulk(b"HTTP/1.1 200\r\n").is_err());
    }
}
