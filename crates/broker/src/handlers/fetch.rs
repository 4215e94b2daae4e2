//! Fetch: read committed data from each partition, long-polling up to `max_wait_ms` until
//! `min_bytes` are available, within incremental fetch sessions (KIP-227) and topic ids (v13+).
//!
//! Consumers may read from followers (KIP-392). The leader answers a consumer's v11+ fetch with
//! `preferred_read_replica` when `replica.selector.class` picks another replica for the
//! client's `rack_id`, and then returns no records for that partition. A follower serves v11+
//! consumer fetches up to its own high watermark while it is in the ISR; otherwise it answers
//! NOT_LEADER_OR_FOLLOWER, which sends the client back to the leader. Follower fetches always go
//! to the leader, and a response to a follower does not long-poll while the follower has not been
//! told the current high watermark, so followers serving consumers stay current.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferry_log::LogError;
use futures::future::select_all;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId, TopicName};
use tokio::sync::watch;

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use crate::errors;
use crate::replica_manager::Partition;
use crate::replication_throttle::Side;
use ferry_authz::AclOperation;
use ferry_replication::fetch_session::{FetchPartition, PartKey, PartitionOutcome, SessionMode};
use ferry_replication::replica_selector::{ReplicaSelector, ReplicaView};

const READ_COMMITTED: i8 = 1;
/// The first Fetch version with `rack_id` and `preferred_read_replica` (KIP-392).
const FOLLOWER_READ_VERSION: i16 = 11;

/// Who is fetching, as [`read_one`] needs it.
struct Fetcher<'a> {
    version: i16,
    /// A follower's broker id; `None` for a consumer.
    replica: Option<i32>,
    client_rack: &'a str,
    read_committed: bool,
    ctx: &'a RequestContext,
    /// A follower's fetch without CLUSTER_ACTION on the cluster: every partition is refused.
    follower_denied: bool,
    /// The high watermarks a follower says it knows (v18, KIP-1166), by partition.
    known_high_watermarks: HashMap<PartKey, i64>,
    /// `fetch.sendfile.enable`, read once for the request: every record set left in files.
    sendfile: bool,
}

impl Fetcher<'_> {
    /// Whether the fetch may not read `topic` (TOPIC_AUTHORIZATION_FAILED): a follower needs
    /// CLUSTER_ACTION on the cluster, a consumer READ on the topic.
    fn denied(&self, broker: &Broker, topic: &str) -> bool {
        self.follower_denied
            || (self.replica.is_none() && !self.ctx.may_topic(broker, AclOperation::Read, topic))
    }
}

struct PartitionRead {
    key: PartKey,
    topic_name: String,
    data: PartitionData,
    bytes: usize,
    /// Served by the partition's leader (else by a follower, KIP-392).
    by_leader: bool,
}

pub async fn handle(
    broker: &Arc<Broker>,
    request: FetchRequest,
    version: i16,
    ctx: &RequestContext,
) -> FetchResponse {
    let (mode, partitions) = match broker.fetch_sessions.begin(&request, version) {
        Ok(x) => x,
        Err(e) => {
            broker.metrics.error("Fetch", e.code());
            return FetchResponse::default().with_error_code(e.code());
        }
    };
    let response_max = if request.max_bytes > 0 {
        (request.max_bytes as usize).min(broker.config.fetch_max_bytes())
    } else {
        broker.config.fetch_max_bytes()
    };
    let min_bytes = request.min_bytes.max(0) as usize;
    let read_committed = request.isolation_level == READ_COMMITTED;
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let deadline = tokio::time::Instant::now() + max_wait;
    let replica = fetching_replica(&request, version);
    let follower_denied =
        replica.is_some() && !ctx.may_cluster(broker, AclOperation::ClusterAction);
    if let Some(replica) = replica.filter(|_| !follower_denied) {
        record_follower_positions(broker, replica, &partitions, version);
    }

    let client_rack = if version >= FOLLOWER_READ_VERSION {
        request.rack_id.as_str()
    } else {
        ""
    };
    let known_high_watermarks = if replica.is_some() && !follower_denied {
        known_high_watermarks(&request, version)
    } else {
        HashMap::new()
    };
    let fetcher = Fetcher {
        version,
        replica,
        client_rack,
        read_committed,
        ctx,
        follower_denied,
        known_high_watermarks,
        sendfile: broker.config.fetch_sendfile(),
    };
    let wanted = Wanted {
        response_max,
        min_bytes,
        deadline,
    };
    let mut reads = read_until_ready(broker, &partitions, &fetcher, &wanted).await;
    if fetcher.replica.is_some() {
        record_leader_throttled(broker, &reads);
    }
    match (&broker.tier, fetcher.replica) {
        (Some(tier), None) => {
            read_from_tier(
                broker,
                tier,
                &partitions,
                &mut reads,
                &fetcher,
                response_max,
            )
            .await
        }
        (Some(tier), Some(_)) => moved_to_tier(broker, tier, &partitions, &mut reads, &fetcher),
        (None, _) => {}
    }

    let include = broker
        .fetch_sessions
        .finish(mode, &session_outcomes(&reads));
    let topics = topic_responses(broker, reads, include, &fetcher);
    let session_id = match mode {
        SessionMode::Sessionless => 0,
        SessionMode::Full { session_id } | SessionMode::Incremental { session_id } => session_id,
    };
    FetchResponse::default()
        .with_session_id(session_id)
        .with_responses(topics)
}

