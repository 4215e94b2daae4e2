//! Offsets committed inside a transaction (TxnOffsetCommit, KIP-98 and KIP-447).
//!
//! A transactional producer that consumes and produces (`send_offsets_to_transaction`) commits
//! its input offsets as part of its transaction: the coordinator writes them to the group's
//! `__consumer_offsets` partition in a transactional batch of the producer, keeps them
//! pending, and applies them only when the transaction's COMMIT marker is written to that
//! partition ([`GroupCoordinator::complete_transaction`]); an ABORT drops them. While some are
//! pending, an OffsetFetch with `require_stable` gets UNSTABLE_OFFSET_COMMIT for their
//! partitions, so a consumer of a read_committed pipeline does not start from an offset that
//! may still be rolled back. A reload replays the same from the log: transactional records
//! wait for their producer's marker.

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::coordinator::{decode_record, GroupCoordinator};
use crate::group::{Group, GroupState};
use crate::offsets::{
    partition_code, AcceptedOffsets, CommitBuilder, CommitInFlight, PendingCommit,
};
use crate::offsets_topic::{RecordKey, RecordValue};
use crate::store::StoredRecord;

impl GroupCoordinator {
    /// TxnOffsetCommit: appends the offsets to the group's partition as part of the producer's
    /// transaction and answers once the in-sync replicas hold them; they take effect at the
    /// transaction's commit.
    pub async fn txn_offset_commit(
        &self,
        req: TxnOffsetCommitRequest,
        version: i16,
    ) -> TxnOffsetCommitResponse {
        if req.group_id.is_empty() {
            return txn_commit_response(&req, &|_| ResponseError::InvalidGroupId.code());
        }
        let now = self.now();
        let pending = match self.append_txn_commit(&req, version, now) {
            Ok(pending) => pending,
            Err(e) => return txn_commit_response(&req, &|_| e.code()),
        };
        let stored = pending
            .settle(|load, end_offset, accepted| {
                self.hold_pending(&req, load, end_offset, accepted)
            })
            .await;
        if let Err(e) = &stored {
            tracing::warn!(group = %req.group_id.as_str(), producer_id = req.producer_id.0,
                error = %e, "transactional offsets not committed");
        }
        let max = self.config.offset_metadata_max_bytes;
        txn_commit_response(&req, &|metadata| partition_code(&stored, metadata, max))
    }

    /// Checks the commit against its group (created if unknown, as Kafka does) and appends its
    /// records in the producer's transaction, under the `groups` lock.
    fn append_txn_commit(
        &self,
        req: &TxnOffsetCommitRequest,
        version: i16,
        now: i64,
    ) -> Result<PendingCommit<'_>, ResponseError> {
        let mut groups = self.lock();
        let load = self.serves(&req.group_id)?;
        let group = groups
            .entry(req.group_id.to_string())
            .or_insert_with(|| Group::new(&req.group_id, now));
        validate_txn_commit(group, req)?;
        let max = self.config.offset_metadata_max_bytes;
        let (records, accepted) = txn_commit_records(&group.id, req, version, now, max);
        let appended = (!records.is_empty()).then(|| {
            self.store.append_transactional(
                self.partition_for(&group.id),
                req.producer_id.0,
                req.producer_epoch,
                &records,
            )
        });
        let in_flight = appended
            .is_some()
            .then(|| CommitInFlight::start(self, group));
        Ok(PendingCommit {
            load,
            appended,
            accepted,
            _in_flight: in_flight,
        })
    }

    /// Keeps a durable transactional commit pending until its transaction ends, unless the
    /// partition was loaded anew meanwhile (the load replayed it).
    fn hold_pending(
        &self,
        req: &TxnOffsetCommitRequest,
        load: u64,
        end_offset: i64,
        accepted: AcceptedOffsets,
    ) {
        let mut groups = self.lock();
        if self.current_load(&req.group_id) != Some(load) {
            return;
        }
        let Some(group) = groups.get_mut(req.group_id.as_str()) else {
            return;
        };
        let pending = group
            .pending_txn_offsets
            .entry(req.producer_id.0)
            .or_default();
        for (k, v) in accepted {
            pending.insert(k, (v, end_offset));
        }
    }
}

