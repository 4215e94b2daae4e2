//! Operations that remove data from a [`PartitionLog`]: retention (Kafka's
//! `deleteOldSegments`), DeleteRecords, and follower truncation.
//!
//! Invariants kept here: the log always has an active segment; `log_start_offset` only moves up
//! (except when truncation goes below it) and is checkpointed before segment files are removed,
//! so a crash in between never exposes offsets below it; data at or past the log end offset is
//! never deleted.

use tracing::info;

use crate::epoch_cache::write_offset_checkpoint;
use crate::error::{LogError, Result};
use crate::index::Durability;
use crate::loader::{rebuild_producer_state, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE};
use crate::log::PartitionLog;
use crate::producer_state::{list_snapshots, snapshot_path, ProducerStateManager};
use crate::segment::{remove_if_exists, Segment};

/// Why segments are being deleted (Kafka's `SegmentDeletionReason`), for logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentDeletionReason {
    RetentionMs,
    RetentionBytes,
    LogStartOffsetBreach,
}

impl PartitionLog {
    /// Retention by `retention.ms` and `retention.bytes`, oldest segments first, and the
    /// `segment.ms` roll of an old active segment. Returns the number of segments deleted.
    pub fn enforce_retention(&self) -> Result<usize> {
        let config = self.config();
        let now = self.clock.now_ms();
        let _writer = self.writer.lock();

        let roll_by_age = {
            let st = self.state.read();
            let a = st.active();
            let basis = a
                .first_batch_timestamp
                .filter(|t| *t >= 0)
                .unwrap_or(a.created_ms);
            a.size > 0 && now - basis > config.segment_ms
        };
        if roll_by_age {
            match self.roll_locked(now) {
                // Rolled later; what is already due is deleted now, which frees the space.
                Err(e) if e.is_disk_full() => {}
                other => other?,
            }
        }

        // With the long-term tier, this is local retention: its own limits, and only over
        // segments the tier holds whole (KIP-405). With copying off (KIP-950) nothing more
        // reaches the tier: the total limits apply here, over every segment.
        let copying = config.remote_storage && !config.remote_copy_disabled;
        let (retention_ms, retention_bytes) = if copying {
            (config.local_retention_ms, config.local_retention_bytes)
        } else {
            (config.retention_ms, config.retention_bytes)
        };
        let (count, reason) = {
            let st = self.state.read();
            let segs = &st.segments;
            let mut n = 0usize;
            let mut reason = SegmentDeletionReason::RetentionMs;
            if retention_ms >= 0 {
                while n < segs.len()
                    && segs[n].size > 0
                    && now - segs[n].largest_timestamp() > retention_ms
                {
                    n += 1;
                }
            }
            if retention_bytes >= 0 {
                let total: u64 = segs[n..].iter().map(|s| s.size).sum();
                let mut diff = total as i64 - retention_bytes;
                while n < segs.len() && segs[n].size > 0 && diff - segs[n].size as i64 >= 0 {
                    diff -= segs[n].size as i64;
                    n += 1;
                    reason = SegmentDeletionReason::RetentionBytes;
                }
            }
            if copying {
                let copied = self
                    .tier_copied_through
                    .load(std::sync::atomic::Ordering::Acquire);
                let in_tier = segs
                    .windows(2)
                    .take_while(|w| w[1].base_offset - 1 <= copied)
                    .count();
                n = n.min(in_tier);
            }
            (n, reason)
        };
        if count == 0 {
            return Ok(0);
        }
        let mut count = count;
        if count >= self.state.read().segments.len() {
            // Everything expired: roll so the log keeps an (empty) active segment. On a full
            // disk the roll cannot write: delete all but the active segment now, and roll
            // once that space is back.
            match self.roll_locked(now) {
                Ok(()) => {}
                Err(e) if e.is_disk_full() => count -= 1,
                Err(e) => return Err(e),
            }
        }
        self.delete_oldest_segments(count, reason)
    }

    /// Tiered logs: drops the leader epochs that end before `offset`, the partition's first
    /// offset counting the long-term tier (Kafka truncates the epoch cache at the log start
    /// offset, not the local one). Never past the local log start.
    pub fn truncate_epochs_from_start(&self, offset: i64) -> Result<()> {
        let offset = offset.min(self.log_start_offset());
        let mut epochs = self.epochs.lock();
        if epochs.truncate_from_start(offset) {
            epochs.persist(Durability::Synced)?;
        }
        Ok(())
    }

    /// Tells the log the last offset copied to the long-term tier, on its epoch lineage: local
    /// retention (with `remote_storage`) deletes only segments ending at or below it.
    /// Only moves up: what the tier's own retention deleted since was copied all the same
    /// (Kafka's `highestOffsetInRemoteStorage`).
    pub fn set_tier_copied_through(&self, offset: i64) {
        self.tier_copied_through
            .fetch_max(offset, std::sync::atomic::Ordering::AcqRel);
    }

