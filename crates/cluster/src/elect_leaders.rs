//! The decisions of the ElectLeaders admin API (KIP-183 preferred, KIP-460 unclean), as pure
//! functions of the image, with Kafka's answers (its `ReplicationControlManager.electLeader`):
//!
//! - **preferred**: not needed when the first replica leads already; else the first replica
//!   leads if it is live and in the ISR; else, if the current leader is still live the partition
//!   keeps it (PREFERRED_LEADER_NOT_AVAILABLE); else the first live in-sync replica leads (a
//!   leaderless partition gets a clean leader, as Kafka's builder does), and without one the
//!   answer is PREFERRED_LEADER_NOT_AVAILABLE;
//! - **unclean**: not needed while the partition has a leader; else the first live in-sync
//!   replica leads (clean), else the first live replica, with the ISR set to it alone
//!   (acknowledged data the others held may be lost: that is what an unclean election means;
//!   the old ISR members truncate to the new leader's log when they follow it); with no live
//!   replica the answer is ELIGIBLE_LEADERS_NOT_AVAILABLE.
//!
//! The elections themselves are [`crate::election`]'s: [`election::preferred_election`] (also
//! what `auto.leader.rebalance.enable` proposes) and [`election::elect_leader`] (also what
//! fencing and unfencing use). Every record carries a leader-epoch bump when the leader changes
//! and the next partition epoch, so [`Image::apply`] rejects one computed from a stale image.
//! "Live" is the image's (registered and unfenced); Kafka also skips brokers in controlled
//! shutdown, which only the active controller's sessions know.

use crate::election::{self, change_record};
use crate::image::{Image, MetadataRecord, PartitionState, NO_LEADER};

/// Kafka's `ElectionType`: the wire byte of ElectLeaders v1+ (v0 is always preferred).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

impl ElectionType {
    /// The election type of wire byte `b`; `None` for an unknown one (INVALID_REQUEST).
    pub fn from_wire(b: i8) -> Option<Self> {
        match b {
            0 => Some(Self::Preferred),
            1 => Some(Self::Unclean),
            _ => None,
        }
    }
}

/// Why a partition got no new leader; each is one of Kafka's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ElectionRefused {
    /// ELECTION_NOT_NEEDED: the preferred replica leads (preferred), or the partition has a
    /// leader (unclean).
    #[error("election not needed")]
    NotNeeded,
    /// PREFERRED_LEADER_NOT_AVAILABLE: the preferred replica is not live or not in the ISR.
    #[error("the preferred leader is not available")]
    PreferredLeaderNotAvailable,
    /// ELIGIBLE_LEADERS_NOT_AVAILABLE: no live replica can lead.
    #[error("no eligible leader is available")]
    EligibleLeadersNotAvailable,
    /// UNKNOWN_TOPIC_OR_PARTITION.
    #[error("unknown topic or partition")]
    UnknownTopicOrPartition,
}

/// The record that elects a leader for `topic`'s `partition` by `kind`, or why there is none.
pub fn elect(
    image: &Image,
    topic: &str,
    partition: i32,
    kind: ElectionType,
) -> Result<MetadataRecord, ElectionRefused> {
    let t = image
        .topic(topic)
        .ok_or(ElectionRefused::UnknownTopicOrPartition)?;
    let index = usize::try_from(partition).map_err(|_| ElectionRefused::UnknownTopicOrPartition)?;
    let state = t
        .partitions
        .get(index)
        .ok_or(ElectionRefused::UnknownTopicOrPartition)?;
    match kind {
        ElectionType::Preferred => elect_preferred(image, state),
        ElectionType::Unclean => elect_unclean(image, state),
    }
    .and_then(|next| {
        change_record(t.id, index, state, next).ok_or(match kind {
            ElectionType::Preferred => ElectionRefused::PreferredLeaderNotAvailable,
            ElectionType::Unclean => ElectionRefused::EligibleLeadersNotAvailable,
        })
    })
}

fn elect_preferred(
    image: &Image,
    state: &PartitionState,
) -> Result<election::Election, ElectionRefused> {
    if state.leader == state.preferred_leader() {
        return Err(ElectionRefused::NotNeeded);
    }
    if let Some(next) = election::preferred_election(image, state) {
        return Ok(next);
    }
    if state.leader != NO_LEADER && image.is_live(state.leader) {
        return Err(ElectionRefused::PreferredLeaderNotAvailable);
    }
    let next = election::elect_leader(state, &state.isr, |b| image.is_live(b), false);
    if next.leader == NO_LEADER {
        return Err(ElectionRefused::PreferredLeaderNotAvailable);
    }
    Ok(next)
}

fn elect_unclean(
    image: &Image,
    state: &PartitionState,
) -> Result<election::Election, ElectionRefused> {
    if state.leader != NO_LEADER {
        return Err(ElectionRefused::NotNeeded);
    }
    let next = election::elect_leader(state, &state.isr, |b| image.is_live(b), true);
    if next.leader == NO_LEADER {
        return Err(ElectionRefused::EligibleLeadersNotAvailable);
    }
    Ok(next)
}

/// Every partition of the image, by topic name (ElectLeaders with null `topic_partitions`).
pub fn all_partitions(image: &Image) -> Vec<(String, Vec<i32>)> {
    let mut topics: Vec<(String, Vec<i32>)> = image
        .topics
        .values()
        .map(|t| {
            let count = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
            (t.name.clone(), (0..count).collect())
        })
        .collect();
    topics.sort_by(|a, b| a.0.cmp(&b.0));
    topics
}

#[cfg(test)]
#[path = "elect_leaders_test.rs"]
mod tests;
