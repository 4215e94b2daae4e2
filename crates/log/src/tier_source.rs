//! What the long-term tier copies from a log (KIP-405): closed segments with their files, the
//! leader epochs they span and the leader-epoch checkpoint cut at their end, as Kafka's
//! `RemoteLogManager` collects a `LogSegmentData`.
//!
//! Only closed segments qualify (the active one still grows), and only those the caller says are
//! safe to copy: ending below the high watermark and the last stable offset, so a copied segment
//! never holds records that a truncation could still remove or an open transaction could still
//! abort without a marker in the same segment.

use std::path::PathBuf;

use crate::epoch_cache::render_checkpoint;
use crate::producer_state::snapshot_path;
use crate::segment::segment_path;
use crate::PartitionLog;

/// One closed segment, ready to be copied.
#[derive(Debug, Clone, PartialEq)]
pub struct TierCandidate {
    pub base_offset: i64,
    /// Last offset of the segment (the next segment's base offset minus one).
    pub end_offset: i64,
    /// Largest record timestamp (the file's modification time for a segment without one).
    pub max_timestamp_ms: i64,
    pub size_bytes: u64,
    pub log: PathBuf,
    pub offset_index: PathBuf,
    pub time_index: PathBuf,
    /// The `.txnindex` file when the segment aborted transactions.
    pub txn_index: Option<PathBuf>,
    /// The producer snapshot taken at the segment's end, when it is still on disk.
    pub producer_snapshot: Option<PathBuf>,
    /// The leader epochs of the segment's offsets: (epoch, first offset in the segment).
    pub leader_epochs: Vec<(i32, i64)>,
    /// The leader-epoch checkpoint (Kafka's text format) of every epoch up to the segment's
    /// end: what a follower starting after this segment needs.
    pub leader_epoch_checkpoint: Vec<u8>,
}

impl PartitionLog {
    /// The closed segments holding offsets at or after `from_offset` and ending below
    /// `below_offset`, oldest first. Their index files are written first where memory holds
    /// more than the files (a segment closed by recovery), so the copy reads what reads use.
    pub fn tier_candidates(
        &self,
        from_offset: i64,
        below_offset: i64,
    ) -> crate::Result<Vec<TierCandidate>> {
        let epochs = self.epochs.lock().entries().to_vec();
        let mut st = self.state.write();
        let n = st.segments.len();
        let mut out = Vec::new();
        for i in 0..n.saturating_sub(1) {
            let next_base = st.segments[i + 1].base_offset;
            let seg = &mut st.segments[i];
            let end_offset = next_base - 1;
            if end_offset < from_offset || end_offset >= below_offset || seg.size == 0 {
                continue;
            }
            if seg.dirty {
                seg.persist_indexes(crate::index::Durability::Synced)?;
            }
            let dir = self.dir();
            let txn_index = segment_path(&dir, seg.base_offset, "txnindex");
            let snapshot = snapshot_path(&dir, next_base);
            out.push(TierCandidate {
                base_offset: seg.base_offset,
                end_offset,
                max_timestamp_ms: seg.largest_timestamp(),
                size_bytes: seg.size,
                log: segment_path(&dir, seg.base_offset, "log"),
                offset_index: segment_path(&dir, seg.base_offset, "index"),
                time_index: segment_path(&dir, seg.base_offset, "timeindex"),
                txn_index: (!seg.txn_index.is_empty()).then_some(txn_index),
                producer_snapshot: snapshot.exists().then_some(snapshot),
                leader_epochs: epochs_within(&epochs, seg.base_offset, end_offset),
                leader_epoch_checkpoint: render_checkpoint(
                    &epochs
                        .iter()
                        .filter(|(_, start)| *start <= end_offset)
                        .map(|&(e, s)| vec![i64::from(e), s])
                        .collect::<Vec<_>>(),
                ),
            });
        }
        Ok(out)
    }
}

/// The epochs of `base..=end`: the one in force at `base` (starting there), then those that
/// start inside.
fn epochs_within(epochs: &[(i32, i64)], base: i64, end: i64) -> Vec<(i32, i64)> {
    let mut out: Vec<(i32, i64)> = Vec::new();
    for &(epoch, start) in epochs {
        if start > end {
            break;
        }
        if start <= base {
            out.clear();
            out.push((epoch, base));
        } else {
            out.push((epoch, start));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::{clock, open, simple};
    use crate::LogConfig;

    #[test]
    fn epochs_are_cut_to_the_segment() {
        let e = [(0, 0), (3, 500), (4, 650)];
        assert_eq!(epochs_within(&e, 100, 199), vec![(0, 100)]);
        assert_eq!(epochs_within(&e, 400, 600), vec![(0, 400), (3, 500)]);
        assert_eq!(epochs_within(&e, 500, 700), vec![(3, 500), (4, 650)]);
        assert_eq!(epochs_within(&e, 700, 800), vec![(4, 700)]);
        assert!(epochs_within(&[], 0, 10).is_empty());
    }

    #[test]
    fn closed_segments_below_the_bound_are_candidates_with_their_files() {
        let dir = tempfile::tempdir().unwrap();
        let (_c, clk) = clock(1_000);
        let config = LogConfig {
            segment_bytes: 1_000,
            ..LogConfig::default()
        };
        let log = open(dir.path(), config, true, &clk);
        for i in 0..30 {
            let epoch = if i < 15 { 1 } else { 2 };
            log.append_as_leader(&simple(3, 1_000 + i), epoch).unwrap();
        }
        let bases = log.segment_base_offsets();
        assert!(bases.len() >= 4, "{bases:?}");
        let leo = log.log_end_offset();

        let all = log.tier_candidates(0, leo).unwrap();
        assert_eq!(
            all.len(),
            bases.len() - 1,
            "every closed segment, never the active one"
        );
        for (c, w) in all.iter().zip(bases.windows(2)) {
            assert_eq!((c.base_offset, c.end_offset), (w[0], w[1] - 1));
            assert_eq!(c.size_bytes, std::fs::metadata(&c.log).unwrap().len());
            assert!(c.offset_index.exists() && c.time_index.exists());
            assert_eq!(c.leader_epochs.first().map(|e| e.1), Some(c.base_offset));
            assert!(c.txn_index.is_none());
            assert!(c.max_timestamp_ms >= 1_000);
        }
        // The epoch change at offset 45 (batch 15) shows in the segment holding it.
        let holder = all
            .iter()
            .find(|c| c.base_offset <= 45 && 45 <= c.end_offset)
            .unwrap();
        if holder.base_offset < 45 {
            assert_eq!(holder.leader_epochs, vec![(1, holder.base_offset), (2, 45)]);
        } else {
            assert_eq!(holder.leader_epochs, vec![(2, 45)]);
        }
        let text = String::from_utf8(all.last().unwrap().leader_epoch_checkpoint.clone()).unwrap();
        assert_eq!(text, "0\n2\n1 0\n2 45\n");
        let first = String::from_utf8(all[0].leader_epoch_checkpoint.clone()).unwrap();
        assert_eq!(first, "0\n1\n1 0\n");

        // Bounds: from past the first segment, below the end of the third.
        let some = log.tier_candidates(bases[1], bases[3] - 1).unwrap();
        assert_eq!(
            some.iter().map(|c| c.base_offset).collect::<Vec<_>>(),
            vec![bases[1]]
        );
        assert!(log.tier_candidates(leo, leo).unwrap().is_empty());
    }
}
