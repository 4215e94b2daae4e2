//! The follower side's pure decisions (no I/O, no clock): which WAL metadata to fetch for a
//! partition, how to coalesce the slices into ranged GETs, and whether downloaded bytes may be
//! appended to the local log.
//!
//! A WAL fetcher (not in this crate yet) feeds it the partition's local log end offset, the
//! partition's current leader epoch from the cluster metadata image, and the metadata records it
//! has read; it executes the returned GETs and appends what [`verify_slice`] accepts, exactly as
//! it would append a Fetch response (indexes, producer state and leader-epoch cache built
//! locally).
//!
//! # Rules (KIP-1176 "Leader Failover and Recovery", "Data Durability"; issue 5/6)
//!
//! 0. **Validated log**: nothing is fetched for a partition whose log the current leader has not
//!    confirmed yet (after a leader change the follower truncates by leader epoch first, through
//!    its replica fetcher; WAL data of the new epoch must not land on a diverged tail).
//! 1. **Stale epoch**: a record whose leader epoch is older than the partition's current epoch
//!    was published by a former leader; its data may have diverged, so it is skipped.
//! 2. **Future epoch**: a record from a newer epoch than the follower knows is kept for later
//!    (the follower's metadata image is behind), not fetched now.
//! 3. **Unreadable object**: a record whose object could not be read (e.g. the failed AZ's
//!    bucket) is skipped; a republished record of the new leader covers the range instead.
//! 4. **Already covered**: ranges at or below the local log end are skipped.
//! 5. **Gap**: when the next usable record starts above the log end offset (missing, late or
//!    skipped metadata, or a range the leader reported as classic), the follower fetches
//!    `log_end..next_base` by the classic fetch, then returns to the WAL path by itself.
//! 6. **Verify before append**: a slice is appended only if its length and CRC-32C match the
//!    record, its batches are well-framed magic v2 batches with dense offsets exactly spanning
//!    `base..=last`, no batch's partition leader epoch exceeds the record's, and after dropping
//!    batches below the log end it continues the local log exactly.
//! 7. **Coalesce**: slices of one object that are adjacent (or within `max_gap` bytes) are read
//!    with one ranged GET; a GET costs as much as ~50 KB of retrieval on S3 Express One Zone.

use std::collections::BTreeMap;
use std::ops::Range;

use bytes::Bytes;

use crate::error::{Result, WalError};
use crate::metadata::WalSliceMetadata;
use crate::slice_bytes::SliceBytes;

/// What the follower knows about one partition it follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerPartition {
    /// Next offset the local log expects.
    pub log_end_offset: i64,
    /// The partition's current leader epoch (cluster metadata image).
    pub leader_epoch: i32,
    /// Whether the leader of `leader_epoch` has confirmed the local log (a replica fetch
    /// answered without a diverging epoch). Until then nothing is fetched: the log may hold a
    /// former leader's records the new leader does not have, and must first be truncated by
    /// leader epoch (rule 0).
    pub log_validated: bool,
}

/// Why a record was not fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Rule 1.
    StaleLeaderEpoch { record: i32, current: i32 },
    /// Rule 2: keep it and look again once the epoch is known.
    FutureLeaderEpoch { record: i32, current: i32 },
    /// Rule 3.
    ObjectUnreadable,
    /// Rule 4.
    AlreadyCovered,
}

/// Offsets `from..until` must come by the classic fetch from the leader (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassicFetch {
    pub from: i64,
    /// Where the WAL path takes over again.
    pub until: i64,
}

/// The plan for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionPlan {
    /// Records to fetch, in offset order; each starts at or below the offset the previous ends.
    pub fetch: Vec<WalSliceMetadata>,
    pub skipped: Vec<(WalSliceMetadata, SkipReason)>,
    /// Records after a gap, kept until the gap is filled.
    pub deferred: Vec<WalSliceMetadata>,
    pub classic: Option<ClassicFetch>,
}

