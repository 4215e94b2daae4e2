//! Online migration between the classic and the consumer group protocols (KIP-848's upgrade
//! path, Kafka's `group.consumer.migration.policy`). A team moves its consumers to
//! `group.protocol=consumer` one at a time, without stopping the group:
//!
//! - **Upgrade.** The first ConsumerGroupHeartbeat that joins a classic group with members
//!   turns it into a consumer group. Each classic member becomes a member of it at an epoch
//!   equal to the group's generation, owning the partitions its last SyncGroup gave it.
//! - **Classic members in a consumer group** keep speaking JoinGroup, SyncGroup, Heartbeat and
//!   LeaveGroup. A JoinGroup records the member's subscription (from its embedded consumer
//!   protocol) and moves it towards its target assignment, as a ConsumerGroupHeartbeat moves a
//!   consumer member; its generation is its member epoch, and SyncGroup hands it its current
//!   assignment. A Heartbeat answers REBALANCE_IN_PROGRESS whenever the member has partitions
//!   to give up or to take, so that it joins again. A classic member gives up partitions by
//!   joining again without them in its owned partitions (an eager client gives up everything).
//! - **Downgrade.** When the last consumer-protocol member leaves (or is fenced) and classic
//!   members remain, the group becomes a classic group again, at a generation equal to the
//!   group epoch, and rebalances.
//!
//! The same rule holds throughout: a partition is never handed to a member while another still
//! owns it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    consumer_protocol_assignment, ConsumerProtocolAssignment, ConsumerProtocolSubscription,
    HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::assignor::Assignment;
use crate::classic::{self, join_error, sync_error, Delivery, Effects, JoinClient};
use crate::config::{GroupConfig, MigrationPolicy};
use crate::consumer::{
    self, is_empty, ConsumerGroup, ConsumerMember, ConsumerProtocolConfig, TopicCatalog,
};
use crate::group::{Group, GroupState, Member};
use crate::offsets_topic::ClassicMemberValue;

/// The protocol type of groups whose members embed the consumer protocol.
pub(crate) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";
/// The newest versions of the embedded consumer protocol's messages that ferry reads and
/// writes; a newer one is read as this one, as Kafka's `ConsumerProtocol` does.
const SUBSCRIPTION_VERSION_MAX: i16 = 3;
const ASSIGNMENT_VERSION_MAX: i16 = 3;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// An embedded consumer-protocol message: its version, then its body in that version (read as
/// `max_version` when newer).
fn decode_embedded<T: Decodable>(bytes: &Bytes, max_version: i16) -> Result<T, String> {
    let mut buf = bytes.clone();
    if buf.remaining() < 2 {
        return Err("shorter than its version".to_string());
    }
    let version = buf.get_i16();
    if version < 0 {
        return Err(format!("version {version}"));
    }
    T::decode(&mut buf, version.min(max_version)).map_err(|e| e.to_string())
}

/// An embedded ConsumerProtocolSubscription.
pub(crate) fn decode_subscription(
    metadata: &Bytes,
) -> Result<ConsumerProtocolSubscription, String> {
    decode_embedded(metadata, SUBSCRIPTION_VERSION_MAX)
}

/// An embedded ConsumerProtocolAssignment as topic ids; topics the catalog does not know any
/// more are left out.
fn decode_assignment(bytes: &Bytes, catalog: &dyn TopicCatalog) -> Result<Assignment, String> {
    let mut out = Assignment::new();
    if bytes.is_empty() {
        return Ok(out);
    }
    let assignment: ConsumerProtocolAssignment = decode_embedded(bytes, ASSIGNMENT_VERSION_MAX)?;
    for tp in assignment.assigned_partitions {
        if let Some((id, _)) = catalog.topic(tp.topic.as_str()) {
            out.entry(id).or_default().extend(tp.partitions);
        }
    }
    Ok(out)
}

