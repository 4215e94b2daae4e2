//! A transactional id's metadata and its state machine.
//!
//! A change is made in two steps, as Kafka does: a `prepare_*` method checks the transition,
//! records the target state as *pending* and returns the [`TxnTransit`] to write to
//! `__transaction_state`; once that record is durable, [`TransactionMetadata::complete`]
//! applies it. While a state is pending no other change may be prepared (the coordinator
//! answers CONCURRENT_TRANSACTIONS), so each id has at most one change in flight.

use std::collections::BTreeSet;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;

use crate::state::TransactionState::{self, *};
use crate::txn_log::TxnLogValue;

pub const NO_PRODUCER_ID: i64 = -1;
pub const NO_PRODUCER_EPOCH: i16 = -1;

/// Whether no further epoch may be handed out for a producer id. Kafka keeps `i16::MAX` back so
/// that the coordinator can always fence the last producer with one more bump.
pub fn is_epoch_exhausted(epoch: i16) -> bool {
    epoch >= i16::MAX - 1
}

/// A refused transition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    /// An answer the client gets (PRODUCER_FENCED for a stale epoch).
    #[error("{0}")]
    Rejected(ResponseError),
    /// A transition Kafka's table does not allow, or one prepared over a pending one: a bug in
    /// the coordinator, answered UNKNOWN_SERVER_ERROR.
    #[error("transactional id {id}: cannot move from {from} (pending {pending:?}) to {to}")]
    Illegal {
        id: String,
        from: TransactionState,
        pending: Option<TransactionState>,
        to: TransactionState,
    },
}

impl TransitionError {
    pub fn response_error(&self) -> ResponseError {
        match self {
            TransitionError::Rejected(e) => *e,
            TransitionError::Illegal { .. } => ResponseError::UnknownServerError,
        }
    }
}

/// The target of a prepared transition: what is written to the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTransit {
    pub producer_id: i64,
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_ms: i64,
    pub last_update_ms: i64,
}

impl TxnTransit {
    /// The log value for this transit (a tombstone is written instead for Dead).
    pub fn log_value(&self) -> TxnLogValue {
        TxnLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions: (self.state != Empty)
                .then(|| TxnLogValue::group_partitions(&self.partitions)),
            last_update_ms: self.last_update_ms,
            start_ms: self.start_ms,
            client_transaction_version: 0,
        }
    }
}

