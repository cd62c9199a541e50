//! The byte stream under every admin connection: TCP, TLS when asked, a bound
//! on how many bytes one reply can make this process hold, and one budget for
//! the large replies of all connections together ([`LARGE_REPLY_TICKETS`]).
//!
//! A member runs the image its cluster's spec names, which a tenant chooses, so a
//! member may answer `INFO` with `$2000000000\r\n` and then stream bytes for ever.
//! redis-rs keeps every byte of an unfinished reply in its read buffer, and one
//! operator process (128Mi) serves every tenant: without a bound, one tenant could
//! have it OOM-killed. redis 1.8 has no such bound (its `AsyncConnectionConfig`
//! offers timeouts, a concurrency limit and buffer sizes only), and the response
//! timeout does not help: at loopback speed a reply grows by gigabytes within it.
//! So [`Bounded`] (hand-written: a counter around a stream) fails a read once the
//! bytes read since the connection last wrote pass [`MAX_REPLY_BYTES`]; redis-rs
//! then fails the pending commands with that I/O error and drops the buffer.
//!
//! redis-rs builds its TLS stream privately, so wrapping the stream means building
//! the TLS here, the way redis-rs built it for this client before (its
//! `create_rustls_config` with `danger_accept_invalid_hostnames`): trust only the
//! given CA, present the client identity if there is one, and accept a certificate
//! that chains to that CA without naming the IP. rustls has no verifier that skips
//! only the name check, so [`ChainOnly`] (hand-written, after redis-rs's
//! `AcceptInvalidHostnamesCertVerifier`) wraps the standard one.

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::PollSemaphore;

/// The most bytes one reply may make a connection hold (counted from the last
/// request written, so replies to requests sent together share it). The largest
/// replies the admin client asks for are CLUSTER NODES and CLUSTER SHARDS: about
/// 200 KB for 1000 nodes (the most members a cluster may have), a few hundred KB
/// more with fragmented slot ranges; INFO and ACL LIST are a few KB. 4 MiB is ten
/// times that.
pub const MAX_REPLY_BYTES: usize = 4 * 1024 * 1024;

/// What a connection may read since its last request without a ticket of
/// [`LARGE_REPLY_TICKETS`]: every reply of a cluster of up to 1000 members
/// (above), so that no healthy member ever waits for one.
pub const FREE_REPLY_BYTES: usize = 512 * 1024;

/// How many connections of this process may hold more than
/// [`FREE_REPLY_BYTES`] of replies at once (each up to [`MAX_REPLY_BYTES`]).
///
/// The bound of one connection does not bound the sum: a tenant's cluster of
/// many members whose image answers every command with 4 MB would have the
/// operator hold 4 MB (and redis-rs's buffer, the parsed value and the text
/// made of it: four to five times that) per member, all at once. So beyond
/// [`FREE_REPLY_BYTES`] a connection needs one of these tickets, taken whole
/// (a holder never waits for another, so holders cannot wait on each other)
/// and kept until the connection writes its next request or closes, so that
/// what was made of the reply is counted while the caller still holds the
/// connection. A connection without a ticket waits for one (its caller's
/// command timeout bounds the wait). Healthy members never need one; large
/// replies all together make the operator hold at most this many times
/// [`MAX_REPLY_BYTES`] (and its copies) beyond the free part of each.
pub const LARGE_REPLY_TICKETS: usize = 4;

/// The process's tickets (see [`LARGE_REPLY_TICKETS`]).
fn tickets() -> Arc<Semaphore> {
    static TICKETS: LazyLock<Arc<Semaphore>> =
        LazyLock::new(|| Arc::new(Semaphore::new(LARGE_REPLY_TICKETS)));
    TICKETS.clone()
}

/// The most one read takes from the stream (see [`Bounded`]'s `poll_read`).
const READ_CHUNK: usize = 64 * 1024;

/// A stream whose reads fail once more than `limit` bytes arrived since the last
/// write, and that needs a ticket of `tickets` to read more than `free` of them
/// (see [`LARGE_REPLY_TICKETS`]). Once failed, it stays failed: the bytes of the
/// reply are no longer in step with the requests.
pub(crate) struct Bounded<S> {
    inner: S,
    limit: usize,
    free: usize,
    tickets: PollSemaphore,
    ticket: Option<OwnedSemaphorePermit>,
    read_since_write: usize,
    failed: bool,
}

impl<S> Bounded<S> {
    /// Bounded by `limit`, with the process's tickets beyond [`FREE_REPLY_BYTES`].
    pub(crate) fn new(inner: S, limit: usize) -> Bounded<S> {
        Bounded::with_tickets(inner, limit, FREE_REPLY_BYTES, tickets())
    }

    pub(crate) fn with_tickets(
        inner: S,
        limit: usize,
        free: usize,
        tickets: Arc<Semaphore>,
    ) -> Bounded<S> {
        Bounded {
            inner,
            limit,
            free: free.min(limit),
            tickets: PollSemaphore::new(tickets),
            ticket: None,
            read_since_write: 0,
            failed: false,
        }
    }