/// `assigned` as an embedded ConsumerProtocolAssignment of the version the member subscribed
/// with (capped at the newest ferry writes).
fn encode_assignment(assigned: &Assignment, catalog: &dyn TopicCatalog, version: i16) -> Bytes {
    let version = version.clamp(0, ASSIGNMENT_VERSION_MAX);
    let partitions = assigned
        .iter()
        .filter_map(|(id, ps)| {
            let name = catalog.topic_name(*id)?;
            Some(
                consumer_protocol_assignment::TopicPartition::default()
                    .with_topic(TopicName(s(&name)))
                    .with_partitions(ps.iter().copied().collect()),
            )
        })
        .collect();
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(partitions);
    let mut buf = BytesMut::new();
    buf.put_i16(version);
    if let Err(e) = assignment.encode(&mut buf, version) {
        // Only a value out of the message's range fails; none of these is.
        tracing::error!(error = %e, "cannot encode a consumer protocol assignment");
    }
    buf.freeze()
}

/// The version an embedded subscription was written in (0 when it cannot be read).
fn subscription_version(metadata: &Bytes) -> i16 {
    if metadata.len() < 2 {
        return 0;
    }
    i16::from_be_bytes([metadata[0], metadata[1]]).max(0)
}

/// Topic names as a member subscribes to them: sorted, without duplicates.
fn sorted_topics(topics: &[StrBytes]) -> Vec<String> {
    let mut names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    names.sort();
    names.dedup();
    names
}

/// Owned partitions reported in a subscription, as topic ids.
fn owned_partitions(sub: &ConsumerProtocolSubscription, catalog: &dyn TopicCatalog) -> Assignment {
    let mut out = Assignment::new();
    for tp in &sub.owned_partitions {
        if let Some((id, _)) = catalog.topic(tp.topic.as_str()) {
            if !tp.partitions.is_empty() {
                out.entry(id)
                    .or_default()
                    .extend(tp.partitions.iter().copied());
            }
        }
    }
    out
}

// ---- Upgrade: a classic group becomes a consumer group ----

/// Why a classic group with members may not become a consumer group, if it may not.
pub(crate) fn upgrade_refusal(
    group: &Group,
    policy: MigrationPolicy,
    max_size: usize,
) -> Option<String> {
    let why = if !policy.upgrades() {
        "the online upgrade is disabled (group.consumer.migration.policy)"
    } else if group.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
        "the group does not use the consumer embedded protocol"
    } else if group.members.len() > max_size {
        "the group size exceeds the consumer group maximum size"
    } else {
        return None;
    };
    Some(format!(
        "Cannot upgrade classic group {} to consumer group because {why}.",
        group.id
    ))
}

/// Turns a classic group with members into a consumer group holding them. Requests parked in
/// JoinGroup or SyncGroup are answered REBALANCE_IN_PROGRESS, so that those members join the
/// consumer group. Nothing changes when a member's embedded protocol cannot be read.
pub(crate) fn to_consumer(
    group: &mut Group,
    catalog: &dyn TopicCatalog,
    now: i64,
) -> Result<Effects, String> {
    let generation = group.generation;
    let mut c = ConsumerGroup {
        group_epoch: generation,
        assignment_epoch: generation,
        ..ConsumerGroup::default()
    };
    for m in group.members.values() {
        // The metadata of the group's protocol, or of the member's first one while the group
        // has not chosen yet.
        let metadata = match &group.protocol {
            Some(p) => m.metadata_for(p),
            None => m
                .protocols
                .first()
                .map(|(_, md)| md.clone())
                .unwrap_or_default(),
        };
        let malformed = |e: String| {
            format!(
                "Cannot upgrade the classic group {} to consumer group because the embedded \
                 consumer protocol of member {} is malformed: {e}.",
                group.id, m.id
            )
        };
        let sub = decode_subscription(&metadata).map_err(malformed)?;
        let assigned = decode_assignment(&m.assignment, catalog).map_err(malformed)?;
        c.target.insert(m.id.clone(), assigned.clone());
        c.members.insert(
            m.id.clone(),
            ConsumerMember {
                id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                rack: sub.rack_id.as_ref().map(|r| r.to_string()),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                subscribed: sorted_topics(&sub.topics),
                subscribed_regex: None,
                regex_topics: Vec::new(),
                server_assignor: None,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                epoch: generation,
                previous_epoch: generation,
                assigned,
                revoking: Assignment::new(),
                revoke_deadline_ms: 0,
                sync_deadline_ms: 0,
                last_heartbeat_ms: now,
                last_sent: None,
                classic: Some(ClassicMemberValue {
                    session_timeout_ms: m.session_timeout_ms,
                    protocols: m.protocols.clone(),
                }),
            },
        );
    }
    let mut effects = Effects {
        deliveries: Vec::new(),
        persist_group: true,
    };
    for m in group.members.values_mut() {
        if let Some((tx, _)) = m.join_waiter.take() {
            effects.deliveries.push(Delivery::Join(
                tx,
                join_error(ResponseError::RebalanceInProgress, &m.id),
            ));
        }
        if let Some((tx, _)) = m.sync_waiter.take() {
            effects.deliveries.push(Delivery::Sync(
                tx,
                sync_error(ResponseError::RebalanceInProgress),
            ));
        }
    }
    tracing::info!(group = %group.id, generation, members = c.members.len(), "upgraded the classic group to a consumer group");
    group.members.clear();
    group.static_members.clear();
    group.pending.clear();
    group.leader = None;
    group.protocol = None;
    group.protocol_type = None;
    group.transition(GroupState::Empty, now);
    group.consumer = Some(c);
    Ok(effects)
}

