//! Transactions in the log (Kafka's semantics): transactional batches from producers, markers,
//! the first unstable offset, the aborted-transaction index, and how they survive restarts,
//! replication, truncation, retention and compaction.

use std::path::Path;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::batch::{validate_produced, BatchHeader, TRANSACTIONAL_BIT};
use crate::producer_state::ProducerStateManager;
use crate::test_util::*;
use crate::TxnResult::{Abort, Commit};
use crate::{AbortedTxn, LogConfig, LogError, PartitionLog, TxnMarker};

fn aborted(producer_id: i64, first: i64, last: i64, lso: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

fn append(log: &PartitionLog, records: &[u8]) -> (i64, i64) {
    let info = log.append_as_leader(records, 0).unwrap();
    (info.first_offset, info.last_offset)
}

fn end(log: &PartitionLog, m: TxnMarker) -> i64 {
    let info = log.append_control_marker(&m, 0).unwrap();
    assert_eq!(info.first_offset, info.last_offset);
    assert_eq!(info.record_count, 1);
    info.first_offset
}

/// Two producers' transactions interleaved, leaving producer 2's second one open:
///
/// ```text
/// 0-1 plain | 2-3 P1 txn | 4 P2 txn | 5 P3 idempotent | 6 P1 txn | 7 P1 COMMIT
/// 8 P1 txn | 9 P2 ABORT | 10 P1 ABORT | 11 P2 txn (ongoing)
/// ```
fn scenario(log: &PartitionLog) {
    assert_eq!(append(log, &simple(2, 1_000)), (0, 1));
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(append(log, &txn(1, 0, 0, 2)), (2, 3));
    assert_eq!(log.first_unstable_offset(), Some(2));
    assert_eq!(append(log, &txn(2, 0, 0, 1)), (4, 4));
    assert_eq!(append(log, &idem(3, 0, 0, 1)), (5, 5));
    assert_eq!(append(log, &txn(1, 0, 2, 1)), (6, 6));
    assert_eq!(log.first_unstable_offset(), Some(2));
    assert_eq!(end(log, marker(1, 0, Commit)), 7);
    assert_eq!(log.first_unstable_offset(), Some(4));
    assert_eq!(log.ongoing_txn_first_offset(1), None);
    assert_eq!(append(log, &txn(1, 0, 3, 1)), (8, 8));
    assert_eq!(log.first_unstable_offset(), Some(4));
    assert_eq!(end(log, marker(2, 0, Abort)), 9);
    assert_eq!(log.first_unstable_offset(), Some(8));
    assert_eq!(end(log, marker(1, 0, Abort)), 10);
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(append(log, &txn(2, 0, 1, 1)), (11, 11));
}

/// The aborted transactions of [`scenario`]: P2's (another producer's transaction, P1's from
/// offset 8, was still open, so the last stable offset is 8) and P1's (none open: marker + 1).
fn scenario_aborts() -> Vec<AbortedTxn> {
    vec![aborted(2, 4, 9, 8), aborted(1, 8, 10, 11)]
}

/// What a log knows of transactions, for comparing logs.
fn txn_view(log: &PartitionLog) -> (Option<i64>, Vec<AbortedTxn>, Vec<Option<i64>>) {
    (
        log.first_unstable_offset(),
        log.collect_aborted_transactions(0, i64::MAX),
        (1..=3).map(|p| log.ongoing_txn_first_offset(p)).collect(),
    )
}

fn scenario_view() -> (Option<i64>, Vec<AbortedTxn>, Vec<Option<i64>>) {
    (Some(11), scenario_aborts(), vec![None, Some(11), None])
}

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 250,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_str().unwrap().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn validate_produced_accepts_transactional_batches_and_refuses_control_batches() {
    let ok = validate_produced(&txn(1, 0, 0, 3), 1 << 20).unwrap();
    assert!(ok[0].is_transactional());
    let no_pid = with_attributes(simple(1, 1_000), TRANSACTIONAL_BIT);
    assert!(matches!(
        validate_produced(&no_pid, 1 << 20),
        Err(LogError::InvalidRecord(_))
    ));
    let control = marker(1, 0, Commit).to_batch(0, 0, 1_000);
    assert!(matches!(
        validate_produced(&control, 1 << 20),
        Err(LogError::InvalidRecord(_))
    ));

    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    assert_eq!(append(&log, &txn(1, 0, 0, 3)), (0, 2));
    assert!(matches!(
        log.append_as_leader(&control, 0),
        Err(LogError::InvalidRecord(_))
    ));
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn lso_follows_interleaved_transactions_of_two_producers() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(5_000);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    scenario(&log);
    assert_eq!(txn_view(&log), scenario_view());
    assert_eq!(log.last_stable_offset(12), 11);
    assert_eq!(log.last_stable_offset(9), 9);
    // The markers are control batches with the transaction's producer id and epoch.
    let data = log.read(7, 1 << 20, 8, true).unwrap();
    let h = BatchHeader::parse(&data.records).unwrap();
    assert!(h.is_control() && h.is_transactional());
    assert_eq!((h.base_offset, h.producer_id, h.base_sequence), (7, 1, -1));
    assert_eq!(h.max_timestamp, 5_000);
    assert_eq!(
        TxnMarker::from_control_batch(&data.records).unwrap(),
        Some(marker(1, 0, Commit))
    );
}

#[test]
fn commit_records_nothing_and_abort_records_its_range() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    scenario(&log);
    // Kafka's overlap rule: marker at or after the start, first offset before the bound;
    // the search stops at an entry whose last stable offset reaches the bound.
    assert_eq!(log.collect_aborted_transactions(0, 4), vec![]);
    assert_eq!(
        log.collect_aborted_transactions(0, 5),
        vec![aborted(2, 4, 9, 8)]
    );
    assert_eq!(log.collect_aborted_transactions(0, 9), scenario_aborts());
    assert_eq!(
        log.collect_aborted_transactions(10, 12),
        vec![aborted(1, 8, 10, 11)]
    );
    assert_eq!(log.collect_aborted_transactions(11, 12), vec![]);
    // A marker for a producer without an ongoing transaction is written and completes nothing.
    assert_eq!(end(&log, marker(7, 4, Abort)), 12);
    assert_eq!(log.producer_epoch(7), Some(4));
    assert_eq!(txn_view(&log), scenario_view());
    // The index file is written (Kafka's 34-byte entries) when the segment is persisted.
    log.close().unwrap();
    let files = files_with_suffix(dir.path(), ".txnindex");
    assert_eq!(files.len(), 1);
    assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), 68);
}

