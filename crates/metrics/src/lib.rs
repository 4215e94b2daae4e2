//! Prometheus metrics of the broker, served as text on `metrics.address` at `/metrics`.
//!
//! - [`Metrics`]: one registry (prefix `ferry`) with the request families (requests, errors and
//!   latency by API), network and per-topic byte counters, connections and malformed requests,
//!   replication (ISR shrinks and expands, under-replicated partitions), the controller's
//!   elections ([`ControllerMetrics`]), and inter-broker bytes by peer rack and kind
//!   ([`TrafficKind`]: replication, controller, WAL metadata, ...), the figure cross-AZ costs
//!   are estimated from. Other crates register their families through
//!   [`Metrics::with_extra`] (the remote WAL's, `ferry_wal::metrics`).
//! - [`serve`]: a minimal HTTP/1 endpoint that answers every GET with the text encoding.
//!
//! Locks: counters and histograms are lock-free; `peer_racks` (broker id → rack, replaced on
//! every metadata image) is a read-mostly `RwLock`, and `rack_totals` a short `Mutex`; neither
//! is held while another is taken. Nothing here is on a request's critical path beyond an
//! atomic add and, for inter-broker bytes, one read lock.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

use kafka_protocol::messages::ApiKey;
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

/// A SASL login's listener, mechanism and outcome (`success` or `failure`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AuthenticationLabels {
    pub listener: String,
    pub mechanism: String,
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiErrorLabels {
    pub api: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LogDirLabels {
    pub dir: String,
}

/// Which side of replication a throttle counts: `leader` (sent) or `follower` (fetched).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReplicationSideLabels {
    pub side: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabels {
    pub topic: String,
}

/// Bytes exchanged with another broker, by its rack: the traffic that crosses AZs when racks
/// are AZs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InterBrokerLabels {
    /// `sent` or `received`, seen from this broker.
    pub direction: &'static str,
    /// The peer's `broker.rack` (`none` when it has none, `unknown` when it is not registered).
    pub peer_rack: String,
    pub kind: &'static str,
}

/// What inter-broker bytes were for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrafficKind {
    /// Replica fetches (requests and responses, record data included).
    Replication,
    /// The controller quorum's Raft traffic.
    Controller,
    /// Anything else a broker sends another (e.g. internal produce requests).
    Other,
    /// Produce requests to `__remote_wal_log_metadata` (remote WAL metadata).
    WalMetadata,
    /// Fetches of `__remote_wal_log_metadata` partitions this broker hosts no replica of (the
    /// remote WAL metadata reader, as a consumer).
    WalMetadataReader,
    /// Produce requests to `__remote_log_metadata` (the long-term tier's metadata).
    TierMetadata,
    /// Fetches of `__remote_log_metadata` partitions this broker hosts no replica of.
    TierMetadataReader,
}

impl TrafficKind {
    fn label(self) -> &'static str {
        match self {
            TrafficKind::Replication => "replication",
            TrafficKind::Controller => "controller",
            TrafficKind::Other => "other",
            TrafficKind::WalMetadata => "wal_metadata",
            TrafficKind::WalMetadataReader => "wal_metadata_reader",
            TrafficKind::TierMetadata => "tier_metadata",
            TrafficKind::TierMetadataReader => "tier_metadata_reader",
        }
    }
}

/// The client id prefix of every connection one broker opens to another; the receiving broker
/// recognises inter-broker requests by it (`ferry-broker-<node.id>[-<purpose>]`).
pub const INTER_BROKER_CLIENT_PREFIX: &str = "ferry-broker-";

/// The client id a broker uses towards its peers for `purpose` (e.g. `replica-fetcher`).
pub fn inter_broker_client_id(node_id: i32, purpose: &str) -> String {
    format!("{INTER_BROKER_CLIENT_PREFIX}{node_id}-{purpose}")
}

/// The client-id purpose of the replica fetcher's connections.
pub const PURPOSE_REPLICA_FETCHER: &str = "replica-fetcher";
/// The client-id purpose of the remote WAL's metadata produce connections.
pub const PURPOSE_WAL_METADATA: &str = "wal-metadata";
/// The client-id purpose of the remote WAL metadata reader's Fetch connections.
pub const PURPOSE_WAL_METADATA_READER: &str = "wal-metadata-reader";
/// The client-id purpose of the long-term tier's metadata produce connections.
pub const PURPOSE_TIER_METADATA: &str = "tier-metadata";
/// The client-id purpose of the tier metadata reader's Fetch connections.
pub const PURPOSE_TIER_METADATA_READER: &str = "tier-metadata-reader";

