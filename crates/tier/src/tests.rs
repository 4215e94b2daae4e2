//! A real closed segment, written by `ferry_log`, copied to a store and read back through the
//! tier: the bytes a Fetch gets from the tier are the ones it got from the local log.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use ferry_common::{ManualClock, SharedClock, TopicPartition};
use ferry_log::batch::BatchHeader;
use ferry_log::{LogConfig, PartitionLog};
use ferry_objstore::MemoryStore;
use ferry_objstore::ObjectStore;
use ferry_test_support::Batches;
use uuid::Uuid;

use crate::metadata::{RemoteSegmentMetadata, RemoteSegmentState};
use crate::reader::TierReader;
use crate::segment_store::{LocalSegmentFiles, RemoteSegmentStore, SegmentFileKind};

/// A log of two or more segments whose batches vary in size, one of them larger than the
/// reads below ask for, with an index entry every 1 KiB.
fn write_log(dir: &Path) -> PartitionLog {
    let clock: SharedClock = ManualClock::new(1_000);
    let config = LogConfig {
        segment_bytes: 96 * 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    };
    let log = PartitionLog::open(
        dir.to_path_buf(),
        TopicPartition::new("t", 0),
        config,
        true,
        clock,
    )
    .expect("open");
    for i in 0..120usize {
        let (records, value_len) = match i % 7 {
            0 => (3, 200),
            3 => (1, 2_500),
            5 => (2, 700),
            _ => (1, 90),
        };
        let value_len = if i == 40 { 20_000 } else { value_len };
        let batch = Batches::of(records, |_| vec![b'v'; value_len]).encode();
        log.append_as_leader(&batch, 0).expect("append");
    }
    log.close().expect("close");
    assert!(log.segment_count() >= 2, "the test needs a closed segment");
    log
}

fn first_segment(log: &PartitionLog, dir: &Path) -> (RemoteSegmentMetadata, LocalSegmentFiles) {
    let bases = log.segment_base_offsets();
    let (base, next) = (bases[0], bases[1]);
    let path = |suffix: &str| dir.join(format!("{base:020}.{suffix}"));
    let size = std::fs::metadata(path("log")).expect("log file").len();
    let meta = RemoteSegmentMetadata {
        topic_id: Uuid::from_u128(42),
        partition: 0,
        segment_id: Uuid::from_u128(7),
        start_offset: base,
        end_offset: next - 1,
        max_timestamp_ms: 0,
        broker_id: 1,
        event_time_ms: 0,
        size_bytes: size,
        leader_epochs: vec![(0, base)],
        has_txn_index: false,
        has_producer_snapshot: false,
        state: RemoteSegmentState::CopyFinished,
    };
    let files = LocalSegmentFiles {
        log: path("log"),
        offset_index: path("index"),
        time_index: path("timeindex"),
        txn_index: None,
        producer_snapshot: None,
        leader_epoch_checkpoint: Bytes::from_static(b"0\n1\n0 0\n"),
    };
    (meta, files)
}

/// The local log's answer, cut to the batches of the segment.
fn local_read(log: &PartitionLog, meta: &RemoteSegmentMetadata, offset: i64, max: usize) -> Bytes {
    let records = log.read(offset, max, i64::MAX, true).expect("read").records;
    let mut end = 0;
    while end < records.len() {
        let h = BatchHeader::parse(&records[end..]).expect("header");
        if h.last_offset() > meta.end_offset {
            break;
        }
        end += h.total_size();
    }
    records.slice(..end)
}

