//! Append and read: offsets, segment rolls, KIP-74 fetch limits, validation failures.

use crate::batch::{compute_crc, BatchHeader, CRC_OFFSET};
use crate::test_util::*;
use crate::{LogConfig, LogError, TimestampType};

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

#[test]
fn append_read_round_trip_across_segment_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(10_000);
    let log = open(dir.path(), small_segments(), true, &clock);
    let mut sent = Vec::new();
    for i in 0..40 {
        let b = simple(3, 1_000 + i);
        let info = log.append_as_leader(&b, 1).unwrap();
        assert_eq!(info.first_offset, i * 3);
        assert_eq!(info.last_offset, i * 3 + 2);
        assert_eq!(info.record_count, 3);
        assert!(!info.duplicate);
        sent.push(b);
    }
    assert!(log.segment_count() > 3, "segments: {}", log.segment_count());
    assert_eq!(log.log_end_offset(), 120);
    // Read everything back batch by batch and compare the bytes outside the rewritten fields.
    let mut offset = 0;
    let mut i = 0;
    while offset < log.log_end_offset() {
        let data = log
            .read(offset, 1 << 20, log.log_end_offset(), true)
            .unwrap();
        assert!(!data.records.is_empty());
        for (base, last) in batch_ranges(&data.records) {
            assert_eq!(base, offset);
            offset = last + 1;
            i += 1;
        }
    }
    assert_eq!(i, 40);
    let first = log.read(0, 1 << 20, 120, true).unwrap();
    let h = BatchHeader::parse(&first.records).unwrap();
    assert_eq!(h.partition_leader_epoch, 1);
    assert_eq!(&first.records[21..h.total_size()], &sent[0][21..]);
    assert_eq!(compute_crc(&first.records[..h.total_size()]), h.crc);
}

#[test]
fn read_starting_mid_batch_returns_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&simple(5, 1), 0).unwrap();
    log.append_as_leader(&simple(5, 1), 0).unwrap();
    let data = log.read(7, 1 << 20, 10, true).unwrap();
    assert_eq!(batch_ranges(&data.records), vec![(5, 9)]);
    let data = log.read(3, 1 << 20, 10, true).unwrap();
    assert_eq!(batch_ranges(&data.records), vec![(0, 4), (5, 9)]);
}

#[test]
fn max_bytes_max_offset_and_min_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    let b = simple(2, 1);
    let size = b.len();
    for _ in 0..4 {
        log.append_as_leader(&b, 0).unwrap();
    }
    // Exactly two batches fit.
    let d = log.read(0, 2 * size + 10, 8, false).unwrap();
    assert_eq!(batch_ranges(&d.records), vec![(0, 1), (2, 3)]);
    // Nothing fits: empty without min_one_batch, one whole batch with it.
    assert!(log.read(0, 10, 8, false).unwrap().records.is_empty());
    let d = log.read(0, 10, 8, true).unwrap();
    assert_eq!(batch_ranges(&d.records), vec![(0, 1)]);
    // max_offset (e.g. the high watermark) is exclusive and cuts at batch boundaries.
    let d = log.read(0, 1 << 20, 4, true).unwrap();
    assert_eq!(batch_ranges(&d.records), vec![(0, 1), (2, 3)]);
    assert!(log.read(4, 1 << 20, 4, true).unwrap().records.is_empty());
    // At the log end: empty, with the offsets.
    let d = log.read(8, 1 << 20, 8, true).unwrap();
    assert!(d.records.is_empty());
    assert_eq!((d.log_start_offset, d.log_end_offset), (0, 8));
}

