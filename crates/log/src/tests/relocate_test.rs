//! Moving a log to another log dir while it is appended to (AlterReplicaLogDirs), and a start
//! after a move that a stop interrupted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ferry_common::TopicPartition;

use crate::test_util::*;
use crate::{LogConfig, LogManager, MoveProgress, PartitionLog, MOVED_MARKER_FILE};

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 2_000,
        ..LogConfig::default()
    }
}

/// A log manager over two log dirs, `a` and `b`, in a temporary directory.
fn two_dirs() -> (tempfile::TempDir, Vec<std::path::PathBuf>, LogManager) {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(1_000);
    let m = LogManager::open(dirs.clone(), clock).unwrap();
    (root, dirs, m)
}

/// Every batch of `log` from offset 0, as (base, last) offsets.
fn all_batches(log: &PartitionLog) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < log.log_end_offset() {
        let data = log
            .read(offset, 1 << 20, log.log_end_offset(), true)
            .unwrap();
        for (base, last) in batch_ranges(&data.records) {
            assert_eq!(base, offset, "a gap or an overlap");
            out.push((base, last));
            offset = last + 1;
        }
    }
    out
}

#[test]
fn a_log_moves_to_another_dir_while_appends_go_on_and_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(1_000);
    let m = Arc::new(LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap());
    let t = TopicPartition::new("t", 0);
    let log = m.get_or_create(&t, small_segments()).unwrap();
    let from = log.dir().parent().unwrap().to_path_buf();
    let to = dirs.iter().find(|d| **d != from).unwrap().clone();
    for _ in 0..200 {
        log.append_as_leader(&simple(3, 1_000), 0).unwrap();
    }
    assert!(log.segment_count() > 5);

    // Appends keep coming while the log moves.
    let stop = Arc::new(AtomicBool::new(false));
    let appender = {
        let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Acquire) || n < 50 {
                log.append_as_leader(&simple(3, 1_000), 0).unwrap();
                n += 1;
            }
            n
        })
    };
    let progress = MoveProgress::default();
    m.relocate(&t, &to, &progress).unwrap();
    stop.store(true, Ordering::Release);
    let appended_during = appender.join().unwrap();

    let expected_end = (200 + appended_during) * 3;
    assert_eq!(log.log_end_offset(), expected_end as i64);
    assert_eq!(log.dir(), to.join("t-0"));
    assert!(!from.join("t-0").exists(), "the old directory is gone");
    assert!(!to.join("t-0").join(MOVED_MARKER_FILE).exists());
    assert!(progress.copied_bytes.load(Ordering::Relaxed) > 0);
    // Step 1 copied whole closed segments: the future log held their records.
    let copied_to = progress.copied_to_offset.load(Ordering::Relaxed);
    assert!(
        copied_to > 0 && copied_to < expected_end as i64,
        "{copied_to}"
    );
    let batches = all_batches(&log);
    assert_eq!(batches.len(), 200 + appended_during);
    assert_eq!(batches.last().unwrap().1, expected_end as i64 - 1);
    // The moved log keeps taking appends, in its new dir.
    log.append_as_leader(&simple(1, 1_000), 0).unwrap();
    assert!(std::fs::read_dir(from.as_path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with("t-0")));

    // A restart finds it in the new dir, whole.
    m.shutdown().unwrap();
    drop((m, log));
    let m = LogManager::open(dirs.clone(), clock).unwrap();
    assert_eq!(m.partitions_on_disk(), vec![t.clone()]);
    let log = m.get_or_create(&t, small_segments()).unwrap();
    assert_eq!(log.dir(), to.join("t-0"));
    assert_eq!(log.log_end_offset(), expected_end as i64 + 1);
    assert_eq!(all_batches(&log).len(), 200 + appended_during + 1);
}