/// Consumer reads below the local log start of tiered partitions (KIP-405): the local log
/// answered them OFFSET_OUT_OF_RANGE; the long-term tier serves those it holds. Every consumer
/// read of a tiered partition reports the tier's first offset as the log start offset.
/// Followers are not served from the tier: they start at the leader's local log start.
async fn read_from_tier(
    broker: &Broker,
    tier: &crate::tier::Tier,
    partitions: &[FetchPartition],
    reads: &mut [PartitionRead],
    fetcher: &Fetcher<'_>,
    response_max: usize,
) {
    let total: usize = reads.iter().map(|r| r.bytes).sum();
    let mut budget = response_max.saturating_sub(total);
    // (read, partition, fetch offset, bytes allowed): read from the tier all at once, each
    // a GET of its own.
    let mut wanted = Vec::new();
    for (i, (req, read)) in partitions.iter().zip(reads.iter_mut()).enumerate() {
        let Some(part) = resolve(broker, &req.key, fetcher.version) else {
            continue;
        };
        if !part.log.is_tiered() {
            continue;
        }
        let log_start = tier.log_start_offset(&part);
        // Also on an out-of-range answer: a client resets to it (librdkafka caches it).
        if read.data.log_start_offset >= 0 {
            read.data.log_start_offset = log_start;
        }
        if !tier.is_ready() && req.fetch_offset < part.log.log_start_offset() {
            read.data.error_code = ResponseError::KafkaStorageError.code();
            read.data.records = Some(Bytes::new());
            read.bytes = 0;
            continue;
        }
        if read.data.error_code != ResponseError::OffsetOutOfRange.code()
            || req.fetch_offset < log_start
            || req.fetch_offset >= part.log.log_start_offset()
        {
            continue;
        }
        let max = (req.max_bytes.max(0) as usize).min(budget);
        if max == 0 && !wanted.is_empty() {
            // No room left in this response: nothing now, no error (the offset is valid).
            read.data.error_code = 0;
            read.data.records = Some(Bytes::new());
            continue;
        }
        budget = budget.saturating_sub(max);
        wanted.push((i, part, req.fetch_offset, max));
    }
    let stable_end = |part: &Partition| fetcher.read_committed.then(|| part.last_stable_offset());
    let results = futures::future::join_all(
        wanted
            .iter()
            .map(|(_, part, offset, max)| tier.read(part, *offset, *max, stable_end(part))),
    )
    .await;
    for ((i, part, offset, _), result) in wanted.into_iter().zip(results) {
        let read = &mut reads[i];
        match result {
            Ok(Some(fetched)) => {
                let bytes = fetched.records.len();
                let mut data = std::mem::take(&mut read.data)
                    .with_error_code(0)
                    .with_high_watermark(part.high_watermark())
                    .with_last_stable_offset(part.last_stable_offset())
                    .with_log_start_offset(fetched.log_start_offset)
                    .with_records(Some(fetched.records));
                if fetcher.read_committed {
                    data = data.with_aborted_transactions(Some(
                        fetched
                            .aborted
                            .into_iter()
                            .map(|a| {
                                AbortedTransaction::default()
                                    .with_producer_id(ProducerId(a.producer_id))
                                    .with_first_offset(a.first_offset)
                            })
                            .collect(),
                    ));
                }
                read.data = data;
                read.bytes = bytes;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(partition = %part.tp, offset, error = %e,
                    "reading from the long-term tier failed");
                read.data.error_code = ResponseError::KafkaStorageError.code();
            }
        }
    }
}

