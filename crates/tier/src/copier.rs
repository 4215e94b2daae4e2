//! A segment's way into the tier and out of it, with its metadata records in the order that
//! keeps readers safe (Kafka's `RemoteLogManager.copyLogSegment` and the expiration task):
//!
//! - copy: `CopyStarted` is published, the files are copied, then `CopyFinished`. A copy that
//!   fails deletes what it uploaded at once; one that dies half way (or whose deletion fails)
//!   leaves the segment `CopyStarted` (never served), and the leader deletes it later
//!   ([`crate::RemotePartitionState::unfinished`]).
//! - delete: `DeleteStarted` (no longer served), the objects deleted, then the tombstone.

use std::sync::Arc;

use async_trait::async_trait;
use ferry_common::SharedClock;
use ferry_log::TierCandidate;
use uuid::Uuid;

use crate::error::Result;
use crate::metadata::{RemoteSegmentMetadata, RemoteSegmentState};
use crate::segment_store::{LocalSegmentFiles, RemoteSegmentStore};

/// Where segment metadata goes: the broker's `__remote_log_metadata` topic. `publish` returns
/// once the record is durable (acks=all), since readers act on it.
#[async_trait]
pub trait TierMetadataSink: Send + Sync {
    async fn publish(&self, meta: &RemoteSegmentMetadata) -> Result<()>;
}

/// Copies and deletes segments of any partition.
pub struct SegmentCopier {
    store: RemoteSegmentStore,
    sink: Arc<dyn TierMetadataSink>,
    broker_id: i32,
    clock: SharedClock,
}

impl SegmentCopier {
    pub fn new(
        store: RemoteSegmentStore,
        sink: Arc<dyn TierMetadataSink>,
        broker_id: i32,
        clock: SharedClock,
    ) -> Self {
        Self {
            store,
            sink,
            broker_id,
            clock,
        }
    }

    /// Copies one closed segment of `topic_id`/`partition`; its finished metadata on success.
    pub async fn copy(
        &self,
        topic_id: Uuid,
        partition: i32,
        segment: &TierCandidate,
    ) -> Result<RemoteSegmentMetadata> {
        let files = LocalSegmentFiles {
            log: segment.log.clone(),
            offset_index: segment.offset_index.clone(),
            time_index: segment.time_index.clone(),
            txn_index: segment.txn_index.clone(),
            producer_snapshot: segment.producer_snapshot.clone(),
            leader_epoch_checkpoint: segment.leader_epoch_checkpoint.clone().into(),
        }
        .load()
        .await?;
        let started = RemoteSegmentMetadata {
            topic_id,
            partition,
            segment_id: Uuid::new_v4(),
            start_offset: segment.base_offset,
            end_offset: segment.end_offset,
            max_timestamp_ms: segment.max_timestamp_ms,
            broker_id: self.broker_id,
            event_time_ms: self.clock.now_ms(),
            size_bytes: segment.size_bytes,
            leader_epochs: segment.leader_epochs.clone(),
            has_txn_index: files.txn_index.is_some(),
            has_producer_snapshot: files.producer_snapshot.is_some(),
            state: RemoteSegmentState::CopyStarted,
        };
        self.sink.publish(&started).await?;
        if let Err(e) = self.store.copy(&started, &files).await {
            // What was uploaded goes now rather than after the cleanup's grace period; if this
            // fails too, the segment stays `CopyStarted` for that cleanup.
            if let Err(cleanup) = self.delete(&started).await {
                tracing::debug!(segment = %started.segment_id, error = %cleanup,
                    "a failed copy's objects are left for the cleanup");
            }
            return Err(e);
        }
        let finished = started.with_state(RemoteSegmentState::CopyFinished, self.clock.now_ms());
        self.sink.publish(&finished).await?;
        Ok(finished)
    }

