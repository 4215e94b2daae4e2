//! The scrubber: one background task per broker that reads every closed segment of every
//! partition hosted here, checks each batch (structure, offsets, CRC-32C), and repairs a
//! corrupt range from another replica ([`super::repair`]).
//!
//! Pacing: after each chunk it sleeps as long as the chunk's bytes take at
//! `log.scrubber.bytes.per.second`, so its average read rate stays at or below the setting
//! (each chunk is an eighth of a second's worth, at most 1 MiB). After a pass over everything
//! it waits `log.scrubber.interval.ms`. Repairs the fetch path asks for are done between
//! chunks, and wake the task while it waits between passes.
//!
//! It holds no log lock while reading ([`ferry_log::PartitionLog::scrub_chunk`]); a segment
//! that retention, the cleaner or a truncation removed meanwhile is skipped without a word.
//! With `log.scrubber.enable=false` the task scans nothing and only does those repairs.
//!
//! A range no replica could repair stays known (hidden from consumers), is counted once, and is
//! tried again on the next pass, never in a loop.

use std::sync::{Arc, Weak};
use std::time::Duration;

use ferry_cluster::BrokerId;
use ferry_log::{CorruptRange, RepairOutcome, ScrubStep, SegmentRef};
use tokio::time::Instant;

use super::{FoundBy, Integrity};
use crate::inter_broker::PeerClient;
use crate::replica_manager::{Partition, ReplicaManager};

/// The scrubber's settings (`log.scrubber.*`).
#[derive(Clone, Copy, Debug)]
pub struct ScrubberSettings {
    /// `log.scrubber.enable`: scan closed segments. Without it the task only repairs what the
    /// fetch path hands it (and retries known ranges every interval).
    pub scan: bool,
    pub bytes_per_second: u64,
    pub interval: Duration,
}

impl ScrubberSettings {
    /// Bytes read per step: an eighth of a second's worth, between 4 KiB and 1 MiB.
    fn chunk(&self) -> usize {
        (self.bytes_per_second / 8).clamp(4 << 10, 1 << 20) as usize
    }
    /// How long reading `bytes` takes at the configured rate.
    fn pace(&self, bytes: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 / self.bytes_per_second.max(1) as f64)
    }
}

/// What the scrubber needs: the hosted partitions, a way to reach peers, the corruption record.
pub struct Scrubber {
    pub node_id: BrokerId,
    pub replicas: Weak<ReplicaManager>,
    pub peers: PeerClient,
    pub integrity: Arc<Integrity>,
    pub settings: ScrubberSettings,
}

