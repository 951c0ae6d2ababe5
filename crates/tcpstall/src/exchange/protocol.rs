//! What the lab's servers speak (line echo, HTTP/1.1, memcached text, a sink) and the reply to
//! each request in the parts a server writes, cut as the real servers cut them.

use super::framing;

/// memcached 1.4.4 capped the first write of a TCP reply at `UDP_MAX_PAYLOAD_SIZE`.
pub(crate) const MEMCACHED_FIRST_WRITE_CAP: usize = 1400;

/// Bytes of the first write of a `reply_len`-byte memcached reply; the rest is the second.
pub(crate) fn memcached_first_write(reply_len: usize) -> usize {
    reply_len.min(MEMCACHED_FIRST_WRITE_CAP)
}

/// The header block of the lab's HTTP reply for a `body_len`-byte file.
pub fn http_response_head(body_len: usize, close: bool) -> String {
    format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {body_len}\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
}

/// memcached's text-protocol reply to `get k` (flags 0) holding `value`.
pub fn memcached_reply(value: &[u8]) -> Vec<u8> {
    let mut reply = memcached_value_line(value.len()).into_bytes();
    reply.extend_from_slice(value);
    reply.extend_from_slice(MEMCACHED_TRAILER);
    reply
}

/// Bytes of [`memcached_reply`] for a `value_len`-byte value.
pub fn memcached_reply_len(value_len: usize) -> usize {
    memcached_value_line(value_len).len() + value_len + MEMCACHED_TRAILER.len()
}

fn memcached_value_line(value_len: usize) -> String {
    format!("VALUE k 0 {value_len}\r\n")
}

/// What follows the value: its `\r\n` and the end of the reply.
const MEMCACHED_TRAILER: &[u8] = b"\r\nEND\r\n";

/// What the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Reads a line, writes it back.
    Echo,
    /// HTTP/1.1: answers every request with `body_len` bytes, header and body as two parts;
    /// keeps the connection unless the request says `Connection: close`.
    Http {
        /// Size of the file served.
        body_len: usize,
    },
    /// memcached text protocol: answers `get <key>` with a `value_len`-byte value, the reply
    /// cut like memcached 1.4.4's: the first [`MEMCACHED_FIRST_WRITE_CAP`] bytes, then the rest.
    Memcached {
        /// Size of the stored value.
        value_len: usize,
    },
    /// Reads and discards, noting when each `chunk` bytes have arrived (one-way streams).
    Sink {
        /// Size of one write of the sender.
        chunk: usize,
    },
}

/// The reply to one request, in the parts the server writes, and whether the connection
/// closes after it: the echoed line; HTTP's header block and body (closing when the request
/// says `Connection: close`); memcached's reply cut like 1.4.4's. A sink answers nothing.
pub(crate) fn reply_to(protocol: Protocol, request: &[u8]) -> (Vec<Vec<u8>>, bool) {
    match protocol {
        Protocol::Echo => (vec![request.to_vec()], false),
        Protocol::Http { body_len } => {
            let close = framing::header_value(request, "connection")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("close"));
            let head = http_response_head(body_len, close).into_bytes();
            (vec![head, vec![b'x'; body_len]], close)
        }
        Protocol::Memcached { value_len } => {
            let mut first = memcached_reply(&vec![b'v'; value_len]);
            let rest = first.split_off(memcached_first_write(first.len()));
            let parts = if rest.is_empty() {
                vec![first]
            } else {
                vec![first, rest]
            };
            (parts, false)
        }
        Protocol::Sink { .. } => (Vec::new(), false),
    }
}