/// What an inter-broker request is for, from its API and the purpose in its client id (see
/// [`inter_broker_client_id`]): Fetches are replication unless the metadata reader sent them.
pub fn inter_broker_kind(api_key: ApiKey, client_id: &str) -> TrafficKind {
    if client_id.ends_with(PURPOSE_WAL_METADATA_READER) {
        TrafficKind::WalMetadataReader
    } else if client_id.ends_with(PURPOSE_TIER_METADATA_READER) {
        TrafficKind::TierMetadataReader
    } else if api_key == ApiKey::Fetch {
        TrafficKind::Replication
    } else if client_id.ends_with(PURPOSE_WAL_METADATA) {
        TrafficKind::WalMetadata
    } else if client_id.ends_with(PURPOSE_TIER_METADATA) {
        TrafficKind::TierMetadata
    } else {
        TrafficKind::Other
    }
}

/// The sending broker's id, when `client_id` is an inter-broker client id.
pub fn inter_broker_peer(client_id: &str) -> Option<i32> {
    let rest = client_id.strip_prefix(INTER_BROKER_CLIENT_PREFIX)?;
    let digits = rest.split('-').next()?;
    digits.parse().ok()
}

/// Which replica served a consumer's fetch (KIP-392 follower reads).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicRoleLabels {
    pub topic: String,
    /// `leader` or `follower`.
    pub role: String,
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
    /// SASL logins (and re-authentications), by listener, mechanism and outcome.
    pub authentications: Family<AuthenticationLabels, Counter>,
    /// Time clients were throttled for by client quotas, in milliseconds, by API.
    pub quota_throttle_ms: Family<ApiLabels, Counter>,
    /// Connections closed at once by `max.connections.per.ip`.
    pub connections_refused: Counter,
    pub inter_broker_bytes: Family<InterBrokerLabels, Counter>,
    /// Each registered broker's rack label, refreshed with every metadata image.
    peer_racks: RwLock<HashMap<i32, String>>,
    pub controller: ControllerMetrics,
    /// Inter-broker bytes (both directions, all kinds) by peer rack, for cost estimates.
    rack_totals: std::sync::Mutex<HashMap<String, u64>>,
    /// Record bytes served to consumers (not followers), by topic and this broker's role.
    pub consumer_bytes_out: Family<TopicRoleLabels, Counter>,
    pub under_replicated_partitions: Gauge,
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    /// 1 while a log dir's file system is full (appends refused until space is freed).
    pub log_dir_full: Family<LogDirLabels, Gauge>,
    /// Run before each scrape, to set gauges that are read from state rather than counted.
    scrape_hooks: std::sync::Mutex<Vec<ScrapeHook>>,
    /// Log dirs that failed and are offline until restart (Kafka's `OfflineLogDirectoryCount`).
    pub offline_log_dirs: Gauge,
    /// Bytes of throttled replicas sent (leader) or fetched (follower), KIP-73.
    pub replication_throttled_bytes: Family<ReplicationSideLabels, Counter>,
    /// Partition reads of throttled replicas held back because the rate was over the bound.
    pub replication_throttle_held_back: Family<ReplicationSideLabels, Counter>,
}

