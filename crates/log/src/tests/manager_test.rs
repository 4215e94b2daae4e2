//! LogManager: partitions on disk, placement, delete, clean shutdown marker.

use std::sync::Arc;

use ferry_common::TopicPartition;

use crate::test_util::*;
use crate::{LogConfig, LogManager, CLEAN_SHUTDOWN_FILE};

#[test]
fn partitions_on_disk_skip_junk_and_deleted_dirs() {
    let root = tempfile::tempdir().unwrap();
    let d1 = root.path().join("d1");
    std::fs::create_dir_all(d1.join("orders-0")).unwrap();
    std::fs::create_dir_all(d1.join("my-topic-12")).unwrap();
    std::fs::create_dir_all(d1.join("orders-1.abc-delete")).unwrap();
    std::fs::create_dir_all(d1.join("lost+found")).unwrap();
    std::fs::write(d1.join("meta.properties"), "x").unwrap();
    let (_c, clock) = clock(0);
    let m = LogManager::open(vec![d1.clone()], clock).unwrap();
    assert_eq!(
        m.partitions_on_disk(),
        vec![
            TopicPartition::new("my-topic", 12),
            TopicPartition::new("orders", 0)
        ]
    );
    assert!(!d1.join("orders-1.abc-delete").exists());
}

#[test]
fn new_partitions_go_to_the_emptiest_dir_and_reopen_in_place() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(0);
    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    let l0 = m
        .get_or_create(&TopicPartition::new("t", 0), LogConfig::default())
        .unwrap();
    let l1 = m
        .get_or_create(&TopicPartition::new("t", 1), LogConfig::default())
        .unwrap();
    assert_ne!(l0.dir().parent(), l1.dir().parent());
    assert!(Arc::ptr_eq(
        &l0,
        &m.get_or_create(&TopicPartition::new("t", 0), LogConfig::default())
            .unwrap()
    ));
    l1.append_as_leader(&simple(3, 1), 0).unwrap();
    m.shutdown().unwrap();
    for d in &dirs {
        assert!(d.join(CLEAN_SHUTDOWN_FILE).exists());
    }
    drop((m, l0, l1));
    let m = LogManager::open(dirs.clone(), clock).unwrap();
    for d in &dirs {
        assert!(!d.join(CLEAN_SHUTDOWN_FILE).exists());
        assert!(m.had_clean_shutdown(d));
    }
    assert_eq!(m.partitions_on_disk().len(), 2);
    let l1 = m
        .get_or_create(&TopicPartition::new("t", 1), LogConfig::default())
        .unwrap();
    assert_eq!(l1.log_end_offset(), 3);
    assert_eq!(m.all().len(), 1);
}

