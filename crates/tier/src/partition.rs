//! What one partition holds in the tier, built from its metadata records in order.
//!
//! Kafka keeps this in `RemoteLogMetadataCache`. Readers see only segments whose copy finished;
//! a segment whose copy started but never finished (the copier died) or whose deletion started is
//! not served, and is left for the leader's cleanup. Segments may overlap after an unclean leader
//! election (the old leader copied offsets the new one truncated and wrote again): the leader
//! epochs recorded with each segment tell which copy belongs to the current lineage, as Kafka's
//! `isRemoteSegmentWithinLeaderEpochs` does.

use std::collections::BTreeMap;

use uuid::Uuid;

use crate::metadata::{RemoteSegmentMetadata, RemoteSegmentState, TierMetadataEvent};

/// The segments of one partition in the tier.
#[derive(Debug, Default, Clone)]
pub struct RemotePartitionState {
    segments: BTreeMap<Uuid, RemoteSegmentMetadata>,
    /// The log start offset DeleteRecords set (it only moves up): nothing below is served.
    log_start_floor: Option<i64>,
}

/// Why retention deletes a segment from the tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TierDeletionReason {
    /// Its largest timestamp is older than `retention.ms`.
    RetentionTime,
    /// The partition (tier and local log together) is larger than `retention.bytes`.
    RetentionSize,
    /// It lies wholly below the log start offset (DeleteRecords, or retention that already
    /// moved it).
    LogStartOffset,
    /// Its leader epochs are not the current leader's lineage (an unclean election left it).
    OffLineage,
}

/// What retention needs to know besides the tier's own segments (Kafka's
/// `RLMExpirationTask` inputs).
#[derive(Debug, Clone)]
pub struct RetentionCheck {
    pub now_ms: i64,
    /// `retention.ms`; negative: no limit.
    pub retention_ms: i64,
    /// `retention.bytes`; negative: no limit.
    pub retention_bytes: i64,
    /// Bytes of the local segments that are not in the tier yet (they count towards
    /// `retention.bytes` as well).
    pub local_only_bytes: u64,
    /// The partition's log start offset.
    pub log_start_offset: i64,
    /// The leader's log end offset.
    pub log_end_offset: i64,
    /// The leader's epoch lineage: (epoch, start offset), increasing.
    pub lineage: Vec<(i32, i64)>,
}

