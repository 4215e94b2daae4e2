//! One partition as this broker sees it, and the rules that move it: role changes from the
//! metadata image, the leader's view of its followers, ISR expansion and shrink proposals, the
//! high watermark over the ISR and the acks=all commit rule.
//!
//! [`ReplicaState`] holds no log and reads no clock: the caller passes the log end offset, the
//! high watermark and `now` with each event, and applies what comes back (the broker's
//! `replica_manager::Partition` keeps it under its state lock, next to the log).

use std::collections::BTreeMap;
use std::time::Duration;

use ferry_cluster::image::{PartitionState, NO_LEADER};
use ferry_cluster::BrokerId;
use tokio::time::Instant;
use uuid::Uuid;

use crate::follower_progress::FollowerProgress;

/// How long an ISR change in flight (or refused) holds back the next one when the image does not
/// show a new state of the partition: a lost answer must not freeze the ISR.
pub const ISR_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a change the controller could not take, or refused at the current partition epoch
/// (a replica not yet eligible: fenced), waits before it is proposed again.
pub const ISR_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// What this broker is for one partition, as the image last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: BrokerId },
}

/// Where records appended as leader stand (the delayed-produce purgatory's question).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitStatus {
    /// Still leader at the epoch of the append; the high watermark has not reached them yet.
    Pending,
    /// The high watermark reached them while this broker led at the epoch of the append.
    Committed,
    /// This broker no longer leads at that epoch. Whatever the high watermark says now is about
    /// another leader's log, which may have truncated the records away: never an acknowledgement.
    LeadershipLost,
}

/// An ISR change this partition's leader wants the controller to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// The ISR at `partition_epoch`, which the change starts from.
    pub current_isr: Vec<BrokerId>,
    pub new_isr: Vec<BrokerId>,
    /// Whether the ISR grows (a follower caught up) rather than shrinks.
    pub expands: bool,
}

impl IsrChange {
    /// The AlterPartition request that proposes this change to the controller.
    pub fn request(&self) -> ferry_cluster::election::AlterIsrRequest {
        ferry_cluster::election::AlterIsrRequest {
            topic_id: self.topic_id,
            partition: self.partition,
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr: self.new_isr.clone(),
        }
    }
}

/// How a proposed ISR change ended (Kafka's AlterPartition outcomes, as the leader acts on them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IsrOutcome {
    /// Committed: the image will show it.
    Committed,
    /// The controller's partition state moved on (a newer partition or leader epoch, the change
    /// already made, the topic gone): the next image decides; nothing is re-proposed before it.
    AwaitImage,
    /// Refused at the current partition epoch (a replica not eligible, an invalid ISR): not
    /// applied; its followers stop counting for the high watermark, and it may be proposed again
    /// after a back-off.
    Refused,
    /// The controller could not be reached: proposed again after a back-off.
    Unavailable,
}

/// One partition's replication state on this broker.
#[derive(Debug)]
pub struct ReplicaState {
    topic_id: Uuid,
    partition: i32,
    node_id: BrokerId,
    role: Role,
    /// -1 until the first image: neither leader nor follower yet, so that image is a change.
    leader_epoch: i32,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    partition_epoch: i32,
    /// The log end offset when this broker became leader of the current epoch.
    epoch_start_offset: i64,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    /// Set while an ISR change is proposed, or was refused, and the image shows no new state of
    /// the partition yet: no other change is proposed before that image, or this deadline
    /// (at most one in flight per partition; a refused one is not re-proposed on every fetch).
    isr_change_blocked_until: Option<Instant>,
    /// Followers a pending expansion adds. Until the image shows a new partition state, the high
    /// watermark counts them too (Kafka's "maximal ISR"): else records acknowledged meanwhile
    /// with the old ISR could be missing on a member of the new one, which may be elected next.
    pending_additions: Vec<BrokerId>,
}

