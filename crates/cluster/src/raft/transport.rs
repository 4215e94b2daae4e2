//! The byte streams under the controller transport: plain TCP, or TLS with client certificates
//! in both directions when the controller listener is `SSL` ([`QuorumTls`]).
//!
//! Both kinds are one [`QuorumStream`], so framing, time-outs and traffic counting are the same
//! code for either. The rustls configs come from the broker through provider functions, asked
//! for every new connection: a rotated key store or trust store applies to the next connection.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How long a TLS handshake may take, either side, before the connection is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected byte stream to or from a peer.
pub(crate) trait ByteStream: AsyncRead + AsyncWrite + Unpin + Send + Sync {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync> ByteStream for T {}

/// A TCP or TLS connection with a peer.
pub(crate) type QuorumStream = Box<dyn ByteStream>;

type ServerConfigs = Arc<dyn Fn() -> Arc<rustls::ServerConfig> + Send + Sync>;
type ClientConfigs = Arc<dyn Fn() -> Arc<rustls::ClientConfig> + Send + Sync>;

/// TLS for the controller quorum: the server config a voter accepts peers with (it must
/// require a client certificate) and the client config it connects to peers with (its
/// certificate as client certificate, the trust store to verify theirs).
#[derive(Clone)]
pub struct QuorumTls {
    server: ServerConfigs,
    client: ClientConfigs,
}

impl QuorumTls {
    /// `server` and `client` are called for each new connection, so they should be cheap (e.g.
    /// clone an `Arc` the broker swaps when files change).
    pub fn new(
        server: impl Fn() -> Arc<rustls::ServerConfig> + Send + Sync + 'static,
        client: impl Fn() -> Arc<rustls::ClientConfig> + Send + Sync + 'static,
    ) -> Self {
        Self {
            server: Arc::new(server),
            client: Arc::new(client),
        }
    }
}

impl std::fmt::Debug for QuorumTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuorumTls")
    }
}

/// Connects to the voter at `addr` (`host:port`), with TLS when `tls` is set: the peer's
/// certificate is verified for `host` (an IP address when `host` is one).
pub(crate) async fn connect(addr: &str, tls: Option<&QuorumTls>) -> std::io::Result<QuorumStream> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let name = server_name(addr)?;
    let connector = tokio_rustls::TlsConnector::from((tls.client)());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, connector.connect(name, tcp)).await {
        Ok(Ok(stream)) => Ok(Box::new(stream)),
        // The caller names `addr` in its error.
        Ok(Err(e)) => Err(std::io::Error::new(e.kind(), format!("TLS handshake: {e}"))),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("TLS handshake took over {HANDSHAKE_TIMEOUT:?}"),
        )),
    }
}

/// Takes an accepted connection, completing the TLS handshake when `tls` is set.
pub(crate) async fn accept(
    tcp: TcpStream,
    tls: Option<&QuorumTls>,
) -> std::io::Result<QuorumStream> {
    tcp.set_nodelay(true)?;
    let Some(tls) = tls else {
        return Ok(Box::new(tcp));
    };
    let acceptor = tokio_rustls::TlsAcceptor::from((tls.server)());
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => Ok(Box::new(stream)),
        Ok(Err(e)) => Err(std::io::Error::new(e.kind(), format!("TLS handshake: {e}"))),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("TLS handshake took over {HANDSHAKE_TIMEOUT:?}"),
        )),
    }
}

/// The name a voter's certificate must hold: the host of its `controller.quorum.voters`
/// address, as an IP address when it is one (`[::1]:9093` included).
pub(crate) fn server_name(addr: &str) -> std::io::Result<ServerName<'static>> {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ServerName::IpAddress(ip.into()));
    }
    ServerName::try_from(host.to_string()).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("`{host}` (of controller address {addr}) is not a TLS server name: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_the_voter_hosts() {
        let ip = |s: &str| ServerName::IpAddress(s.parse::<IpAddr>().unwrap().into());
        assert_eq!(server_name("127.0.0.1:9093").unwrap(), ip("127.0.0.1"));
        assert_eq!(server_name("[::1]:9093").unwrap(), ip("::1"));
        assert_eq!(
            server_name("controller-1.example:9093").unwrap(),
            ServerName::try_from("controller-1.example").unwrap()
        );
        assert!(server_name("bad host:9093").is_err());
    }
}