/// Decides what to fetch for one partition (rules 0–5). `unreadable` says whether a record's
/// object already failed to read.
pub fn plan_partition(
    state: FollowerPartition,
    records: &[WalSliceMetadata],
    unreadable: impl Fn(&WalSliceMetadata) -> bool,
) -> PartitionPlan {
    let mut plan = PartitionPlan::default();
    let mut candidates = Vec::with_capacity(records.len());
    for r in records {
        if r.leader_epoch < state.leader_epoch {
            plan.skipped.push((
                r.clone(),
                SkipReason::StaleLeaderEpoch {
                    record: r.leader_epoch,
                    current: state.leader_epoch,
                },
            ));
        } else if r.leader_epoch > state.leader_epoch {
            plan.skipped.push((
                r.clone(),
                SkipReason::FutureLeaderEpoch {
                    record: r.leader_epoch,
                    current: state.leader_epoch,
                },
            ));
        } else if unreadable(r) {
            plan.skipped.push((r.clone(), SkipReason::ObjectUnreadable));
        } else {
            candidates.push(r);
        }
    }
    if !state.log_validated {
        // Rule 0: keep the records for when the log has been checked; no classic range either
        // (the replica fetcher is busy with exactly that check).
        plan.deferred.extend(candidates.into_iter().cloned());
        return plan;
    }
    // By base offset; among equals prefer the longest range.
    candidates.sort_by_key(|r| (r.base_offset, std::cmp::Reverse(r.last_offset)));
    let mut next = state.log_end_offset;
    let mut iter = candidates.into_iter();
    for r in iter.by_ref() {
        if r.last_offset < next {
            plan.skipped.push((r.clone(), SkipReason::AlreadyCovered));
        } else if r.base_offset > next {
            plan.classic = Some(ClassicFetch {
                from: next,
                until: r.base_offset,
            });
            plan.deferred.push(r.clone());
            break;
        } else {
            next = r.last_offset + 1;
            plan.fetch.push(r.clone());
        }
    }
    plan.deferred.extend(iter.cloned());
    plan
}

/// One ranged GET covering one or more slices of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangedGet {
    pub bucket: String,
    pub object_key: String,
    pub range: Range<u64>,
    /// The slices inside `range`, by byte position.
    pub slices: Vec<WalSliceMetadata>,
}

impl RangedGet {
    /// Cuts the downloaded bytes into the slices' bytes (zero-copy).
    pub fn split(&self, data: &Bytes) -> Result<Vec<(WalSliceMetadata, SliceBytes)>> {
        self.split_body(&SliceBytes::from(data.clone()))
    }

    /// [`RangedGet::split`] over the body in the pieces it arrived in: each slice is views of
    /// the pieces it lies in, nothing is copied.
    pub fn split_pieces(&self, pieces: &[Bytes]) -> Result<Vec<(WalSliceMetadata, SliceBytes)>> {
        self.split_body(&SliceBytes::from_pieces(pieces.iter().cloned()))
    }

    /// [`RangedGet::split`] of a body already held as [`SliceBytes`].
    pub fn split_body(&self, body: &SliceBytes) -> Result<Vec<(WalSliceMetadata, SliceBytes)>> {
        let want = self.range.end - self.range.start;
        let got = body.len() as u64;
        if got != want {
            return Err(WalError::Truncated {
                what: "ranged GET",
                needed: want,
                available: got,
            });
        }
        self.slices
            .iter()
            .map(|s| {
                let r = s.byte_range();
                if r.start < self.range.start || r.end > self.range.end {
                    return Err(WalError::Invalid(format!(
                        "slice {r:?} lies outside the GET range {:?}",
                        self.range
                    )));
                }
                let start = (r.start - self.range.start) as usize;
                let end = (r.end - self.range.start) as usize;
                Ok((s.clone(), body.slice(start..end)))
            })
            .collect()
    }
}

/// Groups slices (of any partitions) by object and merges ranges that touch or lie within
/// `max_gap` bytes of each other into one GET (rule 7).
pub fn coalesce(slices: &[WalSliceMetadata], max_gap: u64) -> Vec<RangedGet> {
    let mut by_object: BTreeMap<(&str, &str), Vec<&WalSliceMetadata>> = BTreeMap::new();
    for s in slices {
        by_object
            .entry((s.bucket.as_str(), s.object_key.as_str()))
            .or_default()
            .push(s);
    }
    let mut gets = Vec::new();
    for ((bucket, key), mut list) in by_object {
        list.sort_by_key(|s| s.byte_position);
        let mut current: Option<RangedGet> = None;
        for s in list {
            let r = s.byte_range();
            match current.as_mut() {
                Some(g) if r.start <= g.range.end.saturating_add(max_gap) => {
                    g.range.end = g.range.end.max(r.end);
                    g.slices.push(s.clone());
                }
                _ => {
                    gets.extend(current.take());
                    current = Some(RangedGet {
                        bucket: bucket.to_owned(),
                        object_key: key.to_owned(),
                        range: r,
                        slices: vec![s.clone()],
                    });
                }
            }
        }
        gets.extend(current);
    }
    gets
}

