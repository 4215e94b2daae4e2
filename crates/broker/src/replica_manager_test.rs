use super::*;

use ferry_replication::partition_state::{ISR_CHANGE_TIMEOUT, ISR_RETRY_BACKOFF};

use bytes::{Bytes, BytesMut};
use ferry_test_support::Batches;

/// `n` records, one batch each.
fn batch(n: usize) -> Bytes {
    Batches::of(n, |i| format!("v{i}"))
        .batch_per_record()
        .encode()
}

/// `n` records in one batch.
fn one_batch(n: usize) -> Bytes {
    Batches::of(n, |i| format!("v{i}")).encode()
}

fn topic(leader: BrokerId, isr: Vec<BrokerId>, partition_epoch: i32) -> TopicImage {
    ferry_test_support::Topic::default()
        .leader(leader, 0)
        .isr(&isr)
        .partition_epoch(partition_epoch)
        .image()
}

fn manager(dir: &std::path::Path, node: BrokerId) -> ReplicaManager {
    let logs = LogManager::open(vec![dir.to_path_buf()], ferry_common::system_clock()).unwrap();
    ReplicaManager::new(logs, node)
}

#[test]
fn leader_high_watermark_is_the_least_isr_log_end_offset() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    assert!(rm
        .ensure_topic(&topic(1, vec![1, 2, 3], 0), LogConfig::default())
        .unwrap()
        .is_empty());
    let p = rm.partition_of("t", 0).unwrap();
    assert!(p.is_leader());
    p.append(&batch(5)).unwrap();
    assert_eq!(p.high_watermark(), 0);
    assert!(p.record_follower_fetch(2, 5).is_none());
    assert_eq!(p.high_watermark(), 0, "follower 3 has not fetched yet");
    assert!(p.record_follower_fetch(3, 3).is_none());
    assert_eq!(p.high_watermark(), 3);
    // A follower fetching from an older offset never moves the HW back.
    p.record_follower_fetch(3, 1);
    assert_eq!(p.high_watermark(), 3);
    p.record_follower_fetch(3, 5);
    assert_eq!(p.high_watermark(), 5);
    // Consumers read up to the HW, replicas up to the LEO.
    p.append(&batch(2)).unwrap();
    assert_eq!(p.read(5, 1 << 20, true).unwrap().records.len(), 0);
    assert!(!p
        .read_for_replica(5, 1 << 20, true)
        .unwrap()
        .records
        .is_empty());
}

#[test]
fn isr_expands_when_caught_up_and_shrinks_when_lagging() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 4), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch(2, 3);
    assert_eq!(p.high_watermark(), 3);
    assert!(p.record_follower_fetch(3, 1).is_none(), "not caught up");
    let change = p
        .record_follower_fetch(3, 3)
        .expect("caught up: joins the ISR");
    assert_eq!(change.new_isr, vec![1, 2, 3]);
    assert_eq!(change.partition_epoch, 4);
    assert!(
        p.record_follower_fetch(3, 3).is_none(),
        "one change at a time"
    );
    p.isr_change_finished(&change, IsrOutcome::Committed);

    // The controller made the change; then follower 2 stops fetching.
    rm.ensure_topic(&topic(1, vec![1, 2, 3], 5), LogConfig::default())
        .unwrap();
    p.append(&batch(1)).unwrap();
    p.record_follower_fetch(3, 4);
    assert!(p.isr_shrink(60_000).is_none());
    std::thread::sleep(std::time::Duration::from_millis(20));
    let change = p.isr_shrink(10).expect("follower 2 lags");
    assert_eq!(change.new_isr, vec![1, 3]);
}

/// Kafka's "maximal ISR": while an expansion waits for the controller, the joining follower
/// already counts for the high watermark. Otherwise records acknowledged with the old ISR in the
/// meantime could be missing on a member of the new one, which may be elected next (a randomized
/// fault run lost an acks=all message so: a restarted broker rejoined and became preferred
/// leader without a record the old ISR had acknowledged).
#[test]
fn a_follower_joining_the_isr_counts_for_the_high_watermark_before_the_image_has_it() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 4), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch(2, 3);
    assert_eq!(p.high_watermark(), 3);
    let change = p.record_follower_fetch(3, 3).expect("caught up: joins");
    assert_eq!(change.new_isr, vec![1, 2, 3]);
    // More records; follower 2 has them, joining follower 3 does not yet.
    p.append(&batch(2)).unwrap();
    p.record_follower_fetch(2, 5);
    assert_eq!(
        p.high_watermark(),
        3,
        "the joining follower holds the high watermark"
    );
    p.record_follower_fetch(3, 5);
    assert_eq!(p.high_watermark(), 5);
    // A refused proposal may be the duplicate of one the controller committed: the follower
    // still counts...
    p.append(&batch(1)).unwrap();
    p.record_follower_fetch(2, 6);
    p.isr_change_finished(&change, IsrOutcome::AwaitImage);
    assert_eq!(p.high_watermark(), 5);
    // ...until it lags like an ISR member that would leave.
    std::thread::sleep(std::time::Duration::from_millis(20));
    p.isr_shrink(10);
    p.record_follower_fetch(2, 6);
    assert_eq!(p.high_watermark(), 6);
}

