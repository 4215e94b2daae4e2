//! Issue 16: closed segments serve their offset and time indexes from their files; only the
//! active segment keeps index entries in memory. Lookups answer as they did from memory.

use std::path::Path;

use crate::index::{Durability, OffsetIndex, TimeIndex, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE};
use crate::segment::segment_path;
use crate::test_util::*;
use crate::{LogConfig, PartitionLog};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

/// Batch `i` holds offsets `2i, 2i + 1` with timestamps `1000 + 10i` and `1001 + 10i`.
const BATCHES: i64 = 300;

fn fill(log: &PartitionLog) {
    for i in 0..BATCHES {
        log.append_as_leader(&simple(2, 1_000 + 10 * i), 0).unwrap();
    }
}

/// (offset, timestamp) of every record.
fn records() -> Vec<(i64, i64)> {
    (0..BATCHES)
        .flat_map(|i| [(2 * i, 1_000 + 10 * i), (2 * i + 1, 1_001 + 10 * i)])
        .collect()
}

/// Checks every offset and a spread of timestamps against the known records.
fn check_lookups(log: &PartitionLog) {
    let recs = records();
    let leo = log.log_end_offset();
    assert_eq!(leo, 2 * BATCHES);
    for o in 0..leo {
        let data = log.read(o, 1, leo, true).unwrap();
        let ranges = batch_ranges(&data.records);
        assert_eq!(ranges, vec![(o - o % 2, o - o % 2 + 1)], "read at {o}");
    }
    for t in (990..1_000 + 10 * BATCHES + 5).step_by(3) {
        let want = recs.iter().copied().find(|&(_, ts)| ts >= t);
        assert_eq!(log.offset_for_timestamp(t).unwrap(), want, "timestamp {t}");
    }
    let last = recs[recs.len() - 1];
    assert_eq!(log.max_timestamp().unwrap(), Some(last));
    assert_closed_indexes_on_disk_and_consistent(log);
}

/// Entries of the active segment's indexes; all the memory the indexes may hold.
fn active_entries(log: &PartitionLog) -> usize {
    let st = log.state.read();
    st.active().in_memory_index_entries()
}

fn assert_closed_on_disk(log: &PartitionLog) {
    let st = log.state.read();
    let n = st.segments.len();
    assert!(n > 5, "segments: {n}");
    for s in &st.segments[..n - 1] {
        assert!(s.offset_index.is_on_disk(), "segment {}", s.base_offset);
        assert!(s.time_index.is_on_disk(), "segment {}", s.base_offset);
        assert!(!s.offset_index.is_empty(), "segment {}", s.base_offset);
        assert_eq!(s.in_memory_index_entries(), 0);
    }
    assert!(!st.active().offset_index.is_on_disk());
    drop(st);
    assert_eq!(log.in_memory_index_entries(), active_entries(log));
}

#[test]
fn closed_segments_hold_no_index_entries_and_lookups_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), config(), true, &clock);
    fill(&log);
    assert_closed_on_disk(&log);
    check_lookups(&log);
    // The active segment still grows its in-memory index and rolls.
    let segments = log.segment_count();
    for i in BATCHES..BATCHES + 40 {
        log.append_as_leader(&simple(2, 1_000 + 10 * i), 0).unwrap();
    }
    assert!(log.segment_count() > segments);
    let st = log.state.read();
    let n = st.segments.len();
    assert!(st.segments[..n - 1]
        .iter()
        .all(|s| s.offset_index.is_on_disk()));
}

#[test]
fn reopened_logs_serve_closed_indexes_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), config(), true, &clock);
    fill(&log);
    log.close().unwrap();
    drop(log);
    // Clean start.
    let log = open(dir.path(), config(), true, &clock);
    assert_closed_on_disk(&log);
    check_lookups(&log);
    drop(log);
    // Unclean start recovering every segment: rebuilt indexes are written, then served from disk.
    std::fs::remove_file(dir.path().join("recovery-point")).unwrap();
    let log = open(dir.path(), config(), false, &clock);
    assert_closed_on_disk(&log);
    check_lookups(&log);
}