#[test]
fn marker_with_stale_producer_or_coordinator_epoch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    assert_eq!(append(&log, &txn(1, 3, 0, 1)), (0, 0));
    assert!(matches!(
        log.append_control_marker(&marker(1, 2, Abort), 0),
        Err(LogError::InvalidProducerEpoch {
            producer_id: 1,
            current: 3,
            got: 2
        })
    ));
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.first_unstable_offset(), Some(0));

    let by_coordinator = |epoch, coordinator_epoch, result| TxnMarker {
        coordinator_epoch,
        ..marker(1, epoch, result)
    };
    assert_eq!(end(&log, by_coordinator(3, 5, Commit)), 1);
    // Same epoch: the sequence goes on after the marker.
    assert_eq!(append(&log, &txn(1, 3, 1, 1)), (2, 2));
    assert!(matches!(
        log.append_control_marker(&by_coordinator(3, 4, Abort), 0),
        Err(LogError::TransactionCoordinatorFenced {
            producer_id: 1,
            current: 5,
            got: 4
        })
    ));
    // A coordinator aborting with a bumped epoch fences the producer's old epoch.
    assert_eq!(end(&log, by_coordinator(4, 5, Abort)), 3);
    assert_eq!(log.producer_epoch(1), Some(4));
    assert_eq!(
        log.collect_aborted_transactions(0, 10),
        vec![aborted(1, 2, 3, 4)]
    );
    assert!(matches!(
        log.append_as_leader(&txn(1, 3, 2, 1), 0),
        Err(LogError::InvalidProducerEpoch { .. })
    ));
    assert_eq!(append(&log, &txn(1, 4, 0, 1)), (4, 4));
}

