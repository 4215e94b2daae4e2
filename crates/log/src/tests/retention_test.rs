//! Retention by time and size, DeleteRecords, the log start offset across restarts, truncation
//! and the leader-epoch cache.

use crate::test_util::*;
use crate::{LogConfig, LogError};

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 400,
        retention_ms: 10_000,
        ..LogConfig::default()
    }
}

#[test]
fn retention_ms_deletes_old_segments_with_manual_clock() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(100_000);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..10 {
        log.append_as_leader(&simple(2, 100_000), 0).unwrap();
    }
    c.set(105_000);
    for _ in 0..10 {
        log.append_as_leader(&simple(2, 105_000), 0).unwrap();
    }
    let before = log.segment_count();
    assert_eq!(log.enforce_retention().unwrap(), 0);
    c.set(112_000);
    let deleted = log.enforce_retention().unwrap();
    assert!(deleted > 0);
    assert_eq!(log.segment_count(), before - deleted);
    let lso = log.log_start_offset();
    assert!(lso > 0 && lso <= 20, "lso {lso}");
    assert!(matches!(
        log.read(0, 100, 40, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert!(!log.read(lso, 1 << 20, 40, true).unwrap().records.is_empty());
    // Everything expired: the log rolls and keeps an empty active segment at the end.
    c.set(200_000);
    log.enforce_retention().unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), 40);
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(log.size_in_bytes(), 0);
    assert_eq!(
        log.append_as_leader(&simple(1, 200_000), 0)
            .unwrap()
            .first_offset,
        40
    );
}

#[test]
fn retention_bytes_keeps_the_newest_data() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let config = LogConfig {
        retention_ms: -1,
        retention_bytes: 1000,
        ..config()
    };
    let log = open(dir.path(), config, true, &clock);
    for _ in 0..40 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    let deleted = log.enforce_retention().unwrap();
    assert!(deleted > 0);
    assert!(log.size_in_bytes() <= 1000 + 400, "{}", log.size_in_bytes());
    assert!(log.size_in_bytes() > 600);
    assert_eq!(log.log_end_offset(), 80);
    assert_eq!(log.log_start_offset(), log.segment_base_offsets()[0]);
    crate::test_util::assert_closed_indexes_on_disk_and_consistent(&log);
    let data = log.read(log.log_start_offset(), 1 << 20, 80, true).unwrap();
    assert_eq!(batch_ranges(&data.records)[0].0, log.log_start_offset());
}

#[test]
fn segment_ms_rolls_old_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (c, clock) = clock(1_000);
    let config = LogConfig {
        segment_ms: 5_000,
        retention_ms: -1,
        ..LogConfig::default()
    };
    let log = open(dir.path(), config, true, &clock);
    log.append_as_leader(&simple(1, 1_000), 0).unwrap();
    assert_eq!(log.enforce_retention().unwrap(), 0);
    assert_eq!(log.segment_count(), 1);
    c.set(7_000);
    log.enforce_retention().unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 1]);
    // Appending a batch whose timestamp is past segment.ms also rolls.
    log.append_as_leader(&simple(1, 7_000), 0).unwrap();
    log.append_as_leader(&simple(1, 13_000), 0).unwrap();
    assert_eq!(log.segment_base_offsets(), vec![0, 1, 2]);
}