/// A slice accepted for appending: whole batches starting exactly at the log end offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSlice {
    pub base_offset: i64,
    pub last_offset: i64,
    pub records: SliceBytes,
}

/// Offsets of the v2 record batch header fields this check reads.
const BATCH_LENGTH_END: usize = 12;
const BATCH_HEADER_LEN: usize = 61;
const EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const LAST_DELTA_AT: usize = 23;

fn be_i32(b: &[u8], at: usize) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    i32::from_be_bytes(a)
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Checks downloaded slice bytes against their record and the local log (rule 6). Returns
/// `Ok(None)` when everything in the slice is already below `log_end_offset`.
pub fn verify_slice(
    meta: &WalSliceMetadata,
    data: &SliceBytes,
    log_end_offset: i64,
) -> Result<Option<VerifiedSlice>> {
    if data.len() as u64 != u64::from(meta.byte_length) {
        return Err(WalError::Truncated {
            what: "downloaded slice",
            needed: u64::from(meta.byte_length),
            available: data.len() as u64,
        });
    }
    let computed = data.crc32c();
    if computed != meta.slice_crc {
        return Err(WalError::ChecksumMismatch {
            what: format!(
                "downloaded slice {}:{} offsets {}..={}",
                meta.object_key, meta.byte_position, meta.base_offset, meta.last_offset
            ),
            stored: meta.slice_crc,
            computed,
        });
    }
    let bad = |reason: String| WalError::corrupt("downloaded slice", reason);
    let mut pos = 0usize;
    let mut expected_base = meta.base_offset;
    let mut keep_from: Option<(usize, i64)> = None;
    while pos < data.len() {
        let rest_len = data.len() - pos;
        // The header, copied out: it may straddle two of the pieces.
        let mut rest = [0u8; BATCH_HEADER_LEN];
        if !data.copy_to(pos, &mut rest) {
            return Err(bad(format!("{rest_len} trailing bytes are not a batch")));
        }
        let rest = &rest[..];
        let batch_len = be_i32(rest, 8);
        let total = usize::try_from(batch_len)
            .ok()
            .and_then(|l| l.checked_add(BATCH_LENGTH_END))
            .filter(|t| *t >= BATCH_HEADER_LEN && *t <= rest_len)
            .ok_or_else(|| bad(format!("batch at byte {pos} has length {batch_len}")))?;
        if rest[MAGIC_AT] != 2 {
            return Err(bad(format!(
                "batch at byte {pos} has magic {}",
                rest[MAGIC_AT]
            )));
        }
        let base = be_i64(rest, 0);
        let last = base.saturating_add(i64::from(be_i32(rest, LAST_DELTA_AT)));
        if base != expected_base || last < base {
            return Err(bad(format!(
                "batch {base}..={last} does not follow offset {expected_base}"
            )));
        }
        let epoch = be_i32(rest, EPOCH_AT);
        if epoch > meta.leader_epoch {
            return Err(bad(format!(
                "batch {base}..={last} has leader epoch {epoch} above the record's {}",
                meta.leader_epoch
            )));
        }
        if keep_from.is_none() && last >= log_end_offset {
            keep_from = Some((pos, base));
        }
        expected_base = last + 1;
        pos += total;
    }
    if expected_base != meta.last_offset + 1 {
        return Err(bad(format!(
            "batches end at {} but the record says {}",
            expected_base - 1,
            meta.last_offset
        )));
    }
    let Some((at, base)) = keep_from else {
        return Ok(None);
    };
    if base != log_end_offset {
        return Err(bad(format!(
            "slice continues at {base} but the local log ends at {log_end_offset}"
        )));
    }
    Ok(Some(VerifiedSlice {
        base_offset: base,
        last_offset: meta.last_offset,
        records: data.slice(at..data.len()),
    }))
}

#[cfg(test)]
#[path = "follower_test.rs"]
mod tests;