#[test]
fn non_transactional_batch_inside_a_transaction_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    append(&log, &txn(1, 0, 0, 1));
    assert!(matches!(
        log.append_as_leader(&idem(1, 0, 1, 1), 0),
        Err(LogError::InvalidTxnState(_))
    ));
    // Also when the transaction starts earlier in the same request.
    let mut both = txn(2, 0, 0, 1);
    both.extend(idem(2, 0, 1, 1));
    assert!(matches!(
        log.append_as_leader(&both, 0),
        Err(LogError::InvalidTxnState(_))
    ));
    assert_eq!(log.log_end_offset(), 1);
    end(&log, marker(1, 0, Commit));
    assert_eq!(append(&log, &idem(1, 0, 1, 1)), (2, 2));
}

#[test]
fn idempotence_rules_hold_for_transactional_batches() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    assert_eq!(append(&log, &txn(1, 0, 0, 2)), (0, 1));
    let size = log.size_in_bytes();
    let retry = log.append_as_leader(&txn(1, 0, 0, 2), 0).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (0, 1));
    assert_eq!(log.size_in_bytes(), size);
    assert!(matches!(
        log.append_as_leader(&txn(1, 0, 3, 1), 0),
        Err(LogError::OutOfOrderSequence {
            expected: 2,
            got: 3,
            ..
        })
    ));
    end(&log, marker(1, 0, Abort));
    // The next transaction of the same epoch continues the sequence.
    assert!(matches!(
        log.append_as_leader(&txn(1, 0, 0, 1), 0),
        Err(LogError::OutOfOrderSequence { .. })
    ));
    assert_eq!(append(&log, &txn(1, 0, 2, 1)), (3, 3));
    assert_eq!(log.first_unstable_offset(), Some(3));
}

#[test]
fn follower_appends_rebuild_transactions_and_aborted_index() {
    let (_c, clock) = clock(0);
    let dir = tempfile::tempdir().unwrap();
    let leader = open(dir.path(), LogConfig::default(), true, &clock);
    scenario(&leader);
    for chunk in [1usize, 200, 1 << 20] {
        let fdir = tempfile::tempdir().unwrap();
        let follower = open(fdir.path(), small_segments(), true, &clock);
        while follower.log_end_offset() < leader.log_end_offset() {
            let data = leader
                .read(follower.log_end_offset(), chunk, i64::MAX, true)
                .unwrap();
            follower.append_as_follower(&data.records).unwrap();
        }
        assert_eq!(txn_view(&follower), scenario_view(), "chunk {chunk}");
        assert_eq!(follower.producer_epoch(2), Some(0));
        // The follower, once leader, completes the open transaction.
        end(&follower, marker(2, 0, Commit));
        assert_eq!(follower.first_unstable_offset(), None);
    }
}

