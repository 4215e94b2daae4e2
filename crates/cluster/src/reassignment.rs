//! Moving a partition's replicas to other brokers (KIP-455), as pure functions over a
//! partition's state; [`crate::Image::apply`] calls them for `ReassignPartition` records and
//! after every ISR change.
//!
//! The rules (Kafka's):
//! - a reassignment from the original replicas `O` to a target `T` makes the replica set
//!   `T` followed by the replicas of `O` not in `T`; those in `T` but not `O` are *adding*,
//!   those in `O` but not `T` are *removing*. The first target replica is so the preferred
//!   leader from the start;
//! - adding replicas join the ISR as any follower does, by catching up with the leader;
//! - once every adding replica is in the ISR, the reassignment completes in the same change:
//!   the replicas become `T`, the ISR loses the removing replicas, and if the leader was one of
//!   them the first target replica that is in sync and live leads (a new leader epoch);
//! - a new target given while one is in progress starts again from `O` (the replicas not being
//!   added), so a replica that was only being added leaves at once;
//! - cancelling goes back to `O`: the adding replicas leave the replica set and the ISR.
//!
//! Every change bumps the partition epoch; a change of leader bumps the leader epoch.

use std::collections::BTreeSet;

use crate::image::{BrokerId, ImageError, PartitionState, NO_LEADER};

/// The replicas the partition had before its reassignment began (all of them when none is in
/// progress), in replica order.
pub fn original_replicas(state: &PartitionState) -> Vec<BrokerId> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|r| !state.adding_replicas.contains(r))
        .collect()
}

/// The replicas the partition will have once its reassignment completes.
pub fn target_replicas(state: &PartitionState) -> Vec<BrokerId> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|r| !state.removing_replicas.contains(r))
        .collect()
}

/// Checks a requested target replica list (Kafka's INVALID_REPLICA_ASSIGNMENT cases that do not
/// need the broker registry).
pub fn check_target(target: &[BrokerId]) -> Result<(), ImageError> {
    if target.is_empty() {
        return Err(ImageError::InvalidReplicas(
            "the target replica list is empty".into(),
        ));
    }
    if let Some(b) = target.iter().find(|b| **b < 0) {
        return Err(ImageError::InvalidReplicas(format!(
            "{b} is not a broker id"
        )));
    }
    let distinct: BTreeSet<_> = target.iter().collect();
    if distinct.len() != target.len() {
        return Err(ImageError::InvalidReplicas(format!(
            "{target:?} names a broker twice"
        )));
    }
    Ok(())
}

/// The state after asking for `target` (every broker of it registered, checked by the caller).
pub fn start(
    current: &PartitionState,
    target: &[BrokerId],
    live: impl Fn(BrokerId) -> bool,
) -> Result<PartitionState, ImageError> {
    check_target(target)?;
    let original = original_replicas(current);
    let adding: Vec<BrokerId> = target
        .iter()
        .copied()
        .filter(|r| !original.contains(r))
        .collect();
    let removing: Vec<BrokerId> = original
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    let replicas: Vec<BrokerId> = target.iter().chain(&removing).copied().collect();
    let next = with_replicas(current, replicas, adding, removing, &live);
    Ok(complete_if_in_sync(next, live))
}

/// The state after cancelling the reassignment in progress: back to the original replicas.
/// Refused when none is in progress, or when no original replica is in sync (the partition
/// would have no leader that holds every acknowledged record).
pub fn cancel(
    current: &PartitionState,
    live: impl Fn(BrokerId) -> bool,
) -> Result<PartitionState, ImageError> {
    let original = original_replicas(current);
    if !current.isr.iter().any(|r| original.contains(r)) {
        return Err(ImageError::InvalidReplicas(format!(
            "cannot cancel: no original replica of {original:?} is in the ISR {:?}",
            current.isr
        )));
    }
    Ok(with_replicas(
        current,
        original,
        Vec::new(),
        Vec::new(),
        &live,
    ))
}

/// `current` with a new replica set: the ISR keeps its members that stay, and a leader that
/// leaves (or is no longer in sync) gives way to the first in-sync, live replica.
fn with_replicas(
    current: &PartitionState,
    replicas: Vec<BrokerId>,
    adding_replicas: Vec<BrokerId>,
    removing_replicas: Vec<BrokerId>,
    live: &impl Fn(BrokerId) -> bool,
) -> PartitionState {
    let isr: Vec<BrokerId> = current
        .isr
        .iter()
        .copied()
        .filter(|r| replicas.contains(r))
        .collect();
    let (leader, leader_epoch) = leader_within(current, &replicas, &isr, live);
    PartitionState {
        replicas,
        isr,
        leader,
        leader_epoch,
        partition_epoch: current.partition_epoch.wrapping_add(1),
        adding_replicas,
        removing_replicas,
    }
}

/// The leader and leader epoch once the replicas are `replicas` and the ISR `isr`: the current
/// leader if it stays in sync, else the first replica in sync and live (else none), with a new
/// epoch.
fn leader_within(
    current: &PartitionState,
    replicas: &[BrokerId],
    isr: &[BrokerId],
    live: &impl Fn(BrokerId) -> bool,
) -> (BrokerId, i32) {
    if current.leader != NO_LEADER && isr.contains(&current.leader) {
        return (current.leader, current.leader_epoch);
    }
    let leader = replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r) && live(*r))
        .unwrap_or(NO_LEADER);
    if leader == current.leader {
        (leader, current.leader_epoch)
    } else {
        (leader, current.leader_epoch.wrapping_add(1))
    }
}

/// Completes the reassignment of `state` if every adding replica is in its ISR and a target
/// replica in sync is live to lead; else returns `state` as it is. The partition epoch is left
/// as `state` has it: completing is part of the change that made the ISR whole.
pub fn complete_if_in_sync(
    state: PartitionState,
    live: impl Fn(BrokerId) -> bool,
) -> PartitionState {
    if !state.is_reassigning() || !state.adding_replicas.iter().all(|r| state.isr.contains(r)) {
        return state;
    }
    let target = target_replicas(&state);
    let isr: Vec<BrokerId> = state
        .isr
        .iter()
        .copied()
        .filter(|r| target.contains(r))
        .collect();
    let (leader, leader_epoch) = leader_within(&state, &target, &isr, &live);
    if leader == NO_LEADER {
        // Nobody to lead the target replicas yet: wait for the next ISR change.
        return state;
    }
    PartitionState {
        replicas: target,
        isr,
        leader,
        leader_epoch,
        partition_epoch: state.partition_epoch,
        adding_replicas: Vec::new(),
        removing_replicas: Vec::new(),
    }
}

#[cfg(test)]
#[path = "reassignment_test.rs"]
mod tests;
