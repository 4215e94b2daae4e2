//! The tier's metadata in the broker: every broker's view of every partition's segments in the
//! tier, read from `__remote_log_metadata`, and the publisher of the copier's records.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use bytes::Bytes;
use ferry_config::broker_config::BrokerConfig;
use ferry_tier::metadata::{TierMetadataEvent, METADATA_TOPIC};
use ferry_tier::TierMetadataSink;
use ferry_tier::{RemotePartitionState, RemoteSegmentMetadata, TierError, TierMetadataRecord};
use uuid::Uuid;

use crate::host::HostHandles;
use crate::topic_follower::FollowedRecords;
use crate::topic_producer::{KeyedTopicProducer, TopicSpec};

/// Every partition's segments in the tier, as read from the metadata topic (Kafka's
/// `RemoteLogMetadataCache`, for every partition at once: one record per segment is small).
#[derive(Debug, Default)]
pub struct TierMetadataCache {
    partitions: Mutex<HashMap<(Uuid, i32), RemotePartitionState>>,
    caught_up: AtomicBool,
}

impl TierMetadataCache {
    /// Whether the topic has been read to its end once: before that a leader would copy again
    /// what is already in the tier.
    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    /// One partition's segments (empty when the tier holds none).
    pub fn partition(&self, topic_id: Uuid, partition: i32) -> RemotePartitionState {
        self.lock()
            .get(&(topic_id, partition))
            .cloned()
            .unwrap_or_default()
    }

    /// `f` of one partition's segments, read in place (no copy of the state: the consumer
    /// fetch path asks this).
    pub fn with_partition<T>(
        &self,
        topic_id: Uuid,
        partition: i32,
        f: impl FnOnce(Option<&RemotePartitionState>) -> T,
    ) -> T {
        f(self.lock().get(&(topic_id, partition)))
    }

    /// Applies one record, as read or as just published by this broker (the follower reads it
    /// again later; a repeated state is accepted).
    pub fn apply(&self, event: TierMetadataEvent) {
        let key = match &event {
            TierMetadataEvent::Update(m) => (m.topic_id, m.partition),
            TierMetadataEvent::Tombstone(k) => (k.topic_id, k.partition),
            TierMetadataEvent::LogStart {
                topic_id,
                partition,
                ..
            } => (*topic_id, *partition),
        };
        let mut partitions = self.lock();
        let state = partitions.entry(key).or_default();
        if let Err(reason) = state.apply(event) {
            tracing::debug!(%reason, "tier metadata record not applied");
        }
        if state.is_empty() {
            partitions.remove(&key);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(Uuid, i32), RemotePartitionState>> {
        self.partitions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl FollowedRecords for TierMetadataCache {
    fn feed(&self, _partition: i32, records: Bytes, from: i64) -> i64 {
        let (recs, next) = ferry_log::keyed_records::decode(records, from).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "undecodable tier metadata batch skipped");
            (Vec::new(), from)
        });
        for (key, value) in recs {
            match TierMetadataRecord::decode(&key, value.as_deref()) {
                Ok(event) => self.apply(event),
                Err(e) => tracing::warn!(error = %e, "undecodable tier metadata record skipped"),
            }
        }
        next
    }

    fn caught_up(&self) {
        self.caught_up.store(true, Ordering::Release);
    }
}

/// Writes the copier's records to `__remote_log_metadata` with acks=all: a reader deletes
/// local data or serves a fetch on the strength of a record, so none may be lost with a
/// metadata leader.
#[derive(Debug)]
pub struct TierPublisher {
    host: HostHandles,
    producer: KeyedTopicProducer,
}

/// The configs `__remote_log_metadata` is created with: compacted, since every record of a
/// segment carries its whole metadata and the last one of a key is all a reader needs; the
/// tombstone of a deleted segment removes it.
fn metadata_topic_configs(_: &BrokerConfig) -> BTreeMap<String, String> {
    let mut configs = BTreeMap::new();
    configs.insert("cleanup.policy".to_string(), "compact".to_string());
    configs.insert("retention.ms".to_string(), "-1".to_string());
    configs
}

impl TierPublisher {
    pub fn new(host: HostHandles, partitions: i32) -> Self {
        Self {
            host,
            producer: KeyedTopicProducer::new(TopicSpec {
                topic: METADATA_TOPIC,
                partitions,
                configs: metadata_topic_configs,
                purpose: ferry_metrics::PURPOSE_TIER_METADATA,
                kind: ferry_metrics::TrafficKind::TierMetadata,
            }),
        }
    }
}

impl TierPublisher {
    /// Publishes (acks=all) that the partition's log starts at `offset` (DeleteRecords).
    pub async fn publish_log_start(
        &self,
        topic_id: Uuid,
        partition: i32,
        offset: i64,
    ) -> ferry_tier::Result<()> {
        let record = TierMetadataRecord::log_start(topic_id, partition, offset)?;
        self.send(topic_id, partition, record).await
    }

