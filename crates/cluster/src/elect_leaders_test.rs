use super::*;
use crate::election::{fence_broker, unfence_broker};
use crate::image::tests::{register, three_brokers_one_topic};
use crate::image::BrokerId;
use uuid::Uuid;

fn apply(image: &mut Image, records: &[MetadataRecord]) {
    for r in records {
        image
            .apply(r)
            .unwrap_or_else(|e| panic!("{r:?} rejected: {e}"));
    }
}

fn part(image: &Image, id: Uuid) -> PartitionState {
    image.partition(id, 0).unwrap().clone()
}

/// Fences `broker` (what a session expiry proposes).
fn fence(image: &mut Image, broker: BrokerId) {
    let records = fence_broker(image, broker, false);
    apply(image, &records);
}

/// Unfences `broker` and puts it back in the ISR (it caught up with the leader).
fn rejoin(image: &mut Image, id: Uuid, broker: BrokerId) {
    let records = unfence_broker(image, broker, false);
    apply(image, &records);
    let p = part(image, id);
    let mut isr = p.isr.clone();
    isr.push(broker);
    apply(
        image,
        &[MetadataRecord::AlterPartition {
            topic_id: id,
            partition: 0,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            isr,
            partition_epoch: p.partition_epoch + 1,
            unclean: false,
        }],
    );
}

#[test]
fn the_wire_election_types_are_kafkas() {
    assert_eq!(ElectionType::from_wire(0), Some(ElectionType::Preferred));
    assert_eq!(ElectionType::from_wire(1), Some(ElectionType::Unclean));
    assert_eq!(ElectionType::from_wire(2), None);
    assert_eq!(ElectionType::from_wire(-1), None);
}

#[test]
fn preferred_election_moves_leadership_back_with_a_new_leader_epoch() {
    let (mut image, id) = three_brokers_one_topic();
    fence(&mut image, 1);
    assert_eq!(part(&image, id).leader, 2);
    rejoin(&mut image, id, 1);
    let before = part(&image, id);
    assert_eq!(
        before.leader, 2,
        "the preferred replica is back in sync but not leading"
    );

    let record = elect(&image, "t", 0, ElectionType::Preferred).unwrap();
    apply(&mut image, &[record]);
    let after = part(&image, id);
    assert_eq!(after.leader, 1);
    assert_eq!(after.isr, before.isr, "a preferred election keeps the ISR");
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    assert_eq!(after.partition_epoch, before.partition_epoch + 1);
}

#[test]
fn preferred_election_is_not_needed_when_the_preferred_replica_leads() {
    let (image, _) = three_brokers_one_topic();
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Preferred),
        Err(ElectionRefused::NotNeeded)
    );
}

#[test]
fn preferred_leader_not_available_when_dead_or_out_of_sync() {
    let (mut image, id) = three_brokers_one_topic();
    fence(&mut image, 1);
    // Dead (fenced), and out of the ISR.
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Preferred),
        Err(ElectionRefused::PreferredLeaderNotAvailable)
    );
    // Live again but not yet back in the ISR.
    let records = unfence_broker(&image, 1, false);
    apply(&mut image, &records);
    assert!(image.is_live(1) && !part(&image, id).isr.contains(&1));
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Preferred),
        Err(ElectionRefused::PreferredLeaderNotAvailable)
    );
}

#[test]
fn preferred_election_of_a_leaderless_partition_without_live_in_sync_replica_is_refused() {
    let (mut image, id) = three_brokers_one_topic();
    for b in [2, 3, 1] {
        fence(&mut image, b);
    }
    assert_eq!(part(&image, id).leader, NO_LEADER);
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Preferred),
        Err(ElectionRefused::PreferredLeaderNotAvailable)
    );
}

#[test]
fn unclean_election_is_not_needed_while_the_partition_has_a_leader() {
    let (mut image, _) = three_brokers_one_topic();
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Unclean),
        Err(ElectionRefused::NotNeeded)
    );
    fence(&mut image, 1);
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Unclean),
        Err(ElectionRefused::NotNeeded)
    );
}

#[test]
fn unclean_election_elects_a_live_replica_outside_the_isr_and_makes_it_the_isr() {
    let (mut image, id) = three_brokers_one_topic();
    // 2 and 3 drop out, then the last in-sync replica (1) dies: no leader, ISR [1].
    for b in [2, 3, 1] {
        fence(&mut image, b);
    }
    let records = unfence_broker(&image, 3, false);
    apply(&mut image, &records);
    let before = part(&image, id);
    assert_eq!((before.leader, before.isr.clone()), (NO_LEADER, vec![1]));
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Preferred),
        Err(ElectionRefused::PreferredLeaderNotAvailable)
    );

    let record = elect(&image, "t", 0, ElectionType::Unclean).unwrap();
    assert!(matches!(
        record,
        MetadataRecord::AlterPartition { unclean: true, .. }
    ));
    apply(&mut image, &[record]);
    let after = part(&image, id);
    assert_eq!((after.leader, after.isr.clone()), (3, vec![3]));
    assert_eq!(after.leader_epoch, before.leader_epoch + 1);
    assert_eq!(after.partition_epoch, before.partition_epoch + 1);
    // It leads now: another unclean election is not needed.
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Unclean),
        Err(ElectionRefused::NotNeeded)
    );
}

#[test]
fn unclean_election_prefers_a_live_in_sync_replica() {
    let (mut image, id) = three_brokers_one_topic();
    for b in [2, 3, 1] {
        fence(&mut image, b);
    }
    // The last in-sync replica is registered and unfenced, but no record elected it yet (the
    // unfence's election was rejected, say): the unclean election finds it, cleanly.
    image
        .apply(&MetadataRecord::UnfenceBroker { id: 1 })
        .unwrap();
    let record = elect(&image, "t", 0, ElectionType::Unclean).unwrap();
    assert!(matches!(
        record,
        MetadataRecord::AlterPartition { unclean: false, .. }
    ));
    apply(&mut image, &[record]);
    assert_eq!(part(&image, id).leader, 1);
}

#[test]
fn eligible_leaders_not_available_when_no_replica_is_live() {
    let (mut image, _) = three_brokers_one_topic();
    for b in [2, 3, 1] {
        fence(&mut image, b);
    }
    assert_eq!(
        elect(&image, "t", 0, ElectionType::Unclean),
        Err(ElectionRefused::EligibleLeadersNotAvailable)
    );
}

#[test]
fn unknown_topics_and_partitions_are_refused() {
    let (image, _) = three_brokers_one_topic();
    for kind in [ElectionType::Preferred, ElectionType::Unclean] {
        assert_eq!(
            elect(&image, "nope", 0, kind),
            Err(ElectionRefused::UnknownTopicOrPartition)
        );
        for p in [1, -1] {
            assert_eq!(
                elect(&image, "t", p, kind),
                Err(ElectionRefused::UnknownTopicOrPartition)
            );
        }
    }
}

#[test]
fn all_partitions_lists_every_partition_by_topic_name() {
    let (mut image, _) = three_brokers_one_topic();
    register(&mut image, 4, "az1");
    image
        .apply(&MetadataRecord::CreateTopic {
            name: "a".into(),
            id: Uuid::from_u128(9),
            configs: Default::default(),
            assignments: vec![vec![1], vec![2], vec![3]],
        })
        .unwrap();
    assert_eq!(
        all_partitions(&image),
        vec![("a".to_string(), vec![0, 1, 2]), ("t".to_string(), vec![0])]
    );
}
