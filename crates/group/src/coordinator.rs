//! The group coordinator: every group this broker coordinates, their timers, and the durable
//! record of their state in `__consumer_offsets`.
//!
//! - **What it coordinates.** A group belongs to partition `partition_for(group)` of
//!   `__consumer_offsets`; this broker coordinates the groups of the partitions it leads
//!   (`on_election` loads a partition's groups from the log, `on_resignation` drops them), and
//!   answers NOT_COORDINATOR for any other group, and COORDINATOR_LOAD_IN_PROGRESS while a load
//!   runs.
//! - **The two protocols.** Classic groups (JoinGroup/SyncGroup/Heartbeat/LeaveGroup, in
//!   `classic.rs`) and KIP-848 consumer groups (ConsumerGroupHeartbeat, in `consumer.rs` and
//!   `consumer_api.rs`) share the group map; offsets (`offsets.rs`) are committed to either.
//! - **Locks.** `groups` (every group's state) and `owned` (the led partitions and their load
//!   generation), taken in that order and never across an `.await`: a handler decides and
//!   appends its records under `groups`, then awaits their durability without it. `tick` runs
//!   the session and rebalance timers under the same lock.
//! - **Invariants.** A state change is answered only after its record is durable in
//!   `__consumer_offsets` (acks=all through the `OffsetsStore` seam); a load that a newer
//!   election or a resignation superseded (`Owned::load`) installs nothing; time comes from the
//!   injected clock, so timers are driven by tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::Bytes;
use ferry_common::SharedClock;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::classic::{self, Answer, Effects, JoinClient};
use crate::config::GroupConfig;
use crate::consumer::{self, ConsumerGroupOverrides, ConsumerProtocolConfig, TopicCatalog};
use crate::group::{Group, GroupState, Member};
use crate::migration;
use crate::offsets_topic::{
    self, decode_key, decode_value, encode_key, encode_value, GroupValue, MemberValue, RecordKey,
    RecordValue,
};
use crate::store::{OffsetsStore, StoreError, StoredEntry, StoredRecord};
use crate::txn_offsets;

/// Who sent a request, as DescribeGroups reports members.
#[derive(Debug, Clone, Copy)]
pub struct ClientInfo<'a> {
    pub client_id: &'a str,
    pub client_host: &'a str,
}

pub struct GroupCoordinator {
    pub(crate) config: GroupConfig,
    pub(crate) clock: SharedClock,
    pub(crate) store: Arc<dyn OffsetsStore>,
    /// The groups of the partitions led and loaded here. Lock order: `groups`, then `owned`.
    pub(crate) groups: Mutex<HashMap<String, Group>>,
    /// The `__consumer_offsets` partitions this broker leads, as Kafka's coordinator tracks
    /// them: a group of any other partition gets NOT_COORDINATOR.
    owned: Mutex<HashMap<i32, Owned>>,
    next_load: AtomicU64,
    pub(crate) catalog: Arc<dyn TopicCatalog>,
    /// The groups' own settings (GROUP config resources), as the metadata image holds them.
    overrides: RwLock<HashMap<String, ConsumerGroupOverrides>>,
}

/// One led partition: the leader epoch it was taken at, and whether its groups are loaded.
#[derive(Debug, Clone)]
struct Owned {
    epoch: i32,
    /// Tells one load from the next, so that a load superseded by a newer election (or a
    /// resignation) does not install its groups, and in-flight commits of an older load do not
    /// touch the newer one's state.
    load: u64,
    loaded: bool,
    /// Transactions that ended (producer id, committed) while the load ran: the load may have
    /// read the log before their markers, so they are applied when it installs its groups.
    ended_while_loading: Vec<(i64, bool)>,
}

/// Operations on a group, as Kafka's `AclOperation` bits: READ (3), DELETE (6), DESCRIBE (8),
/// DESCRIBE_CONFIGS (10), ALTER_CONFIGS (11): Kafka's answer without an authorizer. With ACLs the
/// broker replaces it with the principal's own (`group_acl`).
const ALL_GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

