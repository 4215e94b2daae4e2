//! Log compaction: latest value per key, tombstones, lags, codecs, producer state, concurrent
//! reads, crash recovery of swaps, and the LogManager's cleaning triggers.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::batch::BatchHeader;
use crate::segment::segment_path;
use crate::test_util::{batch_ranges, clock, open, tp};
use crate::{LogConfig, LogError, LogManager, PartitionLog};

/// `(key, value)`; `None` value = tombstone.
type Kv<'a> = (Option<&'a str>, Option<&'a str>);

#[derive(Clone, Copy)]
struct P {
    pid: i64,
    epoch: i16,
    seq: i32,
}

const NO_PID: P = P {
    pid: -1,
    epoch: -1,
    seq: -1,
};

fn kv_batch(recs: &[Kv<'_>], ts: i64, compression: Compression, p: P) -> Vec<u8> {
    let records: Vec<Record> = recs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: p.pid,
            producer_epoch: p.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if p.seq < 0 {
                i as i32 - 1
            } else {
                p.seq + i as i32
            },
            timestamp: ts + i as i64,
            key: k.map(|k| Bytes::from(k.to_string())),
            value: v.map(|v| Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .unwrap();
    assert_eq!(batch_ranges(&buf).len(), 1);
    buf.to_vec()
}

fn one(key: &str, value: Option<&str>, ts: i64) -> Vec<u8> {
    kv_batch(&[(Some(key), value)], ts, Compression::None, NO_PID)
}

/// A record as a consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    offset: i64,
    key: Option<String>,
    value: Option<String>,
    ts: i64,
}

fn string(b: Option<Bytes>) -> Option<String> {
    b.map(|b| String::from_utf8(b.to_vec()).unwrap())
}

/// Reads the whole log the way a consumer does (fetch, then continue after the last batch).
fn dump(log: &PartitionLog) -> Vec<Rec> {
    let mut off = log.log_start_offset();
    let mut out = Vec::new();
    loop {
        let data = log.read(off, 1 << 20, i64::MAX, true).unwrap();
        if data.records.is_empty() {
            assert_eq!(off, data.log_end_offset, "empty read below the log end");
            return out;
        }
        let ranges = batch_ranges(&data.records);
        let mut b = data.records.clone();
        for set in RecordBatchDecoder::decode_all(&mut b).unwrap() {
            for r in set.records {
                if r.offset >= off {
                    out.push(Rec {
                        offset: r.offset,
                        key: string(r.key),
                        value: string(r.value),
                        ts: r.timestamp,
                    });
                }
            }
        }
        off = ranges.last().unwrap().1 + 1;
    }
}

/// What compaction must leave: below `up_to`, the latest record per key (minus `dropped`
/// tombstones); from `up_to` on, everything.
fn model(all: &[Rec], up_to: i64, drop_tombstones: bool) -> Vec<Rec> {
    let mut latest: HashMap<Option<String>, i64> = HashMap::new();
    for r in all.iter().filter(|r| r.offset < up_to) {
        latest.insert(r.key.clone(), r.offset);
    }
    all.iter()
        .filter(|r| {
            r.offset >= up_to
                || (latest.get(&r.key) == Some(&r.offset)
                    && !(drop_tombstones && r.value.is_none()))
        })
        .cloned()
        .collect()
}

fn roll(log: &PartitionLog) {
    let _w = log.writer.lock();
    log.roll_locked(log.clock.now_ms()).unwrap();
}

fn compact_config() -> LogConfig {
    LogConfig {
        compact: true,
        segment_bytes: 400,
        index_interval_bytes: 100,
        retention_ms: -1,
        retention_bytes: -1,
        ..LogConfig::default()
    }
}

fn fill(log: &PartitionLog, n: usize, keys: usize, ts: i64) {
    for i in 0..n {
        let key = format!("k{}", i % keys);
        let value = format!("v{}", log.log_end_offset());
        log.append_as_leader(&one(&key, Some(&value), ts), 0)
            .unwrap();
    }
}

#[test]
fn keeps_the_latest_value_per_key_with_offsets_preserved() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let log = open(dir.path(), compact_config(), true, &clock);
    fill(&log, 40, 3, 1_000);
    roll(&log);
    fill(&log, 4, 3, 1_000); // active segment: stays as is
    let before = dump(&log);
    let (lso, leo, segments) = (
        log.log_start_offset(),
        log.log_end_offset(),
        log.segment_count(),
    );
    let size_before = log.size_in_bytes();

    let stats = log.clean().unwrap();
    assert_eq!(stats.cleaned_up_to, 40);
    assert_eq!(stats.first_dirty_offset, 0);
    assert!(stats.segments_rewritten > 0);
    assert_eq!(stats.superseded_removed, 37);
    assert_eq!(log.cleaner_checkpoint(), 40);
    let after = dump(&log);
    assert_eq!(after, model(&before, 40, false));
    let kept: Vec<i64> = after.iter().map(|r| r.offset).collect();
    assert_eq!(kept, vec![37, 38, 39, 40, 41, 42, 43]);
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.segment_count()
        ),
        (lso, leo, segments)
    );
    assert!(log.size_in_bytes() < size_before);
    // The swapped-in segments serve their indexes from their new files.
    crate::test_util::assert_closed_indexes_on_disk_and_consistent(&log);
    // A fetch at a cleaned-away offset gets the next batch.
    // (A segment whose records all went keeps its last batch as an empty batch.)
    let data = log.read(5, 1 << 20, i64::MAX, true).unwrap();
    let (base, last) = batch_ranges(&data.records)[0];
    assert!(base > 5 && last >= base, "{base} {last}");
    // Appends continue at the log end; a second pass with nothing new changes nothing.
    assert_eq!(
        log.append_as_leader(&one("k0", Some("x"), 1_000), 0)
            .unwrap()
            .first_offset,
        leo
    );
    let again = log.clean().unwrap();
    assert_eq!(again.segments_rewritten, 0);
    let snapshot = dump(&log);

    // Clean and unclean reopen see the same.
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), compact_config(), true, &clock);
    assert_eq!(dump(&log), snapshot);
    assert_eq!(log.cleaner_checkpoint(), 40);
    drop(log);
    let log = open(dir.path(), compact_config(), false, &clock);
    assert_eq!(dump(&log), snapshot);
    crate::test_util::assert_closed_indexes_on_disk_and_consistent(&log);
}