#[test]
fn transactions_and_index_survive_clean_and_unclean_restarts() {
    #[derive(Debug, Clone, Copy)]
    enum How {
        Clean,
        UncleanAfterFlush,
        UncleanWithoutIndexesOrSnapshots,
        CleanWithoutOffsetIndex,
    }
    for how in [
        How::Clean,
        How::UncleanAfterFlush,
        How::UncleanWithoutIndexesOrSnapshots,
        How::CleanWithoutOffsetIndex,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (_c, clock) = clock(0);
        let log = open(dir.path(), small_segments(), true, &clock);
        scenario(&log);
        assert!(log.segment_count() >= 4, "{how:?}");
        let before = txn_view(&log);
        assert_eq!(before, scenario_view());
        let clean = match how {
            How::Clean => {
                log.close().unwrap();
                true
            }
            How::UncleanAfterFlush => {
                // Segments below the active one are trusted, the active one is recovered.
                log.flush_rolled_segments().unwrap();
                false
            }
            How::UncleanWithoutIndexesOrSnapshots => {
                for f in files_with_suffix(dir.path(), ".txnindex")
                    .into_iter()
                    .chain(files_with_suffix(dir.path(), ".snapshot"))
                {
                    std::fs::remove_file(f).unwrap();
                }
                false
            }
            How::CleanWithoutOffsetIndex => {
                log.close().unwrap();
                // The segment holding the ABORT at 9 loses its offset index: its txn index
                // is not trusted either and is rebuilt.
                let base = *log
                    .segment_base_offsets()
                    .iter()
                    .rfind(|&&b| b <= 9)
                    .unwrap();
                std::fs::remove_file(crate::segment::segment_path(dir.path(), base, "index"))
                    .unwrap();
                std::fs::write(
                    crate::segment::segment_path(dir.path(), base, "txnindex"),
                    b"junk",
                )
                .unwrap();
                true
            }
        };
        drop(log);
        let log = open(dir.path(), small_segments(), clean, &clock);
        assert_eq!(txn_view(&log), before, "{how:?}");
        assert_eq!(log.log_end_offset(), 12);
        // Producer state works on: P2 continues its sequence and commits.
        assert_eq!(append(&log, &txn(2, 0, 2, 1)), (12, 12), "{how:?}");
        end(&log, marker(2, 0, Commit));
        assert_eq!(log.first_unstable_offset(), None);
        log.close().unwrap();
        let log = open(dir.path(), small_segments(), true, &clock);
        assert_eq!(
            log.collect_aborted_transactions(0, i64::MAX),
            scenario_aborts()
        );
    }
}

