//! What a row exchanges, each workload described once: the server's protocol, the client's
//! request and how its reply is framed, the message the row is about and how it splits into
//! two writes, and which end writes it. The runner, the expected outcome and the explanation
//! all read these descriptions; none of them matches on the workload.

use super::client::http_get_request;
use crate::exchange::framing::{self, FrameEnd};
use crate::exchange::protocol::{
    http_response_head, memcached_first_write, memcached_reply_len, Protocol,
};
use crate::Side;

/// How the traffic of a row flows.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Exchange {
    /// Request/response turns: the client writes a request and reads the whole reply, which
    /// ends where `reply_end` finds it, before the next request.
    Turns {
        /// Where the reply to one request ends.
        reply_end: FrameEnd,
    },
    /// The client writes, pausing between writes; only ACKs come back.
    OneWay,
    /// Requests in flight: every round, the client writes `depth` requests on each of
    /// `connections` connections (one thread, one poll over all of them), each request its
    /// own part, then reads the replies as they come, each ending where `reply_end` finds it.
    Batches {
        /// Where one reply ends.
        reply_end: FrameEnd,
        /// Requests a connection has in flight per round.
        depth: usize,
        /// Connections the one client thread drives.
        connections: usize,
    },
}

/// One workload.
#[derive(Debug)]
pub(crate) struct Workload {
    /// What the server speaks, for a payload of `size` bytes.
    pub protocol: fn(size: usize) -> Protocol,
    /// Request/response turns or a one-way stream.
    pub exchange: Exchange,
    /// The end that writes the message the row is about, in two parts (the end whose second
    /// write Nagle may hold).
    pub writer: Side,
    /// Bytes of that message's two writes for a `size`-byte payload (a second write of 0:
    /// the message is one write); `close`: the connection closes after this turn.
    pub message: fn(size: usize, close: bool) -> [usize; 2],
    /// Bytes of the turn's other message, sent in one write by the other end (the echoed
    /// line, the HTTP or memcached request); 0 for a one-way stream.
    pub answer: fn(size: usize, close: bool) -> usize,
    /// The request of one turn, in the parts the client writes (the stream: one write);
    /// `host` is the server's address, `close` asks the server to close after replying.
    pub request: fn(size: usize, host: &str, close: bool) -> Vec<Vec<u8>>,
    /// The server closes after its reply when the client asks (HTTP's `Connection: close`):
    /// `tcp_send_fin` pushes what Nagle held (`__tcp_push_pending_frames` with
    /// `TCP_NAGLE_OFF`) together with the FIN, so the held tail costs no extra round trip.
    pub closes_when_asked: bool,
}

impl Workload {
    /// Whether the row is a one-way stream.
    pub fn is_one_way(&self) -> bool {
        matches!(self.exchange, Exchange::OneWay)
    }

    /// Requests in flight per connection and connections per row of a batched exchange.
    pub fn batches(&self) -> Option<(usize, usize)> {
        match self.exchange {
            Exchange::Batches {
                depth, connections, ..
            } => Some((depth, connections)),
            _ => None,
        }
    }
}

/// Line echo: the client writes `hello ` + `world\r\n` (halves of a `size`-byte line), the
/// server writes the line back.
pub(crate) const ECHO: Workload = Workload {
    protocol: |_| Protocol::Echo,
    exchange: Exchange::Turns {
        reply_end: framing::line_end,
    },
    writer: Side::Client,
    message: |size, _| {
        let (head, body) = echo_parts(size);
        [head.len(), body.len()]
    },
    answer: |size, _| size,
    request: |size, _, _| {
        let (head, body) = echo_parts(size);
        vec![head, body]
    },
    closes_when_asked: false,
};

/// HTTP/1.1 GET of a `size`-byte file: the server writes the header block, then the body.
pub(crate) const HTTP: Workload = Workload {
    protocol: |size| Protocol::Http { body_len: size },
    exchange: Exchange::Turns {
        reply_end: framing::http_response_end,
    },
    writer: Side::Server,
    message: |size, close| [http_response_head(size, close).len(), size],
    answer: |_, close| http_get_request(LONGEST_HOST, "/file", close).len(),
    request: |_, host, close| vec![http_get_request(host, "/file", close).into_bytes()],
    closes_when_asked: true,
};

/// memcached `get` of a `size`-byte value: the server cuts its reply like memcached 1.4.4,
/// the first [`crate::exchange::protocol::MEMCACHED_FIRST_WRITE_CAP`] bytes, then the rest.
pub(crate) const MEMCACHED: Workload = Workload {
    protocol: |size| Protocol::Memcached { value_len: size },
    exchange: Exchange::Turns {
        reply_end: framing::memcached_reply_end,
    },
    writer: Side::Server,
    message: |size, _| {
        let reply = memcached_reply_len(size);
        let first = memcached_first_write(reply);
        [first, reply - first]
    },
    answer: |_, _| MEMCACHED_GET.len(),
    request: |_, _, _| vec![MEMCACHED_GET.to_vec()],
    closes_when_asked: false,
};