#[test]
fn second_pass_uses_the_checkpoint_and_supersedes_older_clean_records() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let log = open(dir.path(), compact_config(), true, &clock);
    fill(&log, 20, 4, 1_000);
    roll(&log);
    log.clean().unwrap();
    fill(&log, 6, 2, 1_000); // k0 and k1 again
    roll(&log);
    let before = dump(&log);
    let stats = log.clean().unwrap();
    assert_eq!(stats.first_dirty_offset, 20);
    assert_eq!(stats.keys_in_map, 2);
    let after = dump(&log);
    assert_eq!(after, model(&before, 26, false));
    let keys: Vec<_> = after.iter().map(|r| r.key.clone().unwrap()).collect();
    assert_eq!(keys, vec!["k2", "k3", "k0", "k1"]);
}

#[test]
fn tombstones_survive_delete_retention_then_go() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(100_000);
    let config = LogConfig {
        delete_retention_ms: 10_000,
        ..compact_config()
    };
    let log = open(dir.path(), config.clone(), true, &clock);
    fill(&log, 6, 2, 100_000);
    log.append_as_leader(&one("k0", None, 100_000), 0).unwrap();
    fill(&log, 2, 3, 100_000); // offsets 7, 8: k0 (superseding its tombstone), k1
    log.append_as_leader(&one("k2", Some("x"), 100_000), 0)
        .unwrap();
    log.append_as_leader(&one("k1", None, 100_000), 0).unwrap();
    roll(&log);
    let before = dump(&log);

    c.set(105_000);
    log.clean().unwrap();
    let after = dump(&log);
    assert_eq!(after, model(&before, 11, false));
    assert!(after
        .iter()
        .any(|r| r.key.as_deref() == Some("k1") && r.value.is_none()));

    // Not yet: a tombstone exactly at the horizon stays.
    c.set(110_000);
    log.clean().unwrap();
    assert_eq!(dump(&log), model(&before, 11, false));

    c.set(110_002);
    let stats = log.clean().unwrap();
    assert_eq!(stats.tombstones_removed, 1);
    let after = dump(&log);
    assert_eq!(after, model(&before, 11, true));
    assert!(after.iter().all(|r| r.value.is_some()));
    assert!(after.iter().all(|r| r.key.as_deref() != Some("k1")));
}

