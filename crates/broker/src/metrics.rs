//! Prometheus metrics of the broker, served as text on `metrics.address` at `/metrics`.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabels {
    pub api: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub api: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

fn latency_histogram() -> Histogram {
    // 50 µs .. ~1.6 s
    Histogram::new(exponential_buckets(0.000_05, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    pub requests: Family<ApiLabels, Counter>,
    pub errors: Family<ApiErrorLabels, Counter>,
    pub request_latency: Family<ApiLabels, Histogram, fn() -> Histogram>,
    pub network_bytes_in: Counter,
    pub network_bytes_out: Counter,
    pub messages_in: Family<TopicLabels, Counter>,
    pub bytes_in: Family<TopicLabels, Counter>,
    pub bytes_out: Family<TopicLabels, Counter>,
    pub connections: Gauge,
    pub malformed_requests: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("ferry");
        let requests = Family::<ApiLabels, Counter>::default();
        let errors = Family::<ApiErrorLabels, Counter>::default();
        let request_latency =
            Family::<ApiLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                latency_histogram as fn() -> Histogram,
            );
        let network_bytes_in = Counter::default();
        let network_bytes_out = Counter::default();
        let messages_in = Family::<TopicLabels, Counter>::default();
        let bytes_in = Family::<TopicLabels, Counter>::default();
        let bytes_out = Family::<TopicLabels, Counter>::default();
        let connections = Gauge::default();
        let malformed_requests = Counter::default();
        registry.register("requests", "Requests handled, by API", requests.clone());
        registry.register(
            "request_errors",
            "Error codes returned (top-level, topic- or partition-level), by API and error",
            errors.clone(),
        );
        registry.register(
            "request_latency_seconds",
            "Time from a request's arrival to its response being queued, by API",
            request_latency.clone(),
        );
        registry.register(
            "network_received_bytes",
            "Bytes read from client sockets",
            network_bytes_in.clone(),
        );
        registry.register(
            "network_sent_bytes",
            "Bytes written to client sockets",
            network_bytes_out.clone(),
        );
        registry.register(
            "topic_messages_in",
            "Records appended, by topic",
            messages_in.clone(),
        );
        registry.register(
            "topic_bytes_in",
            "Record-batch bytes appended, by topic",
            bytes_in.clone(),
        );
        registry.register(
            "topic_bytes_out",
            "Record-batch bytes fetched, by topic",
            bytes_out.clone(),
        );
        registry.register(
            "connections",
            "Open client connections",
            connections.clone(),
        );
        registry.register(
            "malformed_requests",
            "Connections closed because of a malformed or oversized frame",
            malformed_requests.clone(),
        );
        Self {
            registry,
            requests,
            errors,
            request_latency,
            network_bytes_in,
            network_bytes_out,
            messages_in,
            bytes_in,
            bytes_out,
            connections,
            malformed_requests,
        }
    }

    pub fn error(&self, api: &str, code: i16) {
        if code == 0 {
            return;
        }
        let name = kafka_protocol::error::ResponseError::try_from_code(code)
            .map(|e| format!("{e:?}"))
            .unwrap_or_else(|| code.to_string());
        self.errors
            .get_or_create(&ApiErrorLabels {
                api: api.to_string(),
                error: name,
            })
            .inc();
    }

    pub fn topic(&self, family: &Family<TopicLabels, Counter>, topic: &str, n: u64) {
        family
            .get_or_create(&TopicLabels {
                topic: topic.to_string(),
            })
            .inc_by(n);
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `GET /metrics` until the task is dropped. Plain HTTP/1.1, one request per connection.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut used = 0;
            // Read the request head (bounded); the body, if any, is ignored.
            while used < buf.len() {
                match tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    stream.read(&mut buf[used..]),
                )
                .await
                {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => used += n,
                }
                if buf[..used].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..used]);
            let path = head.split_whitespace().nth(1).unwrap_or("");
            let (status, body) = if path == "/metrics" || path.starts_with("/metrics?") {
                ("200 OK", metrics.encode())
            } else {
                ("404 Not Found", "not found; try /metrics\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Binds the metrics listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_with_prefix_and_labels() {
        let m = Metrics::new();
        m.requests
            .get_or_create(&ApiLabels {
                api: "Produce".into(),
            })
            .inc();
        m.error("Produce", 10);
        m.topic(&m.messages_in, "orders", 3);
        let text = m.encode();
        assert!(
            text.contains("ferry_requests_total{api=\"Produce\"} 1"),
            "{text}"
        );
        assert!(text.contains("error=\"MessageTooLarge\""), "{text}");
        assert!(
            text.contains("ferry_topic_messages_in_total{topic=\"orders\"} 3"),
            "{text}"
        );
    }
}
