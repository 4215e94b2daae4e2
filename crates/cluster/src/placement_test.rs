use std::collections::{BTreeMap, BTreeSet};

use super::*;

fn brokers(spec: &[(BrokerId, &str)]) -> Vec<PlacementBroker> {
    spec.iter()
        .map(|(id, rack)| PlacementBroker {
            id: *id,
            rack: Some(rack.to_string()),
        })
        .collect()
}

fn rack_map(b: &[PlacementBroker]) -> BTreeMap<BrokerId, String> {
    b.iter()
        .map(|b| (b.id, b.rack.clone().unwrap_or_default()))
        .collect()
}

fn racks_of(replicas: &[BrokerId], racks: &BTreeMap<BrokerId, String>) -> BTreeSet<String> {
    replicas.iter().map(|r| racks[r].clone()).collect()
}

fn assert_distinct_brokers(assignment: &[Vec<BrokerId>]) {
    for replicas in assignment {
        let set: BTreeSet<_> = replicas.iter().collect();
        assert_eq!(set.len(), replicas.len(), "{replicas:?} repeats a broker");
    }
}

fn count_by(assignment: &[Vec<BrokerId>], leaders_only: bool) -> BTreeMap<BrokerId, usize> {
    let mut counts = BTreeMap::new();
    for replicas in assignment {
        let take = if leaders_only { 1 } else { replicas.len() };
        for r in &replicas[..take] {
            *counts.entry(*r).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn three_racks_one_broker_each_puts_every_partition_on_all_racks() {
    let b = brokers(&[(1, "az1"), (2, "az2"), (3, "az3")]);
    let racks = rack_map(&b);
    for start in 0..3 {
        let a = assign_replicas(&b, 6, 3, 0, start).unwrap();
        assert_distinct_brokers(&a);
        for replicas in &a {
            assert_eq!(racks_of(replicas, &racks).len(), 3);
        }
        assert_eq!(
            count_by(&a, true).values().collect::<Vec<_>>(),
            vec![&2, &2, &2]
        );
    }
}

#[test]
fn six_brokers_over_three_racks_spread_replicas_and_leaders_evenly() {
    let b = brokers(&[
        (1, "az1"),
        (2, "az2"),
        (3, "az3"),
        (4, "az1"),
        (5, "az2"),
        (6, "az3"),
    ]);
    let racks = rack_map(&b);
    let a = assign_replicas(&b, 12, 3, 0, 4).unwrap();
    assert_distinct_brokers(&a);
    for replicas in &a {
        assert_eq!(racks_of(replicas, &racks).len(), 3, "{replicas:?}");
    }
    let leaders = count_by(&a, true);
    assert_eq!(leaders.len(), 6);
    assert!(leaders.values().all(|c| *c == 2), "leaders {leaders:?}");
    let replicas = count_by(&a, false);
    assert!(replicas.values().all(|c| *c == 6), "replicas {replicas:?}");
}

#[test]
fn fewer_racks_than_replication_factor_still_uses_every_rack() {
    let b = brokers(&[(1, "az1"), (2, "az2"), (3, "az1"), (4, "az2")]);
    let racks = rack_map(&b);
    let a = assign_replicas(&b, 8, 3, 0, 1).unwrap();
    assert_distinct_brokers(&a);
    for replicas in &a {
        assert_eq!(replicas.len(), 3);
        assert_eq!(racks_of(replicas, &racks).len(), 2);
    }
    assert!(count_by(&a, true).values().all(|c| *c == 2));
}

#[test]
fn unbalanced_racks_keep_replicas_on_distinct_racks() {
    let b = brokers(&[(1, "az1"), (2, "az1"), (3, "az1"), (4, "az2"), (5, "az3")]);
    let racks = rack_map(&b);
    let a = assign_replicas(&b, 10, 3, 0, 0).unwrap();
    assert_distinct_brokers(&a);
    for replicas in &a {
        assert_eq!(racks_of(replicas, &racks).len(), 3, "{replicas:?}");
    }
    // Every broker leads some partition.
    assert_eq!(count_by(&a, true).len(), 5);
}

#[test]
fn added_partitions_continue_the_rotation() {
    let b = brokers(&[(1, "az1"), (2, "az2"), (3, "az3")]);
    let all = assign_replicas(&b, 6, 2, 0, 0).unwrap();
    let head = assign_replicas(&b, 4, 2, 0, 0).unwrap();
    let tail = assign_replicas(&b, 2, 2, 4, 0).unwrap();
    assert_eq!([head, tail].concat(), all);
}

#[test]
fn brokers_without_racks_are_placed_rack_unaware() {
    let b: Vec<PlacementBroker> = (1..=4)
        .map(|id| PlacementBroker { id, rack: None })
        .collect();
    let a = assign_replicas(&b, 8, 2, 0, 0).unwrap();
    assert_distinct_brokers(&a);
    assert!(count_by(&a, true).values().all(|c| *c == 2));
    assert!(count_by(&a, false).values().all(|c| *c == 4));
}

#[test]
fn invalid_requests_are_errors() {
    let b = brokers(&[(1, "az1"), (2, "az2")]);
    assert_eq!(
        assign_replicas(&b, 1, 3, 0, 0),
        Err(PlacementError::NotEnoughBrokers {
            replication_factor: 3,
            brokers: 2
        })
    );
    assert!(assign_replicas(&b, 1, 0, 0, 0).is_err());
    assert!(assign_replicas(&b, -1, 1, 0, 0).is_err());
    assert!(assign_replicas(&[], 1, 1, 0, 0).is_err());
    // A broker listed twice counts once.
    let twice = brokers(&[(1, "az1"), (1, "az1")]);
    assert!(assign_replicas(&twice, 1, 2, 0, 0).is_err());
    assert_eq!(assign_replicas(&b, 0, 1, 0, 0), Ok(vec![]));
}