    async fn send(
        &self,
        topic_id: Uuid,
        partition: i32,
        record: TierMetadataRecord,
    ) -> ferry_tier::Result<()> {
        let failed = |e: anyhow::Error| TierError::Publish(format!("{e:#}"));
        self.producer
            .ensure_topic(&self.host)
            .await
            .map_err(failed)?;
        let n = self
            .producer
            .partitions(&self.host)
            .ok_or_else(|| TierError::Publish(format!("{METADATA_TOPIC} vanished")))?;
        let p = ferry_wal::metadata::metadata_partition(topic_id, partition, n);
        self.producer
            .send(
                &self.host,
                vec![(p, (record.key, record.value))],
                true,
                &|_| {},
            )
            .await
            .map_err(failed)
    }

    /// Creates the metadata topic if needed: the follower's "caught up" waits for a topic to
    /// read, and the copier for that.
    pub async fn ensure_topic(&self) -> anyhow::Result<()> {
        self.producer.ensure_topic(&self.host).await
    }
}

#[async_trait]
impl TierMetadataSink for TierPublisher {
    async fn publish(&self, meta: &RemoteSegmentMetadata) -> ferry_tier::Result<()> {
        let record = TierMetadataRecord::of(meta)?;
        self.send(meta.topic_id, meta.partition, record).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_tier::RemoteSegmentState;

    fn segment(id: u128, start: i64, end: i64) -> RemoteSegmentMetadata {
        RemoteSegmentMetadata {
            topic_id: Uuid::from_u128(9),
            partition: 2,
            segment_id: Uuid::from_u128(id),
            start_offset: start,
            end_offset: end,
            max_timestamp_ms: 1,
            broker_id: 1,
            event_time_ms: 1,
            size_bytes: 100,
            leader_epochs: vec![(0, start)],
            has_txn_index: false,
            has_producer_snapshot: false,
            state: RemoteSegmentState::CopyStarted,
        }
    }

    fn batch(metas: &[RemoteSegmentMetadata]) -> Bytes {
        let records: Vec<_> = metas
            .iter()
            .map(|m| {
                let r = TierMetadataRecord::of(m).unwrap();
                (r.key, r.value)
            })
            .collect();
        crate::topic_producer::encode_batch(&records, 1).unwrap()
    }

    #[test]
    fn the_cache_holds_what_the_topic_says_and_forgets_tombstoned_segments() {
        let cache = TierMetadataCache::default();
        let a = segment(1, 0, 9);
        let b = segment(2, 10, 19);
        let finished =
            |m: &RemoteSegmentMetadata| m.with_state(RemoteSegmentState::CopyFinished, 2);
        let next = cache.feed(0, batch(&[a.clone(), finished(&a), b.clone()]), 0);
        assert_eq!(next, 3);
        let state = cache.partition(a.topic_id, a.partition);
        assert_eq!(state.copied().len(), 1, "b's copy has not finished");
        assert_eq!(state.unfinished().len(), 1);
        // The follower reads from where it stopped: records before `from` are not applied again.
        let gone = a.with_state(RemoteSegmentState::DeleteFinished, 3);
        let next = cache.feed(
            0,
            batch(&[a.clone(), finished(&a), b.clone(), finished(&b), gone]),
            3,
        );
        assert_eq!(next, 5);
        let state = cache.partition(a.topic_id, a.partition);
        assert_eq!(
            state
                .copied()
                .iter()
                .map(|m| m.segment_id)
                .collect::<Vec<_>>(),
            vec![b.segment_id]
        );
        assert!(state.segment(a.segment_id).is_none());
        assert!(!cache.is_caught_up());
        cache.caught_up();
        assert!(cache.is_caught_up());
    }

    #[test]
    fn the_metadata_topic_is_compacted_and_kept() {
        let c = metadata_topic_configs(&BrokerConfig::default());
        assert_eq!(c.get("cleanup.policy").map(String::as_str), Some("compact"));
        assert_eq!(c.get("retention.ms").map(String::as_str), Some("-1"));
    }
}
