//! `memcached://` targets in the text protocol: one `set` of `--size` bytes per connection,
//! then `get`s of that key, each command written in one call.

use super::reply::{excerpt, line_end, quoted, sized_body, Parsed, ReplyError};

/// The key the probe sets and reads.
pub const KEY: &str = "tcpstall-probe";

/// `set KEY 0 0 N\r\n<value>\r\n`.
pub fn set_command(value: &[u8]) -> Vec<u8> {
    let mut out = format!("set {KEY} 0 0 {}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// `get KEY\r\n`.
pub fn get_command() -> Vec<u8> {
    format!("get {KEY}\r\n").into_bytes()
}

/// `STORED`, or the server's error line.
pub fn parse_stored(buf: &[u8]) -> Result<Parsed, ReplyError> {
    match line_end(buf) {
        None => Ok(Parsed::Incomplete),
        Some(end) if &buf[..end] == b"STORED\r\n" => Ok(Parsed::Complete {
            len: end,
            close: false,
        }),
        Some(end) => {
            let line = &buf[..end - 2];
            // The text protocol's error replies (protocol.txt, "Error strings").
            let refused = ["ERROR", "CLIENT_ERROR", "SERVER_ERROR", "NOT_STORED"]
                .iter()
                .any(|word| line.starts_with(word.as_bytes()));
            Err(if refused {
                ReplyError::Refused(format!(
                    "memcached did not store the probe's value: it answered {}",
                    quoted(line)
                ))
            } else {
                ReplyError::Malformed(format!("not a memcached reply to set: {}", excerpt(line)))
            })
        }
    }
}

/// `VALUE KEY FLAGS BYTES [CAS]\r\n<data>\r\nEND\r\n`; a miss (`END` alone) is an error.
pub fn parse_value(buf: &[u8]) -> Result<Parsed, String> {
    let Some(end) = line_end(buf) else {
        return Ok(Parsed::Incomplete);
    };
    let header = &buf[..end - 2];
    if header == b"END" {
        return Err(format!(
            "memcached has no value under {KEY} (a miss): was it evicted?"
        ));
    }
    let fields: Vec<&[u8]> = header.split(|&b| b == b' ').collect();
    let size = match fields.as_slice() {
        [b"VALUE", _key, _flags, bytes, ..] => std::str::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse::<usize>().ok()),
        _ => None,
    }
    .ok_or_else(|| format!("not a memcached reply to get: {}", excerpt(buf)))?;
    sized_body(buf, end, size, b"\r\nEND\r\n", "memcached value", "END")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_and_replies() {
        assert_eq!(set_command(b"xy"), b"set tcpstall-probe 0 0 2\r\nxy\r\n");
        assert_eq!(parse_stored(b"STOR"), Ok(Parsed::Incomplete));
        assert!(matches!(
            parse_stored(b"SERVER_ERROR out of memory\r\n"),
            Err(ReplyError::Refused(why)) if why.contains("SERVER_ERROR out of memory")
        ));
        let reply = b"VALUE tcpstall-probe 0 2\r\nxy\r\nEND\r\n";
        assert_eq!(
            parse_value(reply),
            Ok(Parsed::Complete {
                len: reply.len(),
                close: false
            })
        );
        assert_eq!(parse_value(&reply[..20]), Ok(Parsed::Incomplete));
        assert!(parse_value(b"END\r\n").unwrap_err().contains("miss"));
        assert!(parse_value(b"VALUE tcpstall-probe 0 2\r\nxyz\r\nEND\r\n").is_err());
        assert!(parse_value(b"garbage\r\n").is_err());
    }
}
