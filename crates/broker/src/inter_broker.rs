//! The Fetch client one broker uses towards another: a plain connection to a peer's Kafka
//! listener, one request in flight, each exchange counted in `ferry_inter_broker_bytes_total`
//! under the connection's [`TrafficKind`]. The replica fetcher (as a follower, `replica_id` =
//! this broker) and the remote WAL metadata reader (as a consumer, `replica_id` = -1) share it.
//!
//! A connection whose exchange failed is in an unknown state (a partial frame may be in flight):
//! callers drop it and connect again.

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_cluster::BrokerId;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::broker::Broker;
use crate::metrics::{Metrics, TrafficKind};

/// The Fetch version brokers send: v12 has `last_fetched_epoch` / `diverging_epoch` and
/// `rack_id` (KIP-392), and still names topics (v13+ use topic ids).
pub const FETCH_VERSION: i16 = 12;
/// Largest response frame accepted.
const MAX_RESPONSE: usize = 256 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to one peer broker.
pub struct Connection {
    stream: TcpStream,
    correlation_id: i32,
    peer: BrokerId,
    kind: TrafficKind,
    metrics: std::sync::Arc<Metrics>,
}

impl Connection {
    /// Connects to `peer`'s listener as the current metadata image registers it.
    pub async fn connect(
        broker: &Broker,
        peer: BrokerId,
        kind: TrafficKind,
    ) -> anyhow::Result<Self> {
        let image = broker.metadata.image();
        let Some(reg) = image.brokers.get(&peer) else {
            anyhow::bail!("broker {peer} is not registered");
        };
        let addr = format!("{}:{}", reg.host, reg.port);
        drop(image);
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr))
            .await
            .map_err(|_| anyhow::anyhow!("connect to {addr} timed out"))??;
        let _ = stream.set_nodelay(true);
        Ok(Self {
            stream,
            correlation_id: 0,
            peer,
            kind,
            metrics: broker.metrics.clone(),
        })
    }

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
        self.correlation_id = self.correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Fetch as i16)
            .with_request_api_version(FETCH_VERSION)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_string(client_id.to_string())));
        let header_version = ApiKey::Fetch.request_header_version(FETCH_VERSION);
        let mut body = BytesMut::new();
        header.encode(&mut body, header_version)?;
        request.encode(&mut body, FETCH_VERSION)?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_i32(i32::try_from(body.len())?);
        frame.extend_from_slice(&body);
        self.stream.write_all(&frame).await?;
        let size = self.stream.read_i32().await?;
        let size = usize::try_from(size)?;
        if size == 0 || size > MAX_RESPONSE {
            anyhow::bail!("response frame of {size} bytes");
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
        let header = ResponseHeader::decode(
            &mut buf,
            ApiKey::Fetch.response_header_version(FETCH_VERSION),
        )?;
        if header.correlation_id != self.correlation_id {
            anyhow::bail!(
                "correlation id {} in the response, {} expected",
                header.correlation_id,
                self.correlation_id
            );
        }
        let response = FetchResponse::decode(&mut buf, FETCH_VERSION)?;
        if buf.has_remaining() {
            tracing::debug!(left = buf.remaining(), "bytes left after a fetch response");
        }
        Ok(response)
    }
}