#[test]
fn active_segment_and_young_segments_are_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(50_000);
    let config = LogConfig {
        min_compaction_lag_ms: 10_000,
        ..compact_config()
    };
    let log = open(dir.path(), config, true, &clock);
    fill(&log, 10, 2, 10_000); // old
    roll(&log);
    let old_end = log.log_end_offset();
    fill(&log, 10, 2, 45_000); // younger than the lag
    roll(&log);
    fill(&log, 10, 2, 49_000); // active
    let active_base = *log.segment_base_offsets().last().unwrap();
    let active_file = segment_path(dir.path(), active_base, "log");
    let active_bytes = std::fs::read(&active_file).unwrap();
    let before = dump(&log);

    let stats = log.clean().unwrap();
    assert_eq!(stats.cleaned_up_to, old_end);
    assert_eq!(dump(&log), model(&before, old_end, false));
    assert_eq!(std::fs::read(&active_file).unwrap(), active_bytes);

    // Once old enough, the middle segments are cleaned too; the active one never.
    c.set(60_000);
    let stats = log.clean().unwrap();
    assert_eq!(stats.cleaned_up_to, active_base);
    assert_eq!(dump(&log), model(&before, active_base, false));
    assert_eq!(std::fs::read(&active_file).unwrap(), active_bytes);
}

#[test]
fn compressed_batches_are_cleaned_with_their_codec() {
    for compression in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (_c, clock) = clock(1_000_000);
        let config = LogConfig {
            segment_bytes: 1_000,
            ..compact_config()
        };
        let log = open(dir.path(), config, true, &clock);
        for round in 0..6 {
            let vals: Vec<String> = (0..5).map(|i| format!("r{round}-{i}")).collect();
            let keys = ["a", "b", "c", "d", "e"];
            // Later rounds only rewrite some keys.
            let n = if round % 2 == 0 { 5 } else { 2 };
            let recs: Vec<Kv<'_>> = (0..n)
                .map(|i| (Some(keys[i]), Some(vals[i].as_str())))
                .collect();
            log.append_as_leader(&kv_batch(&recs, 1_000 + round, compression, NO_PID), 0)
                .unwrap();
        }
        roll(&log);
        let before = dump(&log);
        let leo = log.log_end_offset();
        log.clean().unwrap();
        let after = dump(&log);
        assert_eq!(after, model(&before, leo, false), "{compression:?}");
        assert_eq!(after.len(), 5);
        // Timestamps and codec kept.
        let data = log.read(0, 1 << 20, i64::MAX, true).unwrap();
        let mut p = 0;
        while p < data.records.len() {
            let h = BatchHeader::parse(&data.records[p..]).unwrap();
            if h.records_count > 0 {
                assert_eq!(h.compression(), compression as i16, "{compression:?}");
            }
            assert_eq!(
                crate::batch::compute_crc(&data.records[p..p + h.total_size()]),
                h.crc
            );
            p += h.total_size();
        }
    }
}

#[test]
fn null_keys_are_refused_on_compacted_logs_only_each_named_by_its_index() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), compact_config(), true, &clock);
    let keyless = kv_batch(
        &[
            (Some("a"), Some("1")),
            (None, Some("2")),
            (Some("b"), Some("3")),
            (None, Some("4")),
        ],
        1,
        Compression::None,
        NO_PID,
    );
    let refused_indexes = |e: LogError| match e {
        LogError::RecordsRejected(records) => {
            records.iter().map(|r| r.batch_index).collect::<Vec<_>>()
        }
        other => panic!("expected record errors, got {other}"),
    };
    let e = log.append_as_leader(&keyless, 0).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("2 record(s) of the batch refused"),
        "{e}"
    );
    assert_eq!(refused_indexes(e), [1, 3]);
    let gz = kv_batch(&[(None, Some("2"))], 1, Compression::Gzip, NO_PID);
    assert_eq!(
        refused_indexes(log.append_as_leader(&gz, 0).unwrap_err()),
        [0]
    );
    assert_eq!(log.log_end_offset(), 0);
    log.append_as_leader(&one("a", None, 1), 0).unwrap();

    let dir2 = tempfile::tempdir().unwrap();
    let plain = open(dir2.path(), LogConfig::default(), true, &clock);
    plain.append_as_leader(&keyless, 0).unwrap();
}

