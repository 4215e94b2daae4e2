//! The classic rebalance protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as rules on a
//! [`Group`]. Functions here change the group and return the responses to deliver; the
//! coordinator persists what must be durable before it delivers them.
//!
//! States follow Kafka: Empty → PreparingRebalance (members rejoin) → CompletingRebalance (the
//! leader computes the assignment) → Stable (SyncGroup delivered it). A join completes as soon
//! as every known member has rejoined and no member id handed out by MEMBER_ID_REQUIRED is
//! still outstanding, or when the rebalance timeout removes the members that did not.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::oneshot;

use crate::config::GroupConfig;
use crate::group::{Group, GroupState, Member};

/// A response owed to a parked request, sent after the group's new state is durable.
pub enum Delivery {
    Join(oneshot::Sender<JoinGroupResponse>, JoinGroupResponse),
    Sync(oneshot::Sender<SyncGroupResponse>, SyncGroupResponse),
}

impl Delivery {
    pub fn deliver(self) {
        match self {
            Delivery::Join(tx, r) => {
                let _ = tx.send(r);
            }
            Delivery::Sync(tx, r) => {
                let _ = tx.send(r);
            }
        }
    }
}

/// What a state change asks of the coordinator.
#[derive(Default)]
pub struct Effects {
    pub deliveries: Vec<Delivery>,
    /// The group's metadata record must be written (new generation, assignment or empty).
    pub persist_group: bool,
}

impl Effects {
    fn merge(&mut self, other: Effects) {
        self.deliveries.extend(other.deliveries);
        self.persist_group |= other.persist_group;
    }
}

pub enum Answer<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn join_error(e: ResponseError, member_id: &str) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(e.code())
        .with_generation_id(-1)
        .with_member_id(s(member_id))
}

pub fn sync_error(e: ResponseError) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(e.code())
}

/// Client details recorded with a member.
pub struct JoinClient<'a> {
    pub client_id: &'a str,
    pub client_host: &'a str,
    pub new_member_id: String,
}

/// Handles one JoinGroup. The steps: the request is checked against the group, then a member
/// without an id joins as a new (or returning static) member, a member with an id handed out
/// by MEMBER_ID_REQUIRED is added, and a known member rejoins.
pub fn join(
    group: &mut Group,
    req: &JoinGroupRequest,
    version: i16,
    client: JoinClient<'_>,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let member_id = req.member_id.as_str();
    if let Err(e) = check_join(group, req, cfg) {
        return refuse(e, member_id);
    }
    // An empty consumer-protocol group becomes a classic one again.
    group.consumer = None;
    let joining = Joining::of(req, version);
    if member_id.is_empty() {
        return join_without_id(group, joining, &client, now, cfg);
    }
    if group.pending.remove(member_id).is_some() {
        return admit(group, member_id, joining, &client, now, cfg);
    }
    if let Some(inst) = &joining.instance {
        if group
            .static_members
            .get(inst)
            .is_some_and(|id| id != member_id)
        {
            return refuse(ResponseError::FencedInstanceId, member_id);
        }
    }
    rejoin(group, member_id, joining, now, cfg)
}

/// A JoinGroup request with what every way of joining reads of it resolved once.
struct Joining<'r> {
    req: &'r JoinGroupRequest,
    version: i16,
    instance: Option<String>,
    protocols: Vec<(String, Bytes)>,
    rebalance_timeout_ms: i32,
}

impl<'r> Joining<'r> {
    fn of(req: &'r JoinGroupRequest, version: i16) -> Self {
        Self {
            req,
            version,
            instance: req.group_instance_id.as_ref().map(|i| i.to_string()),
            protocols: req
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.clone()))
                .collect(),
            // v0 has no rebalance timeout: the session timeout stands in for it.
            rebalance_timeout_ms: if version >= 1 {
                req.rebalance_timeout_ms
            } else {
                req.session_timeout_ms
            },
        }
    }
}

/// The join answered at once with an error, changing nothing.
fn refuse(e: ResponseError, member_id: &str) -> (Answer<JoinGroupResponse>, Effects) {
    (Answer::Now(join_error(e, member_id)), Effects::default())
}

