//! Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and the expiry of offsets of
//! empty groups after `offsets.retention.minutes` (KIP-211).

use std::collections::HashMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse,
    OffsetFetchRequest, OffsetFetchResponse, TopicName,
};

use crate::coordinator::{s, subscribed_topics, GroupCoordinator};
use crate::group::{Group, GroupState};
use crate::offsets_topic::{encode_key, encode_value, OffsetValue, RecordKey, RecordValue};
use crate::store::{Appended, StoreError, StoredRecord};
use crate::txn_offsets;

impl GroupCoordinator {
    /// Commits offsets as Kafka does: appended to the group's partition, answered once the
    /// in-sync replicas hold them, and only then visible to OffsetFetch.
    pub async fn offset_commit(
        &self,
        req: OffsetCommitRequest,
        version: i16,
    ) -> OffsetCommitResponse {
        if req.group_id.is_empty() {
            return commit_response(&req, &|_, _, _| ResponseError::InvalidGroupId.code());
        }
        let now = self.now();
        let max = self.config.offset_metadata_max_bytes;
        let pending = match self.append_commit(&req, version, now) {
            Ok(pending) => pending,
            Err(e) => return commit_response(&req, &|_, _, _| e.code()),
        };
        let stored = pending
            .settle(|load, end_offset, accepted| {
                self.materialize(&req.group_id, load, end_offset, accepted)
            })
            .await;
        if let Err(e) = &stored {
            tracing::warn!(group = %req.group_id.as_str(), error = %e, "offsets not committed");
        }
        commit_response(&req, &|_, _, metadata| {
            partition_code(&stored, metadata, max)
        })
    }

    /// Checks a commit against its group and appends its offsets to the group's partition,
    /// all under the `groups` lock, so that the load served from still holds at the append.
    fn append_commit(
        &self,
        req: &OffsetCommitRequest,
        version: i16,
        now: i64,
    ) -> Result<PendingCommit<'_>, ResponseError> {
        let mut groups = self.lock();
        let load = self.serves(&req.group_id)?;
        let group = groups
            .entry(req.group_id.to_string())
            .or_insert_with(|| Group::new(&req.group_id, now));
        validate_commit(group, req, version)?;
        let max = self.config.offset_metadata_max_bytes;
        let (records, accepted) = commit_records(&group.id, req, version, now, max);
        let appended = if records.is_empty() {
            None
        } else {
            Some(self.store.append(self.partition_for(&group.id), &records))
        };
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

    /// Makes durable commits visible, unless the partition was loaded anew meanwhile (the load
    /// replayed them) or a later append to the log already set the same offsets.
    fn materialize(
        &self,
        group_id: &str,
        load: u64,
        end_offset: i64,
        accepted: Vec<((String, i32), OffsetValue)>,
    ) {
        let mut groups = self.lock();
        if self.current_load(group_id) != Some(load) {
            return;
        }
        let Some(group) = groups.get_mut(group_id) else {
            return;
        };
        for (k, v) in accepted {
            if group
                .offset_log_ends
                .get(&k)
                .is_some_and(|later| *later > end_offset)
            {
                continue;
            }
            group.offset_log_ends.insert(k.clone(), end_offset);
            group.offsets.insert(k, v);
        }
    }