/// Follower fetches below the local log start of tiered partitions (KIP-405): within the
/// log (at or past the tier's first offset) the answer is OFFSET_MOVED_TO_TIERED_STORAGE, and
/// the follower starts its log from the tier's state at the leader's local log start instead
/// of copying what the tier holds; below the log it stays OFFSET_OUT_OF_RANGE, with the tier's
/// first offset as the log start (the follower restarts there, and is then told the offset
/// moved). Before the tier's metadata is read: KAFKA_STORAGE_ERROR (retriable).
fn moved_to_tier(
    broker: &Broker,
    tier: &crate::tier::Tier,
    partitions: &[FetchPartition],
    reads: &mut [PartitionRead],
    fetcher: &Fetcher<'_>,
) {
    for (req, read) in partitions.iter().zip(reads.iter_mut()) {
        if read.data.error_code != ResponseError::OffsetOutOfRange.code() {
            continue;
        }
        let Some(part) = resolve(broker, &req.key, fetcher.version) else {
            continue;
        };
        if !part.log.is_tiered() || req.fetch_offset >= part.log.log_start_offset() {
            continue;
        }
        if !tier.is_ready() {
            read.data.error_code = ResponseError::KafkaStorageError.code();
            continue;
        }
        let log_start = tier.log_start_offset(&part);
        if req.fetch_offset >= log_start {
            read.data.error_code = ResponseError::OffsetMovedToTieredStorage.code();
        } else {
            read.data.log_start_offset = log_start;
        }
    }
}

/// A follower's broker id if the fetch is a follower's (v15+ carries the id in ReplicaState):
/// its fetch offsets are its log end offsets, and it reads up to the leader's log end offset.
pub(crate) fn fetching_replica(request: &FetchRequest, version: i16) -> Option<i32> {
    let replica = if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    (replica >= 0).then_some(replica)
}

/// The first Fetch version in which a follower tells the leader the high watermark it knows.
const KNOWN_HIGH_WATERMARK_VERSION: i16 = 18;
/// A v18 partition's `high_watermark` when the follower does not report one.
const HIGH_WATERMARK_NOT_REPORTED: i64 = i64::MAX;

/// The high watermark each partition's follower knows, where its v18 fetch reports one (-1:
/// it knows none). A partition left out of an incremental fetch carries no report.
fn known_high_watermarks(request: &FetchRequest, version: i16) -> HashMap<PartKey, i64> {
    if version < KNOWN_HIGH_WATERMARK_VERSION {
        return HashMap::new();
    }
    request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.high_watermark != HIGH_WATERMARK_NOT_REPORTED)
                .map(|p| {
                    let key = PartKey {
                        topic_id: t.topic_id,
                        topic: String::new(),
                        partition: p.partition,
                    };
                    (key, p.high_watermark)
                })
        })
        .collect()
}

/// Records the follower `replica`'s fetch offsets as its log end offsets, expanding the ISR
/// when it caught up.
fn record_follower_positions(
    broker: &Broker,
    replica: i32,
    partitions: &[FetchPartition],
    version: i16,
) {
    for p in partitions {
        if let Some(partition) = resolve(broker, &p.key, version) {
            // A fetch that will be answered with an epoch error or a diverging epoch says
            // nothing about the follower's log: its fetch offset may point past data this
            // leader does not have (a log from an older leader), and counting it would let
            // the high watermark, and acks=all, pass records the follower lacks.
            if !follower_position_is_valid(&partition, p, version) {
                continue;
            }
            if let Some(change) = partition.record_follower_fetch(replica, p.fetch_offset) {
                tracing::info!(partition = %partition.tp, isr = ?change.new_isr, "expanding the ISR");
                let _ = broker.isr_changes.send(change);
            }
        }
    }
}

/// How much a fetch wants, and until when it waits for it.
struct Wanted {
    /// Most bytes of records in the response.
    response_max: usize,
    /// Bytes of records that answer the fetch before its deadline.
    min_bytes: usize,
    deadline: tokio::time::Instant,
}

