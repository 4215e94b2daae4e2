//! The client one broker uses towards another: a connection to a peer's inter-broker listener
//! (`inter.broker.listener.name`; TLS with this broker's key store as client certificate when
//! that listener is `SSL`),
//! one request in flight, each exchange counted in `ferry_inter_broker_bytes_total` under the
//! connection's [`TrafficKind`]. The replica fetcher (Fetch as a follower, `replica_id` = this
//! broker), the remote WAL metadata reader (Fetch as a consumer, `replica_id` = -1) and the
//! remote WAL metadata publisher (Produce) share it.
//!
//! On a `SASL_PLAINTEXT` / `SASL_SSL` inter-broker listener each connection logs in first with
//! `sasl.mechanism.inter.broker.protocol` ([`PeerLogin`]), and logs in again in place before the
//! session the peer granted runs out (`connections.max.reauth.ms`, KIP-368), as Kafka clients do.
//!
//! A connection whose exchange failed is in an unknown state (a partial frame may be in flight):
//! callers drop it and connect again.
//!
//! Connections come from a [`PeerClient`]: where each peer listens (the metadata image) and the
//! metrics to count in, not a whole `Broker`.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_auth::{Mechanism, ScramClient, Secret};
use ferry_cluster::BrokerId;
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, RequestHeader,
    ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
    SaslHandshakeResponse,
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
/// The client id of this broker's SASL exchanges with its peers.
const SASL_CLIENT_ID: &str = "ferry-inter-broker";

/// How this broker logs in to its peers on a SASL inter-broker listener.
#[derive(Clone)]
pub struct PeerLogin {
    /// `sasl.mechanism.inter.broker.protocol`.
    pub mechanism: Mechanism,
    /// The `username` / `password` of that mechanism's JAAS text on the inter-broker listener.
    pub username: String,
    pub password: Secret,
}

impl std::fmt::Debug for PeerLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerLogin")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

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
    login: Option<Arc<PeerLogin>>,
    /// When to log in again: before the end of the session the peer granted.
    reauthenticate_at: Option<tokio::time::Instant>,
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
    /// The login when that listener is SASL_PLAINTEXT or SASL_SSL.
    login: Option<Arc<PeerLogin>>,
}

impl std::fmt::Debug for PeerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerClient").finish_non_exhaustive()
    }
}

impl PeerClient {
    /// Peers are reached on `listener`, over TLS with `tls` and logging in with `login` when
    /// given.
    pub fn new(
        metadata: Arc<MetadataStore>,
        metrics: Arc<Metrics>,
        listener: &str,
        tls: Option<Arc<crate::tls::ClientTls>>,
        login: Option<Arc<PeerLogin>>,
    ) -> Self {
        Self {
            metadata,
            metrics,
            listener: listener.into(),
            tls,
            login,
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
        let mut connection = Connection {
            stream,
            correlation_id: 0,
            peer,
            kind,
            metrics: self.metrics.clone(),
            login: self.login.clone(),
            reauthenticate_at: None,
        };
        connection
            .authenticate()
            .await
            .map_err(|e| anyhow::anyhow!("SASL login to broker {peer} at {addr} failed: {e:#}"))?;
        Ok(connection)
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
        self.call(ApiKey::Fetch, FETCH_VERSION, request, client_id)
            .await
    }

    /// Sends `request` (ListOffsets v8, the first with EARLIEST_LOCAL_TIMESTAMP) and reads its
    /// response.
    pub async fn list_offsets(
        &mut self,
        request: &kafka_protocol::messages::ListOffsetsRequest,
        client_id: &str,
    ) -> anyhow::Result<kafka_protocol::messages::ListOffsetsResponse> {
        self.call(ApiKey::ListOffsets, 8, request, client_id).await
    }

    /// Sends `request` (Produce v[`PRODUCE_VERSION`]) and reads its response.
    pub async fn produce(
        &mut self,
        request: &ProduceRequest,
        client_id: &str,
    ) -> anyhow::Result<ProduceResponse> {
        self.call(ApiKey::Produce, PRODUCE_VERSION, request, client_id)
            .await
    }

    /// Sends `request` (WriteTxnMarkers v1) and reads its response.
    pub async fn write_txn_markers(
        &mut self,
        request: &kafka_protocol::messages::WriteTxnMarkersRequest,
        client_id: &str,
    ) -> anyhow::Result<kafka_protocol::messages::WriteTxnMarkersResponse> {
        self.call(ApiKey::WriteTxnMarkers, 1, request, client_id)
            .await
    }

    /// Sends `request` (AddPartitionsToTxn v4, the brokers' batched form) and reads its
    /// response.
    pub async fn add_partitions_to_txn(
        &mut self,
        request: &kafka_protocol::messages::AddPartitionsToTxnRequest,
        client_id: &str,
    ) -> anyhow::Result<kafka_protocol::messages::AddPartitionsToTxnResponse> {
        self.call(ApiKey::AddPartitionsToTxn, 4, request, client_id)
            .await
    }

    /// One request and its response, logging in again first when the session is about to end.
    async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        request: &Req,
        client_id: &str,
    ) -> anyhow::Result<Resp> {
        if self
            .reauthenticate_at
            .is_some_and(|at| tokio::time::Instant::now() >= at)
        {
            self.authenticate()
                .await
                .map_err(|e| anyhow::anyhow!("SASL re-authentication failed: {e:#}"))?;
        }
        self.exchange(api_key, version, request, client_id).await
    }

