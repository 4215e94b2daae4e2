//! The replica manager: the partitions this broker hosts, and the one path by which records
//! are appended to and read from their logs.
//!
//! The partitions follow the controller's metadata image ([`ReplicaManager::apply_image`]): this
//! broker hosts a log for every partition whose replicas include it, and is its leader or a
//! follower as the image says. As leader it tracks each follower's log end offset (reported by the
//! follower's Fetch) and the last time it caught up; the high watermark is the least log end
//! offset over the in-sync replicas and never decreases. As follower its high watermark is the
//! leader's, bounded by its own log end offset ([`Partition::update_follower_high_watermark`]).
//!
//! On a single node every partition is led here and the in-sync replica set is this broker alone,
//! so the high watermark is the log end offset. Every change of the log end offset or the high
//! watermark is published on the partition's watch channel; long-polling fetches and acks=all
//! produce requests wait on it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ferry_cluster::image::{PartitionState, TopicImage, NO_LEADER};
use ferry_cluster::{BrokerId, Image};
use ferry_common::TopicPartition;
use ferry_log::batch::whole_batches;
use ferry_log::{AppendInfo, FetchData, LogConfig, LogError, LogManager, PartitionLog};
use tokio::sync::watch;
use tokio::time::Instant;
use uuid::Uuid;

/// What this broker is for one partition, as the image last said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower { leader: BrokerId },
}

/// Most (time, leader log end) marks kept per follower. They are kept about 1/32 of the span
/// apart (past this bound every second one is dropped), so they cover any lag at a resolution of
/// a few percent of it.
const CAUGHT_UP_MARKS: usize = 64;
/// How long an ISR change in flight (or refused) holds back the next one when the image does not
/// show a new state of the partition: a lost answer must not freeze the ISR.
const ISR_CHANGE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a change the controller could not take, or refused at the current partition epoch
/// (a replica not yet eligible: fenced), waits before it is proposed again.
const ISR_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// What the leader knows of one follower.
#[derive(Debug, Clone)]
struct FollowerState {
    /// The offset of its last Fetch, i.e. its log end offset; -1 before its first fetch.
    log_end_offset: i64,
    /// The last time it was caught up: the latest time at which the leader's log ended at or
    /// below the follower's log end offset now (see [`FollowerState::on_fetch`]).
    last_caught_up: Instant,
    /// (time of a fetch, the leader's log end offset then), oldest first, thinned to at most
    /// [`CAUGHT_UP_MARKS`]; only marks the follower has not yet reached are kept.
    marks: VecDeque<(Instant, i64)>,
    /// The high watermark last sent to it; a fetch does not wait while this is behind, so the
    /// follower (which may serve consumers, KIP-392) learns a new high watermark promptly.
    last_sent_high_watermark: i64,
}

impl FollowerState {
    fn ms_since_caught_up(&self, now: Instant) -> i64 {
        i64::try_from(now.duration_since(self.last_caught_up).as_millis()).unwrap_or(i64::MAX)
    }

    fn new(now: Instant) -> Self {
        Self {
            log_end_offset: -1,
            last_caught_up: now,
            marks: VecDeque::new(),
            last_sent_high_watermark: -1,
        }
    }

    /// A fetch from `fetch_offset` at `now`, while the leader's log ends at `leader_leo`.
    ///
    /// Kafka's rule, "caught up as of a fetch": a follower whose fetch offset reaches the
    /// leader's log end offset as of an earlier fetch was caught up at that earlier fetch's
    /// time. Kafka only looks at the previous fetch; this looks at every earlier one still
    /// marked, because a remote-WAL follower reports far more often than its data takes to
    /// arrive (it always trails the previous report's log end by one WAL latency, yet holds
    /// what the leader had that latency ago). A follower is then out of sync only when it has
    /// not reached the leader's log end as of any time within `replica.lag.time.max.ms`.
    fn on_fetch(&mut self, fetch_offset: i64, leader_leo: i64, now: Instant) {
        self.log_end_offset = fetch_offset;
        if fetch_offset >= leader_leo {
            self.last_caught_up = now;
            self.marks.clear();
            return;
        }
        // The newest mark the follower reached; older ones can never give a later time.
        if let Some(i) = self.marks.iter().rposition(|(_, leo)| *leo <= fetch_offset) {
            let (at, _) = self.marks[i];
            self.last_caught_up = self.last_caught_up.max(at);
            self.marks.drain(..=i);
        }
        // Marks spread evenly over the span the follower trails by: one closer than 1/32 of it
        // to the last is not kept (the older one stands, which errs towards an earlier time).
        let min_gap = self.marks.front().map_or(Duration::ZERO, |(first, _)| {
            now.saturating_duration_since(*first) / (CAUGHT_UP_MARKS as u32 / 2)
        });
        match self.marks.back_mut() {
            // The leader's log still ended there: reaching it means caught up as of now.
            Some(last) if last.1 == leader_leo => last.0 = now,
            Some(last) if now.saturating_duration_since(last.0) < min_gap => {}
            _ => self.marks.push_back((now, leader_leo)),
        }
        if self.marks.len() > CAUGHT_UP_MARKS {
            // Thin out, keeping the newest: the resolution halves, the span stays.
            let keep_parity = (self.marks.len() - 1) % 2;
            let mut i = 0;
            self.marks.retain(|_| {
                let keep = i % 2 == keep_parity;
                i += 1;
                keep
            });
        }
    }
}