    pub fn offset_fetch(&self, req: OffsetFetchRequest, version: i16) -> OffsetFetchResponse {
        let groups = self.lock();
        if version >= 8 {
            let results = req
                .groups
                .iter()
                .map(|g| self.fetch_group(&groups, g, version, req.require_stable))
                .collect();
            return OffsetFetchResponse::default().with_groups(results);
        }
        let wanted: Option<Vec<(String, Vec<i32>)>> = req.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        if let Err(e) = self.serves(&req.group_id) {
            return unserved_fetch(e, wanted, version);
        }
        let found = fetch_offsets(
            groups.get(req.group_id.as_str()),
            wanted,
            version,
            req.require_stable,
        );
        let topics = found
            .into_iter()
            .map(|(topic, parts)| {
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(s(&topic)))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|(p, o, e, m, code)| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(o)
                                    .with_committed_leader_epoch(e)
                                    .with_metadata(Some(s(&m)))
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect();
        OffsetFetchResponse::default().with_topics(topics)
    }

    /// One group of an OffsetFetch v8+, which asks for several groups, each with its own error.
    fn fetch_group(
        &self,
        groups: &HashMap<String, Group>,
        g: &OffsetFetchRequestGroup,
        version: i16,
        require_stable: bool,
    ) -> OffsetFetchResponseGroup {
        if let Err(e) = self.serves(&g.group_id) {
            return OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(e.code());
        }
        if let Err(e) = validate_fetch(groups.get(g.group_id.as_str()), g) {
            return OffsetFetchResponseGroup::default()
                .with_group_id(g.group_id.clone())
                .with_error_code(e.code());
        }
        let wanted: Option<Vec<(String, Vec<i32>)>> = g.topics.as_ref().map(|ts| {
            ts.iter()
                .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                .collect()
        });
        let found = fetch_offsets(
            groups.get(g.group_id.as_str()),
            wanted,
            version,
            require_stable,
        );
        OffsetFetchResponseGroup::default()
            .with_group_id(g.group_id.clone())
            .with_topics(
                found
                    .into_iter()
                    .map(|(topic, parts)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(TopicName(s(&topic)))
                            .with_partitions(
                                parts
                                    .into_iter()
                                    .map(|(p, o, e, m, code)| {
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(o)
                                            .with_committed_leader_epoch(e)
                                            .with_metadata(Some(s(&m)))
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect(),
            )
    }

    pub fn offset_delete(&self, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
        let mut groups = self.lock();
        if let Err(e) = self.serves(&req.group_id) {
            return OffsetDeleteResponse::default().with_error_code(e.code());
        }
        let Some(group) = groups.get_mut(req.group_id.as_str()) else {
            return OffsetDeleteResponse::default()
                .with_error_code(ResponseError::GroupIdNotFound.code());
        };
        let active = !group.is_empty_of_members();
        if active && group.consumer.is_none() && group.protocol_type.as_deref() != Some("consumer")
        {
            return OffsetDeleteResponse::default()
                .with_error_code(ResponseError::NonEmptyGroup.code());
        }
        let subscribed: Vec<String> = if let Some(c) = &group.consumer {
            c.members
                .values()
                .flat_map(|m| m.topics().cloned())
                .collect()
        } else if active {
            group
                .members
                .values()
                .flat_map(|m| {
                    subscribed_topics(&m.metadata_for(group.protocol.as_deref().unwrap_or("")))
                })
                .collect()
        } else {
            Vec::new()
        };
        let mut records = Vec::new();
        let mut topics = Vec::new();
        for t in &req.topics {
            let mut parts = Vec::new();
            for p in &t.partitions {
                let code = if subscribed.iter().any(|x| x == t.name.as_str()) {
                    ResponseError::GroupSubscribedToTopic.code()
                } else {
                    if group
                        .offsets
                        .remove(&(t.name.to_string(), p.partition_index))
                        .is_some()
                    {
                        records.push((
                            encode_key(&RecordKey::Offset {
                                group: group.id.clone(),
                                topic: t.name.to_string(),
                                partition: p.partition_index,
                            }),
                            None,
                        ));
                    }
                    0
                };
                parts.push(
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code),
                );
            }
            topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(parts),
            );
        }
        if !records.is_empty() {
            if let Err(e) = self.store.append(self.partition_for(&group.id), &records) {
                tracing::error!(group = %group.id, error = %e, "cannot persist offset deletion");
                return OffsetDeleteResponse::default().with_error_code(e.error.code());
            }
        }
        OffsetDeleteResponse::default().with_topics(topics)
    }

    /// Offsets of a group that has been empty for `offsets.retention.minutes` expire; an empty
    /// group with no offsets left is forgotten.
    pub(crate) fn expire_offsets(&self, groups: &mut HashMap<String, Group>, now: i64) {
        let retention = self.config.offsets_retention_ms;
        let mut forget = Vec::new();
        for group in groups.values_mut() {
            // An open transaction's offsets keep the group until it ends, a commit in flight
            // until it settles, and a member id handed out by MEMBER_ID_REQUIRED until it lapses
            // (forgetting the group would refuse that member's second JoinGroup).
            if !group.is_empty_of_members()
                || !group.pending_txn_offsets.is_empty()
                || group.commits_in_flight > 0
                || !group.pending.is_empty()
            {
                continue;
            }
            let empty_since = group.state_since_ms;
            let expired: Vec<(String, i32)> = group
                .offsets
                .iter()
                .filter(|(_, v)| {
                    v.commit_timestamp
                        .max(empty_since)
                        .saturating_add(retention)
                        <= now
                })
                .map(|(k, _)| k.clone())
                .collect();
            if expired.is_empty() && !group.offsets.is_empty() {
                continue;
            }
            let mut records: Vec<StoredRecord> = expired
                .iter()
                .map(|(topic, partition)| {
                    (
                        encode_key(&RecordKey::Offset {
                            group: group.id.clone(),
                            topic: topic.clone(),
                            partition: *partition,
                        }),
                        None,
                    )
                })
                .collect();
            let all_gone = expired.len() == group.offsets.len();
            if all_gone && group.generation > 0 {
                records.push((
                    encode_key(&RecordKey::Group {
                        group: group.id.clone(),
                    }),
                    None,
                ));
            }
            if !records.is_empty() {
                if let Err(e) = self.store.append(self.partition_for(&group.id), &records) {
                    tracing::error!(group = %group.id, error = %e, "cannot persist offset expiry");
                    continue;
                }
                tracing::info!(group = %group.id, offsets = expired.len(), "expired offsets of an empty group");
            }
            for k in &expired {
                group.offsets.remove(k);
            }
            if all_gone {
                forget.push(group.id.clone());
            }
        }
        for id in forget {
            groups.remove(&id);
        }
    }
}

/// An OffsetFetch (v9+) of a consumer group that names a member must come from a member at
/// its current epoch, as Kafka's `ConsumerGroup.validateOffsetFetch` requires; one without a
/// member (an admin tool, a classic client) is always served.
fn validate_fetch(group: Option<&Group>, g: &OffsetFetchRequestGroup) -> Result<(), ResponseError> {
    let Some(c) = group.and_then(|group| group.consumer.as_ref()) else {
        return Ok(());
    };
    let Some(member_id) = g.member_id.as_ref() else {
        return Ok(());
    };
    if g.member_epoch < 0 && member_id.is_empty() {
        return Ok(());
    }
    let m = c
        .members
        .get(member_id.as_str())
        .ok_or(ResponseError::UnknownMemberId)?;
    if g.member_epoch != m.epoch {
        return Err(if m.classic.is_some() {
            ResponseError::IllegalGeneration
        } else {
            ResponseError::StaleMemberEpoch
        });
    }
    Ok(())
}

fn validate_commit(
    group: &Group,
    req: &OffsetCommitRequest,
    version: i16,
) -> Result<(), ResponseError> {
    if group.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    let generation = req.generation_id_or_member_epoch;
    // A commit from outside any generation (an admin tool, or a consumer that assigns its
    // partitions itself) is taken while the group has no members, whatever member id it
    // carries, as Kafka's `validateOffsetCommit` takes it: librdkafka's consumer of the
    // KIP-848 protocol sends its own member id with epoch -1.
    if generation < 0 && group.members.is_empty() && !group.has_consumer_members() {
        return Ok(());
    }
    if let Some(c) = &group.consumer {
        let m = c
            .members
            .get(req.member_id.as_str())
            .ok_or(ResponseError::UnknownMemberId)?;
        // A classic member's generation is its member epoch (Kafka's ILLEGAL_GENERATION for it).
        if generation != m.epoch {
            return Err(if version >= 9 && m.classic.is_none() {
                ResponseError::StaleMemberEpoch
            } else {
                ResponseError::IllegalGeneration
            });
        }
        return Ok(());
    }
    if generation < 0 && req.member_id.is_empty() {
        // From outside any generation, into a group with members.
        return Err(ResponseError::UnknownMemberId);
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
    if generation != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    if group.is(GroupState::CompletingRebalance) {
        return Err(ResponseError::RebalanceInProgress);
    }
    Ok(())
}

/// A commit appended to the group's partition (or with nothing to append), waiting for the
/// in-sync replicas before its offsets become visible.
pub(crate) struct PendingCommit<'a> {
    /// The load of the group's partition the commit was appended under.
    pub(crate) load: u64,
    pub(crate) appended: Option<Result<Appended, StoreError>>,
    pub(crate) accepted: AcceptedOffsets,
    /// Keeps the group from expiring until the commit has settled (or its request is dropped).
    pub(crate) _in_flight: Option<CommitInFlight<'a>>,
}

/// One appended commit not yet settled, counted on its group ([`Group::commits_in_flight`])
/// from [`CommitInFlight::start`] until dropped.
pub(crate) struct CommitInFlight<'a> {
    coordinator: &'a GroupCoordinator,
    group: String,
}

impl<'a> CommitInFlight<'a> {
    /// Counts a commit on `group`, whose `groups` lock the caller holds.
    pub(crate) fn start(coordinator: &'a GroupCoordinator, group: &mut Group) -> Self {
        group.commits_in_flight += 1;
        Self {
            coordinator,
            group: group.id.clone(),
        }
    }
}

impl Drop for CommitInFlight<'_> {
    fn drop(&mut self) {
        if let Some(g) = self.coordinator.lock().get_mut(&self.group) {
            g.commits_in_flight = g.commits_in_flight.saturating_sub(1);
        }
    }
}

impl PendingCommit<'_> {
    /// Waits until the in-sync replicas hold the append, then hands its offsets to `durable`
    /// (with the load appended under and the log end after the append).
    pub(crate) async fn settle(
        self,
        durable: impl FnOnce(u64, i64, AcceptedOffsets),
    ) -> Result<(), StoreError> {
        match self.appended {
            None => Ok(()),
            Some(Err(e)) => Err(e),
            Some(Ok(a)) => {
                a.durable.await?;
                durable(self.load, a.end_offset, self.accepted);
                Ok(())
            }
        }
    }
}