/// Issue 10: a broker rejoining after kill -9 made the leaders log 173 "stale partition epoch"
/// refusals in 3 s: every follower fetch re-proposed the expansion the controller had just
/// refused, until the partition applied the newer image. Now a refused change holds back the
/// next one until the image shows a new state of the partition (or a timeout passes).
#[test]
fn a_refused_isr_change_is_not_proposed_again_until_the_image_moves() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 4), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let t0 = Instant::now();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch_at(2, 3, t0);
    let change = p
        .record_follower_fetch_at(3, 3, t0)
        .expect("caught up: joins");
    assert_eq!(change.current_isr, vec![1, 2]);
    p.isr_change_finished_at(&change, IsrOutcome::AwaitImage, t0);
    for i in 0..200 {
        let at = t0 + Duration::from_millis(i);
        assert!(p.record_follower_fetch_at(3, 3, at).is_none(), "fetch {i}");
        assert!(p.isr_shrink_at(60_000, at).is_none());
    }
    // An image that changed other partitions only decides nothing about this one.
    rm.ensure_topic(&topic(1, vec![1, 2], 4), LogConfig::default())
        .unwrap();
    assert!(p.record_follower_fetch_at(3, 3, t0).is_none());
    // The image shows a new state of the partition: the next fetch may propose again.
    rm.ensure_topic(&topic(1, vec![1, 2], 5), LogConfig::default())
        .unwrap();
    let again = p
        .record_follower_fetch_at(3, 3, t0)
        .expect("proposed again");
    assert_eq!(again.partition_epoch, 5);
    // Without any image, the hold ends after a timeout (a lost answer must not freeze the ISR).
    p.isr_change_finished_at(&again, IsrOutcome::Committed, t0);
    assert!(p
        .record_follower_fetch_at(3, 3, t0 + Duration::from_secs(1))
        .is_none());
    assert!(p
        .record_follower_fetch_at(3, 3, t0 + ISR_CHANGE_TIMEOUT)
        .is_some());
}

/// Refused at the current partition epoch (the follower is still fenced): the controller said
/// it did not apply it, so the follower stops counting for the high watermark, and the change
/// is proposed again only after a back-off, not on the next fetch.
#[test]
fn a_refused_expansion_backs_off_and_stops_counting_its_follower() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 4), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let t0 = Instant::now();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch_at(2, 3, t0);
    let change = p.record_follower_fetch_at(3, 3, t0).expect("joins");
    p.append(&batch(2)).unwrap();
    p.record_follower_fetch_at(2, 5, t0);
    assert_eq!(p.high_watermark(), 3, "the joining follower counts");
    p.isr_change_finished_at(&change, IsrOutcome::Refused, t0);
    p.record_follower_fetch_at(2, 5, t0);
    assert_eq!(p.high_watermark(), 5, "refused: it no longer counts");
    assert!(p.record_follower_fetch_at(3, 5, t0).is_none());
    assert!(p
        .record_follower_fetch_at(3, 5, t0 + ISR_RETRY_BACKOFF)
        .is_some());
    // A stale answer (the partition moved on meanwhile) changes nothing.
    rm.ensure_topic(&topic(1, vec![1, 2], 5), LogConfig::default())
        .unwrap();
    p.isr_change_finished_at(&change, IsrOutcome::Refused, t0);
    assert!(p.record_follower_fetch_at(3, 5, t0).is_some());
}

/// Issue 10: a follower of a busy remote-WAL topic reports its log end far more often than its
/// data takes to arrive, so it never reaches the leader's log end as of its *previous* report
/// (Kafka's rule as written). It holds what the leader had one WAL latency ago, so it is in
/// sync as long as that latency stays below `replica.lag.time.max.ms`; it leaves once it stops.
#[test]
fn a_follower_trailing_by_its_wal_latency_stays_in_the_isr() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let t0 = Instant::now();
    let lag_max_ms = 100;
    // One record every 2 ms; the follower reports every 2 ms what the leader had 50 ms ago.
    let mut leo_at = vec![0i64];
    for step in 1..=500usize {
        let now = t0 + Duration::from_millis(2 * step as u64);
        p.append(&batch(1)).unwrap();
        leo_at.push(p.log.log_end_offset());
        let reported = leo_at[step.saturating_sub(25)];
        p.record_follower_fetch_at(2, reported, now);
        assert!(
            p.isr_shrink_at(lag_max_ms, now).is_none(),
            "shrunk at step {step} while trailing by 50 ms"
        );
    }
    // It stops moving: out once it has not caught up with anything for the lag limit.
    let stopped = t0 + Duration::from_millis(1_000);
    let reported = leo_at[475];
    for ms in [10, 40] {
        p.record_follower_fetch_at(2, reported, stopped + Duration::from_millis(ms));
        assert!(p
            .isr_shrink_at(lag_max_ms, stopped + Duration::from_millis(ms))
            .is_none());
    }
    let change = p
        .isr_shrink_at(lag_max_ms, stopped + Duration::from_millis(60))
        .expect("caught up last at 950 ms: out at 1,060 ms");
    assert_eq!(change.new_isr, vec![1]);
}

/// Broker 1 leading `t-0` at epoch 0 with broker 2 following it, each with its own manager
/// (under `dir/a` and `dir/b`): the managers, then the leader's and the follower's partition.
fn leader_and_follower(
    dir: &std::path::Path,
) -> (
    ReplicaManager,
    ReplicaManager,
    Arc<Partition>,
    Arc<Partition>,
) {
    let leader_rm = manager(&dir.join("a"), 1);
    let follower_rm = manager(&dir.join("b"), 2);
    leader_rm
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let followers = follower_rm
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    assert_eq!(followers.len(), 1, "became a follower");
    let leader = leader_rm.partition_of("t", 0).unwrap();
    let follower = follower_rm.partition_of("t", 0).unwrap();
    (leader_rm, follower_rm, leader, follower)
}