/// A join the group cannot take whoever sends it: a session timeout out of bounds, protocols
/// the group does not share, a dead group, or one with consumer-protocol members.
fn check_join(
    group: &Group,
    req: &JoinGroupRequest,
    cfg: &GroupConfig,
) -> Result<(), ResponseError> {
    if req.session_timeout_ms < cfg.min_session_timeout_ms
        || req.session_timeout_ms > cfg.max_session_timeout_ms
    {
        return Err(ResponseError::InvalidSessionTimeout);
    }
    let names: Vec<String> = req.protocols.iter().map(|p| p.name.to_string()).collect();
    if !group.supports_protocols(&req.protocol_type, &names) {
        return Err(ResponseError::InconsistentGroupProtocol);
    }
    if group.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    if group.has_consumer_members() {
        return Err(ResponseError::InconsistentGroupProtocol);
    }
    Ok(())
}

/// A member without an id: a static member takes its previous incarnation's place; any other
/// is handed an id to join again with from v4 on (KIP-394), and before v4 joins at once.
fn join_without_id(
    group: &mut Group,
    joining: Joining<'_>,
    client: &JoinClient<'_>,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let new_id = client.new_member_id.clone();
    if let Some(inst) = &joining.instance {
        if let Some(old_id) = group.static_members.get(inst).cloned() {
            let Joining {
                req,
                version,
                protocols,
                ..
            } = joining;
            return rejoin_static(group, &old_id, &new_id, protocols, req, version, now, cfg);
        }
    } else if joining.version >= 4 {
        // KIP-394: hand out an id; the member joins again with it.
        if group.members.len() + group.pending.len() >= cfg.max_group_size {
            return refuse(ResponseError::GroupMaxSizeReached, "");
        }
        group.pending.insert(
            new_id.clone(),
            now + i64::from(joining.req.session_timeout_ms),
        );
        return (
            Answer::Now(join_error(ResponseError::MemberIdRequired, &new_id)),
            Effects::default(),
        );
    }
    admit(group, &new_id, joining, client, now, cfg)
}

/// Adds a new member, if the group has room, and parks its join until the rebalance completes.
fn admit(
    group: &mut Group,
    id: &str,
    joining: Joining<'_>,
    client: &JoinClient<'_>,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let req = joining.req;
    if group.members.len() >= cfg.max_group_size {
        // Answered with the id the request came with (none for a member that had none).
        return refuse(ResponseError::GroupMaxSizeReached, req.member_id.as_str());
    }
    let member = new_member(
        id,
        joining.instance,
        client,
        joining.rebalance_timeout_ms,
        req,
        joining.protocols,
        now,
    );
    add_and_park(group, member, &req.protocol_type, joining.version, now, cfg)
}

/// A known member joins again: with the same protocols in a settled generation it gets the
/// current answer at once (the leader the member list, while the group waits for its
/// assignment); otherwise its join is parked and a rebalance starts, or goes on.
fn rejoin(
    group: &mut Group,
    member_id: &str,
    joining: Joining<'_>,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let Some(member) = group.members.get_mut(member_id) else {
        return refuse(ResponseError::UnknownMemberId, member_id);
    };
    let unchanged = member.protocols == joining.protocols;
    member.protocols = joining.protocols;
    member.rebalance_timeout_ms = joining.rebalance_timeout_ms;
    member.session_timeout_ms = joining.req.session_timeout_ms;
    member.last_heartbeat_ms = now;
    let is_leader = group.leader.as_deref() == Some(member_id);
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance if unchanged && !is_leader => {
            let response = current_join_response(group, member_id, false);
            (Answer::Now(response), Effects::default())
        }
        GroupState::CompletingRebalance if unchanged => {
            let response = current_join_response(group, member_id, true);
            (Answer::Now(response), Effects::default())
        }
        GroupState::Empty | GroupState::Dead => refuse(ResponseError::UnknownMemberId, member_id),
        _ => park_rejoin(group, member_id, joining.version, now, cfg),
    }
}