/// The authorized-operations field: the bit set when asked for, Kafka's "omitted" otherwise.
pub(crate) fn authorized_operations(requested: bool) -> i32 {
    if requested {
        ALL_GROUP_OPERATIONS
    } else {
        i32::MIN
    }
}

pub(crate) fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

impl GroupCoordinator {
    pub fn new(
        config: GroupConfig,
        clock: SharedClock,
        store: Arc<dyn OffsetsStore>,
        catalog: Arc<dyn TopicCatalog>,
    ) -> Self {
        Self {
            config,
            clock,
            store,
            groups: Mutex::new(HashMap::new()),
            owned: Mutex::new(HashMap::new()),
            next_load: AtomicU64::new(1),
            catalog,
            overrides: RwLock::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> &GroupConfig {
        &self.config
    }

    /// Replaces the groups' own settings (the broker follows the metadata image with it); they
    /// apply from each member's next heartbeat, and to session expiry at once.
    pub fn set_group_overrides(&self, overrides: HashMap<String, ConsumerGroupOverrides>) {
        *self.overrides.write().unwrap_or_else(|p| p.into_inner()) = overrides;
    }

    /// The consumer-protocol settings of group `id`: the broker's, with the group's own over
    /// them.
    pub(crate) fn consumer_config(&self, id: &str) -> std::borrow::Cow<'_, ConsumerProtocolConfig> {
        let overrides = self
            .overrides
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .copied();
        self.config.consumer.for_group(overrides.as_ref())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn partition_for(&self, group: &str) -> i32 {
        offsets_topic::partition_for(group, self.config.offsets_topic_partitions)
    }

    fn owned(&self) -> MutexGuard<'_, HashMap<i32, Owned>> {
        self.owned.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes every partition as led here and rebuilds all groups from `__consumer_offsets`
    /// (replacing what is in memory): a coordinator that is the only broker.
    pub fn load(&self) -> Result<usize, StoreError> {
        let mut n = 0;
        for p in 0..self.config.offsets_topic_partitions {
            self.on_resignation(p);
            n += self.on_election(p, 0)?;
        }
        Ok(n)
    }

    /// This broker became leader of `__consumer_offsets` partition `partition` at leader epoch
    /// `epoch` (Kafka's `onElection`): replays the partition's log up to its end and serves its
    /// groups from then on; until then their requests get COORDINATOR_LOAD_IN_PROGRESS. A
    /// partition already taken at this epoch is left as it is. Returns the groups loaded.
    pub fn on_election(&self, partition: i32, epoch: i32) -> Result<usize, StoreError> {
        let load = {
            let mut owned = self.owned();
            if owned.get(&partition).is_some_and(|o| o.epoch == epoch) {
                return Ok(0);
            }
            let load = self.next_load.fetch_add(1, Ordering::Relaxed);
            owned.insert(
                partition,
                Owned {
                    epoch,
                    load,
                    loaded: false,
                    ended_while_loading: Vec::new(),
                },
            );
            load
        };
        // Groups of an earlier epoch are stale: the log may have moved on under another leader.
        self.drop_groups(&mut self.lock(), partition);
        let records = match self.store.read_all(partition) {
            Ok(r) => r,
            Err(e) => {
                let mut owned = self.owned();
                if owned.get(&partition).is_some_and(|o| o.load == load) {
                    owned.remove(&partition);
                }
                return Err(e);
            }
        };
        let mut loaded = replay(partition, records, self.now());
        let mut groups = self.lock();
        let mut owned = self.owned();
        match owned.get_mut(&partition) {
            Some(o) if o.load == load => {
                o.loaded = true;
                for (producer_id, commit) in std::mem::take(&mut o.ended_while_loading) {
                    for group in loaded.values_mut() {
                        txn_offsets::complete(group, producer_id, commit);
                    }
                }
            }
            // Resigned or re-elected meanwhile: that one decides.
            _ => return Ok(0),
        }
        let n = loaded.len();
        groups.extend(loaded);
        tracing::info!(
            partition,
            epoch,
            groups = n,
            "loaded the consumer groups of a __consumer_offsets partition led here"
        );
        Ok(n)
    }

    /// This broker no longer leads `partition` (Kafka's `onResignation`): its groups leave
    /// memory, and their parked JoinGroup and SyncGroup requests get NOT_COORDINATOR.
    pub fn on_resignation(&self, partition: i32) {
        let mut groups = self.lock();
        if self.owned().remove(&partition).is_none() {
            return;
        }
        let n = self.drop_groups(&mut groups, partition);
        if n > 0 {
            tracing::info!(
                partition,
                groups = n,
                "unloaded the consumer groups of a __consumer_offsets partition no longer led here"
            );
        }
    }

    fn drop_groups(&self, groups: &mut HashMap<String, Group>, partition: i32) -> usize {
        let ids: Vec<String> = groups
            .keys()
            .filter(|id| self.partition_for(id) == partition)
            .cloned()
            .collect();
        for id in &ids {
            let Some(mut group) = groups.remove(id) else {
                continue;
            };
            for m in group.members.values_mut() {
                if let Some((tx, _)) = m.join_waiter.take() {
                    let _ = tx.send(classic::join_error(ResponseError::NotCoordinator, &m.id));
                }
                if let Some((tx, _)) = m.sync_waiter.take() {
                    let _ = tx.send(classic::sync_error(ResponseError::NotCoordinator));
                }
            }
        }
        ids.len()
    }

    /// Producer `producer_id`'s transaction ended (`commit`: committed) with its marker durable
    /// in `__consumer_offsets` partition `partition` (Kafka's `onTransactionCompleted`): its
    /// transactional offsets of the groups there take effect, or are dropped.
    pub fn complete_transaction(&self, partition: i32, producer_id: i64, commit: bool) {
        let mut groups = self.lock();
        {
            let mut owned = self.owned();
            match owned.get_mut(&partition) {
                // Not led here: whoever loads it replays the marker.
                None => return,
                Some(o) if !o.loaded => {
                    o.ended_while_loading.push((producer_id, commit));
                    return;
                }
                Some(_) => {}
            }
        }
        for group in groups.values_mut() {
            if self.partition_for(&group.id) == partition {
                txn_offsets::complete(group, producer_id, commit);
            }
        }
    }

    /// The partitions led here, with the leader epoch they were taken at.
    pub fn led_partitions(&self) -> Vec<(i32, i32)> {
        let mut led: Vec<(i32, i32)> = self.owned().iter().map(|(p, o)| (*p, o.epoch)).collect();
        led.sort_unstable();
        led
    }

    /// Whether this broker serves `group` now: NOT_COORDINATOR if it does not lead the group's
    /// partition, COORDINATOR_LOAD_IN_PROGRESS while it loads it. Returns the load it serves
    /// from. Call with the `groups` lock held so that the answer holds until it is released.
    pub(crate) fn serves(&self, group: &str) -> Result<u64, ResponseError> {
        match self.owned().get(&self.partition_for(group)) {
            None => Err(ResponseError::NotCoordinator),
            Some(o) if !o.loaded => Err(ResponseError::CoordinatorLoadInProgress),
            Some(o) => Ok(o.load),
        }
    }

    /// The load serving `group`'s partition now, if it is loaded.
    pub(crate) fn current_load(&self, group: &str) -> Option<u64> {
        self.serves(group).ok()
    }

    /// Some led partition is still loading (ListGroups reports it).
    pub(crate) fn loading(&self) -> bool {
        self.owned().values().any(|o| !o.loaded)
    }

    /// Persists what `effects` asks for, then answers parked requests.
    pub(crate) fn apply(&self, group: &Group, effects: Effects) {
        if effects.persist_group {
            // Written like Kafka's group metadata, though the answers do not wait for the ISR.
            if let Err(e) = self
                .store
                .append(self.partition_for(&group.id), &[group_record(group)])
            {
                tracing::error!(group = %group.id, error = %e, "cannot persist group metadata");
            }
        }
        for d in effects.deliveries {
            d.deliver();
        }
    }

    pub async fn join_group(
        &self,
        req: JoinGroupRequest,
        version: i16,
        client: ClientInfo<'_>,
    ) -> JoinGroupResponse {
        if req.group_id.is_empty() {
            return classic::join_error(ResponseError::InvalidGroupId, &req.member_id);
        }
        let answer = {
            let mut groups = self.lock();
            if let Err(e) = self.serves(&req.group_id) {
                return classic::join_error(e, &req.member_id);
            }
            let now = self.now();
            let group = groups
                .entry(req.group_id.to_string())
                .or_insert_with(|| Group::new(&req.group_id, now));
            let new_member_id = format!("{}-{}", client.client_id, uuid::Uuid::new_v4());
            let join_client = JoinClient {
                client_id: client.client_id,
                client_host: client.client_host,
                new_member_id,
            };
            if group.has_consumer_members() {
                let cfg = self.consumer_config(&req.group_id);
                let Some(c) = group.consumer.as_mut() else {
                    return classic::join_error(ResponseError::UnknownServerError, &req.member_id);
                };
                let (response, changed) = migration::join(
                    c,
                    &req,
                    version,
                    join_client,
                    now,
                    &self.config,
                    &cfg,
                    self.catalog.as_ref(),
                );
                if changed {
                    self.persist_consumer(group);
                }
                return with_version(response, version);
            }
            let (answer, effects) =
                classic::join(group, &req, version, join_client, now, &self.config);
            self.apply(group, effects);
            answer
        };
        let response = match answer {
            Answer::Now(r) => r,
            Answer::Wait(rx) => rx.await.unwrap_or_else(|_| {
                classic::join_error(ResponseError::CoordinatorNotAvailable, &req.member_id)
            }),
        };
        with_version(response, version)
    }

    pub async fn sync_group(&self, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
        if req.group_id.is_empty() {
            return classic::sync_error(ResponseError::InvalidGroupId);
        }
        let answer = {
            let mut groups = self.lock();
            if let Err(e) = self.serves(&req.group_id) {
                return classic::sync_error(e);
            }
            let Some(group) = groups.get_mut(req.group_id.as_str()) else {
                return classic::sync_error(ResponseError::UnknownMemberId);
            };
            if group.has_consumer_members() {
                let Some(c) = group.consumer.as_mut() else {
                    return classic::sync_error(ResponseError::UnknownServerError);
                };
                return migration::sync(c, &req, version, self.now(), self.catalog.as_ref());
            }
            let (answer, effects) = classic::sync(group, &req, version, self.now());
            self.apply(group, effects);
            answer
        };
        match answer {
            Answer::Now(r) => r,
            Answer::Wait(rx) => rx
                .await
                .unwrap_or_else(|_| classic::sync_error(ResponseError::CoordinatorNotAvailable)),
        }
    }

    pub fn heartbeat(&self, req: HeartbeatRequest) -> HeartbeatResponse {
        let mut groups = self.lock();
        let serves = self.serves(&req.group_id);
        let code = match groups.get_mut(req.group_id.as_str()) {
            None if req.group_id.is_empty() => ResponseError::InvalidGroupId.code(),
            _ if serves.is_err() => serves.err().map_or(0, |e| e.code()),
            None => ResponseError::UnknownMemberId.code(),
            Some(group) => {
                let answer = match group.consumer.as_mut() {
                    Some(c) if !c.members.is_empty() => migration::heartbeat(c, &req, self.now()),
                    _ => classic::heartbeat(group, &req, self.now()),
                };
                answer.err().map_or(0, |e| e.code())
            }
        };
        HeartbeatResponse::default().with_error_code(code)
    }

    pub fn leave_group(&self, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let identities: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let mut groups = self.lock();
        if let Err(e) = self.serves(&req.group_id) {
            return LeaveGroupResponse::default().with_error_code(e.code());
        }
        let now = self.now();
        let Some(group) = groups.get_mut(req.group_id.as_str()) else {
            return LeaveGroupResponse::default()
                .with_error_code(ResponseError::UnknownMemberId.code());
        };
        if group.has_consumer_members() {
            let Some(c) = group.consumer.as_mut() else {
                return LeaveGroupResponse::default()
                    .with_error_code(ResponseError::UnknownServerError.code());
            };
            let (codes, left) = migration::leave(c, &identities);
            if !left.is_empty() {
                self.persist_consumer(group);
            }
            let results = identities
                .iter()
                .zip(codes)
                .map(|((member_id, instance), code)| {
                    MemberResponse::default()
                        .with_member_id(s(member_id))
                        .with_group_instance_id(instance.as_deref().map(s))
                        .with_error_code(code)
                })
                .collect();
            return leave_response(results, version);
        }
        let mut results = Vec::new();
        let mut removed_any = false;
        for (member_id, instance) in identities {
            let resolved = match &instance {
                Some(inst) => match group.static_members.get(inst) {
                    Some(id) if member_id.is_empty() || *id == member_id => Ok(id.clone()),
                    Some(_) => Err(ResponseError::FencedInstanceId),
                    None => Err(ResponseError::UnknownMemberId),
                },
                None if group.pending.remove(&member_id).is_some() => Ok(String::new()),
                None if group.members.contains_key(&member_id) => Ok(member_id.clone()),
                None => Err(ResponseError::UnknownMemberId),
            };
            let code = match resolved {
                Ok(id) => {
                    if !id.is_empty() {
                        classic::remove_member(group, &id);
                        tracing::info!(group = %group.id, member = %id, "member left the group");
                    }
                    removed_any = true;
                    0
                }
                Err(e) => e.code(),
            };
            results.push(
                MemberResponse::default()
                    .with_member_id(s(&member_id))
                    .with_group_instance_id(instance.as_deref().map(s))
                    .with_error_code(code),
            );
        }
        if removed_any {
            let effects = classic::after_removal(group, now, &self.config);
            self.apply(group, effects);
        }
        leave_response(results, version)
    }

    /// Fires session, rebalance and sync timers, and expires offsets of empty groups.
    pub fn tick(&self) {
        let now = self.now();
        let mut groups = self.lock();
        for group in groups.values_mut() {
            let effects = classic::tick(group, now, &self.config);
            self.apply(group, effects);
            // Only consumer-protocol groups look their settings up.
            let expired = match group.consumer.as_mut() {
                Some(c) => consumer::expire(c, now, &self.consumer_config(&group.id)),
                None => Vec::new(),
            };
            if !expired.is_empty() {
                self.after_consumer_members_left(group, &expired, now);
            }
        }
        self.expire_offsets(&mut groups, now);
    }

    pub fn list_groups(&self, req: ListGroupsRequest) -> ListGroupsResponse {
        let groups = self.lock();
        let states: Vec<String> = req.states_filter.iter().map(|x| x.to_lowercase()).collect();
        let types: Vec<String> = req.types_filter.iter().map(|x| x.to_lowercase()).collect();
        let mut listed: Vec<ListedGroup> = groups
            .values()
            .filter(|g| !g.is(GroupState::Dead))
            .map(|g| match &g.consumer {
                Some(c) => (g, c.state_name(), "consumer", "consumer"),
                None => (
                    g,
                    g.state.name(),
                    g.protocol_type.as_deref().unwrap_or(""),
                    "classic",
                ),
            })
            .filter(|(_, state, _, _)| states.is_empty() || states.contains(&state.to_lowercase()))
            .filter(|(_, _, _, ty)| types.is_empty() || types.iter().any(|t| t == ty))
            .map(|(g, state, protocol_type, ty)| {
                ListedGroup::default()
                    .with_group_id(GroupId(s(&g.id)))
                    .with_protocol_type(s(protocol_type))
                    .with_group_state(s(state))
                    .with_group_type(s(ty))
            })
            .collect();
        listed.sort_by(|a, b| a.group_id.as_str().cmp(b.group_id.as_str()));
        // Memory holds only the groups of partitions loaded here; like Kafka, the groups are
        // listed even while another partition loads.
        let code = if self.loading() {
            ResponseError::CoordinatorLoadInProgress.code()
        } else {
            0
        };
        ListGroupsResponse::default()
            .with_error_code(code)
            .with_groups(listed)
    }

    pub fn describe_groups(
        &self,
        req: DescribeGroupsRequest,
        version: i16,
    ) -> DescribeGroupsResponse {
        let groups = self.lock();
        let described = req
            .groups
            .iter()
            .map(|id| {
                let base = DescribedGroup::default()
                    .with_group_id(id.clone())
                    .with_authorized_operations(authorized_operations(
                        req.include_authorized_operations,
                    ));
                if id.is_empty() {
                    return base
                        .with_error_code(ResponseError::InvalidGroupId.code())
                        .with_group_state(s("Dead"));
                }
                if let Err(e) = self.serves(id) {
                    return base.with_error_code(e.code()).with_group_state(s("Dead"));
                }
                match groups.get(id.as_str()) {
                    None => {
                        let base = base.with_group_state(s("Dead"));
                        if version >= 6 {
                            base.with_error_code(ResponseError::GroupIdNotFound.code())
                                .with_error_message(Some(s(&format!(
                                    "Group {} not found.",
                                    id.as_str()
                                ))))
                        } else {
                            base
                        }
                    }
                    Some(g) if g.consumer.is_some() => {
                        let c = g.consumer.as_ref();
                        base.with_group_state(s(c.map(|c| c.state_name()).unwrap_or("Empty")))
                            .with_protocol_type(s("consumer"))
                            .with_members(
                                c.map(|c| {
                                    c.members
                                        .values()
                                        .map(|m| {
                                            DescribedGroupMember::default()
                                                .with_member_id(s(&m.id))
                                                .with_group_instance_id(if version >= 4 {
                                                    m.instance_id.as_deref().map(s)
                                                } else {
                                                    None
                                                })
                                                .with_client_id(s(&m.client_id))
                                                .with_client_host(s(&m.client_host))
                                        })
                                        .collect()
                                })
                                .unwrap_or_default(),
                            )
                    }
                    Some(g) => {
                        let stable = g.is(GroupState::Stable);
                        let protocol = g.protocol.clone().unwrap_or_default();
                        base.with_group_state(s(g.state.name()))
                            .with_protocol_type(s(g.protocol_type.as_deref().unwrap_or("")))
                            .with_protocol_data(s(
                                if stable || g.is(GroupState::CompletingRebalance) {
                                    &protocol
                                } else {
                                    ""
                                },
                            ))
                            .with_members(
                                g.members
                                    .values()
                                    .map(|m| {
                                        let mut dm = DescribedGroupMember::default()
                                            .with_member_id(s(&m.id))
                                            .with_group_instance_id(m.instance_id.as_deref().map(s))
                                            .with_client_id(s(&m.client_id))
                                            .with_client_host(s(&m.client_host));
                                        if stable {
                                            dm = dm
                                                .with_member_metadata(m.metadata_for(&protocol))
                                                .with_member_assignment(m.assignment.clone());
                                        }
                                        if version < 4 {
                                            dm.group_instance_id = None;
                                        }
                                        dm
                                    })
                                    .collect(),
                            )
                    }
                }
            })
            .collect();
        DescribeGroupsResponse::default().with_groups(described)
    }

    pub fn delete_groups(&self, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
        let mut groups = self.lock();
        let results = req
            .groups_names
            .iter()
            .map(|id| {
                let serves = self.serves(id);
                let code = match groups.get(id.as_str()) {
                    _ if id.is_empty() => ResponseError::InvalidGroupId.code(),
                    _ if serves.is_err() => serves.err().map_or(0, |e| e.code()),
                    None => ResponseError::GroupIdNotFound.code(),
                    Some(g) if !g.is_empty_of_members() => ResponseError::NonEmptyGroup.code(),
                    Some(g) => {
                        let mut records: Vec<StoredRecord> = g
                            .offsets
                            .keys()
                            .map(|(topic, partition)| {
                                (
                                    encode_key(&RecordKey::Offset {
                                        group: g.id.clone(),
                                        topic: topic.clone(),
                                        partition: *partition,
                                    }),
                                    None,
                                )
                            })
                            .collect();
                        records.push((encode_key(&RecordKey::Group { group: g.id.clone() }), None));
                        if g.consumer.is_some() {
                            records.push((
                                encode_key(&RecordKey::ConsumerGroup { group: g.id.clone() }),
                                None,
                            ));
                        }
                        match self.store.append(self.partition_for(&g.id), &records) {
                            Ok(_) => {
                                groups.remove(id.as_str());
                                tracing::info!(group = %id.as_str(), "deleted group");
                                0
                            }
                            Err(e) => {
                                tracing::error!(group = %id.as_str(), error = %e, "cannot delete group");
                                e.error.code()
                            }
                        }
                    }
                };
                DeletableGroupResult::default().with_group_id(id.clone()).with_error_code(code)
            })
            .collect();
        DeleteGroupsResponse::default().with_results(results)
    }
}

/// A JoinGroup response as the request's version carries it.
fn with_version(mut response: JoinGroupResponse, version: i16) -> JoinGroupResponse {
    if version < 7 {
        response.protocol_type = None;
    }
    if version < 5 {
        for m in &mut response.members {
            m.group_instance_id = None;
        }
    }
    response
}

/// A LeaveGroup response: one result per member from v3, the first one's error before.
fn leave_response(results: Vec<MemberResponse>, version: i16) -> LeaveGroupResponse {
    let top = if version < 3 {
        results.first().map(|r| r.error_code).unwrap_or(0)
    } else {
        0
    };
    let response = LeaveGroupResponse::default().with_error_code(top);
    if version >= 3 {
        response.with_members(results)
    } else {
        response
    }
}

/// Rebuilds the groups of one partition from its records, oldest first.
/// Rebuilds the groups of `partition` from its entries in log order (with their offsets).
fn replay(partition: i32, entries: Vec<(i64, StoredEntry)>, now: i64) -> HashMap<String, Group> {
    let mut groups: HashMap<String, Group> = HashMap::new();
    for (offset, entry) in entries {
        match entry {
            StoredEntry::Record(record) => {
                replay_record(partition, &mut groups, record, offset, now);
            }
            StoredEntry::Transactional {
                producer_id,
                record,
            } => txn_offsets::replay_pending(
                partition,
                &mut groups,
                producer_id,
                record,
                offset,
                now,
            ),
            StoredEntry::Marker {
                producer_id,
                commit,
            } => {
                for group in groups.values_mut() {
                    txn_offsets::complete(group, producer_id, commit);
                }
            }
        }
    }
    groups.retain(|_, g| {
        !(g.members.is_empty()
            && g.offsets.is_empty()
            && g.pending_txn_offsets.is_empty()
            && g.protocol_type.is_none()
            && g.consumer.is_none())
    });
    groups
}

/// Applies one record written outside a transaction, found at log offset `offset`.
fn replay_record(
    partition: i32,
    groups: &mut HashMap<String, Group>,
    (key, value): StoredRecord,
    offset: i64,
    now: i64,
) {
    let Some((key, value)) = decode_record(partition, key, value) else {
        return;
    };
    let group = groups
        .entry(key.group().to_string())
        .or_insert_with(|| Group::new(key.group(), now));
    if let RecordKey::Offset {
        topic, partition, ..
    } = &key
    {
        // A transaction committing later does not undo this offset with an older one.
        group
            .offset_log_ends
            .insert((topic.clone(), *partition), offset + 1);
    }
    apply_record(group, key, value, now);
}

/// A stored record's key and value (`None`: a tombstone), or `None` after a warning when
/// either cannot be read (replay skips it).
pub(crate) fn decode_record(
    partition: i32,
    key: Bytes,
    value: Option<Bytes>,
) -> Option<(RecordKey, Option<RecordValue>)> {
    let key = decode_key(key)
        .map_err(|e| tracing::warn!(partition, error = %e, "skipping unreadable group record key"))
        .ok()?;
    let value = value
        .map(|v| decode_value(&key, v))
        .transpose()
        .map_err(
            |e| tracing::warn!(partition, error = %e, "skipping unreadable group record value"),
        )
        .ok()?;
    Some((key, value))
}

pub(crate) fn group_record(group: &Group) -> StoredRecord {
    let value = GroupValue {
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        generation: group.generation,
        protocol: group.protocol.clone(),
        leader: group.leader.clone(),
        state_timestamp: group.state_since_ms,
        members: group
            .members
            .values()
            .map(|m| MemberValue {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: m.session_timeout_ms,
                subscription: group
                    .protocol
                    .as_deref()
                    .map(|p| m.metadata_for(p))
                    .unwrap_or_default(),
                assignment: m.assignment.clone(),
            })
            .collect(),
    };
    (
        encode_key(&RecordKey::Group {
            group: group.id.clone(),
        }),
        Some(encode_value(&RecordValue::Group(value))),
    )
}

fn apply_record(group: &mut Group, key: RecordKey, value: Option<RecordValue>, now: i64) {
    match (key, value) {
        (
            RecordKey::Offset {
                topic, partition, ..
            },
            Some(RecordValue::Offset(v)),
        ) => {
            group.offsets.insert((topic, partition), v);
        }
        (
            RecordKey::Offset {
                topic, partition, ..
            },
            None,
        ) => {
            group.offsets.remove(&(topic, partition));
        }
        (RecordKey::Group { .. }, Some(RecordValue::Group(v))) => {
            group.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type);
            group.generation = v.generation;
            group.protocol = v.protocol.clone();
            group.leader = v.leader;
            group.members.clear();
            group.static_members.clear();
            for m in v.members {
                if let Some(inst) = &m.group_instance_id {
                    group
                        .static_members
                        .insert(inst.clone(), m.member_id.clone());
                }
                let protocols = match &v.protocol {
                    Some(p) => vec![(p.clone(), m.subscription.clone())],
                    None => Vec::new(),
                };
                group.members.insert(
                    m.member_id.clone(),
                    Member {
                        id: m.member_id,
                        instance_id: m.group_instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        rebalance_timeout_ms: m.rebalance_timeout_ms,
                        session_timeout_ms: m.session_timeout_ms,
                        protocols,
                        assignment: m.assignment,
                        join_waiter: None,
                        sync_waiter: None,
                        last_heartbeat_ms: now,
                    },
                );
            }
            let state = if group.members.is_empty() || group.protocol.is_none() {
                GroupState::Empty
            } else {
                GroupState::Stable
            };
            group.transition(state, now);
        }
        (RecordKey::ConsumerGroup { .. }, Some(RecordValue::ConsumerGroup(v))) => {
            group.consumer = Some(consumer::restore(v, now));
        }
        (RecordKey::ConsumerGroup { .. }, None) => {
            group.consumer = None;
        }
        (RecordKey::Group { .. }, None) => {
            group.members.clear();
            group.static_members.clear();
            group.protocol_type = None;
            group.protocol = None;
            group.leader = None;
            group.transition(GroupState::Empty, now);
        }
        (key, value) => {
            tracing::warn!(
                ?key,
                ?value,
                "group record with a mismatched value; skipped"
            );
        }
    }
}

/// Topics a consumer-protocol member subscribed to (ConsumerProtocolSubscription: version,
/// then an array of topic names).
pub(crate) fn subscribed_topics(metadata: &Bytes) -> Vec<String> {
    let mut b = metadata.as_ref();
    let mut out = Vec::new();
    if b.len() < 6 {
        return out;
    }
    b = &b[2..];
    let n = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    b = &b[4..];
    for _ in 0..n.max(0) {
        if b.len() < 2 {
            break;
        }
        let len = i16::from_be_bytes([b[0], b[1]]).max(0) as usize;
        b = &b[2..];
        if b.len() < len {
            break;
        }
        out.push(String::from_utf8_lossy(&b[..len]).into_owned());
        b = &b[len..];
    }
    out
}