    /// Removes the `count` oldest segments (never the active one), moving the log start offset
    /// to the first remaining segment. The caller holds `writer`.
    fn delete_oldest_segments(&self, count: usize, reason: SegmentDeletionReason) -> Result<usize> {
        let (removed, new_lso) = {
            let st = self.state.read();
            let count = count.min(st.segments.len() - 1);
            if count == 0 {
                return Ok(0);
            }
            let new_lso = st.log_start_offset.max(st.segments[count].base_offset);
            (count, new_lso)
        };
        let checkpoint = || {
            write_offset_checkpoint(
                &self.dir().join(LOG_START_OFFSET_FILE),
                new_lso,
                Durability::Synced,
            )
        };
        // On a full disk the checkpoint cannot be written before the segments go: delete
        // them first and write it after. A crash in between is safe: a load starts the log
        // at the first remaining segment when that is above the checkpoint.
        let written_first = match checkpoint() {
            Ok(()) => true,
            Err(e) if e.is_disk_full() => false,
            Err(e) => return Err(e),
        };
        let deleted: Vec<Segment> = {
            let mut st = self.state.write();
            st.log_start_offset = new_lso;
            st.segments.drain(..removed).collect()
        };
        for seg in &deleted {
            info!(tp = %self.tp, segment = seg.base_offset, ?reason, "deleting log segment");
            seg.delete_files()?;
        }
        if !written_first {
            checkpoint()?;
        }
        self.after_log_start_moved(new_lso)?;
        Ok(deleted.len())
    }

    fn after_log_start_moved(&self, new_lso: i64) -> Result<()> {
        if self.is_tiered() {
            // The log continues in the long-term tier below the local log start: its epochs
            // stay (the leader's lineage check of the tier's segments needs them), until the
            // tier's own start moves ([`PartitionLog::truncate_epochs_from_start`]).
            return Ok(());
        }
        let mut epochs = self.epochs.lock();
        if epochs.truncate_from_start(new_lso) {
            epochs.persist(Durability::Synced)?;
        }
        Ok(())
    }