/// Parks a known member's join and starts a rebalance unless one is under way.
fn park_rejoin(
    group: &mut Group,
    member_id: &str,
    version: i16,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let (tx, rx) = oneshot::channel();
    if let Some(m) = group.members.get_mut(member_id) {
        if let Some((old, v)) = m.join_waiter.replace((tx, version)) {
            // A second JoinGroup from the same member supersedes the first.
            let _ = old.send(
                join_error(ResponseError::UnknownMemberId, member_id).with_throttle_time_ms(0),
            );
            let _ = v;
        }
    }
    let mut effects = Effects::default();
    if !group.is(GroupState::PreparingRebalance) {
        effects.merge(prepare_rebalance(group, now, cfg));
    }
    effects.merge(maybe_complete_join(group, now, cfg));
    (Answer::Wait(rx), effects)
}

fn new_member(
    id: &str,
    instance: Option<String>,
    client: &JoinClient<'_>,
    rebalance_timeout_ms: i32,
    req: &JoinGroupRequest,
    protocols: Vec<(String, Bytes)>,
    now: i64,
) -> Member {
    Member {
        id: id.to_string(),
        instance_id: instance,
        client_id: client.client_id.to_string(),
        client_host: client.client_host.to_string(),
        rebalance_timeout_ms,
        session_timeout_ms: req.session_timeout_ms,
        protocols,
        assignment: Bytes::new(),
        join_waiter: None,
        sync_waiter: None,
        last_heartbeat_ms: now,
    }
}

fn add_and_park(
    group: &mut Group,
    mut member: Member,
    protocol_type: &str,
    version: i16,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let (tx, rx) = oneshot::channel();
    member.join_waiter = Some((tx, version));
    if group.members.is_empty() {
        group.protocol_type = Some(protocol_type.to_string());
    }
    if let Some(inst) = &member.instance_id {
        group.static_members.insert(inst.clone(), member.id.clone());
    }
    group.members.insert(member.id.clone(), member);
    let mut effects = Effects::default();
    if group.is(GroupState::PreparingRebalance) {
        // During the first rebalance of an empty group, each newcomer extends the wait a little.
        if let Some(d) = group.initial_join_deadline_ms {
            let extended = (now + cfg.initial_rebalance_delay_ms).min(group.rebalance_deadline_ms);
            group.initial_join_deadline_ms = Some(d.max(extended));
        }
    } else {
        effects.merge(prepare_rebalance(group, now, cfg));
    }
    effects.merge(maybe_complete_join(group, now, cfg));
    (Answer::Wait(rx), effects)
}

#[allow(clippy::too_many_arguments)]
fn rejoin_static(
    group: &mut Group,
    old_id: &str,
    new_id: &str,
    protocols: Vec<(String, Bytes)>,
    req: &JoinGroupRequest,
    version: i16,
    now: i64,
    cfg: &GroupConfig,
) -> (Answer<JoinGroupResponse>, Effects) {
    let Some(mut member) = group.members.shift_remove(old_id) else {
        return (
            Answer::Now(join_error(ResponseError::UnknownMemberId, "")),
            Effects::default(),
        );
    };
    // The old incarnation is fenced: any request it still has parked gets FENCED_INSTANCE_ID.
    if let Some((tx, _)) = member.join_waiter.take() {
        let _ = tx.send(join_error(ResponseError::FencedInstanceId, old_id));
    }
    if let Some((tx, _)) = member.sync_waiter.take() {
        let _ = tx.send(sync_error(ResponseError::FencedInstanceId));
    }
    let unchanged = member.protocols == protocols;
    member.id = new_id.to_string();
    member.protocols = protocols;
    member.session_timeout_ms = req.session_timeout_ms;
    member.last_heartbeat_ms = now;
    if let Some(inst) = &member.instance_id {
        group
            .static_members
            .insert(inst.clone(), new_id.to_string());
    }
    let was_leader = group.leader.as_deref() == Some(old_id);
    if was_leader {
        group.leader = Some(new_id.to_string());
    }
    group.members.insert(new_id.to_string(), member);
    // KIP-345: a restarted static member gets its place back without a rebalance, the leader
    // too. A leader on JoinGroup v9+ gets the member list with skip_assignment (KIP-814); older
    // versions get no member list, so the leader does not compute a new assignment and its
    // SyncGroup returns the stored one, as in Kafka before KIP-814.
    if group.is(GroupState::Stable) && unchanged {
        let with_members = was_leader && version >= 9;
        let mut response = current_join_response(group, new_id, with_members);
        response.skip_assignment = with_members;
        return (
            Answer::Now(response),
            Effects {
                deliveries: Vec::new(),
                persist_group: true,
            },
        );
    }
    let (tx, rx) = oneshot::channel();
    if let Some(m) = group.members.get_mut(new_id) {
        m.join_waiter = Some((tx, version));
    }
    let mut effects = Effects::default();
    if !group.is(GroupState::PreparingRebalance) {
        effects.merge(prepare_rebalance(group, now, cfg));
    }
    effects.merge(maybe_complete_join(group, now, cfg));
    (Answer::Wait(rx), effects)
}

