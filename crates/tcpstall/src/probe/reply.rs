//! The answer a request waits for, and whether the bytes read so far hold all of it. Each
//! protocol's parser lives in its own file; this is what the request loop asks.

use super::{http, line, memcached, redis};

/// How far the bytes read so far go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed.
    Incomplete,
    /// A whole answer of `len` bytes; `close` when the server said it closes the connection
    /// after it (HTTP `Connection: close`).
    Complete {
        /// Bytes of the answer.
        len: usize,
        /// The server closes after this answer.
        close: bool,
    },
    /// The answer ends when the server closes the connection (HTTP without a length).
    UntilClose,
}

/// Why the bytes read are no reply the request can take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyError {
    /// Not the protocol's reply: what was wrong with it.
    Malformed(String),
    /// The server's own error reply (redis `-ERR`, memcached `SERVER_ERROR`): what it means,
    /// the server's words quoted, and what to do.
    Refused(String),
}

impl ReplyError {
    /// The error as the report's line says it.
    pub fn describe(&self) -> String {
        match self {
            ReplyError::Malformed(why) => format!("malformed reply: {why}"),
            ReplyError::Refused(why) => why.clone(),
        }
    }
}

impl From<String> for ReplyError {
    fn from(why: String) -> ReplyError {
        ReplyError::Malformed(why)
    }
}

/// What a reply must look like (each variant parsed by its protocol's file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP/1.x response; `head` when the request was HEAD (no body follows).
    Http {
        /// The request was HEAD.
        head: bool,
    },
    /// memcached's `STORED` after a `set`.
    MemcachedStored,
    /// memcached's `VALUE … END` after a `get` of one key.
    MemcachedValue,
    /// RESP `+OK` (redis `AUTH`, `SELECT`, `SET`).
    RedisOk(redis::Step),
    /// A RESP bulk string (redis `GET`).
    RedisBulk(redis::Step),
    /// Everything up to and including these bytes (a line protocol).
    Until(Vec<u8>),
    /// `count` replies of one kind, one after the other: the answers to a pipelined batch.
    Pipelined {
        /// Each reply.
        each: Box<Reply>,
        /// How many.
        count: usize,
    },
}

impl Reply {
    /// Judges `buf`, the bytes read since the request: complete, incomplete, or an error
    /// saying what was wrong with it.
    pub fn parse(&self, buf: &[u8]) -> Result<Parsed, ReplyError> {
        match self {
            Reply::Http { head } => Ok(http::parse_response(buf, *head)?),
            Reply::MemcachedStored => memcached::parse_stored(buf),
            Reply::MemcachedValue => Ok(memcached::parse_value(buf)?),
            Reply::RedisOk(step) => redis::parse_ok(buf, step),
            Reply::RedisBulk(step) => redis::parse_bulk(buf, step),
            Reply::Until(end) => Ok(line::parse_until(buf, end)),
            Reply::Pipelined { each, count } => {
                let mut at = 0;
                for i in 0..*count {
                    match each.parse(&buf[at..])? {
                        Parsed::Complete { close: true, .. } if i + 1 < *count => {
                            return Err(ReplyError::Malformed(format!(
                                "the server closes the connection after answer {} of a \
                                 pipelined batch of {count}",
                                i + 1
                            )));
                        }
                        Parsed::Complete { len, close } if i + 1 == *count => {
                            return Ok(Parsed::Complete {
                                len: at + len,
                                close,
                            });
                        }
                        Parsed::Complete { len, .. } => at += len,
                        Parsed::Incomplete => return Ok(Parsed::Incomplete),
                        Parsed::UntilClose => {
                            return Err(ReplyError::Malformed(
                                "an answer that ends when the server closes the connection \
                                 (no length) cannot be pipelined"
                                    .to_string(),
                            ))
                        }
                    }
                }
                Ok(Parsed::Incomplete)
            }
        }
    }
}

/// A server's error line, quoted whole (up to a bound; control bytes escaped): its words
/// are the news.
pub fn quoted(line: &[u8]) -> String {
    const SHOWN: usize = 200;
    let shown = format!(
        "{:?}",
        String::from_utf8_lossy(&line[..line.len().min(SHOWN)])
    );
    if line.len() > SHOWN {
        format!("{}…\"", &shown[..shown.len() - 1])
    } else {
        shown
    }
}

/// The first bytes of `buf`, escaped, for error messages.
pub fn excerpt(buf: &[u8]) -> String {
    const SHOWN: usize = 48;
    let shown: String = buf[..buf.len().min(SHOWN)].escape_ascii().to_string();
    if buf.len() > SHOWN {
        format!("\"{shown}…\"")
    } else {
        format!("\"{shown}\"")
    }
}

/// A reply whose header (ending at `start`) announced a body of `size` bytes followed by
/// `trailer`: complete once all of it is in `buf`, an error naming `what` and `trailer_name`
/// when something else follows the body.
pub fn sized_body(
    buf: &[u8],
    start: usize,
    size: usize,
    trailer: &[u8],
    what: &str,
    trailer_name: &str,
) -> Result<Parsed, String> {
    let body_end = start + size;
    let total = body_end + trailer.len();
    if buf.len() < total {
        return Ok(Parsed::Incomplete);
    }
    if &buf[body_end..total] != trailer {
        return Err(format!(
            "{what} of {size} B not followed by {trailer_name}: {}",
            excerpt(&buf[body_end..])
        ));
    }
    Ok(Parsed::Complete {
        len: total,
        close: false,
    })
}

/// The position just past the first CRLF of `buf`, if it holds one.
pub fn line_end(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n").map(|i| i + 2)
}
