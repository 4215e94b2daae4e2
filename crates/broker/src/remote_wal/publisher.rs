//! Publishes remote WAL metadata (RFC 0002) to `__remote_wal_log_metadata`: creates the topic on
//! first use, routes every record of one data partition to one metadata partition (chosen from
//! topic id and partition), appends locally when this broker leads that partition, and else
//! sends a Produce to its leader.
//!
//! **Durability: `remote.wal.metadata.acks`, `1` by default.** [`MetadataPublisher`]'s
//! contract lets the publisher choose; the uploader relies only on "`Ok`: followers can find the
//! records", which both settings give while the metadata leader lives.
//!
//! - `all`: a publish returns `Ok` once every metadata partition it wrote to has its high
//!   watermark past the records: a local append waits on the partition's watch (no polling) as
//!   the delayed-produce purgatory does, with Kafka's `min.insync.replicas` checks; a remote
//!   leader is sent `acks=-1` and answers from its purgatory. Both are bounded by
//!   [`PUBLISH_TIMEOUT`]; a timeout, a lost leadership or a refusal is an error.
//! - `1` (default): `Ok` once the metadata partition's leader appended the records.
//!
//! Why `1` is safe: data is never at stake. The leader's log holds every byte; metadata only
//! tells followers where a copy is. A record lost because the metadata leader failed before
//! replicating it costs exactly what any WAL failure costs: the follower lacks data published a
//! fallback window ago and the leader's stall rule (`leader.rs`) serves it by the classic fetch;
//! the object stays tracked by this broker's GC (from the acknowledgement) and is collected by
//! replica progress as usual, or as an orphan after a restart. So acks=all buys only one saved
//! fallback window per metadata-leader failover.
//!
//! Why not `all` by default: it waits one metadata replication round trip per publish, inside the
//! uploader's publish order (publishes of one uploader wait one after another), so on a loaded
//! cluster publication falls behind and the stall rule sends followers to the classic fetch. On
//! the shared 2-core test machine `tests/e2e/test_remote_wal.py` (cross-rack bytes below 3% of
//! produced) failed 2 of 4 runs with `all` (about 25 MB by the classic fetch) against 0 of 4 with
//! `1`, but later 2 of 2 with `1` too: the load, not the setting, dominated, so this is a reason,
//! not a measurement. Letting publishes of one uploader wait concurrently (append in order, then
//! wait outside the order) would remove the cost; it needs a change to the uploader's publish
//! step.
//!
//! Either way an error makes the uploader hand the ranges to the classic fetch (nothing is
//! retried here). Followers may read a record from their local replica before it is committed;
//! one that a failover then truncates only sends them to the classic fetch for its range.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;
use ferry_cluster::BrokerId;
use ferry_wal::gc::{TombstonePublisher, WalGc};
use ferry_wal::leader_tracker::LeaderTracker;
use ferry_wal::metadata::{WalMetadataKey, WalMetadataRecord, WalSliceMetadata, METADATA_TOPIC};
use ferry_wal::uploader::MetadataPublisher;
use ferry_wal::WalError;
use futures::FutureExt;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;

use super::Shared;
use crate::host::HostHandles;
use crate::inter_broker::Connection;
use crate::replica_manager::{CommitStatus, Partition};
use ferry_metrics::{inter_broker_client_id, TrafficKind};

/// How long a publish with `remote.wal.metadata.acks = all` waits for the metadata partitions'
/// high watermarks (the Produce `timeout_ms` of a remote leader).
pub const PUBLISH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one metadata produce may take before its connection is dropped: longer than the
/// remote leader's own wait, so its REQUEST_TIMED_OUT answer arrives first.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(7);
/// The purpose in the publisher's inter-broker client id; the receiving broker counts these
/// requests as `kind="wal_metadata"` traffic.
pub const CLIENT_PURPOSE: &str = ferry_metrics::PURPOSE_WAL_METADATA;

/// Encodes records as one v2 batch (offsets relative; the leader assigns them).
pub fn encode_batch(records: &[WalMetadataRecord], now_ms: i64) -> anyhow::Result<Bytes> {
    // Keys and values repeat bucket, object key and topic id: metadata replicates across
    // racks, so it is worth compressing.
    ferry_log::keyed_records::encode(
        records.iter().map(|r| (r.key.clone(), r.value.clone())),
        now_ms,
        Compression::Lz4,
    )
    .map_err(|e| anyhow::anyhow!("metadata records: {e}"))
}

