//! The scrubber's scan and repair: a flipped byte is found at its batch, and a repair with a
//! replica's bytes restores the file byte for byte; what is not the same batches is refused.

use crate::scrub::{first_corrupt_batch, RepairOutcome, ScrubStep};
use crate::test_util::*;
use crate::{LogConfig, PartitionLog};

fn small_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_interval_bytes: 100,
        ..LogConfig::default()
    }
}

/// A log of 40 batches of 3 records over several closed segments.
fn filled(dir: &std::path::Path) -> PartitionLog {
    let (_c, clock) = clock(10_000);
    let log = open(dir, small_segments(), true, &clock);
    for i in 0..40 {
        log.append_as_leader(&simple(3, 1_000 + i), 1).unwrap();
    }
    assert!(log.closed_segments().len() >= 3);
    log
}

/// Flips one byte at `pos` of the segment file `path`.
fn flip(path: &std::path::Path, pos: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[pos as usize] ^= 0x40;
    std::fs::write(path, bytes).unwrap();
}

/// Runs a whole scrub of every closed segment, in chunks of `chunk` bytes.
fn scrub_all(log: &PartitionLog, chunk: usize) -> (u64, Vec<crate::scrub::CorruptRange>) {
    let mut checked = 0;
    let mut found = Vec::new();
    for seg in log.closed_segments() {
        let mut cursor = seg.cursor();
        loop {
            match log.scrub_chunk(&seg, &mut cursor, chunk).unwrap() {
                ScrubStep::Checked { bytes } => checked += bytes,
                ScrubStep::Corrupt { bytes, range } => {
                    checked += bytes;
                    found.push(range);
                }
                ScrubStep::Done | ScrubStep::Gone => break,
            }
        }
    }
    (checked, found)
}

#[test]
fn a_sound_log_scrubs_clean_and_every_closed_byte_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path());
    let closed: u64 = log.closed_segments().iter().map(|s| s.size()).sum();
    for chunk in [1, 100, 1 << 20] {
        let (checked, found) = scrub_all(&log, chunk);
        assert_eq!(checked, closed, "chunk {chunk}");
        assert!(found.is_empty(), "{found:?}");
    }
}

#[test]
fn a_flipped_record_byte_is_found_at_its_batch_and_the_scan_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path());
    let seg = log.closed_segments()[1].clone();
    // The second batch of the segment: its offsets and position, from a sound read.
    let data = log
        .read(seg.base_offset(), 1 << 20, i64::MAX, true)
        .unwrap();
    let ranges = batch_ranges(&data.records);
    let first_len = crate::batch::BatchHeader::parse(&data.records)
        .unwrap()
        .total_size() as u64;
    let (base, last) = ranges[1];
    // A byte inside the second batch's records (past its header).
    flip(seg.path(), first_len + 70);
    let closed: u64 = log.closed_segments().iter().map(|s| s.size()).sum();
    let (checked, found) = scrub_all(&log, 256);
    assert_eq!(checked, closed);
    assert_eq!(found.len(), 1, "{found:?}");
    let r = &found[0];
    assert_eq!(r.segment_base_offset, seg.base_offset());
    assert_eq!(
        (r.position, r.first_offset, r.last_offset),
        (first_len, base, last)
    );
    assert!(r.reason.contains("CRC"), "{}", r.reason);
    // The same batch as the fetch path finds it.
    let (_, at) = log.corrupt_batch_at(base + 1).unwrap().unwrap();
    assert_eq!(&at, r);
    assert!(log.corrupt_batch_at(base - 1).unwrap().is_none());
    // A read holding it: the sound prefix ends where the batch starts.
    let read = log
        .read(seg.base_offset(), 1 << 20, i64::MAX, true)
        .unwrap();
    let (cut, span, _) = first_corrupt_batch(&read.records).unwrap();
    assert_eq!((cut as u64, span.base_offset), (first_len, base));
    assert!(first_corrupt_batch(&data.records).is_none());
}

#[test]
fn a_repair_with_the_replicas_bytes_restores_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let replica_dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path());
    // A replica: the same batches appended as a follower.
    let (_c, clock) = clock(10_000);
    let replica = open(replica_dir.path(), small_segments(), true, &clock);
    let all = log.read(0, 1 << 20, i64::MAX, true).unwrap();
    let mut next = 0;
    while next < log.log_end_offset() {
        let d = log.read(next, 1 << 20, i64::MAX, true).unwrap();
        replica.append_as_follower(&d.records).unwrap();
        next = replica.log_end_offset();
    }
    assert!(!all.records.is_empty());
    let seg = log.closed_segments()[2].clone();
    let before = std::fs::read(seg.path()).unwrap();
    flip(seg.path(), 80);
    let (_, found) = scrub_all(&log, 1 << 20);
    let r = found[0].clone();
    let good = replica
        .read(r.first_offset, r.length as usize, r.last_offset + 1, true)
        .unwrap();
    // Not the same batches: refused, nothing written.
    let other = replica
        .read(r.last_offset + 1, r.length as usize, i64::MAX, true)
        .unwrap();
    let outcome = log.repair_range(&seg, &r, &other.records).unwrap();
    assert!(matches!(outcome, RepairOutcome::Mismatch(_)), "{outcome:?}");
    assert_ne!(std::fs::read(seg.path()).unwrap(), before);
    assert_eq!(
        log.repair_range(&seg, &r, &good.records).unwrap(),
        RepairOutcome::Repaired
    );
    assert_eq!(std::fs::read(seg.path()).unwrap(), before);
    assert_eq!(
        log.repair_range(&seg, &r, &good.records).unwrap(),
        RepairOutcome::AlreadyIntact
    );
    assert!(scrub_all(&log, 1 << 20).1.is_empty());
}

#[test]
fn a_broken_length_reports_the_rest_of_the_segment_and_a_deleted_segment_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled(dir.path());
    let seg = log.closed_segments()[0].clone();
    // The first batch's length field (outside the CRC): nothing after it can be parsed.
    flip(seg.path(), 8);
    let (_, found) = scrub_all(&log, 1 << 20);
    assert_eq!(found.len(), 1, "{found:?}");
    let r = &found[0];
    assert_eq!((r.position, r.length), (0, seg.size()));
    assert_eq!(
        (r.first_offset, r.last_offset),
        (seg.base_offset(), seg.next_offset() - 1)
    );
    // Retention removes the segment: the scrub of it ends quietly.
    log.delete_records_before(seg.next_offset()).unwrap();
    let mut cursor = seg.cursor();
    assert_eq!(
        log.scrub_chunk(&seg, &mut cursor, 100).unwrap(),
        ScrubStep::Gone
    );
}