#[test]
fn offset_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&simple(2, 1), 0).unwrap();
    assert!(matches!(
        log.read(3, 100, 3, true),
        Err(LogError::OffsetOutOfRange {
            offset: 3,
            log_start_offset: 0,
            log_end_offset: 2
        })
    ));
    log.delete_records_before(1).unwrap();
    assert!(matches!(
        log.read(0, 100, 2, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(matches!(
        log.read(-1, 100, 2, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
}

#[test]
fn corrupt_crc_rejected_and_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    let good = simple(2, 1);
    let mut bad = simple(2, 1);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let mut both = good.clone();
    both.extend_from_slice(&bad);
    assert!(matches!(
        log.append_as_leader(&both, 0),
        Err(LogError::CorruptMessage(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
    assert_eq!(log.size_in_bytes(), 0);
    // Truncated buffer and wrong length.
    assert!(matches!(
        log.append_as_leader(&good[..good.len() - 3], 0),
        Err(LogError::CorruptMessage(_))
    ));
    // Wrong magic.
    let mut v1 = good.clone();
    v1[16] = 1;
    assert!(matches!(
        log.append_as_leader(&v1, 0),
        Err(LogError::InvalidRecord(_))
    ));
    // Control batch from a producer.
    let mut control = good.clone();
    control[22] |= 0x20;
    let crc = compute_crc(&control);
    control[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append_as_leader(&control, 0),
        Err(LogError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 0);
    log.append_as_leader(&good, 0).unwrap();
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn message_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let config = LogConfig {
        max_message_bytes: 200,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    let big = batch(B {
        value_len: 300,
        ..B::default()
    });
    match log.append_as_leader(&big, 0) {
        Err(LogError::MessageTooLarge { size, max }) => {
            assert_eq!(size, big.len());
            assert_eq!(max, 200);
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn log_append_time_stamps_max_timestamp_and_keeps_crc_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(777_000);
    let config = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    let info = log.append_as_leader(&simple(3, 5), 2).unwrap();
    assert_eq!(info.log_append_time, 777_000);
    let d = log.read(0, 1 << 20, 3, true).unwrap();
    let h = BatchHeader::parse(&d.records).unwrap();
    assert!(h.is_log_append_time());
    assert_eq!(h.max_timestamp, 777_000);
    assert_eq!(compute_crc(&d.records), h.crc);
    assert!(matches!(
        crate::batch::scan_batch(&d.records),
        crate::batch::Scan::Valid(_)
    ));
    assert_eq!(
        log.offset_for_timestamp(700_000).unwrap(),
        Some((0, 777_000))
    );
}

#[test]
fn index_lookups_after_clean_reopen_equal_before() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), small_segments(), true, &clock);
    for i in 0..50 {
        log.append_as_leader(&simple(2, 100 + i * 10), 0).unwrap();
    }
    let probe = |log: &crate::PartitionLog| {
        let reads: Vec<_> = (0..100)
            .map(|o| batch_ranges(&log.read(o, 300, 100, true).unwrap().records))
            .collect();
        let times: Vec<_> = (90..700)
            .step_by(7)
            .map(|t| log.offset_for_timestamp(t).unwrap())
            .collect();
        let indexes: Vec<_> = log
            .state
            .read()
            .segments
            .iter()
            .map(|s| {
                (
                    s.base_offset,
                    s.offset_index.to_vec().unwrap(),
                    s.next_offset,
                    s.max_timestamp,
                )
            })
            .collect();
        (reads, times, indexes, log.max_timestamp().unwrap())
    };
    let before = probe(&log);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), small_segments(), true, &clock);
    assert_eq!(probe(&log), before);
    assert_eq!(log.log_end_offset(), 100);
    assert_eq!(
        log.append_as_leader(&simple(1, 1), 0).unwrap().first_offset,
        100
    );
}

#[test]
fn concurrent_reads_see_only_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = std::sync::Arc::new(open(dir.path(), small_segments(), true, &clock));
    let reader = {
        let log = std::sync::Arc::clone(&log);
        std::thread::spawn(move || {
            let mut seen = 0;
            while seen < 200 {
                let leo = log.log_end_offset();
                let d = log.read(seen, 4096, leo, true).unwrap();
                for (base, last) in batch_ranges(&d.records) {
                    assert_eq!(base, seen);
                    seen = last + 1;
                }
            }
        })
    };
    for _ in 0..100 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    reader.join().unwrap();
}

#[test]
fn follower_append_keeps_offsets_and_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let leader_dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let leader = open(leader_dir.path(), small_segments(), true, &clock);
    for i in 0..10 {
        leader
            .append_as_leader(&idem(4, 0, i * 2, 2), 1 + i / 5)
            .unwrap();
    }
    let follower = open(dir.path(), small_segments(), true, &clock);
    let mut offset = 0;
    while offset < 20 {
        let d = leader.read(offset, 1 << 20, 20, true).unwrap();
        let info = follower.append_as_follower(&d.records).unwrap();
        assert_eq!(info.first_offset, offset);
        offset = info.last_offset + 1;
    }
    assert_eq!(follower.log_end_offset(), 20);
    assert_eq!(follower.epoch_entries(), leader.epoch_entries());
    assert_eq!(follower.producer_epoch(4), Some(0));
    let mut got = Vec::new();
    let mut o = 0;
    while o < 20 {
        let d = follower.read(o, 1 << 20, 20, true).unwrap();
        o = batch_ranges(&d.records).last().unwrap().1 + 1;
        got.extend_from_slice(&d.records);
    }
    let mut want = Vec::new();
    let mut o = 0;
    while o < 20 {
        let d = leader.read(o, 1 << 20, 20, true).unwrap();
        o = batch_ranges(&d.records).last().unwrap().1 + 1;
        want.extend_from_slice(&d.records);
    }
    assert_eq!(got, want);
    // Re-appending old offsets is refused.
    let first = leader.read(0, 1 << 20, 2, true).unwrap().records;
    assert!(matches!(
        follower.append_as_follower(&first),
        Err(LogError::InvalidRecord(_))
    ));
}

#[test]
fn follower_append_checks_batch_crcs_unless_the_bytes_were_verified_already() {
    let leader_dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let leader = open(leader_dir.path(), small_segments(), true, &clock);
    leader.append_as_leader(&simple(3, 1_000), 1).unwrap();
    let mut records = leader.read(0, 1 << 20, 3, true).unwrap().records.to_vec();
    // A flipped byte inside the CRC-covered part of the batch.
    let last = records.len() - 1;
    records[last] ^= 0x5a;

    let checked_dir = tempfile::tempdir().unwrap();
    let checked = open(checked_dir.path(), small_segments(), true, &clock);
    assert!(matches!(
        checked.append_as_follower(&records),
        Err(LogError::CorruptMessage(_))
    ));
    assert_eq!(checked.log_end_offset(), 0);

    // Bytes that matched a checksum over all of them (a remote-WAL slice) skip the second pass;
    // the structural checks still run.
    let verified_dir = tempfile::tempdir().unwrap();
    let verified = open(verified_dir.path(), small_segments(), true, &clock);
    let info = verified
        .append_as_follower_with(&records, crate::BatchCrcs::AlreadyVerified)
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (0, 2));
    assert!(matches!(
        verified.append_as_follower_with(
            &records[..records.len() - 1],
            crate::BatchCrcs::AlreadyVerified
        ),
        Err(LogError::CorruptMessage(_))
    ));
}

/// Rough append/read throughput; run with
/// `cargo test -p ferry-log --release -- --ignored --nocapture throughput`.
#[test]
#[ignore]
fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    let b = batch(B {
        records: 32,
        value_len: 1000,
        ..B::default()
    });
    let n = 20_000;
    let start = std::time::Instant::now();
    for _ in 0..n {
        log.append_as_leader(&b, 0).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    let mb = (b.len() * n) as f64 / 1e6;
    println!("append: {:.0} MB/s ({} byte batches)", mb / secs, b.len());
    let start = std::time::Instant::now();
    let (mut o, leo) = (0, log.log_end_offset());
    while o < leo {
        let d = log.read(o, 1 << 20, leo, true).unwrap();
        o = batch_ranges(&d.records).last().unwrap().1 + 1;
    }
    println!("read: {:.0} MB/s", mb / start.elapsed().as_secs_f64());
}

#[test]
fn create_time_timestamps_outside_kip_937_bounds_are_refused_with_invalid_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let now = 10_000_000;
    let (_c, clock) = clock(now);
    let config = LogConfig {
        timestamp_before_max_ms: 60_000,
        timestamp_after_max_ms: 1_000,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone(), true, &clock);
    // Record i of a batch has timestamp ts + i: each refusal names the records out of range by
    // their index in the batch (KIP-467), the others are refused with them.
    for (ts, out_of_range) in [
        (now - 60_001, vec![0]),
        (now + 1_001, vec![0, 1, 2]),
        (now + 999, vec![2]),
        (now - 60_002, vec![0, 1]),
    ] {
        match log.append_as_leader(&simple(3, ts), 0) {
            Err(crate::LogError::TimestampsRejected(records)) => {
                let indexes: Vec<i32> = records.iter().map(|r| r.batch_index).collect();
                assert_eq!(indexes, out_of_range, "timestamp {ts}");
                assert!(
                    records[0].message.contains("is out of range"),
                    "{}",
                    records[0].message
                );
            }
            other => panic!("timestamp {ts}: {other:?}"),
        }
    }
    // A finite before.max is checked record by record, wherever the old record is.
    let mixed = ferry_test_support::Batches::of(4, |_| b"v".to_vec())
        .timestamps(&[now, now - 60_001, now, now - 70_000])
        .encode();
    match log.append_as_leader(&mixed, 0) {
        Err(crate::LogError::TimestampsRejected(records)) => {
            let indexes: Vec<i32> = records.iter().map(|r| r.batch_index).collect();
            assert_eq!(indexes, vec![1, 3]);
        }
        other => panic!("mixed timestamps: {other:?}"),
    }
    assert_eq!(
        log.log_end_offset(),
        0,
        "nothing of a refused batch is stored"
    );
    log.append_as_leader(&simple(1, now - 60_000), 0).unwrap();
    log.append_as_leader(&simple(1, now + 1_000), 0).unwrap();
    assert_eq!(log.log_end_offset(), 2);

    // LogAppendTime topics take any producer timestamp: the broker's replaces it.
    let dir2 = tempfile::tempdir().unwrap();
    let stamped = LogConfig {
        message_timestamp_type: TimestampType::LogAppendTime,
        ..config
    };
    let log2 = open(dir2.path(), stamped, true, &clock);
    log2.append_as_leader(&simple(1, 5), 0).unwrap();
}