#[derive(Debug)]
struct ReplicaState {
    role: Role,
    replicas: Vec<BrokerId>,
    isr: Vec<BrokerId>,
    partition_epoch: i32,
    /// The log end offset when this broker became leader of the current epoch.
    epoch_start_offset: i64,
    followers: BTreeMap<BrokerId, FollowerState>,
    /// Set while an ISR change is proposed, or was refused, and the image shows no new state of
    /// the partition yet: no other change is proposed before that image, or this deadline
    /// (at most one in flight per partition; a refused one is not re-proposed on every fetch).
    isr_change_blocked_until: Option<Instant>,
    /// Followers a pending expansion adds. Until the image shows a new partition state, the high
    /// watermark counts them too (Kafka's "maximal ISR"): else records acknowledged meanwhile
    /// with the old ISR could be missing on a member of the new one, which may be elected next.
    pending_additions: Vec<BrokerId>,
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

/// One partition hosted by this broker.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub log: Arc<PartitionLog>,
    node_id: BrokerId,
    leader_epoch: AtomicI32,
    high_watermark: AtomicI64,
    state: Mutex<ReplicaState>,
    end_offset: watch::Sender<i64>,
    /// Follower of a remote-WAL topic: the WAL path brings the data, the replica fetcher only
    /// reports the log end offset (set by `remote_wal`).
    wal_mode: AtomicBool,
    /// Follower: the leader's high watermark as last reported (may exceed the log end).
    leader_high_watermark: AtomicI64,
    /// Follower: the leader epoch at which the leader last confirmed this log (a fetch answered
    /// without a diverging epoch); -1 before. Data that does not come in a Fetch response (the
    /// remote WAL) is appended only while this equals the current epoch, so a follower never
    /// builds on records a new leader does not have (truncation by leader epoch comes first).
    validated_epoch: AtomicI32,
    /// Serialises appends that must keep their order with a follow-up (leader: the remote WAL
    /// hand-off; follower: appends checked against the log end).
    append_order: Mutex<()>,
}

impl Partition {
    /// `checkpointed_high_watermark`: from `replication-offset-checkpoint`; without one the high
    /// watermark starts at the log start offset (Kafka's rule) and a leader of a single-replica
    /// ISR raises it to the log end offset at once.
    fn new(
        tp: TopicPartition,
        topic_id: Uuid,
        log: Arc<PartitionLog>,
        node_id: BrokerId,
        checkpointed_high_watermark: Option<i64>,
    ) -> Self {
        let leo = log.log_end_offset();
        let high_watermark = checkpointed_high_watermark
            .unwrap_or(0)
            .clamp(log.log_start_offset(), leo);
        let (end_offset, _) = watch::channel(leo);
        Self {
            tp,
            topic_id,
            node_id,
            // Neither leader nor follower until the image says (the first apply is a change).
            leader_epoch: AtomicI32::new(-1),
            high_watermark: AtomicI64::new(high_watermark),
            state: Mutex::new(ReplicaState {
                role: Role::Follower { leader: NO_LEADER },
                replicas: vec![node_id],
                isr: vec![node_id],
                partition_epoch: 0,
                epoch_start_offset: leo,
                followers: BTreeMap::new(),
                isr_change_blocked_until: None,
                pending_additions: Vec::new(),
            }),
            log,
            end_offset,
            wal_mode: AtomicBool::new(false),
            leader_high_watermark: AtomicI64::new(-1),
            validated_epoch: AtomicI32::new(-1),
            append_order: Mutex::new(()),
        }
    }

    /// Whether the replica fetcher only reports offsets for this partition (remote WAL).
    pub fn wal_mode(&self) -> bool {
        self.wal_mode.load(Ordering::Acquire)
    }

    pub fn set_wal_mode(&self, on: bool) {
        self.wal_mode.store(on, Ordering::Release);
    }

    /// Follower: the leader's high watermark as last reported (-1 before the first report).
    pub fn leader_high_watermark(&self) -> i64 {
        self.leader_high_watermark.load(Ordering::Acquire)
    }