/// The publisher shared by the uploader (slices) and the GC (tombstones).
#[derive(Debug)]
pub struct MetadataProducer {
    shared: Arc<Shared>,
    /// One connection per metadata-partition leader, each used by one request at a time
    /// (requests to different leaders run concurrently).
    conns: std::sync::Mutex<HashMap<BrokerId, Arc<tokio::sync::Mutex<Option<Connection>>>>>,
    create: tokio::sync::Mutex<()>,
    /// This broker's GC learns of its objects as soon as their metadata is acknowledged: the
    /// metadata reader may see them later (a lagging local replica), and the orphan sweep must
    /// not take a published object for an orphan meanwhile.
    gc: std::sync::OnceLock<WalGc>,
    /// The leader's stall rule times followers against what was published (`leader.rs`).
    leader: Arc<std::sync::Mutex<LeaderTracker>>,
    clock: ferry_common::SharedClock,
}

impl MetadataProducer {
    pub(super) fn new(
        shared: Arc<Shared>,
        leader: Arc<std::sync::Mutex<LeaderTracker>>,
        clock: ferry_common::SharedClock,
    ) -> Self {
        Self {
            shared,
            conns: std::sync::Mutex::new(HashMap::new()),
            create: tokio::sync::Mutex::new(()),
            gc: std::sync::OnceLock::new(),
            leader,
            clock,
        }
    }

    /// Reports every acknowledged publish to `gc` (see the field).
    pub(super) fn track_published_in(&self, gc: WalGc) {
        let _ = self.gc.set(gc);
    }

    fn host(&self) -> anyhow::Result<&HostHandles> {
        self.shared
            .host
            .as_ref()
            .context("no broker to publish through")
    }

    /// Creates the metadata topic if needed (logged, not returned: the first publish retries).
    pub async fn ensure_topic_now(&self) {
        let Ok(host) = self.host() else { return };
        if let Err(e) = self.ensure_topic(host).await {
            tracing::debug!(error = %e, "cannot create the remote WAL metadata topic yet");
        }
    }

    /// Creates the metadata topic if it does not exist yet.
    async fn ensure_topic(&self, host: &HostHandles) -> anyhow::Result<()> {
        if host.metadata.topic(METADATA_TOPIC).is_some() {
            return Ok(());
        }
        let _one = self.create.lock().await;
        if host.metadata.topic(METADATA_TOPIC).is_some() {
            return Ok(());
        }
        let h = host.clone();
        let partitions = self.shared.config.metadata_partitions;
        let created = tokio::task::spawn_blocking(move || {
            let configs = metadata_topic_configs(&h.config);
            let rf = h.live_broker_count().clamp(1, 3) as i16;
            h.metadata
                .create_topic(METADATA_TOPIC, partitions, rf, configs)
                .map(|meta| {
                    let _ = h.open_topic(&meta.name);
                })
        })
        .await
        .context("metadata topic creation task")?;
        match created {
            Ok(()) => {
                tracing::info!(partitions, "created {METADATA_TOPIC}");
                Ok(())
            }
            // Another broker won the race.
            Err(_) if host.metadata.topic(METADATA_TOPIC).is_some() => Ok(()),
            Err(e) => Err(anyhow::anyhow!("creating {METADATA_TOPIC}: {e}")),
        }
    }