    /// DeleteRecords: moves the log start offset up to `offset` (never down) and deletes the
    /// segments wholly below it. Returns the new log start offset.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        let _writer = self.writer.lock();
        let (lso, leo, wholly_below) = {
            let st = self.state.read();
            let n = st
                .segments
                .windows(2)
                .take_while(|w| w[1].base_offset <= offset)
                .count();
            (st.log_start_offset, st.log_end_offset, n)
        };
        if offset > leo || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: lso,
                log_end_offset: leo,
            });
        }
        if offset <= lso {
            return Ok(lso);
        }
        let checkpoint = || {
            write_offset_checkpoint(
                &self.dir().join(LOG_START_OFFSET_FILE),
                offset,
                Durability::Synced,
            )
        };
        match checkpoint() {
            Ok(()) => {}
            Err(e) if e.is_disk_full() && wholly_below > 0 => {
                // A full disk: the segments wholly below the new start go first (they go
                // whatever happens, and a load never starts below the first segment), then
                // the checkpoint fits.
                self.delete_oldest_segments(
                    wholly_below,
                    SegmentDeletionReason::LogStartOffsetBreach,
                )?;
                checkpoint()?;
                self.state.write().log_start_offset = offset;
                self.after_log_start_moved(offset)?;
                return Ok(offset);
            }
            Err(e) => return Err(e),
        }
        self.state.write().log_start_offset = offset;
        if wholly_below > 0 {
            self.delete_oldest_segments(wholly_below, SegmentDeletionReason::LogStartOffsetBreach)?;
        } else {
            self.after_log_start_moved(offset)?;
        }
        Ok(offset)
    }

    /// Drops every batch at or past the one holding `offset` (follower truncation). Truncating
    /// below the log start offset empties the log and restarts it at `offset`.
    pub fn truncate_to(&self, offset: i64) -> Result<()> {
        self.truncate(offset, false)
    }

    /// Follower: drops every segment and restarts the log, empty, at `offset` (Kafka's
    /// `truncateFullyAndStartAt`), when the leader's log now starts past this log's end.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        self.truncate(offset, true)
    }

    /// Follower of a tiered partition (Kafka's `buildRemoteLogAuxState`): drops every segment
    /// and restarts the log, empty, at `offset`, the end of a segment in the long-term tier,
    /// with the leader epochs and producer state as of that offset, taken from the tier's copy
    /// of the segment (its leader-epoch checkpoint and producer snapshot, `None` when it was
    /// copied without one: the producer state then starts empty). Nothing is changed when the
    /// snapshot or the epochs cannot be used.
    pub fn truncate_fully_and_start_with(
        &self,
        offset: i64,
        epochs: &[(i32, i64)],
        producer_snapshot: Option<&[u8]>,
    ) -> Result<()> {
        let producers = producer_snapshot
            .map(|data| ProducerStateManager::parse_snapshot(data, "from the long-term tier"))
            .transpose()?;
        let entries: Vec<(i32, i64)> = epochs
            .iter()
            .copied()
            .filter(|(_, start)| *start < offset)
            .collect();
        if !entries
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1)
        {
            return Err(LogError::KafkaStorage(format!(
                "leader epochs {epochs:?} from the long-term tier are not monotonic"
            )));
        }
        self.truncate(offset, true)?;
        let _writer = self.writer.lock();
        // Snapshots of the data just dropped would be loaded by the next rebuild instead of
        // the tier's: none stays.
        for at in list_snapshots(&self.dir())? {
            remove_if_exists(&snapshot_path(&self.dir(), at))?;
        }
        // As Kafka's follower, the cache keeps the tier's epochs below the log start (the
        // epoch of the offsets just below it above all: the next fetch's last fetched epoch);
        // loading the log clamps them to the log start, as for any log.
        self.epochs.lock().replace(entries)?;
        if let Some(state) = producers {
            state.write_snapshot(&self.dir(), offset, Durability::Synced)?;
            *self.producers.lock() = state;
        }
        info!(tp = %self.tp, offset, "log restarted from the long-term tier's state");
        Ok(())
    }

    /// Drops the epoch cache's entries that start at or after `end`, persisting the cache if
    /// that changed it.
    fn drop_epochs_from(&self, end: i64) -> Result<()> {
        let mut epochs = self.epochs.lock();
        if epochs.truncate_from_end(end) {
            epochs.persist(Durability::Synced)?;
        }
        Ok(())
    }

    fn truncate(&self, offset: i64, fully: bool) -> Result<()> {
        let config = self.config();
        let now = self.clock.now_ms();
        let _writer = self.writer.lock();
        let (lso, leo) = {
            let st = self.state.read();
            (st.log_start_offset, st.log_end_offset)
        };
        if offset >= leo && !fully {
            // No batch to drop, but the epoch cache may still end with an epoch this replica
            // led without appending to (the election checkpoints its start at the log end):
            // the new leader does not know it, and a fetch naming it as the last fetched epoch
            // would diverge at this same offset again and again. Kafka's `truncateTo` drops
            // such an entry too.
            return self.drop_epochs_from(leo);
        }
        let offset = offset.max(0);
        self.rewrites
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let removed: Vec<Segment> = if offset < lso || fully {
            let fresh = Segment::create_or_replace(&self.dir(), offset, now)?;
            write_offset_checkpoint(
                &self.dir().join(LOG_START_OFFSET_FILE),
                offset,
                Durability::Synced,
            )?;
            let mut st = self.state.write();
            let old: Vec<Segment> = st
                .segments
                .drain(..)
                .filter(|s| s.base_offset != offset)
                .collect();
            st.segments.push(fresh);
            st.log_start_offset = offset;
            st.log_end_offset = offset;
            old
        } else {
            let mut st = self.state.write();
            let keep = st
                .segments
                .partition_point(|s| s.base_offset < offset)
                .max(1);
            let removed: Vec<Segment> = st.segments.drain(keep..).collect();
            st.active_mut()
                .truncate_to(offset, config.index_interval_bytes)?;
            let end = st.active().next_offset;
            st.log_end_offset = end;
            if st.log_start_offset > end {
                st.log_start_offset = end;
            }
            removed
        };
        for seg in &removed {
            seg.delete_files()?;
        }
        let (new_leo, new_lso) = {
            let st = self.state.read();
            (st.log_end_offset, st.log_start_offset)
        };
        write_offset_checkpoint(
            &self.dir().join(LOG_START_OFFSET_FILE),
            new_lso,
            Durability::Synced,
        )?;
        // A full truncation keeps no epoch: the leader's next batches assign them again.
        self.drop_epochs_from(if fully { i64::MIN } else { new_leo })?;
        {
            let mut rp = self.recovery_point.lock();
            if *rp > new_leo {
                *rp = new_leo;
                write_offset_checkpoint(
                    &self.dir().join(RECOVERY_POINT_FILE),
                    new_leo,
                    Durability::Synced,
                )?;
            }
        }
        let rebuilt = {
            let st = self.state.read();
            rebuild_producer_state(&self.dir(), &st.segments, new_leo, None)?.0
        };
        *self.producers.lock() = rebuilt;
        // Counted again once the truncated log shows: a move that read the counter between
        // the two counts and the sizes before the truncation copies everything again as well.
        self.rewrites
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        drop(_writer);
        self.lower_cleaner_checkpoint(new_leo)?;
        info!(tp = %self.tp, offset, log_end_offset = new_leo, "truncated log");
        Ok(())
    }
}
