//! The follower side: the [`FollowerSink`] the WAL fetcher appends through (the replica
//! manager's partitions), and the per-partition choice between the WAL path and the classic
//! fetch (`ferry_wal::mode_tracker`), which sets each partition's wal-mode flag for the replica
//! fetcher.
//!
//! In WAL mode the replica fetcher still reports the log end offset to the leader (so the high
//! watermark and acks=all keep their meaning) but asks for no record data. A partition leaves WAL
//! mode for the classic fetch when the WAL fetcher reports a range it cannot serve (metadata
//! gap, unreadable object, failed append) or when it has stalled (no progress for
//! `remote.wal.fallback.ms` while the leader's high watermark is ahead of it, i.e. it fell out of
//! the ISR); it returns once its log end reaches the end of that range. (A follower still in the
//! ISR that stalls is caught by the leader, which then answers its reports with data; see
//! `ferry_wal::leader_tracker`.)

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use ferry_common::TopicPartition;
use ferry_wal::fetcher::{FetchReport, FollowerSink};
use ferry_wal::follower::FollowerPartition;
use ferry_wal::mode_tracker::{Mode, ModeTracker};
use ferry_wal::{SliceBytes, WalError};
use uuid::Uuid;

use super::Shared;
use crate::replica_manager::{Partition, Role};

/// Finds a hosted partition by topic id.
pub type PartitionResolver = Arc<dyn Fn(Uuid, i32) -> Option<Arc<Partition>> + Send + Sync>;

/// The replica manager as the WAL fetcher sees it.
pub struct ReplicaSink {
    shared: Arc<Shared>,
    resolve: PartitionResolver,
}

impl std::fmt::Debug for ReplicaSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaSink").finish_non_exhaustive()
    }
}

impl ReplicaSink {
    /// Over the broker's replica manager, for remote-WAL topics only.
    pub(super) fn new(shared: Arc<Shared>) -> Self {
        let s = shared.clone();
        let resolve: PartitionResolver =
            Arc::new(move |topic_id, partition| s.hosted_partition(topic_id, partition));
        Self { shared, resolve }
    }

    #[cfg(test)]
    pub(super) fn with_resolver(shared: Arc<Shared>, resolve: PartitionResolver) -> Self {
        Self { shared, resolve }
    }

    fn partition(&self, topic_id: Uuid, partition: i32) -> Option<Arc<Partition>> {
        let p = (self.resolve)(topic_id, partition)?;
        (p.topic_id == topic_id && matches!(p.role(), Role::Follower { leader } if leader >= 0))
            .then_some(p)
    }
}

#[async_trait]
impl FollowerSink for ReplicaSink {
    fn partition_state(&self, topic_id: Uuid, partition: i32) -> Option<FollowerPartition> {
        let p = self.partition(topic_id, partition)?;
        Some(FollowerPartition {
            log_end_offset: p.log.log_end_offset(),
            leader_epoch: p.leader_epoch(),
            log_validated: p.log_validated(),
        })
    }

    fn may_follow_later(&self, topic_id: Uuid, partition: i32) -> bool {
        (self.resolve)(topic_id, partition).is_none_or(|p| p.topic_id != topic_id || !p.is_leader())
    }

    async fn append_as_follower(
        &self,
        topic_id: Uuid,
        partition: i32,
        leader_epoch: i32,
        records: SliceBytes,
    ) -> ferry_wal::Result<()> {
        let p = self.partition(topic_id, partition).ok_or_else(|| {
            WalError::Invalid(format!("{topic_id}-{partition} is not followed here"))
        })?;
        let len = records.len() as u64;
        let appended = tokio::task::spawn_blocking(move || {
            let parts: Vec<&[u8]> = records.pieces().iter().map(|b| &b[..]).collect();
            p.append_as_follower_at(leader_epoch, &parts)
        })
        .await
        .map_err(|e| WalError::Invalid(format!("append task: {e}")))?;
        appended.map_err(|e| WalError::Invalid(format!("follower append refused: {e}")))?;
        self.shared.metrics.follower_bytes("wal", len);
        Ok(())
    }
}