// ---- Downgrade: a consumer group becomes a classic group ----

/// Whether a consumer group, after `left` left it, becomes a classic group: a member of the
/// consumer protocol left, every member that remains speaks the classic protocol, and the
/// policy and `group.max.size` allow it.
pub(crate) fn downgrades(
    c: &ConsumerGroup,
    left: &[ConsumerMember],
    policy: MigrationPolicy,
    max_group_size: usize,
    group_id: &str,
) -> bool {
    let consumer_member_left = left.iter().any(|m| m.classic.is_none());
    if !consumer_member_left
        || c.members.is_empty()
        || c.members.values().any(|m| m.classic.is_none())
    {
        return false;
    }
    if !policy.downgrades() {
        tracing::info!(group = %group_id, "not downgrading the consumer group to a classic group: the online downgrade is disabled");
        return false;
    }
    if c.members.len() > max_group_size {
        tracing::info!(group = %group_id, "not downgrading the consumer group to a classic group: it has more members than group.max.size");
        return false;
    }
    true
}

/// Turns a consumer group whose members all speak the classic protocol into a classic group,
/// each member holding its target assignment, and starts a rebalance. The generation is the
/// newest member epoch, the group epoch before the departure that caused the downgrade, so that
/// members which had caught up are told to rejoin (REBALANCE_IN_PROGRESS), not that their
/// generation is gone (ILLEGAL_GENERATION, which makes a client drop its partitions as lost).
pub(crate) fn to_classic(
    group: &mut Group,
    catalog: &dyn TopicCatalog,
    now: i64,
    cfg: &GroupConfig,
) -> Effects {
    let Some(c) = group.consumer.take() else {
        return Effects::default();
    };
    group.generation = c
        .members
        .values()
        .map(|m| m.epoch)
        .max()
        .unwrap_or(c.group_epoch);
    group.protocol_type = Some(CONSUMER_PROTOCOL_TYPE.to_string());
    group.members.clear();
    group.static_members.clear();
    group.pending.clear();
    group.leader = None;
    for m in c.members.values() {
        let Some(classic) = &m.classic else { continue };
        if let Some(inst) = &m.instance_id {
            group.static_members.insert(inst.clone(), m.id.clone());
        }
        group.members.insert(
            m.id.clone(),
            Member {
                id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                client_host: m.client_host.clone(),
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                session_timeout_ms: classic.session_timeout_ms,
                protocols: classic.protocols.clone(),
                assignment: Bytes::new(),
                join_waiter: None,
                sync_waiter: None,
                last_heartbeat_ms: now,
            },
        );
    }
    group.protocol = group.select_protocol();
    let protocol = group.protocol.clone().unwrap_or_default();
    for m in group.members.values_mut() {
        let target = c.target.get(&m.id).cloned().unwrap_or_default();
        let version = subscription_version(&m.metadata_for(&protocol));
        m.assignment = encode_assignment(&target, catalog, version);
    }
    tracing::info!(group = %group.id, generation = group.generation, members = group.members.len(), "downgraded the consumer group to a classic group");
    group.transition(GroupState::Stable, now);
    let mut effects = classic::prepare_rebalance(group, now, cfg);
    effects.persist_group = true;
    effects
}

