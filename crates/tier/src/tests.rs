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
    store.copy(&meta, &files).await.expect("copy");
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
    assert!(store.copy(&wrong_size, &files).await.is_err());
    // Optional files must agree.
    let says_txn = RemoteSegmentMetadata {
        has_txn_index: true,
        ..meta.clone()
    };
    assert!(store.copy(&says_txn, &files).await.is_err());

    // A log object overwritten with garbage at an indexed position.
    store.copy(&meta, &files).await.expect("copy");
    let key = RemoteSegmentStore::key(&meta, SegmentFileKind::Log);
    let mut bytes = mem.get(&key).await.expect("log").to_vec();
    for b in &mut bytes[..64] {
        *b = 0xee;
    }
    mem.put(&key, Bytes::from(bytes)).await.expect("put");
    let reader = TierReader::new(store.clone(), 1 << 20);
    assert!(reader.read(&meta, meta.start_offset, 1000).await.is_err());

    // A log object shorter than the metadata says.
    store.copy(&meta, &files).await.expect("copy again");
    let short = mem.get(&key).await.expect("log").slice(..100);
    mem.put(&key, short).await.expect("put");
    let reader = TierReader::new(store.clone(), 1 << 20);
    assert!(reader.read(&meta, meta.start_offset, 1000).await.is_err());

    // Deleting removes every object, and deleting again succeeds.
    store.delete(&meta).await.expect("delete");
    assert!(mem.is_empty());
    store.delete(&meta).await.expect("delete again");
}