/// One-way `size`-byte writes of the client, each one write.
pub(crate) const STREAM: Workload = Workload {
    protocol: |size| Protocol::Sink { chunk: size },
    exchange: Exchange::OneWay,
    writer: Side::Client,
    message: |size, _| [size, 0],
    answer: |_, _| 0,
    request: |size, _, _| vec![vec![b's'; size]],
    closes_when_asked: false,
};

/// Requests a pipelined connection has in flight: a redis client's pipeline or a multiplexed
/// connection shared by concurrent callers.
pub(crate) const PIPELINE_DEPTH: usize = 16;

/// Connections one client thread drives in the concurrent scenario, and the requests each
/// has in flight.
pub(crate) const CONCURRENT_CONNECTIONS: usize = 16;
pub(crate) const CONCURRENT_DEPTH: usize = 4;

/// N requests in flight on one connection, each its own write of a `size`-byte inline
/// command; the server answers each line as it reads it (redis-like: small requests, small
/// replies).
pub(crate) const PIPELINE: Workload = Workload {
    protocol: |_| Protocol::Echo,
    exchange: Exchange::Batches {
        reply_end: framing::line_end,
        depth: PIPELINE_DEPTH,
        connections: 1,
    },
    writer: Side::Client,
    message: |size, _| [size, size * (PIPELINE_DEPTH - 1)],
    answer: |size, _| size,
    request: |size, _, _| vec![inline_command(size); PIPELINE_DEPTH],
    closes_when_asked: false,
};

/// M connections, each with a few requests in flight as [`PIPELINE`]'s, driven by one client
/// thread polling all of them.
pub(crate) const CONCURRENT: Workload = Workload {
    exchange: Exchange::Batches {
        reply_end: framing::line_end,
        depth: CONCURRENT_DEPTH,
        connections: CONCURRENT_CONNECTIONS,
    },
    message: |size, _| [size, size * (CONCURRENT_DEPTH - 1)],
    request: |size, _, _| vec![inline_command(size); CONCURRENT_DEPTH],
    ..PIPELINE
};

/// A redis inline command of `size` bytes (`GET kkk…\r\n`; at least `\r\n`).
pub(crate) fn inline_command(size: usize) -> Vec<u8> {
    let mut line: Vec<u8> = b"GET "
        .iter()
        .copied()
        .chain(std::iter::repeat(b'k'))
        .take(size.saturating_sub(2))
        .collect();
    line.extend_from_slice(b"\r\n");
    line
}

/// The memcached request of every turn.
const MEMCACHED_GET: &[u8] = b"get k\r\n";

/// The longest `Host` the lab's HTTP client sends (the emulated path's server address and a
/// five-digit port), for the size of its request.
const LONGEST_HOST: &str = "169.254.77.2:65535";

/// The two parts of the echo line of `size` bytes: for 13, `hello ` and `world\r\n`.
pub(crate) fn echo_parts(size: usize) -> (Vec<u8>, Vec<u8>) {
    let text: Vec<u8> = b"hello world "
        .iter()
        .copied()
        .cycle()
        .take(size.saturating_sub(2))
        .collect();
    let head_len = (size.div_ceil(2))
        .saturating_sub(1)
        .clamp(1, text.len().max(1));
    let mut body = text[head_len.min(text.len())..].to_vec();
    body.extend_from_slice(b"\r\n");
    (text[..head_len.min(text.len())].to_vec(), body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::netns::SERVER_ADDR;

    #[test]
    fn echo_line_of_13_bytes_is_hello_world() {
        let (head, body) = echo_parts(13);
        assert_eq!((&head[..], &body[..]), (&b"hello "[..], &b"world\r\n"[..]));
        let (head, body) = echo_parts(3);
        assert_eq!(head.len() + body.len(), 3);
    }

    #[test]
    fn every_message_is_what_the_client_and_server_write() {
        for size in [3, 13, 200, 1400, 4000] {
            let [head, body] = (ECHO.message)(size, false);
            let request = (ECHO.request)(size, "127.0.0.1:80", false);
            assert_eq!([request[0].len(), request[1].len()], [head, body]);
            let [first, rest] = (MEMCACHED.message)(size, false);
            assert_eq!(first + rest, memcached_reply_len(size));
            let request = (MEMCACHED.request)(size, "127.0.0.1:80", false);
            assert_eq!(request[0].len(), (MEMCACHED.answer)(size, false));
        }
        // The HTTP request is sized for the longest host the lab connects to.
        let host = format!("{SERVER_ADDR}:{}", u16::MAX);
        assert_eq!(host, LONGEST_HOST);
        for close in [false, true] {
            let request = (HTTP.request)(200, &host, close);
            assert_eq!(request[0].len(), (HTTP.answer)(200, close));
        }
    }
}