type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::with_extra(|_| {})
    }

    /// Metrics with more families registered by `extra` (e.g. the remote WAL's).
    pub fn with_extra(extra: impl FnOnce(&mut Registry)) -> Self {
        let mut registry = Registry::with_prefix("ferry");
        extra(&mut registry);
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
        let authentications = Family::<AuthenticationLabels, Counter>::default();
        let quota_throttle_ms = Family::<ApiLabels, Counter>::default();
        let connections_refused = Counter::default();
        registry.register(
            "authentications",
            "SASL logins and re-authentications, by listener, mechanism and result (success, failure)",
            authentications.clone(),
        );
        registry.register(
            "quota_throttle_ms",
            "Milliseconds clients were throttled for by client quotas (KIP-219), by API",
            quota_throttle_ms.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed at once because their address had max.connections.per.ip",
            connections_refused.clone(),
        );
        let inter_broker_bytes = Family::<InterBrokerLabels, Counter>::default();
        registry.register(
            "inter_broker_bytes",
            "Bytes sent to and received from other brokers, by the peer's rack and purpose",
            inter_broker_bytes.clone(),
        );
        let consumer_bytes_out = Family::<TopicRoleLabels, Counter>::default();
        let under_replicated_partitions = Gauge::default();
        let isr_shrinks = Counter::default();
        let isr_expands = Counter::default();
        let log_dir_full = Family::<LogDirLabels, Gauge>::default();
        let replication_throttled_bytes = Family::<ReplicationSideLabels, Counter>::default();
        let replication_throttle_held_back = Family::<ReplicationSideLabels, Counter>::default();
        registry.register(
            "replication_throttled_bytes",
            "Bytes of throttled replicas (leader/follower.replication.throttled.replicas) sent as leader or fetched as follower",
            replication_throttled_bytes.clone(),
        );
        registry.register(
            "replication_throttle_held_back",
            "Reads of throttled, out-of-sync replicas left without data because the side's replication.throttled.rate was exceeded",
            replication_throttle_held_back.clone(),
        );
        registry.register(
            "log_dir_full",
            "1 while the file system of a log dir is full: appends to its partitions fail with KAFKA_STORAGE_ERROR until space is freed",
            log_dir_full.clone(),
        );
        let offline_log_dirs = Gauge::default();
        registry.register(
            "offline_log_directory_count",
            "Log dirs of this broker that failed (an I/O error other than a full disk) and are offline until restart",
            offline_log_dirs.clone(),
        );
        registry.register(
            "consumer_fetch_bytes",
            "Record-batch bytes served to consumers, by topic and by whether this broker leads the partition or follows it (KIP-392 follower reads)",
            consumer_bytes_out.clone(),
        );
        registry.register(
            "under_replicated_partitions",
            "Partitions led by this broker whose ISR is smaller than their replica set",
            under_replicated_partitions.clone(),
        );
        registry.register(
            "isr_shrinks",
            "ISR shrinks made by partitions led here",
            isr_shrinks.clone(),
        );
        registry.register(
            "isr_expands",
            "ISR expansions made by partitions led here",
            isr_expands.clone(),
        );
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
        let controller = ControllerMetrics::register(&mut registry);
        Self {
            controller,
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
            authentications,
            quota_throttle_ms,
            connections_refused,
            consumer_bytes_out,
            under_replicated_partitions,
            isr_shrinks,
            isr_expands,
            log_dir_full,
            scrape_hooks: std::sync::Mutex::new(Vec::new()),
            offline_log_dirs,
            replication_throttled_bytes,
            replication_throttle_held_back,
            inter_broker_bytes,
            peer_racks: RwLock::new(HashMap::new()),
            rack_totals: std::sync::Mutex::new(HashMap::new()),
        }
    }

    /// Inter-broker bytes exchanged with brokers of racks other than `own_rack` (both
    /// directions; peers of unknown rack included).
    pub fn cross_rack_bytes(&self, own_rack: &str) -> u64 {
        self.rack_totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(rack, _)| rack.as_str() != own_rack)
            .map(|(_, n)| *n)
            .sum()
    }

    /// Replaces the broker-id-to-rack map used to label inter-broker traffic.
    pub fn set_peer_racks(&self, racks: HashMap<i32, String>) {
        *self.peer_racks.write().unwrap_or_else(|p| p.into_inner()) = racks;
    }

    /// Counts bytes exchanged with broker `peer` (`None`: a peer that did not say who it is).
    pub fn inter_broker(&self, kind: TrafficKind, peer: Option<i32>, sent: u64, received: u64) {
        let rack = match peer {
            Some(id) => self
                .peer_racks
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&id)
                .cloned()
                .unwrap_or_else(|| "unknown".to_string()),
            None => "unknown".to_string(),
        };
        *self
            .rack_totals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(rack.clone())
            .or_default() += sent + received;
        for (direction, n) in [("sent", sent), ("received", received)] {
            if n > 0 {
                self.inter_broker_bytes
                    .get_or_create(&InterBrokerLabels {
                        direction,
                        peer_rack: rack.clone(),
                        kind: kind.label(),
                    })
                    .inc_by(n);
            }
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

    /// Bytes served to a consumer by the leader (`leader = true`) or a follower.
    pub fn consumer_fetch(&self, topic: &str, leader: bool, n: u64) {
        self.consumer_bytes_out
            .get_or_create(&TopicRoleLabels {
                topic: topic.to_string(),
                role: if leader { "leader" } else { "follower" }.to_string(),
            })
            .inc_by(n);
    }

    /// Runs `hook` before every scrape (see [`Metrics::encode`]).
    pub fn on_scrape(&self, hook: impl Fn(&Metrics) + Send + Sync + 'static) {
        self.scrape_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(hook));
    }

    pub fn encode(&self) -> String {
        for hook in self
            .scrape_hooks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            hook(self);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ElectionLabels {
    /// `clean` or `unclean`.
    pub kind: String,
}

/// Liveness and leadership metrics (Kafka's ActiveControllerCount, FencedBrokerCount,
/// LeaderElectionRate, UncleanLeaderElectionsPerSec, ControlledShutdown).
#[derive(Default)]
pub struct ControllerMetrics {
    /// 1 while this node is the active controller (the Raft leader).
    pub active: Gauge,
    /// Registered brokers that are fenced, as this node's image shows.
    pub fenced_brokers: Gauge,
    /// Leader changes the active controller proposed and got committed, clean or unclean.
    pub leader_elections: Family<ElectionLabels, Counter>,
    /// Controlled shutdowns the active controller completed (the broker was told to stop).
    pub controlled_shutdowns: Counter,
}

impl ControllerMetrics {
    fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "controller_active",
            "1 on the active controller (the Raft leader of the controller quorum), else 0",
            m.active.clone(),
        );
        registry.register(
            "controller_fenced_brokers",
            "Registered brokers that are fenced",
            m.fenced_brokers.clone(),
        );
        registry.register(
            "controller_leader_elections",
            "Partition leader changes committed by this controller, by kind (clean, unclean)",
            m.leader_elections.clone(),
        );
        registry.register(
            "controller_controlled_shutdowns",
            "Brokers this controller let shut down after moving their leaderships",
            m.controlled_shutdowns.clone(),
        );
        m
    }

    pub fn election(&self, unclean: bool) {
        let kind = if unclean { "unclean" } else { "clean" };
        self.leader_elections
            .get_or_create(&ElectionLabels { kind: kind.into() })
            .inc();
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
        m.consumer_fetch("orders", false, 5);
        m.under_replicated_partitions.set(2);
        m.offline_log_dirs.set(1);
        let text = m.encode();
        assert!(
            text.contains("ferry_consumer_fetch_bytes_total{topic=\"orders\",role=\"follower\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("ferry_under_replicated_partitions 2"),
            "{text}"
        );
        assert!(
            text.contains("ferry_offline_log_directory_count 1"),
            "{text}"
        );
    }

    #[test]
    fn inter_broker_bytes_are_labelled_with_the_peer_rack() {
        let m = Metrics::new();
        m.set_peer_racks(HashMap::from([(2, "az2".to_string())]));
        m.inter_broker(TrafficKind::Replication, Some(2), 100, 5000);
        m.inter_broker(TrafficKind::Controller, Some(9), 7, 0);
        let text = m.encode();
        assert!(
            text.contains(
                "ferry_inter_broker_bytes_total{direction=\"received\",peer_rack=\"az2\",kind=\"replication\"} 5000"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "ferry_inter_broker_bytes_total{direction=\"sent\",peer_rack=\"unknown\",kind=\"controller\"} 7"
            ),
            "{text}"
        );
        assert!(
            !text.contains("direction=\"received\",peer_rack=\"unknown\""),
            "{text}"
        );
    }

    #[test]
    fn inter_broker_client_ids_name_the_sender() {
        assert_eq!(
            inter_broker_peer(&inter_broker_client_id(3, "replica-fetcher")),
            Some(3)
        );
        assert_eq!(inter_broker_peer("ferry-broker-12"), Some(12));
        assert_eq!(inter_broker_peer("rdkafka"), None);
        assert_eq!(inter_broker_peer("ferry-broker-x"), None);
    }

    #[test]
    fn inter_broker_requests_are_counted_by_purpose() {
        let id = |purpose| inter_broker_client_id(4, purpose);
        let rows = [
            (
                ApiKey::Fetch,
                id(PURPOSE_REPLICA_FETCHER),
                TrafficKind::Replication,
            ),
            (
                ApiKey::Fetch,
                id(PURPOSE_WAL_METADATA_READER),
                TrafficKind::WalMetadataReader,
            ),
            (
                ApiKey::Produce,
                id(PURPOSE_WAL_METADATA),
                TrafficKind::WalMetadata,
            ),
            (
                ApiKey::Fetch,
                id(PURPOSE_TIER_METADATA_READER),
                TrafficKind::TierMetadataReader,
            ),
            (
                ApiKey::Produce,
                id(PURPOSE_TIER_METADATA),
                TrafficKind::TierMetadata,
            ),
            (ApiKey::Produce, id("other"), TrafficKind::Other),
        ];
        for (api, client_id, want) in rows {
            assert_eq!(
                inter_broker_kind(api, &client_id),
                want,
                "{api:?} {client_id}"
            );
        }
    }
}
