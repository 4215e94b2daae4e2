use std::collections::BTreeMap;

use super::*;
use crate::image::tests::{register, three_brokers_one_topic};

/// Applies `records` in order, asserting each is accepted: election output must always pass the
/// image's own validation.
fn apply_all(image: &mut Image, records: &[MetadataRecord]) {
    for r in records {
        image
            .apply(r)
            .unwrap_or_else(|e| panic!("{r:?} rejected: {e}"));
    }
}

fn part(image: &Image, id: Uuid) -> PartitionState {
    image.partition(id, 0).unwrap().clone()
}

#[test]
fn fencing_the_leader_elects_the_first_live_in_sync_replica() {
    let (mut image, id) = three_brokers_one_topic();
    let records = fence_broker(&image, 1, false);
    apply_all(&mut image, &records);
    let p = part(&image, id);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert!(image.brokers[&1].fenced);
}

#[test]
fn leader_epoch_increases_on_every_leader_change() {
    let (mut image, id) = three_brokers_one_topic();
    let mut epochs = vec![part(&image, id).leader_epoch];
    for broker in [1, 2] {
        let records = fence_broker(&image, broker, false);
        apply_all(&mut image, &records);
        epochs.push(part(&image, id).leader_epoch);
    }
    let records = unfence_broker(&image, 1, false);
    apply_all(&mut image, &records);
    // Broker 1 left the ISR when fenced: it does not lead again until it is back in sync.
    assert_eq!(part(&image, id).leader, 3);
    let p = part(&image, id);
    let rec = alter_isr(
        &image,
        &AlterIsrRequest {
            topic_id: id,
            partition: 0,
            leader: 3,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr: vec![3, 1],
        },
    )
    .unwrap();
    apply_all(&mut image, &[rec]);
    let records = restore_preferred_leaders(&image);
    apply_all(&mut image, &records);
    assert_eq!(part(&image, id).leader, 1);
    epochs.push(part(&image, id).leader_epoch);
    assert_eq!(epochs, vec![0, 1, 2, 3]);
}

#[test]
fn no_out_of_sync_leader_without_unclean_election() {
    let (mut image, id) = three_brokers_one_topic();
    for broker in [2, 3, 1] {
        let records = fence_broker(&image, broker, false);
        apply_all(&mut image, &records);
    }
    let p = part(&image, id);
    assert_eq!(p.leader, NO_LEADER);
    assert_eq!(p.isr, vec![1], "the last in-sync replica stays in the ISR");
    // Broker 2 returns, but it is out of sync: no leader.
    let records = unfence_broker(&image, 2, false);
    apply_all(&mut image, &records);
    assert_eq!(part(&image, id).leader, NO_LEADER);
    // The last in-sync replica returns: it leads, cleanly.
    let records = unfence_broker(&image, 1, false);
    apply_all(&mut image, &records);
    let p = part(&image, id);
    assert_eq!((p.leader, p.isr.clone()), (1, vec![1]));
}

#[test]
fn unclean_election_picks_a_live_replica_and_resets_the_isr() {
    let (mut image, id) = three_brokers_one_topic();
    for broker in [2, 3, 1] {
        let records = fence_broker(&image, broker, false);
        apply_all(&mut image, &records);
    }
    let records = unfence_broker(&image, 3, true);
    apply_all(&mut image, &records);
    let p = part(&image, id);
    assert_eq!((p.leader, p.isr.clone()), (3, vec![3]));
}

#[test]
fn topic_config_overrides_the_unclean_default() {
    let (mut image, id) = three_brokers_one_topic();
    let configs = BTreeMap::from([(UNCLEAN_LEADER_ELECTION.to_string(), "false".to_string())]);
    apply_all(
        &mut image,
        &[MetadataRecord::AlterConfigs {
            name: "t".into(),
            configs,
        }],
    );
    for broker in [2, 3, 1] {
        let records = fence_broker(&image, broker, true);
        apply_all(&mut image, &records);
    }
    let records = unfence_broker(&image, 3, true);
    apply_all(&mut image, &records);
    assert_eq!(part(&image, id).leader, NO_LEADER);
}

#[test]
fn fencing_a_follower_only_shrinks_the_isr() {
    let (mut image, id) = three_brokers_one_topic();
    let records = fence_broker(&image, 2, false);
    apply_all(&mut image, &records);
    let p = part(&image, id);
    assert_eq!(
        (p.leader, p.leader_epoch, p.isr.clone()),
        (1, 0, vec![1, 3])
    );
    assert_eq!(p.partition_epoch, 1);
}

#[test]
fn controlled_shutdown_moves_leadership_without_fencing() {
    let (mut image, id) = three_brokers_one_topic();
    let records = controlled_shutdown(&image, 1);
    apply_all(&mut image, &records);
    let p = part(&image, id);
    assert_eq!((p.leader, p.isr.clone()), (2, vec![2, 3]));
    assert!(!image.brokers[&1].fenced);
}

#[test]
fn controlled_shutdown_keeps_a_sole_in_sync_leader() {
    let (mut image, id) = three_brokers_one_topic();
    for broker in [2, 3] {
        let records = fence_broker(&image, broker, false);
        apply_all(&mut image, &records);
    }
    assert!(controlled_shutdown(&image, 1).is_empty());
    assert_eq!(part(&image, id).leader, 1);
}

#[test]
fn preferred_leader_is_restored_only_when_live_and_in_sync() {
    let (mut image, _id) = three_brokers_one_topic();
    let records = fence_broker(&image, 1, false);
    apply_all(&mut image, &records);
    assert!(restore_preferred_leaders(&image).is_empty(), "fenced");
    let records = unfence_broker(&image, 1, false);
    apply_all(&mut image, &records);
    assert!(restore_preferred_leaders(&image).is_empty(), "out of sync");
}