#[test]
fn delete_records_moves_log_start_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..20 {
        log.append_as_leader(&simple(2, 1), 0).unwrap();
    }
    let segments = log.segment_count();
    assert_eq!(log.delete_records_before(25).unwrap(), 25);
    assert!(log.segment_count() < segments);
    assert_eq!(
        log.delete_records_before(3).unwrap(),
        25,
        "never moves down"
    );
    assert!(matches!(
        log.delete_records_before(41),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // A read from inside the batch holding the log start offset is fine.
    assert!(!log.read(25, 1 << 20, 40, true).unwrap().records.is_empty());
    assert!(matches!(
        log.read(24, 1 << 20, 40, true),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    drop(log);
    let log = open(dir.path(), config(), false, &clock);
    assert_eq!(log.log_start_offset(), 25);
    assert_eq!(log.log_end_offset(), 40);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!(log.log_start_offset(), 25);
    assert_eq!(log.delete_records_before(40).unwrap(), 40);
    assert!(log.read(40, 100, 40, true).unwrap().records.is_empty());
}

#[test]
fn epoch_cache_end_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!(log.latest_epoch(), None);
    assert_eq!(log.end_offset_for_epoch(0), None);
    log.append_as_leader(&simple(2, 1), 1).unwrap();
    log.append_as_leader(&simple(2, 1), 1).unwrap();
    log.append_as_leader(&simple(2, 1), 3).unwrap();
    log.append_as_leader(&simple(2, 1), 5).unwrap();
    assert_eq!(log.latest_epoch(), Some(5));
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 4), (5, 6)]);
    assert_eq!(log.end_offset_for_epoch(0), None);
    assert_eq!(log.end_offset_for_epoch(1), Some((1, 4)));
    assert_eq!(log.end_offset_for_epoch(2), Some((1, 4)));
    assert_eq!(log.end_offset_for_epoch(3), Some((3, 6)));
    assert_eq!(log.end_offset_for_epoch(5), Some((5, 8)));
    assert_eq!(log.end_offset_for_epoch(9), Some((5, 8)));
    drop(log);
    // The checkpoint survives a crash; a lost one is rebuilt from the batches.
    let log = open(dir.path(), config(), false, &clock);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 4), (5, 6)]);
    drop(log);
    std::fs::remove_file(dir.path().join("leader-epoch-checkpoint")).unwrap();
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 4), (5, 6)]);
}

#[test]
fn truncate_to_drops_data_epochs_and_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for i in 0..10 {
        log.append_as_leader(&idem(1, 0, i * 2, 2), 1).unwrap();
    }
    for i in 10..20 {
        log.append_as_leader(&idem(1, 0, i * 2, 2), 2).unwrap();
    }
    log.truncate_to(16).unwrap();
    assert_eq!(log.log_end_offset(), 16);
    assert_eq!(log.epoch_entries(), vec![(1, 0)]);
    assert_eq!(log.end_offset_for_epoch(2), Some((1, 16)));
    // Producer state now ends at sequence 15.
    assert!(log.append_as_leader(&idem(1, 0, 16, 2), 3).is_ok());
    assert!(!log.read(16, 1 << 20, 18, true).unwrap().records.is_empty());
    // Below the log start offset: restart empty there.
    log.delete_records_before(10).unwrap();
    log.truncate_to(4).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (4, 4));
    assert_eq!(log.size_in_bytes(), 0);
}

/// A replica elected leader at an epoch it then appended nothing to has that epoch's start in
/// its cache, at its log end. Deposed, the new leader's divergence names that very offset: the
/// truncation drops nothing from the log but must drop the epoch (Kafka's `truncateTo` at or
/// past the log end), or the next fetch would name the unknown epoch again, for ever.
#[test]
fn truncating_at_the_log_end_drops_an_epoch_led_without_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..5 {
        log.append_as_leader(&simple(2, 0), 12).unwrap();
    }
    assert!(log.assign_epoch_start(13, 10).unwrap());
    assert_eq!(log.epoch_entries(), vec![(12, 0), (13, 10)]);
    log.truncate_to(10).unwrap();
    assert_eq!(log.log_end_offset(), 10, "no batch dropped");
    assert_eq!(log.epoch_entries(), vec![(12, 0)]);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!(
        log.epoch_entries(),
        vec![(12, 0)],
        "the checkpoint file agrees"
    );
    // Past the log end (a leader whose log is longer): the same.
    assert!(log.assign_epoch_start(14, 10).unwrap());
    log.truncate_to(25).unwrap();
    assert_eq!(log.epoch_entries(), vec![(12, 0)]);
}

