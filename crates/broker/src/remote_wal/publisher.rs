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

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use bytes::Bytes;
use ferry_wal::gc::{TombstonePublisher, WalGc};
use ferry_wal::leader_tracker::LeaderTracker;
use ferry_wal::metadata::{WalMetadataKey, WalMetadataRecord, WalSliceMetadata, METADATA_TOPIC};
use ferry_wal::uploader::MetadataPublisher;
use ferry_wal::WalError;
use uuid::Uuid;

use super::Shared;
use crate::host::HostHandles;
use crate::replica_manager::Partition;
use crate::topic_producer::{KeyedTopicProducer, TopicSpec};
use ferry_metrics::TrafficKind;

pub use crate::topic_producer::PUBLISH_TIMEOUT;

/// The purpose in the publisher's inter-broker client id; the receiving broker counts these
/// requests as `kind="wal_metadata"` traffic.
pub const CLIENT_PURPOSE: &str = ferry_metrics::PURPOSE_WAL_METADATA;

/// Encodes records as one v2 batch (offsets relative; the leader assigns them).
pub fn encode_batch(records: &[WalMetadataRecord], now_ms: i64) -> anyhow::Result<Bytes> {
    let records: Vec<_> = records
        .iter()
        .map(|r| (r.key.clone(), r.value.clone()))
        .collect();
    crate::topic_producer::encode_batch(&records, now_ms)
}

/// The publisher shared by the uploader (slices) and the GC (tombstones).
#[derive(Debug)]
pub struct MetadataProducer {
    shared: Arc<Shared>,
    producer: KeyedTopicProducer,
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
        let producer = KeyedTopicProducer::new(TopicSpec {
            topic: METADATA_TOPIC,
            partitions: shared.config.metadata_partitions,
            configs: metadata_topic_configs,
            purpose: CLIENT_PURPOSE,
            kind: TrafficKind::WalMetadata,
        });
        Self {
            shared,
            producer,
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
        if let Err(e) = self.producer.ensure_topic(host).await {
            tracing::debug!(error = %e, "cannot create the remote WAL metadata topic yet");
        }
    }

    /// Appends `records` to the metadata topic, each to its data partition's metadata
    /// partition, acknowledged as `remote.wal.metadata.acks` says (see the module doc).
    pub async fn send(
        &self,
        records: Vec<(WalMetadataKey, WalMetadataRecord)>,
    ) -> anyhow::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let host = self.host()?;
        self.producer.ensure_topic(host).await?;
        let n = self
            .producer
            .partitions(host)
            .context("metadata topic vanished")?;
        let records = records
            .into_iter()
            .map(|(k, r)| {
                let p = ferry_wal::metadata::metadata_partition(k.topic_id, k.partition, n);
                (p, (r.key, r.value))
            })
            .collect();
        let bytes = &self.shared.metrics.metadata_bytes_produced;
        self.producer
            .send(
                host,
                records,
                self.shared.config.metadata_acks_all,
                &|len| {
                    bytes.inc_by(len as u64);
                },
            )
            .await
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

/// The records whose partition this broker still leads at the epoch they were written under,
/// each with that partition, and how many were left out.
///
/// A leader demoted while its last objects were in flight would otherwise publish them. The
/// new epoch's followers skip such records anyway, and one with the base offset of a record of
/// the new leader takes that key in the compacted topic: the old leader's GC would tombstone
/// it later and take the new leader's slice out with it (docs/reliability.md). The check and
/// the publish are not atomic, so this narrows that window rather than closing it.
fn led_at_their_epoch(
    records: Vec<WalSliceMetadata>,
    hosted: impl Fn(Uuid, i32) -> Option<Arc<Partition>>,
) -> (Vec<(WalSliceMetadata, Arc<Partition>)>, usize) {
    let before = records.len();
    let kept: Vec<_> = records
        .into_iter()
        .filter_map(|m| {
            let p = hosted(m.topic_id, m.partition)?;
            let led =
                p.topic_id == m.topic_id && p.is_leader() && p.leader_epoch() == m.leader_epoch;
            led.then_some((m, p))
        })
        .collect();
    let left_out = before - kept.len();
    (kept, left_out)
}

#[async_trait]
impl MetadataPublisher for MetadataProducer {
    async fn publish(&self, records: Vec<WalSliceMetadata>) -> ferry_wal::Result<()> {
        let (led, left_out) =
            led_at_their_epoch(records, |id, p| self.shared.hosted_partition(id, p));
        if left_out > 0 {
            tracing::debug!(
                slices = left_out,
                "not publishing uploaded slices of partitions this broker no longer leads at their epoch"
            );
            self.shared
                .metrics
                .slices_unpublished_leadership_moved
                .inc_by(left_out as u64);
        }
        if led.is_empty() {
            return Ok(());
        }
        let (records, partitions): (Vec<_>, Vec<_>) = led.into_iter().unzip();
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
        for (m, p) in records.iter().zip(&partitions) {
            leader.on_published(&p.tp, m.last_offset + 1, now);
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
    use crate::remote_wal::test_support::{replicas, topic};

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

    fn slice() -> WalSliceMetadata {
        WalSliceMetadata {
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
        }
    }

    /// A demoted leader's last objects: their slices are not published once another broker
    /// leads the partition, nor after this broker leads it again at a later epoch; slices of
    /// the epoch it leads now are.
    #[test]
    fn slices_of_an_epoch_this_broker_no_longer_leads_are_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let rm = replicas(dir.path(), 1, &topic(1, 3));
        let topic_id = rm.partition_of("t", 0).unwrap().topic_id;
        let hosted = |_id, n| rm.partition_of("t", n);
        // The metadata of what is kept, and how many were left out.
        let publishable = |records| {
            let (kept, left_out) = led_at_their_epoch(records, hosted);
            let kept: Vec<WalSliceMetadata> = kept.into_iter().map(|(m, _)| m).collect();
            (kept, left_out)
        };
        let at = |epoch| WalSliceMetadata {
            topic_id,
            partition: 0,
            leader_epoch: epoch,
            ..slice()
        };
        let (kept, left_out) = publishable(vec![at(3)]);
        assert_eq!((kept, left_out), (vec![at(3)], 0));

        rm.ensure_topic(&topic(2, 4), ferry_log::LogConfig::default())
            .unwrap();
        let (kept, left_out) = publishable(vec![at(3)]);
        assert_eq!((kept, left_out), (vec![], 1), "another broker leads now");

        rm.ensure_topic(&topic(1, 5), ferry_log::LogConfig::default())
            .unwrap();
        let (kept, left_out) = publishable(vec![at(3), at(5)]);
        assert_eq!((kept, left_out), (vec![at(5)], 1), "led again, at epoch 5");

        let other_topic = WalSliceMetadata {
            topic_id: Uuid::from_u128(99),
            ..at(5)
        };
        let unhosted = WalSliceMetadata {
            partition: 7,
            ..at(5)
        };
        let (kept, left_out) = publishable(vec![other_topic, unhosted]);
        assert_eq!((kept, left_out), (vec![], 2), "not this broker's partition");
    }

    #[test]
    fn batches_decode_back_to_the_records() {
        let m = slice();
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