    fn append_order(&self) -> std::sync::MutexGuard<'_, ()> {
        self.append_order.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ReplicaState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.load(Ordering::Acquire)
    }

    /// Follower: the leader answered a fetch sent at `epoch` without a diverging epoch.
    pub fn set_validated_epoch(&self, epoch: i32) {
        self.validated_epoch.store(epoch, Ordering::Release);
    }

    /// Follower: whether the log has been checked against the leader of the current epoch.
    pub fn log_validated(&self) -> bool {
        let v = self.validated_epoch.load(Ordering::Acquire);
        v >= 0 && v == self.leader_epoch()
    }

    /// Leader, for a follower's fetch (KIP-320; the rule `handlers::fetch` applies): the epoch
    /// and end offset at which the follower's log, last batch of epoch `last_fetched_epoch`
    /// ending before `fetch_offset`, stops matching this log; `None` when it matches.
    pub fn diverging_epoch(
        &self,
        last_fetched_epoch: i32,
        fetch_offset: i64,
    ) -> Option<(i32, i64)> {
        divergence(
            |epoch| self.log.end_offset_for_epoch(epoch),
            fetch_offset,
            last_fetched_epoch,
        )
    }

    /// Follower: where to truncate after the leader reported a diverging epoch: the end of that
    /// epoch here or there, whichever is lower (the largest common prefix by epoch).
    pub fn truncation_target(&self, diverging_epoch: i32, diverging_end_offset: i64) -> i64 {
        let target = match self.log.end_offset_for_epoch(diverging_epoch) {
            Some((_, end)) => end.min(diverging_end_offset),
            None => diverging_end_offset,
        };
        target.max(0)
    }

    /// Leader: (leader epoch, log end offset when this epoch began); `None` unless leader.
    pub fn leader_epoch_start(&self) -> Option<(i32, i64)> {
        let st = self.state();
        (st.role == Role::Leader).then(|| (self.leader_epoch(), st.epoch_start_offset))
    }

    pub fn role(&self) -> Role {
        self.state().role
    }

    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }

    /// The leader as this broker knows it (-1: none).
    pub fn leader(&self) -> BrokerId {
        match self.role() {
            Role::Leader => self.node_id,
            Role::Follower { leader } => leader,
        }
    }

    pub fn isr(&self) -> Vec<BrokerId> {
        self.state().isr.clone()
    }

    pub fn replicas(&self) -> Vec<BrokerId> {
        self.state().replicas.clone()
    }

    /// Whether the image lists this broker in the partition's ISR.
    pub fn is_in_sync(&self) -> bool {
        self.state().isr.contains(&self.node_id)
    }

    /// Led here with an ISR smaller than the replica set.
    pub fn is_under_replicated(&self) -> bool {
        let st = self.state();
        st.role == Role::Leader && st.isr.len() < st.replicas.len()
    }

    /// Offsets below this are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// Last stable offset: no transactions yet, so it equals the high watermark.
    pub fn last_stable_offset(&self) -> i64 {
        self.high_watermark()
    }

    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.end_offset.subscribe()
    }

    fn notify(&self) {
        // Always wakes the receivers, even when the log end offset did not change (HW moved).
        self.end_offset.send_replace(self.log.log_end_offset());
    }

    /// Takes the partition's state from the image. Returns true if this broker became a
    /// follower of a new leader or epoch (its fetcher must (re)start from a truncation check).
    fn apply(&self, state: &PartitionState) -> bool {
        let mut st = self.state();
        let old_epoch = self.leader_epoch();
        let old_role = st.role;
        // A pending expansion's followers count until the image shows a new partition state
        // (ours committed, or another change won); a refused proposal clears them too.
        // The change in flight, if any, is decided too; an image that shows no new state of
        // this partition (another partition changed) decides nothing about it.
        if state.partition_epoch != st.partition_epoch || state.leader_epoch != old_epoch {
            st.pending_additions.clear();
            st.isr_change_blocked_until = None;
        }
        st.replicas = state.replicas.clone();
        st.isr = state.isr.clone();
        st.partition_epoch = state.partition_epoch;
        let new_role = if state.leader == self.node_id {
            Role::Leader
        } else {
            Role::Follower {
                leader: state.leader,
            }
        };
        let changed = new_role != old_role || state.leader_epoch != old_epoch;
        self.leader_epoch
            .store(state.leader_epoch, Ordering::Release);
        st.role = new_role;
        if changed && new_role == Role::Leader {
            st.epoch_start_offset = self.log.log_end_offset();
            let now = Instant::now();
            st.followers = state
                .replicas
                .iter()
                .filter(|r| **r != self.node_id)
                .map(|r| (*r, FollowerState::new(now)))
                .collect();
        }
        if new_role == Role::Leader {
            self.advance_high_watermark(&st);
        }
        drop(st);
        self.notify();
        changed && matches!(new_role, Role::Follower { leader } if leader != NO_LEADER)
    }

    /// Leader: HW = least log end offset over the ISR, never decreasing.
    fn advance_high_watermark(&self, st: &ReplicaState) {
        let leo = self.log.log_end_offset();
        let mut min = leo;
        for r in st.isr.iter().chain(&st.pending_additions) {
            if *r == self.node_id {
                continue;
            }
            let f = st.followers.get(r).map(|f| f.log_end_offset).unwrap_or(-1);
            min = min.min(f);
        }
        if min >= 0 {
            self.high_watermark.fetch_max(min, Ordering::AcqRel);
        }
    }

    /// Appends a producer's batches as leader.
    pub fn append(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        if !self.is_leader() {
            return Err(LogError::KafkaStorage(format!(
                "{} is not led by this broker",
                self.tp
            )));
        }
        let info = self.log.append_as_leader(records, self.leader_epoch())?;
        if !info.duplicate {
            let st = self.state();
            self.advance_high_watermark(&st);
            drop(st);
            self.notify();
        }
        Ok(info)
    }

    /// Appends a producer's batches as leader and runs `then` with the result before the next
    /// append of this partition (so a follow-up, e.g. the remote WAL hand-off, keeps log order).
    pub fn append_then(
        &self,
        records: &[u8],
        then: impl FnOnce(&Self, &AppendInfo),
    ) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        let info = self.append(records)?;
        then(self, &info);
        Ok(info)
    }

    /// Appends batches fetched from the leader as they are.
    ///
    /// The leader's log start offset may fall inside a batch (DeleteRecords), so the first batch
    /// fetched into an empty log may begin below its start: the log then restarts at that batch's
    /// base offset (Kafka's rule), and moves its start up again with the leader's.
    pub fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        self.append_as_follower_locked(records)
    }

    /// [`Partition::append_as_follower`] with the append order already held.
    fn append_as_follower_locked(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let leo = self.log.log_end_offset();
        if let Some((base, last)) = first_batch_range(records) {
            if leo == self.log.log_start_offset() && base < leo && last >= leo {
                self.restart_log_at(base)?;
            }
        }
        let info = self.log.append_as_follower(records)?;
        self.notify();
        Ok(info)
    }

    /// Appends the whole batches of a fetch response that reach past the log end, and returns
    /// the bytes appended. A response may end in a partial batch, and may begin before the log
    /// end: the leader's read started at the batch holding the offset, or the remote WAL
    /// appended the same records meanwhile. The log end is read under the append order, so a
    /// concurrent WAL append cannot turn the response into a refused overlap.
    pub fn append_fetched(&self, records: &[u8]) -> Result<u64, LogError> {
        let _order = self.append_order();
        let (start, end) = whole_batches_from(records, self.log.log_end_offset());
        if start >= end {
            return Ok(0);
        }
        self.append_as_follower_locked(&records[start..end])?;
        Ok((end - start) as u64)
    }

    /// Like [`Partition::append_as_follower`], only if the first batch starts exactly at the log
    /// end offset (the remote WAL's slices must continue the log, never leave a gap).
    pub fn append_as_follower_at(&self, base: i64, records: &[u8]) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        let leo = self.log.log_end_offset();
        if base != leo {
            return Err(LogError::InvalidRecord(format!(
                "{}: batches start at {base} but the log ends at {leo}",
                self.tp
            )));
        }
        let info = self.log.append_as_follower(records)?;
        self.notify();
        Ok(info)
    }

    /// Leader: every replica's (id, log end offset, in the ISR), this broker included.
    pub fn replica_progress(&self) -> Vec<(BrokerId, i64, bool)> {
        let st = self.state();
        let mut out = vec![(self.node_id, self.log.log_end_offset(), true)];
        for (id, f) in &st.followers {
            out.push((*id, f.log_end_offset, st.isr.contains(id)));
        }
        out
    }

    /// Records appended as leader at `leader_epoch`, ending before `end_offset`: are they
    /// committed? Decided under the state lock, against which a role change and a follower's
    /// high-watermark update are ordered, so a high watermark learnt from a later leader is
    /// never read as this leader's.
    pub fn commit_status(&self, leader_epoch: i32, end_offset: i64) -> CommitStatus {
        let st = self.state();
        if st.role != Role::Leader || self.leader_epoch() != leader_epoch {
            return CommitStatus::LeadershipLost;
        }
        if self.high_watermark() >= end_offset {
            CommitStatus::Committed
        } else {
            CommitStatus::Pending
        }
    }

    /// Follower: HW = min(leader's HW, own log end offset). Ignored once this broker leads (a
    /// fetch response that arrives after the role changed).
    pub fn update_follower_high_watermark(&self, leader_high_watermark: i64) {
        let st = self.state();
        if st.role == Role::Leader {
            return;
        }
        self.leader_high_watermark
            .store(leader_high_watermark, Ordering::Release);
        let hw = leader_high_watermark.min(self.log.log_end_offset());
        let changed = self.high_watermark.swap(hw, Ordering::AcqRel) != hw;
        drop(st);
        if changed {
            self.notify();
        }
    }

    /// Follower: the leader's log start offset moved up (retention or DeleteRecords there), so
    /// this replica's moves as far (bounded by its log end offset), deleting whole segments below.
    pub fn update_follower_log_start_offset(
        &self,
        leader_log_start_offset: i64,
    ) -> Result<(), LogError> {
        let target = leader_log_start_offset.min(self.log.log_end_offset());
        if target > self.log.log_start_offset() {
            self.log.delete_records_before(target)?;
            self.high_watermark
                .fetch_max(self.log.log_start_offset(), Ordering::AcqRel);
            self.notify();
        }
        Ok(())
    }

    /// Follower: the leader's log starts past this log's end (it deleted records this replica
    /// never fetched): restart the log, empty, at the leader's log start offset.
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), LogError> {
        let _order = self.append_order();
        self.validated_epoch.store(-1, Ordering::Release);
        self.restart_log_at(offset)
    }

    /// [`Partition::truncate_fully_and_start_at`] with the append order already held.
    fn restart_log_at(&self, offset: i64) -> Result<(), LogError> {
        self.log.truncate_fully_and_start_at(offset)?;
        self.high_watermark.store(offset, Ordering::Release);
        self.notify();
        Ok(())
    }

    /// Follower: drops everything from `offset` on (divergence from the leader's log).
    pub fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        let _order = self.append_order();
        if offset < self.log.log_end_offset() {
            self.validated_epoch.store(-1, Ordering::Release);
            self.log.truncate_to(offset)?;
            self.high_watermark
                .fetch_min(self.log.log_end_offset(), Ordering::AcqRel);
            self.notify();
        }
        Ok(())
    }

    /// Leader: a follower fetched from `fetch_offset` (so its log end offset is that). Returns
    /// an ISR expansion to propose, if the follower caught up and is outside the ISR.
    pub fn record_follower_fetch(&self, replica: BrokerId, fetch_offset: i64) -> Option<IsrChange> {
        self.record_follower_fetch_at(replica, fetch_offset, Instant::now())
    }

    /// [`Partition::record_follower_fetch`] at `now`.
    pub(crate) fn record_follower_fetch_at(
        &self,
        replica: BrokerId,
        fetch_offset: i64,
        now: Instant,
    ) -> Option<IsrChange> {
        let mut st = self.state();
        if st.role != Role::Leader {
            return None;
        }
        let leo = self.log.log_end_offset();
        if fetch_offset > leo {
            // Past this leader's log (Kafka answers OFFSET_OUT_OF_RANGE): not a position on it.
            return None;
        }
        st.followers
            .entry(replica)
            .or_insert_with(|| FollowerState::new(now))
            .on_fetch(fetch_offset, leo, now);
        let before = self.high_watermark();
        self.advance_high_watermark(&st);
        let change = if isr_change_blocked(&st, now) || !st.replicas.contains(&replica) {
            None
        } else {
            ferry_cluster::election::expand_isr(
                &st.isr,
                replica,
                fetch_offset,
                self.high_watermark(),
                st.epoch_start_offset,
            )
            .map(|new_isr| self.isr_change(&mut st, new_isr, now))
        };
        drop(st);
        if self.high_watermark() != before {
            self.notify();
        }
        change
    }

    /// Leader: the followers a consumer at `fetch_offset` may be sent to (KIP-392): in the ISR
    /// and holding the offset, as (id, log end offset, ms since it last caught up).
    pub fn read_replica_candidates(&self, fetch_offset: i64) -> Vec<(BrokerId, i64, i64)> {
        let st = self.state();
        if st.role != Role::Leader {
            return Vec::new();
        }
        let now = Instant::now();
        st.followers
            .iter()
            .filter(|(id, f)| st.isr.contains(id) && f.log_end_offset >= fetch_offset)
            .map(|(id, f)| (*id, f.log_end_offset, f.ms_since_caught_up(now)))
            .collect()
    }

    /// Leader: whether `replica` has not yet been sent the current high watermark.
    pub fn high_watermark_unsent(&self, replica: BrokerId) -> bool {
        let hw = self.high_watermark();
        self.state()
            .followers
            .get(&replica)
            .is_some_and(|f| f.last_sent_high_watermark < hw)
    }

    /// Leader: a fetch response to `replica` carries `high_watermark`.
    pub fn record_high_watermark_sent(&self, replica: BrokerId, high_watermark: i64) {
        if let Some(f) = self.state().followers.get_mut(&replica) {
            f.last_sent_high_watermark = f.last_sent_high_watermark.max(high_watermark);
        }
    }

    /// Leader: followers of the ISR that have not caught up within `lag_max_ms` leave it.
    pub fn isr_shrink(&self, lag_max_ms: i64) -> Option<IsrChange> {
        self.isr_shrink_at(lag_max_ms, Instant::now())
    }

    /// [`Partition::isr_shrink`] at `now`.
    pub(crate) fn isr_shrink_at(&self, lag_max_ms: i64, now: Instant) -> Option<IsrChange> {
        let mut st = self.state();
        if st.role != Role::Leader {
            return None;
        }
        let leo = self.log.log_end_offset();
        // A follower of a refused expansion that then stopped must not hold the high
        // watermark forever: it stops counting once it lags like an ISR member would leave.
        let lagging: Vec<BrokerId> = st
            .pending_additions
            .iter()
            .copied()
            .filter(|r| {
                st.followers.get(r).is_none_or(|f| {
                    f.log_end_offset < leo && f.ms_since_caught_up(now) > lag_max_ms
                })
            })
            .collect();
        st.pending_additions.retain(|r| !lagging.contains(r));
        if isr_change_blocked(&st, now) {
            return None;
        }
        // A follower at the log end is caught up now.
        let caught_up: BTreeMap<BrokerId, i64> = st
            .followers
            .iter()
            .map(|(id, f)| {
                let age = if f.log_end_offset >= leo {
                    0
                } else {
                    f.ms_since_caught_up(now)
                };
                (*id, -age)
            })
            .collect();
        let new_isr =
            ferry_cluster::election::shrink_isr(&st.isr, self.node_id, &caught_up, 0, lag_max_ms)?;
        Some(self.isr_change(&mut st, new_isr, now))
    }

    fn isr_change(&self, st: &mut ReplicaState, new_isr: Vec<BrokerId>, now: Instant) -> IsrChange {
        st.isr_change_blocked_until = Some(now + ISR_CHANGE_TIMEOUT);
        for r in &new_isr {
            if !st.isr.contains(r) && !st.pending_additions.contains(r) {
                st.pending_additions.push(*r);
            }
        }
        IsrChange {
            expands: new_isr.len() > st.isr.len(),
            topic_id: self.topic_id,
            partition: self.tp.partition,
            leader: self.node_id,
            leader_epoch: self.leader_epoch(),
            partition_epoch: st.partition_epoch,
            current_isr: st.isr.clone(),
            new_isr,
        }
    }

    /// How the proposal of `change` ended. Nothing happens if the image already showed a new
    /// state of the partition (that decided the change, and a newer one may be in flight).
    ///
    /// Only [`IsrOutcome::Refused`] drops the change's joining followers from the high
    /// watermark: the controller then said, at the current partition epoch, that it did not
    /// apply it. After any other outcome the change may have been committed (an answer lost, an
    /// earlier duplicate), so they count until the image shows a new partition state, or until
    /// they lag (`isr_shrink`).
    pub fn isr_change_finished(&self, change: &IsrChange, outcome: IsrOutcome) {
        self.isr_change_finished_at(change, outcome, Instant::now());
    }

    /// [`Partition::isr_change_finished`] at `now`.
    pub(crate) fn isr_change_finished_at(
        &self,
        change: &IsrChange,
        outcome: IsrOutcome,
        now: Instant,
    ) {
        let mut st = self.state();
        if st.role != Role::Leader
            || st.partition_epoch != change.partition_epoch
            || self.leader_epoch() != change.leader_epoch
        {
            return;
        }
        let wait = match outcome {
            IsrOutcome::Committed | IsrOutcome::AwaitImage => ISR_CHANGE_TIMEOUT,
            IsrOutcome::Refused => {
                st.pending_additions
                    .retain(|r| !change.new_isr.contains(r) || change.current_isr.contains(r));
                ISR_RETRY_BACKOFF
            }
            IsrOutcome::Unavailable => ISR_RETRY_BACKOFF,
        };
        st.isr_change_blocked_until = Some(now + wait);
    }

    /// Committed data only (up to the high watermark), up to `max_bytes` of whole batches.
    ///
    /// A log read stops at the end of a segment; this keeps reading the next segments until
    /// `max_bytes` is used up, so that a consumer never receives a response made only of the
    /// (possibly empty) tail of one segment while more data follows, which clients such as
    /// librdkafka report as a message too large to fetch.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FetchData, LogError> {
        self.read_up_to(offset, max_bytes, min_one_batch, self.high_watermark())
    }

    /// Like [`Partition::read`] for a follower's fetch: everything up to the log end offset.
    pub fn read_for_replica(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FetchData, LogError> {
        self.read_up_to(offset, max_bytes, min_one_batch, self.log.log_end_offset())
    }

    fn read_up_to(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        high_watermark: i64,
    ) -> Result<FetchData, LogError> {
        let first = self
            .log
            .read(offset, max_bytes, high_watermark, min_one_batch)?;
        let mut next = match last_offset_of(&first.records) {
            Some(last) => last + 1,
            None => return Ok(first),
        };
        if first.records.len() >= max_bytes || next >= high_watermark {
            return Ok(first);
        }
        let mut combined = bytes::BytesMut::from(&first.records[..]);
        while combined.len() < max_bytes && next < high_watermark {
            let more = self
                .log
                .read(next, max_bytes - combined.len(), high_watermark, false)?;
            let Some(last) = last_offset_of(&more.records) else {
                break;
            };
            combined.extend_from_slice(&more.records);
            if last < next {
                break;
            }
            next = last + 1;
        }
        Ok(FetchData {
            records: combined.freeze(),
            ..first
        })
    }
}