// ---- Classic members in a consumer group ----

/// Whether a classic member with these protocols may join: the type is `consumer` and, once
/// the group has classic members, one of the protocols is supported by all of them.
fn supports_classic_protocols(c: &ConsumerGroup, protocol_type: &str, names: &[String]) -> bool {
    if protocol_type != CONSUMER_PROTOCOL_TYPE || names.is_empty() {
        return false;
    }
    let classic = c.members.values().filter_map(|m| m.classic.as_ref());
    names.iter().any(|name| {
        classic
            .clone()
            .all(|cm| cm.protocols.iter().any(|(n, _)| n == name))
    })
}

/// The member a classic request names (by instance id when it has one), if it speaks the
/// classic protocol.
fn classic_member<'g>(
    c: &'g mut ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
) -> Result<&'g mut ConsumerMember, ResponseError> {
    let id = match instance_id {
        Some(inst) => {
            let m = c
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(inst))
                .ok_or(ResponseError::UnknownMemberId)?;
            if m.id != member_id {
                return Err(ResponseError::FencedInstanceId);
            }
            m.id.clone()
        }
        None => member_id.to_string(),
    };
    let m = c
        .members
        .get_mut(&id)
        .ok_or(ResponseError::UnknownMemberId)?;
    if m.classic.is_none() {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(m)
}

/// The protocol a classic member of a consumer group is told to use: its first.
fn first_protocol(m: &ConsumerMember) -> (String, Bytes) {
    m.classic
        .as_ref()
        .and_then(|c| c.protocols.first().cloned())
        .unwrap_or_default()
}