#[test]
fn delete_removes_the_partition() {
    let root = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let m = LogManager::open(vec![root.path().to_path_buf()], clock).unwrap();
    let t = TopicPartition::new("gone", 0);
    let log = m.get_or_create(&t, LogConfig::default()).unwrap();
    log.append_as_leader(&simple(1, 1), 0).unwrap();
    let dir = log.dir();
    m.delete(&t).unwrap();
    assert!(!dir.exists());
    assert!(m.get(&t).is_none());
    assert!(m.partitions_on_disk().is_empty());
    // Recreating starts a fresh log.
    let log = m.get_or_create(&t, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn run_maintenance_enforces_retention_and_flushes() {
    let root = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000);
    let m = LogManager::open(vec![root.path().to_path_buf()], clock).unwrap();
    let config = LogConfig {
        segment_bytes: 300,
        retention_ms: 1_000,
        ..LogConfig::default()
    };
    let log = m
        .get_or_create(&TopicPartition::new("r", 0), config)
        .unwrap();
    for _ in 0..10 {
        log.append_as_leader(&simple(2, 1_000), 0).unwrap();
    }
    assert_eq!(m.run_maintenance().unwrap(), 0);
    assert_eq!(
        log.recovery_point(),
        *log.segment_base_offsets().last().unwrap()
    );
    c.set(5_000);
    assert!(m.run_maintenance().unwrap() > 0);
    assert_eq!(log.log_start_offset(), 20);
}

#[test]
fn unclean_dir_recovers_partitions() {
    let root = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let m = LogManager::open(vec![root.path().to_path_buf()], Arc::clone(&clock)).unwrap();
    let t = TopicPartition::new("x", 0);
    m.get_or_create(&t, LogConfig::default())
        .unwrap()
        .append_as_leader(&simple(2, 1), 0)
        .unwrap();
    drop(m); // crash: no marker
    let m = LogManager::open(vec![root.path().to_path_buf()], clock).unwrap();
    assert!(!m.had_clean_shutdown(root.path()));
    assert_eq!(
        m.get_or_create(&t, LogConfig::default())
            .unwrap()
            .log_end_offset(),
        2
    );
}

#[test]
fn shutdown_after_crash_recovers_partitions_never_opened() {
    let root = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let m = LogManager::open(vec![root.path().to_path_buf()], Arc::clone(&clock)).unwrap();
    let t = TopicPartition::new("y", 0);
    let log = m.get_or_create(&t, LogConfig::default()).unwrap();
    log.append_as_leader(&simple(2, 1), 0).unwrap();
    let file = log.dir().join(format!("{:020}.log", 0));
    drop((m, log)); // crash
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    std::io::Write::write_all(&mut f, &[1, 2, 3]).unwrap();
    let m = LogManager::open(vec![root.path().to_path_buf()], Arc::clone(&clock)).unwrap();
    m.shutdown().unwrap(); // never opened `y-0`, yet the marker is written
    drop(m);
    let m = LogManager::open(vec![root.path().to_path_buf()], clock).unwrap();
    assert!(m.had_clean_shutdown(root.path()));
    let log = m.get_or_create(&t, LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 2);
    assert_eq!(
        log.append_as_leader(&simple(1, 1), 0).unwrap().first_offset,
        2
    );
}

#[test]
fn high_watermark_checkpoint_round_trips_per_dir_and_is_read_at_open() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(0);
    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    let t0 = TopicPartition::new("orders.v1_x", 0);
    let t1 = TopicPartition::new("orders.v1_x", 1);
    m.get_or_create(&t0, LogConfig::default()).unwrap();
    m.get_or_create(&t1, LogConfig::default()).unwrap();
    assert_eq!(m.checkpointed_high_watermark(&t0), None);
    m.checkpoint_high_watermarks(|tp| (tp.partition == 0).then_some(42).or(Some(7)))
        .unwrap();
    // One file per dir, each naming only the partitions of that dir; no temporary file left.
    for d in &dirs {
        let file =
            crate::OffsetCheckpointFile::new(d.join(crate::REPLICATION_OFFSET_CHECKPOINT_FILE));
        assert_eq!(file.read().unwrap().len(), 1, "{}", d.display());
        assert!(!d.join("replication-offset-checkpoint.tmp").exists());
    }
    m.shutdown().unwrap();
    drop(m);
    let m = LogManager::open(dirs.clone(), clock).unwrap();
    assert_eq!(m.checkpointed_high_watermark(&t0), Some(42));
    assert_eq!(m.checkpointed_high_watermark(&t1), Some(7));
    assert_eq!(
        m.checkpointed_high_watermark(&TopicPartition::new("other", 0)),
        None
    );
}

#[test]
fn offset_checkpoint_file_uses_kafkas_format_and_rejects_corruption() {
    let root = tempfile::tempdir().unwrap();
    let file = crate::OffsetCheckpointFile::new(root.path().join("cp"));
    assert!(file.read().unwrap().is_empty());
    let mut offsets = std::collections::BTreeMap::new();
    offsets.insert(TopicPartition::new("a", 3), 10i64);
    offsets.insert(TopicPartition::new("b", 0), 0i64);
    file.write(&offsets).unwrap();
    assert_eq!(
        std::fs::read_to_string(file.path()).unwrap(),
        "0\n2\na 3 10\nb 0 0\n"
    );
    assert_eq!(file.read().unwrap(), offsets);
    std::fs::write(file.path(), "0\n2\na 3 10\n").unwrap();
    assert!(file.read().is_err());
    std::fs::write(file.path(), "1\n0\n").unwrap();
    assert!(file.read().is_err());
}