/// A committed partition's error code: OFFSET_METADATA_TOO_LARGE for metadata over `max`
/// bytes (left out of the append), else the append's outcome.
pub(crate) fn partition_code(
    stored: &Result<(), StoreError>,
    metadata: Option<&str>,
    max: usize,
) -> i16 {
    if metadata.is_some_and(|m| m.len() > max) {
        ResponseError::OffsetMetadataTooLarge.code()
    } else {
        stored.as_ref().err().map_or(0, |e| e.error.code())
    }
}

/// The offsets of a commit by (topic, partition), made visible once the commit is durable.
pub(crate) type AcceptedOffsets = Vec<((String, i32), OffsetValue)>;

/// An OffsetCommit response with, for every partition of the request, the code `code_for`
/// gives it (from its topic, partition and metadata).
fn commit_response(
    req: &OffsetCommitRequest,
    code_for: &dyn Fn(&str, i32, Option<&str>) -> i16,
) -> OffsetCommitResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            OffsetCommitResponseTopic::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partitions(
                    t.partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(code_for(
                                    &t.name,
                                    p.partition_index,
                                    p.committed_metadata.as_deref(),
                                ))
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

/// The records of a commit and the offsets they hold, in request order. A partition whose
/// metadata is longer than `max` bytes is left out: it is answered OFFSET_METADATA_TOO_LARGE.
fn commit_records(
    group_id: &str,
    req: &OffsetCommitRequest,
    version: i16,
    now: i64,
    max: usize,
) -> (Vec<StoredRecord>, AcceptedOffsets) {
    let mut commit = CommitBuilder::new(group_id, now, max);
    for t in &req.topics {
        for p in &t.partitions {
            // The leader epoch is in the request from v6.
            let epoch = if version >= 6 {
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

/// The records of a commit (plain or transactional) and the offsets they hold, in request
/// order. A partition whose metadata is longer than `max` bytes is left out: it is answered
/// OFFSET_METADATA_TOO_LARGE.
pub(crate) struct CommitBuilder<'a> {
    group_id: &'a str,
    now: i64,
    max: usize,
    records: Vec<StoredRecord>,
    accepted: AcceptedOffsets,
}

impl<'a> CommitBuilder<'a> {
    pub(crate) fn new(group_id: &'a str, now: i64, max: usize) -> Self {
        Self {
            group_id,
            now,
            max,
            records: Vec::new(),
            accepted: Vec::new(),
        }
    }

    pub(crate) fn add(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        leader_epoch: i32,
        metadata: Option<&str>,
    ) {
        let metadata = metadata.unwrap_or("");
        if metadata.len() > self.max {
            return;
        }
        let value = OffsetValue {
            offset,
            leader_epoch,
            metadata: metadata.to_string(),
            commit_timestamp: self.now,
        };
        self.records.push((
            encode_key(&RecordKey::Offset {
                group: self.group_id.to_string(),
                topic: topic.to_string(),
                partition,
            }),
            Some(encode_value(&RecordValue::Offset(value.clone()))),
        ));
        self.accepted.push(((topic.to_string(), partition), value));
    }

    pub(crate) fn finish(self) -> (Vec<StoredRecord>, AcceptedOffsets) {
        (self.records, self.accepted)
    }
}

/// The OffsetFetch answer (below v8) of a coordinator that does not serve the group.
/// Versions 0 and 1 have no top-level error: each partition carries it.
fn unserved_fetch(
    e: ResponseError,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    version: i16,
) -> OffsetFetchResponse {
    let topics = if version < 2 {
        wanted
            .unwrap_or_default()
            .into_iter()
            .map(|(topic, parts)| {
                OffsetFetchResponseTopic::default()
                    .with_name(TopicName(s(&topic)))
                    .with_partitions(
                        parts
                            .into_iter()
                            .map(|p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_error_code(e.code())
                            })
                            .collect(),
                    )
            })
            .collect()
    } else {
        Vec::new()
    };
    OffsetFetchResponse::default()
        .with_error_code(e.code())
        .with_topics(topics)
}

/// Per partition: index, offset, leader epoch, metadata, error code.
type PartitionOffsets = Vec<(i32, i64, i32, String, i16)>;

/// (topic, [(partition, offset, leader epoch, metadata)]); unknown partitions get offset -1.
fn fetch_offsets(
    group: Option<&Group>,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    version: i16,
    require_stable: bool,
) -> Vec<(String, PartitionOffsets)> {
    let epoch = |e: i32| if version >= 5 { e } else { -1 };
    // Kafka's answer for an offset an open transaction may still replace (KIP-447).
    let unstable = |topic: &str, p: i32| {
        require_stable && group.is_some_and(|g| txn_offsets::has_pending(g, topic, p))
    };
    let unstable_entry = (
        -1,
        -1,
        String::new(),
        ResponseError::UnstableOffsetCommit.code(),
    );
    match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(topic, partitions)| {
                let parts = partitions
                    .into_iter()
                    .map(|p| {
                        if unstable(&topic, p) {
                            let (o, e, m, code) = unstable_entry.clone();
                            return (p, o, e, m, code);
                        }
                        match group.and_then(|g| g.offsets.get(&(topic.clone(), p))) {
                            Some(v) => (p, v.offset, epoch(v.leader_epoch), v.metadata.clone(), 0),
                            None => (p, -1, -1, String::new(), 0),
                        }
                    })
                    .collect();
                (topic, parts)
            })
            .collect(),
        None => {
            let mut by_topic: std::collections::BTreeMap<String, PartitionOffsets> =
                Default::default();
            if let Some(g) = group {
                for ((topic, p), v) in &g.offsets {
                    let entry = if unstable(topic, *p) {
                        let (o, e, m, code) = unstable_entry.clone();
                        (*p, o, e, m, code)
                    } else {
                        (*p, v.offset, epoch(v.leader_epoch), v.metadata.clone(), 0)
                    };
                    by_topic.entry(topic.clone()).or_default().push(entry);
                }
            }
            by_topic
                .into_iter()
                .map(|(t, mut parts)| {
                    parts.sort_by_key(|p| p.0);
                    (t, parts)
                })
                .collect()
        }
    }
}
