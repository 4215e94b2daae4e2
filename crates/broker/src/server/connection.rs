//! One client connection: read frames, handle requests one at a time in arrival order (as
//! Kafka does, so pipelined requests are answered in order), write responses from a separate
//! task so a large response never delays reading the next request.
//!
//! A malformed, oversized or unsupported frame closes this connection only, with a log line.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use ferry_protocol::frame::{read_frame, FrameError};
use ferry_protocol::{decode_request, encode_response, DecodeError};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, ResponseKind};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};

use crate::broker::Broker;
use crate::handlers;
use crate::metrics::{self, ApiLabels, TrafficKind};

pub async fn serve(
    broker: Arc<Broker>,
    stream: TcpStream,
    peer: SocketAddr,
    mut stop: watch::Receiver<bool>,
) {
    broker.metrics.connections.inc();
    let (read_half, mut write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(256 * 1024, read_half);
    let (tx, mut rx) = mpsc::channel::<Bytes>(64);
    let metrics = broker.metrics.clone();
    let writer = tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if write_half.write_all(&frame).await.is_err() {
                break;
            }
            metrics.network_bytes_out.inc_by(frame.len() as u64);
        }
        let _ = write_half.shutdown().await;
    });
    let max = broker.config.socket_request_max_bytes();
    loop {
        let frame = tokio::select! {
            f = read_frame(&mut reader, max) => f,
            _ = stop.changed() => break,
        };
        let frame = match frame {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(FrameError::Io(e)) => {
                tracing::debug!(%peer, error = %e, "connection error");
                break;
            }
            Err(e) => {
                broker.metrics.malformed_requests.inc();
                tracing::warn!(%peer, error = %e, "closing connection: bad frame");
                break;
            }
        };
        let request_bytes = frame.len() as u64 + 4;
        broker.metrics.network_bytes_in.inc_by(request_bytes);
        let started = Instant::now();
        let request = match decode_request(frame) {
            Ok(r) => r,
            Err(DecodeError::UnsupportedApiVersionsVersion {
                correlation_id,
                version,
            }) => {
                // KIP-511: answer in v0 so the client can pick a version we serve.
                tracing::debug!(%peer, version, "ApiVersions at an unsupported version: v0 fallback");
                let body = ResponseKind::ApiVersions(ferry_protocol::api_versions_response(
                    ResponseError::UnsupportedVersion.code(),
                ));
                match encode_response(ApiKey::ApiVersions, 0, correlation_id, &body) {
                    Ok(f) => {
                        if tx.send(f).await.is_err() {
                            break;
                        }
                        continue;
                    }
                    Err(_) => break,
                }
            }
            Err(e) => {
                broker.metrics.malformed_requests.inc();
                tracing::warn!(%peer, error = %e, "closing connection: request not served");
                break;
            }
        };
        let api_key = request.api_key;
        let version = request.header.request_api_version;
        let correlation_id = request.header.correlation_id;
        let api = format!("{api_key:?}");
        let labels = ApiLabels { api };
        broker.metrics.requests.get_or_create(&labels).inc();
        let ctx = handlers::RequestContext {
            client_id: request
                .header
                .client_id
                .as_ref()
                .map(|c| c.to_string())
                .unwrap_or_default(),
            client_host: format!("/{}", peer.ip()),
        };
        // Requests from other brokers are counted by the sender's rack (cross-AZ traffic).
        let from_broker =
            metrics::inter_broker_peer(&ctx.client_id).filter(|id| *id != broker.node_id);
        let response = handlers::handle(&broker, request, &ctx).await;
        broker
            .metrics
            .request_latency
            .get_or_create(&labels)
            .observe(started.elapsed().as_secs_f64());
        let Some(body) = response else {
            continue;
        };
        match encode_response(api_key, version, correlation_id, &body) {
            Ok(f) => {
                if from_broker.is_some() {
                    let kind = if api_key == ApiKey::Fetch {
                        TrafficKind::Replication
                    } else {
                        metrics::inter_broker_kind(&ctx.client_id)
                    };
                    broker
                        .metrics
                        .inter_broker(kind, from_broker, f.len() as u64, request_bytes);
                }
                if tx.send(f).await.is_err() {
                    break;
                }
            }
            Err(e) => {
                tracing::error!(%peer, api = ?api_key, version, error = %e, "cannot encode response; closing connection");
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
    broker.metrics.connections.dec();
}