#[test]
fn isr_change_from_a_stale_leader_is_fenced() {
    let (mut image, id) = three_brokers_one_topic();
    let req = AlterIsrRequest {
        topic_id: id,
        partition: 0,
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        new_isr: vec![1, 2],
    };
    let rec = alter_isr(&image, &req).unwrap();
    apply_all(&mut image, &[rec]);
    // The same request again carries a stale partition epoch.
    assert_eq!(
        alter_isr(&image, &req),
        Err(AlterIsrError::InvalidUpdateVersion)
    );
    let records = controlled_shutdown(&image, 1);
    apply_all(&mut image, &records);
    let stale = AlterIsrRequest {
        partition_epoch: 1,
        ..req.clone()
    };
    assert_eq!(
        alter_isr(&image, &stale),
        Err(AlterIsrError::FencedLeaderEpoch)
    );
}

#[test]
fn isr_rejects_dropping_the_leader_and_adding_fenced_replicas() {
    let (mut image, id) = three_brokers_one_topic();
    let mut req = AlterIsrRequest {
        topic_id: id,
        partition: 0,
        leader: 1,
        leader_epoch: 0,
        partition_epoch: 0,
        new_isr: vec![2, 3],
    };
    assert!(matches!(
        alter_isr(&image, &req),
        Err(AlterIsrError::InvalidRequest(_))
    ));
    req.new_isr = vec![1];
    let records = [alter_isr(&image, &req).unwrap()];
    apply_all(&mut image, &records);
    apply_all(&mut image, &[MetadataRecord::FenceBroker { id: 2 }]);
    req.partition_epoch = 1;
    req.new_isr = vec![1, 2];
    assert_eq!(
        alter_isr(&image, &req),
        Err(AlterIsrError::IneligibleReplica(2))
    );
    register(&mut image, 2, "az2");
    let records = [alter_isr(&image, &req).unwrap()];
    apply_all(&mut image, &records);
    assert_eq!(part(&image, id).isr, vec![1, 2]);
}

#[test]
fn lagging_followers_leave_the_isr_but_the_leader_stays() {
    let caught_up = BTreeMap::from([(2, 1_000), (3, 9_500)]);
    assert_eq!(
        shrink_isr(&[1, 2, 3], 1, &caught_up, 10_000, 1_000),
        Some(vec![1, 3])
    );
    assert_eq!(shrink_isr(&[1, 3], 1, &caught_up, 10_000, 1_000), None);
    // A follower never heard from counts as lagging.
    assert_eq!(
        shrink_isr(&[1, 4], 1, &caught_up, 10_000, 1_000),
        Some(vec![1])
    );
}

#[test]
fn followers_rejoin_the_isr_once_caught_up_to_the_high_watermark() {
    assert_eq!(expand_isr(&[1], 2, 99, 100, 0), None);
    assert_eq!(expand_isr(&[1], 2, 100, 100, 120), None);
    assert_eq!(expand_isr(&[1], 2, 120, 100, 120), Some(vec![1, 2]));
    assert_eq!(expand_isr(&[1, 2], 2, 120, 100, 0), None);
}

/// Kafka's AlterPartitionManager: a change refused for its stale partition epoch is restated
/// once against the current state, or dropped when that state already has it or the
/// leadership moved.
#[test]
fn a_stale_isr_change_is_rebased_on_the_current_partition_state() {
    let state = |isr: Vec<BrokerId>, leader_epoch| PartitionState {
        replicas: vec![1, 2, 3],
        isr,
        leader: 1,
        leader_epoch,
        partition_epoch: 9,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    };
    // (current state, proposed from -> to, outcome)
    let cases: Vec<(PartitionState, Vec<BrokerId>, Vec<BrokerId>, Rebased)> = vec![
        // 3 joins; meanwhile 2 was fenced out of the ISR: 3 still joins.
        (
            state(vec![1], 0),
            vec![1, 2],
            vec![1, 2, 3],
            Rebased::Retry(vec![1, 3]),
        ),
        // Already in (an earlier duplicate of the same expansion was committed).
        (
            state(vec![1, 2, 3], 0),
            vec![1, 2],
            vec![1, 2, 3],
            Rebased::AlreadyDone,
        ),
        // 3 leaves; meanwhile 2 joined: 2 stays.
        (
            state(vec![1, 2, 3], 0),
            vec![1, 3],
            vec![1],
            Rebased::Retry(vec![1, 2]),
        ),
        // 3 leaves but is already out.
        (
            state(vec![1, 2], 0),
            vec![1, 2, 3],
            vec![1, 2],
            Rebased::AlreadyDone,
        ),
        // A new leader epoch: the proposal is not this leader's to make any more.
        (
            state(vec![1, 2], 1),
            vec![1, 2],
            vec![1, 2, 3],
            Rebased::Obsolete,
        ),
        // 4 is no longer a replica (reassigned away).
        (
            state(vec![1, 2], 0),
            vec![1, 2],
            vec![1, 2, 4],
            Rebased::Obsolete,
        ),
    ];
    for (st, from, to, want) in cases {
        assert_eq!(
            rebase_isr_change(&st, 1, 0, &from, &to),
            want,
            "{st:?}: {from:?} -> {to:?}"
        );
    }
    let mut moved = state(vec![1, 2], 0);
    moved.leader = 2;
    assert_eq!(
        rebase_isr_change(&moved, 1, 0, &[1, 2], &[1, 2, 3]),
        Rebased::Obsolete
    );
}
