//! Message framing for the lab's protocols (line echo, HTTP/1.1, memcached text) and a reader
//! that can re-arm TCP_QUICKACK after every `read`, as a receiver must to keep ACKing at once
//! (the kernel re-enters ping-pong mode on the next request/response turn).

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsFd;

use crate::host::sockopt;

/// Where a complete message ends in a buffer that starts with it, if it is complete.
pub type FrameEnd = fn(&[u8]) -> Option<usize>;

/// A line ending in `\n` (echo requests and replies, memcached requests).
pub fn line_end(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n').map(|i| i + 1)
}

/// End of an HTTP header block (`\r\n\r\n`): a request without body.
pub fn http_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// End of an HTTP response: header block plus `Content-Length` bytes of body.
pub fn http_response_end(buf: &[u8]) -> Option<usize> {
    let head = http_head_end(buf)?;
    let body = header_value(&buf[..head], "content-length")
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let end = head.checked_add(body)?;
    (buf.len() >= end).then_some(end)
}

/// End of a memcached text-protocol reply to one `get`: `VALUE <key> <flags> <bytes>\r\n`,
/// the data, `\r\n`, then `END\r\n`; or `END\r\n` alone for a miss.
pub fn memcached_reply_end(buf: &[u8]) -> Option<usize> {
    let first = line_end(buf)?;
    if buf.starts_with(b"END\r\n") {
        return Some(first);
    }
    let header = std::str::from_utf8(&buf[..first]).ok()?;
    let bytes: usize = header.split_whitespace().nth(3)?.parse().ok()?;
    let end = first
        .checked_add(bytes)?
        .checked_add(b"\r\nEND\r\n".len())?;
    (buf.len() >= end).then_some(end)
}

/// The value of an HTTP header (case-insensitive name) in a header block.
pub fn header_value<'a>(head: &'a [u8], name: &str) -> Option<&'a str> {
    std::str::from_utf8(head).ok()?.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then_some(value)
    })
}

/// Reads whole messages from a stream, keeping bytes that arrive beyond a message for the
/// next one (pipelined or coalesced data).
#[derive(Debug, Default)]
pub struct MessageReader {
    buf: Vec<u8>,
    /// Set TCP_QUICKACK after every `read`, so that the kernel ACKs at once instead of
    /// delaying (`tcp_cleanup_rbuf` sends the ACK when ping-pong mode is left).
    pub quickack_rearm: bool,
}

impl MessageReader {
    /// A reader; `quickack_rearm` re-arms TCP_QUICKACK after each receive.
    pub fn new(quickack_rearm: bool) -> MessageReader {
        MessageReader {
            buf: Vec::with_capacity(4096),
            quickack_rearm,
        }
    }

    /// Reads until `frame_end` finds a whole message and returns it; `Ok(None)` when the peer
    /// closed cleanly between messages. A read timeout set on the stream bounds each wait.
    pub fn read_message(
        &mut self,
        stream: &mut TcpStream,
        frame_end: FrameEnd,
    ) -> io::Result<Option<Vec<u8>>> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if let Some(end) = frame_end(&self.buf) {
                let rest = self.buf.split_off(end);
                return Ok(Some(std::mem::replace(&mut self.buf, rest)));
            }
            let read = match stream.read(&mut chunk) {
                Ok(read) => read,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            if self.quickack_rearm {
                sockopt::set_quickack(stream.as_fd(), true)?;
            }
            if read == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "peer closed in the middle of a message",
                    ))
                };
            }
            self.buf.extend_from_slice(&chunk[..read]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_find_message_ends() {
        assert_eq!(line_end(b"hello world\r\nx"), Some(13));
        assert_eq!(line_end(b"hello "), None);
        let resp = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcNEXT";
        assert_eq!(http_response_end(resp), Some(resp.len() - 4));
        assert_eq!(http_response_end(&resp[..resp.len() - 5]), None);
        let reply = b"VALUE k 0 2\r\nab\r\nEND\r\n";
        assert_eq!(memcached_reply_end(reply), Some(reply.len()));
        assert_eq!(memcached_reply_end(&reply[..reply.len() - 1]), None);
        assert_eq!(memcached_reply_end(b"END\r\n"), Some(5));
    }
}
