//! The leader's pass over its tiered partitions, every `remote.log.manager.task.interval.ms`
//! (Kafka's `RLMCopyTask` and `RLMExpirationTask` in one): for each partition led here whose
//! topic has `remote.storage.enable=true`,
//!
//! 1. copies that never finished (`CopyStarted` older than a grace period: their copier died
//!    or failed) are deleted;
//! 2. unless `remote.log.copy.disable`, the closed segments after the highest offset the tier
//!    holds on this leader's epoch lineage, and below the last stable offset (so below the high
//!    watermark), are copied, oldest first, stopping at the first failure;
//! 3. segments past `retention.ms`, over `retention.bytes` (the tier's bytes and the local
//!    bytes not in it together), and copies off the lineage (an unclean election's) are deleted
//!    from the tier, oldest first (Kafka's `RLMExpirationTask`).
//!
//! Every replica of a tiered partition (leader or follower) is told how far the tier reaches
//! on its lineage: local retention (`local.retention.*`) deletes only segments the tier holds.
//!
//! A topic whose tier was turned off with `remote.log.delete.on.disable=true` (KIP-950) has
//! every copy of its partitions deleted by their leaders.

use std::collections::BTreeMap;
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

/// One pass over the tiered partitions hosted here: leaders copy and expire; every replica
/// learns how far the tier reaches, which is how far its local retention may delete.
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
    let (tiered, turned_off): (Vec<TieredPartition>, Vec<Arc<Partition>>) = {
        let image = tier.host.metadata.image();
        let mut turned_off = Vec::new();
        let tiered = replicas
            .all()
            .into_iter()
            .filter_map(|p| {
                let topic = image.topic(&p.tp.topic)?;
                let value = |key: &str| {
                    ferry_config::topic_config::effective(&tier.host.config, &topic.configs, key)
                        .map(|(v, _)| v.trim().to_string())
                        .unwrap_or_default()
                };
                let flag = |key: &str| value(key).eq_ignore_ascii_case("true");
                if !flag("remote.storage.enable") {
                    if flag("remote.log.delete.on.disable") && p.is_leader() {
                        turned_off.push(p);
                    }
                    return None;
                }
                let limits = TopicLimits {
                    copy_disabled: flag("remote.log.copy.disable"),
                    retention_ms: value("retention.ms").parse().unwrap_or(-1),
                    retention_bytes: value("retention.bytes").parse().unwrap_or(-1),
                };
                Some((p, limits))
            })
            .collect();
        (tiered, turned_off)
    };
    drop(replicas);
    for part in turned_off {
        delete_everything(tier, &part).await;
    }
    let mut remote_bytes = 0u64;
    let mut by_topic: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (part, limits) in tiered {
        if part.is_leader() {
            let (bytes, segments) = leader_pass(tier, &part, &limits).await;
            remote_bytes += bytes;
            let topic = by_topic.entry(part.tp.topic.clone()).or_default();
            topic.0 += bytes;
            topic.1 += segments;
        }
        let state = tier.cache.partition(part.topic_id, part.tp.partition);
        let copied = state
            .highest_copied_offset(&part.log.epoch_entries(), part.log.log_end_offset())
            .unwrap_or(-1);
        part.log.set_tier_copied_through(copied);
        // The epochs of what the tier's retention (or DeleteRecords) removed go.
        if let Some(start) = state.log_start_offset() {
            if let Err(e) = part.log.truncate_epochs_from_start(start) {
                tracing::warn!(partition = %part.tp, error = %e, "cannot trim the leader epoch cache");
            }
        }
    }
    tier.metrics
        .remote_bytes
        .set(i64::try_from(remote_bytes).unwrap_or(i64::MAX));
    tier.metrics.set_topic_sizes(&by_topic);
}

/// A partition hosted here whose topic tiers, with its topic's settings.
type TieredPartition = (Arc<Partition>, TopicLimits);

/// A tiered topic's settings, read once per pass.
struct TopicLimits {
    copy_disabled: bool,
    retention_ms: i64,
    retention_bytes: i64,
}

/// The leader's pass over one partition; the bytes and segments the tier then serves of it.
async fn leader_pass(tier: &Tier, part: &Partition, limits: &TopicLimits) -> (u64, u64) {
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

    if !limits.copy_disabled {
        copy_new_segments(tier, part).await;
    }

    // Retention of the partition as a whole (Kafka's RLMExpirationTask): the tier's segments
    // and the local bytes not in the tier count towards `retention.bytes`.
    let state = tier.cache.partition(topic_id, partition);
    let lineage = part.log.epoch_entries();
    let log_end = part.log.log_end_offset();
    let copied = state.highest_copied_offset(&lineage, log_end).unwrap_or(-1);
    let sizes = part.log.segment_sizes();
    let local_only_bytes = sizes
        .iter()
        .enumerate()
        .filter(|(i, _)| sizes.get(i + 1).is_none_or(|next| next.0 - 1 > copied))
        .map(|(_, (_, size))| size)
        .sum();
    let check = RetentionCheck {
        now_ms: now,
        retention_ms: limits.retention_ms,
        retention_bytes: limits.retention_bytes,
        local_only_bytes,
        // The partition starts at the tier's first segment (or locally, without one).
        log_start_offset: state
            .log_start_offset()
            .unwrap_or_else(|| part.log.log_start_offset()),
        log_end_offset: log_end,
        lineage,
    };
    for (m, reason) in state.segments_to_delete(&check) {
        delete(tier, &m, &format!("{reason:?}")).await;
    }
    tier.cache
        .with_partition(topic_id, partition, |state| {
            state.map(|s| (s.size_bytes(), s.copied().len() as u64))
        })
        .unwrap_or_default()
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

/// The tier turned off for the partition's topic with `remote.log.delete.on.disable` (KIP-950):
/// its leader deletes every copy the tier holds of it.
async fn delete_everything(tier: &Tier, part: &Partition) {
    let state = tier.cache.partition(part.topic_id, part.tp.partition);
    let all: Vec<RemoteSegmentMetadata> = state
        .copied()
        .into_iter()
        .chain(state.unfinished())
        .cloned()
        .collect();
    if !all.is_empty() {
        tracing::info!(partition = %part.tp, segments = all.len(),
            "remote storage turned off with remote.log.delete.on.disable: deleting the tier's copies");
    }
    for m in all {
        delete(tier, &m, "remote.log.delete.on.disable").await;
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