#[test]
fn reads_during_cleaning_see_consistent_data() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let log = Arc::new(open(dir.path(), compact_config(), true, &clock));
    fill(&log, 60, 5, 1_000);
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (log, stop, reads) = (Arc::clone(&log), Arc::clone(&stop), Arc::clone(&reads));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) || reads.load(Ordering::Relaxed) < 20 {
                let recs = dump(&log);
                let mut last_per_key: BTreeMap<String, i64> = BTreeMap::new();
                let mut prev = -1;
                for r in &recs {
                    assert!(r.offset > prev, "offsets go backwards");
                    prev = r.offset;
                    // Every value names the offset it was appended at.
                    assert_eq!(r.value.as_deref(), Some(format!("v{}", r.offset).as_str()));
                    last_per_key.insert(r.key.clone().unwrap(), r.offset);
                }
                // The latest value of each key is never lost.
                assert_eq!(last_per_key.len(), 5, "{recs:?}");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for _ in 0..15 {
        fill(&log, 12, 5, 1_000);
        roll(&log);
        log.clean().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert!(reads.load(Ordering::Relaxed) >= 20);
    let recs = dump(&log);
    assert_eq!(recs.len(), 5);
}

#[test]
fn recovery_deletes_cleaned_files_and_completes_swaps() {
    let (_c, clock) = clock(1_000_000);
    let build = |dir: &Path| {
        let log = open(dir, compact_config(), true, &clock);
        fill(&log, 30, 3, 1_000);
        roll(&log);
        fill(&log, 2, 3, 1_000);
        log
    };
    // dir_a is cleaned; dir_b has the same bytes and gets one cleaned segment as a leftover swap.
    let dir_a = tempfile::tempdir().unwrap();
    let dir_b = tempfile::tempdir().unwrap();
    let a = build(dir_a.path());
    let b = build(dir_b.path());
    let before = dump(&b);
    assert_eq!(dump(&a), before);
    let bases = a.segment_base_offsets();
    a.clean().unwrap();
    let cleaned = dump(&a);
    drop(b); // crash

    // Every segment of dir_b except the active one gets its cleaned version as `.log.swap`,
    // the first one also an unfinished `.cleaned`, plus a swap for a segment that is gone.
    for base in &bases[..bases.len() - 1] {
        std::fs::copy(
            segment_path(dir_a.path(), *base, "log"),
            segment_path(dir_b.path(), *base, "log.swap"),
        )
        .unwrap();
    }
    std::fs::write(
        segment_path(dir_b.path(), bases[0], "log.cleaned"),
        b"partial",
    )
    .unwrap();
    std::fs::write(segment_path(dir_b.path(), 99_999, "log.swap"), b"orphan").unwrap();
    let b = open(dir_b.path(), compact_config(), false, &clock);
    assert_eq!(dump(&b), cleaned);
    assert_eq!(b.log_end_offset(), a.log_end_offset());
    let leftovers: Vec<String> = std::fs::read_dir(dir_b.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.ends_with(".swap") || n.ends_with(".cleaned") || n.starts_with("00000000000000099999")
        })
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // Indexes were rebuilt: reads through them work and a clean reopen agrees.
    b.close().unwrap();
    drop(b);
    let b = open(dir_b.path(), compact_config(), true, &clock);
    assert_eq!(dump(&b), cleaned);
    assert_eq!(model(&before, bases[bases.len() - 1], false), cleaned);
}

#[test]
fn compact_delete_also_applies_retention() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(100_000);
    let mgr = LogManager::open(vec![dir.path().to_path_buf()], clock).unwrap();
    let config = LogConfig {
        retention_ms: 50_000,
        min_cleanable_dirty_ratio: 0.0,
        ..compact_config()
    };
    let log = mgr.get_or_create(&tp(), config).unwrap();
    fill(&log, 20, 2, 100_000); // will expire
    roll(&log);
    c.set(200_000);
    fill(&log, 20, 2, 200_000);
    roll(&log);
    fill(&log, 1, 2, 200_000);
    let deleted = mgr.run_maintenance().unwrap();
    assert!(deleted > 0);
    assert_eq!(mgr.clean_dirty_logs().unwrap(), 1);
    assert_eq!(log.log_start_offset(), 20);
    let recs = dump(&log);
    let offsets: Vec<i64> = recs.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![38, 39, 40]);
    assert_eq!(log.cleaner_checkpoint(), 40);
}

