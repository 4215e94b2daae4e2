//! Publishes remote WAL metadata (RFC 0002) to `__remote_wal_log_metadata`: creates the topic on
//! first use, routes every record of one data partition to one metadata partition (chosen from
//! topic id and partition), appends locally when this broker leads that partition, and else
//! sends a Produce (acks=1) to its leader. A record lost here only means followers fall back to
//! the classic fetch for its range.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;
use ferry_cluster::BrokerId;
use ferry_wal::gc::{TombstonePublisher, WalGc};
use ferry_wal::metadata::{WalMetadataKey, WalMetadataRecord, WalSliceMetadata, METADATA_TOPIC};
use ferry_wal::uploader::MetadataPublisher;
use ferry_wal::WalError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use uuid::Uuid;

use super::leader::LeaderTracker;
use super::Shared;
use crate::broker::Broker;
use crate::inter_broker::Connection;
use crate::metrics::{inter_broker_client_id, TrafficKind};

/// How long one metadata produce may take before its connection is dropped.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The purpose in the publisher's inter-broker client id; the receiving broker counts these
/// requests as `kind="wal_metadata"` traffic.
pub const CLIENT_PURPOSE: &str = crate::metrics::PURPOSE_WAL_METADATA;

/// The metadata-topic partition of a data partition: all its records land in one partition, so
/// their order is kept (RFC 0002, "Ordering").
pub fn metadata_partition(topic_id: Uuid, partition: i32, partitions: i32) -> i32 {
    let mut key = [0u8; 20];
    key[..16].copy_from_slice(topic_id.as_bytes());
    key[16..].copy_from_slice(&partition.to_be_bytes());
    let n = u32::try_from(partitions.max(1)).unwrap_or(1);
    i32::try_from(crc32c::crc32c(&key) % n).unwrap_or(0)
}

