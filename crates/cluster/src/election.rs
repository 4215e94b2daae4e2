//! Leader election and ISR rules, as pure functions of (image, event) that return the records
//! the controller should propose. Nothing here changes an image; [`Image::apply`] re-checks every
//! record, so a decision computed from a stale image is rejected rather than applied.
//!
//! The rules (Kafka's, pre-KIP-966):
//! - **clean election**: the new leader is the first replica, in replica order, that is live
//!   (registered and unfenced) and in the ISR;
//! - **no clean candidate**: the leader becomes `-1`, unless `unclean.leader.election.enable` is
//!   true for the topic (default false), in which case the first live replica leads and the ISR is
//!   that replica alone (acknowledged data may be lost; that is what the setting means);
//! - **fencing** removes the broker from every ISR, except that the last ISR member stays, so the
//!   partition can come back with a clean leader when that broker returns;
//! - **every change of leader bumps the leader epoch by one; every change bumps the partition
//!   epoch by one**;
//! - **controlled shutdown** moves leadership and ISR membership away from a broker that is still
//!   live; a partition with no other in-sync replica keeps its leader until the broker is fenced;
//! - **preferred leader**: when the first replica is live and in sync but not leading, it takes
//!   leadership back;
//! - **ISR shrink/expand** is proposed by the partition leader (AlterPartition), checked against
//!   its leader epoch and partition epoch; a replica joins the ISR only while live.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use crate::image::{BrokerId, Image, MetadataRecord, PartitionState, TopicImage, NO_LEADER};
use crate::OfflineReplica;

/// The topic config that allows electing an out-of-sync replica.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

/// Whether `topic` allows unclean elections, given the cluster default.
pub fn unclean_enabled(topic: &TopicImage, cluster_default: bool) -> bool {
    match topic
        .configs
        .get(UNCLEAN_LEADER_ELECTION)
        .map(String::as_str)
    {
        Some("true") => true,
        Some("false") => false,
        _ => cluster_default,
    }
}

/// The outcome of choosing a leader for a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub leader: BrokerId,
    pub isr: Vec<BrokerId>,
    pub unclean: bool,
}

/// Chooses a leader among `state.replicas` given the ISR to use and who is live.
pub fn elect_leader(
    state: &PartitionState,
    isr: &[BrokerId],
    live: impl Fn(BrokerId) -> bool,
    unclean_allowed: bool,
) -> Election {
    if let Some(r) = state
        .replicas
        .iter()
        .copied()
        .find(|r| isr.contains(r) && live(*r))
    {
        return Election {
            leader: r,
            isr: isr.to_vec(),
            unclean: false,
        };
    }
    if unclean_allowed {
        // A replica still being added by a reassignment never held the log: not a candidate.
        if let Some(r) = state
            .replicas
            .iter()
            .copied()
            .find(|r| live(*r) && !state.adding_replicas.contains(r))
        {
            return Election {
                leader: r,
                isr: vec![r],
                unclean: true,
            };
        }
    }
    Election {
        leader: NO_LEADER,
        isr: isr.to_vec(),
        unclean: false,
    }
}

/// The `AlterPartition` record that moves `state` to `next`, or `None` if nothing changes.
pub(crate) fn change_record(
    topic_id: Uuid,
    partition: usize,
    state: &PartitionState,
    next: Election,
) -> Option<MetadataRecord> {
    if next.leader == state.leader && next.isr == state.isr {
        return None;
    }
    let leader_epoch = if next.leader != state.leader {
        state.leader_epoch + 1
    } else {
        state.leader_epoch
    };
    Some(MetadataRecord::AlterPartition {
        topic_id,
        partition: partition as i32,
        leader: next.leader,
        leader_epoch,
        isr: next.isr,
        partition_epoch: state.partition_epoch + 1,
        unclean: next.unclean,
    })
}