/// The join answer for the current generation, without starting a rebalance.
fn current_join_response(group: &Group, member_id: &str, with_members: bool) -> JoinGroupResponse {
    let protocol = group.protocol.clone().unwrap_or_default();
    let mut r = JoinGroupResponse::default()
        .with_generation_id(group.generation)
        .with_protocol_type(group.protocol_type.as_deref().map(s))
        .with_protocol_name(Some(s(&protocol)))
        .with_leader(s(group.leader.as_deref().unwrap_or("")))
        .with_member_id(s(member_id));
    if with_members {
        r = r.with_members(member_list(group, &protocol));
    }
    r
}

fn member_list(group: &Group, protocol: &str) -> Vec<JoinGroupResponseMember> {
    group
        .members
        .values()
        .map(|m| {
            JoinGroupResponseMember::default()
                .with_member_id(s(&m.id))
                .with_group_instance_id(m.instance_id.as_deref().map(s))
                .with_metadata(m.metadata_for(protocol))
        })
        .collect()
}

pub fn prepare_rebalance(group: &mut Group, now: i64, cfg: &GroupConfig) -> Effects {
    let mut effects = Effects::default();
    if group.is(GroupState::CompletingRebalance) {
        // Followers waiting for an assignment must rejoin instead.
        for m in group.members.values_mut() {
            m.assignment = Bytes::new();
            if let Some((tx, _)) = m.sync_waiter.take() {
                effects.deliveries.push(Delivery::Sync(
                    tx,
                    sync_error(ResponseError::RebalanceInProgress),
                ));
            }
        }
    }
    let initial = group.is(GroupState::Empty);
    group.rebalance_deadline_ms = now + group.max_rebalance_timeout_ms();
    group.initial_join_deadline_ms = if initial && cfg.initial_rebalance_delay_ms > 0 {
        Some((now + cfg.initial_rebalance_delay_ms).min(group.rebalance_deadline_ms))
    } else {
        None
    };
    group.transition(GroupState::PreparingRebalance, now);
    tracing::debug!(group = %group.id, generation = group.generation, "preparing rebalance");
    effects
}

pub fn maybe_complete_join(group: &mut Group, now: i64, cfg: &GroupConfig) -> Effects {
    if !group.is(GroupState::PreparingRebalance) {
        return Effects::default();
    }
    let delay_over = group.initial_join_deadline_ms.is_none_or(|d| now >= d);
    if (group.all_members_joined() && delay_over) || now >= group.rebalance_deadline_ms {
        complete_join(group, now, cfg)
    } else {
        Effects::default()
    }
}