    fn too_large(&self) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "reply larger than {} bytes: the connection is closed",
                self.limit
            ),
        )
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.failed {
            return Poll::Ready(Err(self.too_large()));
        }
        if self.read_since_write >= self.free && self.ticket.is_none() {
            match self.tickets.poll_acquire(cx) {
                Poll::Ready(Some(ticket)) => self.ticket = Some(ticket),
                Poll::Ready(None) => {
                    return Poll::Ready(Err(io::Error::other("the reply tickets are closed")));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
        // Never read past the bound: a read takes at most what is left of it plus
        // one byte (to tell "at the bound" from "over it"), and without a ticket
        // no more than what is left of the free part, in chunks of at most
        // READ_CHUNK (the chunk is zeroed first, as safe code must).
        let room = if self.ticket.is_some() {
            self.limit.saturating_sub(self.read_since_write) + 1
        } else {
            self.free - self.read_since_write
        };
        let room = room.min(buf.remaining()).min(READ_CHUNK);
        let mut chunk = ReadBuf::new(buf.initialize_unfilled_to(room));
        let result = Pin::new(&mut self.inner).poll_read(cx, &mut chunk);
        let n = chunk.filled().len();
        if let Poll::Ready(Ok(())) = result {
            self.read_since_write += n;
            if self.read_since_write > self.limit {
                self.failed = true;
                return Poll::Ready(Err(self.too_large()));
            }
            buf.advance(n);
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = result
            && n > 0
        {
            self.read_since_write = 0;
            self.ticket = None;
        }
        result
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Plain TCP or TLS over TCP.
pub(crate) enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, data),
            Stream::Tls(s) => Pin::new(s).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// What a TLS connection trusts and presents, PEM.
pub(crate) struct TlsSettings<'a> {
    pub ca_pem: &'a [u8],
    /// Certificate chain and private key.
    pub identity: Option<(&'a [u8], &'a [u8])>,
}

/// Opens TCP to `ip:port`, then TLS when `tls` is given, bounded by [`MAX_REPLY_BYTES`].
/// The caller bounds the time.
pub(crate) async fn open(
    ip: IpAddr,
    port: u16,
    tls: Option<&TlsSettings<'_>>,
) -> Result<Bounded<Stream>, redis::RedisError> {
    let tcp = TcpStream::connect(SocketAddr::new(ip, port)).await?;
    let stream = match tls {
        None => Stream::Plain(tcp),
        Some(tls) => {
            let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(tls)?));
            Stream::Tls(Box::new(
                connector
                    .connect(ServerName::IpAddress(ip.into()), tcp)
                    .await?,
            ))
        }
    };
    Ok(Bounded::new(stream, MAX_REPLY_BYTES))
}

/// [`open`] without the reply bound: for a replication stream, whose snapshot
/// is far larger than any reply and goes on to a sink as it arrives (see
/// `replication`). The caller bounds the time.
pub(crate) async fn open_unbounded(
    ip: IpAddr,
    port: u16,
    tls: Option<&TlsSettings<'_>>,
) -> io::Result<Stream> {
    let tcp = TcpStream::connect(SocketAddr::new(ip, port)).await?;
    Ok(match tls {
        None => Stream::Plain(tcp),
        Some(tls) => {
            let config = client_config(tls).map_err(io::Error::other)?;
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            Stream::Tls(Box::new(
                connector
                    .connect(ServerName::IpAddress(ip.into()), tcp)
                    .await?,
            ))
        }
    })
}

fn invalid_config(what: &'static str, detail: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, what, detail))
}

/// The rustls client configuration: the process's TLS versions and the ring
/// provider's suites (what the operator's redis-rs used), trusting `ca_pem` only.
fn client_config(tls: &TlsSettings<'_>) -> Result<rustls::ClientConfig, redis::RedisError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(tls.ca_pem) {
        let cert = cert.map_err(|e| invalid_config("unable to parse the CA PEM", e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| invalid_config("unable to use the CA certificate", e.to_string()))?;
    }
    let roots = Arc::new(roots);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| invalid_config("unable to build the certificate verifier", e.to_string()))?;
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ChainOnly { inner: verifier }));
    match tls.identity {
        None => Ok(builder.with_no_client_auth()),
        Some((cert_pem, key_pem)) => {
            let chain = CertificateDer::pem_slice_iter(cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| {
                    invalid_config("unable to parse the client certificate PEM", e.to_string())
                })?;
            let key = PrivateKeyDer::from_pem_slice(key_pem)
                .map_err(|e| invalid_config("unable to parse the client key PEM", e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| invalid_config("unable to use the client certificate", e.to_string()))
        }
    }
}