fn each_partition(image: &Image) -> impl Iterator<Item = (&TopicImage, usize, &PartitionState)> {
    image
        .topics
        .values()
        .flat_map(|t| t.partitions.iter().enumerate().map(move |(i, p)| (t, i, p)))
}

/// The records for fencing `broker` (its session expired or it stopped): the fence itself, then
/// a new leader for every partition it led and its removal from every ISR.
pub fn fence_broker(image: &Image, broker: BrokerId, default_unclean: bool) -> Vec<MetadataRecord> {
    if !image.brokers.contains_key(&broker) {
        return Vec::new();
    }
    let mut out = vec![MetadataRecord::FenceBroker { id: broker }];
    let live = |b: BrokerId| b != broker && image.is_live(b);
    for (topic, i, state) in each_partition(image) {
        if !state.replicas.contains(&broker) {
            continue;
        }
        let mut isr: Vec<BrokerId> = state.isr.iter().copied().filter(|b| *b != broker).collect();
        if isr.is_empty() {
            // Keep the last in-sync replica, so it can lead cleanly when it returns.
            isr = state.isr.clone();
        }
        let next = if state.leader == broker || state.leader == NO_LEADER {
            elect_leader(state, &isr, live, unclean_enabled(topic, default_unclean))
        } else {
            Election {
                leader: state.leader,
                isr,
                unclean: false,
            }
        };
        out.extend(change_record(topic.id, i, state, next));
    }
    out
}

/// The records for replicas of `broker` that went offline with their log dir (the broker is
/// live and keeps its other replicas): the image records them (for Metadata's offline
/// replicas), `broker` leaves the ISR of each, and where it led, the
/// first live in-sync replica leads instead. A partition whose only in-sync replica is the
/// offline one is left as it is: no clean leader exists, and taking the broker out (leader -1)
/// would only have the next unfence round elect it again.
pub fn offline_replicas(
    image: &Image,
    broker: BrokerId,
    offline: &BTreeSet<OfflineReplica>,
) -> Vec<MetadataRecord> {
    let Some(reg) = image.brokers.get(&broker) else {
        return Vec::new();
    };
    let live = |b: BrokerId| b != broker && image.is_live(b);
    let mut out = Vec::new();
    let unrecorded: Vec<OfflineReplica> =
        offline.difference(&reg.offline_replicas).copied().collect();
    if !unrecorded.is_empty() {
        out.push(MetadataRecord::MarkReplicasOffline {
            id: broker,
            broker_epoch: reg.epoch,
            replicas: unrecorded,
        });
    }
    for r in offline {
        let Some(topic) = image.topic_by_id(r.topic_id) else {
            continue;
        };
        let Some((i, state)) = usize::try_from(r.partition)
            .ok()
            .and_then(|i| Some((i, topic.partitions.get(i)?)))
        else {
            continue;
        };
        let others: Vec<BrokerId> = state.isr.iter().copied().filter(|b| *b != broker).collect();
        if others.len() == state.isr.len() || others.is_empty() {
            continue;
        }
        let next = if state.leader == broker {
            elect_leader(state, &others, live, false)
        } else {
            Election {
                leader: state.leader,
                isr: others,
                unclean: false,
            }
        };
        out.extend(change_record(topic.id, i, state, next));
    }
    out
}

/// The records for a controlled shutdown of `broker`, which is still live: leadership and ISR
/// membership move to other in-sync replicas where there are any; the broker is not fenced.
pub fn controlled_shutdown(image: &Image, broker: BrokerId) -> Vec<MetadataRecord> {
    let live = |b: BrokerId| b != broker && image.is_live(b);
    let mut out = Vec::new();
    for (topic, i, state) in each_partition(image) {
        if !state.isr.contains(&broker) {
            continue;
        }
        let others: Vec<BrokerId> = state.isr.iter().copied().filter(|b| *b != broker).collect();
        let next = if state.leader == broker {
            let e = elect_leader(state, &others, live, false);
            if e.leader == NO_LEADER {
                continue; // nobody else in sync: keep leading until fenced
            }
            e
        } else if others.is_empty() {
            continue;
        } else {
            Election {
                leader: state.leader,
                isr: others,
                unclean: false,
            }
        };
        out.extend(change_record(topic.id, i, state, next));
    }
    out
}

