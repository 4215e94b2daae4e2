//! Crash recovery: every whole batch survives a kill -9, the torn tail goes.

use std::io::Write;

use crate::segment::segment_path;
use crate::test_util::*;
use crate::LogConfig;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 64,
        ..LogConfig::default()
    }
}

fn append_junk(path: &std::path::Path, junk: &[u8]) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(junk).unwrap();
}

fn last_log_file(dir: &std::path::Path) -> std::path::PathBuf {
    let mut logs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

#[test]
fn kill9_with_torn_tail_keeps_every_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for i in 0..30 {
        log.append_as_leader(&simple(3, 100 + i), 4).unwrap();
    }
    let before: Vec<_> = (0..90)
        .step_by(3)
        .map(|o| log.read(o, 1 << 20, 90, true).unwrap().records)
        .collect();
    let segments = log.segment_count();
    assert!(segments > 2);
    drop(log); // no close: a kill -9

    let half = simple(3, 1);
    append_junk(&last_log_file(dir.path()), &half[..half.len() / 2]);

    let log = open(dir.path(), config(), false, &clock);
    assert_eq!(log.log_end_offset(), 90);
    assert_eq!(log.segment_count(), segments);
    for (i, o) in (0..90).step_by(3).enumerate() {
        assert_eq!(log.read(o, 1 << 20, 90, true).unwrap().records, before[i]);
    }
    let info = log.append_as_leader(&simple(2, 5), 4).unwrap();
    assert_eq!(info.first_offset, 90);
    assert_eq!(
        batch_ranges(&log.read(90, 1 << 20, 92, true).unwrap().records),
        vec![(90, 91)]
    );
    assert_eq!(log.end_offset_for_epoch(4), Some((4, 92)));
}

#[test]
fn kill9_with_garbage_and_corrupt_batch_truncates_there() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    for _ in 0..5 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    drop(log);
    // A whole batch with a flipped payload byte, then garbage.
    let mut bad = simple(2, 1);
    let n = bad.len();
    bad[n - 2] ^= 0x55;
    let file = segment_path(dir.path(), 0, "log");
    let good_len = std::fs::metadata(&file).unwrap().len();
    append_junk(&file, &bad);
    append_junk(&file, &[0xab; 100]);

    let log = open(dir.path(), LogConfig::default(), false, &clock);
    assert_eq!(log.log_end_offset(), 10);
    assert_eq!(std::fs::metadata(&file).unwrap().len(), good_len);
    assert_eq!(
        log.append_as_leader(&simple(1, 1), 0).unwrap().first_offset,
        10
    );
}

#[test]
fn kill9_drops_segments_after_a_corrupt_one() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..60 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 3);
    drop(log);
    // Corrupt the first batch of the second segment.
    let second = segment_path(dir.path(), bases[1], "log");
    let mut bytes = std::fs::read(&second).unwrap();
    bytes[70] ^= 0xff;
    std::fs::write(&second, &bytes).unwrap();

    let log = open(dir.path(), config(), false, &clock);
    assert_eq!(log.log_end_offset(), bases[1]);
    assert!(!segment_path(dir.path(), bases[2], "log").exists());
    let info = log.append_as_leader(&simple(1, 1), 0).unwrap();
    assert_eq!(info.first_offset, bases[1]);
}

#[test]
fn unclean_open_without_damage_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..40 {
        log.append_as_leader(&idem(7, 0, 0, 1), 0).ok();
    }
    drop(log);
    let log = open(dir.path(), config(), false, &clock);
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.producer_epoch(7), Some(0));
}

#[test]
fn missing_index_files_are_rebuilt_on_clean_open() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..60 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    let bases = log.segment_base_offsets();
    log.close().unwrap();
    drop(log);
    for b in &bases {
        std::fs::remove_file(segment_path(dir.path(), *b, "index")).unwrap();
    }
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!(log.log_end_offset(), 120);
    let d = log.read(51, 1 << 20, 120, true).unwrap();
    assert_eq!(batch_ranges(&d.records)[0], (50, 51));
}