/// Whether an ISR change in flight or just refused holds back the next one.
fn isr_change_blocked(st: &ReplicaState, now: Instant) -> bool {
    st.isr_change_blocked_until.is_some_and(|until| now < until)
}

/// The byte range `[start, end)` of `records` made of whole batches, from the first whose last
/// offset reaches `log_end`; `start == end` when there is none.
fn whole_batches_from(records: &[u8], log_end: i64) -> (usize, usize) {
    let mut start = None;
    let mut end = 0usize;
    for b in whole_batches(records) {
        if start.is_none() && b.last_offset >= log_end {
            start = Some(b.bytes.start);
        }
        end = b.bytes.end;
    }
    (start.unwrap_or(end), end)
}

/// The base and last offsets of the first whole batch in `records`.
fn first_batch_range(records: &[u8]) -> Option<(i64, i64)> {
    whole_batches(records)
        .next()
        .map(|b| (b.base_offset, b.last_offset))
}

/// The last offset of the last whole batch in `records`.
fn last_offset_of(records: &[u8]) -> Option<i64> {
    whole_batches(records).last().map(|b| b.last_offset)
}

/// Told of replication events as they happen, so that a layer above (the remote WAL) can follow
/// them without the replica fetcher or the handlers naming it.
pub trait ReplicationObserver: Send + Sync {
    /// Leader: `info` was appended to `p` by a producer (called before the next append of `p`,
    /// so an observer sees appends in log order).
    fn on_leader_append(&self, p: &Partition, info: &AppendInfo);
    /// Leader: a follower reported its log end (`fetch_offset`) without asking for records, as
    /// remote-WAL followers do. Returns whether to answer with records after all (the classic
    /// fetch), because the follower is behind what the observer's path can bring it.
    fn on_replica_report(&self, p: &Partition, replica: BrokerId, fetch_offset: i64) -> bool;
    /// Follower: the classic fetch appended `bytes` to `p`.
    fn on_classic_follower_append(&self, p: &Partition, bytes: u64);
    /// Follower: the leader answered a report of progress made on the WAL path, `elapsed` after
    /// that progress.
    fn on_wal_progress_reported(&self, elapsed: Duration);
}