    /// Logs in with the connection's SASL login, if it has one: SaslHandshake v1, then the
    /// mechanism's SaslAuthenticate v2 exchange.
    async fn authenticate(&mut self) -> anyhow::Result<()> {
        let Some(login) = self.login.clone() else {
            return Ok(());
        };
        let started = tokio::time::Instant::now();
        let handshake = SaslHandshakeRequest::default()
            .with_mechanism(StrBytes::from_static_str(login.mechanism.name()));
        let answer: SaslHandshakeResponse = self
            .exchange(ApiKey::SaslHandshake, 1, &handshake, SASL_CLIENT_ID)
            .await?;
        if answer.error_code != 0 {
            let enabled: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
            anyhow::bail!(
                "SaslHandshake for {}: error {} (the peer enables {})",
                login.mechanism,
                answer.error_code,
                enabled.join(", ")
            );
        }
        let last = match login.mechanism.scram() {
            None => {
                let message = ferry_auth::plain::client_message(&login.username, &login.password);
                self.sasl_step(message).await?
            }
            Some(scram) => {
                let mut client =
                    ScramClient::new(scram, login.username.clone(), login.password.clone());
                let first = self.sasl_step(client.client_first()?).await?;
                let proof = client.handle_server_first(&first.auth_bytes)?;
                let last = self.sasl_step(proof).await?;
                client.handle_server_final(&last.auth_bytes)?;
                last
            }
        };
        // Log in again after 85% of the session, well before the peer closes the connection.
        self.reauthenticate_at = u64::try_from(last.session_lifetime_ms)
            .ok()
            .filter(|ms| *ms > 0)
            .map(|ms| started + Duration::from_millis(ms / 100 * 85));
        Ok(())
    }

    /// One SaslAuthenticate (v2) round trip; an error answer is an error.
    async fn sasl_step(&mut self, auth_bytes: Vec<u8>) -> anyhow::Result<SaslAuthenticateResponse> {
        let request = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(auth_bytes));
        let answer: SaslAuthenticateResponse = self
            .exchange(ApiKey::SaslAuthenticate, 2, &request, SASL_CLIENT_ID)
            .await?;
        if answer.error_code != 0 {
            anyhow::bail!(
                "SaslAuthenticate: error {}: {}",
                answer.error_code,
                answer.error_message.as_deref().unwrap_or("")
            );
        }
        Ok(answer)
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