fn complete_join(group: &mut Group, now: i64, cfg: &GroupConfig) -> Effects {
    let mut effects = Effects {
        deliveries: Vec::new(),
        persist_group: true,
    };
    // Members that did not rejoin in time leave the group.
    let missing: Vec<String> = group
        .members
        .values()
        .filter(|m| m.join_waiter.is_none())
        .map(|m| m.id.clone())
        .collect();
    for id in missing {
        remove_member(group, &id);
    }
    group.pending.clear();
    group.initial_join_deadline_ms = None;
    group.generation += 1;
    if group.members.is_empty() {
        group.protocol = None;
        group.leader = None;
        group.transition(GroupState::Empty, now);
        tracing::info!(group = %group.id, generation = group.generation, "group is empty");
        return effects;
    }
    group.protocol = group.select_protocol();
    if !group
        .leader
        .as_ref()
        .is_some_and(|l| group.members.contains_key(l))
    {
        group.leader = group.members.keys().next().cloned();
    }
    group.transition(GroupState::CompletingRebalance, now);
    group.sync_deadline_ms = now + group.max_rebalance_timeout_ms();
    let protocol = group.protocol.clone().unwrap_or_default();
    let leader = group.leader.clone().unwrap_or_default();
    let members = member_list(group, &protocol);
    for m in group.members.values_mut() {
        m.last_heartbeat_ms = now;
        if let Some((tx, version)) = m.join_waiter.take() {
            let mut r = JoinGroupResponse::default()
                .with_generation_id(group.generation)
                .with_protocol_type(group.protocol_type.as_deref().map(s))
                .with_protocol_name(Some(s(&protocol)))
                .with_leader(s(&leader))
                .with_member_id(s(&m.id));
            if m.id == leader {
                r = r.with_members(
                    members
                        .iter()
                        .cloned()
                        .map(|mut jm| {
                            if version < 5 {
                                jm.group_instance_id = None;
                            }
                            jm
                        })
                        .collect(),
                );
            }
            if version < 7 {
                r.protocol_type = None;
            }
            effects.deliveries.push(Delivery::Join(tx, r));
        }
    }
    let _ = cfg;
    tracing::info!(group = %group.id, generation = group.generation, members = group.members.len(), protocol = %protocol, "rebalance: join complete");
    effects
}

pub fn remove_member(group: &mut Group, id: &str) -> Option<Member> {
    let mut m = group.members.shift_remove(id)?;
    if let Some(inst) = &m.instance_id {
        if group.static_members.get(inst).map(String::as_str) == Some(id) {
            group.static_members.remove(inst);
        }
    }
    if group.leader.as_deref() == Some(id) {
        group.leader = None;
    }
    if let Some((tx, _)) = m.join_waiter.take() {
        let _ = tx.send(join_error(ResponseError::UnknownMemberId, id));
    }
    if let Some((tx, _)) = m.sync_waiter.take() {
        let _ = tx.send(sync_error(ResponseError::UnknownMemberId));
    }
    Some(m)
}

/// After members left or expired: rebalance a stable group, or finish a pending join.
pub fn after_removal(group: &mut Group, now: i64, cfg: &GroupConfig) -> Effects {
    match group.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            let mut e = prepare_rebalance(group, now, cfg);
            e.merge(maybe_complete_join(group, now, cfg));
            e
        }
        GroupState::PreparingRebalance => maybe_complete_join(group, now, cfg),
        _ => Effects::default(),
    }
}

fn check_member(
    group: &Group,
    member_id: &str,
    instance: Option<&StrBytes>,
) -> Result<(), ResponseError> {
    if let Some(inst) = instance {
        if let Some(id) = group.static_members.get(inst.as_str()) {
            if id != member_id {
                return Err(ResponseError::FencedInstanceId);
            }
        }
    }
    if !group.members.contains_key(member_id) {
        return Err(ResponseError::UnknownMemberId);
    }
    Ok(())
}