#[test]
fn version_1_producer_snapshots_are_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("00000000000000000002.snapshot");
    std::fs::write(
        &path,
        br#"{"version":1,"producers":[[7,{"epoch":2,"batches":[{"first_seq":0,"last_seq":1,"first_offset":0,"last_offset":1}]}]]}"#,
    )
    .unwrap();
    let state = ProducerStateManager::read_snapshot(&path).unwrap();
    let entry = state.entry(7).unwrap();
    assert_eq!((entry.epoch, entry.coordinator_epoch), (2, -1));
    assert_eq!(entry.txn_first_offset, None);
    assert_eq!(state.first_unstable_offset(), None);

    // Version 2 carries ongoing transactions.
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    scenario(&log);
    log.close().unwrap();
    let snap = crate::producer_state::snapshot_path(dir.path(), 12);
    let raw = std::fs::read_to_string(&snap).unwrap();
    assert!(raw.starts_with(r#"{"version":2"#), "{raw}");
    let state = ProducerStateManager::read_snapshot(&snap).unwrap();
    assert_eq!(state.first_unstable_offset(), Some(11));
    assert_eq!(state.txn_first_offset(2), Some(11));
}

#[test]
fn truncation_drops_index_entries_and_reopens_transactions() {
    for config in [LogConfig::default(), small_segments()] {
        let dir = tempfile::tempdir().unwrap();
        let (_c, clock) = clock(0);
        let log = open(dir.path(), config.clone(), true, &clock);
        scenario(&log);
        log.truncate_to(10).unwrap();
        assert_eq!(log.log_end_offset(), 10);
        assert_eq!(
            txn_view(&log),
            (
                Some(8),
                vec![aborted(2, 4, 9, 8)],
                vec![Some(8), None, None]
            )
        );
        log.truncate_to(9).unwrap();
        assert_eq!(
            txn_view(&log),
            (Some(4), vec![], vec![Some(8), Some(4), None])
        );
        log.truncate_to(4).unwrap();
        assert_eq!(txn_view(&log), (Some(2), vec![], vec![Some(2), None, None]));
        // The truncated index stays truncated across a restart.
        log.close().unwrap();
        drop(log);
        let log = open(dir.path(), config, true, &clock);
        assert_eq!(txn_view(&log), (Some(2), vec![], vec![Some(2), None, None]));
        log.truncate_to(2).unwrap();
        assert_eq!(txn_view(&log), (None, vec![], vec![None, None, None]));
    }
}

#[test]
fn retention_deletes_index_files_with_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(0);
    let config = LogConfig {
        retention_ms: 10_000,
        ..small_segments()
    };
    let log = open(dir.path(), config, true, &clock);
    scenario(&log);
    log.close().unwrap();
    assert!(!files_with_suffix(dir.path(), ".txnindex").is_empty());
    c.advance(1_000_000);
    assert!(log.enforce_retention().unwrap() > 0);
    assert_eq!(log.log_start_offset(), 12);
    assert_eq!(
        files_with_suffix(dir.path(), ".txnindex"),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(log.collect_aborted_transactions(0, i64::MAX), vec![]);
    // P2's transaction is still open; its first batch is gone, so the first unstable offset is
    // the log start (Kafka's clamp).
    assert_eq!(log.first_unstable_offset(), Some(12));
    end(&log, marker(2, 0, Abort));
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(
        log.collect_aborted_transactions(0, i64::MAX),
        vec![aborted(2, 11, 12, 13)]
    );
}

/// One keyed batch of producer `pid` (transactional when `seq >= 0`), or a plain one.
fn kv(key: &str, value: &str, pid: i64, seq: i32) -> Vec<u8> {
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: pid,
        producer_epoch: if pid >= 0 { 0 } else { -1 },
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: 1_000,
        key: Some(Bytes::from(key.to_string())),
        value: Some(Bytes::from(value.to_string())),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &[record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    if pid >= 0 {
        with_attributes(buf.to_vec(), TRANSACTIONAL_BIT)
    } else {
        buf.to_vec()
    }
}

/// `(offset, key, value)` of every data record, and the offsets of the control batches.
fn contents(log: &PartitionLog) -> (Vec<(i64, String, String)>, Vec<i64>) {
    let (mut records, mut markers) = (Vec::new(), Vec::new());
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.read(offset, 1 << 20, i64::MAX, true).unwrap();
        offset = batch_ranges(&data.records).last().unwrap().1 + 1;
        let mut b = data.records.clone();
        for set in RecordBatchDecoder::decode_all(&mut b).unwrap() {
            for r in set.records {
                if r.control {
                    markers.push(r.offset);
                    continue;
                }
                let s = |b: Option<Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
                records.push((r.offset, s(r.key), s(r.value)));
            }
        }
    }
    (records, markers)
}

#[test]
fn compaction_drops_aborted_data_and_keeps_markers_and_open_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(1_000_000);
    let config = LogConfig {
        compact: true,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config.clone(), true, &clock);
    let roll = |log: &PartitionLog| {
        let _w = log.writer.lock();
        log.roll_locked(log.clock.now_ms()).unwrap();
    };
    append(&log, &kv("k1", "a", -1, -1)); // 0
    let mut p1 = kv("k1", "x", 1, 0);
    p1.extend(kv("k2", "y", 1, 1));
    append(&log, &p1); // 1, 2
    end(&log, marker(1, 0, Abort)); // 3
    append(&log, &kv("k2", "c", 2, 0)); // 4
    end(&log, marker(2, 0, Commit)); // 5
    append(&log, &kv("k4", "q", 1, 2)); // 6
    end(&log, marker(1, 0, Commit)); // 7
    roll(&log);
    append(&log, &kv("k1", "z", 3, 0)); // 8: open transaction in a closed segment
    roll(&log);
    append(&log, &kv("k3", "w", -1, -1)); // 9: active segment
    assert_eq!(log.first_unstable_offset(), Some(8));
    let index = vec![aborted(1, 1, 3, 4)];
    assert_eq!(log.collect_aborted_transactions(0, i64::MAX), index);

    let stats = log.clean().unwrap();
    // The segment holding the open transaction is not cleanable.
    assert_eq!(stats.cleaned_up_to, 8);
    assert_eq!(stats.aborted_removed, 2);
    let (records, markers) = contents(&log);
    let s = |o: i64, k: &str, v: &str| (o, k.to_string(), v.to_string());
    assert_eq!(
        records,
        vec![
            // The aborted k1=x superseded nothing, k2=y went with it.
            s(0, "k1", "a"),
            s(4, "k2", "c"),
            s(6, "k4", "q"),
            s(8, "k1", "z"),
            s(9, "k3", "w"),
        ]
    );
    assert_eq!(markers, vec![3, 5, 7]);
    // The aborted data is gone, so its index entry went with it; its marker stays until its
    // delete horizon (see `aborted_marker_outlives_its_data_by_delete_retention`).
    assert_eq!(log.collect_aborted_transactions(0, i64::MAX), vec![]);
    assert_eq!(log.first_unstable_offset(), Some(8));

    // Once the transaction commits and its segment closes, it is cleaned like any data.
    end(&log, marker(3, 0, Commit)); // 10
    roll(&log);
    let stats = log.clean().unwrap();
    assert_eq!(stats.cleaned_up_to, 11);
    let (records, _) = contents(&log);
    assert_eq!(
        records,
        vec![
            s(4, "k2", "c"),
            s(6, "k4", "q"),
            s(8, "k1", "z"),
            s(9, "k3", "w")
        ]
    );
    // The shrunk index survives the rewrite and a restart.
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config, true, &clock);
    assert_eq!(log.collect_aborted_transactions(0, i64::MAX), vec![]);
    assert_eq!(contents(&log).1, vec![3, 5, 7, 10]);
}