/// Gives `rm` the image of [`leader_and_follower`]'s topic after broker 2 was elected at epoch 1.
fn elect_broker_2(rm: &ReplicaManager) {
    let elected = ferry_test_support::Topic::default()
        .leader(2, 1)
        .isr(&[1, 2])
        .partition_epoch(1)
        .image();
    rm.ensure_topic(&elected, LogConfig::default()).unwrap();
}

/// Topic `t` led by broker 1 again, at epoch 1.
fn broker_1_at_epoch_1() -> TopicImage {
    ferry_test_support::Topic::default()
        .leader(1, 1)
        .isr(&[1, 2])
        .partition_epoch(1)
        .image()
}

#[test]
fn follower_appends_leader_batches_and_bounds_its_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, _follower_rm, leader, follower) = leader_and_follower(dir.path());
    assert_eq!(follower.role(), Role::Follower { leader: 1 });
    assert!(
        follower.append(&batch(1)).is_err(),
        "a follower takes no produce"
    );
    leader.append(&batch(4)).unwrap();
    let bytes = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    follower.append_as_follower(&bytes).unwrap();
    assert_eq!(follower.log.log_end_offset(), 4);
    follower.update_follower_high_watermark(10);
    assert_eq!(follower.high_watermark(), 4);
    follower.update_follower_high_watermark(2);
    assert_eq!(follower.high_watermark(), 2);
    follower.truncate_to(1).unwrap();
    assert_eq!(follower.log.log_end_offset(), 1);
    assert_eq!(follower.high_watermark(), 1);
}

#[test]
fn altered_topic_config_reaches_existing_replicas_through_the_image() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 2);
    rm.ensure_topic(&topic(1, vec![1, 2, 3], 0), LogConfig::default())
        .unwrap();
    let altered = LogConfig {
        max_message_bytes: 1024,
        ..LogConfig::default()
    };
    rm.ensure_topic(&topic(1, vec![1, 2, 3], 0), altered.clone())
        .unwrap();
    assert_eq!(rm.partition_of("t", 0).unwrap().log.config(), altered);
}

#[test]
fn read_replica_candidates_are_in_sync_followers_holding_the_offset() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(5)).unwrap();
    p.record_follower_fetch(2, 5);
    // 3 is caught up but outside the ISR: a consumer sent there could fall behind.
    p.record_follower_fetch(3, 5);
    let ids = |offset| -> Vec<BrokerId> {
        p.read_replica_candidates(offset)
            .iter()
            .map(|c| c.0)
            .collect()
    };
    assert_eq!(ids(5), vec![2]);
    assert_eq!(ids(6), Vec::<BrokerId>::new(), "no follower holds offset 6");
    assert_eq!(p.read_replica_candidates(0)[0].1, 5, "its log end offset");
}

#[test]
fn a_follower_is_sent_each_new_high_watermark_once() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(3)).unwrap();
    assert!(p.high_watermark_unsent(2), "never told anything yet");
    p.record_high_watermark_sent(2, 0);
    assert!(!p.high_watermark_unsent(2));
    // The follower's next fetch reports it holds everything: the HW moves, and the response
    // to that fetch must not long-poll before telling it.
    p.record_follower_fetch(2, 3);
    assert_eq!(p.high_watermark(), 3);
    assert!(p.high_watermark_unsent(2));
    p.record_high_watermark_sent(2, 3);
    assert!(!p.high_watermark_unsent(2));
    assert!(
        !p.high_watermark_unsent(9),
        "not a follower of this partition"
    );
}

#[test]
fn follower_log_start_offset_follows_the_leaders() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(&dir.path().join("f"), 2);
    rm.ensure_topic(
        &topic(1, vec![1, 2], 0),
        LogConfig {
            segment_bytes: 100,
            ..LogConfig::default()
        },
    )
    .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let leader_rm = manager(&dir.path().join("leader"), 1);
    leader_rm
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let leader = leader_rm.partition_of("t", 0).unwrap();
    for _ in 0..4 {
        leader.append(&batch(2)).unwrap();
    }
    while p.log.log_end_offset() < leader.log.log_end_offset() {
        let offset = p.log.log_end_offset();
        // One batch per append, so the follower's small segments roll.
        let bytes = leader.read_for_replica(offset, 1, true).unwrap().records;
        p.append_as_follower(&bytes).unwrap();
    }
    let segments_before = p.log.segment_base_offsets().len();
    assert!(segments_before > 1, "small segments roll");
    p.update_follower_log_start_offset(5).unwrap();
    assert_eq!(p.log.log_start_offset(), 5);
    assert!(p.log.segment_base_offsets().len() < segments_before);
    assert!(p.high_watermark() >= 5);
    // Never backwards, and never past its own log end.
    p.update_follower_log_start_offset(2).unwrap();
    assert_eq!(p.log.log_start_offset(), 5);
    p.update_follower_log_start_offset(100).unwrap();
    assert_eq!(p.log.log_start_offset(), 8);
    // The leader deleted past this replica's end: restart the log there.
    p.truncate_fully_and_start_at(5).unwrap();
    let offsets = |p: &Partition| {
        (
            p.log.log_start_offset(),
            p.log.log_end_offset(),
            p.high_watermark(),
        )
    };
    assert_eq!(offsets(&p), (5, 5, 5));
    // The leader's start (5) fell inside its batch of offsets 4..=7: the empty follower log
    // restarts at that batch's base, then moves its start up with the leader's.
    let other = manager(&dir.path().join("leader4"), 1);
    other
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let l4 = other.partition_of("t", 0).unwrap();
    l4.log.truncate_fully_and_start_at(4).unwrap();
    l4.append(&one_batch(4)).unwrap();
    let straddling = l4.read_for_replica(4, 1, true).unwrap().records;
    assert_eq!(super::first_batch_range(&straddling), Some((4, 7)));
    p.append_as_follower(&straddling).unwrap();
    assert_eq!((p.log.log_start_offset(), p.log.log_end_offset()), (4, 8));
    p.update_follower_log_start_offset(5).unwrap();
    assert_eq!(p.log.log_start_offset(), 5);
}

