use super::*;
use crate::image::tests::register;
use crate::{Image, MetadataRecord};

fn state(replicas: &[BrokerId], isr: &[BrokerId], leader: BrokerId) -> PartitionState {
    PartitionState {
        replicas: replicas.to_vec(),
        isr: isr.to_vec(),
        leader,
        leader_epoch: 5,
        partition_epoch: 10,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

fn all_live(_: BrokerId) -> bool {
    true
}

#[test]
fn starting_puts_target_first_and_marks_adding_and_removing() {
    let next = start(&state(&[1, 2, 3], &[1, 2, 3], 1), &[4, 2, 5], all_live).unwrap();
    assert_eq!(next.replicas, vec![4, 2, 5, 1, 3]);
    assert_eq!(next.adding_replicas, vec![4, 5]);
    assert_eq!(next.removing_replicas, vec![1, 3]);
    assert_eq!(
        next.isr,
        vec![1, 2, 3],
        "the ISR is untouched until the new ones catch up"
    );
    assert_eq!(
        (next.leader, next.leader_epoch),
        (1, 5),
        "the leader stays meanwhile"
    );
    assert_eq!(next.partition_epoch, 11);
    assert_eq!(next.preferred_leader(), 4);
}

#[test]
fn completes_once_every_adding_replica_is_in_sync_and_moves_a_leaving_leader() {
    let moving = start(&state(&[1, 2, 3], &[1, 2, 3], 1), &[4, 2, 5], all_live).unwrap();
    // 4 caught up: not yet complete.
    let mut partial = moving.clone();
    partial.isr = vec![1, 2, 3, 4];
    let partial = complete_if_in_sync(partial, all_live);
    assert!(partial.is_reassigning());
    // 5 too: complete in the same change.
    let mut whole = partial.clone();
    whole.isr = vec![1, 2, 3, 4, 5];
    whole.partition_epoch += 1;
    let done = complete_if_in_sync(whole, all_live);
    assert!(!done.is_reassigning());
    assert_eq!(done.replicas, vec![4, 2, 5]);
    assert_eq!(done.isr, vec![2, 4, 5]);
    // The leader (1) left: the first target replica in sync leads, in a new epoch.
    assert_eq!((done.leader, done.leader_epoch), (4, 6));
    assert_eq!(
        done.partition_epoch, 12,
        "completion is part of the ISR change"
    );
}

#[test]
fn a_leader_that_stays_keeps_its_epoch_and_a_dead_target_waits() {
    let moving = start(&state(&[1, 2], &[1, 2], 2), &[2, 3], all_live).unwrap();
    let mut whole = moving.clone();
    whole.isr = vec![1, 2, 3];
    let done = complete_if_in_sync(whole.clone(), all_live);
    assert_eq!(
        (done.replicas.clone(), done.isr.clone()),
        (vec![2, 3], vec![2, 3])
    );
    assert_eq!((done.leader, done.leader_epoch), (2, 5));
    // The leader 1 leaving while no target replica is live: nothing completes.
    let moving = start(&state(&[1, 2], &[1, 2], 1), &[3], all_live).unwrap();
    let mut whole = moving;
    whole.isr = vec![1, 2, 3];
    let waiting = complete_if_in_sync(whole, |b| b != 3);
    assert!(waiting.is_reassigning());
    assert_eq!(waiting.leader, 1);
}

#[test]
fn a_target_already_in_sync_completes_at_once() {
    // Shrinking the replica set: nothing to add.
    let next = start(&state(&[1, 2, 3], &[1, 2, 3], 3), &[1, 2], all_live).unwrap();
    assert!(!next.is_reassigning());
    assert_eq!(next.replicas, vec![1, 2]);
    assert_eq!(next.isr, vec![1, 2]);
    assert_eq!((next.leader, next.leader_epoch), (1, 6));
    assert_eq!(next.partition_epoch, 11);
    // Reordering only: the preferred leader changes, the leader does not.
    let next = start(&state(&[1, 2, 3], &[1, 2, 3], 1), &[3, 2, 1], all_live).unwrap();
    assert_eq!(next.replicas, vec![3, 2, 1]);
    assert_eq!((next.leader, next.leader_epoch), (1, 5));
}

#[test]
fn a_new_target_starts_again_from_the_original_replicas() {
    let first = start(&state(&[1, 2], &[1, 2], 1), &[3, 4], all_live).unwrap();
    let mut first = first;
    first.isr = vec![1, 2, 3];
    let second = start(&first, &[1, 3], all_live).unwrap();
    // Original [1, 2]: 3 is adding (already in sync), 4 leaves at once, 2 is removing.
    // Every adding replica is in sync, so it completes in the same change.
    assert!(!second.is_reassigning());
    assert_eq!(second.replicas, vec![1, 3]);
    assert_eq!(second.isr, vec![1, 3]);
}

#[test]
fn cancelling_goes_back_to_the_original_replicas() {
    let mut moving = start(&state(&[1, 2, 3], &[1, 2, 3], 1), &[4, 5, 6], all_live).unwrap();
    moving.isr = vec![1, 2, 3, 4];
    let back = cancel(&moving, all_live).unwrap();
    assert!(!back.is_reassigning());
    assert_eq!(back.replicas, vec![1, 2, 3]);
    assert_eq!(back.isr, vec![1, 2, 3]);
    assert_eq!((back.leader, back.leader_epoch), (1, 5));
    // No original replica in sync: refused, nothing would hold the acknowledged records.
    let mut lost = moving;
    lost.isr = vec![4];
    lost.leader = 4;
    assert!(matches!(
        cancel(&lost, all_live),
        Err(ImageError::InvalidReplicas(_))
    ));
}

#[test]
fn bad_targets_are_refused() {
    let s = state(&[1, 2], &[1, 2], 1);
    for target in [vec![], vec![1, 1], vec![-1]] {
        assert!(
            matches!(
                start(&s, &target, all_live),
                Err(ImageError::InvalidReplicas(_))
            ),
            "{target:?}"
        );
    }
}

/// Through the image: the record starts a reassignment, the ISR change that adds the last new
/// replica completes it, cancelling an idle partition is refused, unknown brokers are refused.
#[test]
fn the_image_applies_reassignments_and_completes_them_on_isr_change() {
    let mut img = Image::default();
    for b in 1..=4 {
        register(&mut img, b, "az1");
    }
    let id = uuid::Uuid::from_u128(7);
    img.apply(&MetadataRecord::CreateTopic {
        name: "t".into(),
        id,
        configs: Default::default(),
        assignments: vec![vec![1, 2]],
    })
    .unwrap();
    let reassign = |target: Option<Vec<BrokerId>>| MetadataRecord::ReassignPartition {
        topic_id: id,
        partition: 0,
        target,
    };
    assert!(matches!(
        img.apply(&reassign(None)),
        Err(ImageError::NoReassignmentInProgress { .. })
    ));
    assert!(matches!(
        img.apply(&reassign(Some(vec![1, 9]))),
        Err(ImageError::UnknownBroker(9))
    ));
    img.apply(&reassign(Some(vec![3, 4]))).unwrap();
    let p = img.partition(id, 0).unwrap().clone();
    assert_eq!(p.replicas, vec![3, 4, 1, 2]);
    assert_eq!(p.adding_replicas, vec![3, 4]);
    // The leader adds 3, then 4, to the ISR.
    for isr in [vec![1, 2, 3], vec![1, 2, 3, 4]] {
        let p = img.partition(id, 0).unwrap().clone();
        img.apply(&MetadataRecord::AlterPartition {
            topic_id: id,
            partition: 0,
            leader: p.leader,
            leader_epoch: p.leader_epoch,
            isr,
            partition_epoch: p.partition_epoch + 1,
            unclean: false,
        })
        .unwrap();
    }
    let p = img.partition(id, 0).unwrap();
    assert!(!p.is_reassigning());
    assert_eq!(p.replicas, vec![3, 4]);
    assert_eq!(p.isr, vec![3, 4]);
    assert_eq!(p.leader, 3);
    assert_eq!(p.leader_epoch, 1);
}
