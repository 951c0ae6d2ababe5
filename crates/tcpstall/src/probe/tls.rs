//! TLS for `https://` targets, through rustls (ring provider: pure Rust and C without cmake).
//!
//! Certificates are verified against the system's trust store (rustls-native-certs reading
//! /etc/ssl/certs and the like), not a bundled list: the probe is run on a host to meet a
//! server as that host's clients meet it, and a company's internal CA or a TLS-inspecting
//! egress proxy, exactly where this stall is met, is trusted there and in no bundle.
//! `--insecure` accepts any certificate but still checks the handshake's signatures.

use std::io;
use std::sync::Arc;

use anyhow::{anyhow, bail};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
pub use rustls::ClientConfig;
use rustls::{ClientConnection, DigitallySignedStruct, SignatureScheme};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};

use super::socket::ProbeSocket;

/// A TLS connection over the probe's socket.
pub type TlsStream = rustls::StreamOwned<ClientConnection, ProbeSocket>;

/// The client configuration: the system's roots, or none checked with `insecure`.
pub fn client_config(insecure: bool) -> anyhow::Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|err| anyhow!("cannot set up TLS: {err}"))?;
    let config = if insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth()
    } else {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            bail!(
                "no trusted root certificates in the system store ({} errors reading it): \
                 install ca-certificates, or pass --insecure to accept any certificate",
                found.errors.len()
            );
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    Ok(Arc::new(config))
}

/// Runs the TLS handshake with `host` over `socket` (whose deadline bounds each read).
///
/// Each of our flights leaves in one write ([`ProbeSocket`]'s `write_vectored`), and the last
/// one, made when the server's Finished is read, is left queued for [`write_carrying_handshake`]
/// to send with the first request. Sent alone, it would still be unacknowledged when the
/// request follows, and Nagle would hold our own request until the server's delayed ACK of
/// our Finished (a resumed TLS 1.2 session, TLS 1.3 when the server sends no ticket at once):
/// a stall of the probe's making, not the server's.
pub fn handshake(
    config: &Arc<ClientConfig>,
    host: &str,
    mut socket: ProbeSocket,
    insecure: bool,
) -> anyhow::Result<TlsStream> {
    let name = ServerName::try_from(host.to_string())
        .map_err(|err| anyhow!("{host:?} is not a name TLS can verify: {err}"))?;
    let mut conn = ClientConnection::new(config.clone(), name)
        .map_err(|err| anyhow!("cannot start TLS with {host}: {err}"))?;
    // Bounded: every read ends by the socket's deadline, and each turn reads or fails.
    while conn.is_handshaking() {
        if let Err(err) = handshake_step(&mut conn, &mut socket) {
            // The alert rustls queued on a failure tells the server why.
            let _ = conn.write_tls(&mut socket);
            return Err(describe_failure(host, &err, insecure));
        }
    }
    Ok(rustls::StreamOwned::new(conn, socket))
}

/// Sends what the handshake has queued, then reads and processes the server's next records.
fn handshake_step(conn: &mut ClientConnection, socket: &mut ProbeSocket) -> io::Result<()> {
    while conn.wants_write() {
        conn.write_tls(socket)?;
    }
    if !conn.wants_read() {
        return Err(io::Error::other("the TLS handshake stopped wanting data"));
    }
    if conn.read_tls(socket)? == 0 {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    conn.process_new_packets()
        .map(drop)
        .map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
}

/// Writes `buf` as application data together with whatever TLS has queued before it (the
/// handshake's last flight, before the first request), in one write.
pub fn write_carrying_handshake(tls: &mut TlsStream, buf: &[u8]) -> io::Result<usize> {
    use std::io::Write as _;
    // rustls' own stream would send the queued flight first, in a write of its own.
    let n = tls.conn.writer().write(buf)?;
    while tls.conn.wants_write() {
        tls.conn.write_tls(&mut tls.sock)?;
    }
    Ok(n)
}

/// The probe's socket under the TLS connection.
pub fn socket(tls: &mut TlsStream) -> &mut ProbeSocket {
    &mut tls.sock
}

/// Sends TLS close_notify, so that the server sees the session end politely.
pub fn close(tls: &mut TlsStream) {
    tls.conn.send_close_notify();
    let _ = tls.conn.complete_io(&mut tls.sock);
}

/// What went wrong in the handshake, with what to do about a certificate.
fn describe_failure(host: &str, err: &io::Error, insecure: bool) -> anyhow::Error {
    let tls_error = err
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    match tls_error {
        Some(rustls::Error::InvalidCertificate(why)) if !insecure => anyhow!(
            "TLS handshake with {host} failed: the server's certificate is not trusted \
             ({why:?}); for a self-signed or private-CA certificate, pass --insecure"
        ),
        Some(tls) => anyhow!("TLS handshake with {host} failed: {tls}"),
        None if err.kind() == io::ErrorKind::TimedOut => {
            anyhow!("TLS handshake with {host} got no answer before the timeout")
        }
        None if err.kind() == io::ErrorKind::UnexpectedEof => anyhow!(
            "TLS handshake with {host} failed: the server closed the connection (does it speak \
             TLS on this port?)"
        ),
        None => anyhow!("TLS handshake with {host} failed: {err}"),
    }
}

/// `--insecure`: any certificate is taken, signatures of the handshake are still verified
/// with the provider's algorithms.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