/// Kafka's `truncateFullyAndStartAt`: a follower whose leader's log starts past its end.
#[test]
fn truncate_fully_restarts_an_empty_log_past_its_end_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), config(), true, &clock);
    for _ in 0..5 {
        log.append_as_leader(&simple(2, 0), 1).unwrap();
    }
    assert_eq!(log.log_end_offset(), 10);
    log.truncate_fully_and_start_at(25).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (25, 25));
    assert_eq!(log.segment_base_offsets(), vec![25]);
    assert_eq!(log.size_in_bytes(), 0);
    assert!(log.epoch_entries().is_empty());
    log.append_as_leader(&simple(1, 0), 2).unwrap();
    assert_eq!(log.log_end_offset(), 26);
    log.close().unwrap();
    drop(log);
    let log = open(dir.path(), config(), true, &clock);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (25, 26));
}

/// With the long-term tier (`remote_storage`), retention here is local retention: its own
/// limits, and only over segments the tier holds whole.
#[test]
fn local_retention_deletes_only_segments_the_tier_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let config = LogConfig {
        retention_ms: -1,
        retention_bytes: -1,
        remote_storage: true,
        local_retention_ms: -1,
        local_retention_bytes: 400,
        ..config()
    };
    let log = open(dir.path(), config, true, &clock);
    for _ in 0..30 {
        log.append_as_leader(&simple(2, 0), 0).unwrap();
    }
    let bases = log.segment_base_offsets();
    assert!(bases.len() >= 6, "{bases:?}");

    // Nothing is in the tier: nothing goes, however far over the local limit.
    assert_eq!(log.enforce_retention().unwrap(), 0);
    assert_eq!(log.log_start_offset(), 0);

    // The tier holds the first two segments whole and half of the third: two go.
    log.set_tier_copied_through(bases[2] + 1);
    assert_eq!(log.enforce_retention().unwrap(), 2);
    assert_eq!(log.log_start_offset(), bases[2]);

    // All but the active segment in the tier: the local limit decides.
    log.set_tier_copied_through(log.log_end_offset() - 1);
    log.enforce_retention().unwrap();
    assert!(log.size_in_bytes() <= 400 + 400, "{}", log.size_in_bytes());
    assert!(log.segment_count() >= 1);
    let lso = log.log_start_offset();
    assert!(!log
        .read(lso, 1 << 20, i64::MAX, true)
        .unwrap()
        .records
        .is_empty());
}

/// With copying off (`remote.log.copy.disable`, KIP-950) nothing more reaches the tier, so
/// the total limits apply locally again, over every segment: local retention alone would keep
/// the log forever.
#[test]
fn with_copying_off_the_total_retention_applies_locally() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let config = LogConfig {
        retention_ms: -1,
        retention_bytes: 800,
        remote_storage: true,
        remote_copy_disabled: true,
        local_retention_ms: -1,
        local_retention_bytes: 400,
        ..config()
    };
    let log = open(dir.path(), config, true, &clock);
    for _ in 0..30 {
        log.append_as_leader(&simple(2, 0), 0).unwrap();
    }
    assert!(log.segment_base_offsets().len() >= 6);
    // Nothing is in the tier, yet segments go: by retention.bytes, not local.retention.bytes.
    assert!(log.enforce_retention().unwrap() > 0);
    assert!(log.size_in_bytes() <= 800 + 400, "{}", log.size_in_bytes());
    assert!(log.size_in_bytes() > 400, "{}", log.size_in_bytes());
}

