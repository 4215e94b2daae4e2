//! One client connection: read frames and handle requests in arrival order, and write their
//! responses in that same order from a separate task, so a large response never delays reading
//! the next request.
//!
//! A produce that waits for the in-sync replicas (acks=all) does not hold up the connection: its
//! records are appended in order, its answer is queued as a future, and the next request is
//! read at once. Kafka answers such a producer one request per replication round trip; here a
//! producer's in-flight requests (`max.in.flight.requests.per.connection`) share one. Every
//! other request is handled to completion before the next is read, as in Kafka.
//!
//! A malformed, oversized or unsupported frame closes this connection only, with a log line.
//!
//! On a plaintext listener a consumer Fetch's record sets may stay in their segment files for
//! the writer to send with `sendfile` ([`super::frame_writer`]): all of them with
//! `fetch.sendfile.enable`, otherwise those after the response's first MB. On a TLS
//! listener the handler reads them into memory.
//!
//! On a TLS listener the handshake runs here, in the connection's own task (never in the accept
//! loop), bounded by [`TLS_HANDSHAKE_TIMEOUT`]; the connection then knows its
//! [`ConnectionSecurity`], which every request's context carries. On a SASL listener every
//! request first passes the connection's [`SaslSession`]: until the client has authenticated
//! only ApiVersions and the SASL exchange get through, and frames are limited to
//! `sasl.server.max.receive.size`. The principal (SASL's, a client certificate's mapped by
//! `ssl.principal.mapping.rules`, or `User:ANONYMOUS`) goes into every request's context.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::time::Instant;

use bytes::Bytes;
use ferry_protocol::frame::{read_frame, FrameError};
use ferry_protocol::{
    decode_request, encode_response, encode_response_with_files, null_empty_error_messages,
    DecodeError, DecodedRequest, FileRecords, ResponseFrame,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncRead, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use super::authentication::ListenerAuthentication;
use super::frame_writer::FrameWrite;
use super::log_budget::LogBudget;
use super::sasl::{Gate, RawToken, SaslSession};
use super::throttle::{self, QuotaClient};
use crate::broker::Broker;
use crate::handlers::{self, Handled};
use crate::security::ConnectionSecurity;
use ferry_auth::KafkaPrincipal;
use ferry_authz::AclOperation;
use ferry_metrics::{self as metrics, ApiLabels};
use std::time::Duration;

/// Responses queued for the writer, at most this many: it bounds the produce requests of one
/// connection whose records are appended but whose acks=all answer is still pending (each holds
/// only its small response; the records are in the log). A producer without idempotence may
/// have any number in flight, one per record at linger.ms=0, so this must cover a replication
/// round trip's worth of them (Kafka's broker-wide `queued.max.requests` is 500).
const MAX_QUEUED_RESPONSES: usize = 256;

/// Warnings a client can cause by what it sends (bad frames, undecodable requests): a few per
/// ten seconds for the whole broker, so a hostile client cannot fill the disk with logs. The
/// `malformed_requests` metric still counts every one.
static BAD_INPUT_WARNINGS: LogBudget = LogBudget::new(10, std::time::Duration::from_secs(10));

/// A response frame the writer sends when its turn comes; `Err` closes the connection.
type Outgoing = Pin<Box<dyn Future<Output = Result<Option<ResponseFrame>, ()>> + Send>>;

/// What is needed to frame a request's response and account for it.
struct Answer {
    broker: Arc<Broker>,
    peer: SocketAddr,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    labels: ApiLabels,
    started: Instant,
    client_id: String,
    from_broker: Option<i32>,
    request_bytes: u64,
}

impl Answer {
    /// Frames `body` (`None`: no response, acks=0) and records latency and traffic metrics.
    fn frame(self, body: Option<ResponseKind>) -> Result<Option<ResponseFrame>, ()> {
        self.frame_with_files(body, FileRecords::new())
    }

    /// [`Answer::frame`] for a response whose record sets may be placeholders of `files`.
    fn frame_with_files(
        self,
        body: Option<ResponseKind>,
        files: FileRecords,
    ) -> Result<Option<ResponseFrame>, ()> {
        let broker = &self.broker;
        broker
            .metrics
            .request_latency
            .get_or_create(&self.labels)
            .observe(self.started.elapsed().as_secs_f64());
        let Some(mut body) = body else {
            return Ok(None);
        };
        null_empty_error_messages(&mut body);
        let encoded = encode_response_with_files(
            self.api_key,
            self.version,
            self.correlation_id,
            &body,
            files,
        );
        match encoded {
            Ok(f) => {
                if self.from_broker.is_some() {
                    let kind = metrics::inter_broker_kind(self.api_key, &self.client_id);
                    broker.metrics.inter_broker(
                        kind,
                        self.from_broker,
                        f.len() as u64,
                        self.request_bytes,
                    );
                }
                Ok(Some(f))
            }
            Err(e) => {
                tracing::error!(peer = %self.peer, api = ?self.api_key, version = self.version, error = %e,
                    "cannot encode response; closing connection");
                Err(())
            }
        }
    }
}

/// Longest time a client may take to complete its TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How one listener's connections are served: its TLS config now (`None`: plaintext) and how
/// they authenticate.
pub struct ListenerSetup {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub authentication: ListenerAuthentication,
}

/// Serves one accepted connection on a listener: `security` is what is known before any
/// handshake.
pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    mut security: ConnectionSecurity,
    setup: ListenerSetup,
    stop: watch::Receiver<bool>,
) {
    let ListenerSetup {
        tls,
        authentication,
    } = setup;
    let Some(tls) = tls else {
        let (read_half, write_half) = stream.into_split();
        let io = (read_half, write_half);
        return serve_stream(broker, io, peer, security, authentication, stop).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::info!(%peer, listener = %security.listener, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::info!(%peer, listener = %security.listener, "TLS handshake timed out");
            return;
        }
    };
    security.peer_cert_subject = stream
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first())
        .and_then(|cert| crate::tls::subject::subject_dn(cert));
    let io = tokio::io::split(stream);
    serve_stream(broker, io, peer, security, authentication, stop).await
}

