//! The client one broker uses towards another: a connection to a peer's inter-broker listener
//! (`inter.broker.listener.name`; TLS with this broker's key store as client certificate when
//! that listener is `SSL`),
//! one request in flight, each exchange counted in `ferry_inter_broker_bytes_total` under the
//! connection's [`TrafficKind`]. The replica fetcher (Fetch as a follower, `replica_id` = this
//! broker), the remote WAL metadata reader (Fetch as a consumer, `replica_id` = -1) and the
//! remote WAL metadata publisher (Produce) share it.
//!
//! A connection whose exchange failed is in an unknown state (a partial frame may be in flight):
//! callers drop it and connect again.
//!
//! Connections come from a [`PeerClient`]: where each peer listens (the metadata image) and the
//! metrics to count in, not a whole `Broker`.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_cluster::BrokerId;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use ferry_cluster::metadata_store::MetadataStore;
use ferry_metrics::{Metrics, TrafficKind};

/// The Fetch version brokers send: v12 has `last_fetched_epoch` / `diverging_epoch` and
/// `rack_id` (KIP-392), and still names topics (v13+ use topic ids).
pub const FETCH_VERSION: i16 = 12;
/// The Produce version brokers send (the remote WAL metadata publisher).
pub const PRODUCE_VERSION: i16 = 9;
/// Largest response frame accepted.
const MAX_RESPONSE: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The byte stream of a peer connection: TCP, or TLS over TCP.
trait PeerIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> PeerIo for T {}

/// A connection to one peer broker.
pub struct Connection {
    stream: Box<dyn PeerIo>,
    correlation_id: i32,
    peer: BrokerId,
    kind: TrafficKind,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// Opens connections to peer brokers: their addresses from the metadata image, their traffic
/// counted in the metrics.
#[derive(Clone)]
pub struct PeerClient {
    metadata: Arc<MetadataStore>,
    metrics: Arc<Metrics>,
    /// The listener peers are reached on (`inter.broker.listener.name`).
    listener: Arc<str>,
    /// The TLS client config when that listener is SSL (or SASL_SSL).
    tls: Option<Arc<crate::tls::ClientTls>>,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient").finish_non_exhaustive()
    }
}

impl PeerClient {
    /// Peers are reached on `listener`, over TLS with `tls` when given.
    pub fn new(
        metadata: Arc<MetadataStore>,
        metrics: Arc<Metrics>,
        listener: &str,
        tls: Option<Arc<crate::tls::ClientTls>>,
    ) -> Self {
        Self {
            metadata,
            metrics,
            listener: listener.into(),
            tls,
        }
    }

    /// The TLS client config towards the inter-broker listener, when it uses TLS.
    pub fn tls(&self) -> Option<Arc<crate::tls::ClientTls>> {
        self.tls.clone()
    }

    /// Connects to `peer`'s inter-broker listener as the current metadata image registers it.
    pub async fn connect(&self, peer: BrokerId, kind: TrafficKind) -> anyhow::Result<Connection> {
        let (host, port) = {
            let image = self.metadata.image();
            let Some(reg) = image.brokers.get(&peer) else {
                anyhow::bail!("broker {peer} is not registered");
            };
            let Some((host, port)) = reg.endpoint(&self.listener) else {
                anyhow::bail!(
                    "broker {peer} has no endpoint on the inter-broker listener `{}`",
                    self.listener
                );
            };
            (host.to_string(), port)
        };
        let addr = format!("{host}:{port}");
        let stream: Box<dyn PeerIo> = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let tcp = TcpStream::connect(&addr).await?;
            let _ = tcp.set_nodelay(true);
            let Some(tls) = &self.tls else {
                return Ok::<Box<dyn PeerIo>, anyhow::Error>(Box::new(tcp));
            };
            let name = rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| anyhow::anyhow!("`{host}` is not a TLS server name: {e}"))?;
            let connector = tokio_rustls::TlsConnector::from(tls.current());
            let stream = connector.connect(name, tcp).await?;
            Ok(Box::new(stream))
        })
        .await
        .map_err(|_| anyhow::anyhow!("connect to {addr} timed out"))??;
        Ok(Connection {
            stream,
            correlation_id: 0,
            peer,
            kind,
            metrics: self.metrics.clone(),
        })
    }
}

impl Connection {
    /// The broker this connection leads to.
    pub fn peer(&self) -> BrokerId {
        self.peer
    }

    /// Sends `request` (Fetch v[`FETCH_VERSION`]) and reads its response.
    pub async fn fetch(
        &mut self,
        request: &FetchRequest,
        client_id: &str,
    ) -> anyhow::Result<FetchResponse> {
        self.exchange(ApiKey::Fetch, FETCH_VERSION, request, client_id)
            .await
    }

    /// Sends `request` (Produce v[`PRODUCE_VERSION`]) and reads its response.
    pub async fn produce(
        &mut self,
        request: &ProduceRequest,
        client_id: &str,
    ) -> anyhow::Result<ProduceResponse> {
        self.exchange(ApiKey::Produce, PRODUCE_VERSION, request, client_id)
            .await
    }

    /// Sends `request` (WriteTxnMarkers v1) and reads its response.
    pub async fn write_txn_markers(
        &mut self,
        request: &kafka_protocol::messages::WriteTxnMarkersRequest,
        client_id: &str,
    ) -> anyhow::Result<kafka_protocol::messages::WriteTxnMarkersResponse> {
        self.exchange(ApiKey::WriteTxnMarkers, 1, request, client_id)
            .await
    }

    /// Sends `request` (AddPartitionsToTxn v4, the brokers' batched form) and reads its
    /// response.
    pub async fn add_partitions_to_txn(
        &mut self,
        request: &kafka_protocol::messages::AddPartitionsToTxnRequest,
        client_id: &str,
    ) -> anyhow::Result<kafka_protocol::messages::AddPartitionsToTxnResponse> {
        self.exchange(ApiKey::AddPartitionsToTxn, 4, request, client_id)
            .await
    }

    /// One request and its response, counted under the connection's kind.
    async fn exchange<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        client_id: &str,
    ) -> anyhow::Result<Resp> {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
        let mut body = BytesMut::new();
        header.encode(&mut body, api_key.request_header_version(version))?;
        request.encode(&mut body, version)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(i32::try_from(body.len())?);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)?;
        if size == 0 || size > MAX_RESPONSE {
            anyhow::bail!("{api_key:?} response frame of {size} bytes");
        }
        let mut buf = vec![0u8; size];
        self.stream.read_exact(&mut buf).await?;
        self.metrics.inter_broker(
            self.kind,
            Some(self.peer),
            frame.len() as u64,
            4 + size as u64,
        );
        let mut buf = Bytes::from(buf);
        let header = ResponseHeader::decode(&mut buf, api_key.response_header_version(version))?;
        if header.correlation_id != self.correlation_id {
            anyhow::bail!(
                "correlation id {} in the {api_key:?} response, {} expected",
                header.correlation_id,
                self.correlation_id
            );
        }
        let response = Resp::decode(&mut buf, version)?;
        if buf.has_remaining() {
            tracing::debug!(left = buf.remaining(), api = ?api_key, "bytes left after a response");
        }
        Ok(response)
    }
}