/// Reads every partition, long-polling until the reads have `min_bytes`, something else
/// answers the fetch at once (an error, a redirect, news of the high watermark for a
/// follower), or the deadline passes.
async fn read_until_ready(
    broker: &Broker,
    partitions: &[FetchPartition],
    fetcher: &Fetcher<'_>,
    wanted: &Wanted,
) -> Vec<PartitionRead> {
    let replica = fetcher.replica;
    loop {
        let resolved: Vec<Option<Arc<Partition>>> = partitions
            .iter()
            .map(|p| resolve(broker, &p.key, fetcher.version))
            .collect();
        // Subscribe before reading so that an append between the read and the wait is seen.
        let mut watchers: Vec<watch::Receiver<i64>> =
            resolved.iter().flatten().map(|p| p.subscribe()).collect();
        // The placeholders of an earlier round's reads are not in the response.
        if let Some(files) = &fetcher.ctx.file_records {
            files.lock().unwrap_or_else(|p| p.into_inner()).clear();
        }
        let reads = read_all(broker, partitions, &resolved, fetcher, wanted.response_max);
        let total: usize = reads.iter().map(|r| r.bytes).sum();
        let any_error = reads.iter().any(|r| r.data.error_code != 0);
        let redirect = reads.iter().any(|r| r.data.preferred_read_replica.0 >= 0);
        // A follower that has not been told the current high watermark (by this leader's
        // record of what it sent, or by its own v18 report, KIP-1166) is answered at once.
        let hw_news = replica.is_some_and(|id| {
            resolved
                .iter()
                .flatten()
                .any(|p| p.high_watermark_unsent(id))
        }) || follower_behind_high_watermark(partitions, &resolved, fetcher);
        let now = tokio::time::Instant::now();
        if total >= wanted.min_bytes
            || any_error
            || redirect
            || hw_news
            || now >= wanted.deadline
            || watchers.is_empty()
        {
            if let Some(id) = replica {
                for (read, p) in reads.iter().zip(&resolved) {
                    if let Some(p) = p {
                        p.record_high_watermark_sent(id, read.data.high_watermark);
                    }
                }
            }
            return reads;
        }
        let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
        let _ = tokio::time::timeout_at(wanted.deadline, changed).await;
    }
}

/// Whether a partition's follower reported (Fetch v18) a high watermark below the leader's.
fn follower_behind_high_watermark(
    partitions: &[FetchPartition],
    resolved: &[Option<Arc<Partition>>],
    fetcher: &Fetcher<'_>,
) -> bool {
    if fetcher.known_high_watermarks.is_empty() {
        return false;
    }
    partitions.iter().zip(resolved).any(|(req, p)| {
        let Some(p) = p else { return false };
        fetcher
            .known_high_watermarks
            .get(&req.key)
            .is_some_and(|known| *known < p.high_watermark())
    })
}

/// What the fetch session needs of each read to decide which partitions the response includes.
fn session_outcomes(reads: &[PartitionRead]) -> Vec<(PartKey, PartitionOutcome)> {
    reads
        .iter()
        .map(|r| {
            (
                r.key.clone(),
                PartitionOutcome {
                    has_records: r.bytes > 0,
                    redirected: r.data.preferred_read_replica.0 >= 0,
                    error_code: r.data.error_code,
                    diverging: r.data.diverging_epoch.epoch >= 0,
                    high_watermark: r.data.high_watermark,
                    log_start_offset: r.data.log_start_offset,
                },
            )
        })
        .collect()
}

/// The reads the session includes, grouped by topic in request order, counted in the metrics.
fn topic_responses(
    broker: &Broker,
    reads: Vec<PartitionRead>,
    include: Vec<bool>,
    fetcher: &Fetcher<'_>,
) -> Vec<FetchableTopicResponse> {
    let mut topics: Vec<FetchableTopicResponse> = Vec::new();
    for (read, include) in reads.into_iter().zip(include) {
        if !include {
            continue;
        }
        broker.metrics.error("Fetch", read.data.error_code);
        if read.bytes > 0 {
            broker.metrics.topic(
                &broker.metrics.bytes_out,
                &read.topic_name,
                read.bytes as u64,
            );
            if fetcher.replica.is_none() {
                broker
                    .metrics
                    .consumer_fetch(&read.topic_name, read.by_leader, read.bytes as u64);
            }
        }
        let same_topic = topics.last().is_some_and(|t: &FetchableTopicResponse| {
            if fetcher.version >= 13 {
                t.topic_id == read.key.topic_id
            } else {
                *t.topic == *read.key.topic
            }
        });
        if !same_topic {
            topics.push(
                FetchableTopicResponse::default()
                    .with_topic(TopicName(str_bytes(&read.key.topic)))
                    .with_topic_id(read.key.topic_id),
            );
        }
        if let Some(t) = topics.last_mut() {
            t.partitions.push(read.data);
        }
    }
    topics
}