/// Makes the log of `dir`'s first segment unreadable: a directory where its file was.
fn damage(partition_dir: &std::path::Path) {
    let segment = partition_dir.join("00000000000000000000.log");
    std::fs::remove_file(&segment).unwrap();
    std::fs::create_dir(&segment).unwrap();
}

#[test]
fn open_existing_loads_every_partition_as_a_sequential_open_does() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(0);
    let tps: Vec<TopicPartition> = (0..5)
        .flat_map(|t| (0..10).map(move |p| TopicPartition::new(format!("topic{t}"), p)))
        .collect();
    let records = |i: usize| i % 7 + 1;
    {
        let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
        for (i, tp) in tps.iter().enumerate() {
            let log = m.get_or_create(tp, LogConfig::default()).unwrap();
            for _ in 0..2 {
                log.append_as_leader(&simple(records(i), 1), 0).unwrap();
            }
        }
        // No shutdown: the next open recovers every log.
    }
    let sequential: Vec<i64> = {
        let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
        assert!(dirs.iter().all(|d| !m.had_clean_shutdown(d)));
        tps.iter()
            .map(|tp| {
                m.get_or_create(tp, LogConfig::default())
                    .unwrap()
                    .log_end_offset()
            })
            .collect()
    };
    let m = LogManager::open(dirs.clone(), clock).unwrap();
    let mut wanted: Vec<_> = tps
        .iter()
        .map(|tp| (tp.clone(), LogConfig::default()))
        .collect();
    // Not on disk: left to get_or_create.
    wanted.push((TopicPartition::new("new", 0), LogConfig::default()));
    let outcomes = m.open_existing(wanted, 4);
    assert_eq!(outcomes.len(), tps.len());
    assert!(outcomes.iter().all(|(_, o)| o.is_ok()));
    assert_eq!(m.all().len(), tps.len());
    for (i, tp) in tps.iter().enumerate() {
        let log = m.get(tp).unwrap();
        assert_eq!(log.log_end_offset(), sequential[i], "{tp}");
        assert_eq!(log.log_end_offset(), 2 * records(i) as i64, "{tp}");
        let again = m.get_or_create(tp, LogConfig::default()).unwrap();
        assert!(Arc::ptr_eq(&log, &again), "{tp} opened once");
    }
    assert!(m.get(&TopicPartition::new("new", 0)).is_none());
    // Already open: not opened again.
    assert!(m
        .open_existing(vec![(tps[0].clone(), LogConfig::default())], 2)
        .is_empty());
}

#[test]
fn open_existing_opens_the_others_when_one_partition_is_damaged() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().to_path_buf()];
    let (_c, clock) = clock(0);
    let tps: Vec<TopicPartition> = (0..12).map(|p| TopicPartition::new("t", p)).collect();
    {
        let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
        for tp in &tps {
            let log = m.get_or_create(tp, LogConfig::default()).unwrap();
            log.append_as_leader(&simple(3, 1), 0).unwrap();
        }
    }
    let damaged = TopicPartition::new("t", 5);
    damage(&root.path().join("t-5"));
    let m = LogManager::open(dirs, clock).unwrap();
    let wanted = tps
        .iter()
        .map(|tp| (tp.clone(), LogConfig::default()))
        .collect();
    let outcomes = m.open_existing(wanted, 3);
    assert_eq!(outcomes.len(), tps.len());
    for (tp, outcome) in &outcomes {
        assert_eq!(outcome.is_err(), *tp == damaged, "{tp}");
    }
    assert!(m.get(&damaged).is_none());
    for tp in tps.iter().filter(|tp| **tp != damaged) {
        assert_eq!(m.get(tp).unwrap().log_end_offset(), 3, "{tp}");
    }
}