/// An observer that ignores everything (a broker without a remote WAL, tests).
#[derive(Debug, Default)]
pub struct NoObserver;

impl ReplicationObserver for NoObserver {
    fn on_leader_append(&self, _: &Partition, _: &AppendInfo) {}
    fn on_replica_report(&self, _: &Partition, _: BrokerId, _: i64) -> bool {
        true
    }
    fn on_classic_follower_append(&self, _: &Partition, _: u64) {}
    fn on_wal_progress_reported(&self, _: Duration) {}
}

pub struct ReplicaManager {
    node_id: BrokerId,
    logs: LogManager,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    /// See [`ReplicaManager::image_apply_guard`].
    image_apply: Mutex<()>,
}

/// What [`ReplicaManager::apply_image`] changed.
#[derive(Default)]
pub struct ImageChanges {
    /// Partitions that became followers of a new leader or leader epoch.
    pub new_followers: Vec<Arc<Partition>>,
    /// Topics whose local logs were deleted (gone from the image).
    pub deleted_topics: Vec<String>,
}

impl ReplicaManager {
    pub fn new(logs: LogManager, node_id: BrokerId) -> Self {
        Self {
            node_id,
            logs,
            partitions: RwLock::new(HashMap::new()),
            image_apply: Mutex::new(()),
        }
    }