#[test]
fn a_move_to_a_dir_that_is_not_a_log_dir_or_to_where_the_log_is_changes_nothing() {
    let (root, _dirs, m) = two_dirs();
    let t = TopicPartition::new("t", 0);
    let log = m.get_or_create(&t, small_segments()).unwrap();
    log.append_as_leader(&simple(3, 1_000), 0).unwrap();
    let here = log.dir();
    let progress = MoveProgress::default();
    assert!(m
        .relocate(&t, &root.path().join("elsewhere"), &progress)
        .is_err());
    m.relocate(&t, here.parent().unwrap(), &progress).unwrap();
    assert_eq!(log.dir(), here);
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn a_truncation_between_the_two_steps_of_a_move_has_the_second_copy_the_segments_again() {
    let (_root, dirs, m) = two_dirs();
    let t = TopicPartition::new("t", 0);
    let log = m.get_or_create(&t, small_segments()).unwrap();
    for _ in 0..100 {
        log.append_as_leader(&simple(3, 1_000), 0).unwrap();
    }
    let from = log.dir().parent().unwrap().to_path_buf();
    let to = dirs.iter().find(|d| **d != from).unwrap().clone();
    // A follower's truncation (after a leader change) while the first step's copies exist:
    // batches of 5 records now stand where batches of 3 were, in segments the first step
    // copied with other bytes.
    let between = || {
        log.truncate_to(150).unwrap();
        for _ in 0..30 {
            log.append_as_leader(&simple(5, 1_000), 0).unwrap();
        }
    };
    let space = crate::DirSpace::untracked(&to);
    log.relocate_with(&to, space, &MoveProgress::default(), &between)
        .unwrap();
    assert_eq!(log.dir(), to.join("t-0"));
    assert_eq!(log.log_end_offset(), 300);
    let batches = all_batches(&log);
    assert_eq!(batches.len(), 50 + 30);
    assert_eq!(batches[50], (150, 154));
    assert_eq!(*batches.last().unwrap(), (295, 299));
}

#[test]
fn a_start_after_an_interrupted_move_keeps_the_finished_copy_and_drops_an_unfinished_one() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(1_000);
    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    let done = TopicPartition::new("done", 0);
    let log = m.get_or_create(&done, small_segments()).unwrap();
    log.append_as_leader(&simple(3, 1_000), 0).unwrap();
    m.shutdown().unwrap();
    let old = log.dir();
    drop((m, log));
    // A stop between the copy's rename and the old directory's: the partition is in both dirs,
    // the copy marked.
    let other = dirs
        .iter()
        .find(|d| Some(d.as_path()) != old.parent())
        .unwrap()
        .clone();
    let copy = other.join("done-0");
    std::fs::create_dir_all(&copy).unwrap();
    for e in std::fs::read_dir(&old).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
    }
    std::fs::write(copy.join(MOVED_MARKER_FILE), b"").unwrap();
    // And a move of another partition stopped during its copy (a topic name with dots).
    std::fs::create_dir_all(other.join("half.way-0.123-future")).unwrap();

    let m = LogManager::open(dirs.clone(), clock).unwrap();
    assert!(!old.exists(), "the moved log's old directory went");
    assert!(!copy.join(MOVED_MARKER_FILE).exists());
    assert!(!other.join("half.way-0.123-future").exists());
    // The unfinished move is handed to the broker to start again, once.
    assert_eq!(
        m.take_interrupted_moves(),
        vec![(TopicPartition::new("half.way", 0), other.clone())]
    );
    assert!(m.take_interrupted_moves().is_empty());
    let log = m.get_or_create(&done, small_segments()).unwrap();
    assert_eq!(log.dir(), copy);
    assert_eq!(log.log_end_offset(), 3);
}

#[test]
fn a_log_not_hosted_yet_is_created_in_the_dir_asked_for_it() {
    let (_root, dirs, m) = two_dirs();
    // Both dirs are empty, so a new log would go to the first; the second is asked for.
    let tp = TopicPartition::new("later", 0);
    m.prefer_dir(&tp, &dirs[1]).unwrap();
    let log = m.get_or_create(&tp, small_segments()).unwrap();
    assert_eq!(log.dir().parent(), Some(dirs[1].as_path()));
    // Used once: a log created again after a delete is placed as any new one.
    m.delete(&tp).unwrap();
    let again = m.get_or_create(&tp, small_segments()).unwrap();
    assert_eq!(again.dir().parent(), Some(dirs[0].as_path()));
    // A path that is not a log dir is refused and changes nothing.
    let other = TopicPartition::new("other", 0);
    assert!(m.prefer_dir(&other, &dirs[0].join("nowhere")).is_err());
    let log = m.get_or_create(&other, small_segments()).unwrap();
    assert_eq!(
        log.dir().parent(),
        Some(dirs[1].as_path()),
        "the less loaded dir"
    );
}