#[tokio::test]
async fn every_offset_of_a_copied_segment_reads_back_as_the_local_log_serves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path());
    let (meta, files) = first_segment(&log, dir.path());
    let mem = Arc::new(MemoryStore::new());
    let store = RemoteSegmentStore::new(mem.clone());
    store
        .copy(&meta, &files.load().await.expect("load"))
        .await
        .expect("copy");
    assert_eq!(mem.len(), 4, "log, offset index, time index, checkpoint");
    assert_eq!(
        store
            .fetch(&meta, SegmentFileKind::LeaderEpochCheckpoint)
            .await
            .expect("checkpoint"),
        files.leader_epoch_checkpoint
    );

    // A cache too small for the index: every read fetches it again, and still reads right.
    for cache in [64 * 1024 * 1024, 0] {
        let reader = TierReader::new(store.clone(), cache);
        for offset in meta.start_offset..=meta.end_offset {
            for max in [1, 3_000, 50_000] {
                let want = local_read(&log, &meta, offset, max);
                let got = reader.read(&meta, offset, max).await.expect("tier read");
                assert_eq!(got, want, "offset {offset}, max {max}, cache {cache}");
            }
        }
    }
    let reader = TierReader::new(store.clone(), 1 << 20);
    assert!(reader
        .read(&meta, meta.end_offset + 1, 1000)
        .await
        .expect("past the end")
        .is_empty());
}

#[tokio::test]
async fn a_segment_whose_log_does_not_match_its_metadata_is_an_error_not_wrong_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path());
    let (meta, files) = first_segment(&log, dir.path());
    let mem = Arc::new(MemoryStore::new());
    let store = RemoteSegmentStore::new(mem.clone());

    // The metadata's size must be the file's.
    let wrong_size = RemoteSegmentMetadata {
        size_bytes: meta.size_bytes + 1,
        ..meta.clone()
    };
    let loaded = files.load().await.expect("load");
    assert!(store.copy(&wrong_size, &loaded).await.is_err());
    // Optional files must agree.
    let says_txn = RemoteSegmentMetadata {
        has_txn_index: true,
        ..meta.clone()
    };
    assert!(store.copy(&says_txn, &loaded).await.is_err());

    // A log object overwritten with garbage at an indexed position.
    store
        .copy(&meta, &files.load().await.expect("load"))
        .await
        .expect("copy");
    let key = RemoteSegmentStore::key(&meta, SegmentFileKind::Log);
    let mut bytes = mem.get(&key).await.expect("log").to_vec();
    for b in &mut bytes[..64] {
        *b = 0xee;
    }
    mem.put(&key, Bytes::from(bytes)).await.expect("put");
    let reader = TierReader::new(store.clone(), 1 << 20);
    assert!(reader.read(&meta, meta.start_offset, 1000).await.is_err());

    // A log object shorter than the metadata says.
    store.copy(&meta, &loaded).await.expect("copy again");
    let short = mem.get(&key).await.expect("log").slice(..100);
    mem.put(&key, short).await.expect("put");
    let reader = TierReader::new(store.clone(), 1 << 20);
    assert!(reader.read(&meta, meta.start_offset, 1000).await.is_err());

    // A producer snapshot the log deleted between the listing and the copy: copied without.
    let vanished = LocalSegmentFiles {
        producer_snapshot: Some(dir.path().join("00000000000000099999.snapshot")),
        ..files.clone()
    };
    assert!(vanished
        .load()
        .await
        .expect("load")
        .producer_snapshot
        .is_none());
    // A required file that is gone is an error.
    let no_index = LocalSegmentFiles {
        offset_index: dir.path().join("nope.index"),
        ..files.clone()
    };
    assert!(no_index.load().await.is_err());

    // Deleting removes every object, and deleting again succeeds.
    store.delete(&meta).await.expect("delete");
    assert!(mem.is_empty());
    store.delete(&meta).await.expect("delete again");
}

