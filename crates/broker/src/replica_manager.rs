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
//! The rules (role changes, ISR proposals, the high watermark over the ISR, the commit rule) are
//! `ferry_replication`'s [`ReplicaState`], pure functions of (state, event, now); a
//! [`Partition`] holds one under its state lock next to the log, feeds it the log end offset
//! and the time, and publishes what changed.
//!
//! On a single node every partition is led here and the in-sync replica set is this broker alone,
//! so the high watermark is the log end offset. Every change of the log end offset or the high
//! watermark is published on the partition's watch channel; long-polling fetches and acks=all
//! produce requests wait on it.
//!
//! An I/O error of a log (not a full disk) is reported on the [`LogDirFailureChannel`]; the
//! broker's failure task then has [`ReplicaManager::handle_log_dir_failures`] take the dir
//! offline: its partitions stop being hosted (fetchers stop, waiters wake, requests get
//! KAFKA_STORAGE_ERROR) and are reported to the controller with every heartbeat until restart.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use ferry_cluster::image::{PartitionState, TopicImage};
use ferry_cluster::{BrokerId, Image, OfflineReplica};
use ferry_common::TopicPartition;
use ferry_log::batch::whole_batches;
use ferry_log::{AppendInfo, FetchData, LogConfig, LogError, LogManager, PartitionLog};
use ferry_replication::divergence;
use ferry_replication::ReplicaState;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use uuid::Uuid;

// The replication rules' vocabulary is part of `Partition`'s API.
pub use ferry_replication::{CommitStatus, IsrChange, IsrOutcome, Role};