/// The records for unfencing `broker` (it registered and caught up with the metadata): the
/// unfence itself, then a leader for every leaderless partition that can now elect one.
pub fn unfence_broker(
    image: &Image,
    broker: BrokerId,
    default_unclean: bool,
) -> Vec<MetadataRecord> {
    if !image.brokers.contains_key(&broker) {
        return Vec::new();
    }
    let mut out = vec![MetadataRecord::UnfenceBroker { id: broker }];
    let live = |b: BrokerId| b == broker || image.is_live(b);
    for (topic, i, state) in each_partition(image) {
        if state.leader != NO_LEADER || !state.replicas.contains(&broker) {
            continue;
        }
        let next = elect_leader(
            state,
            &state.isr,
            live,
            unclean_enabled(topic, default_unclean),
        );
        out.extend(change_record(topic.id, i, state, next));
    }
    out
}

/// The election that gives leadership back to the partition's preferred (first) replica, when it
/// is live, in the ISR, and not leading.
pub fn preferred_election(image: &Image, state: &PartitionState) -> Option<Election> {
    let preferred = state.preferred_leader();
    if state.leader == preferred || !state.isr.contains(&preferred) || !image.is_live(preferred) {
        return None;
    }
    Some(Election {
        leader: preferred,
        isr: state.isr.clone(),
        unclean: false,
    })
}

/// Records that give leadership back to each partition's preferred (first) replica where it is
/// live, in the ISR, and not leading.
pub fn restore_preferred_leaders(image: &Image) -> Vec<MetadataRecord> {
    let mut out = Vec::new();
    for (topic, i, state) in each_partition(image) {
        if let Some(next) = preferred_election(image, state) {
            out.extend(change_record(topic.id, i, state, next));
        }
    }
    out
}

/// A partition leader's request to change the ISR (Kafka's AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterIsrRequest {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub new_isr: Vec<BrokerId>,
}

/// Why an ISR change was refused; each maps to a Kafka error code at the broker boundary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlterIsrError {
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
    #[error("the requester is not the leader")]
    NotLeaderOrFollower,
    #[error("stale leader epoch")]
    FencedLeaderEpoch,
    #[error("stale partition epoch")]
    InvalidUpdateVersion,
    #[error("invalid ISR: {0}")]
    InvalidRequest(String),
    #[error("replica {0} is not live and cannot join the ISR")]
    IneligibleReplica(BrokerId),
}

/// Checks a leader's ISR change and returns the record that makes it.
pub fn alter_isr(image: &Image, req: &AlterIsrRequest) -> Result<MetadataRecord, AlterIsrError> {
    let state = image
        .partition(req.topic_id, req.partition)
        .ok_or(AlterIsrError::UnknownTopicOrPartition)?;
    if req.leader_epoch != state.leader_epoch {
        return Err(AlterIsrError::FencedLeaderEpoch);
    }
    if req.leader != state.leader {
        return Err(AlterIsrError::NotLeaderOrFollower);
    }
    if req.partition_epoch != state.partition_epoch {
        return Err(AlterIsrError::InvalidUpdateVersion);
    }
    if !req.new_isr.contains(&req.leader) {
        return Err(AlterIsrError::InvalidRequest(
            "the leader must stay in the ISR".into(),
        ));
    }
    if let Some(b) = req.new_isr.iter().find(|b| !state.replicas.contains(b)) {
        return Err(AlterIsrError::InvalidRequest(format!(
            "{b} is not a replica"
        )));
    }
    if let Some(b) = req
        .new_isr
        .iter()
        .find(|b| !state.isr.contains(b) && !image.is_live(**b))
    {
        return Err(AlterIsrError::IneligibleReplica(*b));
    }
    Ok(MetadataRecord::AlterPartition {
        topic_id: req.topic_id,
        partition: req.partition,
        leader: state.leader,
        leader_epoch: state.leader_epoch,
        isr: req.new_isr.clone(),
        partition_epoch: state.partition_epoch + 1,
        unclean: false,
    })
}