fn resolve(broker: &Broker, key: &PartKey, version: i16) -> Option<Arc<Partition>> {
    if version >= 13 {
        let topic = broker.metadata.topic_by_id(key.topic_id)?;
        broker.replicas.partition_of(&topic.name, key.partition)
    } else {
        broker.replicas.partition_of(&key.topic, key.partition)
    }
}

fn read_all(
    broker: &Broker,
    partitions: &[FetchPartition],
    resolved: &[Option<Arc<Partition>>],
    fetcher: &Fetcher<'_>,
    response_max: usize,
) -> Vec<PartitionRead> {
    let mut total = 0usize;
    partitions
        .iter()
        .zip(resolved)
        .map(|(req, partition)| {
            let remaining = response_max.saturating_sub(total);
            let read = read_one(broker, req, partition.as_deref(), fetcher, remaining, total);
            total += read.bytes;
            read
        })
        .collect()
}

fn read_one(
    broker: &Broker,
    req: &FetchPartition,
    partition: Option<&Partition>,
    fetcher: &Fetcher<'_>,
    remaining: usize,
    so_far: usize,
) -> PartitionRead {
    let data = PartitionData::default()
        .with_partition_index(req.key.partition)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1))
        .with_aborted_transactions(fetcher.read_committed.then(Vec::new))
        .with_records(Some(Bytes::new()));
    let mut read = PartitionRead {
        key: req.key.clone(),
        topic_name: String::new(),
        data: PartitionData::default(),
        bytes: 0,
        by_leader: true,
    };
    let name = match partition {
        Some(p) => p.tp.topic.as_str(),
        None if fetcher.version < 13 => req.key.topic.as_str(),
        // An unknown topic id has no name to check: UNKNOWN_TOPIC_ID, as Kafka answers.
        None => "",
    };
    if !name.is_empty() && fetcher.denied(broker, name) {
        read.topic_name = name.to_string();
        read.data = data.with_error_code(ResponseError::TopicAuthorizationFailed.code());
        return read;
    }
    let Some(partition) = partition else {
        read.data = not_hosted(broker, req, fetcher.version, data);
        return read;
    };
    read.topic_name = partition.tp.topic.clone();
    read.by_leader = partition.is_leader();
    read.data = match offsets_or_answer(broker, partition, req, fetcher, read.by_leader, data) {
        ControlFlow::Break(answer) => answer,
        ControlFlow::Continue(data) if leader_throttled(broker, partition, fetcher) => data,
        ControlFlow::Continue(data) => {
            let (data, bytes) =
                read_records(broker, partition, req, fetcher, data, remaining, so_far);
            read.bytes = bytes;
            data
        }
    };
    read
}

/// A follower's read of a leader-throttled partition while the follower is outside the ISR and
/// this broker's leader side is over `leader.replication.throttled.rate` (KIP-73): answered
/// with offsets and no records, as Kafka's leader answers it.
fn leader_throttled(broker: &Broker, partition: &Partition, fetcher: &Fetcher<'_>) -> bool {
    fetcher.replica.is_some_and(|replica| {
        partition.is_leader()
            && broker.replication_throttles.holds_back(
                Side::Leader,
                &broker.metrics,
                &partition.tp.topic,
                partition.tp.partition,
                || partition.isr().contains(&replica),
            )
    })
}

/// Counts the record bytes a follower's fetch takes from leader-throttled partitions.
fn record_leader_throttled(broker: &Broker, reads: &[PartitionRead]) {
    let bytes: usize = reads
        .iter()
        .filter(|r| {
            r.by_leader
                && broker.replication_throttles.is_throttled(
                    Side::Leader,
                    &r.topic_name,
                    r.key.partition,
                )
        })
        .map(|r| r.bytes)
        .sum();
    broker
        .replication_throttles
        .record(Side::Leader, &broker.metrics, bytes as u64);
}

/// The answer for a partition this broker has no replica of: NOT_LEADER_OR_FOLLOWER (with
/// the current leader) when another broker hosts it, else an unknown topic or partition.
fn not_hosted(
    broker: &Broker,
    req: &FetchPartition,
    version: i16,
    data: PartitionData,
) -> PartitionData {
    let known = if version >= 13 {
        broker
            .metadata
            .topic_by_id(req.key.topic_id)
            .map(|t| t.name)
    } else {
        Some(req.key.topic.to_string())
    };
    let e = match known.map(|name| {
        let e = broker.missing_partition_error(&name, req.key.partition);
        (name, e)
    }) {
        Some((name, ResponseError::NotLeaderOrFollower)) => {
            return not_leader(broker, data, &name, req.key.partition);
        }
        Some((_, e @ ResponseError::KafkaStorageError)) => e,
        _ if version >= 13 => ResponseError::UnknownTopicId,
        _ => ResponseError::UnknownTopicOrPartition,
    };
    data.with_error_code(e.code())
}