#[test]
fn loading_and_closing_many_logs_sync_the_file_system_once_not_each_file() {
    use crate::epoch_cache::read_offset_checkpoint;
    use crate::index::fsynced;
    use crate::loader::RECOVERY_POINT_FILE;

    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(0);
    let tps: Vec<TopicPartition> = (0..40).map(|p| TopicPartition::new("t", p)).collect();
    {
        let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
        for tp in &tps {
            let log = m.get_or_create(tp, LogConfig::default()).unwrap();
            log.append_as_leader(&simple(3, 1), 0).unwrap();
        }
        // No shutdown: the next open recovers every log.
    }
    let wanted = || tps.iter().map(|tp| (tp.clone(), LogConfig::default()));

    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    let before = fsynced::count_under(root.path());
    let outcomes = m.open_existing(wanted().collect(), 2);
    assert!(outcomes.iter().all(|(_, o)| o.is_ok()));
    // Recovery rebuilt indexes, epoch caches and checkpoints of 40 logs: one fsync each would
    // be several per log (the previous code did 7).
    assert_eq!(
        fsynced::count_under(root.path()),
        before,
        "fsyncs during the load"
    );
    for tp in &tps {
        let log = m.get(tp).unwrap();
        assert_eq!(log.log_end_offset(), 3);
        // The recovery point on disk is never past what the load made durable; the active
        // segment's indexes wait in memory for the roll or close (no new files per log).
        let rp = read_offset_checkpoint(&log.dir().join(RECOVERY_POINT_FILE)).unwrap();
        assert!(rp.unwrap_or(0) <= 3, "{tp}");
        assert!(
            !log.dir().join("00000000000000000000.index").exists(),
            "{tp}"
        );
    }

    // Files that hold what they would be rewritten with are left alone (read, not replaced).
    use std::os::unix::fs::MetadataExt;
    let inodes = || -> Vec<Option<u64>> {
        tps.iter()
            .flat_map(|tp| ["leader-epoch-checkpoint", "log-start-offset"].map(|f| (tp, f)))
            .map(|(tp, f)| {
                let dir = m.get(tp).unwrap().dir();
                std::fs::metadata(dir.join(f)).ok().map(|m| m.ino())
            })
            .collect()
    };
    let unchanged = inodes();
    let before = fsynced::count_under(root.path());
    m.shutdown().unwrap();
    assert_eq!(
        fsynced::count_under(root.path()),
        before,
        "fsyncs during the shutdown"
    );
    assert_eq!(inodes(), unchanged, "unchanged checkpoints rewritten");
    drop(m);

    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    assert!(dirs.iter().all(|d| m.had_clean_shutdown(d)));
    let outcomes = m.open_existing(wanted().collect(), 2);
    assert!(outcomes.iter().all(|(_, o)| o.is_ok()));
    for tp in &tps {
        let log = m.get(tp).unwrap();
        assert_eq!(log.log_end_offset(), 3, "{tp}");
        assert!(
            !log.read(0, 1 << 20, 3, true).unwrap().records.is_empty(),
            "{tp}"
        );
    }
}

#[test]
fn a_full_dir_refuses_appends_without_writing_and_takes_them_once_it_has_room() {
    use crate::dir_space::RECHECK_MS;

    let root = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000);
    let m = LogManager::open(vec![root.path().to_path_buf()], Arc::clone(&clock)).unwrap();
    let tp = TopicPartition::new("t", 0);
    let log = m.get_or_create(&tp, LogConfig::default()).unwrap();
    log.append_as_leader(&simple(3, 1), 0).unwrap();
    let size = log.size_in_bytes();

    // An append met ENOSPC: the dir is full.
    let space = &m.dir_spaces()[0];
    space.note_error(
        &crate::LogError::Io(std::io::Error::from_raw_os_error(28)),
        clock.now_ms(),
    );
    let err = log.append_as_leader(&simple(3, 1), 0).unwrap_err();
    assert!(err.is_disk_full(), "{err}");
    assert_eq!(err.kind(), crate::ErrorKind::DiskFull);
    assert_eq!(log.size_in_bytes(), size, "a refused append writes nothing");
    assert_eq!(log.log_end_offset(), 3);

    // The temp dir has room: the next look, one recheck interval later, lets appends in.
    c.advance(RECHECK_MS);
    log.append_as_leader(&simple(3, 1), 0).unwrap();
    assert_eq!(log.log_end_offset(), 6);
    assert!(!space.is_full());
}