#[test]
fn high_watermark_survives_a_restart_through_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    {
        let rm = manager(&dir.path().join("f"), 2);
        let leader_rm = manager(&dir.path().join("leader"), 1);
        leader_rm
            .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
            .unwrap();
        rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
            .unwrap();
        let leader = leader_rm.partition_of("t", 0).unwrap();
        leader.append(&batch(6)).unwrap();
        let p = rm.partition_of("t", 0).unwrap();
        p.append_as_follower(&leader.read_for_replica(0, 1 << 20, true).unwrap().records)
            .unwrap();
        p.update_follower_high_watermark(4);
        rm.shutdown().unwrap();
    }
    let rm = manager(&dir.path().join("f"), 2);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    assert_eq!(p.log.log_end_offset(), 6);
    assert_eq!(
        p.high_watermark(),
        4,
        "neither 0 nor the follower's log end offset"
    );
    assert!(!p.read(0, 1 << 20, true).unwrap().records.is_empty());
}

#[test]
fn without_a_checkpoint_a_follower_starts_at_its_log_start_and_a_sole_leader_at_its_end() {
    let dir = tempfile::tempdir().unwrap();
    {
        let rm = manager(dir.path(), 1);
        rm.ensure_topic(&topic(1, vec![1], 0), LogConfig::default())
            .unwrap();
        rm.partition_of("t", 0).unwrap().append(&batch(3)).unwrap();
        // A crash: no shutdown, no checkpoint.
    }
    let follower = manager(dir.path(), 2);
    follower
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    assert_eq!(follower.partition_of("t", 0).unwrap().high_watermark(), 0);
    drop(follower);
    let leader = manager(dir.path(), 1);
    leader
        .ensure_topic(&topic(1, vec![1], 0), LogConfig::default())
        .unwrap();
    assert_eq!(leader.partition_of("t", 0).unwrap().high_watermark(), 3);
}

#[test]
fn under_replicated_counts_partitions_led_here_with_a_short_isr() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2, 3], 0), LogConfig::default())
        .unwrap();
    assert_eq!(rm.under_replicated_count(), 0);
    rm.ensure_topic(&topic(1, vec![1, 3], 1), LogConfig::default())
        .unwrap();
    assert_eq!(rm.under_replicated_count(), 1);
    // Led elsewhere: that leader reports it.
    rm.ensure_topic(&topic(2, vec![2], 2), LogConfig::default())
        .unwrap();
    assert_eq!(rm.under_replicated_count(), 0);
}

/// The loss a randomized fault run found: records appended by leader 1 at epoch 0 wait for the
/// ISR; leadership moves to 2 (epoch 1), which lacks them; 1 truncates and follows 2, whose
/// high watermark passes the records' offsets over other records. A purgatory that compared
/// offsets alone acknowledged records no replica holds any more.
#[test]
fn records_of_a_lost_leadership_are_never_committed_by_a_later_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 1), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch(2, 3);
    assert_eq!(p.commit_status(0, 3), CommitStatus::Committed);
    p.append(&batch(2)).unwrap();
    assert_eq!(p.commit_status(0, 5), CommitStatus::Pending);

    // Broker 2 leads at epoch 1 with offsets 0..3 only.
    let mut moved = topic(2, vec![1, 2], 2);
    moved.partitions[0].leader_epoch = 1;
    rm.ensure_topic(&moved, LogConfig::default()).unwrap();
    assert_eq!(p.commit_status(0, 5), CommitStatus::LeadershipLost);
    p.truncate_to(3).unwrap();
    // The new leader's records at 3..7 (the base offset is outside the batch CRC).
    let mut theirs = BytesMut::from(&one_batch(4)[..]);
    theirs[..8].copy_from_slice(&3i64.to_be_bytes());
    p.append_as_follower(&theirs).unwrap();
    p.update_follower_high_watermark(7);
    assert_eq!(p.high_watermark(), 7, "the new leader's high watermark");
    assert_eq!(
        p.commit_status(0, 5),
        CommitStatus::LeadershipLost,
        "offsets 3 and 4 now hold the new leader's records"
    );

    // Leading again, at a later epoch, does not revive the old wait either.
    let mut back = topic(1, vec![1, 2], 3);
    back.partitions[0].leader_epoch = 2;
    rm.ensure_topic(&back, LogConfig::default()).unwrap();
    assert_eq!(p.commit_status(0, 5), CommitStatus::LeadershipLost);
    // And a follower's high watermark that arrives late does not touch the leader's.
    let hw = p.high_watermark();
    p.update_follower_high_watermark(hw + 100);
    assert_eq!(p.high_watermark(), hw);
}