fn first_segments(dir: &Path, n: usize) -> Vec<i64> {
    let mut bases: Vec<i64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log").map(|s| s.parse().unwrap())
        })
        .collect();
    bases.sort_unstable();
    bases.truncate(n);
    bases
}

#[test]
fn corrupt_index_files_are_rebuilt_on_a_clean_start() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), config(), true, &clock);
    fill(&log);
    log.close().unwrap();
    drop(log);
    let bases = first_segments(dir.path(), 3);
    // A short offset index, a time index whose timestamps go back, a missing offset index.
    let short = segment_path(dir.path(), bases[0], "index");
    let mut bytes = std::fs::read(&short).unwrap();
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&short, &bytes).unwrap();
    let backwards = segment_path(dir.path(), bases[1], "timeindex");
    let mut bytes = std::fs::read(&backwards).unwrap();
    assert!(bytes.len() >= 2 * TIME_ENTRY_SIZE as usize);
    bytes[TIME_ENTRY_SIZE as usize..TIME_ENTRY_SIZE as usize + 8]
        .copy_from_slice(&0i64.to_be_bytes());
    std::fs::write(&backwards, &bytes).unwrap();
    std::fs::remove_file(segment_path(dir.path(), bases[2], "index")).unwrap();

    let log = open(dir.path(), config(), true, &clock);
    assert_closed_on_disk(&log);
    check_lookups(&log);
    for &b in &bases {
        let oi = std::fs::read(segment_path(dir.path(), b, "index")).unwrap();
        assert!(!oi.is_empty() && oi.len().is_multiple_of(OFFSET_ENTRY_SIZE as usize));
        assert!(
            OffsetIndex::read_from(&segment_path(dir.path(), b, "index"))
                .unwrap()
                .is_some()
        );
        assert!(
            TimeIndex::read_from(&segment_path(dir.path(), b, "timeindex"))
                .unwrap()
                .is_some()
        );
    }
}

#[test]
fn truncating_into_a_closed_segment_makes_it_the_in_memory_active_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), config(), true, &clock);
    fill(&log);
    let bases = log.segment_base_offsets();
    let cut = bases[2] + 7;
    log.truncate_to(cut).unwrap();
    assert_eq!(log.log_end_offset(), cut - cut % 2);
    {
        let st = log.state.read();
        assert_eq!(st.segments.len(), 3);
        assert!(!st.active().offset_index.is_on_disk());
        assert!(st.segments[..2].iter().all(|s| s.offset_index.is_on_disk()));
    }
    // Append the rest again: the log answers as the untruncated one did.
    for i in log.log_end_offset() / 2..BATCHES {
        log.append_as_leader(&simple(2, 1_000 + 10 * i), 0).unwrap();
    }
    assert_closed_on_disk(&log);
    check_lookups(&log);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config(), true, &clock);
    check_lookups(&log);
}

/// Lookups binary-searching a file of many blocks answer as the in-memory search does.
#[test]
fn on_disk_search_matches_in_memory_search() {
    let dir = tempfile::tempdir().unwrap();
    for n in [0usize, 1, 2, 511, 512, 513, 3_000] {
        let oi = OffsetIndex::from_entries((0..n as u32).map(|i| (3 * i + 1, 7 * i + 5)).collect());
        let ti = TimeIndex::from_entries(
            (0..n as u32)
                .map(|i| (5 * i64::from(i) + 2, 3 * i))
                .collect(),
        );
        let op = dir.path().join(format!("{n}.index"));
        let tp = dir.path().join(format!("{n}.timeindex"));
        oi.write_to(&op, Durability::Synced).unwrap();
        ti.write_to(&tp, Durability::Synced).unwrap();
        let od = oi.on_disk(&op).unwrap().unwrap();
        let td = ti.on_disk(&tp).unwrap().unwrap();
        assert!(od.is_on_disk() && td.is_on_disk());
        assert_eq!((od.in_memory_len(), od.len(), od.last()), (0, n, oi.last()));
        assert_eq!((td.in_memory_len(), td.len(), td.last()), (0, n, ti.last()));
        for rel in 0..3 * n as u32 + 3 {
            assert_eq!(od.lookup(rel), oi.lookup(rel), "n {n} rel {rel}");
        }
        for ts in -1..5 * n as i64 + 4 {
            assert_eq!(td.lookup_below(ts), ti.lookup_below(ts), "n {n} ts {ts}");
        }
        assert_eq!(od.to_vec().unwrap(), oi.to_vec().unwrap());
        // A file replaced under the index is not read: lookups fall back to a scan from the start.
        if n > 0 {
            OffsetIndex::from_entries(vec![(1, 1)])
                .write_to(&op, Durability::Synced)
                .unwrap();
            drop(od.clone()); // evicts the cached handle of the old file
            assert_eq!(od.lookup(3 * n as u32), 0);
            std::fs::remove_file(&tp).unwrap();
            drop(td.clone());
            assert_eq!(td.lookup_below(i64::MAX), None);
        }
    }
    // A file that does not hold the entries is refused.
    let oi = OffsetIndex::from_entries(vec![(1, 10), (2, 20)]);
    let p = dir.path().join("other.index");
    OffsetIndex::from_entries(vec![(1, 10)])
        .write_to(&p, Durability::Synced)
        .unwrap();
    assert!(oi.on_disk(&p).unwrap().is_none());
}

