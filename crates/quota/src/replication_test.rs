use super::*;

#[test]
fn a_broker_keeps_the_partitions_listed_with_its_id() {
    assert_eq!(throttled_partitions("*", 3), Some(ThrottledPartitions::All));
    assert_eq!(
        throttled_partitions("0:1, 0:2,1:2 ,2:3", 2),
        Some(ThrottledPartitions::Listed([0, 1].into_iter().collect()))
    );
    assert_eq!(throttled_partitions("0:1,1:1", 2), None);
    assert_eq!(throttled_partitions("", 2), None);
    assert_eq!(
        throttled_partitions("x:2,1:2", 2),
        Some(ThrottledPartitions::Listed([1].into_iter().collect()))
    );
}

fn quota(bound: i64) -> ReplicationQuota {
    let mut q = ReplicationQuota::new(RateConfig::new(11, 1000).unwrap());
    q.set_bound(bound);
    q.set_throttled([("t".to_string(), throttled_partitions("0:1", 1).unwrap())].into());
    q
}

#[test]
fn throttled_replicas_out_of_sync_are_held_back_once_the_rate_is_over_the_bound() {
    let mut q = quota(1_000);
    // Nothing recorded: under the bound.
    assert!(!q.holds_back("t", 0, false, 0));
    // 20 kB at once measures over the ten-second floor: 2 kB/s, over 1 kB/s.
    q.record(20_000, 0);
    assert!(q.holds_back("t", 0, false, 100));
    // In-sync replicas, other partitions and other topics are never held back.
    assert!(!q.holds_back("t", 0, true, 100));
    assert!(!q.holds_back("t", 1, false, 100));
    assert!(!q.holds_back("u", 0, false, 100));
    // Once the bytes age out of the windows, the rate falls back under the bound.
    assert!(!q.holds_back("t", 0, false, 30_000));
}

#[test]
fn kafkas_default_bound_means_no_throttle() {
    let mut q = quota(i64::MAX);
    q.record(u64::MAX / 2, 0);
    assert!(!q.holds_back("t", 0, false, 1));
    let mut q = quota(0);
    assert!(
        !q.holds_back("t", 0, false, 0),
        "nothing recorded yet: 0 is not over 0"
    );
    q.record(1, 0);
    assert!(q.holds_back("t", 0, false, 1));
}