/// NOT_LEADER_OR_FOLLOWER, with the partition's current leader and epoch.
fn not_leader(broker: &Broker, data: PartitionData, name: &str, partition: i32) -> PartitionData {
    let (leader, epoch) = broker.leader_of(name, partition);
    data.with_error_code(ResponseError::NotLeaderOrFollower.code())
        .with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch),
        )
}

/// `data` with the partition's offsets to read records into (`Continue`), or the answer
/// when no records are read (`Break`): a follower that may not serve the fetch, a leader
/// epoch error, a diverging epoch, or a redirect to the preferred read replica.
fn offsets_or_answer(
    broker: &Broker,
    partition: &Partition,
    req: &FetchPartition,
    fetcher: &Fetcher<'_>,
    by_leader: bool,
    data: PartitionData,
) -> ControlFlow<PartitionData, PartitionData> {
    let version = fetcher.version;
    let from_replica = fetcher.replica.is_some();
    // A follower serves consumers that know of follower reads, and only while in sync: an
    // out-of-sync follower sends the client back to the leader.
    if !by_leader && !follower_may_serve(from_replica, version, partition.is_in_sync()) {
        return ControlFlow::Break(not_leader(
            broker,
            data,
            &partition.tp.topic,
            req.key.partition,
        ));
    }
    let high_watermark = partition.high_watermark();
    let data = data
        .with_high_watermark(high_watermark)
        .with_last_stable_offset(partition.last_stable_offset())
        .with_log_start_offset(partition.log.log_start_offset());
    if let Some(e) = errors::leader_epoch_error(req.current_leader_epoch, partition.leader_epoch())
    {
        return ControlFlow::Break(data.with_error_code(e.code()));
    }
    if let Some((epoch, end_offset)) = diverging_epoch(partition, req, version) {
        return ControlFlow::Break(
            data.with_diverging_epoch(
                EpochEndOffset::default()
                    .with_epoch(epoch)
                    .with_end_offset(end_offset),
            ),
        );
    }
    if by_leader && !from_replica && version >= FOLLOWER_READ_VERSION {
        let preferred = preferred_read_replica(broker, partition, req.fetch_offset, fetcher);
        if preferred != broker.node_id {
            // Kafka's rule: no records when redirecting, the client refetches there.
            return ControlFlow::Break(data.with_preferred_read_replica(BrokerId(preferred)));
        }
    }
    ControlFlow::Continue(data)
}

/// Reads the partition's records for `req` within `remaining` bytes of the response into
/// `data`; returns it with the bytes read.
fn read_records(
    broker: &Broker,
    partition: &Partition,
    req: &FetchPartition,
    fetcher: &Fetcher<'_>,
    data: PartitionData,
    remaining: usize,
    so_far: usize,
) -> (PartitionData, usize) {
    let replica = fetcher.replica;
    let first = so_far == 0;
    let mut max = (req.max_bytes.max(0) as usize).min(remaining);
    // A remote-WAL follower's report (no data asked): offsets only, unless the leader finds it
    // behind the WAL path; then it gets its data here, classically.
    if let Some(id) = replica.filter(|_| req.max_bytes == 0) {
        if !broker
            .replication
            .on_replica_report(partition, id, req.fetch_offset)
        {
            return (data, 0);
        }
        max = (broker.config.replica_fetch_max_bytes().max(0) as usize).min(remaining);
    }
    if max == 0 && !first {
        return (data, 0);
    }
    // Read before the log read: a consumer read that overlapped a repair is checked again.
    let repair_generation = broker.integrity.repair_generation();
    let leave_in_files = fetcher.sendfile || so_far >= READ_IN_MEMORY_UP_TO;
    let in_files = match (&fetcher.ctx.file_records, replica) {
        (Some(files), None) if leave_in_files => read_in_files(
            broker,
            partition,
            req,
            fetcher,
            (max, first),
            repair_generation,
            files,
        ),
        _ => None,
    };
    let fetched = match in_files {
        Some(read) => read,
        None if replica.is_some() => partition
            .read_for_replica(req.fetch_offset, max, first)
            .map(|f| {
                // A follower never gets a corrupt batch as good data (its CRCs are checked
                // here, on replica fetches only).
                let records = broker.integrity.check_for_replica(&partition.tp, f.records);
                (records, f.log_start_offset, None)
            }),
        None => {
            let read = if fetcher.read_committed {
                partition
                    .read_committed(req.fetch_offset, max, first)
                    .map(|(f, aborted)| (f, Some(aborted)))
            } else {
                partition
                    .read(req.fetch_offset, max, first)
                    .map(|f| (f, None))
            };
            read.map(|(f, aborted)| {
                // A consumer never gets a batch this broker knows is corrupt.
                let records =
                    broker
                        .integrity
                        .hide_known(&partition.tp, f.records, repair_generation);
                (records, f.log_start_offset, aborted)
            })
        }
    };
    match fetched {
        Ok((records, log_start_offset, aborted)) => {
            let bytes = records.len();
            let mut data = data
                .with_log_start_offset(log_start_offset)
                .with_records(Some(records));
            if let Some(aborted) = aborted {
                data = data.with_aborted_transactions(Some(
                    aborted
                        .into_iter()
                        .map(|a| {
                            AbortedTransaction::default()
                                .with_producer_id(ProducerId(a.producer_id))
                                .with_first_offset(a.first_offset)
                        })
                        .collect(),
                ));
            }
            (data, bytes)
        }
        Err(e @ LogError::OffsetOutOfRange { .. }) => {
            (data.with_error_code(errors::log_error(&e).code()), 0)
        }
        Err(e) => {
            tracing::error!(partition = %partition.tp, error = %e, "fetch read failed");
            (data.with_error_code(errors::log_error(&e).code()), 0)
        }
    }
}