/// A log whose first segment holds records at increasing timestamps, and transactions of two
/// producers, some aborted. Returns the log and the copied first segment.
async fn copied_segment_with_times_and_aborts(
    dir: &Path,
) -> (PartitionLog, RemoteSegmentMetadata, TierReader) {
    use ferry_log::{TxnMarker, TxnResult};
    let clock: SharedClock = ManualClock::new(1_000_000);
    let config = LogConfig {
        segment_bytes: 32 * 1024,
        index_interval_bytes: 512,
        ..LogConfig::default()
    };
    let log = PartitionLog::open(
        dir.to_path_buf(),
        TopicPartition::new("t", 0),
        config,
        true,
        clock,
    )
    .expect("open");
    let mut seq = [0i32; 2];
    for i in 0..200i64 {
        let ts = 10_000 + i * 10;
        match i % 10 {
            // A transaction of producer 7 or 8; every other one is aborted.
            3 | 6 => {
                let p = usize::from(i % 10 == 6);
                let pid = 7 + p as i64;
                let batch = Batches::of(3, |_| vec![b't'; 80])
                    .timestamp(ts)
                    .producer(pid, 0, seq[p])
                    .transactional()
                    .encode();
                seq[p] += 3;
                log.append_as_leader(&batch, 0).expect("txn append");
                let result = if (i / 10) % 2 == 0 {
                    TxnResult::Abort
                } else {
                    TxnResult::Commit
                };
                let marker = TxnMarker {
                    producer_id: pid,
                    producer_epoch: 0,
                    coordinator_epoch: 0,
                    result,
                };
                log.append_control_marker(&marker, 0).expect("marker");
            }
            _ => {
                let batch = Batches::of(4, |_| vec![b'v'; 150]).timestamp(ts).encode();
                log.append_as_leader(&batch, 0).expect("append");
            }
        }
    }
    log.close().expect("close");
    let candidates = log
        .tier_candidates(0, log.log_end_offset())
        .expect("candidates");
    let c = candidates.first().expect("a closed segment").clone();
    assert!(
        c.txn_index.is_some(),
        "the first segment aborted transactions"
    );
    let mem = Arc::new(MemoryStore::new());
    let store = RemoteSegmentStore::new(mem);
    let meta = RemoteSegmentMetadata {
        topic_id: Uuid::from_u128(42),
        partition: 0,
        segment_id: Uuid::from_u128(8),
        start_offset: c.base_offset,
        end_offset: c.end_offset,
        max_timestamp_ms: c.max_timestamp_ms,
        broker_id: 1,
        event_time_ms: 0,
        size_bytes: c.size_bytes,
        leader_epochs: c.leader_epochs.clone(),
        has_txn_index: true,
        has_producer_snapshot: c.producer_snapshot.is_some(),
        state: RemoteSegmentState::CopyFinished,
    };
    let files = LocalSegmentFiles {
        log: c.log.clone(),
        offset_index: c.offset_index.clone(),
        time_index: c.time_index.clone(),
        txn_index: c.txn_index.clone(),
        producer_snapshot: c.producer_snapshot.clone(),
        leader_epoch_checkpoint: c.leader_epoch_checkpoint.clone().into(),
    };
    store
        .copy(&meta, &files.load().await.expect("load"))
        .await
        .expect("copy");
    (log, meta, TierReader::new(store, 1 << 20))
}

#[tokio::test]
async fn a_timestamp_lookup_in_the_tier_finds_the_record_the_local_log_finds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (log, meta, reader) = copied_segment_with_times_and_aborts(dir.path()).await;
    assert!(meta.max_timestamp_ms > 10_000);
    let mut checked = 0;
    for ts in (9_000..=meta.max_timestamp_ms + 5).step_by(7) {
        let got = reader
            .offset_for_timestamp(&meta, ts)
            .await
            .expect("lookup");
        if ts > meta.max_timestamp_ms {
            assert_eq!(got, None, "ts {ts} after the segment");
            continue;
        }
        let want = log.offset_for_timestamp(ts).expect("local lookup");
        assert_eq!(got, want, "ts {ts}");
        assert!(got.is_some_and(|(o, _)| o <= meta.end_offset));
        checked += 1;
    }
    assert!(checked > 50, "{checked}");
}

#[tokio::test]
async fn aborted_transactions_in_the_tier_are_the_local_logs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (log, meta, reader) = copied_segment_with_times_and_aborts(dir.path()).await;
    let (mut seen_some, mut seen_complete) = (false, false);
    for start in (meta.start_offset..=meta.end_offset).step_by(5) {
        for upper in [start + 1, start + 20, meta.end_offset + 1] {
            let (got, complete) = reader
                .aborted_transactions(&meta, start, upper)
                .await
                .expect("txn index");
            // The local search goes on into later segments where the tier's is not complete
            // (its caller reads those next); this segment's part is the same.
            let want: Vec<_> = log
                .collect_aborted_transactions(start, upper)
                .into_iter()
                .filter(|t| t.last_offset <= meta.end_offset)
                .collect();
            assert_eq!(
                got, want,
                "start {start}, upper {upper}, complete {complete}"
            );
            seen_complete |= complete;
            seen_some |= !got.is_empty();
        }
    }
    assert!(seen_some && seen_complete);
}