/// A follower of a tiered partition starts after a segment of the tier with that segment's
/// leader epochs and producer state (Kafka's `buildRemoteLogAuxState`): an idempotent
/// producer's next batch is in sequence there, as it would be on the leader, where a log
/// merely restarted at the offset knows no producer and refuses it.
#[test]
fn a_log_restarted_from_the_tiers_state_knows_the_epochs_and_producers() {
    let (leader_dir, follower_dir, bare_dir) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (_c, clock) = clock(0);
    let config = LogConfig {
        segment_bytes: 300,
        ..config()
    };
    let leader = open(leader_dir.path(), config.clone(), true, &clock);
    for seq in 0..10 {
        let epoch = if seq < 5 { 1 } else { 4 };
        leader
            .append_as_leader(&idem(7, 3, seq * 2, 2), epoch)
            .unwrap();
    }
    let candidates = leader.tier_candidates(0, leader.log_end_offset()).unwrap();
    let segment = candidates.last().expect("closed segments");
    let next = segment.end_offset + 1;
    let snapshot = std::fs::read(segment.producer_snapshot.as_ref().expect("snapshot")).unwrap();
    let epochs: Vec<(i32, i64)> =
        crate::epoch_cache::parse_checkpoint(&segment.leader_epoch_checkpoint, 2)
            .unwrap()
            .into_iter()
            .map(|v| (v[0] as i32, v[1]))
            .collect();
    assert_eq!(epochs, vec![(1, 0), (4, 10)]);
    let next_seq = i32::try_from(next).unwrap();

    let follower = open(follower_dir.path(), config.clone(), true, &clock);
    follower.append_as_leader(&simple(3, 0), 0).unwrap();
    follower
        .truncate_fully_and_start_with(next, &epochs, Some(&snapshot))
        .unwrap();
    assert_eq!(
        (follower.log_start_offset(), follower.log_end_offset()),
        (next, next)
    );
    let epoch_at_next = if next > 10 { 4 } else { 1 };
    assert_eq!(
        follower.epoch_entries().last().map(|e| e.0),
        Some(epoch_at_next)
    );
    assert!(follower.epoch_entries().iter().all(|e| e.1 < next));
    assert_eq!(follower.producer_epoch(7), Some(3));
    // What survives a restart: the snapshot at the log start and the checkpoint.
    follower.close().unwrap();
    drop(follower);
    let follower = open(follower_dir.path(), config.clone(), true, &clock);
    assert_eq!(follower.producer_epoch(7), Some(3));
    assert_eq!(follower.epoch_entries(), vec![(epoch_at_next, next)]);
    follower
        .append_as_leader(&idem(7, 3, next_seq, 2), 5)
        .expect("in sequence after the tier's snapshot");

    let bare = open(bare_dir.path(), config, true, &clock);
    bare.truncate_fully_and_start_at(next).unwrap();
    assert!(bare.append_as_leader(&idem(7, 3, next_seq, 2), 5).is_err());

    // Epochs that do not increase are refused before the log is touched.
    let kept_dir = tempfile::tempdir().unwrap();
    let kept = open(kept_dir.path(), LogConfig::default(), true, &clock);
    kept.append_as_leader(&simple(1, 0), 0).unwrap();
    assert!(kept
        .truncate_fully_and_start_with(5, &[(3, 0), (2, 1)], None)
        .is_err());
    assert_eq!(kept.log_end_offset(), 1);
}

/// A tiered log goes on in the long-term tier below its local log start: moving that start
/// (local retention, the leader's local start on a follower) keeps the leader epochs, across a
/// restart too, since the leader's lineage check of the tier's segments needs them; they go
/// when the tier's own start moves (`truncate_epochs_from_start`, never past the local start).
/// A log that is not tiered drops them with its segments, as before.
#[test]
fn a_tiered_log_keeps_the_epochs_below_its_local_log_start() {
    let (_c, clock) = clock(0);
    for tiered in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig {
            remote_storage: tiered,
            ..config()
        };
        let log = open(dir.path(), config.clone(), true, &clock);
        for i in 0..20 {
            log.append_as_leader(&simple(2, 0), if i < 5 { 1 } else { 4 })
                .unwrap();
        }
        log.delete_records_before(30).unwrap();
        let want = if tiered {
            vec![(1, 0), (4, 10)]
        } else {
            vec![(4, 30)]
        };
        assert_eq!(log.epoch_entries(), want, "tiered: {tiered}");
        log.close().unwrap();
        drop(log);
        let log = open(dir.path(), config, true, &clock);
        assert_eq!(log.epoch_entries(), want, "tiered: {tiered}, reopened");
        log.truncate_epochs_from_start(12).unwrap();
        let trimmed = if tiered { vec![(4, 12)] } else { vec![(4, 30)] };
        assert_eq!(log.epoch_entries(), trimmed, "tiered: {tiered}");
        log.truncate_epochs_from_start(35).unwrap();
        assert_eq!(
            log.epoch_entries(),
            vec![(4, 30)],
            "never past the local log start"
        );
    }
}