impl Scrubber {
    /// Runs passes until the replica manager is gone.
    pub async fn run(self) {
        loop {
            let started = Instant::now();
            let Some(checked) = self.pass().await else {
                return;
            };
            if self.settings.scan {
                self.integrity.metrics.scrubber_passes.inc();
            }
            tracing::debug!(
                bytes = checked,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "scrubber pass done"
            );
            let next = Instant::now() + self.settings.interval;
            while Instant::now() < next {
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = self.integrity.wake.notified() => {}
                }
                if !self.repair_pending().await {
                    return;
                }
            }
        }
    }

    /// One pass over every closed segment; the bytes checked, `None` when the broker is gone.
    async fn pass(&self) -> Option<u64> {
        let partitions = self.replicas.upgrade()?.all();
        self.integrity.retry_known();
        if !self.settings.scan {
            return self.repair_pending().await.then_some(0);
        }
        let mut checked = 0u64;
        for partition in partitions {
            for seg in partition.log.closed_segments() {
                checked += self.scrub_segment(&partition, seg).await?;
            }
        }
        Some(checked)
    }

    async fn scrub_segment(&self, partition: &Arc<Partition>, seg: SegmentRef) -> Option<u64> {
        let mut cursor = seg.cursor();
        let mut checked = 0u64;
        let chunk = self.settings.chunk();
        loop {
            if !self.repair_pending().await {
                return None;
            }
            let log = partition.log.clone();
            let s = seg.clone();
            let mut c = cursor;
            let step = tokio::task::spawn_blocking(move || {
                let step = log.scrub_chunk(&s, &mut c, chunk);
                (step, c)
            })
            .await;
            let Ok((step, moved)) = step else {
                return Some(checked);
            };
            cursor = moved;
            let bytes = match step {
                Ok(ScrubStep::Checked { bytes }) => bytes,
                Ok(ScrubStep::Corrupt { bytes, range }) => {
                    self.found(partition, &seg, range).await;
                    bytes
                }
                Ok(ScrubStep::Done | ScrubStep::Gone) => return Some(checked),
                Err(e) => {
                    if self.integrity.may_warn(&partition.tp) {
                        tracing::warn!(partition = %partition.tp, segment = %seg.path().display(),
                            error = %e, "scrubber could not read a segment; skipping it");
                    }
                    return Some(checked);
                }
            };
            checked += bytes;
            self.integrity.metrics.scrubber_bytes_checked.inc_by(bytes);
            tokio::time::sleep(self.settings.pace(bytes)).await;
        }
    }

    /// A corrupt range the scan found: known, logged, repaired if a replica can.
    async fn found(&self, partition: &Arc<Partition>, seg: &SegmentRef, range: CorruptRange) {
        let tp = &partition.tp;
        let new = self
            .integrity
            .mark(tp, range.first_offset, range.last_offset, FoundBy::Scrubber);
        // Asked even for a new range, so that the lines that follow are rate-limited too.
        let warn = self.integrity.may_warn(tp);
        if new || warn {
            tracing::warn!(partition = %tp, segment = %seg.path().display(), position = range.position,
                length = range.length, first_offset = range.first_offset, last_offset = range.last_offset,
                reason = %range.reason, "scrubber found a corrupt range; repairing it from another replica");
        }
        // A range that failed before was already tried again at the start of this pass.
        if new || !self.integrity.is_unrepairable(tp, range.first_offset) {
            self.repair(partition, seg, &range).await;
        }
    }

    async fn repair(&self, partition: &Arc<Partition>, seg: &SegmentRef, range: &CorruptRange) {
        let tp = &partition.tp;
        let fetched = super::repair::fetch_range(&self.peers, self.node_id, partition, range).await;
        let (peer, bytes) = match fetched {
            Ok(x) => x,
            Err(why) => return self.unrepairable(partition, range, &why),
        };
        let log = partition.log.clone();
        let (s, r) = (seg.clone(), range.clone());
        let outcome = tokio::task::spawn_blocking(move || log.repair_range(&s, &r, &bytes)).await;
        match outcome {
            Ok(Ok(RepairOutcome::Repaired)) => {
                self.integrity
                    .forget(tp, range.first_offset, range.last_offset, true);
                tracing::info!(partition = %tp, first_offset = range.first_offset, last_offset = range.last_offset,
                    from = peer, "repaired a corrupt range with another replica's bytes");
            }
            Ok(Ok(RepairOutcome::AlreadyIntact | RepairOutcome::SegmentGone)) => {
                self.integrity
                    .forget(tp, range.first_offset, range.last_offset, false);
            }
            Ok(Ok(RepairOutcome::Mismatch(why))) => self.unrepairable(partition, range, &why),
            Ok(Err(e)) => self.unrepairable(partition, range, &e.to_string()),
            Err(e) => self.unrepairable(partition, range, &e.to_string()),
        }
    }

    fn unrepairable(&self, partition: &Partition, range: &CorruptRange, why: &str) {
        let tp = &partition.tp;
        let first = self.integrity.note_unrepairable(tp, range.first_offset);
        if first || self.integrity.may_warn(tp) {
            tracing::error!(partition = %tp, first_offset = range.first_offset, last_offset = range.last_offset,
                reason = %why, "corrupt range could not be repaired; consumers stop before it, retried next pass");
        }
    }

    /// Repairs the batches the fetch path handed over; false when the broker is gone.
    async fn repair_pending(&self) -> bool {
        let pending = self.integrity.take_pending();
        if pending.is_empty() {
            return true;
        }
        let Some(replicas) = self.replicas.upgrade() else {
            return false;
        };
        for (tp, offset) in pending {
            let Some(partition) = replicas.partition(&tp) else {
                self.integrity.forget(&tp, offset, offset, false);
                continue;
            };
            let log = partition.log.clone();
            let located = tokio::task::spawn_blocking(move || log.corrupt_batch_at(offset)).await;
            match located {
                Ok(Ok(Some((seg, range)))) => self.repair(&partition, &seg, &range).await,
                // Sound now (repaired meanwhile) or no longer in the log.
                Ok(Ok(None)) => self.integrity.forget(&tp, offset, offset, false),
                Ok(Err(e)) => self.unrepairable(
                    &partition,
                    &CorruptRange {
                        segment_base_offset: -1,
                        position: 0,
                        length: 0,
                        first_offset: offset,
                        last_offset: offset,
                        reason: String::new(),
                    },
                    &e.to_string(),
                ),
                Err(_) => {}
            }
        }
        true
    }
}
