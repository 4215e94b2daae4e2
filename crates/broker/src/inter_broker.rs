//! The client one broker uses towards another: a plain connection to a peer's Kafka listener,
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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// A connection to one peer broker.
pub struct Connection {
    stream: TcpStream,
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
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient").finish_non_exhaustive()
    }
}

impl PeerClient {
    pub fn new(metadata: Arc<MetadataStore>, metrics: Arc<Metrics>) -> Self {
        Self { metadata, metrics }
    }

    /// Connects to `peer`'s listener as the current metadata image registers it.
    pub async fn connect(&self, peer: BrokerId, kind: TrafficKind) -> anyhow::Result<Connection> {
        let addr = {
            let image = self.metadata.image();
            let Some(reg) = image.brokers.get(&peer) else {
                anyhow::bail!("broker {peer} is not registered");
            };
            format!("{}:{}", reg.host, reg.port)
        };
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
            .await
            .map_err(|_| anyhow::anyhow!("connect to {addr} timed out"))??;
        let _ = stream.set_nodelay(true);
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