/// A partition's records as the response carries them: the record set, the log start
/// offset, and the aborted transactions of a read_committed read.
type Fetched = (Bytes, i64, Option<Vec<ferry_log::AbortedTxn>>);

/// Without `fetch.sendfile.enable`, a consumer's response holds this many bytes of records in
/// memory (read here, while the connection's writer sends earlier responses); the record sets
/// after them stay in their files and a plaintext writer sends them with `sendfile`. A 30 MB
/// response of many partitions then starts leaving after its first MB is read, not after all
/// of it, and most of it never passes through user space. 1 MiB (one partition's
/// `max.partition.fetch.bytes` by default) against 4 MiB: the same consume rates, 10-40 % less
/// broker CPU per GB at 6 partitions (docs/benchmarks.md, "Where the 1,000-partition cost is").
pub(crate) const READ_IN_MEMORY_UP_TO: usize = 1 << 20;

/// Record sets smaller than this are read into memory: a file piece costs a `sendfile` call of
/// its own, more than copying a few KB.
const FILE_PIECE_AT_LEAST: usize = 16 * 1024;

/// A consumer's read whose record set stays in the segment files (a placeholder of `files` in
/// the response, which a plaintext connection's writer sends with `sendfile`); `None` when
/// the partition has a batch known corrupt: the copying read then cuts before it. A read too
/// small for a file piece, planned while a repair wrote, or without room for a placeholder is
/// read here and cut like any consumer read. `(max, first)`: the byte limit and whether the first batch may exceed it.
///
/// A batch found corrupt (or repaired) after the plan is sent as the file holds it then, as a
/// copying read made just before the discovery would have sent it.
fn read_in_files(
    broker: &Broker,
    partition: &Partition,
    req: &FetchPartition,
    fetcher: &Fetcher<'_>,
    (max, first): (usize, bool),
    repair_generation: u64,
    files: &std::sync::Mutex<ferry_protocol::FileRecords>,
) -> Option<Result<Fetched, LogError>> {
    if broker.integrity.has_known(&partition.tp) {
        return None;
    }
    let planned = if fetcher.read_committed {
        partition
            .read_committed_slices(req.fetch_offset, max, first)
            .map(|(s, aborted)| (s, Some(aborted)))
    } else {
        partition
            .read_slices(req.fetch_offset, max, first)
            .map(|s| (s, None))
    };
    let (slices, aborted) = match planned {
        Ok(p) => p,
        Err(e) => return Some(Err(e)),
    };
    let regions = (slices.len >= FILE_PIECE_AT_LEAST
        && broker.integrity.repair_generation() == repair_generation)
        .then(|| {
            slices
                .slices
                .iter()
                .map(|s| ferry_protocol::FileRegion::new(s.file.clone(), s.position, s.len))
                .collect()
        });
    let placeholder = regions.and_then(|regions| {
        files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .placeholder(regions)
    });
    let records = match placeholder {
        Some(records) => records,
        None => match partition.checked(slices.read()) {
            Ok(records) => broker
                .integrity
                .hide_known(&partition.tp, records, repair_generation),
            Err(e) => return Some(Err(e)),
        },
    };
    Some(Ok((records, slices.log_start_offset, aborted)))
}

