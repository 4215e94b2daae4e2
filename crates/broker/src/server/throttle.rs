//! Client quotas on the request path (KIP-219): which measurements a request adds to
//! [`crate::client_quotas::ClientQuotas`], what its response says (`throttle_time_ms`), and how
//! long the connection then stays muted. Requests from other brokers are exempt.

use std::time::Duration;

use kafka_protocol::messages::{FetchResponse, RequestKind, ResponseKind};

use crate::broker::Broker;
use crate::handlers::fetch::fetching_replica;

/// Who a request is measured as: the principal's name and the client id.
pub struct QuotaClient<'a> {
    pub user: &'a str,
    pub client_id: &'a str,
}

/// Caps a consumer fetch's `max_bytes` to what the client's quota window allows (Kafka's
/// `getMaxValueInQuotaWindow`), so one response cannot exceed it by much. The caller has
/// checked that `body` is a consumer's fetch ([`is_consumer_fetch_request`]).
pub fn cap_fetch(broker: &Broker, body: &mut RequestKind, client: &QuotaClient) {
    let RequestKind::Fetch(fetch) = body else {
        return;
    };
    if let Some(limit) = broker.quotas.fetch_limit(client.user, client.client_id) {
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        fetch.max_bytes = fetch.max_bytes.min(limit);
    }
}

/// The throttle of a request that took `spent` to handle: its request time, and for a produce
/// its `request_bytes` (`producer_byte_rate`).
pub fn request_throttle(
    broker: &Broker,
    client: &QuotaClient,
    is_produce: bool,
    request_bytes: u64,
    spent: Duration,
) -> Duration {
    let quotas = &broker.quotas;
    if quotas.is_empty() {
        return Duration::ZERO;
    }
    let now = broker.clock.now_ms();
    let mut throttle = quotas.request_time(client.user, client.client_id, spent, now);
    if is_produce {
        let bytes = usize::try_from(request_bytes).unwrap_or(usize::MAX);
        throttle = throttle.max(quotas.produce(client.user, client.client_id, bytes, now));
    }
    throttle
}

/// Measures a consumer fetch's response (`consumer_byte_rate`) and returns its throttle time;
/// when it is throttled its records are dropped (the client fetches them again after the
/// throttle), unless they are more than the quota window allows at all.
pub fn throttle_fetch(
    broker: &Broker,
    client: &QuotaClient,
    response: &mut FetchResponse,
) -> Duration {
    if broker.quotas.is_empty() {
        return Duration::ZERO;
    }
    let bytes: usize = response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    let now = broker.clock.now_ms();
    let verdict = broker
        .quotas
        .fetch(client.user, client.client_id, bytes, now);
    if verdict.drop_records {
        // Kafka answers a throttled fetch empty; keeping the partitions (without records)
        // keeps their high watermarks and the fetch session's view of them current.
        for partition in response
            .responses
            .iter_mut()
            .flat_map(|t| t.partitions.iter_mut())
        {
            partition.records = None;
        }
    }
    verdict.throttle
}

/// Whether this request is a consumer's fetch (whose response [`throttle_fetch`] measures).
/// A follower's fetch is left to replication, as in Kafka.
pub fn is_consumer_fetch_request(body: &RequestKind, version: i16) -> bool {
    matches!(body, RequestKind::Fetch(f) if fetching_replica(f, version).is_none())
}

/// Sets `throttle_time_ms` in `response`, keeping a larger one already there.
pub fn set_throttle_time(response: &mut ResponseKind, throttle: Duration) {
    let ms = i32::try_from(throttle.as_millis()).unwrap_or(i32::MAX);
    macro_rules! set {
        ($($kind:ident),* $(,)?) => {
            match response {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                // SaslHandshake, SaslAuthenticate and WriteTxnMarkers have no such field.
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        ApiVersions,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        AlterReplicaLogDirs,
        CreatePartitions,
        IncrementalAlterConfigs,
        DescribeCluster,
        FindCoordinator,
        JoinGroup,
        SyncGroup,
        Heartbeat,
        LeaveGroup,
        OffsetCommit,
        OffsetFetch,
        ListGroups,
        DescribeGroups,
        DeleteGroups,
        OffsetDelete,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeTransactions,
        ListTransactions,
        DescribeProducers,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeTopicPartitions,
        GetTelemetrySubscriptions,
        PushTelemetry,
        ListConfigResources,
    );
}