/// A JoinGroup of a classic member into a consumer group with members. Returns the response
/// and whether the group changed (and must be persisted).
#[allow(clippy::too_many_arguments)]
pub(crate) fn join(
    c: &mut ConsumerGroup,
    req: &JoinGroupRequest,
    version: i16,
    client: JoinClient<'_>,
    now: i64,
    cfg: &GroupConfig,
    ccfg: &ConsumerProtocolConfig,
    catalog: &dyn TopicCatalog,
) -> (JoinGroupResponse, bool) {
    let refuse = |e: ResponseError| (join_error(e, req.member_id.as_str()), false);
    if req.session_timeout_ms < cfg.min_session_timeout_ms
        || req.session_timeout_ms > cfg.max_session_timeout_ms
    {
        return refuse(ResponseError::InvalidSessionTimeout);
    }
    let names: Vec<String> = req.protocols.iter().map(|p| p.name.to_string()).collect();
    if !supports_classic_protocols(c, req.protocol_type.as_str(), &names) {
        return refuse(ResponseError::InconsistentGroupProtocol);
    }
    let instance = req.group_instance_id.as_ref().map(|i| i.to_string());
    let unknown = req.member_id.is_empty();
    let member_id = if unknown {
        client.new_member_id.clone()
    } else {
        req.member_id.to_string()
    };
    let previous = instance.as_deref().and_then(|inst| {
        c.members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(inst))
            .map(|m| m.id.clone())
    });
    let is_new = previous.is_none() && !c.members.contains_key(&member_id);
    if is_new && c.members.len() >= ccfg.max_size.min(cfg.max_group_size) {
        return refuse(ResponseError::GroupMaxSizeReached);
    }
    if unknown && instance.is_none() && version >= 4 {
        // KIP-394: a dynamic member learns its id first and joins again with it.
        return (
            join_error(ResponseError::MemberIdRequired, &member_id),
            false,
        );
    }
    let Some((_, metadata)) = req.protocols.first().map(|p| (&p.name, &p.metadata)) else {
        return refuse(ResponseError::InconsistentGroupProtocol);
    };
    let sub = match decode_subscription(metadata) {
        Ok(sub) => sub,
        Err(e) => {
            tracing::info!(member = %member_id, error = %e, "JoinGroup with a malformed consumer protocol subscription");
            return refuse(ResponseError::InconsistentGroupProtocol);
        }
    };
    let mut bump = false;
    let mut replaced = false;
    match previous {
        // A static member that joins without its id replaces its previous incarnation, taking
        // over its epoch and partitions.
        Some(old) if old != member_id => {
            if !unknown {
                return refuse(ResponseError::FencedInstanceId);
            }
            if let Some(mut m) = c.members.shift_remove(&old) {
                m.id = member_id.clone();
                c.members.insert(member_id.clone(), m);
            }
            if let Some(target) = c.target.remove(&old) {
                c.target.insert(member_id.clone(), target);
            }
            replaced = true;
            tracing::info!(old = %old, member = %member_id, "static classic member replaced its previous incarnation");
        }
        Some(_) => {}
        None if is_new => {
            let m = ConsumerMember::joining(&member_id, instance.clone(), now);
            c.members.insert(member_id.clone(), m);
            tracing::info!(member = %member_id, "classic member joined the consumer group");
            bump = true;
        }
        None => {}
    }
    let owned = owned_partitions(&sub, catalog);
    let Some(m) = c.members.get_mut(&member_id) else {
        return refuse(ResponseError::UnknownMemberId);
    };
    if m.classic.is_none() && !is_new && !replaced {
        // A consumer-protocol member cannot speak JoinGroup.
        return refuse(ResponseError::UnknownMemberId);
    }
    let topics = sorted_topics(&sub.topics);
    if topics != m.subscribed {
        m.subscribed = topics;
        bump = true;
    }
    if let Some(rack) = &sub.rack_id {
        m.rack = Some(rack.to_string());
    }
    m.rebalance_timeout_ms = if version >= 1 {
        req.rebalance_timeout_ms
    } else {
        req.session_timeout_ms
    };
    m.client_id = client.client_id.to_string();
    m.client_host = client.client_host.to_string();
    m.instance_id = instance;
    m.last_heartbeat_ms = now;
    // It joined: no rejoin deadline runs (reconciling may start a revocation's), and its
    // SyncGroup must follow within its rebalance timeout.
    m.revoke_deadline_ms = 0;
    m.sync_deadline_ms = now + i64::from(m.rebalance_timeout_ms.max(0));
    m.classic = Some(ClassicMemberValue {
        session_timeout_ms: req.session_timeout_ms,
        protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
    });
    // Partitions it was asked to give up and no longer reports are given up.
    if !is_empty(&m.revoking) && is_empty(&consumer::intersect(&owned, &m.revoking)) {
        m.revoking.clear();
    }
    consumer::advance_epochs(c, bump, ccfg, catalog);
    c.reconcile(&member_id, now);
    let Some(m) = c.members.get(&member_id) else {
        return refuse(ResponseError::UnknownMemberId);
    };
    let (protocol, _) = first_protocol(m);
    let response = JoinGroupResponse::default()
        .with_member_id(s(&member_id))
        .with_generation_id(m.epoch)
        .with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)))
        .with_protocol_name(Some(s(&protocol)));
    (response, true)
}