#[test]
fn a_fetch_offset_past_the_leaders_log_end_is_not_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    p.append(&batch(3)).unwrap();
    p.record_follower_fetch(2, 9);
    assert_eq!(p.high_watermark(), 0);
    p.append(&batch(7)).unwrap();
    assert_eq!(
        p.high_watermark(),
        0,
        "offset 9 was never a position on this log: records 3..10 are not on follower 2"
    );
    p.record_follower_fetch(2, 10);
    assert_eq!(p.high_watermark(), 10);
}

/// A fetch response overlapping what the follower already holds (the remote WAL appended the
/// same records while the response was on its way) appends only what continues the log, and a
/// partial batch at its end is left for the next fetch.
#[test]
fn a_fetched_response_appends_only_the_whole_batches_past_the_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let leader_rm = manager(&dir.path().join("a"), 1);
    let follower_rm = manager(&dir.path().join("b"), 2);
    leader_rm
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    follower_rm
        .ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let leader = leader_rm.partition_of("t", 0).unwrap();
    let follower = follower_rm.partition_of("t", 0).unwrap();
    leader.append(&one_batch(2)).unwrap();
    let first = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    leader.append(&one_batch(3)).unwrap();
    let both = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    follower.append_as_follower(&first).unwrap();

    let mut response = BytesMut::from(&both[..]);
    response.extend_from_slice(&both[..20]); // a partial batch
    assert_eq!(
        follower.append_fetched(0, &response).unwrap(),
        (both.len() - first.len()) as u64
    );
    assert_eq!(follower.log.log_end_offset(), 5);
    // Nothing new: nothing appended, no error.
    assert_eq!(follower.append_fetched(0, &both).unwrap(), 0);
    assert_eq!(follower.log.log_end_offset(), 5);
}

/// A read joins segments when the first one ends before `max_bytes`, and otherwise stops at
/// the last whole batch that fits: either way the bytes are the log's batches in order.
#[test]
fn a_read_spans_segments_and_stops_at_the_last_whole_batch_that_fits() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(
        &topic(1, vec![1], 0),
        LogConfig {
            segment_bytes: 400,
            ..LogConfig::default()
        },
    )
    .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let mut batches = Vec::new();
    for _ in 0..12 {
        let b = batch(1);
        p.append(&b).unwrap();
        batches.push(b);
    }
    assert!(
        p.log.segment_base_offsets().len() > 2,
        "small segments roll"
    );
    let size = batches[0].len();
    assert!(batches.iter().all(|b| b.len() == size));
    for offset in [0i64, 3, 7] {
        for max in [size, size + 1, 2 * size - 1, 3 * size + 5, 100 * size] {
            let read = p.read_for_replica(offset, max, true).unwrap().records;
            let fit = (max / size).max(1).min(12 - offset as usize);
            let want: Vec<u8> = batches[offset as usize..offset as usize + fit]
                .iter()
                .flat_map(|b| b.iter().copied())
                .collect();
            // Base offsets differ from the test's batches (assigned by the log): compare
            // lengths and offsets.
            assert_eq!(read.len(), want.len(), "offset {offset}, max {max}");
            let offsets: Vec<i64> = whole_batches(&read).map(|b| b.base_offset).collect();
            let expected: Vec<i64> = (offset..offset + fit as i64).collect();
            assert_eq!(offsets, expected, "offset {offset}, max {max}");
        }
    }
}

/// A topic `name` of `partitions` partitions, all led by broker 1 alone.
fn topic_of(name: &str, id: u128, partitions: usize) -> TopicImage {
    let mut image = ferry_test_support::Topic::default()
        .id(id)
        .replicas(&[1])
        .leader(1, 0)
        .image();
    image.name = name.into();
    image.partitions = vec![image.partitions[0].clone(); partitions];
    image
}

#[test]
fn open_topics_registers_every_partition_but_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let topics: Vec<TopicImage> = (0..4)
        .map(|t| topic_of(&format!("t{t}"), 100 + t as u128, 5))
        .collect();
    {
        let rm = manager(dir.path(), 1);
        for t in &topics {
            rm.ensure_topic(t, LogConfig::default()).unwrap();
            for p in 0..5 {
                let part = rm.partition_of(&t.name, p).unwrap();
                part.append(&batch(p as usize + 1)).unwrap();
            }
        }
        // No shutdown: the logs are recovered on the next open.
    }
    let segment = dir.path().join("t2-3").join("00000000000000000000.log");
    std::fs::remove_file(&segment).unwrap();
    std::fs::create_dir(&segment).unwrap();
    let rm = manager(dir.path(), 1);
    let wanted: Vec<(&TopicImage, LogConfig)> =
        topics.iter().map(|t| (t, LogConfig::default())).collect();
    let errors = rm.open_topics(&wanted, 3);
    assert_eq!(
        errors.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        vec!["t2"]
    );
    for t in &topics {
        for p in 0..5 {
            let part = rm.partition_of(&t.name, p);
            if t.name == "t2" && p == 3 {
                assert!(part.is_none());
                continue;
            }
            let part = part.unwrap();
            assert!(part.is_leader());
            assert_eq!(
                part.log.log_end_offset(),
                i64::from(p) + 1,
                "{}-{p}",
                t.name
            );
        }
    }
    // A later image retries the damaged partition alone, and still fails it.
    assert!(rm.ensure_topic(&topics[2], LogConfig::default()).is_err());
    assert!(rm.partition_of("t2", 4).is_some());
}