/// Reads requests from the read half of `io` and writes their responses to its write half
/// until either side closes or the broker stops.
async fn serve_stream<R, W>(
    broker: Arc<Broker>,
    (read_half, write_half): (R, W),
    peer: SocketAddr,
    security: ConnectionSecurity,
    authentication: ListenerAuthentication,
    mut stop: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: FrameWrite,
{
    // Who the connection is without SASL; on a SASL listener the session's principal, once
    // there is one, is used instead (`SaslSession::principal`).
    let connection_principal =
        match authentication.principal_without_sasl(security.peer_cert_subject.as_deref()) {
            Ok(p) => p,
            Err(reason) => {
                tracing::info!(%peer, listener = %security.listener, %reason,
                    "closing connection: authentication failed");
                return;
            }
        };
    let mut sasl = match &authentication {
        ListenerAuthentication::Sasl(settings) => Some(SaslSession::new(settings.clone())),
        _ => None,
    };
    broker.metrics.connections.inc();
    let security = Arc::new(security);
    let mut reader = BufReader::with_capacity(256 * 1024, read_half);
    let (tx, rx) = mpsc::channel::<Outgoing>(MAX_QUEUED_RESPONSES);
    let writer = tokio::spawn(write_responses(write_half, rx, broker.clone(), peer));
    let max_request = broker.config.socket_request_max_bytes();
    let idle = broker.config.connections_max_idle();
    loop {
        let max = sasl
            .as_ref()
            .map_or(max_request, |s| s.max_frame(max_request));
        let Some(frame) = next_frame(&broker, &mut reader, max, idle, &mut stop, peer).await else {
            break;
        };
        let request_bytes = frame.len() as u64 + 4;
        broker.metrics.network_bytes_in.inc_by(request_bytes);
        let started = Instant::now();
        if let Some(session) = sasl.as_mut().filter(|s| s.expects_raw_token()) {
            let step = session.raw_token(&frame, started);
            count_login(&broker, &security, session);
            match step {
                RawToken::Reply(token) => {
                    let mut reply = Vec::with_capacity(token.len() + 4);
                    reply.extend_from_slice(&(token.len() as u32).to_be_bytes());
                    reply.extend_from_slice(&token);
                    let reply = ResponseFrame::contiguous(Bytes::from(reply));
                    if tx
                        .send(Box::pin(async move { Ok(Some(reply)) }))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    continue;
                }
                RawToken::Close(reason) => {
                    if let Some(left_out) = BAD_INPUT_WARNINGS.admit(started) {
                        tracing::info!(%peer, listener = %security.listener, %reason,
                            similar_warnings_left_out = left_out,
                            "closing connection: SASL authentication failed");
                    }
                    break;
                }
            }
        }
        let request = match decode_request(frame) {
            Ok(r) => r,
            Err(DecodeError::UnsupportedApiVersionsVersion {
                correlation_id,
                version,
            }) => {
                let Some(outgoing) = api_versions_fallback(peer, correlation_id, version) else {
                    break;
                };
                if tx.send(outgoing).await.is_err() {
                    break;
                }
                continue;
            }
            Err(e) => {
                broker.metrics.malformed_requests.inc();
                if let Some(left_out) = BAD_INPUT_WARNINGS.admit(Instant::now()) {
                    tracing::warn!(%peer, error = %e, similar_warnings_left_out = left_out,
                        "closing connection: request not served");
                }
                break;
            }
        };
        if let Some(session) = sasl.as_mut() {
            let (gate, answer) = sasl_gate(&broker, session, &request, peer, started);
            count_login(&broker, &security, session);
            match gate {
                SaslStep::Pass => {}
                SaslStep::Answered { then_close } => {
                    let sent = match answer {
                        Some(outgoing) => tx.send(outgoing).await.is_ok(),
                        None => false,
                    };
                    if sent && !then_close {
                        continue;
                    }
                    break;
                }
            }
        }
        let principal = sasl
            .as_ref()
            .and_then(SaslSession::principal)
            .unwrap_or(&connection_principal);
        let (outgoing, then_close, throttled) = handle_request(
            &broker,
            request,
            peer,
            &security,
            principal,
            started,
            request_bytes,
            W::SENDS_FILES,
        )
        .await;
        if tx.send(outgoing).await.is_err() || then_close {
            break;
        }
        // KIP-219: the throttled response goes out now; the client's next request waits.
        if !throttled.is_zero() {
            let resume = Instant::now() + throttled;
            tokio::select! {
                _ = tokio::time::sleep_until(resume) => {}
                _ = stop.changed() => break,
            }
        }
    }
    drop(tx);
    let _ = writer.await;
    broker.metrics.connections.dec();
}

/// The writer task: sends each queued response when it is ready, in queue order, until the
/// queue closes, a response cannot be framed or sent (a file piece that came up short is
/// logged), or the client stops reading.
async fn write_responses<W: FrameWrite>(
    mut write_half: W,
    mut rx: mpsc::Receiver<Outgoing>,
    broker: Arc<Broker>,
    peer: SocketAddr,
) {
    while let Some(next) = rx.recv().await {
        let mut frame = match next.await {
            Ok(Some(f)) => f,
            Ok(None) => continue,
            Err(()) => break,
        };
        let len = frame.len() as u64;
        // Vectored writes for the in-memory pieces (a fetch response's record sets stay in the
        // log's buffers or files); file pieces with sendfile on plaintext.
        if let Err(e) = write_half.write_frame(&mut frame).await {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                tracing::warn!(%peer, error = %e, "closing connection: a fetched segment range \
                    was truncated while it was sent");
            } else {
                tracing::debug!(%peer, error = %e, "connection error while writing");
            }
            break;
        }
        broker.metrics.network_bytes_out.inc_by(len);
    }
    let _ = write_half.shutdown().await;
}

