//! The long-term tier (KIP-405, RFC 0004) wired into the broker, with
//! `remote.log.storage.system.enable=true`:
//!
//! - **Metadata** (`metadata.rs`): every broker follows `__remote_log_metadata`
//!   (`crate::topic_follower`) into a [`TierMetadataCache`] of every partition's segments in
//!   the tier; the copier's records go out through [`TierPublisher`] with acks=all, since a
//!   reader acts on them.
//! - **Copy and expire** (`manager.rs`): every `remote.log.manager.task.interval.ms` the leader
//!   of each partition whose topic has `remote.storage.enable=true` copies its closed segments
//!   below the last stable offset that the tier lacks (`ferry_tier::SegmentCopier`), deletes
//!   copies that never finished, and deletes from the tier what `retention.ms` /
//!   `retention.bytes` / the log start offset expire (Kafka's `RLMExpirationTask`).
//!
//! - **Reads** below the local log start (consumers: [`Tier::read`], ListOffsets), and the
//!   state a follower below the leader's local log start starts from (the tier's leader-epoch
//!   checkpoint and producer snapshot: [`crate::replica_fetcher::TierAuxSource`]).
//!
//! The remote WAL uses what the tier holds (RFC 0004 step 5): its objects of tiered topics
//! live until their data is tiered, and an optimized failover republish leaves that data out
//! (`crate::remote_wal`).

mod manager;
mod metadata;

use std::sync::Arc;

use anyhow::Context;
use ferry_config::tier_config::{TierConfig, TierStore};
use ferry_objstore::{LocalDirStore, ObjStoreMetrics, ObjectStore, S3Config, S3Store};
use ferry_tier::segment_store::SegmentFileKind;
use ferry_tier::{RemotePartitionState, RemoteSegmentStore, SegmentCopier, TierReader};
use std::collections::{BTreeMap, BTreeSet};

use ferry_metrics::TopicLabels;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;

use crate::host::HostHandles;
use crate::topic_follower::{self, Followed};
pub use metadata::{TierMetadataCache, TierPublisher};

/// The tier's figures, in the broker's registry (prefix `ferry_tier_`).
#[derive(Debug, Default, Clone)]
pub struct TierMetrics {
    pub segments_copied: Counter,
    pub bytes_copied: Counter,
    pub copy_errors: Counter,
    pub segments_deleted: Counter,
    pub delete_errors: Counter,
    /// Bytes in the tier of the partitions led here, as of the last pass.
    pub remote_bytes: Gauge,
    /// Per topic, over its partitions led here, as of the last pass (Kafka's
    /// `RemoteLogSizeBytes` and `RemoteLogMetadataCount`): the bytes of the segments the tier
    /// serves, and how many there are. Topics no longer led here lose their series.
    pub remote_log_size_bytes: Family<TopicLabels, Gauge>,
    pub remote_log_segments: Family<TopicLabels, Gauge>,
    /// The topics the per-topic gauges hold now.
    reported_topics: Arc<std::sync::Mutex<BTreeSet<String>>>,
}

impl TierMetrics {
    /// Sets the per-topic gauges to `sizes` (topic: bytes, segments), removing the series of
    /// topics not in it.
    pub fn set_topic_sizes(&self, sizes: &BTreeMap<String, (u64, u64)>) {
        let mut reported = self
            .reported_topics
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for gone in reported.iter().filter(|t| !sizes.contains_key(*t)) {
            let labels = TopicLabels {
                topic: gone.clone(),
            };
            self.remote_log_size_bytes.remove(&labels);
            self.remote_log_segments.remove(&labels);
        }
        for (topic, (bytes, segments)) in sizes {
            let labels = TopicLabels {
                topic: topic.clone(),
            };
            self.remote_log_size_bytes
                .get_or_create(&labels)
                .set(i64::try_from(*bytes).unwrap_or(i64::MAX));
            self.remote_log_segments
                .get_or_create(&labels)
                .set(i64::try_from(*segments).unwrap_or(i64::MAX));
        }
        *reported = sizes.keys().cloned().collect();
    }
}