/// Encodes records as one v2 batch (offsets relative; the leader assigns them).
pub fn encode_batch(records: &[WalMetadataRecord], now_ms: i64) -> anyhow::Result<Bytes> {
    // Keys and values repeat bucket, object key and topic id: metadata replicates across
    // racks, so it is worth compressing.
    crate::keyed_records::encode(
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
    /// One connection per metadata-partition leader.
    conns: tokio::sync::Mutex<HashMap<BrokerId, Connection>>,
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
            conns: tokio::sync::Mutex::new(HashMap::new()),
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

    fn broker(&self) -> anyhow::Result<Arc<Broker>> {
        self.shared
            .broker
            .get()
            .and_then(Weak::upgrade)
            .context("broker is shutting down")
    }

    /// Creates the metadata topic if needed (logged, not returned: the first publish retries).
    pub async fn ensure_topic_now(&self) {
        let Ok(broker) = self.broker() else { return };
        if let Err(e) = self.ensure_topic(&broker).await {
            tracing::debug!(error = %e, "cannot create the remote WAL metadata topic yet");
        }
    }

    /// Creates the metadata topic if it does not exist yet.
    async fn ensure_topic(&self, broker: &Arc<Broker>) -> anyhow::Result<()> {
        if broker.metadata.topic(METADATA_TOPIC).is_some() {
            return Ok(());
        }
        let _one = self.create.lock().await;
        if broker.metadata.topic(METADATA_TOPIC).is_some() {
            return Ok(());
        }
        let b = broker.clone();
        let partitions = self.shared.config.metadata_partitions;
        let created = tokio::task::spawn_blocking(move || {
            let mut configs = BTreeMap::new();
            configs.insert("cleanup.policy".to_string(), "compact".to_string());
            // Keys are never rewritten (one per slice), so compaction only drops what GC
            // tombstoned: it must see closed segments soon and not keep tombstones for a day.
            for (topic_key, broker_key) in [
                ("segment.bytes", "remote.wal.metadata.topic.segment.bytes"),
                ("segment.ms", "remote.wal.metadata.topic.segment.ms"),
                (
                    "delete.retention.ms",
                    "remote.wal.metadata.topic.delete.retention.ms",
                ),
            ] {
                configs.insert(topic_key.to_string(), b.config.raw(broker_key).to_string());
            }
            let rf = b.live_broker_count().clamp(1, 3) as i16;
            b.metadata
                .create_topic(METADATA_TOPIC, partitions, rf, configs)
                .map(|meta| {
                    let _ = b.open_topic(&meta);
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
            Err(_) if broker.metadata.topic(METADATA_TOPIC).is_some() => Ok(()),
            Err(e) => Err(anyhow::anyhow!("creating {METADATA_TOPIC}: {e}")),
        }
    }

    /// Appends `records` to the metadata topic, grouped by metadata partition.
    pub async fn send(
        &self,
        records: Vec<(WalMetadataKey, WalMetadataRecord)>,
    ) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let broker = self.broker()?;
        self.ensure_topic(&broker).await?;
        let n = broker
            .metadata
            .topic(METADATA_TOPIC)
            .map(|t| t.partitions)
            .context("metadata topic vanished")?;
        let mut by_partition: BTreeMap<i32, Vec<WalMetadataRecord>> = BTreeMap::new();
        for (k, r) in records {
            by_partition
                .entry(metadata_partition(k.topic_id, k.partition, n))
                .or_default()
                .push(r);
        }
        let now = broker.clock.now_ms();
        let mut remote: BTreeMap<BrokerId, Vec<(i32, Bytes)>> = BTreeMap::new();
        for (p, recs) in by_partition {
            let batch = encode_batch(&recs, now)?;
            self.shared
                .metrics
                .metadata_bytes_produced
                .inc_by(batch.len() as u64);
            match broker.replicas.partition_of(METADATA_TOPIC, p) {
                Some(part) if part.is_leader() => {
                    part.append(&batch)
                        .with_context(|| format!("appending to {METADATA_TOPIC}-{p}"))?;
                }
                _ => {
                    let (leader, _) = broker.leader_of(METADATA_TOPIC, p);
                    if leader < 0 {
                        anyhow::bail!("{METADATA_TOPIC}-{p} has no leader");
                    }
                    remote.entry(leader).or_default().push((p, batch));
                }
            }
        }
        for (leader, batches) in remote {
            self.produce_remote(&broker, leader, batches).await?;
        }
        Ok(())
    }

    async fn produce_remote(
        &self,
        broker: &Broker,
        leader: BrokerId,
        batches: Vec<(i32, Bytes)>,
    ) -> anyhow::Result<()> {
        let request = ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(REQUEST_TIMEOUT.as_millis() as i32)
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
                )]);
        let mut conns = self.conns.lock().await;
        if let std::collections::hash_map::Entry::Vacant(slot) = conns.entry(leader) {
            slot.insert(Connection::connect(broker, leader, TrafficKind::WalMetadata).await?);
        }
        let Some(conn) = conns.get_mut(&leader) else {
            anyhow::bail!("no connection to broker {leader}");
        };
        let client_id = inter_broker_client_id(broker.node_id, CLIENT_PURPOSE);
        let result =
            tokio::time::timeout(REQUEST_TIMEOUT, conn.produce(&request, &client_id)).await;
        let response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                conns.remove(&leader);
                return Err(e);
            }
            Err(_) => {
                conns.remove(&leader);
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

    #[test]
    fn one_data_partition_always_maps_to_one_metadata_partition() {
        let t = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
        let p = metadata_partition(t, 3, 16);
        assert!((0..16).contains(&p));
        // Stable (records of a partition keep their order) and independent of the offset.
        for _ in 0..3 {
            assert_eq!(metadata_partition(t, 3, 16), p);
        }
        // Spreads partitions of one topic over the metadata partitions.
        let used: std::collections::BTreeSet<i32> =
            (0..64).map(|i| metadata_partition(t, i, 16)).collect();
        assert!(used.len() >= 8, "{used:?}");
        assert_eq!(metadata_partition(t, 3, 1), 0);
        assert_eq!(metadata_partition(t, 3, 0), 0);
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