/// Kafka's checks of a transactional commit: a commit naming no member and no generation is
/// taken whatever the group's state (the producer may commit for a consumer using assign());
/// one naming a member must come from the current member at the current generation (KIP-447,
/// so a zombie's commit after a rebalance is refused).
fn validate_txn_commit(group: &Group, req: &TxnOffsetCommitRequest) -> Result<(), ResponseError> {
    if group.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    let names_member =
        req.generation_id >= 0 || !req.member_id.is_empty() || req.group_instance_id.is_some();
    if !names_member {
        return Ok(());
    }
    if let Some(c) = &group.consumer {
        let m = c
            .members
            .get(req.member_id.as_str())
            .ok_or(ResponseError::UnknownMemberId)?;
        return if req.generation_id == m.epoch {
            Ok(())
        } else {
            Err(ResponseError::IllegalGeneration)
        };
    }
    if let Some(inst) = &req.group_instance_id {
        if let Some(id) = group.static_members.get(inst.as_str()) {
            if id != req.member_id.as_str() {
                return Err(ResponseError::FencedInstanceId);
            }
        }
    }
    if !group.members.contains_key(req.member_id.as_str()) {
        return Err(ResponseError::UnknownMemberId);
    }
    if req.generation_id != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(())
}

/// The records of a transactional commit and the offsets they hold (see [`CommitBuilder`]).
fn txn_commit_records(
    group_id: &str,
    req: &TxnOffsetCommitRequest,
    version: i16,
    now: i64,
    max: usize,
) -> (Vec<StoredRecord>, AcceptedOffsets) {
    let mut commit = CommitBuilder::new(group_id, now, max);
    for t in &req.topics {
        for p in &t.partitions {
            // The leader epoch is in the request from v2.
            let epoch = if version >= 2 {
                p.committed_leader_epoch
            } else {
                -1
            };
            let metadata = p.committed_metadata.as_deref();
            commit.add(
                &t.name,
                p.partition_index,
                p.committed_offset,
                epoch,
                metadata,
            );
        }
    }
    commit.finish()
}

/// The TxnOffsetCommit answer of a broker whose group coordinator cannot serve: `error` for
/// every partition of the request.
pub fn txn_offset_commit_error(
    req: &TxnOffsetCommitRequest,
    error: ResponseError,
) -> TxnOffsetCommitResponse {
    txn_commit_response(req, &|_| error.code())
}

/// A TxnOffsetCommit response with, for every partition of the request, the code `code_for`
/// gives it (from its metadata).
fn txn_commit_response(
    req: &TxnOffsetCommitRequest,
    code_for: &dyn Fn(Option<&str>) -> i16,
) -> TxnOffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code_for(p.committed_metadata.as_deref()))
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}

/// Ends producer `producer_id`'s transaction for `group`: at a commit its pending offsets take
/// effect, each unless an offset written later in the log already replaced it (Kafka's
/// `completePendingTxnOffsetCommit`); at an abort they are dropped.
pub(crate) fn complete(group: &mut Group, producer_id: i64, commit: bool) {
    let Some(pending) = group.pending_txn_offsets.remove(&producer_id) else {
        return;
    };
    if !commit {
        return;
    }
    for (k, (value, end_offset)) in pending {
        if group
            .offset_log_ends
            .get(&k)
            .is_some_and(|later| *later > end_offset)
        {
            continue;
        }
        group.offset_log_ends.insert(k.clone(), end_offset);
        group.offsets.insert(k, value);
    }
}

/// Replays a transactional record found at log offset `offset`: an offset of producer
/// `producer_id`'s transaction, pending until its marker.
pub(crate) fn replay_pending(
    partition: i32,
    groups: &mut HashMap<String, Group>,
    producer_id: i64,
    (key, value): StoredRecord,
    offset: i64,
    now: i64,
) {
    let Some((key, value)) = decode_record(partition, key, value) else {
        return;
    };
    let (
        RecordKey::Offset {
            group,
            topic,
            partition: topic_partition,
        },
        Some(RecordValue::Offset(value)),
    ) = (&key, value)
    else {
        tracing::warn!(
            partition,
            ?key,
            "a transaction holds a record that is not an offset; skipped"
        );
        return;
    };
    groups
        .entry(group.clone())
        .or_insert_with(|| Group::new(group, now))
        .pending_txn_offsets
        .entry(producer_id)
        .or_default()
        .insert((topic.clone(), *topic_partition), (value, offset + 1));
}

/// Some transaction of `group` holds an offset of (topic, partition) not yet committed or
/// aborted: OffsetFetch with `require_stable` answers UNSTABLE_OFFSET_COMMIT for it.
pub(crate) fn has_pending(group: &Group, topic: &str, partition: i32) -> bool {
    group
        .pending_txn_offsets
        .values()
        .any(|p| p.contains_key(&(topic.to_string(), partition)))
}