/// Verifies that the server's certificate chains to the CA and is valid, but not
/// that it names the address: members are reached by pod IP, and a certificate
/// issued before its pod had an IP (or a user's that names DNS names only) would
/// otherwise lock the operator out.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
}

fn names_another_host(err: &rustls::Error) -> bool {
    matches!(
        err,
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }
        )
    )
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(e) if names_another_host(&e) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::Bounded;
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};
    use tokio::sync::Semaphore;

    /// Reads until `want` bytes arrived or the read fails.
    async fn read_n<S: tokio::io::AsyncRead + Unpin>(
        s: &mut S,
        want: usize,
    ) -> std::io::Result<usize> {
        let mut buf = vec![0; 4096];
        let mut got = 0;
        while got < want {
            let n = s.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            got += n;
        }
        Ok(got)
    }

    #[tokio::test]
    async fn a_reply_of_exactly_the_bound_is_read() {
        let (mut server, client) = duplex(1 << 16);
        let mut bounded = Bounded::new(client, 1000);
        server.write_all(&[b'x'; 1000]).await.unwrap();
        assert_eq!(read_n(&mut bounded, 1000).await.unwrap(), 1000);
    }

    #[tokio::test]
    async fn a_byte_past_the_bound_fails_the_read_and_every_read_after() {
        let (mut server, client) = duplex(1 << 16);
        let mut bounded = Bounded::new(client, 1000);
        server.write_all(&[b'x'; 1001]).await.unwrap();
        let err = read_n(&mut bounded, 1001).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("larger than 1000 bytes"), "{err}");
        server.write_all(b"more").await.unwrap();
        assert!(read_n(&mut bounded, 1).await.is_err());
    }

    #[tokio::test]
    async fn each_request_written_starts_the_count_again() {
        let (mut server, client) = duplex(1 << 16);
        let mut bounded = Bounded::new(client, 1000);
        for _ in 0..5 {
            bounded.write_all(b"INFO\r\n").await.unwrap();
            server.write_all(&[b'x'; 800]).await.unwrap();
            assert_eq!(read_n(&mut bounded, 800).await.unwrap(), 800);
        }
        // Without a request in between, the next 800 pass the bound.
        server.write_all(&[b'x'; 800]).await.unwrap();
        assert!(read_n(&mut bounded, 800).await.is_err());
    }

    #[tokio::test]
    async fn past_the_free_part_a_read_waits_for_a_ticket_and_a_write_gives_it_back() {
        let tickets = Arc::new(Semaphore::new(1));
        let (mut server_a, a) = duplex(1 << 16);
        let (mut server_b, b) = duplex(1 << 16);
        let mut a = Bounded::with_tickets(a, 1000, 100, tickets.clone());
        let mut b = Bounded::with_tickets(b, 1000, 100, tickets.clone());
        server_a.write_all(&[b'x'; 500]).await.unwrap();
        server_b.write_all(&[b'x'; 500]).await.unwrap();
        // a takes the one ticket and reads its large reply whole.
        assert_eq!(read_n(&mut a, 500).await.unwrap(), 500);
        assert_eq!(tickets.available_permits(), 0);
        // b reads its free part, then waits: no ticket is left.
        assert_eq!(read_n(&mut b, 100).await.unwrap(), 100);
        let waited = tokio::time::timeout(Duration::from_millis(200), read_n(&mut b, 1)).await;
        assert!(
            waited.is_err(),
            "b read past its free part without a ticket"
        );
        // a's next request gives the ticket back (to b, which waits for
        // it), and b reads on.
        a.write_all(b"PING\r\n").await.unwrap();
        assert_eq!(read_n(&mut b, 400).await.unwrap(), 400);
        assert_eq!(tickets.available_permits(), 0);
        // Closing b gives it back too.
        drop(b);
        assert_eq!(tickets.available_permits(), 1);
    }

    #[tokio::test]
    async fn replies_within_the_free_part_never_take_a_ticket() {
        let tickets = Arc::new(Semaphore::new(0));
        let (mut server, client) = duplex(1 << 16);
        let mut bounded = Bounded::with_tickets(client, 1000, 100, tickets);
        for _ in 0..5 {
            bounded.write_all(b"INFO\r\n").await.unwrap();
            server.write_all(&[b'x'; 100]).await.unwrap();
            assert_eq!(read_n(&mut bounded, 100).await.unwrap(), 100);
        }
    }

    #[tokio::test]
    async fn with_a_ticket_the_bound_still_holds() {
        let tickets = Arc::new(Semaphore::new(1));
        let (mut server, client) = duplex(1 << 16);
        let mut bounded = Bounded::with_tickets(client, 1000, 100, tickets.clone());
        server.write_all(&[b'x'; 1001]).await.unwrap();
        let err = read_n(&mut bounded, 1001).await.unwrap_err();
        assert!(err.to_string().contains("larger than 1000 bytes"), "{err}");
        drop(bounded);
        assert_eq!(tickets.available_permits(), 1);
    }
}