impl TierMetrics {
    pub fn register(&self, registry: &mut Registry) {
        let r = registry.sub_registry_with_prefix("tier");
        r.register(
            "segments_copied",
            "Closed segments this broker copied to the long-term tier",
            self.segments_copied.clone(),
        );
        r.register(
            "bytes_copied",
            "Bytes of segment logs this broker copied to the long-term tier",
            self.bytes_copied.clone(),
        );
        r.register(
            "copy_errors",
            "Segment copies to the long-term tier that failed (retried next pass)",
            self.copy_errors.clone(),
        );
        r.register(
            "segments_deleted",
            "Segments this broker deleted from the long-term tier (retention, unfinished copies)",
            self.segments_deleted.clone(),
        );
        r.register(
            "delete_errors",
            "Deletions from the long-term tier that failed (retried next pass)",
            self.delete_errors.clone(),
        );
        r.register(
            "remote_bytes",
            "Bytes in the long-term tier of the partitions this broker leads",
            self.remote_bytes.clone(),
        );
        r.register(
            "remote_log_size_bytes",
            "Bytes of the segments in the long-term tier, per topic, of the partitions this broker leads (Kafka's RemoteLogSizeBytes)",
            self.remote_log_size_bytes.clone(),
        );
        r.register(
            "remote_log_segments",
            "Segments in the long-term tier, per topic, of the partitions this broker leads (Kafka's RemoteLogMetadataCount)",
            self.remote_log_segments.clone(),
        );
    }
}

/// The broker's long-term tier.
pub struct Tier {
    config: TierConfig,
    host: HostHandles,
    cache: Arc<TierMetadataCache>,
    publisher: Arc<TierPublisher>,
    copier: SegmentCopier,
    reader: TierReader,
    /// The segments' objects (a follower takes a segment's checkpoint and snapshot).
    segments: RemoteSegmentStore,
    metrics: TierMetrics,
}

impl std::fmt::Debug for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tier").finish_non_exhaustive()
    }
}

impl Tier {
    /// The tier, or `None` when `remote.log.storage.system.enable` is off. Opens (for a local
    /// directory: creates) the store; makes no network request.
    pub async fn open(
        config: TierConfig,
        host: HostHandles,
        store_metrics: &ObjStoreMetrics,
        metrics: TierMetrics,
    ) -> anyhow::Result<Option<Arc<Tier>>> {
        if !config.enabled {
            return Ok(None);
        }
        let store = open_store(&config.store, store_metrics)
            .await
            .context("setting up the long-term tier (remote.log.storage.*)")?;
        let publisher = Arc::new(TierPublisher::new(host.clone(), config.metadata_partitions));
        let segments = RemoteSegmentStore::new(store);
        let reader = TierReader::new(segments.clone(), config.index_cache_bytes);
        let copier = SegmentCopier::new(
            segments.clone(),
            publisher.clone(),
            host.node_id,
            host.clock.clone(),
        );
        Ok(Some(Arc::new(Tier {
            config,
            host,
            cache: Arc::new(TierMetadataCache::default()),
            publisher,
            copier,
            reader,
            segments,
            metrics,
        })))
    }

    /// Every partition's segments in the tier, as this broker has read them.
    pub fn cache(&self) -> &Arc<TierMetadataCache> {
        &self.cache
    }

    /// Whether this broker has read `__remote_log_metadata` to its end since it started.
    /// Before, it does not know what the tier holds: reads below the local log start, the
    /// earliest offset and DeleteRecords of tiered partitions answer KAFKA_STORAGE_ERROR
    /// (retriable) rather than OFFSET_OUT_OF_RANGE, which would reset consumers past the tier.
    pub fn is_ready(&self) -> bool {
        self.cache.is_caught_up()
    }

    /// Starts following the metadata topic and the copy-and-expire passes.
    pub fn spawn(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        let followed = Followed {
            topic: ferry_tier::metadata::METADATA_TOPIC,
            purpose: ferry_metrics::PURPOSE_TIER_METADATA_READER,
            kind: ferry_metrics::TrafficKind::TierMetadataReader,
        };
        tasks.spawn(topic_follower::run(
            self.cache.clone(),
            followed,
            self.host.clone(),
        ));
        tasks.spawn(manager::run(self.clone()));
    }
}

async fn open_store(
    config: &TierStore,
    metrics: &ObjStoreMetrics,
) -> anyhow::Result<Arc<dyn ObjectStore>> {
    Ok(match config {
        TierStore::Local { dir } => {
            let store = LocalDirStore::new(dir)
                .with_context(|| format!("opening the tier directory {}", dir.display()))?;
            crate::remote_wal::store::wrap(store, metrics)
        }
        TierStore::S3 {
            bucket,
            endpoint,
            region,
            path_style,
            access_key,
            secret_key,
        } => {
            let store = S3Store::connect(&S3Config {
                bucket: bucket.clone(),
                region: region.clone(),
                endpoint: endpoint.clone(),
                force_path_style: *path_style,
                access_key: access_key.clone(),
                secret_key: secret_key.as_ref().map(|s| s.expose().to_string()),
                express_one_zone: false,
            })
            .await
            .with_context(|| format!("configuring the tier's S3 bucket {bucket}"))?;
            crate::remote_wal::store::wrap(store, metrics)
        }
    })
}