    /// Appends `records` to the metadata topic, grouped by metadata partition, acknowledged as
    /// `remote.wal.metadata.acks` says (see the module doc).
    pub async fn send(
        &self,
        records: Vec<(WalMetadataKey, WalMetadataRecord)>,
    ) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let host = self.host()?;
        self.ensure_topic(host).await?;
        let replicas = host.replicas().context("broker is shutting down")?;
        let n = host
            .metadata
            .topic(METADATA_TOPIC)
            .map(|t| t.partitions)
            .context("metadata topic vanished")?;
        let mut by_partition: BTreeMap<i32, Vec<WalMetadataRecord>> = BTreeMap::new();
        for (k, r) in records {
            by_partition
                .entry(ferry_wal::metadata::metadata_partition(
                    k.topic_id,
                    k.partition,
                    n,
                ))
                .or_default()
                .push(r);
        }
        let now = host.clock.now_ms();
        let deadline = tokio::time::Instant::now() + PUBLISH_TIMEOUT;
        let mut remote: BTreeMap<BrokerId, Vec<(i32, Bytes)>> = BTreeMap::new();
        let mut local = Vec::new();
        for (p, recs) in by_partition {
            let batch = encode_batch(&recs, now)?;
            self.shared
                .metrics
                .metadata_bytes_produced
                .inc_by(batch.len() as u64);
            match replicas.partition_of(METADATA_TOPIC, p) {
                Some(part) if part.is_leader() => {
                    let committed = if self.shared.config.metadata_acks_all {
                        let min_isr = min_insync_replicas(host);
                        append_committed(part, batch, min_isr, deadline).left_future()
                    } else {
                        let appended = part.append(&batch).map(|_| ()).map_err(Into::into);
                        futures::future::ready(appended).right_future()
                    };
                    local.push(async move {
                        committed
                            .await
                            .with_context(|| format!("publishing to {METADATA_TOPIC}-{p}"))
                    });
                }
                _ => {
                    let (leader, _) = host.metadata.leader_of(METADATA_TOPIC, p);
                    if leader < 0 {
                        anyhow::bail!("{METADATA_TOPIC}-{p} has no leader");
                    }
                    remote.entry(leader).or_default().push((p, batch));
                }
            }
        }
        // Local waits and remote produces all run at once; each is bounded by the deadline.
        let remote = remote
            .into_iter()
            .map(|(leader, batches)| self.produce_remote(host, leader, batches));
        let (local, remote) = futures::join!(
            futures::future::join_all(local),
            futures::future::join_all(remote)
        );
        local.into_iter().chain(remote).collect()
    }

    async fn produce_remote(
        &self,
        host: &HostHandles,
        leader: BrokerId,
        batches: Vec<(i32, Bytes)>,
    ) -> anyhow::Result<()> {
        let request = produce_request(batches, self.shared.config.metadata_acks_all);
        let slot = self
            .conns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(leader)
            .or_default()
            .clone();
        let mut conn = slot.lock().await;
        if conn.is_none() {
            *conn = Some(host.peers.connect(leader, TrafficKind::WalMetadata).await?);
        }
        let Some(c) = conn.as_mut() else {
            anyhow::bail!("no connection to broker {leader}");
        };
        let client_id = inter_broker_client_id(host.node_id, CLIENT_PURPOSE);
        let result = tokio::time::timeout(REQUEST_TIMEOUT, c.produce(&request, &client_id)).await;
        let response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                *conn = None;
                return Err(e);
            }
            Err(_) => {
                *conn = None;
                anyhow::bail!("produce to broker {leader} timed out");
            }
        };
        for t in &response.responses {
            for p in &t.partition_responses {
                if p.error_code != 0 {
                    anyhow::bail!(
                        "{METADATA_TOPIC}-{} refused by broker {leader}: error {}",
                        p.index,
                        p.error_code
                    );
                }
            }
        }
        Ok(())
    }
}

/// The configs `__remote_wal_log_metadata` is created with.
fn metadata_topic_configs(
    config: &ferry_config::broker_config::BrokerConfig,
) -> BTreeMap<String, String> {
    let mut configs = BTreeMap::new();
    // Compaction drops what the GC tombstoned; time-based retention is the backstop for records
    // whose objects nobody collected (RFC 0002, "Bounding the topic's size").
    configs.insert("cleanup.policy".to_string(), "compact,delete".to_string());
    // Keys are never rewritten (one per slice), so compaction only drops what GC tombstoned: it
    // must see closed segments soon and not keep tombstones for a day.
    for (topic_key, broker_key) in [
        ("retention.ms", "remote.wal.metadata.topic.retention.ms"),
        ("segment.bytes", "remote.wal.metadata.topic.segment.bytes"),
        ("segment.ms", "remote.wal.metadata.topic.segment.ms"),
        (
            "delete.retention.ms",
            "remote.wal.metadata.topic.delete.retention.ms",
        ),
    ] {
        configs.insert(topic_key.to_string(), config.raw(broker_key).to_string());
    }
    configs
}