impl RemotePartitionState {
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one record. A state change Kafka would not allow (a finished copy started again,
    /// a deleted segment brought back) is refused with the reason and leaves the state as it
    /// was, so a stray or replayed record cannot resurrect a segment.
    pub fn apply(&mut self, event: TierMetadataEvent) -> std::result::Result<(), String> {
        match event {
            TierMetadataEvent::LogStart { offset, .. } => {
                self.log_start_floor = Some(self.log_start_floor.map_or(offset, |f| f.max(offset)));
                Ok(())
            }
            TierMetadataEvent::Tombstone(key) => {
                self.segments.remove(&key.segment_id);
                Ok(())
            }
            TierMetadataEvent::Update(meta) => {
                let from = self.segments.get(&meta.segment_id).map(|m| m.state);
                if !RemoteSegmentState::may_follow(from, meta.state) {
                    return Err(format!(
                        "segment {} of {}-{}: {:?} cannot follow {:?}",
                        meta.segment_id, meta.topic_id, meta.partition, meta.state, from
                    ));
                }
                self.segments.insert(meta.segment_id, meta);
                Ok(())
            }
        }
    }

    /// One segment by id, in whatever state.
    pub fn segment(&self, id: Uuid) -> Option<&RemoteSegmentMetadata> {
        self.segments.get(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.log_start_floor.is_none()
    }

    /// The segments whose copy finished, by start offset (then by epoch, then by id).
    pub fn copied(&self) -> Vec<&RemoteSegmentMetadata> {
        let mut out: Vec<_> = self
            .segments
            .values()
            .filter(|m| m.state == RemoteSegmentState::CopyFinished)
            .collect();
        out.sort_by_key(|m| (m.start_offset, m.last_epoch(), m.segment_id));
        out
    }

    /// Segments stuck in `CopyStarted` or `DeleteStarted`: a copier or deleter stopped half way.
    /// Their objects may exist in part; the leader deletes them.
    pub fn unfinished(&self) -> Vec<&RemoteSegmentMetadata> {
        self.segments
            .values()
            .filter(|m| {
                matches!(
                    m.state,
                    RemoteSegmentState::CopyStarted | RemoteSegmentState::DeleteStarted
                )
            })
            .collect()
    }

    /// The copied segment that serves `offset`. With `epoch` (the leader epoch the reader's
    /// lineage gives the offset), only a segment holding the offset under that epoch; without,
    /// the one of the latest epoch.
    pub fn segment_for(&self, offset: i64, epoch: Option<i32>) -> Option<&RemoteSegmentMetadata> {
        if self.log_start_floor.is_some_and(|floor| offset < floor) {
            return None;
        }
        self.copied()
            .into_iter()
            .filter(|m| m.contains(offset))
            .filter(|m| epoch.is_none() || m.epoch_of(offset) == epoch)
            .max_by_key(|m| (m.epoch_of(offset), m.last_epoch(), m.event_time_ms))
    }

    /// The first copied segment at or after `offset` (a reader whose offset fell in a gap a
    /// compacted segment left, or just below the tier's start).
    pub fn next_segment_from(&self, offset: i64) -> Option<&RemoteSegmentMetadata> {
        let offset = self
            .log_start_floor
            .map_or(offset, |floor| offset.max(floor));
        self.copied()
            .into_iter()
            .filter(|m| m.end_offset >= offset)
            .min_by_key(|m| m.start_offset)
    }

    /// The first offset the tier serves: its first segment's, or the log start DeleteRecords
    /// set when that is later.
    pub fn log_start_offset(&self) -> Option<i64> {
        let first = self
            .segments
            .values()
            .filter(|m| m.state == RemoteSegmentState::CopyFinished)
            .map(|m| m.start_offset)
            .min();
        match (first, self.log_start_floor) {
            (Some(f), Some(floor)) => Some(f.max(floor)),
            (f, floor) => f.or(floor),
        }
    }

    /// The last offset copied along `lineage`: the leader copies from the offset after it.
    pub fn highest_copied_offset(
        &self,
        lineage: &[(i32, i64)],
        log_end_offset: i64,
    ) -> Option<i64> {
        self.copied()
            .into_iter()
            .filter(|m| on_lineage(m, lineage, log_end_offset))
            .map(|m| m.end_offset)
            .max()
    }

    /// Bytes of the copied segments.
    pub fn size_bytes(&self) -> u64 {
        self.copied().iter().map(|m| m.size_bytes).sum()
    }

    /// What retention deletes now, oldest first. Segments on the lineage go from the oldest up
    /// while one of the limits holds (never one past a segment that stays, so the tier stays
    /// contiguous); segments off the lineage go whatever their age.
    pub fn segments_to_delete(
        &self,
        check: &RetentionCheck,
    ) -> Vec<(RemoteSegmentMetadata, TierDeletionReason)> {
        let (on, off): (Vec<_>, Vec<_>) = self
            .copied()
            .into_iter()
            .partition(|m| on_lineage(m, &check.lineage, check.log_end_offset));
        let mut out = Vec::new();
        let mut breached = if check.retention_bytes >= 0 {
            let total = on.iter().map(|m| m.size_bytes).sum::<u64>() + check.local_only_bytes;
            total.saturating_sub(check.retention_bytes as u64)
        } else {
            0
        };
        let cleanup_until_ms = (check.retention_ms >= 0).then(|| check.now_ms - check.retention_ms);
        let log_start = self
            .log_start_floor
            .map_or(check.log_start_offset, |f| f.max(check.log_start_offset));
        for m in on {
            let reason = if m.end_offset < log_start {
                Some(TierDeletionReason::LogStartOffset)
            } else if cleanup_until_ms.is_some_and(|until| m.max_timestamp_ms <= until) {
                Some(TierDeletionReason::RetentionTime)
            } else if breached >= m.size_bytes && breached > 0 {
                Some(TierDeletionReason::RetentionSize)
            } else {
                None
            };
            let Some(reason) = reason else { break };
            breached = breached.saturating_sub(m.size_bytes);
            out.push((m.clone(), reason));
        }
        out.extend(
            off.into_iter()
                .map(|m| (m.clone(), TierDeletionReason::OffLineage)),
        );
        out
    }
}

/// Whether a segment's leader epochs are part of the leader's lineage (Kafka's
/// `isRemoteSegmentWithinLeaderEpochs`): each of its epochs is in the lineage, its first epoch
/// starts no earlier than the lineage's, its epochs change where the lineage's do, it ends
/// before the lineage's next epoch, and below the log end offset.
pub fn on_lineage(m: &RemoteSegmentMetadata, lineage: &[(i32, i64)], log_end_offset: i64) -> bool {
    let epoch_start = |epoch: i32| lineage.iter().find(|(e, _)| *e == epoch).map(|(_, s)| *s);
    let next_after = |epoch: i32| lineage.iter().find(|(e, _)| *e > epoch).copied();
    let (Some(&(first_epoch, first_offset)), Some(&(last_epoch, _))) =
        (m.leader_epochs.first(), m.leader_epochs.last())
    else {
        return false;
    };
    let (Some(&(lineage_first, _)), Some(&(lineage_last, _))) = (lineage.first(), lineage.last())
    else {
        return false;
    };
    if last_epoch < lineage_first || last_epoch > lineage_last {
        return false;
    }
    let Some(start) = epoch_start(first_epoch) else {
        return false;
    };
    // The local log's retention cuts its epoch cache at the local log start, so the lineage's
    // first epoch may start later than it did: segments before that are still on it.
    if first_offset < start && first_epoch != lineage_first {
        return false;
    }
    for (i, &(epoch, _)) in m.leader_epochs.iter().enumerate() {
        if epoch_start(epoch).is_none() {
            return false;
        }
        match m.leader_epochs.get(i + 1) {
            // The segment's next epoch must be the lineage's next, starting at the same offset.
            Some(&next) => {
                if next_after(epoch) != Some(next) {
                    return false;
                }
            }
            None => {
                if next_after(epoch).is_some_and(|(_, next_start)| m.end_offset >= next_start) {
                    return false;
                }
            }
        }
    }
    m.end_offset < log_end_offset
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::tests::segment;
    use crate::metadata::RemoteSegmentState::*;

    fn seg(
        start: i64,
        end: i64,
        epochs: &[(i32, i64)],
        size: u64,
        ts: i64,
    ) -> RemoteSegmentMetadata {
        RemoteSegmentMetadata {
            leader_epochs: epochs.to_vec(),
            size_bytes: size,
            max_timestamp_ms: ts,
            ..segment(start, end)
        }
    }

    fn state_of(segs: &[RemoteSegmentMetadata]) -> RemotePartitionState {
        let mut s = RemotePartitionState::new();
        for m in segs {
            s.apply(TierMetadataEvent::Update(m.with_state(CopyStarted, 1)))
                .expect("start");
            s.apply(TierMetadataEvent::Update(m.clone()))
                .expect("finish");
        }
        s
    }

    fn check(lineage: &[(i32, i64)]) -> RetentionCheck {
        RetentionCheck {
            now_ms: 10_000,
            retention_ms: -1,
            retention_bytes: -1,
            local_only_bytes: 0,
            log_start_offset: 0,
            log_end_offset: 1_000,
            lineage: lineage.to_vec(),
        }
    }

    #[test]
    fn only_finished_copies_are_served_and_a_deleted_one_cannot_come_back() {
        let m = seg(0, 99, &[(1, 0)], 10, 0);
        let mut s = RemotePartitionState::new();
        s.apply(TierMetadataEvent::Update(m.with_state(CopyStarted, 1)))
            .expect("start");
        assert!(s.segment_for(5, None).is_none());
        assert_eq!(s.unfinished().len(), 1);
        s.apply(TierMetadataEvent::Update(m.clone()))
            .expect("finish");
        assert_eq!(s.segment_for(5, None), Some(&m));
        assert_eq!(s.log_start_offset(), Some(0));
        s.apply(TierMetadataEvent::Update(m.with_state(DeleteStarted, 2)))
            .expect("delete");
        assert!(s.segment_for(5, None).is_none());
        assert!(
            s.apply(TierMetadataEvent::Update(m.clone())).is_err(),
            "a replayed CopyFinished after DeleteStarted"
        );
        s.apply(TierMetadataEvent::Tombstone(m.key()))
            .expect("gone");
        assert!(s.is_empty());
        assert!(
            s.apply(TierMetadataEvent::Update(m)).is_err(),
            "a segment first seen as CopyFinished"
        );
    }

    #[test]
    fn after_an_unclean_election_the_epoch_picks_the_copy() {
        // The old leader copied 100..199 under epoch 4; the new leader truncated at 150 and
        // wrote 150.. under epoch 5.
        let old = RemoteSegmentMetadata {
            segment_id: Uuid::from_u128(1),
            ..seg(100, 199, &[(4, 100)], 10, 0)
        };
        let new = RemoteSegmentMetadata {
            segment_id: Uuid::from_u128(2),
            ..seg(100, 249, &[(4, 100), (5, 150)], 10, 0)
        };
        let s = state_of(&[old.clone(), new.clone()]);
        assert_eq!(s.segment_for(160, Some(5)), Some(&new));
        assert_eq!(s.segment_for(160, None), Some(&new));
        assert_eq!(s.segment_for(160, Some(4)), Some(&old));
        let lineage = [(4, 0), (5, 150)];
        assert!(
            !on_lineage(&old, &lineage, 1_000),
            "ends past epoch 4's end"
        );
        assert!(on_lineage(&new, &lineage, 1_000));
        assert_eq!(s.highest_copied_offset(&lineage, 1_000), Some(249));
        let deleted = s.segments_to_delete(&check(&lineage));
        assert_eq!(deleted, vec![(old, TierDeletionReason::OffLineage)]);
    }

    #[test]
    fn lineage_rules() {
        let lineage = [(2, 0), (3, 50), (5, 120)];
        assert!(on_lineage(&seg(0, 49, &[(2, 0)], 1, 0), &lineage, 200));
        assert!(on_lineage(
            &seg(40, 119, &[(2, 40), (3, 50)], 1, 0),
            &lineage,
            200
        ));
        assert!(
            !on_lineage(&seg(40, 119, &[(2, 40), (3, 60)], 1, 0), &lineage, 200),
            "epoch 3 started elsewhere"
        );
        assert!(
            !on_lineage(&seg(40, 130, &[(2, 40), (3, 50)], 1, 0), &lineage, 200),
            "runs into epoch 5"
        );
        assert!(
            !on_lineage(&seg(40, 119, &[(2, 40), (4, 50)], 1, 0), &lineage, 200),
            "epoch 4 unknown"
        );
        assert!(
            !on_lineage(&seg(120, 250, &[(5, 120)], 1, 0), &lineage, 200),
            "past the log end"
        );
        assert!(
            !on_lineage(&seg(0, 10, &[(1, 0)], 1, 0), &lineage, 200),
            "before the lineage"
        );
        assert!(
            !on_lineage(&seg(0, 10, &[(2, 0)], 1, 0), &[], 200),
            "no lineage"
        );
    }

    #[test]
    fn retention_deletes_a_contiguous_oldest_prefix() {
        let lineage = [(1, 0)];
        let segs: Vec<_> = (0..4)
            .map(|i| RemoteSegmentMetadata {
                segment_id: Uuid::from_u128(i as u128 + 1),
                ..seg(i * 100, i * 100 + 99, &[(1, i * 100)], 100, 1_000 * (i + 1))
            })
            .collect();
        let s = state_of(&segs);
        assert_eq!(s.size_bytes(), 400);
        let ids = |d: Vec<(RemoteSegmentMetadata, TierDeletionReason)>| {
            d.into_iter()
                .map(|(m, r)| (m.start_offset, r))
                .collect::<Vec<_>>()
        };

        // Nothing is over any limit.
        assert!(s.segments_to_delete(&check(&lineage)).is_empty());

        // By time: max timestamps 1000, 2000, 3000, 4000; now 10000, retention 8000.
        let by_time = RetentionCheck {
            retention_ms: 8_000,
            ..check(&lineage)
        };
        assert_eq!(
            ids(s.segments_to_delete(&by_time)),
            vec![
                (0, TierDeletionReason::RetentionTime),
                (100, TierDeletionReason::RetentionTime)
            ]
        );

        // By size: 400 in the tier + 50 local, limit 220: 230 over, so two segments go (the
        // second leaves 30 over, a third would go below the limit).
        let by_size = RetentionCheck {
            retention_bytes: 220,
            local_only_bytes: 50,
            ..check(&lineage)
        };
        assert_eq!(
            ids(s.segments_to_delete(&by_size)),
            vec![
                (0, TierDeletionReason::RetentionSize),
                (100, TierDeletionReason::RetentionSize)
            ]
        );

        // By log start offset (DeleteRecords to 250): the first two lie wholly below it.
        let by_start = RetentionCheck {
            log_start_offset: 250,
            ..check(&lineage)
        };
        assert_eq!(
            ids(s.segments_to_delete(&by_start)),
            vec![
                (0, TierDeletionReason::LogStartOffset),
                (100, TierDeletionReason::LogStartOffset)
            ]
        );
    }

    #[test]
    fn a_log_start_set_by_delete_records_hides_and_expires_what_is_below() {
        let lineage = [(1, 0)];
        let segs: Vec<_> = (0..3)
            .map(|i| RemoteSegmentMetadata {
                segment_id: Uuid::from_u128(i as u128 + 1),
                ..seg(i * 100, i * 100 + 99, &[(1, i * 100)], 100, 0)
            })
            .collect();
        let mut s = state_of(&segs);
        let log_start = |offset| TierMetadataEvent::LogStart {
            topic_id: segs[0].topic_id,
            partition: segs[0].partition,
            offset,
        };
        s.apply(log_start(150)).unwrap();
        s.apply(log_start(120)).unwrap();
        assert_eq!(s.log_start_offset(), Some(150), "it only moves up");
        assert!(s.segment_for(149, None).is_none());
        assert_eq!(s.segment_for(150, None).map(|m| m.start_offset), Some(100));
        assert_eq!(s.next_segment_from(0).map(|m| m.start_offset), Some(100));
        let deleted: Vec<_> = s
            .segments_to_delete(&check(&lineage))
            .into_iter()
            .map(|(m, r)| (m.start_offset, r))
            .collect();
        assert_eq!(deleted, vec![(0, TierDeletionReason::LogStartOffset)]);
        // With every segment gone the partition still remembers where it starts.
        for m in &segs {
            s.apply(TierMetadataEvent::Tombstone(m.key())).unwrap();
        }
        assert!(!s.is_empty());
        assert_eq!(s.log_start_offset(), Some(150));
    }

    #[test]
    fn the_next_segment_from_an_offset_skips_a_gap() {
        let a = RemoteSegmentMetadata {
            segment_id: Uuid::from_u128(1),
            ..seg(0, 99, &[(1, 0)], 1, 0)
        };
        let b = RemoteSegmentMetadata {
            segment_id: Uuid::from_u128(2),
            ..seg(150, 199, &[(1, 150)], 1, 0)
        };
        let s = state_of(&[a.clone(), b.clone()]);
        assert_eq!(s.next_segment_from(50), Some(&a));
        assert_eq!(s.next_segment_from(120), Some(&b));
        assert_eq!(s.next_segment_from(200), None);
    }
}