impl ReplicaState {
    /// A replica of partition `partition` of topic `topic_id` on broker `node_id`, whose log
    /// ends at `log_end`, before any image.
    pub fn new(topic_id: Uuid, partition: i32, node_id: BrokerId, log_end: i64) -> Self {
        Self {
            topic_id,
            partition,
            node_id,
            role: Role::Follower { leader: NO_LEADER },
            leader_epoch: -1,
            replicas: vec![node_id],
            isr: vec![node_id],
            partition_epoch: 0,
            epoch_start_offset: log_end,
            followers: BTreeMap::new(),
            isr_change_blocked_until: None,
            pending_additions: Vec::new(),
        }
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// The leader as this broker knows it (-1: none).
    pub fn leader(&self) -> BrokerId {
        match self.role {
            Role::Leader => self.node_id,
            Role::Follower { leader } => leader,
        }
    }

    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    /// Led here with an ISR smaller than the replica set.
    pub fn is_under_replicated(&self) -> bool {
        self.role == Role::Leader && self.isr.len() < self.replicas.len()
    }

    /// Leader: (leader epoch, log end offset when this epoch began); `None` unless leader.
    pub fn leader_epoch_start(&self) -> Option<(i32, i64)> {
        (self.role == Role::Leader).then_some((self.leader_epoch, self.epoch_start_offset))
    }

    /// Takes the partition's state from the image, while the log ends at `log_end`. Returns
    /// true if this broker became a follower of a new leader or epoch (its fetcher must
    /// (re)start from a truncation check).
    pub fn apply(&mut self, image: &PartitionState, log_end: i64, now: Instant) -> bool {
        let old_epoch = self.leader_epoch;
        let old_role = self.role;
        // A pending expansion's followers count until the image shows a new partition state
        // (ours committed, or another change won); a refused proposal clears them too.
        // The change in flight, if any, is decided too; an image that shows no new state of
        // this partition (another partition changed) decides nothing about it.
        if image.partition_epoch != self.partition_epoch || image.leader_epoch != old_epoch {
            self.pending_additions.clear();
            self.isr_change_blocked_until = None;
        }
        self.replicas = image.replicas.clone();
        self.isr = image.isr.clone();
        self.partition_epoch = image.partition_epoch;
        let new_role = if image.leader == self.node_id {
            Role::Leader
        } else {
            Role::Follower {
                leader: image.leader,
            }
        };
        let changed = new_role != old_role || image.leader_epoch != old_epoch;
        self.leader_epoch = image.leader_epoch;
        self.role = new_role;
        if changed && new_role == Role::Leader {
            self.epoch_start_offset = log_end;
            self.followers = image
                .replicas
                .iter()
                .filter(|r| **r != self.node_id)
                .map(|r| (*r, FollowerProgress::new(now)))
                .collect();
        }
        changed && matches!(new_role, Role::Follower { leader } if leader != NO_LEADER)
    }

    /// Leader: the least log end offset over the ISR (and the followers a pending expansion
    /// adds), this broker's being `log_end`; `None` while one of them has not fetched yet.
    /// The caller keeps the high watermark at the maximum of this and its current value.
    pub fn isr_high_watermark(&self, log_end: i64) -> Option<i64> {
        let mut min = log_end;
        for r in self.isr.iter().chain(&self.pending_additions) {
            if *r == self.node_id {
                continue;
            }
            let f = self.followers.get(r).map_or(-1, |f| f.log_end_offset);
            min = min.min(f);
        }
        (min >= 0).then_some(min)
    }

    /// Records appended as leader at `leader_epoch`, ending before `end_offset`, while the high
    /// watermark is `high_watermark`: are they committed? Asked under the same lock as role
    /// changes, so a high watermark learnt from a later leader is never read as this leader's.
    pub fn commit_status(
        &self,
        leader_epoch: i32,
        end_offset: i64,
        high_watermark: i64,
    ) -> CommitStatus {
        if self.role != Role::Leader || self.leader_epoch != leader_epoch {
            CommitStatus::LeadershipLost
        } else if high_watermark >= end_offset {
            CommitStatus::Committed
        } else {
            CommitStatus::Pending
        }
    }

    /// Leader: `replica` fetched from `fetch_offset` (so its log end offset is that) while this
    /// log ends at `log_end`. False when not recorded: not leader, or an offset past this log
    /// (Kafka answers OFFSET_OUT_OF_RANGE), which is not a position on it.
    pub fn on_follower_fetch(
        &mut self,
        replica: BrokerId,
        fetch_offset: i64,
        log_end: i64,
        now: Instant,
    ) -> bool {
        if self.role != Role::Leader || fetch_offset > log_end {
            return false;
        }
        self.followers
            .entry(replica)
            .or_insert_with(|| FollowerProgress::new(now))
            .on_fetch(fetch_offset, log_end, now);
        true
    }

    /// Leader, after [`ReplicaState::on_follower_fetch`]: the ISR expansion to propose if
    /// `replica` is outside the ISR and caught up (Kafka's rule, `election::expand_isr`), and no
    /// other change holds it back.
    pub fn propose_expansion(
        &mut self,
        replica: BrokerId,
        fetch_offset: i64,
        high_watermark: i64,
        now: Instant,
    ) -> Option<IsrChange> {
        if self.role != Role::Leader
            || self.isr_change_blocked(now)
            || !self.replicas.contains(&replica)
        {
            return None;
        }
        let new_isr = ferry_cluster::election::expand_isr(
            &self.isr,
            replica,
            fetch_offset,
            high_watermark,
            self.epoch_start_offset,
        )?;
        Some(self.isr_change(new_isr, now))
    }

    /// Leader: followers of the ISR that have not caught up within `lag_max_ms` leave it; the
    /// shrink to propose, if any, while this log ends at `log_end`.
    pub fn propose_shrink(
        &mut self,
        log_end: i64,
        lag_max_ms: i64,
        now: Instant,
    ) -> Option<IsrChange> {
        if self.role != Role::Leader {
            return None;
        }
        // A follower of a refused expansion that then stopped must not hold the high
        // watermark forever: it stops counting once it lags like an ISR member would leave.
        let followers = &self.followers;
        self.pending_additions.retain(|r| {
            followers.get(r).is_some_and(|f| {
                f.log_end_offset >= log_end || f.ms_since_caught_up(now) <= lag_max_ms
            })
        });
        if self.isr_change_blocked(now) {
            return None;
        }
        // A follower at the log end is caught up now.
        let caught_up: BTreeMap<BrokerId, i64> = self
            .followers
            .iter()
            .map(|(id, f)| {
                let age = if f.log_end_offset >= log_end {
                    0
                } else {
                    f.ms_since_caught_up(now)
                };
                (*id, -age)
            })
            .collect();
        let new_isr = ferry_cluster::election::shrink_isr(
            &self.isr,
            self.node_id,
            &caught_up,
            0,
            lag_max_ms,
        )?;
        Some(self.isr_change(new_isr, now))
    }

    /// Leader: `replica`'s log end offset and the ms since it last caught up, as of `now`
    /// (`None` if it never fetched in this epoch). Kafka logs the same for the replicas a
    /// shrink drops.
    pub fn follower_lag(&self, replica: BrokerId, now: Instant) -> Option<(i64, i64)> {
        self.followers
            .get(&replica)
            .map(|f| (f.log_end_offset, f.ms_since_caught_up(now)))
    }

    fn isr_change(&mut self, new_isr: Vec<BrokerId>, now: Instant) -> IsrChange {
        self.isr_change_blocked_until = Some(now + ISR_CHANGE_TIMEOUT);
        for r in &new_isr {
            if !self.isr.contains(r) && !self.pending_additions.contains(r) {
                self.pending_additions.push(*r);
            }
        }
        IsrChange {
            expands: new_isr.len() > self.isr.len(),
            topic_id: self.topic_id,
            partition: self.partition,
            leader: self.node_id,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            current_isr: self.isr.clone(),
            new_isr,
        }
    }

    /// Whether an ISR change in flight or just refused holds back the next one.
    fn isr_change_blocked(&self, now: Instant) -> bool {
        self.isr_change_blocked_until
            .is_some_and(|until| now < until)
    }

    /// How the proposal of `change` ended. Nothing happens if the image already showed a new
    /// state of the partition (that decided the change, and a newer one may be in flight).
    ///
    /// Only [`IsrOutcome::Refused`] drops the change's joining followers from the high
    /// watermark: the controller then said, at the current partition epoch, that it did not
    /// apply it. After any other outcome the change may have been committed (an answer lost, an
    /// earlier duplicate), so they count until the image shows a new partition state, or until
    /// they lag ([`ReplicaState::propose_shrink`]).
    pub fn isr_change_finished(&mut self, change: &IsrChange, outcome: IsrOutcome, now: Instant) {
        if self.role != Role::Leader
            || self.partition_epoch != change.partition_epoch
            || self.leader_epoch != change.leader_epoch
        {
            return;
        }
        let wait = match outcome {
            IsrOutcome::Committed | IsrOutcome::AwaitImage => ISR_CHANGE_TIMEOUT,
            IsrOutcome::Refused => {
                self.pending_additions
                    .retain(|r| !change.new_isr.contains(r) || change.current_isr.contains(r));
                ISR_RETRY_BACKOFF
            }
            IsrOutcome::Unavailable => ISR_RETRY_BACKOFF,
        };
        self.isr_change_blocked_until = Some(now + wait);
    }

    /// Leader: the followers a consumer at `fetch_offset` may be sent to (KIP-392): in the ISR
    /// and holding the offset, as (id, log end offset, ms since it last caught up).
    pub fn read_replica_candidates(
        &self,
        fetch_offset: i64,
        now: Instant,
    ) -> Vec<(BrokerId, i64, i64)> {
        if self.role != Role::Leader {
            return Vec::new();
        }
        self.followers
            .iter()
            .filter(|(id, f)| self.isr.contains(id) && f.log_end_offset >= fetch_offset)
            .map(|(id, f)| (*id, f.log_end_offset, f.ms_since_caught_up(now)))
            .collect()
    }

    /// Leader: every replica's (id, log end offset, in the ISR), this broker's log ending at
    /// `log_end`.
    pub fn replica_progress(&self, log_end: i64) -> Vec<(BrokerId, i64, bool)> {
        let mut out = vec![(self.node_id, log_end, true)];
        for (id, f) in &self.followers {
            out.push((*id, f.log_end_offset, self.isr.contains(id)));
        }
        out
    }

    /// Leader: whether `replica` has not yet been sent `high_watermark`.
    pub fn high_watermark_unsent(&self, replica: BrokerId, high_watermark: i64) -> bool {
        self.followers
            .get(&replica)
            .is_some_and(|f| f.last_sent_high_watermark < high_watermark)
    }

    /// Leader: a fetch response to `replica` carries `high_watermark`.
    pub fn record_high_watermark_sent(&mut self, replica: BrokerId, high_watermark: i64) {
        if let Some(f) = self.followers.get_mut(&replica) {
            f.last_sent_high_watermark = f.last_sent_high_watermark.max(high_watermark);
        }
    }
}

#[cfg(test)]
#[path = "partition_state_test.rs"]
mod tests;