#[test]
fn a_failed_log_dir_takes_its_partitions_offline_and_the_other_dir_keeps_serving() {
    let root = tempfile::tempdir().unwrap();
    let dirs = vec![root.path().join("a"), root.path().join("b")];
    let logs = LogManager::open(dirs, ferry_common::system_clock()).unwrap();
    let rm = ReplicaManager::new(logs, 1);
    let mut t = topic(1, vec![1, 2, 3], 0);
    t.partitions.push(t.partitions[0].clone());
    rm.ensure_topic(&t, LogConfig::default()).unwrap();
    let (p0, p1) = (
        rm.partition_of("t", 0).unwrap(),
        rm.partition_of("t", 1).unwrap(),
    );
    assert_ne!(p0.log.dir().parent(), p1.log.dir().parent());
    p0.append(&batch(2)).unwrap();
    p1.append(&batch(2)).unwrap();

    // A full disk and a refused request are not failed disks.
    let full = LogError::Io(std::io::Error::from_raw_os_error(28));
    rm.failures().report(&p1.log, &full);
    rm.failures()
        .report(&p1.log, &LogError::MessageTooLarge { size: 2, max: 1 });
    assert!(rm.handle_log_dir_failures().is_empty());
    assert!(rm.partition_of("t", 1).is_some());

    // A real I/O error of the log (its directory is gone) is reported by the partition.
    let mut waiter = p1.subscribe();
    std::fs::remove_dir_all(p1.log.dir()).unwrap();
    let err = p1.truncate_fully_and_start_at(10).unwrap_err();
    assert_eq!(err.kind(), ferry_log::ErrorKind::Storage, "{err}");
    let failed = rm.handle_log_dir_failures();
    assert_eq!(failed, vec![p1.log.dir().parent().unwrap().to_path_buf()]);
    assert!(rm.partition_of("t", 1).is_none());
    let tp1 = TopicPartition::new("t", 1);
    assert!(rm.is_offline(&tp1));
    assert_eq!(*waiter.borrow_and_update(), -1, "waiters are woken");
    assert_eq!(
        rm.offline_replicas(),
        vec![OfflineReplica {
            topic_id: t.id,
            partition: 1
        }]
    );
    assert_eq!(rm.logs().offline_dirs().len(), 1);

    // Reported again, nothing new; the next image does not bring it back (not even in the
    // other dir); the other dir keeps serving.
    let eio = LogError::Io(std::io::Error::from_raw_os_error(5));
    rm.failures().report(&p1.log, &eio);
    assert!(rm.handle_log_dir_failures().is_empty());
    assert!(rm
        .ensure_topic(&t, LogConfig::default())
        .unwrap()
        .is_empty());
    assert!(rm.partition_of("t", 1).is_none());
    p0.append(&batch(1)).unwrap();
    assert_eq!(p0.log.log_end_offset(), 3);

    // A deleted topic's offline replicas are no longer reported.
    rm.apply_image(&Image::default(), |_| LogConfig::default());
    assert!(rm.offline_replicas().is_empty());
}

#[test]
fn at_start_up_with_a_failed_dir_partitions_found_nowhere_are_offline_not_created_empty() {
    let root = tempfile::tempdir().unwrap();
    let good = root.path().join("good");
    let mut t = topic(1, vec![1, 2, 3], 0);
    t.partitions.push(t.partitions[0].clone());
    {
        let logs = LogManager::open(vec![good.clone()], ferry_common::system_clock()).unwrap();
        let rm = ReplicaManager::new(logs, 1);
        rm.ensure_topic(&t, LogConfig::default()).unwrap();
        rm.partition_of("t", 0).unwrap().append(&batch(2)).unwrap();
        rm.shutdown().unwrap();
    }
    // Partition 1 was on the disk that failed: its dir cannot even be created now.
    std::fs::remove_dir_all(good.join("t-1")).unwrap();
    let bad = root.path().join("bad");
    std::fs::write(&bad, "a file where the dir should be").unwrap();
    let logs = LogManager::open(vec![good, bad], ferry_common::system_clock()).unwrap();
    let rm = ReplicaManager::new(logs, 1);
    assert!(rm.open_topics(&[(&t, LogConfig::default())], 2).is_empty());
    assert_eq!(rm.partition_of("t", 0).unwrap().log.log_end_offset(), 2);
    assert!(rm.partition_of("t", 1).is_none());
    assert!(rm.is_offline(&TopicPartition::new("t", 1)));
    assert_eq!(rm.offline_replicas().len(), 1);
    // Later images do not create it either; a partition assigned later is new and is created.
    assert!(rm
        .ensure_topic(&t, LogConfig::default())
        .unwrap()
        .is_empty());
    assert!(rm.partition_of("t", 1).is_none());
    let mut other = topic(1, vec![1, 2, 3], 0);
    other.name = "u".into();
    other.id = Uuid::from_u128(8);
    rm.ensure_topic(&other, LogConfig::default()).unwrap();
    assert!(rm.partition_of("u", 0).is_some());
}