/// The next request frame; `None` when the connection is to close: the client closed it, the
/// broker stops, no request came for `idle` (`connections.max.idle.ms`), or the frame is bad or
/// cannot be read (logged).
async fn next_frame<R: AsyncRead + Unpin>(
    broker: &Broker,
    reader: &mut BufReader<R>,
    max: usize,
    idle: Duration,
    stop: &mut watch::Receiver<bool>,
    peer: SocketAddr,
) -> Option<Bytes> {
    let frame = tokio::select! {
        // Read first: a frame already buffered is taken without arming the idle timer.
        biased;
        f = read_frame(reader, max) => f,
        _ = stop.changed() => return None,
        _ = tokio::time::sleep(idle) => {
            tracing::debug!(%peer, idle_ms = idle.as_millis() as u64,
                "closing connection: idle for connections.max.idle.ms");
            return None;
        }
    };
    match frame {
        Ok(f) => f,
        Err(FrameError::Io(e)) => {
            tracing::debug!(%peer, error = %e, "connection error");
            None
        }
        Err(e) => {
            broker.metrics.malformed_requests.inc();
            if let Some(left_out) = BAD_INPUT_WARNINGS.admit(Instant::now()) {
                tracing::warn!(%peer, error = %e, similar_warnings_left_out = left_out,
                    "closing connection: bad frame");
            }
            None
        }
    }
}