/// A SyncGroup of a classic member of a consumer group: its current assignment.
pub(crate) fn sync(
    c: &mut ConsumerGroup,
    req: &SyncGroupRequest,
    version: i16,
    now: i64,
    catalog: &dyn TopicCatalog,
) -> SyncGroupResponse {
    let group_epoch = c.group_epoch;
    let m = match classic_member(c, req.member_id.as_str(), req.group_instance_id.as_deref()) {
        Ok(m) => m,
        Err(e) => return sync_error(e),
    };
    if req.generation_id != m.epoch {
        return sync_error(ResponseError::IllegalGeneration);
    }
    let (protocol, metadata) = first_protocol(m);
    if version >= 5 {
        let type_ok = req
            .protocol_type
            .as_ref()
            .is_none_or(|t| t.as_str() == CONSUMER_PROTOCOL_TYPE);
        let name_ok = req
            .protocol_name
            .as_ref()
            .is_none_or(|n| n.as_str() == protocol);
        if !type_ok || !name_ok {
            return sync_error(ResponseError::InconsistentGroupProtocol);
        }
    }
    // A newer group epoch means the member must join again to catch up, unless it is still
    // giving partitions up (it joins again once it has).
    if group_epoch > m.epoch && is_empty(&m.revoking) {
        return sync_error(ResponseError::RebalanceInProgress);
    }
    m.last_heartbeat_ms = now;
    m.sync_deadline_ms = 0;
    let assignment = encode_assignment(&m.assigned, catalog, subscription_version(&metadata));
    let mut response = SyncGroupResponse::default().with_assignment(assignment);
    if version >= 5 {
        response = response
            .with_protocol_type(Some(s(CONSUMER_PROTOCOL_TYPE)))
            .with_protocol_name(Some(s(&protocol)));
    }
    response
}

/// A Heartbeat of a classic member of a consumer group: REBALANCE_IN_PROGRESS when the member
/// must join again, because the group moved on, it has partitions to give up, or partitions it
/// waits for have been released.
pub(crate) fn heartbeat(
    c: &mut ConsumerGroup,
    req: &HeartbeatRequest,
    now: i64,
) -> Result<(), ResponseError> {
    let group_epoch = c.group_epoch;
    let member_id = {
        let m = classic_member(c, req.member_id.as_str(), req.group_instance_id.as_deref())?;
        if req.generation_id != m.epoch {
            return Err(ResponseError::IllegalGeneration);
        }
        m.last_heartbeat_ms = now;
        m.id.clone()
    };
    let Some(m) = c.members.get(&member_id) else {
        return Err(ResponseError::UnknownMemberId);
    };
    let target = c.target.get(&member_id).cloned().unwrap_or_default();
    let awaited = consumer::minus(&target, &m.assigned);
    let released = !is_empty(&awaited)
        && is_empty(&consumer::intersect(
            &awaited,
            &c.owned_by_others(&member_id),
        ));
    if m.epoch < group_epoch || !is_empty(&m.revoking) || released {
        // It must join within its rebalance timeout, or it is removed (Kafka's join timeout).
        if let Some(m) = c.members.get_mut(&member_id) {
            if m.revoke_deadline_ms == 0 {
                m.revoke_deadline_ms = now + i64::from(m.rebalance_timeout_ms);
            }
        }
        return Err(ResponseError::RebalanceInProgress);
    }
    Ok(())
}

/// A LeaveGroup naming members of a consumer group: each classic member named leaves. Returns
/// an error code per identity and the members that left.
pub(crate) fn leave(
    c: &mut ConsumerGroup,
    identities: &[(String, Option<String>)],
) -> (Vec<i16>, Vec<ConsumerMember>) {
    let mut codes = Vec::new();
    let mut left = Vec::new();
    for (member_id, instance) in identities {
        // The LeaveGroup API lets an admin remove a static member by instance id alone.
        let named = match instance {
            Some(inst) => c
                .members
                .values()
                .find(|m| m.instance_id.as_deref() == Some(inst.as_str()))
                .map(|m| m.id.clone())
                .ok_or(ResponseError::UnknownMemberId)
                .and_then(|id| {
                    if member_id.is_empty() || *member_id == id {
                        Ok(id)
                    } else {
                        Err(ResponseError::FencedInstanceId)
                    }
                }),
            None => Ok(member_id.clone()),
        };
        let gone = named.and_then(|id| {
            match c.members.get(&id) {
                Some(m) if m.classic.is_some() => {}
                _ => return Err(ResponseError::UnknownMemberId),
            }
            c.target.remove(&id);
            c.members
                .shift_remove(&id)
                .ok_or(ResponseError::UnknownMemberId)
        });
        match gone {
            Ok(m) => {
                tracing::info!(member = %m.id, "classic member left the consumer group");
                left.push(m);
                codes.push(0);
            }
            Err(e) => codes.push(e.code()),
        }
    }
    if !left.is_empty() {
        c.group_epoch += 1;
    }
    (codes, left)
}