/// Kafka's `makeLeader`: an elected leader records where its epoch starts (its log end) in the
/// leader epoch cache and its checkpoint file, so the epoch's first produce writes no file.
#[test]
fn an_elected_leader_checkpoints_the_start_of_its_epoch_before_any_produce() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, follower_rm, leader, follower) = leader_and_follower(dir.path());
    assert_eq!(leader.log.epoch_entries(), vec![(0, 0)], "on election");
    leader.append(&batch(4)).unwrap();
    assert_eq!(leader.log.epoch_entries(), vec![(0, 0)]);
    assert!(
        follower.log.epoch_entries().is_empty(),
        "a follower assigns none"
    );
    let bytes = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    follower.append_as_follower(&bytes).unwrap();
    assert_eq!(follower.log.epoch_entries(), vec![(0, 0)]);

    // Broker 2 is elected at epoch 1 while its log ends at 4.
    elect_broker_2(&follower_rm);
    assert_eq!(follower.log.epoch_entries(), vec![(0, 0), (1, 4)]);
    let on_disk =
        std::fs::read_to_string(dir.path().join("b/t-0/leader-epoch-checkpoint")).unwrap();
    assert_eq!(
        on_disk.lines().collect::<Vec<_>>(),
        ["0", "2", "0 0", "1 4"]
    );
    // The same image again changes nothing.
    elect_broker_2(&follower_rm);
    assert_eq!(follower.log.epoch_entries(), vec![(0, 0), (1, 4)]);
}

/// A leader deposed before it appended anything in its epoch keeps that epoch's start (its log
/// end) in its cache. The next leader never heard of that epoch, so the follower's first fetch
/// diverges at the follower's own log end: the truncation there drops no batch but must drop
/// the epoch, or every later fetch names it again and diverges at the same offset, for ever
/// (seen in a fault run: a follower out of the ISR for minutes, truncating 25 times a second).
#[test]
fn a_leader_deposed_before_appending_follows_the_next_one_after_one_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let (leader_rm, follower_rm, leader, follower) = leader_and_follower(dir.path());
    leader.append(&batch(4)).unwrap();
    let bytes = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    follower.append_as_follower(&bytes).unwrap();
    // Broker 2 is elected at epoch 1 and deposed before any produce: broker 1 leads epoch 2.
    elect_broker_2(&follower_rm);
    assert_eq!(follower.log.epoch_entries(), vec![(0, 0), (1, 4)]);
    let broker_1_again = ferry_test_support::Topic::default()
        .leader(1, 2)
        .isr(&[1, 2])
        .partition_epoch(2)
        .image();
    leader_rm
        .ensure_topic(&broker_1_again, LogConfig::default())
        .unwrap();
    follower_rm
        .ensure_topic(&broker_1_again, LogConfig::default())
        .unwrap();
    assert_eq!(follower.role(), Role::Follower { leader: 1 });
    assert_eq!(leader.log.epoch_entries(), vec![(0, 0), (2, 4)]);

    // The follower's fetch: from its log end, with the last epoch in its cache.
    let fetch = |p: &Partition| {
        let last_epoch = p.log.epoch_entries().last().map_or(-1, |e| e.0);
        (last_epoch, p.log.log_end_offset())
    };
    let (epoch, offset) = fetch(&follower);
    assert_eq!((epoch, offset), (1, 4));
    let (diverging_epoch, end) = leader
        .diverging_epoch(epoch, offset)
        .expect("epoch 1 is unknown to the leader");
    follower
        .truncate_to(follower.truncation_target(diverging_epoch, end))
        .unwrap();
    assert_eq!(follower.log.log_end_offset(), 4, "no batch dropped");
    let (epoch, offset) = fetch(&follower);
    assert_eq!(
        leader.diverging_epoch(epoch, offset),
        None,
        "the next fetch matches the leader's log"
    );
}

/// The checkpoints of a new topic's partitions are written by several threads: each of them
/// gets its own, whatever the number of partitions.
#[test]
fn every_partition_of_a_new_topic_led_here_gets_its_epoch_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    let mut image = topic(1, vec![1, 2, 3], 0);
    image.partitions = vec![image.partitions[0].clone(); 20];
    image.partitions[7].leader = 2;
    rm.ensure_topic(&image, LogConfig::default()).unwrap();
    for p in 0..20 {
        let partition = rm.partition_of("t", p).unwrap();
        let want: &[(i32, i64)] = if p == 7 { &[] } else { &[(0, 0)] };
        assert_eq!(partition.log.epoch_entries(), want, "partition {p}");
        let file = dir.path().join(format!("t-{p}/leader-epoch-checkpoint"));
        assert_eq!(file.exists(), p != 7, "partition {p}");
    }
}

/// A fetch response from the previous leader that arrives after this broker was elected is not
/// appended: the new epoch was checkpointed at the log end as it was then.
#[test]
fn a_fetched_response_arriving_after_the_election_is_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, follower_rm, leader, follower) = leader_and_follower(dir.path());
    leader.append(&batch(4)).unwrap();
    let late = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    elect_broker_2(&follower_rm);
    assert_eq!(follower.append_fetched(0, &late).unwrap(), 0);
    assert!(follower.append_as_follower_at(0, &[&late]).is_err());
    assert_eq!(follower.log.log_end_offset(), 0);
    assert_eq!(follower.log.epoch_entries(), vec![(1, 0)]);
}

