//! ListOffsets by timestamp and MAX_TIMESTAMP, including compressed batches.

use kafka_protocol::records::Compression;

use crate::test_util::*;
use crate::LogConfig;

#[test]
fn offset_for_timestamp_is_record_level() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let config = LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 50,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    // Batch i holds offsets 4i..4i+3 with timestamps 1000+100i .. +3.
    for i in 0..20 {
        log.append_as_leader(&simple(4, 1_000 + 100 * i), 0)
            .unwrap();
    }
    assert!(log.segment_count() > 2);
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 1_000)));
    assert_eq!(log.offset_for_timestamp(1_502).unwrap(), Some((22, 1_502)));
    assert_eq!(log.offset_for_timestamp(1_504).unwrap(), Some((24, 1_600)));
    assert_eq!(log.offset_for_timestamp(2_903).unwrap(), Some((79, 2_903)));
    assert_eq!(log.offset_for_timestamp(2_904).unwrap(), None);
    assert_eq!(log.max_timestamp().unwrap(), Some((79, 2_903)));
}

#[test]
fn compressed_batches_are_decoded() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&simple(3, 10), 0).unwrap();
    let gz = batch(B {
        records: 5,
        ts: 500,
        compression: Compression::Gzip,
        ..B::default()
    });
    log.append_as_leader(&gz, 0).unwrap();
    log.append_as_leader(&simple(2, 100), 0).unwrap();
    assert_eq!(log.offset_for_timestamp(502).unwrap(), Some((5, 502)));
    assert_eq!(log.offset_for_timestamp(200).unwrap(), Some((3, 500)));
    assert_eq!(log.max_timestamp().unwrap(), Some((7, 504)));
    let d = log.read(4, 1 << 20, 10, true).unwrap();
    assert_eq!(batch_ranges(&d.records), vec![(3, 7), (8, 9)]);
}

#[test]
fn max_timestamp_picks_earliest_offset_on_ties_and_empty_is_none() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    assert_eq!(log.max_timestamp().unwrap(), None);
    assert_eq!(log.offset_for_timestamp(0).unwrap(), None);
    log.append_as_leader(&simple(2, 50), 0).unwrap();
    log.append_as_leader(&simple(1, 900), 0).unwrap();
    log.append_as_leader(&simple(1, 900), 0).unwrap();
    log.append_as_leader(&simple(1, 10), 0).unwrap();
    assert_eq!(log.max_timestamp().unwrap(), Some((2, 900)));
}