/// The Produce of metadata batches to a remote leader: acks=all (answered by its purgatory
/// within [`PUBLISH_TIMEOUT`]) or acks=1.
fn produce_request(batches: Vec<(i32, Bytes)>, acks_all: bool) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(if acks_all { -1 } else { 1 })
        .with_timeout_ms(i32::try_from(PUBLISH_TIMEOUT.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(StrBytes::from_static_str(METADATA_TOPIC)))
            .with_partition_data(
                batches
                    .into_iter()
                    .map(|(p, b)| {
                        PartitionProduceData::default()
                            .with_index(p)
                            .with_records(Some(b))
                    })
                    .collect(),
            )])
}

/// The metadata topic's `min.insync.replicas` (the broker default unless overridden).
fn min_insync_replicas(host: &HostHandles) -> usize {
    let image = host.metadata.image();
    image
        .topic(METADATA_TOPIC)
        .and_then(|t| {
            ferry_config::topic_config::effective(&host.config, &t.configs, "min.insync.replicas")
        })
        .and_then(|(v, _)| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
}

/// Appends `batch` to the metadata partition `part` led here, at once (so publishes keep their
/// order), and returns what then waits, event-driven, until the high watermark passes it (acks=all,
/// with Kafka's `min.insync.replicas` checks before and after), the leadership at the epoch of
/// the append is lost, or `deadline` passes.
fn append_committed(
    part: Arc<Partition>,
    batch: Bytes,
    min_isr: usize,
    deadline: tokio::time::Instant,
) -> impl std::future::Future<Output = anyhow::Result<()>> {
    let appended = (|| {
        let isr = part.isr().len();
        if isr < min_isr {
            anyhow::bail!("the ISR has {isr} members, below min.insync.replicas {min_isr}");
        }
        let epoch = part.leader_epoch();
        let info = part.append(&batch)?;
        Ok((epoch, info.last_offset + 1))
    })();
    async move {
        let (epoch, end) = appended?;
        // Subscribed before the first look, so a move in between is not missed.
        let mut changes = part.subscribe();
        loop {
            match part.commit_status(epoch, end) {
                CommitStatus::Committed => break,
                CommitStatus::LeadershipLost => {
                    anyhow::bail!("the leadership moved before the records were committed")
                }
                CommitStatus::Pending => {}
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => anyhow::bail!("the partition was deleted"),
                Err(_) => anyhow::bail!(
                    "the in-sync replicas did not acknowledge the records within {PUBLISH_TIMEOUT:?}"
                ),
            }
        }
        let isr = part.isr().len();
        if isr < min_isr {
            anyhow::bail!(
                "committed while the ISR had shrunk to {isr}, below min.insync.replicas {min_isr}"
            );
        }
        Ok(())
    }
}

#[async_trait]
impl MetadataPublisher for MetadataProducer {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> ferry_wal::Result<()> {
        let mut out = Vec::with_capacity(records.len());
        for m in &records {
            out.push((m.key(), WalMetadataRecord::upsert(m)?));
        }
        self.send(out)
            .await
            .map_err(|e| WalError::Invalid(format!("publishing remote WAL metadata: {e:#}")))?;
        self.shared.metrics.on_published(&records);
        if let Some(gc) = self.gc.get() {
            gc.on_published(&records);
        }
        let now = self.clock.now_ms();
        let mut leader = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        for m in &records {
            if let Some(name) = self.shared.topic_name(m.topic_id) {
                let tp = ferry_common::TopicPartition::new(name, m.partition);
                leader.on_published(&tp, m.last_offset + 1, now);
            }
        }
        Ok(())
    }
}

#[async_trait]
impl TombstonePublisher for MetadataProducer {
    async fn publish_tombstones(&self, keys: Vec<WalMetadataKey>) -> ferry_wal::Result<()> {
        let mut out = Vec::with_capacity(keys.len());
        for k in &keys {
            out.push((*k, WalMetadataRecord::tombstone(k)?));
        }
        self.send(out)
            .await
            .map_err(|e| WalError::Invalid(format!("publishing remote WAL tombstones: {e:#}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    /// `remote.wal.metadata.acks = all` holds also when the metadata partition is led
    /// elsewhere.
    #[test]
    fn a_remote_metadata_leader_is_asked_for_acks_all() {
        let r = produce_request(vec![(3, Bytes::from_static(b"x"))], true);
        assert_eq!(r.acks, -1);
        let r = produce_request(vec![(3, Bytes::from_static(b"x"))], false);
        assert_eq!(r.acks, 1, "remote.wal.metadata.acks = 1");
        assert_eq!(
            r.timeout_ms,
            i32::try_from(PUBLISH_TIMEOUT.as_millis()).unwrap()
        );
    }

    /// Led here: the publish returns once every in-sync replica holds the records, not at the
    /// local append (acks=1 did), so a metadata-leader failover cannot lose what was reported
    /// as published.
    #[tokio::test]
    async fn a_local_publish_returns_once_the_isr_holds_the_records() {
        use crate::remote_wal::test_support::{batch, replicas, topic};
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let far = tokio::time::Instant::now() + Duration::from_secs(3_600);
        let publish = tokio::spawn(append_committed(p.clone(), batch(2), 2, far));
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(p.log.log_end_offset(), 2, "appended at once");
        assert!(!publish.is_finished(), "no follower holds the records yet");
        p.record_follower_fetch(2, 2);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !publish.is_finished(),
            "follower 3 is in the ISR and lacks them"
        );
        p.record_follower_fetch(3, 2);
        publish.await.unwrap().unwrap();
    }

    /// A publish that cannot be acknowledged is an error (the uploader sends its ranges to the
    /// classic fetch): the ISR does not catch up by the deadline, the leadership moves, or the
    /// ISR is below `min.insync.replicas` before the append.
    #[tokio::test]
    async fn a_local_publish_not_acknowledged_is_an_error() {
        use crate::remote_wal::test_support::{batch, replicas, topic};
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let now = tokio::time::Instant::now();
        let timed_out = append_committed(p.clone(), batch(1), 1, now).await;
        assert!(timed_out.is_err());

        let far = now + Duration::from_secs(3_600);
        let waiting = tokio::spawn(append_committed(p.clone(), batch(1), 1, far));
        tokio::task::yield_now().await;
        rm.ensure_topic(&topic(2, 1), ferry_log::LogConfig::default())
            .unwrap();
        let lost = waiting.await.unwrap().unwrap_err().to_string();
        assert!(lost.contains("leadership"), "{lost}");

        let rm = replicas(&dir.path().join("b"), 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let refused = append_committed(p.clone(), batch(1), 4, far).await;
        assert!(refused.is_err());
        assert_eq!(p.log.log_end_offset(), 0, "nothing appended");
    }

    /// RFC 0002's backstop: compaction plus a time-based retention of hours, so records whose
    /// objects nobody collected still leave the topic.
    #[test]
    fn the_metadata_topic_is_compacted_and_time_bounded() {
        let c = ferry_config::broker_config::BrokerConfig::default();
        let configs = metadata_topic_configs(&c);
        let get = |k: &str| configs.get(k).map(String::as_str);
        assert_eq!(get("cleanup.policy"), Some("compact,delete"));
        assert_eq!(get("retention.ms"), Some("7200000"));
        let log = ferry_config::topic_config::log_config(&c, &configs);
        assert_eq!(log.retention_ms, 7_200_000, "the log deletes by time too");
        assert!(log.compact);
    }

    #[test]
    fn batches_decode_back_to_the_records() {
        let m = WalSliceMetadata {
            bucket: "b".into(),
            object_key: "wal/1/0000000000001-0000000000.wal".into(),
            byte_position: 0,
            byte_length: 10,
            topic_id: Uuid::from_u128(7),
            partition: 1,
            base_offset: 5,
            last_offset: 9,
            leader_epoch: 2,
            slice_crc: 1,
            object_size: 100,
            uploader_broker_id: 1,
            upload_time_ms: 1,
        };
        let recs = vec![
            WalMetadataRecord::upsert(&m).unwrap(),
            WalMetadataRecord::tombstone(&m.key()).unwrap(),
        ];
        let mut batch = encode_batch(&recs, 1).unwrap();
        let sets = kafka_protocol::records::RecordBatchDecoder::decode_all(&mut batch).unwrap();
        let decoded: Vec<_> = sets
            .into_iter()
            .flat_map(|s| s.records)
            .map(|r| WalMetadataRecord::decode(&r.key.unwrap(), r.value.as_deref()).unwrap())
            .collect();
        assert_eq!(
            decoded,
            vec![
                ferry_wal::metadata::WalMetadataEvent::Upsert(m.clone()),
                ferry_wal::metadata::WalMetadataEvent::Tombstone(m.key())
            ]
        );
    }
}