/// The tracker with the partitions' flags: what the WAL glue drives.
#[derive(Debug)]
pub struct FollowerModes {
    tracker: Mutex<ModeTracker>,
}

impl FollowerModes {
    pub fn new(fallback_ms: i64) -> Self {
        Self {
            tracker: Mutex::new(ModeTracker::new(fallback_ms)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ModeTracker> {
        self.tracker.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes the tracked set equal the remote-WAL partitions this broker follows (after an image
    /// change), and puts new ones, and ones under a new leader epoch, in WAL mode.
    pub fn sync(&self, followed: &[Arc<Partition>], now_ms: i64) {
        let mut t = self.lock();
        let wanted: std::collections::HashSet<&TopicPartition> =
            followed.iter().map(|p| &p.tp).collect();
        for tp in t.followed() {
            if !wanted.contains(&tp) {
                t.forget(&tp);
            }
        }
        for p in followed {
            t.follow_epoch(&p.tp, p.leader_epoch(), p.log.log_end_offset(), now_ms);
            p.set_wal_mode(t.mode(&p.tp) == Mode::Wal);
        }
    }

    /// Applies a WAL fetcher round's classic ranges. Returns how many partitions switched to
    /// the classic fetch.
    pub fn on_report(
        &self,
        report: &FetchReport,
        resolve: impl Fn(Uuid, i32) -> Option<Arc<Partition>>,
    ) -> u64 {
        let mut switched = 0;
        for c in &report.classic {
            let Some(p) = resolve(c.partition.topic_id, c.partition.partition) else {
                continue;
            };
            let mode = self
                .lock()
                .on_classic_range(&p.tp, p.log.log_end_offset(), c.fetch.until);
            if mode != Mode::Wal && p.wal_mode() {
                tracing::debug!(partition = %p.tp, ?mode, from = c.fetch.from, "remote WAL: classic fetch for a range the WAL path cannot serve");
                switched += 1;
            }
            p.set_wal_mode(mode == Mode::Wal);
        }
        switched
    }

    /// Periodic: stall detection and return to the WAL path. Returns how many partitions
    /// switched to the classic fetch.
    pub fn tick(&self, partitions: &[Arc<Partition>], now_ms: i64) -> u64 {
        partitions
            .iter()
            .map(|p| u64::from(self.tick_one(p, now_ms)))
            .sum()
    }

    /// [`FollowerModes::tick`] for one partition; true if it switched to the classic fetch.
    pub fn tick_one(&self, p: &Partition, now_ms: i64) -> bool {
        let mode = self.lock().tick(
            &p.tp,
            p.log.log_end_offset(),
            p.leader_high_watermark(),
            now_ms,
        );
        let was_wal = p.wal_mode();
        p.set_wal_mode(mode == Mode::Wal);
        was_wal && mode != Mode::Wal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The glue end to end without a network: a leader partition hands its appends (as stored)
    /// to an uploader over a memory bucket, and a follower partition's WAL fetcher appends the
    /// published slices through [`ReplicaSink`]: the two logs end up byte for byte equal.
    #[tokio::test]
    async fn slices_a_leader_uploaded_are_appended_by_a_follower_byte_for_byte() {
        use std::collections::HashMap;

        use async_trait::async_trait;
        use ferry_log::{LogConfig, LogManager};
        use ferry_objstore::{MemoryStore, ObjectStore};
        use ferry_wal::fetcher::WalFetcher;
        use ferry_wal::metadata::{WalMetadataEvent, WalSliceMetadata};
        use ferry_wal::uploader::{MetadataPublisher, Uploader, UploaderConfig};

        use crate::remote_wal::leader::stored_append;
        use crate::remote_wal::test_support::{batch, batch_at};
        use crate::replica_manager::ReplicaManager;
        use ferry_config::broker_config::BrokerConfig;
        use ferry_config::remote_wal_config::RemoteWalConfig;
        use ferry_wal::metrics::RemoteWalMetrics;

        #[derive(Debug, Default)]
        struct Capture(Mutex<Vec<WalSliceMetadata>>);
        #[async_trait]
        impl MetadataPublisher for Capture {
            async fn publish(&self, records: Vec<WalSliceMetadata>) -> ferry_wal::Result<()> {
                self.0.lock().unwrap().extend(records);
                Ok(())
            }
        }

        let dir = tempfile::tempdir().unwrap();
        let topic = ferry_test_support::Topic::default()
            .id(42)
            .replicas(&[1, 2])
            .leader(1, 3)
            .image();
        let rm = |node: i32| {
            let logs = LogManager::open(
                vec![dir.path().join(node.to_string())],
                ferry_common::system_clock(),
            )
            .unwrap();
            let rm = ReplicaManager::new(logs, node);
            rm.ensure_topic(&topic, LogConfig::default()).unwrap();
            rm
        };
        let (leader_rm, follower_rm) = (rm(1), rm(2));
        let leader = leader_rm.partition_of("t", 0).unwrap();
        let follower = follower_rm.partition_of("t", 0).unwrap();

        let store: Arc<dyn ObjectStore> = Arc::new(MemoryStore::new());
        let capture = Arc::new(Capture::default());
        let uploader = Uploader::new(
            UploaderConfig::default(),
            store.clone(),
            capture.clone(),
            ferry_common::system_clock(),
        );
        for n in [3, 5, 2] {
            leader
                .append_then(&batch(n), |p, info| {
                    uploader.append(stored_append(p, info).unwrap());
                })
                .unwrap();
        }
        uploader.flush().await.unwrap();
        let published = std::mem::take(&mut *capture.0.lock().unwrap());
        assert_eq!(published.len(), 1, "one slice: the appends were contiguous");
        assert_eq!(published[0].leader_epoch, 3);

        let shared = Arc::new(Shared {
            config: RemoteWalConfig::from_broker(&BrokerConfig::default()).unwrap(),
            metrics: RemoteWalMetrics::new(),
            host: None,
            tier: None,
            topics: std::sync::RwLock::new(HashMap::new()),
        });
        let f = follower.clone();
        let sink =
            ReplicaSink::with_resolver(shared.clone(), Arc::new(move |_, _| Some(f.clone())));
        let fetcher = WalFetcher::new(move |_bucket| Some(store.clone()), Arc::new(sink));
        fetcher.on_metadata(published.into_iter().map(WalMetadataEvent::Upsert));
        // Before the leader of epoch 3 confirmed the follower's log nothing is appended (a
        // diverged tail must be truncated by leader epoch first); the records wait.
        let report = fetcher.run_once().await;
        assert_eq!(report.slices_appended, 0, "{report:?}");
        assert!(report.classic.is_empty(), "{report:?}");
        assert_eq!(follower.log.log_end_offset(), 0);
        follower.set_validated_epoch(2);
        assert_eq!(
            fetcher.run_once().await.slices_appended,
            0,
            "validated at an old epoch"
        );
        follower.set_validated_epoch(3);
        let report = fetcher.run_once().await;
        assert!(report.classic.is_empty(), "{report:?}");
        assert_eq!(report.slices_appended, 1);

        let end = leader.log.log_end_offset();
        assert_eq!(end, 10);
        assert_eq!(follower.log.log_end_offset(), end);
        let read = |p: &Partition| p.log.read(0, 1 << 20, end, true).unwrap().records;
        assert_eq!(read(&follower), read(&leader));
        assert_eq!(follower.log.epoch_entries(), leader.log.epoch_entries());
        assert!(
            shared
                .metrics
                .follower_bytes
                .get_or_create(&ferry_wal::metrics::PathLabels { path: "wal" })
                .get()
                > 0
        );
        // A slice that would leave a gap is refused.
        assert!(follower
            .append_as_follower_at(3, &[&batch_at(end + 5, 1)])
            .is_err());
    }

    /// A follower that got the former leader's tail through the WAL (records the new leader
    /// never had) truncates it by leader epoch, exactly as for fetched data, before the WAL path
    /// appends anything of the new epoch; then its log equals the new leader's.
    #[tokio::test]
    async fn data_that_came_through_the_wal_is_truncated_by_leader_epoch() {
        use ferry_log::LogConfig;
        use ferry_wal::fetcher::WalFetcher;
        use ferry_wal::metadata::WalMetadataEvent;

        use crate::remote_wal::leader::stored_append;
        use crate::remote_wal::test_support::{batch, bucket, replicas, shared, topic};

        let dir = tempfile::tempdir().unwrap();
        let rms: Vec<_> = (1..=3)
            .map(|n| replicas(dir.path(), n, &topic(1, 3)))
            .collect();
        let [p1, p2, p3] = [0, 1, 2].map(|i| rms[i].partition_of("t", 0).unwrap());
        let (az1, up1, meta1) = bucket("az1");
        let (az2, up2, meta2) = bucket("az2");
        let shared = shared();
        let f = p3.clone();
        let sink =
            ReplicaSink::with_resolver(shared.clone(), Arc::new(move |_, _| Some(f.clone())));
        let fetcher = WalFetcher::new(
            move |name| match name {
                "az1" => Some(az1.clone()),
                "az2" => Some(az2.clone()),
                _ => None,
            },
            Arc::new(sink),
        );

        // Epoch 3: broker 3 gets all four batches through the WAL, broker 2 only two (classic).
        for n in [3, 5, 2, 4] {
            p1.append_then(&batch(n), |p, info| {
                up1.append(stored_append(p, info).unwrap());
            })
            .unwrap();
        }
        up1.flush().await.unwrap();
        p3.set_validated_epoch(3);
        fetcher.on_metadata(meta1.take().into_iter().map(WalMetadataEvent::Upsert));
        assert_eq!(fetcher.run_once().await.slices_appended, 1);
        let end1 = p1.log.log_end_offset();
        assert_eq!(p3.log.log_end_offset(), end1);
        for _ in 0..2 {
            let at = p2.log.log_end_offset();
            let one = p1.log.read(at, 1, end1, true).unwrap().records;
            p2.append_as_follower(&one).unwrap();
        }
        let common = p2.log.log_end_offset();
        assert!(common < end1);

        // Broker 2 leads at epoch 4 and appends (uploaded to az2) on top of its shorter log.
        for rm in &rms[1..] {
            rm.ensure_topic(&topic(2, 4), LogConfig::default()).unwrap();
        }
        p2.append_then(&batch(6), |p, info| {
            up2.append(stored_append(p, info).unwrap());
        })
        .unwrap();
        up2.flush().await.unwrap();
        fetcher.on_metadata(meta2.take().into_iter().map(WalMetadataEvent::Upsert));

        // Not confirmed at epoch 4 yet: the WAL path leaves the diverged log alone.
        let report = fetcher.run_once().await;
        assert_eq!(report.slices_appended, 0, "{report:?}");
        assert_eq!(p3.log.log_end_offset(), end1);

        // The replica fetcher's report: the leader finds the divergence (KIP-320), the follower
        // truncates to the common prefix; the next report is clean and confirms the log.
        let last_epoch = p3.log.epoch_entries().last().map_or(-1, |e| e.0);
        let (epoch, end) = p2
            .diverging_epoch(last_epoch, p3.log.log_end_offset())
            .expect("the WAL-delivered tail diverges");
        p3.truncate_to(p3.truncation_target(epoch, end)).unwrap();
        assert_eq!(p3.log.log_end_offset(), common);
        let last_epoch = p3.log.epoch_entries().last().map_or(-1, |e| e.0);
        assert_eq!(
            p2.diverging_epoch(last_epoch, p3.log.log_end_offset()),
            None
        );
        p3.set_validated_epoch(4);

        let report = fetcher.run_once().await;
        assert!(report.classic.is_empty(), "{report:?}");
        assert_eq!(report.slices_appended, 1);
        let end2 = p2.log.log_end_offset();
        let read = |p: &Partition| p.log.read(0, 1 << 20, end2, true).unwrap().records;
        assert_eq!(read(&p3), read(&p2));
        assert_eq!(p3.log.epoch_entries(), p2.log.epoch_entries());
    }
}
