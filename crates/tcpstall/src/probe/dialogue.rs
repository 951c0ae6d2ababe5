//! What the probe says to each kind of target: the setup exchanges of each connection
//! (memcached `set`; redis `AUTH`, `SELECT`, `SET`) and the request it repeats, each as the
//! writes a typical client makes, with the reply it waits for.

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
    /// Sent on every new connection before the timed requests, one after the other, each
    /// reply awaited before the next: kept out of the verdict, as the TLS handshake is.
    pub setup: Vec<Exchange>,
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
                setup: Vec::new(),
                request: Exchange {
                    writes: http::request(
                        &method,
                        &target.host,
                        target.port,
                        &target.path,
                        target.credentials.as_ref().map(http::basic_authorization),
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
            setup: vec![Exchange {
                writes: vec![memcached::set_command(&value())],
                reply: Reply::MemcachedStored,
            }],
            request: Exchange {
                writes: vec![memcached::get_command()],
                reply: Reply::MemcachedValue,
            },
        },
        Protocol::Redis | Protocol::Rediss => redis_dialogue(target, &value()),
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
                setup: Vec::new(),
                request: Exchange {
                    writes: vec![send.clone()],
                    reply: Reply::Until(until.clone()),
                },
            }
        }
    })
}

/// redis: `AUTH` and `SELECT` when the URL asks for them, then the `SET`, each its own
/// write with its `+OK` awaited, as redis-py and hiredis set up a connection; then `GET`s.
fn redis_dialogue(target: &Target, value: &[u8]) -> Dialogue {
    let step = |command| redis::Step {
        command,
        scheme: target.protocol.scheme(),
        authority: target.authority(),
    };
    let ok = |writes: Vec<u8>, command| Exchange {
        writes: vec![writes],
        reply: Reply::RedisOk(step(command)),
    };
    let mut setup = Vec::new();
    if let Some(c) = &target.credentials {
        if let Some(password) = &c.password {
            setup.push(ok(
                redis::auth_command(&c.user, password.expose()),
                redis::Command::Auth {
                    user: !c.user.is_empty(),
                },
            ));
        }
    }
    if let Some(db) = target.database {
        setup.push(ok(redis::select_command(db), redis::Command::Select(db)));
    }
    setup.push(ok(redis::set_command(value), redis::Command::Set));
    Dialogue {
        setup,
        request: Exchange {
            writes: vec![redis::get_command()],
            reply: Reply::RedisBulk(step(redis::Command::Get)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::target;

    fn shape() -> Shape {
        Shape {
            method: "GET".to_string(),
            value_size: 3,
            pipeline: 1,
            ..Shape::default()
        }
    }

    #[test]
    fn redis_setup_authenticates_and_selects_before_the_set() {
        let target = target::parse("rediss://al:pw@127.0.0.1:6390/3").unwrap();
        let dialogue = build(&target, &shape()).unwrap();
        let first: Vec<&[u8]> = dialogue.setup.iter().map(|e| &e.writes[0][..]).collect();
        assert_eq!(
            first,
            [
                &redis::auth_command(b"al", b"pw")[..],
                &redis::select_command(3)[..],
                &redis::set_command(b"vvv")[..],
            ]
        );
        let plain = target::parse("redis://127.0.0.1").unwrap();
        assert_eq!(build(&plain, &shape()).unwrap().setup.len(), 1);
    }

    #[test]
    fn http_credentials_go_in_a_basic_authorization_header() {
        let target = target::parse("http://al%20x:p%3Aw@127.0.0.1:8080/").unwrap();
        let dialogue = build(&target, &shape()).unwrap();
        let head = String::from_utf8_lossy(&dialogue.request.writes[0]).into_owned();
        // base64("al x:p:w")
        assert!(
            head.contains("\r\nAuthorization: Basic YWwgeDpwOnc=\r\n"),
            "{head}"
        );
        let none = build(&target::parse("http://127.0.0.1/").unwrap(), &shape()).unwrap();
        assert!(!String::from_utf8_lossy(&none.request.writes[0]).contains("Authorization"));
    }
}