/// An active segment holds its entries as compactly as its files would (8 and 12 bytes), and the
/// packed time entries keep every timestamp, negative and extreme ones included.
#[test]
fn active_index_entries_take_their_file_size_in_memory() {
    let ts = [
        i64::MIN,
        -1_000,
        -1,
        0,
        1,
        1 << 32,
        (1 << 32) + 1,
        i64::MAX - 1,
    ];
    let ti = TimeIndex::from_entries(ts.iter().zip(0u32..).map(|(&t, r)| (t, r)).collect());
    assert_eq!(ti.in_memory_bytes(), ts.len() * TIME_ENTRY_SIZE as usize);
    assert_eq!(
        ti.to_vec().unwrap(),
        ts.iter()
            .zip(0u32..)
            .map(|(&t, r)| (t, r))
            .collect::<Vec<_>>()
    );
    for (r, &t) in ts.iter().enumerate() {
        assert_eq!(
            ti.lookup_below(t),
            r.checked_sub(1).map(|r| r as u32),
            "ts {t}"
        );
    }
    let mut ti = TimeIndex::default();
    ti.maybe_append(-5, 0);
    ti.maybe_append(7, 3);
    assert_eq!(ti.last(), Some((7, 3)));
    let mut oi = OffsetIndex::default();
    oi.append(1, 10);
    oi.append(4, 90);
    assert_eq!(oi.in_memory_bytes(), 2 * OFFSET_ENTRY_SIZE as usize);
    assert_eq!((oi.lookup(3), oi.lookup(4)), (10, 90));
}

/// Not a check: prints the index memory of a log of `FERRY_MEASURE_MB` (default 256) MiB in
/// 1 MiB segments with the default index interval, as it was (every segment's entries in memory)
/// and as it is (the active segment's only). Run with `--ignored --nocapture`.
#[test]
#[ignore]
fn measure_index_memory() {
    let mb: u64 = std::env::var("FERRY_MEASURE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let config = LogConfig {
        segment_bytes: 1 << 20,
        retention_ms: -1,
        retention_bytes: -1,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    // 10 records of 100 bytes a batch, timestamps 1 ms apart so the time index grows too.
    let ten = |i: u64| {
        batch(B {
            records: 10,
            value_len: 100,
            ts: 1_000 + i as i64,
            ..B::default()
        })
    };
    let batch_len = ten(0).len();
    for i in 0..(mb << 20) / batch_len as u64 {
        log.append_as_leader(&ten(i), 0).unwrap();
    }
    let st = log.state.read();
    // As it was: every segment's entries in memory as (u32, u32) and padded (i64, u32) tuples.
    let all: usize = st
        .segments
        .iter()
        .map(|s| s.offset_index.len() * 8 + s.time_index.len() * 16)
        .sum();
    let now: usize = st
        .segments
        .iter()
        .map(|s| s.offset_index.in_memory_bytes() + s.time_index.in_memory_bytes())
        .sum();
    println!(
        "{} MiB, {} segments, batch {} bytes: index entries in memory before {} bytes, after {} bytes",
        mb,
        st.segments.len(),
        batch_len,
        all,
        now
    );
}
