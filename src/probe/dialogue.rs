//! What the probe says to each kind of target: an optional setup exchange per connection
//! (memcached `set`, redis `SET`) and the request it repeats, each as the writes a typical
//! client makes, with the reply it waits for.

use anyhow::bail;

use super::reply::Reply;
use super::target::{Protocol, Target};
use super::{http, memcached, redis};

/// One request and the reply that ends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exchange {
    /// The application's writes, in order (each one `write` call).
    pub writes: Vec<Vec<u8>>,
    /// What the reply must look like.
    pub reply: Reply,
}

/// The conversation with a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dialogue {
    /// Sent once on every new connection before the timed requests.
    pub setup: Option<Exchange>,
    /// The timed request.
    pub request: Exchange,
}

/// The user's choices that shape the requests.
#[derive(Debug, Clone, Default)]
pub struct Shape {
    /// HTTP method.
    pub method: String,
    /// HTTP request body bytes.
    pub body_size: usize,
    /// HTTP: write the request head and body in two calls.
    pub split_request: bool,
    /// memcached/redis value bytes.
    pub value_size: usize,
    /// Line protocol: the request bytes.
    pub send: Option<Vec<u8>>,
    /// Line protocol: the bytes that end a reply.
    pub until: Option<Vec<u8>>,
    /// Requests written back to back, each its own write calls, before the replies are read.
    pub pipeline: usize,
}

/// The dialogue for `target`: with `shape.pipeline` above 1, each timed exchange is a batch of
/// that many requests, written one after the other as a pipelining client does, and their
/// replies read after.
pub fn build(target: &Target, shape: &Shape) -> anyhow::Result<Dialogue> {
    let mut dialogue = single(target, shape)?;
    if shape.pipeline > 1 {
        let one = dialogue.request;
        dialogue.request = Exchange {
            writes: (0..shape.pipeline)
                .flat_map(|_| one.writes.clone())
                .collect(),
            reply: Reply::Pipelined {
                each: Box::new(one.reply),
                count: shape.pipeline,
            },
        };
    }
    Ok(dialogue)
}

/// The dialogue for `target`, one request at a time.
fn single(target: &Target, shape: &Shape) -> anyhow::Result<Dialogue> {
    let value = || vec![b'v'; shape.value_size];
    Ok(match target.protocol {
        Protocol::Http | Protocol::Https => {
            let method = shape.method.to_ascii_uppercase();
            if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                bail!(
                    "--method {:?} is not an HTTP method (GET, POST, HEAD, ...)",
                    shape.method
                );
            }
            Dialogue {
                setup: None,
                request: Exchange {
                    writes: http::request(
                        &method,
                        &target.host,
                        target.port,
                        &target.path,
                        shape.body_size,
                        shape.split_request,
                    ),
                    reply: Reply::Http {
                        head: method == "HEAD",
                    },
                },
            }
        }
        Protocol::Memcached => Dialogue {
            setup: Some(Exchange {
                writes: vec![memcached::set_command(&value())],
                reply: Reply::MemcachedStored,
            }),
            request: Exchange {
                writes: vec![memcached::get_command()],
                reply: Reply::MemcachedValue,
            },
        },
        Protocol::Redis => Dialogue {
            setup: Some(Exchange {
                writes: vec![redis::set_command(&value())],
                reply: Reply::RedisOk,
            }),
            request: Exchange {
                writes: vec![redis::get_command()],
                reply: Reply::RedisBulk,
            },
        },
        Protocol::Line => {
            let (Some(send), Some(until)) = (&shape.send, &shape.until) else {
                bail!(
                    "tcp:// targets need --send TEXT and --until TEXT (escapes \\r \\n \\xHH), e.g. \
                     --send 'PING\\r\\n' --until '\\r\\n'"
                );
            };
            if send.is_empty() {
                bail!("--send is empty: a request needs at least one byte");
            }
            Dialogue {
                setup: None,
                request: Exchange {
                    writes: vec![send.clone()],
                    reply: Reply::Until(until.clone()),
                },
            }
        }
    })
}