/// Everything the coordinator knows about one transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionMetadata {
    pub transactional_id: String,
    pub producer_id: i64,
    /// The producer id this id had before its last rotation (KIP-360: a retry of that rotation
    /// names it).
    pub previous_producer_id: i64,
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    /// The epoch before the last client-requested bump (KIP-360: a retried InitProducerId names
    /// it). Not in the log, so -1 after a load.
    pub last_producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TransactionState,
    /// The state a prepared change moves to; `None` when no change is in flight.
    pub pending: Option<TransactionState>,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the first partition was added to the open transaction; -1 when none is open.
    pub start_ms: i64,
    pub last_update_ms: i64,
    /// An epoch fence was prepared but its write failed: the in-memory epoch is already bumped,
    /// so the next fence must not bump it again.
    pub has_failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// A transactional id seen for the first time: producer id assigned, no epoch yet.
    pub fn new(transactional_id: &str, producer_id: i64, timeout_ms: i32, now: i64) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms,
            state: Empty,
            pending: None,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a log value describes.
    pub fn from_log(transactional_id: &str, v: &TxnLogValue) -> Self {
        Self {
            transactional_id: transactional_id.to_string(),
            producer_id: v.producer_id,
            previous_producer_id: v.previous_producer_id,
            next_producer_id: v.next_producer_id,
            producer_epoch: v.producer_epoch,
            last_producer_epoch: NO_PRODUCER_EPOCH,
            timeout_ms: v.timeout_ms,
            state: v.state,
            pending: None,
            partitions: v.topic_partitions().into_iter().collect(),
            start_ms: v.start_ms,
            last_update_ms: v.last_update_ms,
            has_failed_epoch_fence: false,
        }
    }

    pub fn transition_in_progress(&self) -> bool {
        self.pending.is_some()
    }

    pub fn is_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// InitProducerId on an id with no open transaction: bumps the epoch. `expected_epoch` is
    /// the epoch a recovering producer (KIP-360) names: its current epoch is bumped, a retry of
    /// a bump that succeeded gets that bump again, and any other epoch is fenced.
    pub fn prepare_increment_epoch(
        &mut self,
        timeout_ms: i32,
        expected_epoch: Option<i16>,
        now: i64,
    ) -> Result<TxnTransit, TransitionError> {
        let bumped = self.producer_epoch.wrapping_add(1);
        let (epoch, last_epoch) = match expected_epoch {
            None => (bumped, NO_PRODUCER_EPOCH),
            Some(e) if self.producer_epoch == NO_PRODUCER_EPOCH || e == self.producer_epoch => {
                (bumped, self.producer_epoch)
            }
            Some(e) if e == self.last_producer_epoch => {
                (self.producer_epoch, self.last_producer_epoch)
            }
            Some(_) => return Err(TransitionError::Rejected(ResponseError::ProducerFenced)),
        };
        // Bumping past the last epoch is the caller's mistake: it must rotate the producer id.
        if epoch != self.producer_epoch && self.is_epoch_exhausted() {
            return Err(self.illegal(Empty));
        }
        let pid = self.producer_id;
        self.prepare(
            Empty,
            pid,
            epoch,
            last_epoch,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now,
        )
    }

    /// InitProducerId when the epochs of the producer id are used up: a new producer id at
    /// epoch 0. `record_last_epoch` keeps the old epoch so a retry can be recognised.
    pub fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: i64,
        timeout_ms: i32,
        now: i64,
        record_last_epoch: bool,
    ) -> Result<TxnTransit, TransitionError> {
        if matches!(self.state, Ongoing | PrepareCommit | PrepareAbort) {
            return Err(self.illegal(Empty));
        }
        let last = if record_last_epoch {
            self.producer_epoch
        } else {
            NO_PRODUCER_EPOCH
        };
        self.prepare(
            Empty,
            new_producer_id,
            0,
            last,
            timeout_ms,
            BTreeSet::new(),
            -1,
            now,
        )
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: opens the transaction or widens it.
    pub fn prepare_add_partitions(
        &mut self,
        added: impl IntoIterator<Item = TopicPartition>,
        now: i64,
    ) -> Result<TxnTransit, TransitionError> {
        let start = match self.state {
            Empty | CompleteAbort | CompleteCommit => now,
            _ => self.start_ms,
        };
        let mut partitions = self.partitions.clone();
        partitions.extend(added);
        let (pid, epoch, last, timeout) = self.ids();
        self.prepare(Ongoing, pid, epoch, last, timeout, partitions, start, now)
    }

    /// EndTxn: PrepareCommit or PrepareAbort, with the transaction's partitions.
    pub fn prepare_end(&mut self, commit: bool, now: i64) -> Result<TxnTransit, TransitionError> {
        let target = if commit { PrepareCommit } else { PrepareAbort };
        let (pid, epoch, last, timeout) = self.ids();
        let partitions = self.partitions.clone();
        let start = self.start_ms;
        self.prepare(target, pid, epoch, last, timeout, partitions, start, now)
    }

    /// Fences the producer of an open transaction and aborts it: PrepareEpochFence bumps the
    /// epoch (not again if the last fence's write failed), then PrepareAbort is prepared with
    /// the bumped epoch. The bumped epoch is never handed to a client: the producer that
    /// triggered the fence retries InitProducerId and gets a further bump.
    pub fn prepare_fence_abort(&mut self, now: i64) -> Result<TxnTransit, TransitionError> {
        if self.producer_epoch == i16::MAX || self.pending.is_some() || self.state != Ongoing {
            return Err(self.illegal(PrepareEpochFence));
        }
        if !self.has_failed_epoch_fence {
            self.producer_epoch += 1;
        }
        self.last_producer_epoch = NO_PRODUCER_EPOCH;
        self.prepare_end(false, now)
    }

    /// The markers are written: CompleteCommit or CompleteAbort, with no partitions left.
    pub fn prepare_complete(&mut self, now: i64) -> Result<TxnTransit, TransitionError> {
        let target = match self.state {
            PrepareCommit => CompleteCommit,
            PrepareAbort => CompleteAbort,
            _ => return Err(self.illegal(CompleteCommit)),
        };
        let (pid, epoch, _, timeout) = self.ids();
        let start = self.start_ms;
        // Kafka records the completed epoch as the last epoch here.
        self.prepare(
            target,
            pid,
            epoch,
            epoch,
            timeout,
            BTreeSet::new(),
            start,
            now,
        )
    }

    /// Expiration: the id is about to be tombstoned and dropped.
    pub fn prepare_dead(&mut self) -> Result<TxnTransit, TransitionError> {
        let (pid, epoch, last, timeout) = self.ids();
        let start = self.start_ms;
        let at = self.last_update_ms;
        self.prepare(Dead, pid, epoch, last, timeout, BTreeSet::new(), start, at)
    }

    fn ids(&self) -> (i64, i16, i16, i32) {
        (
            self.producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.timeout_ms,
        )
    }

    fn illegal(&self, to: TransactionState) -> TransitionError {
        TransitionError::Illegal {
            id: self.transactional_id.clone(),
            from: self.state,
            pending: self.pending,
            to,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &mut self,
        state: TransactionState,
        producer_id: i64,
        producer_epoch: i16,
        last_producer_epoch: i16,
        timeout_ms: i32,
        partitions: BTreeSet<TopicPartition>,
        start_ms: i64,
        now: i64,
    ) -> Result<TxnTransit, TransitionError> {
        let bad_ids = producer_id < 0 || (state != Dead && producer_epoch < 0);
        if self.pending.is_some() || bad_ids || !state.can_follow(self.state) {
            return Err(self.illegal(state));
        }
        self.pending = Some(state);
        Ok(TxnTransit {
            producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch,
            last_producer_epoch,
            timeout_ms,
            state,
            partitions,
            start_ms,
            last_update_ms: now,
        })
    }

    /// Applies a transit whose record is durable. It must be the pending one.
    pub fn complete(&mut self, t: TxnTransit) -> Result<(), TransitionError> {
        if self.pending != Some(t.state) || t.state == Dead || t.state == PrepareEpochFence {
            return Err(self.illegal(t.state));
        }
        let same_producer =
            t.producer_id == self.producer_id && t.producer_epoch == self.producer_epoch;
        let consistent = match t.state {
            Empty => {
                let bumped = t.producer_epoch == self.producer_epoch.wrapping_add(1)
                    || (t.producer_epoch == 0 && t.producer_id != self.producer_id);
                (same_producer || bumped) && t.partitions.is_empty() && t.start_ms == -1
            }
            Ongoing => same_producer && self.partitions.is_subset(&t.partitions),
            PrepareCommit | PrepareAbort => same_producer && self.partitions == t.partitions,
            _ => same_producer && t.start_ms != -1,
        };
        if !consistent {
            return Err(self.illegal(t.state));
        }
        if t.state == Empty {
            self.producer_id = t.producer_id;
            self.previous_producer_id = t.previous_producer_id;
            self.producer_epoch = t.producer_epoch;
            self.last_producer_epoch = t.last_producer_epoch;
            self.timeout_ms = t.timeout_ms;
        }
        if matches!(t.state, CompleteCommit | CompleteAbort) {
            // A successful write ends the need to remember a failed fence.
            self.has_failed_epoch_fence = false;
        }
        self.partitions = t.partitions;
        self.start_ms = t.start_ms;
        self.last_update_ms = t.last_update_ms;
        self.state = t.state;
        self.pending = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// A fresh id taken through InitProducerId to epoch 0.
    fn initialised() -> TransactionMetadata {
        let mut m = TransactionMetadata::new("tx", 5, 1000, 0);
        let t = m.prepare_increment_epoch(1000, None, 1).unwrap();
        m.complete(t).unwrap();
        m
    }

    #[test]
    fn full_commit_cycle() {
        let mut m = initialised();
        assert_eq!((m.producer_epoch, m.state), (0, Empty));
        let t = m.prepare_add_partitions([tp(0)], 10).unwrap();
        m.complete(t).unwrap();
        assert_eq!((m.state, m.start_ms), (Ongoing, 10));
        let t = m.prepare_end(true, 20).unwrap();
        m.complete(t).unwrap();
        assert_eq!(m.state, PrepareCommit);
        let t = m.prepare_complete(30).unwrap();
        m.complete(t).unwrap();
        assert_eq!(m.state, CompleteCommit);
        assert!(m.partitions.is_empty());
        assert_eq!(m.last_update_ms, 30);
    }

    #[test]
    fn one_pending_change_at_a_time() {
        let mut m = initialised();
        let _t = m.prepare_add_partitions([tp(0)], 10).unwrap();
        assert!(m.transition_in_progress());
        assert!(matches!(
            m.prepare_add_partitions([tp(1)], 11),
            Err(TransitionError::Illegal { .. })
        ));
    }

    #[test]
    fn illegal_transitions_are_refused() {
        let mut m = initialised();
        assert!(m.prepare_end(true, 1).is_err(), "EndTxn from Empty");
        assert!(m.prepare_complete(1).is_err(), "complete without prepare");
        assert_eq!(
            m.pending, None,
            "a refused transition leaves nothing pending"
        );
        let t = m.prepare_add_partitions([tp(0)], 10).unwrap();
        m.complete(t).unwrap();
        assert!(
            m.prepare_dead().is_err(),
            "an open transaction cannot expire"
        );
        assert!(m.prepare_producer_id_rotation(9, 1000, 1, false).is_err());
    }

    #[test]
    fn completing_a_transit_that_is_not_pending_fails() {
        let mut m = initialised();
        let t = m.prepare_add_partitions([tp(0)], 10).unwrap();
        let mut other = t.clone();
        other.state = PrepareCommit;
        assert!(m.complete(other).is_err());
        m.complete(t).unwrap();
    }

    #[test]
    fn kip360_epoch_rules() {
        let mut m = initialised();
        // The current epoch: bumped, and the old one remembered.
        let t = m.prepare_increment_epoch(1000, Some(0), 2).unwrap();
        m.complete(t).unwrap();
        assert_eq!((m.producer_epoch, m.last_producer_epoch), (1, 0));
        // A retry naming the old epoch gets the same bump back.
        let t = m.prepare_increment_epoch(1000, Some(0), 3).unwrap();
        assert_eq!(t.producer_epoch, 1);
        m.complete(t).unwrap();
        // Any other epoch is fenced.
        assert_eq!(
            m.prepare_increment_epoch(1000, Some(7), 4),
            Err(TransitionError::Rejected(ResponseError::ProducerFenced))
        );
    }

    #[test]
    fn fence_bumps_once_even_after_a_failed_write() {
        let mut m = initialised();
        let t = m.prepare_add_partitions([tp(0)], 10).unwrap();
        m.complete(t).unwrap();
        let t = m.prepare_fence_abort(20).unwrap();
        assert_eq!((t.state, t.producer_epoch), (PrepareAbort, 1));
        // The write failed: the coordinator clears the pending state and marks the fence.
        m.pending = None;
        m.has_failed_epoch_fence = true;
        let t = m.prepare_fence_abort(21).unwrap();
        assert_eq!(t.producer_epoch, 1, "no second bump");
        m.complete(t).unwrap();
        let t = m.prepare_complete(22).unwrap();
        m.complete(t).unwrap();
        assert!(!m.has_failed_epoch_fence);
    }

    #[test]
    fn exhausted_epoch_needs_a_new_producer_id() {
        let mut m = initialised();
        m.producer_epoch = i16::MAX - 1;
        assert!(m.is_epoch_exhausted());
        assert!(m.prepare_increment_epoch(1000, None, 1).is_err());
        let t = m.prepare_producer_id_rotation(77, 1000, 1, true).unwrap();
        m.complete(t).unwrap();
        assert_eq!((m.producer_id, m.producer_epoch), (77, 0));
        assert_eq!(
            (m.previous_producer_id, m.last_producer_epoch),
            (5, i16::MAX - 1)
        );
    }
}
