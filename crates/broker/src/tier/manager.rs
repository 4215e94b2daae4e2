//! The leader's pass over its tiered partitions, every `remote.log.manager.task.interval.ms`
//! (Kafka's `RLMCopyTask` and `RLMExpirationTask` in one): for each partition led here whose
//! topic has `remote.storage.enable=true`,
//!
//! 1. copies that never finished (`CopyStarted` older than a grace period: their copier died
//!    or failed) are deleted;
//! 2. unless `remote.log.copy.disable`, the closed segments after the highest offset the tier
//!    holds on this leader's epoch lineage, and below the last stable offset (so below the high
//!    watermark), are copied, oldest first, stopping at the first failure;
//! 3. segments wholly below the log start offset, and copies off the lineage (an unclean
//!    election's), are deleted from the tier.
//!
//! Until local retention of copied segments lands, the local log keeps every retained byte
//! and its start offset is the partition's: retention by `retention.ms` / `retention.bytes`
//! moves it, and the tier follows it through step 3.

use std::sync::Arc;
use std::time::Duration;

use ferry_tier::metadata::TierMetadataEvent;
use ferry_tier::partition::RetentionCheck;
use ferry_tier::RemoteSegmentMetadata;

use super::Tier;
use crate::replica_manager::Partition;

/// How long a `CopyStarted` segment may stay before a leader deletes it, beyond two passes.
const UNFINISHED_GRACE_MS: i64 = 60_000;

/// Runs until the broker is gone.
pub async fn run(tier: Arc<Tier>) {
    let interval = Duration::from_millis(tier.config.task_interval_ms.max(1));
    loop {
        tokio::time::sleep(interval).await;
        if tier.host.replicas.strong_count() == 0 {
            return;
        }
        pass(&tier).await;
    }
}

/// One pass over the tiered partitions led here.
pub(super) async fn pass(tier: &Tier) {
    if !tier.cache.is_caught_up() {
        // Before the metadata is read, the highest copied offset is unknown; the follower can
        // only catch up once the topic exists.
        if let Err(e) = tier.publisher.ensure_topic().await {
            tracing::debug!(error = %e, "cannot create the tier metadata topic yet");
        }
        return;
    }
    let Some(replicas) = tier.host.replicas() else {
        return;
    };
    let tiered: Vec<(Arc<Partition>, bool)> = {
        let image = tier.host.metadata.image();
        replicas
            .all()
            .into_iter()
            .filter(|p| p.is_leader())
            .filter_map(|p| {
                let topic = image.topic(&p.tp.topic)?;
                let flag = |key: &str| {
                    ferry_config::topic_config::effective(&tier.host.config, &topic.configs, key)
                        .is_some_and(|(v, _)| v.trim().eq_ignore_ascii_case("true"))
                };
                flag("remote.storage.enable").then(|| (p, flag("remote.log.copy.disable")))
            })
            .collect()
    };
    drop(replicas);
    let mut remote_bytes = 0u64;
    for (part, copy_disabled) in tiered {
        remote_bytes += partition_pass(tier, &part, copy_disabled).await;
    }
    tier.metrics
        .remote_bytes
        .set(i64::try_from(remote_bytes).unwrap_or(i64::MAX));
}

/// The pass over one partition; the bytes the tier then holds of it.
async fn partition_pass(tier: &Tier, part: &Partition, copy_disabled: bool) -> u64 {
    let (topic_id, partition) = (part.topic_id, part.tp.partition);
    let now = tier.host.clock.now_ms();
    let grace = 2 * i64::try_from(tier.config.task_interval_ms).unwrap_or(i64::MAX / 4)
        + UNFINISHED_GRACE_MS;
    let state = tier.cache.partition(topic_id, partition);
    let stale: Vec<RemoteSegmentMetadata> = state
        .unfinished()
        .into_iter()
        .filter(|m| now.saturating_sub(m.event_time_ms) > grace)
        .cloned()
        .collect();
    for m in stale {
        delete(tier, &m, "unfinished copy").await;
    }

    if !copy_disabled {
        copy_new_segments(tier, part).await;
    }

    let state = tier.cache.partition(topic_id, partition);
    let check = RetentionCheck {
        now_ms: now,
        // The local log's retention moves the log start offset; the tier follows it.
        retention_ms: -1,
        retention_bytes: -1,
        local_only_bytes: 0,
        log_start_offset: part.log.log_start_offset(),
        log_end_offset: part.log.log_end_offset(),
        lineage: part.log.epoch_entries(),
    };
    for (m, reason) in state.segments_to_delete(&check) {
        delete(tier, &m, &format!("{reason:?}")).await;
    }
    tier.cache.partition(topic_id, partition).size_bytes()
}

/// Copies the closed segments the tier lacks, oldest first.
async fn copy_new_segments(tier: &Tier, part: &Partition) {
    let (topic_id, partition) = (part.topic_id, part.tp.partition);
    let state = tier.cache.partition(topic_id, partition);
    let lineage = part.log.epoch_entries();
    let log_end = part.log.log_end_offset();
    let from = state
        .highest_copied_offset(&lineage, log_end)
        .map_or(part.log.log_start_offset(), |o| o + 1);
    // Below the last stable offset: never records a truncation could remove, or an open
    // transaction's without its marker.
    let below = part.last_stable_offset().min(part.high_watermark());
    let candidates = match part.log.tier_candidates(from, below) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(partition = %part.tp, error = %e, "cannot list segments to tier");
            return;
        }
    };
    for segment in candidates {
        if !part.is_leader() {
            return;
        }
        match tier.copier.copy(topic_id, partition, &segment).await {
            Ok(meta) => {
                tier.metrics.segments_copied.inc();
                tier.metrics.bytes_copied.inc_by(meta.size_bytes);
                tracing::debug!(partition = %part.tp, start = meta.start_offset,
                    end = meta.end_offset, bytes = meta.size_bytes, "segment copied to the tier");
                tier.cache.apply(TierMetadataEvent::Update(meta));
            }
            Err(e) => {
                tier.metrics.copy_errors.inc();
                tracing::warn!(partition = %part.tp, start = segment.base_offset, error = %e,
                    "copying a segment to the tier failed; retried next pass");
                return;
            }
        }
    }
}

async fn delete(tier: &Tier, m: &RemoteSegmentMetadata, why: &str) {
    match tier.copier.delete(m).await {
        Ok(()) => {
            tier.metrics.segments_deleted.inc();
            tracing::debug!(segment = %m.segment_id, start = m.start_offset, end = m.end_offset,
                why, "segment deleted from the tier");
            tier.cache.apply(TierMetadataEvent::Tombstone(m.key()));
        }
        Err(e) => {
            tier.metrics.delete_errors.inc();
            tracing::warn!(segment = %m.segment_id, error = %e,
                "deleting a segment from the tier failed; retried next pass");
        }
    }
}
