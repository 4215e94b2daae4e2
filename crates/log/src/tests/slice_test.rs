//! Planned reads (`read_slice`): the same bytes as `read` for the same arguments, cut at the
//! same batch, offset limit (high watermark, last stable offset) and segment end.

use crate::test_util::*;
use crate::{LogConfig, LogError, PartitionLog};

fn small_segments() -> LogConfig {
    small_segments_indexed_every(100)
}

fn small_segments_indexed_every(index_interval_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes,
        ..LogConfig::default()
    }
}

/// The bytes `read_slice` plans, read, or empty when it plans none.
fn sliced(
    log: &PartitionLog,
    offset: i64,
    max_bytes: usize,
    max_offset: i64,
    min_one: bool,
) -> Vec<u8> {
    let planned = log
        .read_slice(offset, max_bytes, max_offset, min_one)
        .unwrap();
    match planned.slice {
        Some(s) => {
            let bytes = s.read().unwrap();
            assert_eq!(bytes.len(), s.len);
            let last = batch_ranges(&bytes).last().unwrap().1;
            assert_eq!(
                s.last_offset, last,
                "the slice's last offset is its last batch's"
            );
            bytes.to_vec()
        }
        None => Vec::new(),
    }
}

/// A log of several segments with batches of 1 to 4 records.
fn log_of_many_segments(dir: &std::path::Path) -> PartitionLog {
    log_of_many_segments_with(dir, small_segments())
}

fn log_of_many_segments_with(dir: &std::path::Path, config: LogConfig) -> PartitionLog {
    let (_c, clock) = clock(10_000);
    let log = open(dir, config, true, &clock);
    for i in 0..60 {
        log.append_as_leader(&simple(1 + (i % 4), 1_000 + i as i64), 1)
            .unwrap();
    }
    assert!(log.segment_count() > 4, "segments: {}", log.segment_count());
    log
}

/// Every batch indexed, one entry per few batches, and none: the walk resumes where the index
/// says or starts at the first batch, and the cut is the same.
#[test]
fn a_planned_read_is_the_bytes_of_the_read_for_every_argument() {
    for index_interval_bytes in [0, 100, 1 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let log = log_of_many_segments_with(
            dir.path(),
            small_segments_indexed_every(index_interval_bytes),
        );
        compare_planned_reads_with_reads(&log);
    }
}

fn compare_planned_reads_with_reads(log: &PartitionLog) {
    let leo = log.log_end_offset();
    let mut compared = 0;
    for offset in 0..leo {
        for max_bytes in [0, 1, 60, 61, 100, 250, 400, 1_000, 5_000] {
            for max_offset in [offset, offset + 1, offset + 3, leo / 2, leo - 1, leo] {
                for min_one in [false, true] {
                    let read = log.read(offset, max_bytes, max_offset, min_one).unwrap();
                    let planned = sliced(log, offset, max_bytes, max_offset, min_one);
                    assert_eq!(
                        read.records.to_vec(),
                        planned,
                        "offset {offset} max_bytes {max_bytes} max_offset {max_offset} \
                         min_one {min_one}"
                    );
                    compared += usize::from(!planned.is_empty());
                }
            }
        }
    }
    assert!(compared > 1_000, "{compared} non-empty reads compared");
}

/// A planned read finds its cut through the offset index, in the active segment (index in
/// memory) and in a closed one (index read from its file): a few header reads, not one per
/// batch, and the same bytes as the read.
#[test]
fn a_planned_read_reads_the_headers_near_its_cut_only() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let config = LogConfig {
        segment_bytes: 200_000,
        index_interval_bytes: 4096,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    // Batches of ~1.6 KB: an index entry every three batches.
    for i in 0..300 {
        let one = batch(B {
            records: 1,
            ts: 1_000 + i,
            value_len: 1_600,
            ..B::default()
        });
        log.append_as_leader(&one, 1).unwrap();
    }
    assert!(
        log.segment_count() >= 3,
        "segments: {}",
        log.segment_count()
    );
    assert!(
        log.state.read().segments[0].offset_index.is_on_disk(),
        "a closed segment's index is served from its file"
    );
    let leo = log.log_end_offset();
    for (offset, max_offset) in [(0, leo), (3, 90), (leo - 60, leo), (leo - 60, leo - 2)] {
        crate::segment::header_reads::take();
        let planned = sliced(&log, offset, 100_000, max_offset, true);
        let reads = crate::segment::header_reads::take();
        let read = log.read(offset, 100_000, max_offset, true).unwrap();
        assert_eq!(
            read.records.to_vec(),
            planned,
            "from {offset} below {max_offset}"
        );
        let batches = batch_ranges(&planned).len();
        assert!(batches > 20, "{batches} batches from {offset}");
        assert!(
            reads <= 8,
            "{reads} header reads to plan {batches} batches from {offset} below {max_offset}"
        );
    }
}