    /// Deletes one segment from the tier (retention, a topic deletion, an unfinished copy).
    pub async fn delete(&self, meta: &RemoteSegmentMetadata) -> Result<()> {
        if meta.state != RemoteSegmentState::DeleteStarted {
            let started = meta.with_state(RemoteSegmentState::DeleteStarted, self.clock.now_ms());
            self.sink.publish(&started).await?;
        }
        self.store.delete(meta).await?;
        let done = meta.with_state(RemoteSegmentState::DeleteFinished, self.clock.now_ms());
        self.sink.publish(&done).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use ferry_common::{ManualClock, TopicPartition};
    use ferry_log::{LogConfig, PartitionLog};
    use ferry_objstore::{FaultKind, FaultyStore, MemoryStore, ObjectStore, Op};
    use ferry_test_support::Batches;

    use super::*;
    use crate::metadata::{TierMetadataEvent, TierMetadataRecord};
    use crate::{RemotePartitionState, TierReader};

    /// Encodes what it is given as the topic would hold it, and applies it to a state.
    #[derive(Default)]
    struct RecordingSink {
        records: Mutex<Vec<TierMetadataRecord>>,
    }

    #[async_trait]
    impl TierMetadataSink for RecordingSink {
        async fn publish(&self, meta: &RemoteSegmentMetadata) -> Result<()> {
            let rec = TierMetadataRecord::of(meta)?;
            self.records.lock().unwrap().push(rec);
            Ok(())
        }
    }

    impl RecordingSink {
        fn state(&self) -> RemotePartitionState {
            let mut s = RemotePartitionState::new();
            for r in self.records.lock().unwrap().iter() {
                let event = TierMetadataRecord::decode(&r.key, r.value.as_deref()).unwrap();
                s.apply(event).unwrap();
            }
            s
        }
        fn states(&self) -> Vec<Option<RemoteSegmentState>> {
            self.records
                .lock()
                .unwrap()
                .iter()
                .map(
                    |r| match TierMetadataRecord::decode(&r.key, r.value.as_deref()).unwrap() {
                        TierMetadataEvent::Update(m) => Some(m.state),
                        TierMetadataEvent::Tombstone(_) | TierMetadataEvent::LogStart { .. } => {
                            None
                        }
                    },
                )
                .collect()
        }
    }

    fn log_with_closed_segments(dir: &std::path::Path) -> PartitionLog {
        let clock: SharedClock = ManualClock::new(5_000);
        let config = LogConfig {
            segment_bytes: 4 * 1024,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(
            dir.to_path_buf(),
            TopicPartition::new("t", 0),
            config,
            true,
            clock,
        )
        .unwrap();
        for _ in 0..40 {
            let batch = Batches::of(2, |_| vec![b'x'; 300]).encode();
            log.append_as_leader(&batch, 3).unwrap();
        }
        log
    }

    #[tokio::test]
    async fn a_copied_segment_is_served_and_a_deleted_one_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_closed_segments(dir.path());
        let mem = Arc::new(MemoryStore::new());
        let sink = Arc::new(RecordingSink::default());
        let clock: SharedClock = ManualClock::new(9_000);
        let metrics = ferry_objstore::ObjStoreMetrics::new();
        let metered = ferry_objstore::MeteredStore::new(mem.clone(), metrics.clone());
        let store = RemoteSegmentStore::new(Arc::new(metered));
        let copier = SegmentCopier::new(store.clone(), sink.clone(), 1, clock);
        let topic_id = Uuid::from_u128(5);

        let candidates = log.tier_candidates(0, log.log_end_offset()).unwrap();
        assert!(candidates.len() >= 2);
        for c in &candidates {
            copier.copy(topic_id, 0, c).await.unwrap();
        }
        let state = sink.state();
        assert_eq!(state.copied().len(), candidates.len());
        let last = candidates.last().unwrap();
        assert_eq!(
            state.highest_copied_offset(&[(3, 0)], log.log_end_offset()),
            Some(last.end_offset)
        );
        // Every offset of the tier reads as the local log reads it.
        let reader = TierReader::new(store.clone(), 1 << 20);
        for offset in 0..=last.end_offset {
            let seg = state.segment_for(offset, Some(3)).unwrap();
            let got = reader.read(seg, offset, 1).await.unwrap();
            let want = log.read(offset, 1, i64::MAX, true).unwrap().records;
            assert_eq!(got, want, "offset {offset}");
        }

        let first = state.copied()[0].clone();
        copier.delete(&first).await.unwrap();
        let state = sink.state();
        assert_eq!(state.copied().len(), candidates.len() - 1);
        assert!(state.segment(first.segment_id).is_none());
        for kind in crate::SegmentFileKind::ALL {
            let key = RemoteSegmentStore::key(&first, kind);
            assert_eq!(mem.head(&key).await.unwrap(), None, "{key} deleted");
        }
        // The segment's files went in one batch request.
        assert_eq!(metrics.requests(Op::DeleteMany, "memory", "ok"), 1);
        assert_eq!(metrics.requests(Op::Delete, "memory", "ok"), 0);
    }

    #[tokio::test]
    async fn a_failed_copy_stays_started_and_is_never_served() {
        let dir = tempfile::tempdir().unwrap();
        let log = log_with_closed_segments(dir.path());
        let faulty = Arc::new(FaultyStore::new(MemoryStore::new(), 1));
        faulty.controller().fail_next(Op::Put, 1, FaultKind::Other);
        let sink = Arc::new(RecordingSink::default());
        let clock: SharedClock = ManualClock::new(9_000);
        let copier = SegmentCopier::new(
            RemoteSegmentStore::new(faulty.clone()),
            sink.clone(),
            1,
            clock,
        );
        let c = &log.tier_candidates(0, log.log_end_offset()).unwrap()[0];
        assert!(copier.copy(Uuid::from_u128(5), 0, c).await.is_err());
        // The failed copy deleted what it had uploaded, in Kafka's record order.
        assert_eq!(
            sink.states(),
            vec![
                Some(RemoteSegmentState::CopyStarted),
                Some(RemoteSegmentState::DeleteStarted),
                None,
            ]
        );
        assert_eq!(faulty.inner().len(), 0, "no object left behind");
        let state = sink.state();
        assert!(state.segment_for(c.base_offset, None).is_none());
        assert!(state.unfinished().is_empty());

        // A copy whose cleanup fails too stays unfinished, for the leader's later cleanup.
        faulty.controller().fail_next(Op::Put, 1, FaultKind::Other);
        faulty
            .controller()
            .fail_next(Op::Delete, 1, FaultKind::Other);
        assert!(copier.copy(Uuid::from_u128(5), 0, c).await.is_err());
        let unfinished: Vec<_> = sink.state().unfinished().into_iter().cloned().collect();
        assert_eq!(unfinished.len(), 1);
        copier.delete(&unfinished[0]).await.unwrap();

        // A retried copy gets a new segment id and is served.
        copier.copy(Uuid::from_u128(5), 0, c).await.unwrap();
        let state = sink.state();
        assert!(state.unfinished().is_empty());
        let served = state.segment_for(c.base_offset, None).unwrap();
        assert_ne!(served.segment_id, unfinished[0].segment_id);
    }
}