/// A log of segments of a few idempotent batches each, tiered (`remote.storage.enable`) or not.
fn small_segments(
    dir: &std::path::Path,
    tiered: bool,
    clock: &ferry_common::SharedClock,
) -> crate::PartitionLog {
    let config = LogConfig {
        remote_storage: tiered,
        segment_bytes: 300,
        ..config()
    };
    open(dir, config, true, clock)
}

/// A tiered log keeps the producer snapshot at the end of every segment the tier does not hold
/// yet (the copy uploads it, a follower starting from the tier loads it); once copied, only
/// the newest few stay, as for any log.
#[test]
fn a_tiered_log_keeps_the_snapshots_of_segments_not_copied_yet() {
    let (_c, clock) = clock(0);
    for tiered in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let log = small_segments(dir.path(), tiered, &clock);
        for seq in 0..20 {
            log.append_as_leader(&idem(7, 3, seq * 2, 2), 1).unwrap();
        }
        let candidates = log.tier_candidates(0, log.log_end_offset()).unwrap();
        assert!(candidates.len() > 3, "{}", candidates.len());
        let with_snapshot = candidates
            .iter()
            .filter(|c| c.producer_snapshot.is_some())
            .count();
        if tiered {
            assert_eq!(
                with_snapshot,
                candidates.len(),
                "every segment not copied yet"
            );
        } else {
            assert!(with_snapshot <= 2, "{with_snapshot}");
        }
        // Copied: the next roll drops what the tier holds.
        log.set_tier_copied_through(log.log_end_offset());
        let segments = log.segment_count();
        let mut seq = 40;
        while log.segment_count() == segments {
            log.append_as_leader(&idem(7, 3, seq, 2), 1).unwrap();
            seq += 2;
        }
        let left = log
            .tier_candidates(0, log.log_end_offset())
            .unwrap()
            .iter()
            .filter(|c| c.producer_snapshot.is_some())
            .count();
        assert!(left <= 2, "tiered {tiered}: {left}");
    }
}

/// A roll writes the closing segment's producer snapshot before the segment shows as closed:
/// the tier's copier lists closed segments without the writer lock and uploads the snapshot
/// it finds then. A snapshot that cannot be written fails the roll and leaves the segment
/// open, never closed without its snapshot.
#[test]
fn a_segment_shows_as_closed_only_with_its_producer_snapshot() {
    let (_c, clock) = clock(0);
    let dir = tempfile::tempdir().unwrap();
    let log = small_segments(dir.path(), true, &clock);
    // A non-empty directory where the next roll's snapshot goes: its rename fails.
    let block = |at: i64| {
        let path = crate::producer_state::snapshot_path(dir.path(), at);
        std::fs::create_dir_all(path.join("in-the-way")).unwrap();
        path
    };
    let mut seq = 0;
    let blocked = loop {
        let blocked = block(log.log_end_offset());
        if log.append_as_leader(&idem(7, 3, seq, 2), 1).is_err() {
            break blocked;
        }
        std::fs::remove_dir_all(&blocked).unwrap();
        seq += 2;
        assert!(seq < 100, "the log never rolled");
    };
    assert_eq!(log.segment_count(), 1, "the failed roll closed no segment");
    assert!(log.tier_candidates(0, i64::MAX).unwrap().is_empty());

    std::fs::remove_dir_all(&blocked).unwrap();
    log.append_as_leader(&idem(7, 3, seq, 2), 1).unwrap();
    let candidates = log.tier_candidates(0, i64::MAX).unwrap();
    assert_eq!(candidates.len(), 1);
    assert!(candidates[0].producer_snapshot.is_some());
}