/// The answer to an ApiVersions request at a version this broker does not serve; `None` when
/// it cannot be encoded (the connection closes).
fn api_versions_fallback(peer: SocketAddr, correlation_id: i32, version: i16) -> Option<Outgoing> {
    // KIP-511: answer in v0 so the client can pick a version we serve.
    tracing::debug!(%peer, version, "ApiVersions at an unsupported version: v0 fallback");
    let body = ResponseKind::ApiVersions(ferry_protocol::api_versions_response(
        ResponseError::UnsupportedVersion.code(),
    ));
    let f = encode_response(ApiKey::ApiVersions, 0, correlation_id, &body).ok()?;
    Some(Box::pin(async move { Ok(Some(f)) }))
}

/// Counts the SASL exchange that just ended on this connection, if one did.
fn count_login(broker: &Broker, security: &ConnectionSecurity, session: &mut SaslSession) {
    if let Some((mechanism, success)) = session.take_outcome() {
        let labels = metrics::AuthenticationLabels {
            listener: security.listener.to_string(),
            mechanism: mechanism.name().to_string(),
            result: if success { "success" } else { "failure" },
        };
        broker.metrics.authentications.get_or_create(&labels).inc();
    }
}

/// Counts a client quota's throttle (`ferry_quota_throttle_ms`).
fn count_throttle(broker: &Broker, api_key: ApiKey, throttled: Duration) {
    if !throttled.is_zero() {
        let labels = ApiLabels {
            api: format!("{api_key:?}"),
        };
        let ms = u64::try_from(throttled.as_millis()).unwrap_or(u64::MAX);
        broker
            .metrics
            .quota_throttle_ms
            .get_or_create(&labels)
            .inc_by(ms);
    }
}

/// What the SASL gate did with a request.
enum SaslStep {
    /// Not a SASL matter: the handlers serve it.
    Pass,
    /// Answered by the gate (the answer: `None` when it could not be framed, which closes the
    /// connection); `then_close` after a failed or out-of-order exchange.
    Answered { then_close: bool },
}

/// Passes `request` through the connection's SASL session: the step, and the gate's framed
/// answer when it answered.
fn sasl_gate(
    broker: &Arc<Broker>,
    session: &mut SaslSession,
    request: &DecodedRequest,
    peer: SocketAddr,
    started: Instant,
) -> (SaslStep, Option<Outgoing>) {
    let api_key = request.api_key;
    let version = request.header.request_api_version;
    let (body, then_close) = match session.check(api_key, version, &request.body, started) {
        Gate::Pass => return (SaslStep::Pass, None),
        Gate::Answer(body) => (body, false),
        Gate::AnswerThenClose(body) => (body, true),
        Gate::Close(reason) => {
            if let Some(left_out) = BAD_INPUT_WARNINGS.admit(Instant::now()) {
                tracing::info!(%peer, %reason, similar_warnings_left_out = left_out,
                    "closing connection");
            }
            return (SaslStep::Answered { then_close: true }, None);
        }
    };
    let labels = ApiLabels {
        api: format!("{api_key:?}"),
    };
    broker.metrics.requests.get_or_create(&labels).inc();
    let answer = Answer {
        broker: broker.clone(),
        peer,
        api_key,
        version,
        correlation_id: request.header.correlation_id,
        labels,
        started,
        client_id: String::new(),
        from_broker: None,
        request_bytes: 0,
    };
    let outgoing = answer
        .frame(Some(body))
        .ok()
        .map(|framed| -> Outgoing { Box::pin(async move { Ok(framed) }) });
    (SaslStep::Answered { then_close }, outgoing)
}