/// Records a consumer fetch got from the tier.
#[derive(Debug)]
pub struct TierFetch {
    pub records: bytes::Bytes,
    /// The partition's first offset (the tier's first segment's).
    pub log_start_offset: i64,
    /// For read_committed: the aborted transactions overlapping what was read.
    pub aborted: Vec<ferry_log::AbortedTxn>,
}

impl Tier {
    /// The partition's first offset counting the tier: the tier's first segment when it starts
    /// below the local log, else the local log start.
    pub fn log_start_offset(&self, part: &crate::replica_manager::Partition) -> i64 {
        let local = part.log.log_start_offset();
        if !part.log.is_tiered() {
            return local;
        }
        self.cache
            .with_partition(part.topic_id, part.tp.partition, |state| {
                state.and_then(RemotePartitionState::log_start_offset)
            })
            .map_or(local, |tier| tier.min(local))
    }

    /// DeleteRecords on a tiered partition (after the local log's): moves the partition's log
    /// start to `offset` if that is later, durably (acks=all) before the caller answers. The
    /// tier then serves nothing below it and deletes the segments wholly below it.
    pub async fn delete_records_before(
        &self,
        part: &crate::replica_manager::Partition,
        offset: i64,
    ) -> ferry_tier::Result<i64> {
        let start = self.log_start_offset(part);
        if offset <= start {
            return Ok(start);
        }
        self.publisher
            .publish_log_start(part.topic_id, part.tp.partition, offset)
            .await?;
        self.cache
            .apply(ferry_tier::metadata::TierMetadataEvent::LogStart {
                topic_id: part.topic_id,
                partition: part.tp.partition,
                offset,
            });
        Ok(offset)
    }

    /// The last offset the tier holds of the partition (ListOffsets -5, KIP-1005), -1 if none.
    pub fn highest_copied_offset(&self, part: &crate::replica_manager::Partition) -> i64 {
        let (lineage, log_end) = (part.log.epoch_entries(), part.log.log_end_offset());
        self.cache
            .with_partition(part.topic_id, part.tp.partition, |state| {
                state.and_then(|s| s.highest_copied_offset(&lineage, log_end))
            })
            .unwrap_or(-1)
    }

    /// A consumer's read at `offset` below the local log start, from the tier: whole batches,
    /// at most `max_bytes` but at least one; with `read_committed`, up to `stable_end` and with
    /// the aborted transactions overlapping them. `None` when the tier does not hold `offset`
    /// (the fetch is then out of range).
    pub async fn read(
        &self,
        part: &crate::replica_manager::Partition,
        offset: i64,
        max_bytes: usize,
        read_committed: Option<i64>,
    ) -> ferry_tier::Result<Option<TierFetch>> {
        let state = self.cache.partition(part.topic_id, part.tp.partition);
        let local_start = part.log.log_start_offset();
        if !part.log.is_tiered() || offset >= local_start {
            return Ok(None);
        }
        let Some(segment) = state.segment_for(offset, None).or_else(|| {
            state
                .next_segment_from(offset)
                .filter(|s| s.start_offset < local_start)
        }) else {
            return Ok(None);
        };
        let mut records = self.reader.read(segment, offset, max_bytes.max(1)).await?;
        if let Some(stable_end) = read_committed {
            records = cut_at(records, stable_end);
        }
        let mut aborted = Vec::new();
        if let (Some(_), Some(upper)) = (read_committed, next_offset(&records)) {
            // Kafka's collectAbortedTransactions: the tier's segments from the one read, then
            // the local log, until an entry's last stable offset reaches the bound.
            let mut complete = false;
            for s in state.copied() {
                if s.end_offset < offset || s.start_offset >= local_start || complete {
                    continue;
                }
                let (found, done) = self.reader.aborted_transactions(s, offset, upper).await?;
                aborted.extend(found);
                complete = done;
            }
            if !complete {
                aborted.extend(part.log.collect_aborted_transactions(local_start, upper));
            }
        }
        Ok(Some(TierFetch {
            records,
            log_start_offset: state
                .log_start_offset()
                .unwrap_or(local_start)
                .min(local_start),
            aborted,
        }))
    }

