//! TLS where the probe is built without it (macOS: ring's C part needs Apple's SDK, which the
//! build here has not): `https://` and `rediss://` targets are refused with what to do instead.

use std::io;
use std::sync::Arc;

use super::socket::ProbeSocket;

/// No TLS configuration exists here: the type has no value.
pub enum ClientConfig {}

/// No TLS connection exists here: the type has no value.
pub enum TlsStream {}

/// Says that this build has no TLS.
pub fn client_config(_insecure: bool) -> anyhow::Result<Arc<ClientConfig>> {
    anyhow::bail!(
        "this build of tcpstall has no TLS (https://, rediss://): probe the server's plain port \
         (http://, redis://), or run the probe on Linux or Windows"
    )
}

/// Never called: no configuration exists.
pub fn handshake(
    config: &Arc<ClientConfig>,
    _host: &str,
    _socket: ProbeSocket,
    _insecure: bool,
) -> anyhow::Result<TlsStream> {
    match **config {}
}

/// Never called: no connection exists.
pub fn write_carrying_handshake(tls: &mut TlsStream, _buf: &[u8]) -> io::Result<usize> {
    match *tls {}
}

/// Never called: no connection exists.
pub fn socket(tls: &mut TlsStream) -> &mut ProbeSocket {
    match *tls {}
}

/// Never called: no connection exists.
pub fn close(tls: &mut TlsStream) {
    match *tls {}
}

impl io::Read for TlsStream {
    fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        match *self {}
    }
}

impl io::Write for TlsStream {
    fn write(&mut self, _buf: &[u8]) -> io::Result<usize> {
        match *self {}
    }

    fn flush(&mut self) -> io::Result<()> {
        match *self {}
    }
}