#[test]
fn a_planned_read_stops_below_the_high_watermark_and_at_its_segment_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_many_segments(dir.path());
    // Cut at an offset limit (a high watermark, a last stable offset): no batch reaching it.
    let hw = 17;
    let s = log.read_slice(0, 1 << 20, hw, true).unwrap().slice.unwrap();
    assert!(s.last_offset < hw);
    let bytes = s.read().unwrap();
    let ranges = batch_ranges(&bytes);
    assert_eq!(ranges.first().unwrap().0, 0);
    // Ends at a segment's end or before the batch holding the limit.
    let next = log
        .read_slice(s.last_offset + 1, 1 << 20, hw, true)
        .unwrap();
    if let Some(n) = next.slice {
        assert!(
            !std::sync::Arc::ptr_eq(&n.file, &s.file),
            "the next segment's"
        );
    }
    // Nothing to plan at or past the limit, and at the log end.
    assert!(log
        .read_slice(hw, 1 << 20, hw, true)
        .unwrap()
        .slice
        .is_none());
    let leo = log.log_end_offset();
    let at_end = log.read_slice(leo, 1 << 20, leo, true).unwrap();
    assert!(at_end.slice.is_none());
    assert_eq!(at_end.log_end_offset, leo);
    // Out of range, as the read answers.
    assert!(matches!(
        log.read_slice(leo + 1, 100, leo + 1, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn planned_reads_joined_across_segments_are_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_many_segments(dir.path());
    let leo = log.log_end_offset();
    let mut joined = Vec::new();
    let mut offset = 0;
    let mut files = 0;
    while offset < leo {
        let s = log
            .read_slice(offset, 1 << 20, leo, false)
            .unwrap()
            .slice
            .unwrap();
        joined.extend_from_slice(&s.read().unwrap());
        offset = s.last_offset + 1;
        files += 1;
    }
    assert_eq!(files, log.segment_count());
    let mut by_read = Vec::new();
    let mut offset = 0;
    while offset < leo {
        let r = log.read(offset, 1 << 20, leo, false).unwrap();
        offset = batch_ranges(&r.records).last().unwrap().1 + 1;
        by_read.extend_from_slice(&r.records);
    }
    assert_eq!(joined, by_read);
    let offsets: Vec<i64> = batch_ranges(&joined)
        .iter()
        .flat_map(|&(b, l)| b..=l)
        .collect();
    assert_eq!(offsets, (0..leo).collect::<Vec<_>>());
}

#[test]
fn a_slice_of_a_deleted_segment_stays_readable() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of_many_segments(dir.path());
    // The whole first segment (a read stops at a segment's end).
    let leo = log.log_end_offset();
    let first = log
        .read_slice(0, 1 << 20, leo, true)
        .unwrap()
        .slice
        .unwrap();
    let before = first.read().unwrap();
    // DeleteRecords past it deletes its files; the slice holds the open file.
    log.delete_records_before(first.last_offset + 1).unwrap();
    assert!(!first.file.path.exists(), "the segment's file is deleted");
    assert_eq!(first.read().unwrap(), before);
}

#[test]
fn a_slice_cut_by_truncation_reads_short_never_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    for _ in 0..3 {
        log.append_as_leader(&simple(2, 1_000), 1).unwrap();
    }
    let tail = log.read_slice(2, 1 << 20, 6, true).unwrap().slice.unwrap();
    assert_eq!(tail.last_offset, 5);
    // A follower's truncation cuts the active segment's file below the planned range.
    log.truncate_to(2).unwrap();
    assert!(tail.read().is_err(), "a short read is an error");
}