    /// ListOffsets by timestamp in the tier: the earliest record at or after `ts` in the
    /// segments below the local log start, `None` when none there has one.
    pub async fn offset_for_timestamp(
        &self,
        part: &crate::replica_manager::Partition,
        ts: i64,
    ) -> ferry_tier::Result<Option<(i64, i64)>> {
        if !part.log.is_tiered() {
            return Ok(None);
        }
        let local_start = part.log.log_start_offset();
        let state = self.cache.partition(part.topic_id, part.tp.partition);
        for s in state.copied() {
            if s.start_offset >= local_start || s.max_timestamp_ms < ts {
                continue;
            }
            if let Some(found) = self.reader.offset_for_timestamp(s, ts).await? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }
}

/// The offset after the last batch of `records`.
fn next_offset(records: &[u8]) -> Option<i64> {
    let mut at = 0;
    let mut next = None;
    while let Some(h) = records
        .get(at..)
        .and_then(ferry_log::batch::BatchHeader::parse)
    {
        next = Some(h.next_offset());
        at += h.total_size();
    }
    next
}

/// `records` without the batches that end at or past `end` (read_committed's last stable
/// offset).
fn cut_at(records: bytes::Bytes, end: i64) -> bytes::Bytes {
    let mut at = 0;
    while let Some(h) = records
        .get(at..)
        .and_then(ferry_log::batch::BatchHeader::parse)
    {
        if h.last_offset() >= end {
            break;
        }
        at += h.total_size();
    }
    records.slice(..at)
}

impl crate::replica_fetcher::TierAuxSource for Tier {
    fn aux_state<'a>(
        &'a self,
        part: &'a crate::replica_manager::Partition,
        offset: i64,
        max_epoch: i32,
    ) -> futures::future::BoxFuture<'a, anyhow::Result<Option<crate::replica_fetcher::TierAuxState>>>
    {
        Box::pin(async move {
            if !self.is_ready() {
                anyhow::bail!("the tier's metadata (__remote_log_metadata) is not read yet");
            }
            let segment = self
                .cache
                .with_partition(part.topic_id, part.tp.partition, |state| {
                    state.and_then(|s| {
                        s.copied()
                            .into_iter()
                            .filter(|m| m.contains(offset))
                            .filter(|m| m.epoch_of(offset).is_some_and(|e| e <= max_epoch))
                            .max_by_key(|m| (m.epoch_of(offset), m.event_time_ms))
                            .cloned()
                    })
                });
            let Some(segment) = segment else {
                return Ok(None);
            };
            let checkpoint = self
                .segments
                .fetch(&segment, SegmentFileKind::LeaderEpochCheckpoint)
                .await?;
            let epochs = ferry_log::parse_checkpoint(&checkpoint, 2)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "the tier's leader-epoch checkpoint of segment {} is corrupt",
                        segment.segment_id
                    )
                })?
                .into_iter()
                .map(|v| Ok((i32::try_from(v[0])?, v[1])))
                .collect::<anyhow::Result<Vec<(i32, i64)>>>()?;
            let producer_snapshot = if segment.has_producer_snapshot {
                Some(
                    self.segments
                        .fetch(&segment, SegmentFileKind::ProducerSnapshot)
                        .await?,
                )
            } else {
                tracing::warn!(partition = %part.tp, segment = %segment.segment_id,
                    "the tier's segment has no producer snapshot; the producer state starts empty");
                None
            };
            Ok(Some(crate::replica_fetcher::TierAuxState {
                next_offset: segment.end_offset + 1,
                epochs,
                producer_snapshot,
            }))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(metrics: &TierMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        out
    }

    /// The per-topic remote sizes follow the last pass: a topic no longer led here (or no
    /// longer tiered) loses its series rather than keeping a stale figure.
    #[test]
    fn per_topic_remote_sizes_follow_the_last_pass() {
        let metrics = TierMetrics::default();
        metrics.set_topic_sizes(&BTreeMap::from([
            ("a".to_string(), (1000, 3)),
            ("b".to_string(), (50, 1)),
        ]));
        let text = scrape(&metrics);
        assert!(
            text.contains("tier_remote_log_size_bytes{topic=\"a\"} 1000"),
            "{text}"
        );
        assert!(
            text.contains("tier_remote_log_segments{topic=\"a\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("tier_remote_log_size_bytes{topic=\"b\"} 50"),
            "{text}"
        );

        metrics.set_topic_sizes(&BTreeMap::from([("a".to_string(), (400, 1))]));
        let text = scrape(&metrics);
        assert!(
            text.contains("tier_remote_log_size_bytes{topic=\"a\"} 400"),
            "{text}"
        );
        assert!(!text.contains("topic=\"b\""), "{text}");
    }
}
