//! Idempotent producers: duplicates, gaps, fencing, new epochs, and state across restarts.

use crate::test_util::*;
use crate::{LogConfig, LogError};

#[test]
fn duplicate_retry_returns_original_offsets_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&simple(2, 1), 0).unwrap();
    let first = log.append_as_leader(&idem(5, 0, 0, 3), 0).unwrap();
    assert_eq!((first.first_offset, first.last_offset), (2, 4));
    log.append_as_leader(&idem(5, 0, 3, 2), 0).unwrap();
    let size = log.size_in_bytes();
    let retry = log.append_as_leader(&idem(5, 0, 0, 3), 0).unwrap();
    assert!(retry.duplicate);
    assert_eq!((retry.first_offset, retry.last_offset), (2, 4));
    assert_eq!(log.size_in_bytes(), size);
    assert_eq!(log.log_end_offset(), 7);
}

#[test]
fn sequence_gap_and_unknown_producer_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    assert!(matches!(
        log.append_as_leader(&idem(1, 0, 5, 1), 0),
        Err(LogError::OutOfOrderSequence {
            producer_id: 1,
            expected: 0,
            got: 5
        })
    ));
    log.append_as_leader(&idem(1, 0, 0, 2), 0).unwrap();
    assert!(matches!(
        log.append_as_leader(&idem(1, 0, 3, 1), 0),
        Err(LogError::OutOfOrderSequence {
            expected: 2,
            got: 3,
            ..
        })
    ));
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn stale_epoch_fenced_and_new_epoch_restarts_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&idem(9, 3, 0, 1), 0).unwrap();
    assert!(matches!(
        log.append_as_leader(&idem(9, 2, 1, 1), 0),
        Err(LogError::InvalidProducerEpoch {
            producer_id: 9,
            current: 3,
            got: 2
        })
    ));
    assert!(matches!(
        log.append_as_leader(&idem(9, 4, 1, 1), 0),
        Err(LogError::OutOfOrderSequence {
            expected: 0,
            got: 1,
            ..
        })
    ));
    log.append_as_leader(&idem(9, 4, 0, 1), 0).unwrap();
    assert_eq!(log.producer_epoch(9), Some(4));
    assert_eq!(log.producer_epoch(10), None);
}

#[test]
fn sequence_wraps_at_i32_max() {
    let dir = tempfile::tempdir().unwrap();
    let (_c, clock) = clock(0);
    let log = open(dir.path(), LogConfig::default(), true, &clock);
    log.append_as_leader(&idem(2, 0, 0, 1), 0).unwrap();
    // Forge state near the wrap point by replaying headers is impractical; check the rule.
    assert_eq!(crate::batch::seq_add(i32::MAX, 1), 0);
    assert_eq!(crate::batch::seq_add(i32::MAX - 1, 3), 1);
}

#[test]
fn producer_state_survives_clean_and_unclean_restart() {
    for clean in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (_c, clock) = clock(0);
        let config = LogConfig {
            segment_bytes: 500,
            ..LogConfig::default()
        };
        let log = open(dir.path(), config.clone(), true, &clock);
        let mut seq = 0;
        for _ in 0..20 {
            log.append_as_leader(&idem(3, 1, seq, 2), 0).unwrap();
            seq += 2;
        }
        assert!(log.segment_count() > 2);
        if clean {
            log.close().unwrap();
        }
        drop(log);
        let log = open(dir.path(), config, clean, &clock);
        assert_eq!(log.producer_epoch(3), Some(1));
        let retry = log.append_as_leader(&idem(3, 1, seq - 2, 2), 0).unwrap();
        assert!(retry.duplicate, "clean={clean}");
        assert_eq!((retry.first_offset, retry.last_offset), (38, 39));
        assert!(matches!(
            log.append_as_leader(&idem(3, 1, seq + 1, 1), 0),
            Err(LogError::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            log.append_as_leader(&idem(3, 1, seq, 1), 0)
                .unwrap()
                .first_offset,
            40
        );
    }
}