/// `(offset, delete horizon bit, timestamp)` of every control record.
fn marker_records(log: &PartitionLog) -> Vec<(i64, bool, i64)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let data = log.read(offset, 1 << 20, i64::MAX, true).unwrap();
        offset = batch_ranges(&data.records).last().unwrap().1 + 1;
        let mut b = data.records.clone();
        for set in RecordBatchDecoder::decode_all(&mut b).unwrap() {
            for r in set.records.into_iter().filter(|r| r.control) {
                out.push((r.offset, r.delete_horizon, r.timestamp));
            }
        }
    }
    out
}

fn compact_txn_config() -> LogConfig {
    LogConfig {
        compact: true,
        retention_ms: -1,
        delete_retention_ms: 10_000,
        ..LogConfig::default()
    }
}

fn roll_log(log: &PartitionLog) {
    let _w = log.writer.lock();
    log.roll_locked(log.clock.now_ms()).unwrap();
}

/// ```text
/// 0 plain k1 | 1 P1 txn k1 | 2 P1 ABORT | 3 P3 txn k7 | 4 P3 ABORT | 5 P1 txn k3 | 6 P1 COMMIT
/// 7 P2 txn k4 (open) || 8 plain k9 (active segment)
/// ```
/// P3's aborted batch is its last batch: the cleaner keeps it (empty) for producer state.
fn aborted_scenario(log: &PartitionLog) {
    append(log, &kv("k1", "a", -1, -1));
    append(log, &kv("k1", "x", 1, 0));
    assert_eq!(end(log, marker(1, 0, Abort)), 2);
    append(log, &kv("k7", "p", 3, 0));
    assert_eq!(end(log, marker(3, 0, Abort)), 4);
    append(log, &kv("k3", "y", 1, 1));
    assert_eq!(end(log, marker(1, 0, Commit)), 6);
    assert_eq!(append(log, &kv("k4", "o", 2, 0)), (7, 7));
    roll_log(log);
    append(log, &kv("k9", "z", -1, -1));
}