#[tokio::test]
async fn sequential_reads_are_served_from_one_read_ahead_get() {
    use ferry_objstore::FaultyStore;

    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path());
    let (meta, files) = first_segment(&log, dir.path());
    let faulty = Arc::new(FaultyStore::new(MemoryStore::new(), 3));
    let store = RemoteSegmentStore::new(faulty.clone());
    let loaded = files.load().await.expect("load");
    store.copy(&meta, &loaded).await.expect("copy");
    assert!(
        meta.size_bytes < crate::reader::READ_AHEAD,
        "one window holds the segment"
    );

    let reader = TierReader::new(store, 1 << 20);
    let first = reader
        .read(&meta, meta.start_offset, 2_000)
        .await
        .expect("first read");
    // The store goes away: what follows in the segment still reads, from the window.
    faulty.controller().set_unavailable(true);
    let mut offset = meta.start_offset;
    let mut got = first;
    while offset <= meta.end_offset {
        assert_eq!(
            got,
            local_read(&log, &meta, offset, 2_000),
            "offset {offset}"
        );
        let mut at = 0;
        while at < got.len() {
            let h = BatchHeader::parse(&got[at..]).expect("header");
            offset = h.last_offset() + 1;
            at += h.total_size();
        }
        if offset > meta.end_offset {
            break;
        }
        got = reader
            .read(&meta, offset, 2_000)
            .await
            .expect("from the window");
    }
    // Another segment's read needs the store.
    let other = RemoteSegmentMetadata {
        segment_id: Uuid::from_u128(99),
        ..meta.clone()
    };
    assert!(reader
        .read(&other, other.start_offset, 2_000)
        .await
        .is_err());
}

/// A sequential reader past half of a window has the next one fetched in the background: with
/// two windows over the segment, it reads the whole segment with the store gone after the
/// first half, where it would otherwise need a GET (reads that straddle the two windows are
/// joined from both).
#[tokio::test]
async fn the_next_window_is_fetched_before_the_reader_needs_it() {
    use ferry_objstore::FaultyStore;

    let dir = tempfile::tempdir().expect("tempdir");
    let log = write_log(dir.path());
    let (meta, files) = first_segment(&log, dir.path());
    let faulty = Arc::new(FaultyStore::new(MemoryStore::new(), 3));
    let store = RemoteSegmentStore::new(faulty.clone());
    store
        .copy(&meta, &files.load().await.expect("load"))
        .await
        .expect("copy");
    let window = meta.size_bytes.div_ceil(2);
    assert!(
        window > 20_000,
        "a segment of two windows larger than a read: {}",
        meta.size_bytes
    );
    let reader = TierReader::new(store, 1 << 20).with_window(window);

    // Read batch by batch until past half of the first window.
    let mut offset = meta.start_offset;
    let mut read = 0u64;
    while read <= window / 2 + 600 {
        let got = reader.read(&meta, offset, 300).await.expect("read");
        let mut at = 0;
        while at < got.len() {
            let h = BatchHeader::parse(&got[at..]).expect("header");
            offset = h.last_offset() + 1;
            at += h.total_size();
        }
        read += got.len() as u64;
    }
    // Let the background GET land, then take the store away.
    for _ in 0..100 {
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    faulty.controller().set_unavailable(true);
    // Everything to the segment's end reads without the store.
    while offset <= meta.end_offset {
        let got = reader
            .read(&meta, offset, 300)
            .await
            .expect("from the prefetched window");
        assert_eq!(got, local_read(&log, &meta, offset, 300), "offset {offset}");
        let mut at = 0;
        while at < got.len() {
            let h = BatchHeader::parse(&got[at..]).expect("header");
            offset = h.last_offset() + 1;
            at += h.total_size();
        }
        read += got.len() as u64;
    }
    assert!(
        read > window,
        "read into the second window: {read} of {window}"
    );
}