/// One partition hosted by this broker.
pub struct Partition {
    pub tp: TopicPartition,
    pub topic_id: Uuid,
    pub log: Arc<PartitionLog>,
    node_id: BrokerId,
    /// The state's leader epoch, copied under the state lock in `apply`, so that produce and
    /// fetch read it without taking the lock.
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
    /// hand-off; follower: appends checked against the log end), and role changes with them
    /// (`apply`), as Kafka's `leaderIsrUpdateLock`: a leader append, its epoch stamp and its
    /// hand-off all happen under one role and epoch.
    append_order: Mutex<()>,
    /// Where this partition's log reports that its disk failed.
    failures: Arc<LogDirFailureChannel>,
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
        failures: Arc<LogDirFailureChannel>,
    ) -> Self {
        let leo = log.log_end_offset();
        let high_watermark = checkpointed_high_watermark
            .unwrap_or(0)
            .clamp(log.log_start_offset(), leo);
        let (end_offset, _) = watch::channel(leo);
        let state = ReplicaState::new(topic_id, tp.partition, node_id, leo);
        Self {
            tp,
            topic_id,
            node_id,
            // Neither leader nor follower until the image says (the first apply is a change).
            leader_epoch: AtomicI32::new(-1),
            high_watermark: AtomicI64::new(high_watermark),
            state: Mutex::new(state),
            log,
            end_offset,
            wal_mode: AtomicBool::new(false),
            leader_high_watermark: AtomicI64::new(-1),
            validated_epoch: AtomicI32::new(-1),
            append_order: Mutex::new(()),
            failures,
        }
    }

    /// Passes a result of the log through, reporting an error that says the disk failed.
    pub(crate) fn checked<T>(&self, result: Result<T, LogError>) -> Result<T, LogError> {
        if let Err(e) = &result {
            self.failures.report(&self.log, e);
        }
        result
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
        self.state().leader_epoch_start()
    }

    pub fn role(&self) -> Role {
        self.state().role()
    }

    pub fn is_leader(&self) -> bool {
        self.role() == Role::Leader
    }

    /// The leader as this broker knows it (-1: none).
    pub fn leader(&self) -> BrokerId {
        self.state().leader()
    }

    pub fn isr(&self) -> Vec<BrokerId> {
        self.state().isr().to_vec()
    }

    pub fn replicas(&self) -> Vec<BrokerId> {
        self.state().replicas().to_vec()
    }

    /// Whether the image lists this broker in the partition's ISR.
    pub fn is_in_sync(&self) -> bool {
        self.state().isr().contains(&self.node_id)
    }

    /// Led here with an ISR smaller than the replica set.
    pub fn is_under_replicated(&self) -> bool {
        self.state().is_under_replicated()
    }

    /// Offsets below this are committed and visible to consumers.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.load(Ordering::Acquire)
    }

    /// Last stable offset: the high watermark, held back at the first offset of the oldest
    /// transaction still open (read_committed consumers read up to it).
    pub fn last_stable_offset(&self) -> i64 {
        // The high watermark first: a transaction whose marker the log has but the ISR does
        // not is still unstable, and the log alone cannot tell (it ends at its marker).
        let high_watermark = self.high_watermark();
        self.log.last_stable_offset(high_watermark)
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
    ///
    /// Under the append order: a leader append that passed its leader check finishes, hand-off
    /// included, under the role and epoch it was checked with. Without it, an append stamped
    /// at epoch 3 was handed to the remote WAL as epoch 4 by a leader just demoted, and
    /// followers of epoch 4 appended the old leader's uncommitted batch.
    fn apply(&self, image: &PartitionState) -> bool {
        let _order = self.append_order();
        let mut st = self.state();
        let new_follower = st.apply(image, self.log.log_end_offset(), Instant::now());
        self.leader_epoch
            .store(st.leader_epoch(), Ordering::Release);
        if st.role() == Role::Leader {
            self.advance_high_watermark(&st);
        }
        drop(st);
        self.notify();
        new_follower
    }

    /// Leader: HW = least log end offset over the ISR, never decreasing.
    fn advance_high_watermark(&self, st: &ReplicaState) {
        if let Some(hw) = st.isr_high_watermark(self.log.log_end_offset()) {
            self.high_watermark.fetch_max(hw, Ordering::AcqRel);
        }
    }

    /// Appends a producer's batches as leader.
    pub fn append(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        self.append_locked(records)
    }

    /// [`Partition::append`] with the append order already held (no role change meanwhile).
    fn append_locked(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        self.check_leader()?;
        let info = self.checked(self.log.append_as_leader(records, self.leader_epoch()))?;
        self.appended_as_leader(&info);
        Ok(info)
    }

    fn check_leader(&self) -> Result<(), LogError> {
        if self.is_leader() {
            Ok(())
        } else {
            Err(LogError::KafkaStorage(format!(
                "{} is not led by this broker",
                self.tp
            )))
        }
    }

    /// Leader of an epoch the leader epoch cache does not have yet: records that the epoch
    /// starts at the log end, as Kafka's `makeLeader` does, so that the epoch's first produce
    /// writes and fsyncs no file (on a topic of 1,000 partitions that was 1,000 new files in
    /// the middle of the producers' first round).
    fn needs_epoch_start(&self) -> bool {
        self.is_leader() && self.log.latest_epoch() < Some(self.leader_epoch())
    }

    /// See [`Partition::needs_epoch_start`]. The log end is read under the append order, so a
    /// follower append still landing from the previous leader counts as before the epoch.
    fn checkpoint_epoch_start(&self) {
        let _order = self.append_order();
        let epoch = {
            let st = self.state();
            if st.role() != Role::Leader {
                return;
            }
            st.leader_epoch()
        };
        if let Err(e) = self
            .log
            .assign_epoch_start(epoch, self.log.log_end_offset())
        {
            tracing::warn!(partition = %self.tp, error = %e, "could not persist the leader epoch cache");
        }
    }

    /// After a leader append: the high watermark may move (a lone replica) and waiters wake.
    fn appended_as_leader(&self, info: &AppendInfo) {
        if !info.duplicate {
            let st = self.state();
            self.advance_high_watermark(&st);
            drop(st);
            self.notify();
        }
    }

    /// Writes a transaction marker as leader (WriteTxnMarkers) and runs `then` with the result
    /// before the next append, in log order with the producers' appends.
    pub fn append_marker_then(
        &self,
        marker: &ferry_log::TxnMarker,
        then: impl FnOnce(&Self, &AppendInfo),
    ) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        self.check_leader()?;
        let info = self.checked(self.log.append_control_marker(marker, self.leader_epoch()))?;
        self.appended_as_leader(&info);
        then(self, &info);
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
        let info = self.append_locked(records)?;
        then(self, &info);
        Ok(info)
    }

    /// Appends batches fetched from the leader as they are.
    ///
    /// The leader's log start offset may fall inside a batch (DeleteRecords), so the first batch
    /// fetched into an empty log may begin below its start: the log then restarts at that batch's
    /// base offset (Kafka's rule), and moves its start up again with the leader's.
    ///
    /// Tests only: it has no role check. The fetchers append through
    /// [`Partition::append_fetched`] and [`Partition::append_as_follower_at`], which refuse once
    /// this broker leads the partition.
    #[cfg(test)]
    pub(crate) fn append_as_follower(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let _order = self.append_order();
        self.append_as_follower_locked(records)
    }

    /// A follower's append with the append order already held.
    fn append_as_follower_locked(&self, records: &[u8]) -> Result<AppendInfo, LogError> {
        let leo = self.log.log_end_offset();
        if let Some((base, last)) = first_batch_range(records) {
            if leo == self.log.log_start_offset() && base < leo && last >= leo {
                self.restart_log_at(base)?;
            }
        }
        let info = self.checked(self.log.append_as_follower(records))?;
        self.notify();
        Ok(info)
    }

    /// Appends the whole batches of a fetch response that reach past the log end, and returns
    /// the bytes appended. A response may end in a partial batch, and may begin before the log
    /// end: the leader's read started at the batch holding the offset, or the remote WAL
    /// appended the same records meanwhile. The log end is read under the append order, so a
    /// concurrent WAL append cannot turn the response into a refused overlap. Nothing is
    /// appended once this broker leads the partition: a response to a fetch sent before its
    /// election is from the previous leader's epoch, and the new epoch starts at the log end as
    /// it was when the epoch was checkpointed (Kafka stops a partition's fetcher before
    /// `makeLeader` for the same reason). Nor once the partition has left `leader_epoch`, the
    /// epoch the fetch was sent at: the new epoch's leader may not have these records, and its
    /// truncation check may already have run (Kafka drops such a response as well).
    pub fn append_fetched(&self, leader_epoch: i32, records: &[u8]) -> Result<u64, LogError> {
        let _order = self.append_order();
        if self.is_leader() || self.leader_epoch() != leader_epoch {
            return Ok(0);
        }
        let (start, end) = whole_batches_from(records, self.log.log_end_offset());
        if start >= end {
            return Ok(0);
        }
        self.append_as_follower_locked(&records[start..end])?;
        Ok((end - start) as u64)
    }

    /// A follower's append (as [`Partition::append_fetched`]), only if the first batch starts
    /// exactly at the log end offset (the remote WAL's slices must continue the log, never
    /// leave a gap), and only while the partition is at `leader_epoch`, the epoch the slice was
    /// planned at, with its log checked against that epoch's leader. The
    /// records are a remote-WAL slice whose CRC-32C matched, so their batch CRCs are not
    /// checked a second time. They come as `parts` laid end to end (the pieces the slice's GET
    /// body arrived in), written as they are.
    pub fn append_as_follower_at(
        &self,
        leader_epoch: i32,
        parts: &[&[u8]],
    ) -> Result<AppendInfo, LogError> {
        let first = ferry_log::first_batch_header(parts).ok_or_else(|| {
            LogError::InvalidRecord(format!("{}: a slice shorter than a batch header", self.tp))
        })?;
        let base = first.base_offset;
        let _order = self.append_order();
        if self.is_leader() {
            // Checked under the append order, as in `append_fetched`.
            return Err(LogError::InvalidRecord(format!(
                "{}: led here since the slice was planned",
                self.tp
            )));
        }
        // A new epoch since the plan: its truncation check may already have run, and would not
        // see this slice of the old leader's.
        if self.leader_epoch() != leader_epoch || !self.log_validated() {
            return Err(LogError::InvalidRecord(format!(
                "{}: planned at leader epoch {leader_epoch}, now at {} (log checked: {})",
                self.tp,
                self.leader_epoch(),
                self.log_validated()
            )));
        }
        let leo = self.log.log_end_offset();
        if base != leo {
            return Err(LogError::InvalidRecord(format!(
                "{}: batches start at {base} but the log ends at {leo}",
                self.tp
            )));
        }
        // Epochs never go backwards along a log: a batch of an older epoch than the log's last
        // is an old leader's that the current one does not have. Refused, the range goes to
        // the classic fetch, which reads the leader's own log.
        if let Some(latest) = self.log.latest_epoch() {
            if first.partition_leader_epoch < latest {
                return Err(LogError::InvalidRecord(format!(
                    "{}: a batch of leader epoch {} at {base} follows epoch {latest}",
                    self.tp, first.partition_leader_epoch
                )));
            }
        }
        let info = self.checked(
            self.log
                .append_as_follower_parts(parts, ferry_log::BatchCrcs::AlreadyVerified),
        )?;
        self.notify();
        Ok(info)
    }

    /// Leader: every replica's (id, log end offset, in the ISR), this broker included.
    pub fn replica_progress(&self) -> Vec<(BrokerId, i64, bool)> {
        self.state().replica_progress(self.log.log_end_offset())
    }

    /// Records appended as leader at `leader_epoch`, ending before `end_offset`: are they
    /// committed? Decided under the state lock, against which a role change and a follower's
    /// high-watermark update are ordered, so a high watermark learnt from a later leader is
    /// never read as this leader's.
    pub fn commit_status(&self, leader_epoch: i32, end_offset: i64) -> CommitStatus {
        let st = self.state();
        st.commit_status(leader_epoch, end_offset, self.high_watermark())
    }

    /// Follower: HW = min(leader's HW, own log end offset). Ignored once this broker leads (a
    /// fetch response that arrives after the role changed).
    pub fn update_follower_high_watermark(&self, leader_high_watermark: i64) {
        let st = self.state();
        if st.role() == Role::Leader {
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
            self.checked(self.log.delete_records_before(target))?;
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

    /// Follower of a tiered partition whose leader answered OFFSET_MOVED_TO_TIERED_STORAGE:
    /// restart the log, empty, at `offset` (the end of the tier's segment below the leader's
    /// local log start) with that segment's leader epochs and producer state.
    pub fn truncate_fully_and_start_with(
        &self,
        offset: i64,
        epochs: &[(i32, i64)],
        producer_snapshot: Option<&[u8]>,
    ) -> Result<(), LogError> {
        let _order = self.append_order();
        self.validated_epoch.store(-1, Ordering::Release);
        self.checked(
            self.log
                .truncate_fully_and_start_with(offset, epochs, producer_snapshot),
        )?;
        self.high_watermark.store(offset, Ordering::Release);
        self.notify();
        Ok(())
    }

    /// [`Partition::truncate_fully_and_start_at`] with the append order already held.
    fn restart_log_at(&self, offset: i64) -> Result<(), LogError> {
        self.checked(self.log.truncate_fully_and_start_at(offset))?;
        self.high_watermark.store(offset, Ordering::Release);
        self.notify();
        Ok(())
    }

    /// Follower: drops everything from `offset` on (divergence from the leader's log). At or
    /// past the log end no batch goes, but an epoch this replica led without appending to does
    /// (see `PartitionLog::truncate_to`).
    pub fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        let _order = self.append_order();
        if offset >= self.log.log_end_offset() {
            return self.checked(self.log.truncate_to(offset));
        }
        self.validated_epoch.store(-1, Ordering::Release);
        self.checked(self.log.truncate_to(offset))?;
        self.high_watermark
            .fetch_min(self.log.log_end_offset(), Ordering::AcqRel);
        self.notify();
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
        if !st.on_follower_fetch(replica, fetch_offset, self.log.log_end_offset(), now) {
            return None;
        }
        let before = self.high_watermark();
        self.advance_high_watermark(&st);
        let change = st.propose_expansion(replica, fetch_offset, self.high_watermark(), now);
        drop(st);
        if self.high_watermark() != before {
            self.notify();
        }
        change
    }

    /// Leader: the followers a consumer at `fetch_offset` may be sent to (KIP-392): in the ISR
    /// and holding the offset, as (id, log end offset, ms since it last caught up).
    pub fn read_replica_candidates(&self, fetch_offset: i64) -> Vec<(BrokerId, i64, i64)> {
        self.state()
            .read_replica_candidates(fetch_offset, Instant::now())
    }

    /// Leader: whether `replica` has not yet been sent the current high watermark.
    pub fn high_watermark_unsent(&self, replica: BrokerId) -> bool {
        let hw = self.high_watermark();
        self.state().high_watermark_unsent(replica, hw)
    }

    /// Leader: a fetch response to `replica` carries `high_watermark`.
    pub fn record_high_watermark_sent(&self, replica: BrokerId, high_watermark: i64) {
        self.state()
            .record_high_watermark_sent(replica, high_watermark);
    }

    /// Leader: followers of the ISR that have not caught up within `lag_max_ms` leave it.
    pub fn isr_shrink(&self, lag_max_ms: i64) -> Option<IsrChange> {
        self.isr_shrink_at(lag_max_ms, Instant::now())
    }

    /// [`Partition::isr_shrink`] at `now`.
    pub(crate) fn isr_shrink_at(&self, lag_max_ms: i64, now: Instant) -> Option<IsrChange> {
        let log_end = self.log.log_end_offset();
        self.state().propose_shrink(log_end, lag_max_ms, now)
    }

    /// Leader: for each replica `change` drops, (id, its log end offset, ms since it last
    /// caught up), the facts an operator needs to see why it left.
    pub fn dropped_followers(&self, change: &IsrChange) -> Vec<(BrokerId, i64, i64)> {
        let now = Instant::now();
        let state = self.state();
        change
            .current_isr
            .iter()
            .filter(|r| !change.new_isr.contains(r))
            .map(|r| {
                let (leo, since) = state.follower_lag(*r, now).unwrap_or((-1, -1));
                (*r, leo, since)
            })
            .collect()
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
        self.state().isr_change_finished(change, outcome, now);
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

    /// Like [`Partition::read`] for a read_committed consumer: up to the last stable offset,
    /// with the aborted transactions that overlap what was read (the consumer drops their
    /// records).
    pub fn read_committed(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<(FetchData, Vec<ferry_log::AbortedTxn>), LogError> {
        let last_stable = self.last_stable_offset();
        let data = self.read_up_to(offset, max_bytes, min_one_batch, last_stable)?;
        let upper = last_offset_of(&data.records).map_or(offset, |last| last + 1);
        let aborted = if upper > offset {
            self.log.collect_aborted_transactions(offset, upper)
        } else {
            Vec::new()
        };
        Ok((data, aborted))
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
        let first =
            self.checked(
                self.log
                    .read(offset, max_bytes, high_watermark, min_one_batch),
            )?;
        let mut next = match last_offset_of(&first.records) {
            Some(last) => last + 1,
            None => return Ok(first),
        };
        if first.records.len() >= max_bytes || next >= high_watermark {
            return Ok(first);
        }
        // One segment's read ends at the segment's end or at the last whole batch that fits.
        // Only in the first case does the next read find more, and only then are the reads
        // joined (a copy); a read that ends with a batch too big to fit costs one header read.
        let mut more_parts: Vec<bytes::Bytes> = Vec::new();
        let mut len = first.records.len();
        while len < max_bytes && next < high_watermark {
            let more = self.checked(self.log.read(next, max_bytes - len, high_watermark, false))?;
            let Some(last) = last_offset_of(&more.records) else {
                break;
            };
            len += more.records.len();
            more_parts.push(more.records);
            if last < next {
                break;
            }
            next = last + 1;
        }
        if more_parts.is_empty() {
            return Ok(first);
        }
        let parts: Vec<bytes::Bytes> = std::iter::once(first.records.clone())
            .chain(more_parts)
            .collect();
        Ok(FetchData {
            records: ferry_common::join_pieces(&parts),
            ..first
        })
    }
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

/// Where partitions report that their log dir's disk failed (Kafka's `LogDirFailureChannel`):
/// the first report of a dir is queued and wakes the broker's failure task, which takes the
/// dir offline ([`ReplicaManager::handle_log_dir_failures`]). A full disk is not reported
/// (`ErrorKind::DiskFull`): the same write succeeds once space is freed.
#[derive(Debug, Default)]
pub struct LogDirFailureChannel {
    /// Dirs reported and not yet handled, with the first error of each.
    pending: Mutex<Vec<(PathBuf, String)>>,
    wake: Notify,
}

impl LogDirFailureChannel {
    /// Reports `e` from `log` if it says the disk failed; a dir already reported is not
    /// queued again.
    pub fn report(&self, log: &PartitionLog, e: &LogError) {
        if !ferry_log::is_dir_failure(e) {
            return;
        }
        let Some(dir) = LogManager::dir_of(log) else {
            return;
        };
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if pending.iter().any(|(d, _)| *d == dir) {
            return;
        }
        pending.push((dir, e.to_string()));
        drop(pending);
        self.wake.notify_one();
    }

    /// Wakes the failure task (the log manager marked a dir offline itself).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Waits for a report (or a wake-up given before the call).
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    fn take(&self) -> Vec<(PathBuf, String)> {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

pub struct ReplicaManager {
    node_id: BrokerId,
    logs: LogManager,
    partitions: RwLock<HashMap<TopicPartition, Arc<Partition>>>,
    failures: Arc<LogDirFailureChannel>,
    /// Partitions of this broker whose log dir went offline, by topic id: no longer hosted,
    /// reported to the controller until restart.
    offline: RwLock<HashMap<TopicPartition, Uuid>>,
    /// The offline dirs [`Self::handle_log_dir_failures`] has returned.
    handled_dirs: Mutex<HashSet<PathBuf>>,
    /// See [`ReplicaManager::image_apply_guard`].
    image_apply: Mutex<()>,
    /// Replicas moving to another log dir (AlterReplicaLogDirs).
    pub log_dir_moves: crate::log_dir_moves::LogDirMoves,
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
            failures: Arc::new(LogDirFailureChannel::default()),
            offline: RwLock::new(HashMap::new()),
            handled_dirs: Mutex::new(HashSet::new()),
            image_apply: Mutex::new(()),
            log_dir_moves: Default::default(),
        }
    }

    /// Where this broker's partitions report failed disks.
    pub fn failures(&self) -> &Arc<LogDirFailureChannel> {
        &self.failures
    }

    /// Takes the dirs reported failed offline (Kafka's `handleLogDirFailure`): their partitions
    /// are no longer hosted, their waiters wake, and they are offline until restart. Dirs the
    /// log manager marked itself (retention, checkpoints) are handled too. Returns the dirs
    /// that went offline now; the caller stops their fetchers and tells the controller.
    pub fn handle_log_dir_failures(&self) -> Vec<PathBuf> {
        for (dir, cause) in self.failures.take() {
            self.logs.mark_dir_offline(&dir, &cause);
        }
        // Marked here, by the log manager itself, or at start-up: each is returned once.
        let newly: Vec<PathBuf> = {
            let mut handled = self.handled_dirs.lock().unwrap_or_else(|p| p.into_inner());
            self.logs
                .offline_dirs()
                .into_iter()
                .map(|(dir, _)| dir)
                .filter(|dir| handled.insert(dir.clone()))
                .collect()
        };
        let gone: Vec<Arc<Partition>> = {
            let mut map = self.write();
            let keys: Vec<TopicPartition> = map
                .keys()
                .filter(|tp| self.logs.is_offline(tp))
                .cloned()
                .collect();
            keys.iter().filter_map(|k| map.remove(k)).collect()
        };
        if gone.is_empty() {
            return newly;
        }
        {
            let mut offline = self.offline.write().unwrap_or_else(|p| p.into_inner());
            for p in &gone {
                offline.insert(p.tp.clone(), p.topic_id);
            }
        }
        for p in &gone {
            // Wake long-polling fetches and acks=all produces: the partition is gone from here.
            p.end_offset.send_replace(-1);
        }
        tracing::warn!(partitions = gone.len(), dirs = ?newly, "stopped hosting the partitions of failed log dirs");
        newly
    }

    /// Whether `tp`'s replica here was in a log dir that went offline.
    pub fn is_offline(&self, tp: &TopicPartition) -> bool {
        self.offline
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(tp)
    }

    /// This broker's offline replicas, for the heartbeat.
    pub fn offline_replicas(&self) -> Vec<OfflineReplica> {
        let offline = self.offline.read().unwrap_or_else(|p| p.into_inner());
        let set: BTreeSet<OfflineReplica> = offline
            .iter()
            .map(|(tp, topic_id)| OfflineReplica {
                topic_id: *topic_id,
                partition: tp.partition,
            })
            .collect();
        set.into_iter().collect()
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
    /// partitions that became followers of a new leader or epoch. A partition whose log cannot
    /// be opened does not keep the others offline: they are opened, then its error returned.
    pub fn ensure_topic(
        &self,
        topic: &TopicImage,
        config: LogConfig,
    ) -> Result<Vec<Arc<Partition>>, LogError> {
        self.ensure_topic_skipping(topic, config, &HashSet::new())
    }

    /// [`Self::ensure_topic`] leaving out the partitions in `skip` (whose logs failed to open).
    fn ensure_topic_skipping(
        &self,
        topic: &TopicImage,
        config: LogConfig,
        skip: &HashSet<TopicPartition>,
    ) -> Result<Vec<Arc<Partition>>, LogError> {
        let mut new_followers = Vec::new();
        let mut new_leaders = Vec::new();
        let mut first_error = None;
        for (tp, state) in self.hosted_partitions(topic) {
            // A partition of a failed dir is not hosted until restart (not even created anew in
            // another dir: its data there cannot be read, and the controller moved it away).
            if skip.contains(&tp) || self.logs.is_offline(&tp) {
                continue;
            }
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
                    let log = match self.logs.get_or_create(&tp, config.clone()) {
                        Ok(log) => log,
                        Err(e) => {
                            tracing::error!(partition = %tp, error = %e, "cannot open partition log");
                            first_error.get_or_insert(e);
                            continue;
                        }
                    };
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
                        Arc::clone(&self.failures),
                    ));
                    self.write().entry(tp).or_insert(fresh).clone()
                }
            };
            let new_follower = partition.apply(state);
            if partition.needs_epoch_start() {
                new_leaders.push(Arc::clone(&partition));
            }
            if new_follower {
                new_followers.push(partition);
            }
        }
        // Several at a time: each is a small file written and fsynced, and the file system
        // commits concurrent fsyncs together, so a new topic of 1,000 partitions does not wait
        // for 1,000 of them one after another.
        ferry_common::map_on_threads(&new_leaders, 8, "epoch-checkpoint", |p| {
            p.checkpoint_epoch_start()
        });
        match first_error {
            Some(e) => Err(e),
            None => Ok(new_followers),
        }
    }

    /// The partitions of `topic` that have this broker among their replicas.
    fn hosted_partitions<'a>(
        &'a self,
        topic: &'a TopicImage,
    ) -> impl Iterator<Item = (TopicPartition, &'a PartitionState)> + 'a {
        topic
            .partitions
            .iter()
            .enumerate()
            .filter(|(_, state)| state.replicas.contains(&self.node_id))
            .map(|(index, state)| {
                let p = i32::try_from(index).unwrap_or(i32::MAX);
                (TopicPartition::new(topic.name.clone(), p), state)
            })
    }

    /// [`Self::ensure_topic`] for many topics at once, at start-up: the logs already on disk
    /// are loaded (and recovered after an unclean shutdown) by `threads` threads, then every
    /// partition is registered in turn. Returns the topics with a partition that could not be
    /// opened, with the first error of each; their other partitions are open.
    pub fn open_topics(
        &self,
        topics: &[(&TopicImage, LogConfig)],
        threads: usize,
    ) -> Vec<(String, LogError)> {
        let wanted = topics
            .iter()
            .flat_map(|(topic, config)| {
                let registered = self.read();
                self.hosted_partitions(topic)
                    .filter(|(tp, _)| registered.get(tp).is_none_or(|p| p.topic_id != topic.id))
                    .map(|(tp, _)| (tp, config.clone()))
                    .collect::<Vec<_>>()
            })
            .collect();
        let mut failed: HashMap<TopicPartition, LogError> = HashMap::new();
        for (tp, opened) in self.logs.open_existing(wanted, threads) {
            if let Err(e) = opened {
                tracing::error!(partition = %tp, error = %e, "cannot open partition log");
                failed.insert(tp, e);
            }
        }
        self.hold_unfound_offline(topics);
        let skip: HashSet<TopicPartition> = failed.keys().cloned().collect();
        let mut errors = Vec::new();
        for (topic, config) in topics {
            let opened = self.ensure_topic_skipping(topic, config.clone(), &skip);
            let loading_error = skip
                .iter()
                .filter(|tp| tp.topic == topic.name)
                .min()
                .and_then(|tp| failed.remove(tp));
            if let Some(e) = opened.err().or(loading_error) {
                errors.push((topic.name.clone(), e));
            }
        }
        errors
    }

    /// At start-up with a log dir that failed to open: the hosted partitions found in no online
    /// dir may be in it, so they are offline (reported to the controller, not created empty
    /// elsewhere; Kafka's rule for a log that is not new). Partitions assigned later are new.
    fn hold_unfound_offline(&self, topics: &[(&TopicImage, LogConfig)]) {
        if self.logs.offline_dirs().is_empty() {
            return;
        }
        let mut offline = self.offline.write().unwrap_or_else(|p| p.into_inner());
        for (topic, _) in topics {
            for (tp, _) in self.hosted_partitions(topic) {
                if self.logs.get(&tp).is_none() && self.read().get(&tp).is_none() {
                    self.logs.hold_offline(&tp);
                    offline.insert(tp, topic.id);
                }
            }
        }
        tracing::warn!(
            partitions = offline.len(),
            "partitions found in no online log dir are offline until restart"
        );
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
        // An offline replica of a deleted topic is no longer anyone's concern.
        self.offline
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|tp, id| image.topic(&tp.topic).is_some_and(|t| t.id == *id));
        for topic in gone {
            match self.delete_topic(&topic) {
                Ok(()) => changes.deleted_topics.push(topic),
                Err(e) => {
                    tracing::error!(topic = %topic, error = %e, "cannot delete partition logs")
                }
            }
        }
        // A reassignment that completed without this broker: its replica goes, as Kafka's
        // StopReplica with deletion.
        let moved_away: Vec<(Arc<Partition>, Option<&PartitionState>)> = self
            .read()
            .values()
            .filter_map(|p| {
                let topic = image.topic(&p.tp.topic).filter(|t| t.id == p.topic_id)?;
                let state = usize::try_from(p.tp.partition)
                    .ok()
                    .and_then(|i| topic.partitions.get(i));
                state
                    .is_none_or(|s| !s.replicas.contains(&self.node_id))
                    .then(|| (Arc::clone(p), state))
            })
            .collect();
        for (partition, state) in moved_away {
            // Leadership goes first: produce requests waiting for acks=all here are answered
            // NOT_LEADER_OR_FOLLOWER now rather than timing out against a log about to go.
            if let Some(state) = state {
                partition.apply(state);
            }
            let tp = partition.tp.clone();
            match self.delete_partition(&tp) {
                Ok(()) => {
                    tracing::info!(partition = %tp, "deleted the replica of a partition reassigned away");
                }
                Err(e) => {
                    tracing::error!(partition = %tp, error = %e, "cannot delete a reassigned replica")
                }
            }
        }
        changes
    }

    /// Stops hosting one partition and deletes its log.
    pub fn delete_partition(&self, tp: &TopicPartition) -> Result<(), LogError> {
        let removed = self.write().remove(tp);
        match removed {
            Some(p) => self.retire(&p),
            None => Ok(()),
        }
    }

    /// A partition taken out of the map: its fetchers wake to notice it is gone, its log goes.
    fn retire(&self, p: &Partition) -> Result<(), LogError> {
        p.end_offset.send_replace(-1);
        self.logs.delete(&p.tp)
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
            self.retire(&p)?;
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

#[cfg(test)]
#[path = "replica_manager_test.rs"]
mod tests;