    /// Held while a metadata image is applied to the replicas and while a just-created topic's
    /// logs are opened: an image read before the topic's creation committed, applied after its
    /// logs were opened, would delete them as a deleted topic's (a produce to the new topic then
    /// timed out). So both read the newest image under this guard.
    pub fn image_apply_guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.image_apply.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn node_id(&self) -> BrokerId {
        self.node_id
    }

    pub fn logs(&self) -> &LogManager {
        &self.logs
    }

    pub fn partition(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.read().get(tp).cloned()
    }

    pub fn partition_of(&self, topic: &str, partition: i32) -> Option<Arc<Partition>> {
        self.partition(&TopicPartition::new(topic, partition))
    }

    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.read().values().cloned().collect()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<TopicPartition, Arc<Partition>>> {
        self.partitions.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<TopicPartition, Arc<Partition>>> {
        self.partitions.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (or creates) the logs of the partitions of `topic` that have this broker among
    /// their replicas, and takes their leader, epoch and ISR from the image. Returns the
    /// partitions that became followers of a new leader or epoch.
    pub fn ensure_topic(
        &self,
        topic: &TopicImage,
        config: LogConfig,
    ) -> Result<Vec<Arc<Partition>>, LogError> {
        let mut new_followers = Vec::new();
        for (index, state) in topic.partitions.iter().enumerate() {
            if !state.replicas.contains(&self.node_id) {
                continue;
            }
            let p = i32::try_from(index).unwrap_or(i32::MAX);
            let tp = TopicPartition::new(topic.name.clone(), p);
            let existing = self.read().get(&tp).cloned();
            let partition = match existing {
                Some(existing) if existing.topic_id == topic.id => {
                    // Altered topic configs reach every replica through the image.
                    if existing.log.config() != config {
                        existing.log.update_config(config.clone());
                    }
                    existing
                }
                _ => {
                    let log = self.logs.get_or_create(&tp, config.clone())?;
                    // A checkpoint names partitions by name: a recreated topic must not reuse it.
                    let checkpointed = existing
                        .is_none()
                        .then(|| self.logs.checkpointed_high_watermark(&tp))
                        .flatten();
                    let fresh = Arc::new(Partition::new(
                        tp.clone(),
                        topic.id,
                        log,
                        self.node_id,
                        checkpointed,
                    ));
                    self.write().entry(tp).or_insert(fresh).clone()
                }
            };
            if partition.apply(state) {
                new_followers.push(partition);
            }
        }
        Ok(new_followers)
    }

    /// Follows the image: opens logs of new partitions of this broker, takes leaders, epochs and
    /// ISRs, and deletes the logs of topics no longer in the image. `config_of` gives the log
    /// config of a topic.
    pub fn apply_image(
        &self,
        image: &Image,
        config_of: impl Fn(&TopicImage) -> LogConfig,
    ) -> ImageChanges {
        let mut changes = ImageChanges::default();
        for topic in image.topics.values() {
            match self.ensure_topic(topic, config_of(topic)) {
                Ok(mut f) => changes.new_followers.append(&mut f),
                Err(e) => {
                    tracing::error!(topic = %topic.name, error = %e, "cannot open partition logs")
                }
            }
        }
        let gone: HashSet<String> = self
            .read()
            .values()
            .filter(|p| image.topic(&p.tp.topic).is_none_or(|t| t.id != p.topic_id))
            .map(|p| p.tp.topic.clone())
            .collect();
        for topic in gone {
            match self.delete_topic(&topic) {
                Ok(()) => changes.deleted_topics.push(topic),
                Err(e) => {
                    tracing::error!(topic = %topic, error = %e, "cannot delete partition logs")
                }
            }
        }
        changes
    }

    pub fn update_topic_config(&self, topic: &str, config: &LogConfig) {
        for p in self.read().values().filter(|p| p.tp.topic == topic) {
            p.log.update_config(config.clone());
        }
    }

    /// Stops hosting a topic's partitions and deletes their logs.
    pub fn delete_topic(&self, topic: &str) -> Result<(), LogError> {
        let removed: Vec<Arc<Partition>> = {
            let mut map = self.write();
            let keys: Vec<TopicPartition> =
                map.keys().filter(|tp| tp.topic == topic).cloned().collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        for p in removed {
            // Wake fetchers so they notice the partition is gone.
            p.end_offset.send_replace(-1);
            self.logs.delete(&p.tp)?;
        }
        Ok(())
    }

    /// Partitions led here whose ISR is smaller than their replica set.
    pub fn under_replicated_count(&self) -> usize {
        self.read()
            .values()
            .filter(|p| p.is_under_replicated())
            .count()
    }

    /// Writes every log dir's `replication-offset-checkpoint` with the current high watermarks.
    pub fn checkpoint_high_watermarks(&self) -> Result<(), LogError> {
        let partitions = self.read().clone();
        self.logs
            .checkpoint_high_watermarks(|tp| partitions.get(tp).map(|p| p.high_watermark()))
    }

    /// Checkpoints the high watermarks, then closes every log.
    pub fn shutdown(&self) -> Result<(), LogError> {
        if let Err(e) = self.checkpoint_high_watermarks() {
            tracing::warn!(error = %e, "high-watermark checkpoint at shutdown failed");
        }
        self.logs.shutdown()
    }
}

/// [`Partition::diverging_epoch`] over a leader's epoch history `end_for_epoch` (epoch → the
/// largest epoch not above it and where it ends): where a follower whose last batch has epoch
/// `last_fetched_epoch` and whose log ends at `fetch_offset` stops matching.
pub fn divergence(
    end_for_epoch: impl Fn(i32) -> Option<(i32, i64)>,
    fetch_offset: i64,
    last_fetched_epoch: i32,
) -> Option<(i32, i64)> {
    if last_fetched_epoch < 0 {
        return None;
    }
    let (epoch, end_offset) = end_for_epoch(last_fetched_epoch)?;
    (epoch != last_fetched_epoch || end_offset < fetch_offset).then_some((epoch, end_offset))
}

#[cfg(test)]
#[path = "replica_manager_test.rs"]
mod tests;