/// Handles one request and returns its response for the writer: framed already, or a future
/// that frames it when a produce's acks=all answer is known; and whether the connection then
/// closes (after the responses queued before). `sends_files`: the writer sends file pieces
/// (plaintext), so a consumer Fetch's records may stay in their segment files.
#[allow(clippy::too_many_arguments)]
async fn handle_request(
    broker: &Arc<Broker>,
    mut request: DecodedRequest,
    peer: SocketAddr,
    security: &Arc<ConnectionSecurity>,
    principal: &KafkaPrincipal,
    started: Instant,
    request_bytes: u64,
    sends_files: bool,
) -> (Outgoing, bool, Duration) {
    let api_key = request.api_key;
    let version = request.header.request_api_version;
    let correlation_id = request.header.correlation_id;
    let api = format!("{api_key:?}");
    let labels = ApiLabels { api };
    broker.metrics.requests.get_or_create(&labels).inc();
    let client_id = request
        .header
        .client_id
        .as_ref()
        .map(|c| c.to_string())
        .unwrap_or_default();
    let mut ctx = handlers::RequestContext::new(client_id, peer.ip(), security.clone());
    ctx.principal = principal.clone();
    if sends_files && api_key == ApiKey::Fetch {
        ctx.file_records = Some(Arc::new(std::sync::Mutex::new(FileRecords::new())));
    }
    // Requests from other brokers are counted by the sender's rack (cross-AZ traffic).
    let from_broker = metrics::inter_broker_peer(&ctx.client_id).filter(|id| *id != broker.node_id);
    let answer = Answer {
        broker: broker.clone(),
        peer,
        api_key,
        version,
        correlation_id,
        labels,
        started,
        client_id: ctx.client_id.clone(),
        from_broker,
        request_bytes,
    };
    // Client quotas: other brokers are exempt (Kafka exempts what CLUSTER_ACTION authorizes).
    let quota_client = QuotaClient {
        user: principal.name(),
        client_id: &ctx.client_id,
    };
    // Quotas first: without any, no authorization lookup is spent on other brokers' requests.
    let measured = !broker.quotas.is_empty()
        && (from_broker.is_none() || !ctx.may_cluster(broker, AclOperation::ClusterAction));
    let consumer_fetch = measured && throttle::is_consumer_fetch_request(&request.body, version);
    if consumer_fetch {
        throttle::cap_fetch(broker, &mut request.body, &quota_client);
    }
    let handled = handlers::handle_pipelined(broker, request, &ctx).await;
    // The file regions behind the response's placeholders (a consumer Fetch on plaintext).
    let files = ctx
        .file_records
        .as_ref()
        .map(|f| std::mem::take(&mut *f.lock().unwrap_or_else(|p| p.into_inner())))
        .unwrap_or_default();
    let mut throttled = if measured {
        let is_produce = api_key == ApiKey::Produce;
        throttle::request_throttle(
            broker,
            &quota_client,
            is_produce,
            request_bytes,
            started.elapsed(),
        )
    } else {
        Duration::ZERO
    };
    match handled {
        Handled::Now(mut body) => {
            if let (true, Some(ResponseKind::Fetch(fetch))) = (consumer_fetch, body.as_mut()) {
                throttled = throttled.max(throttle::throttle_fetch(broker, &quota_client, fetch));
            }
            count_throttle(broker, api_key, throttled);
            if let Some(response) = body.as_mut() {
                if !throttled.is_zero() {
                    throttle::set_throttle_time(response, throttled);
                }
            }
            let framed = answer.frame_with_files(body, files);
            (Box::pin(async move { framed }), false, throttled)
        }
        Handled::Later(body) => {
            count_throttle(broker, api_key, throttled);
            (
                Box::pin(async move {
                    let mut body = body.await;
                    if let (Some(response), false) = (body.as_mut(), throttled.is_zero()) {
                        throttle::set_throttle_time(response, throttled);
                    }
                    answer.frame_with_files(body, files)
                }),
                false,
                throttled,
            )
        }
        Handled::Close(reason) => {
            if let Some(left_out) = BAD_INPUT_WARNINGS.admit(Instant::now()) {
                tracing::info!(%peer, client_id = %ctx.client_id, correlation_id,
                    failures = %reason, similar_warnings_left_out = left_out,
                    "closing connection: an acks=0 produce request failed");
            }
            let _ = answer.frame(None);
            (Box::pin(async move { Err(()) }), true, throttled)
        }
    }
}