/// A role change waits for a leader append in progress, its hand-off included (Kafka's
/// `leaderIsrUpdateLock`). A leader demoted between its append and the hand-off gave the remote
/// WAL a batch stamped at the old epoch as one of the new epoch, and the new epoch's followers
/// appended the old leader's uncommitted batch (replicas of a randomized fault run differed).
#[test]
fn a_role_change_waits_for_a_leader_append_and_its_hand_off() {
    let dir = tempfile::tempdir().unwrap();
    let rm = manager(dir.path(), 1);
    rm.ensure_topic(&topic(1, vec![1, 2], 0), LogConfig::default())
        .unwrap();
    let p = rm.partition_of("t", 0).unwrap();
    let demoted = ferry_test_support::Topic::default()
        .leader(2, 1)
        .isr(&[1, 2])
        .partition_epoch(1)
        .image();
    std::thread::scope(|s| {
        let mut demotion = None;
        let info = p
            .append_then(&batch(1), |p, info| {
                demotion = Some(s.spawn(|| rm.ensure_topic(&demoted, LogConfig::default())));
                // Time for the demotion to run, were it not held back until this returns.
                std::thread::sleep(std::time::Duration::from_millis(200));
                assert!(p.is_leader(), "demoted in the middle of its own append");
                assert_eq!(p.leader_epoch(), info.leader_epoch);
            })
            .unwrap();
        assert_eq!(info.leader_epoch, 0);
        demotion
            .expect("started")
            .join()
            .expect("demotion thread")
            .unwrap();
    });
    assert!(!p.is_leader());
    assert_eq!(p.leader_epoch(), 1);
}

/// A remote-WAL slice whose first batch has an older leader epoch than the follower's log ends
/// with is an old leader's batch the current one does not have: refused (the classic fetch
/// takes the range), while the current epoch's batch at the same offset is appended.
#[test]
fn a_wal_slice_of_an_older_epoch_than_the_log_end_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, _follower_rm, old_leader, follower) = leader_and_follower(dir.path());
    old_leader.append(&batch(2)).unwrap();
    let old_at_1 = old_leader
        .read_for_replica(1, 1 << 20, true)
        .unwrap()
        .records;

    let new_rm = manager(&dir.path().join("c"), 1);
    new_rm
        .ensure_topic(&broker_1_at_epoch_1(), LogConfig::default())
        .unwrap();
    let new_leader = new_rm.partition_of("t", 0).unwrap();
    new_leader.append(&batch(2)).unwrap();
    let new_at_0 = new_leader.read_for_replica(0, 1, true).unwrap().records;
    let new_at_1 = new_leader
        .read_for_replica(1, 1 << 20, true)
        .unwrap()
        .records;

    follower.set_validated_epoch(0);
    follower.append_as_follower_at(0, &[&new_at_0[..]]).unwrap();
    assert_eq!(follower.log.log_end_offset(), 1, "one batch per record");
    let refused = follower.append_as_follower_at(0, &[&old_at_1[..]]);
    assert!(refused.is_err(), "epoch 0 after epoch 1: {refused:?}");
    assert_eq!(follower.log.log_end_offset(), 1);
    follower.append_as_follower_at(0, &[&new_at_1[..]]).unwrap();
    assert_eq!(follower.log.log_end_offset(), 2);
}

/// A WAL slice planned at one epoch is not appended once the partition is at another: the new
/// epoch's truncation check may already have run without it.
#[test]
fn a_wal_slice_planned_at_an_older_epoch_is_refused_after_the_epoch_moves() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, follower_rm, leader, follower) = leader_and_follower(dir.path());
    leader.append(&batch(1)).unwrap();
    let slice = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    assert!(
        follower.append_as_follower_at(0, &[&slice]).is_err(),
        "not checked against the leader yet"
    );
    follower.set_validated_epoch(0);
    // Leader 1 again, at epoch 1: the follower has not checked its log against it.
    follower_rm
        .ensure_topic(&broker_1_at_epoch_1(), LogConfig::default())
        .unwrap();
    assert!(follower.append_as_follower_at(0, &[&slice]).is_err());
    follower.set_validated_epoch(1);
    assert!(
        follower.append_as_follower_at(0, &[&slice]).is_err(),
        "planned at epoch 0"
    );
    follower.append_as_follower_at(1, &[&slice]).unwrap();
    assert_eq!(follower.log.log_end_offset(), 1);
}

/// A fetch response of an epoch the follower has left is not appended: the new epoch's leader
/// may not have those records, and the follower may already have checked its log against it.
#[test]
fn a_fetched_response_of_an_epoch_left_behind_is_not_appended() {
    let dir = tempfile::tempdir().unwrap();
    let (_leader_rm, follower_rm, leader, follower) = leader_and_follower(dir.path());
    leader.append(&batch(2)).unwrap();
    let response = leader.read_for_replica(0, 1 << 20, true).unwrap().records;
    follower_rm
        .ensure_topic(&broker_1_at_epoch_1(), LogConfig::default())
        .unwrap();
    assert_eq!(follower.append_fetched(0, &response).unwrap(), 0);
    assert_eq!(follower.log.log_end_offset(), 0);
    assert!(follower.append_fetched(1, &response).unwrap() > 0);
    assert_eq!(follower.log.log_end_offset(), 2);
}