#[test]
fn aborted_marker_outlives_its_data_by_delete_retention() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000_000);
    let config = compact_txn_config();
    let log = open(dir.path(), config.clone(), true, &clock);
    aborted_scenario(&log);
    assert_eq!(
        log.collect_aborted_transactions(0, i64::MAX),
        vec![aborted(1, 1, 2, 3), aborted(3, 3, 4, 5)]
    );

    let stats = log.clean().unwrap();
    // The open transaction's segment is not cleanable.
    assert_eq!(stats.cleaned_up_to, -1);
    end(&log, marker(2, 0, Commit)); // 9
    roll_log(&log);
    let stats = log.clean().unwrap();
    assert_eq!(stats.cleaned_up_to, 10);
    assert_eq!((stats.aborted_removed, stats.marker_horizons_set), (2, 1));
    let s = |o: i64, k: &str, v: &str| (o, k.to_string(), v.to_string());
    let (records, markers) = contents(&log);
    assert_eq!(
        records,
        vec![
            s(0, "k1", "a"),
            s(5, "k3", "y"),
            s(7, "k4", "o"),
            s(8, "k9", "z")
        ]
    );
    // P1's ABORT survives the first clean, with its delete horizon set and its timestamp kept;
    // its index entry went with its data. P3's aborted batch stays (empty) as P3's last batch,
    // so its marker and entry stay too.
    assert_eq!(markers, vec![2, 4, 6, 9]);
    let horizons = marker_records(&log);
    assert_eq!(horizons[0], (2, true, 1_000_000));
    assert!(horizons[1..].iter().all(|&(_, h, _)| !h), "{horizons:?}");
    assert_eq!(
        log.collect_aborted_transactions(0, i64::MAX),
        vec![aborted(3, 3, 4, 5)]
    );
    assert_eq!(stats.txn_index_entries_removed, 1);

    // Not before delete.retention.ms after the horizon was set.
    assert!(!log.needs_cleaning());
    c.set(1_009_999);
    assert!(!log.needs_cleaning());
    log.clean().unwrap();
    assert_eq!(contents(&log).1, vec![2, 4, 6, 9]);
    c.set(1_010_000);
    assert!(log.needs_cleaning());
    let stats = log.clean().unwrap();
    assert_eq!(stats.markers_removed, 1);
    assert_eq!(contents(&log), (records.clone(), vec![4, 6, 9]));
    assert_eq!(
        log.collect_aborted_transactions(0, i64::MAX),
        vec![aborted(3, 3, 4, 5)]
    );
    assert!(!log.needs_cleaning());

    // Much later, still: P3's marker guards its remaining (empty) batch.
    c.set(5_000_000);
    log.clean().unwrap();
    assert_eq!(contents(&log), (records.clone(), vec![4, 6, 9]));

    // Restarts agree: as is, and with the indexes and producer snapshots lost (the aborted
    // transaction index is then rebuilt by a replay of the cleaned log).
    log.close().unwrap();
    drop(log);
    for rebuilt in [false, true] {
        if rebuilt {
            for f in files_with_suffix(dir.path(), ".txnindex")
                .into_iter()
                .chain(files_with_suffix(dir.path(), ".index"))
                .chain(files_with_suffix(dir.path(), ".snapshot"))
            {
                std::fs::remove_file(f).unwrap();
            }
        }
        let log = open(dir.path(), config.clone(), true, &clock);
        assert_eq!(
            contents(&log),
            (records.clone(), vec![4, 6, 9]),
            "{rebuilt}"
        );
        assert_eq!(
            log.collect_aborted_transactions(0, i64::MAX),
            vec![aborted(3, 3, 4, 5)],
            "{rebuilt}"
        );
        assert_eq!(log.first_unstable_offset(), None, "{rebuilt}");
        // Producers continue their sequences.
        assert_eq!(append(&log, &kv("k5", "n", 1, 2)).0, 10);
        end(&log, marker(1, 0, Commit));
        log.close().unwrap();
        log.truncate_to(10).unwrap();
        log.close().unwrap();
    }
}