#[test]
fn a_failed_dir_goes_offline_once_and_the_other_keeps_serving() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let (_c, clock) = clock(0);
    let m = LogManager::open(dirs.clone(), Arc::clone(&clock)).unwrap();
    let (t0, t1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let l0 = m.get_or_create(&t0, LogConfig::default()).unwrap();
    let l1 = m.get_or_create(&t1, LogConfig::default()).unwrap();
    l1.append_as_leader(&simple(2, 1), 0).unwrap();
    let failed = l1.dir().parent().unwrap().to_path_buf();

    // A full disk is not a failed one.
    let full = crate::LogError::Io(std::io::Error::from_raw_os_error(28));
    assert!(!m.maybe_mark_offline(&l1, &full));
    // Nor is a state file with bad contents: that is the log's problem, not the disk's.
    let corrupt = crate::LogError::KafkaStorage("corrupt checkpoint".into());
    assert!(!m.maybe_mark_offline(&l1, &corrupt));
    assert!(m.offline_dirs().is_empty());

    let eio = crate::LogError::IoAt {
        path: l1.dir(),
        source: std::io::Error::from_raw_os_error(5),
    };
    assert!(m.maybe_mark_offline(&l1, &eio));
    assert!(!m.maybe_mark_offline(&l1, &eio), "reported once");
    assert_eq!(m.mark_dir_offline(&failed, "again"), None);
    assert_eq!(m.offline_dirs().len(), 1);
    assert_eq!(m.offline_dirs()[0].0, failed);
    assert!(m.get(&t1).is_none());
    assert!(m.is_offline(&t1));
    assert!(m.get_or_create(&t1, LogConfig::default()).is_err());

    // New partitions go to the dir still online, however full it is.
    let t2 = TopicPartition::new("t", 2);
    let l2 = m.get_or_create(&t2, LogConfig::default()).unwrap();
    assert_eq!(l2.dir().parent(), l0.dir().parent());
    l0.append_as_leader(&simple(1, 1), 0).unwrap();

    // Only the online dir is vouched for at shutdown.
    m.shutdown().unwrap();
    assert!(l0
        .dir()
        .parent()
        .unwrap()
        .join(CLEAN_SHUTDOWN_FILE)
        .exists());
    assert!(!failed.join(CLEAN_SHUTDOWN_FILE).exists());
    drop((m, l0, l1, l2));

    // After a restart (the disk replaced) the dir serves again, recovering its logs.
    let m = LogManager::open(dirs, clock).unwrap();
    assert!(m.offline_dirs().is_empty());
    assert!(!m.had_clean_shutdown(&failed));
    let l1 = m.get_or_create(&t1, LogConfig::default()).unwrap();
    assert_eq!(l1.log_end_offset(), 2);
}

#[test]
fn a_dir_that_cannot_be_opened_starts_offline_unless_it_is_the_only_one() {
    let root = tempfile::tempdir().unwrap();
    let good = root.path().join("good");
    // A regular file where a dir should be: creating the dir fails with an I/O error.
    let bad = root.path().join("bad");
    std::fs::write(&bad, "not a dir").unwrap();
    let (_c, clock) = clock(0);
    assert!(LogManager::open(vec![bad.clone()], Arc::clone(&clock)).is_err());
    let m = LogManager::open(vec![good.clone(), bad.clone()], clock).unwrap();
    let offline = m.offline_dirs();
    assert_eq!(offline.len(), 1);
    assert_eq!(offline[0].0, bad);
    let t = TopicPartition::new("t", 0);
    let log = m.get_or_create(&t, LogConfig::default()).unwrap();
    assert_eq!(log.dir().parent(), Some(good.as_path()));
    let held = TopicPartition::new("t", 1);
    m.hold_offline(&held);
    assert!(m.get_or_create(&held, LogConfig::default()).is_err());
    m.shutdown().unwrap();
}