pub fn sync(
    group: &mut Group,
    req: &SyncGroupRequest,
    version: i16,
    now: i64,
) -> (Answer<SyncGroupResponse>, Effects) {
    let member_id = req.member_id.as_str();
    let fail = |e: ResponseError| (Answer::Now(sync_error(e)), Effects::default());
    if let Err(e) = check_member(group, member_id, req.group_instance_id.as_ref()) {
        return fail(e);
    }
    if req.generation_id != group.generation {
        return fail(ResponseError::IllegalGeneration);
    }
    if version >= 5 {
        let type_ok = req
            .protocol_type
            .as_ref()
            .is_none_or(|t| group.protocol_type.as_deref() == Some(t.as_str()));
        let name_ok = req
            .protocol_name
            .as_ref()
            .is_none_or(|n| group.protocol.as_deref() == Some(n.as_str()));
        if !type_ok || !name_ok {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
    }
    let ok = |assignment: Bytes, group: &Group| {
        let mut r = SyncGroupResponse::default().with_assignment(assignment);
        if version >= 5 {
            r = r
                .with_protocol_type(group.protocol_type.as_deref().map(s))
                .with_protocol_name(group.protocol.as_deref().map(s));
        }
        r
    };
    match group.state {
        GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
        GroupState::PreparingRebalance => fail(ResponseError::RebalanceInProgress),
        GroupState::Stable => {
            let assignment = group
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default();
            (Answer::Now(ok(assignment, group)), Effects::default())
        }
        GroupState::CompletingRebalance => {
            let (tx, rx) = oneshot::channel();
            if let Some(m) = group.members.get_mut(member_id) {
                m.sync_waiter = Some((tx, version));
                m.last_heartbeat_ms = now;
            }
            let mut effects = Effects::default();
            if group.leader.as_deref() == Some(member_id) {
                for m in group.members.values_mut() {
                    m.assignment = req
                        .assignments
                        .iter()
                        .find(|a| a.member_id.as_str() == m.id)
                        .map(|a| a.assignment.clone())
                        .unwrap_or_default();
                }
                group.transition(GroupState::Stable, now);
                effects.persist_group = true;
                let waiting: Vec<(oneshot::Sender<SyncGroupResponse>, Bytes)> = group
                    .members
                    .values_mut()
                    .filter_map(|m| Some((m.sync_waiter.take()?.0, m.assignment.clone())))
                    .collect();
                for (tx, assignment) in waiting {
                    effects
                        .deliveries
                        .push(Delivery::Sync(tx, ok(assignment, group)));
                }
                tracing::info!(group = %group.id, generation = group.generation, "rebalance: group stable");
            }
            (Answer::Wait(rx), effects)
        }
    }
}

pub fn heartbeat(group: &mut Group, req: &HeartbeatRequest, now: i64) -> Result<(), ResponseError> {
    check_member(
        group,
        req.member_id.as_str(),
        req.group_instance_id.as_ref(),
    )?;
    if group.is(GroupState::Empty) || group.is(GroupState::Dead) {
        return Err(ResponseError::UnknownMemberId);
    }
    if req.generation_id != group.generation {
        return Err(ResponseError::IllegalGeneration);
    }
    if let Some(m) = group.members.get_mut(req.member_id.as_str()) {
        m.last_heartbeat_ms = now;
    }
    if group.is(GroupState::PreparingRebalance) {
        Err(ResponseError::RebalanceInProgress)
    } else {
        Ok(())
    }
}

/// Timers: lapsed pending ids, expired sessions, rebalance and sync deadlines.
pub fn tick(group: &mut Group, now: i64, cfg: &GroupConfig) -> Effects {
    let mut effects = Effects::default();
    group.pending.retain(|_, deadline| *deadline > now);
    let expired: Vec<String> = group
        .members
        .values()
        .filter(|m| {
            // A member parked in JoinGroup or SyncGroup is alive by definition.
            let parked = (group.is(GroupState::PreparingRebalance) && m.join_waiter.is_some())
                || (group.is(GroupState::CompletingRebalance) && m.sync_waiter.is_some());
            !parked && m.last_heartbeat_ms + i64::from(m.session_timeout_ms) <= now
        })
        .map(|m| m.id.clone())
        .collect();
    if !expired.is_empty() {
        for id in &expired {
            tracing::info!(group = %group.id, member = %id, "member session expired");
            remove_member(group, id);
        }
        effects.merge(after_removal(group, now, cfg));
    }
    if group.is(GroupState::CompletingRebalance) && now >= group.sync_deadline_ms {
        let lagging: Vec<String> = group
            .members
            .values()
            .filter(|m| m.sync_waiter.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in &lagging {
            remove_member(group, id);
        }
        effects.merge(after_removal(group, now, cfg));
    }
    effects.merge(maybe_complete_join(group, now, cfg));
    effects
}