/// What a leader's ISR change, refused for a stale partition epoch, becomes against the current
/// partition state ([`rebase_isr_change`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rebased {
    /// Propose this ISR at the current partition epoch (once: Kafka's AlterPartitionManager).
    Retry(Vec<BrokerId>),
    /// The current state already has the wanted members in and out: nothing to propose.
    AlreadyDone,
    /// The leadership moved (or the change no longer fits the replicas): the new leader or the
    /// next image decides, not this proposal.
    Obsolete,
}

/// Restates the change `from -> to` that `leader` (at `leader_epoch`) proposed against an older
/// partition state, on `state`: the members it added join and the members it removed leave
/// whatever ISR the controller holds now. A refused AlterPartition is so retried once with the
/// current partition epoch instead of being recomputed from a stale local view again and again.
pub fn rebase_isr_change(
    state: &PartitionState,
    leader: BrokerId,
    leader_epoch: i32,
    from: &[BrokerId],
    to: &[BrokerId],
) -> Rebased {
    if state.leader != leader || state.leader_epoch != leader_epoch {
        return Rebased::Obsolete;
    }
    let added: Vec<BrokerId> = to.iter().copied().filter(|b| !from.contains(b)).collect();
    let removed: Vec<BrokerId> = from.iter().copied().filter(|b| !to.contains(b)).collect();
    if added.iter().any(|b| !state.replicas.contains(b)) || removed.contains(&leader) {
        return Rebased::Obsolete;
    }
    let mut next: Vec<BrokerId> = state
        .isr
        .iter()
        .copied()
        .filter(|b| !removed.contains(b))
        .collect();
    for b in added {
        if !next.contains(&b) {
            next.push(b);
        }
    }
    if next == state.isr {
        Rebased::AlreadyDone
    } else {
        Rebased::Retry(next)
    }
}

/// The leader's side of ISR shrink: followers that have not caught up with the leader's log end
/// within `lag_max_ms` (`replica.lag.time.max.ms`) leave the ISR. `last_caught_up_ms` holds, per
/// follower, the last time its fetch reached the leader's log end offset. The leader always
/// stays. Returns the new ISR, or `None` if nobody leaves.
pub fn shrink_isr(
    isr: &[BrokerId],
    leader: BrokerId,
    last_caught_up_ms: &BTreeMap<BrokerId, i64>,
    now_ms: i64,
    lag_max_ms: i64,
) -> Option<Vec<BrokerId>> {
    let keep: Vec<BrokerId> = isr
        .iter()
        .copied()
        .filter(|b| {
            *b == leader
                || last_caught_up_ms
                    .get(b)
                    .is_some_and(|t| now_ms.saturating_sub(*t) <= lag_max_ms)
        })
        .collect();
    (keep.len() != isr.len()).then_some(keep)
}

/// The leader's side of ISR expansion: a replica outside the ISR joins once its log end offset
/// reaches the high watermark and the start of the current leader epoch. Returns the new ISR,
/// or `None` if the follower is already in it or not yet caught up.
pub fn expand_isr(
    isr: &[BrokerId],
    follower: BrokerId,
    follower_log_end_offset: i64,
    high_watermark: i64,
    leader_epoch_start_offset: i64,
) -> Option<Vec<BrokerId>> {
    if isr.contains(&follower)
        || follower_log_end_offset < high_watermark
        || follower_log_end_offset < leader_epoch_start_offset
    {
        return None;
    }
    let mut next = isr.to_vec();
    next.push(follower);
    Some(next)
}

#[cfg(test)]
#[path = "election_test.rs"]
mod tests;