/// Whether a follower serves a fetch (KIP-392): only a consumer's (replicas fetch from the
/// leader), of a version that knows follower reads, while the follower is in the ISR.
fn follower_may_serve(from_replica: bool, version: i16, in_sync: bool) -> bool {
    !from_replica && version >= FOLLOWER_READ_VERSION && in_sync
}

/// The replica the leader tells a consumer at `fetch_offset` to read from: live, in-sync
/// followers holding the offset are the candidates, racks come from the image.
fn preferred_read_replica(
    broker: &Broker,
    partition: &Partition,
    fetch_offset: i64,
    fetcher: &Fetcher<'_>,
) -> i32 {
    let selector = broker.config.replica_selector();
    if selector == ReplicaSelector::Leader || fetcher.client_rack.is_empty() {
        return broker.node_id;
    }
    let image = broker.metadata.image();
    let rack_of = |id: i32| image.brokers.get(&id).and_then(|b| b.rack.as_deref());
    let live = |id: &i32| image.brokers.get(id).is_some_and(|b| !b.fenced);
    let candidates = partition.read_replica_candidates(fetch_offset);
    let followers: Vec<ReplicaView<'_>> = candidates
        .iter()
        .filter(|(id, _, _)| live(id))
        .map(|&(id, leo, lag)| ReplicaView {
            id,
            rack: rack_of(id),
            log_end_offset: leo,
            time_since_caught_up_ms: lag,
        })
        .collect();
    let leader = ReplicaView {
        id: broker.node_id,
        rack: rack_of(broker.node_id),
        log_end_offset: partition.log.log_end_offset(),
        time_since_caught_up_ms: 0,
    };
    selector.select(fetcher.client_rack, &leader, &followers)
}

/// Where a follower's log diverges from this leader's (KIP-320/595), for Fetch v12+ (which
/// carries the last fetched epoch): (epoch, end offset) to truncate to.
fn diverging_epoch(
    partition: &Partition,
    req: &FetchPartition,
    version: i16,
) -> Option<(i32, i64)> {
    if version < 12 {
        return None;
    }
    partition.diverging_epoch(req.last_fetched_epoch, req.fetch_offset)
}

/// True when a follower's fetch offset is its log end on this leader's history: same leader
/// epoch, no divergence. Only then does the leader record it (Kafka does the same).
fn follower_position_is_valid(partition: &Partition, req: &FetchPartition, version: i16) -> bool {
    errors::leader_epoch_error(req.current_leader_epoch, partition.leader_epoch()).is_none()
        && diverging_epoch(partition, req, version).is_none()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_follower_past_its_epochs_end_on_the_leader_diverges() {
        use ferry_replication::divergence;

        // The leader's history: epoch 3 ends at offset 100, epoch 5 is current (from 100).
        // (Kafka's answer for an epoch it never had: the largest epoch below it, and where the
        // next epoch starts.)
        let leader = |epoch: i32| match epoch {
            3 | 4 => Some((3, 100)),
            5 => Some((5, 180)),
            _ => None,
        };
        // A follower of the old epoch-3 leader that got up to 120 from it: diverged at 100, so
        // its fetch offset must not count for the high watermark.
        assert_eq!(divergence(leader, 120, 3), Some((3, 100)));
        // At the epoch's end, or on the current epoch: a valid position.
        assert_eq!(divergence(leader, 100, 3), None);
        assert_eq!(divergence(leader, 150, 5), None);
        // An epoch the leader never had (4): truncate to where its epoch 3 ends.
        assert_eq!(divergence(leader, 150, 4), Some((3, 100)));
        // No last fetched epoch (-1): nothing to check.
        assert_eq!(divergence(leader, 120, -1), None);
    }

    use super::*;

    #[test]
    fn follower_read_rules() {
        // (from a replica, version, follower in the ISR) -> served here
        let rows = [
            (false, 11, true, true),
            (false, 16, true, true),
            (false, 10, true, false),
            (false, 16, false, false),
            (true, 16, true, false),
        ];
        for (from_replica, version, in_sync, want) in rows {
            assert_eq!(
                follower_may_serve(from_replica, version, in_sync),
                want,
                "replica={from_replica} v{version} in_sync={in_sync}"
            );
        }
    }
}