#[test]
fn commit_marker_stays_while_any_record_of_its_transaction_does() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000_000);
    let log = open(dir.path(), compact_txn_config(), true, &clock);
    append(&log, &kv("k1", "a", 1, 0)); // 0
    append(&log, &kv("k2", "b", 1, 1)); // 1
    assert_eq!(end(&log, marker(1, 0, Commit)), 2);
    append(&log, &kv("k5", "z", 1, 2)); // 3: P1's last batch
    assert_eq!(end(&log, marker(1, 0, Commit)), 4);
    append(&log, &kv("k1", "c", -1, -1)); // 5
    roll_log(&log);

    let stats = log.clean().unwrap();
    assert_eq!(stats.superseded_removed, 1);
    assert_eq!(stats.marker_horizons_set, 0);
    assert_eq!(contents(&log).1, vec![2, 4]);
    // k2 of the first transaction is still readable: its marker stays, however long.
    c.advance(1_000_000);
    log.clean().unwrap();
    assert_eq!(contents(&log).1, vec![2, 4]);
    assert!(marker_records(&log).iter().all(|&(_, h, _)| !h));

    // Once compaction superseded k2 too, the marker gets its horizon, then goes.
    append(&log, &kv("k2", "d", -1, -1)); // 6
    roll_log(&log);
    let stats = log.clean().unwrap();
    assert_eq!(stats.marker_horizons_set, 1);
    assert_eq!(contents(&log).1, vec![2, 4]);
    c.advance(9_999);
    log.clean().unwrap();
    assert_eq!(contents(&log).1, vec![2, 4]);
    c.advance(1);
    let stats = log.clean().unwrap();
    assert_eq!(stats.markers_removed, 1);
    let s = |o: i64, k: &str, v: &str| (o, k.to_string(), v.to_string());
    assert_eq!(
        contents(&log),
        (
            vec![s(3, "k5", "z"), s(5, "k1", "c"), s(6, "k2", "d")],
            vec![4]
        )
    );
    // P1's latest marker stays: it carries the producer's epoch for a rebuild.
    c.advance(1_000_000);
    log.clean().unwrap();
    assert_eq!(contents(&log).1, vec![4]);
}

#[test]
fn crash_in_the_middle_of_a_marker_cleaning_swap_recovers_the_same_log() {
    let (_c, clock) = clock(1_000_000);
    let config = compact_txn_config();
    let build = |dir: &Path| {
        let log = open(dir, config.clone(), true, &clock);
        aborted_scenario(&log);
        end(&log, marker(2, 0, Commit)); // 9
        roll_log(&log);
        log
    };
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = build(dir_a.path());
    let b = build(dir_b.path());
    let bases = a.segment_base_offsets();
    a.clean().unwrap();
    assert_eq!(
        a.collect_aborted_transactions(0, i64::MAX),
        vec![aborted(3, 3, 4, 5)]
    );
    drop(b); // crash with every cleaned segment left as a finished swap file
    for base in &bases[..bases.len() - 1] {
        std::fs::copy(
            crate::segment::segment_path(dir_a.path(), *base, "log"),
            crate::segment::segment_path(dir_b.path(), *base, "log.swap"),
        )
        .unwrap();
    }
    let b = open(dir_b.path(), config.clone(), false, &clock);
    assert_eq!(contents(&b), contents(&a));
    assert_eq!(marker_records(&b), marker_records(&a));
    assert_eq!(
        b.collect_aborted_transactions(0, i64::MAX),
        a.collect_aborted_transactions(0, i64::MAX)
    );
    assert_eq!(b.first_unstable_offset(), None);
}
