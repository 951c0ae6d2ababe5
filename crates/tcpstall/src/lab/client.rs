//! The lab's clients: one TCP connection that times request/response turns, and a keep-alive
//! HTTP/1.1 client built on it that other verbs and tests can point at any loopback server.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};

use crate::exchange::framing::{self, FrameEnd, MessageReader};
use crate::exchange::write::WriteStrategy;
use crate::host::netns::NetNs;
use crate::host::sockopt;

/// How a client connection is set up.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// TCP_MAXSEG before connect, to emulate a smaller MTU on loopback.
    pub mss: Option<u32>,
    /// TCP_NODELAY on the client socket.
    pub nodelay: bool,
    /// Re-arm TCP_QUICKACK after every read (the client-side fix of source document 002).
    pub quickack_rearm: bool,
    /// TCP_DELACK_MAX_US set once on the socket.
    pub delack_max: Option<Duration>,
    /// Bound of each wait: connect, and every read.
    pub timeout: Duration,
    /// The client namespace of an emulated path (`lab --rtt`): sockets are created there and
    /// may connect to the server namespace's address; `None`: loopback only.
    pub namespace: Option<NetNs>,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            mss: None,
            nodelay: false,
            quickack_rearm: false,
            delack_max: None,
            timeout: Duration::from_secs(2),
            namespace: None,
        }
    }
}

/// One client connection to a loopback server.
#[derive(Debug)]
pub(crate) struct Connection {
    stream: TcpStream,
    reader: MessageReader,
    segs_at_start: u32,
}

impl Connection {
    /// Connects to `addr`, which must be a loopback address (the lab sends nothing elsewhere),
    /// or, in an emulated path's namespace, whose only route leads to the server namespace.
    pub fn connect(addr: SocketAddr, config: &ClientConfig) -> io::Result<Connection> {
        if !addr.ip().is_loopback() && config.namespace.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{addr} is not a loopback address; the lab only talks to 127.0.0.0/8 or ::1"
                ),
            ));
        }
        let socket = match &config.namespace {
            Some(ns) => ns.socket(Domain::for_address(addr), Type::STREAM)?,
            None => Socket::new(Domain::for_address(addr), Type::STREAM, None)?,
        };
        if let Some(mss) = config.mss {
            sockopt::set_maxseg(socket.as_fd(), mss)?;
        }
        if config.nodelay {
            sockopt::set_nodelay(socket.as_fd(), true)?;
        }
        if let Some(max) = config.delack_max {
            sockopt::set_delack_max(socket.as_fd(), max)?;
        }
        socket.connect_timeout(&addr.into(), config.timeout)?;
        let stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(config.timeout))?;
        stream.set_write_timeout(Some(config.timeout))?;
        let segs_at_start = sockopt::tcp_info(stream.as_fd())?.data_segs_out;
        Ok(Connection {
            stream,
            reader: MessageReader::new(config.quickack_rearm),
            segs_at_start,
        })
    }

    /// Writes one request made of `parts` with `strategy`, reads the whole reply (as found by
    /// `reply_end`) and returns the time from the first write to the last byte of the reply.
    pub fn round_trip(
        &mut self,
        strategy: WriteStrategy,
        parts: &[&[u8]],
        reply_end: FrameEnd,
    ) -> io::Result<Duration> {
        let start = Instant::now();
        strategy.write_message(&mut self.stream, parts)?;
        match self.reader.read_message(&mut self.stream, reply_end)? {
            Some(_) => Ok(start.elapsed()),
            None => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection before replying",
            )),
        }
    }

    /// Data segments this connection has sent since it was established (`tcpi_data_segs_out`).
    pub fn data_segs_out(&self) -> io::Result<u32> {
        let info = sockopt::tcp_info(self.stream.as_fd())?;
        Ok(info.data_segs_out.wrapping_sub(self.segs_at_start))
    }

    /// The socket, for options and one-way writes.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Waits until everything written has left and been acknowledged (`tcpi_notsent_bytes` and
    /// `tcpi_unacked` both zero), so that segment counts are final; bounded by `limit`.
    pub fn wait_until_acked(&self, limit: Duration) -> io::Result<()> {
        let start = Instant::now();
        loop {
            let info = sockopt::tcp_info(self.stream.as_fd())?;
            if (info.notsent_bytes == 0 && info.unacked == 0) || start.elapsed() > limit {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

impl AsFd for Connection {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// A keep-alive HTTP/1.1 client that times each request against a loopback server.
#[derive(Debug)]
pub struct HttpClient {
    connection: Connection,
    host: String,
}

impl HttpClient {
    /// Connects to `addr` (a loopback address).
    pub fn connect(addr: SocketAddr, config: &ClientConfig) -> io::Result<HttpClient> {
        Ok(HttpClient {
            connection: Connection::connect(addr, config)?,
            host: addr.to_string(),
        })
    }

    /// Sends `GET path` in one write (keep-alive, or `Connection: close` when `close`) and
    /// returns the time until the whole response (headers and `Content-Length` body) is read.
    pub fn get(&mut self, path: &str, close: bool) -> io::Result<Duration> {
        let request = http_get_request(&self.host, path, close);
        self.connection.round_trip(
            WriteStrategy::Single,
            &[request.as_bytes()],
            framing::http_response_end,
        )
    }

    /// Times up to `count` keep-alive GETs of `path`, one after the other, stopping at
    /// `deadline`: what a long-lived service-to-service client sees.
    pub fn time_gets(
        &mut self,
        path: &str,
        count: usize,
        deadline: Instant,
    ) -> io::Result<Vec<Duration>> {
        let mut latencies = Vec::with_capacity(count);
        while latencies.len() < count && Instant::now() < deadline {
            latencies.push(self.get(path, false)?);
        }
        Ok(latencies)
    }

    /// The client's own address, as the server sees it as remote.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.connection.stream.local_addr()
    }
}

/// An HTTP/1.1 GET request without body; `close` asks the server to close after replying.
pub(crate) fn http_get_request(host: &str, path: &str, close: bool) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\n{}\r\n",
        if close { "Connection: close\r\n" } else { "" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_addresses_off_loopback_without_sending() {
        // 192.0.2.0/24 is TEST-NET-1 (RFC 5737): refused before any packet is sent.
        let err = Connection::connect("192.0.2.1:80".parse().unwrap(), &ClientConfig::default())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("loopback"));
    }
}
