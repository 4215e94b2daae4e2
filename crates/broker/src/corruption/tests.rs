//! The corruption record: what followers and consumers are served around a corrupt batch.

use bytes::Bytes;
use ferry_common::TopicPartition;
use ferry_test_support::Batches;

use super::*;

/// Three batches of 2 records at offsets 0, 2 and 4.
fn three_batches() -> (Vec<u8>, Vec<std::ops::Range<usize>>) {
    let mut buf = Vec::new();
    let mut spans = Vec::new();
    for base in [0i64, 2, 4] {
        let mut b = Batches::of(2, |_| b"value".to_vec()).encode().to_vec();
        b[..8].copy_from_slice(&base.to_be_bytes());
        spans.push(buf.len()..buf.len() + b.len());
        buf.extend(b);
    }
    (buf, spans)
}

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn found(i: &Integrity, by: &'static str) -> u64 {
    i.metrics
        .found
        .get_or_create(&FoundLabels { found_by: by })
        .get()
}

#[test]
fn a_follower_gets_only_the_sound_batches_before_a_corrupt_one_which_is_queued_for_repair() {
    let i = Integrity::new();
    let (mut buf, spans) = three_batches();
    let sound = Bytes::from(buf.clone());
    assert_eq!(i.check_for_replica(&tp(), sound.clone()), sound);
    // A flipped byte in the second batch's records.
    buf[spans[1].end - 3] ^= 1;
    let sent = i.check_for_replica(&tp(), Bytes::from(buf.clone()));
    assert_eq!(&sent[..], &buf[..spans[1].start]);
    assert_eq!(found(&i, "replica_fetch"), 1);
    assert_eq!(i.take_pending(), vec![(tp(), 2)]);
    // Met again: not counted or queued twice.
    i.check_for_replica(&tp(), Bytes::from(buf.clone()));
    assert_eq!(found(&i, "replica_fetch"), 1);
    assert!(i.take_pending().is_empty());
}

#[test]
fn a_consumer_is_served_what_precedes_a_known_corrupt_batch_until_it_is_repaired() {
    let i = Integrity::new();
    let (buf, spans) = three_batches();
    let records = Bytes::from(buf.clone());
    let g = i.repair_generation();
    assert_eq!(i.hide_known(&tp(), records.clone(), g), records);
    assert!(i.mark(&tp(), 4, 5, FoundBy::Scrubber));
    assert!(
        !i.mark(&tp(), 5, 5, FoundBy::Scrubber),
        "overlaps a known range"
    );
    assert_eq!(
        &i.hide_known(&tp(), records.clone(), g)[..],
        &buf[..spans[2].start]
    );
    // Other partitions are untouched.
    let other = TopicPartition::new("t", 1);
    assert_eq!(i.hide_known(&other, records.clone(), g), records);
    // Failed repairs are counted once per range, and retried by the next pass.
    assert!(i.note_unrepairable(&tp(), 4));
    assert!(!i.note_unrepairable(&tp(), 4));
    assert_eq!(i.metrics.unrepairable.get(), 1);
    i.retry_known();
    assert_eq!(i.take_pending(), vec![(tp(), 4)]);
    i.forget(&tp(), 4, 5, true);
    assert_eq!(i.metrics.repaired.get(), 1);
    assert_eq!(
        i.hide_known(&tp(), records.clone(), i.repair_generation()),
        records
    );
}

#[test]
fn a_consumer_read_that_overlapped_a_repair_is_checked_again() {
    let i = Integrity::new();
    let (mut buf, spans) = three_batches();
    let before = i.repair_generation();
    i.mark(&tp(), 2, 3, FoundBy::Scrubber);
    // The repair wrote while the read ran: the read may hold the old bytes of the range.
    i.forget(&tp(), 2, 3, true);
    buf[spans[1].end - 3] ^= 1;
    let served = i.hide_known(&tp(), Bytes::from(buf.clone()), before);
    assert_eq!(&served[..], &buf[..spans[1].start]);
    assert_eq!(found(&i, "consumer_fetch"), 1);
}