#[test]
fn producer_state_survives_cleaning_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let log = open(dir.path(), compact_config(), true, &clock);
    let p = |seq| P {
        pid: 7,
        epoch: 2,
        seq,
    };
    for i in 0..6 {
        let v = format!("p{i}");
        let b = kv_batch(
            &[(Some("a"), Some(&v)), (Some("b"), Some(&v))],
            1_000,
            Compression::None,
            p(i * 2),
        );
        log.append_as_leader(&b, 0).unwrap();
    }
    let last = kv_batch(
        &[(Some("a"), Some("p5")), (Some("b"), Some("p5"))],
        1_000,
        Compression::None,
        p(10),
    );
    // Another writer supersedes both keys, so the producer's last batch loses its records.
    for i in 0..2 {
        let v = format!("x{i}");
        log.append_as_leader(&one("a", Some(&v), 1_000), 0).unwrap();
        log.append_as_leader(&one("b", Some(&v), 1_000), 0).unwrap();
    }
    roll(&log);
    let stats = log.clean().unwrap();
    assert!(stats.superseded_removed >= 12);
    let recs = dump(&log);
    assert_eq!(
        recs.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![14, 15]
    );
    // The producer's last batch is still there as an empty batch with its header intact.
    let data = log.read(10, 1 << 20, i64::MAX, true).unwrap();
    let h = BatchHeader::parse(&data.records).unwrap();
    assert_eq!(
        (
            h.base_offset,
            h.last_offset(),
            h.producer_id,
            h.base_sequence,
            h.records_count
        ),
        (10, 11, 7, 10, 0)
    );

    // Crash, lose the producer snapshots: the state is rebuilt from the cleaned log.
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let log = open(dir.path(), compact_config(), false, &clock);
    assert_eq!(log.producer_epoch(7), Some(2));
    let retry = log.append_as_leader(&last, 0).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (10, 11));
    let next = kv_batch(&[(Some("a"), Some("p6"))], 1_000, Compression::None, p(12));
    let info = log.append_as_leader(&next, 0).unwrap();
    assert_eq!(info.first_offset, 16);
    let skip = kv_batch(&[(Some("a"), Some("p8"))], 1_000, Compression::None, p(20));
    assert!(matches!(
        log.append_as_leader(&skip, 0),
        Err(LogError::OutOfOrderSequence { expected: 13, .. })
    ));
}

#[test]
fn manager_cleans_by_dirty_ratio_and_max_lag_and_clean_all_forces() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000_000);
    let mgr = LogManager::open(vec![dir.path().to_path_buf()], clock).unwrap();
    let config = LogConfig {
        min_cleanable_dirty_ratio: 0.5,
        max_compaction_lag_ms: 100_000,
        ..compact_config()
    };
    let log = mgr.get_or_create(&tp(), config).unwrap();
    let plain = mgr
        .get_or_create(&crate::test_util::tp_named("plain"), LogConfig::default())
        .unwrap();
    plain.append_as_leader(&one("k", Some("v"), 1), 0).unwrap();

    fill(&log, 40, 2, 1_000_000);
    roll(&log);
    assert!((log.dirty_ratio() - 1.0).abs() < 1e-9);
    assert!(log.needs_cleaning());
    mgr.clean_dirty_logs().unwrap();
    assert_eq!(log.cleaner_checkpoint(), 40);
    assert_eq!(log.dirty_ratio(), 0.0);

    // A little dirt: below the ratio, nothing happens...
    fill(&log, 2, 2, 1_000_000);
    roll(&log);
    assert!(log.dirty_ratio() < 0.5, "{}", log.dirty_ratio());
    assert!(!log.needs_cleaning());
    mgr.clean_dirty_logs().unwrap();
    assert_eq!(log.cleaner_checkpoint(), 40);
    // ...until the dirty data is older than max.compaction.lag.ms.
    c.set(1_200_000);
    assert!(log.needs_cleaning());
    mgr.clean_dirty_logs().unwrap();
    assert_eq!(log.cleaner_checkpoint(), 42);

    // clean_all ignores the ratio and skips non-compacted logs.
    fill(&log, 1, 2, 1_200_000);
    roll(&log);
    assert!(!log.needs_cleaning());
    assert_eq!(mgr.clean_all().unwrap(), 1);
    assert_eq!(log.cleaner_checkpoint(), 43);
    assert_eq!(dump(&log).len(), 2);
}

#[test]
fn truncation_lowers_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let log = open(dir.path(), compact_config(), true, &clock);
    fill(&log, 20, 2, 1_000);
    roll(&log);
    log.clean().unwrap();
    assert_eq!(log.cleaner_checkpoint(), 20);
    log.truncate_to(19).unwrap();
    assert_eq!(log.cleaner_checkpoint(), 19);
}

#[test]
fn expired_tombstones_trigger_the_background_cleaner_without_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(100_000);
    let mgr = LogManager::open(vec![dir.path().to_path_buf()], clock).unwrap();
    let config = LogConfig {
        delete_retention_ms: 10_000,
        ..compact_config()
    };
    let log = mgr.get_or_create(&tp(), config).unwrap();
    fill(&log, 4, 2, 100_000);
    log.append_as_leader(&one("k0", None, 100_000), 0).unwrap();
    roll(&log);
    mgr.clean_dirty_logs().unwrap();
    let stats_kept = dump(&log);
    assert!(stats_kept.iter().any(|r| r.value.is_none()));
    assert!(!log.needs_cleaning());
    c.set(110_001);
    assert!(log.needs_cleaning());
    mgr.clean_dirty_logs().unwrap();
    assert!(dump(&log).iter().all(|r| r.value.is_some()));
    assert!(!log.needs_cleaning());
}
