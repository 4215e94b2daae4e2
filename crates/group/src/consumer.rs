//! The consumer group protocol (KIP-848): members heartbeat with ConsumerGroupHeartbeat, the
//! coordinator computes a target assignment with a server-side assignor and moves each member
//! towards it.
//!
//! Subscriptions: a member subscribes by topic names, by a regular expression
//! (`SubscribedTopicRegex`, resolved here against the topic names when a regex or the metadata
//! image changed, so a topic created or deleted moves the group epoch like any other topic
//! change), or both.
//!
//! Epochs: the group epoch rises whenever membership, subscriptions or subscribed topics'
//! partition counts change; the assignment epoch is the group epoch the current target was
//! computed for; a member's epoch reaches the assignment epoch once it holds no partition that
//! the target gives to someone else. Invariant: a partition is never handed to a member while
//! another member still owns it (is assigned it or has not yet confirmed revoking it).

use std::collections::{BTreeMap, BTreeSet};

use indexmap::IndexMap;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_heartbeat_response::{
    Assignment as HbAssignment, TopicPartitions,
};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::assignor::{self, Assignment, MemberSpec};
use crate::offsets_topic::{ClassicMemberValue, ConsumerGroupValue};

/// Where the coordinator learns topic ids and partition counts.
pub trait TopicCatalog: Send + Sync {
    /// (topic id, partition count) of an existing topic.
    fn topic(&self, name: &str) -> Option<(Uuid, i32)>;
    fn topic_name(&self, id: Uuid) -> Option<String>;
    /// The names of the topics a regular-expression subscription may match (internal topics
    /// left out).
    fn topic_names(&self) -> Vec<String>;
    /// A number that changes whenever the set of topic names may have changed (the metadata
    /// image's position will do), so regex subscriptions are resolved again only then.
    /// `None`: unknown, resolve on every heartbeat.
    fn topic_names_version(&self) -> Option<u64> {
        None
    }
}

/// A member's regular-expression subscription (KIP-848 `SubscribedTopicRegex`), resolved by the
/// coordinator against the topic names. Kafka uses RE2J and matches whole names; the `regex`
/// crate has the same syntax for what clients send, anchored here the same way.
#[derive(Debug, Clone)]
pub struct TopicRegex {
    pub source: String,
    anchored: regex::Regex,
}

impl TopicRegex {
    /// Compiles `source`, or says why it is not a valid regular expression.
    pub fn compile(source: &str) -> Result<Self, String> {
        regex::Regex::new(source).map_err(|e| e.to_string())?;
        let anchored = regex::Regex::new(&format!("^(?:{source})$")).map_err(|e| e.to_string())?;
        Ok(Self {
            source: source.to_string(),
            anchored,
        })
    }

    pub fn matches(&self, topic: &str) -> bool {
        self.anchored.is_match(topic)
    }
}

#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub id: String,
    pub instance_id: Option<String>,
    pub rack: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Topic names the member subscribed to by name.
    pub subscribed: Vec<String>,
    /// Its regular-expression subscription, if any: the topics it matches are subscribed too.
    pub subscribed_regex: Option<TopicRegex>,
    /// The topics `subscribed_regex` matched at the last metadata refresh.
    pub regex_topics: Vec<String>,
    pub server_assignor: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub epoch: i32,
    pub previous_epoch: i32,
    /// What the member has been told to own.
    pub assigned: Assignment,
    /// Partitions it was told to give up but has not confirmed yet; still its own until then.
    pub revoking: Assignment,
    /// When it is removed if it has not confirmed the revocation by then; for a classic
    /// member, also if it has not joined again by then after being told to (0: none runs).
    pub revoke_deadline_ms: i64,
    /// A classic member is removed if no SyncGroup follows its JoinGroup by then, as Kafka's
    /// sync timeout does (0: none runs).
    pub sync_deadline_ms: i64,
    pub last_heartbeat_ms: i64,
    /// The assignment last sent, to send only changes.
    pub last_sent: Option<Assignment>,
    /// Set for a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) in
    /// this group: it came with a classic group that was upgraded, or joined since.
    pub classic: Option<ClassicMemberValue>,
}

#[derive(Debug, Clone, Default)]
pub struct ConsumerGroup {
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: IndexMap<String, ConsumerMember>,
    pub target: BTreeMap<String, Assignment>,
    /// topic name → (id, partitions) as of the last target computation.
    pub subscribed_metadata: BTreeMap<String, (Uuid, i32)>,
    /// The catalog's [`TopicCatalog::topic_names_version`] the members' regexes were last
    /// resolved at; `None` when a regex changed since (or never resolved).
    pub regexes_resolved_at: Option<u64>,
}

/// Settings of the consumer protocol.
#[derive(Debug, Clone)]
pub struct ConsumerProtocolConfig {
    pub heartbeat_interval_ms: i32,
    pub session_timeout_ms: i32,
    pub default_assignor: String,
    pub max_size: usize,
}

/// One group's own settings (a GROUP config resource, Kafka 4.0's `GroupConfig`): each one set
/// replaces the broker's for that group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerGroupOverrides {
    pub heartbeat_interval_ms: Option<i32>,
    pub session_timeout_ms: Option<i32>,
}

impl ConsumerProtocolConfig {
    /// These settings with a group's overrides applied; borrowed when it has none.
    pub fn for_group(
        &self,
        overrides: Option<&ConsumerGroupOverrides>,
    ) -> std::borrow::Cow<'_, ConsumerProtocolConfig> {
        match overrides {
            Some(o) if *o != ConsumerGroupOverrides::default() => {
                let mut cfg = self.clone();
                cfg.heartbeat_interval_ms =
                    o.heartbeat_interval_ms.unwrap_or(cfg.heartbeat_interval_ms);
                cfg.session_timeout_ms = o.session_timeout_ms.unwrap_or(cfg.session_timeout_ms);
                std::borrow::Cow::Owned(cfg)
            }
            _ => std::borrow::Cow::Borrowed(self),
        }
    }
}

impl Default for ConsumerProtocolConfig {
    fn default() -> Self {
        Self {
            heartbeat_interval_ms: 5000,
            session_timeout_ms: 45_000,
            default_assignor: assignor::UNIFORM.to_string(),
            max_size: i32::MAX as usize,
        }
    }
}

pub(crate) fn union(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = a.clone();
    for (t, ps) in b {
        out.entry(*t).or_default().extend(ps.iter().copied());
    }
    out
}

pub(crate) fn minus(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        let rest: BTreeSet<i32> = match b.get(t) {
            Some(other) => ps.difference(other).copied().collect(),
            None => ps.clone(),
        };
        if !rest.is_empty() {
            out.insert(*t, rest);
        }
    }
    out
}

pub(crate) fn intersect(a: &Assignment, b: &Assignment) -> Assignment {
    let mut out = Assignment::new();
    for (t, ps) in a {
        if let Some(other) = b.get(t) {
            let both: BTreeSet<i32> = ps.intersection(other).copied().collect();
            if !both.is_empty() {
                out.insert(*t, both);
            }
        }
    }
    out
}

pub(crate) fn is_empty(a: &Assignment) -> bool {
    a.values().all(BTreeSet::is_empty)
}

fn from_wire(
    tps: &[kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions],
) -> Assignment {
    let mut out = Assignment::new();
    for tp in tps {
        if !tp.partitions.is_empty() {
            out.entry(tp.topic_id)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
    }
    out
}

pub fn to_wire(a: &Assignment) -> HbAssignment {
    HbAssignment::default().with_topic_partitions(
        a.iter()
            .map(|(t, ps)| {
                TopicPartitions::default()
                    .with_topic_id(*t)
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}

fn err(e: ResponseError, msg: &str) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(e.code())
        .with_error_message(Some(StrBytes::from_string(msg.to_string())))
}

impl ConsumerMember {
    /// A member as it joins: at epoch 0, with no client details, subscription, assignor or
    /// assignment recorded yet.
    pub(crate) fn joining(id: &str, instance_id: Option<String>, now: i64) -> Self {
        ConsumerMember {
            id: id.to_string(),
            instance_id,
            rack: None,
            client_id: String::new(),
            client_host: String::new(),
            subscribed: Vec::new(),
            subscribed_regex: None,
            regex_topics: Vec::new(),
            server_assignor: None,
            rebalance_timeout_ms: 0,
            epoch: 0,
            previous_epoch: -1,
            assigned: Assignment::new(),
            revoking: Assignment::new(),
            revoke_deadline_ms: 0,
            sync_deadline_ms: 0,
            last_heartbeat_ms: now,
            last_sent: None,
            classic: None,
        }
    }

    /// Every topic the member subscribes to: by name, and those its regex matched.
    pub fn topics(&self) -> impl Iterator<Item = &String> {
        self.subscribed.iter().chain(self.regex_topics.iter())
    }
}

impl ConsumerGroup {
    pub fn state_name(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self.assignment_epoch < self.group_epoch {
            "Assigning"
        } else if self
            .members
            .values()
            .any(|m| m.epoch != self.assignment_epoch || !is_empty(&m.revoking))
        {
            "Reconciling"
        } else {
            "Stable"
        }
    }

    /// Partitions some member other than `except` still owns.
    pub(crate) fn owned_by_others(&self, except: &str) -> Assignment {
        let mut out = Assignment::new();
        for m in self.members.values().filter(|m| m.id != except) {
            out = union(&out, &union(&m.assigned, &m.revoking));
        }
        out
    }

    /// Whether subscribed topics changed shape (created, deleted, repartitioned).
    fn refresh_metadata(&mut self, catalog: &dyn TopicCatalog) -> bool {
        let version = catalog.topic_names_version();
        let resolved = version.is_some() && version == self.regexes_resolved_at;
        if !resolved && self.members.values().any(|m| m.subscribed_regex.is_some()) {
            self.regexes_resolved_at = version;
            let names = catalog.topic_names();
            for m in self.members.values_mut() {
                m.regex_topics = match &m.subscribed_regex {
                    Some(re) => names.iter().filter(|t| re.matches(t)).cloned().collect(),
                    None => Vec::new(),
                };
            }
        }
        let mut now: BTreeMap<String, (Uuid, i32)> = BTreeMap::new();
        for m in self.members.values() {
            for t in m.topics() {
                if let Some(meta) = catalog.topic(t) {
                    now.insert(t.clone(), meta);
                }
            }
        }
        if now != self.subscribed_metadata {
            self.subscribed_metadata = now;
            return true;
        }
        false
    }

    fn compute_target(&mut self, cfg: &ConsumerProtocolConfig) {
        let name = self
            .members
            .values()
            .find_map(|m| m.server_assignor.clone())
            .unwrap_or_else(|| cfg.default_assignor.clone());
        let specs: Vec<MemberSpec<'_>> = self
            .members
            .values()
            .map(|m| MemberSpec {
                member_id: &m.id,
                topics: m
                    .topics()
                    .filter_map(|t| self.subscribed_metadata.get(t).map(|(id, _)| *id))
                    .collect(),
            })
            .collect();
        let partitions: BTreeMap<Uuid, i32> = self.subscribed_metadata.values().copied().collect();
        self.target = assignor::assign(&name, &specs, &partitions, &self.target);
        self.assignor = name;
        self.assignment_epoch = self.group_epoch;
    }

    /// Moves a member towards its target: revoke first, then take what has been released.
    pub(crate) fn reconcile(&mut self, member_id: &str, now: i64) {
        let target = self.target.get(member_id).cloned().unwrap_or_default();
        let others = self.owned_by_others(member_id);
        let assignment_epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(member_id) else {
            return;
        };
        if !is_empty(&m.revoking) {
            return; // wait for the member to confirm
        }
        let to_revoke = minus(&m.assigned, &target);
        if !is_empty(&to_revoke) {
            m.assigned = intersect(&m.assigned, &target);
            m.revoking = to_revoke;
            m.revoke_deadline_ms = now + i64::from(m.rebalance_timeout_ms);
            return;
        }
        if m.epoch != assignment_epoch {
            m.previous_epoch = m.epoch;
            m.epoch = assignment_epoch;
        }
        // Take the target partitions nobody else owns any more.
        m.assigned = minus(&target, &others);
    }
}

/// Handles one ConsumerGroupHeartbeat for `group` (which exists, possibly empty). The steps:
/// a leaving member goes; otherwise the request is checked against the group (a join admits
/// or restarts the member, any other epoch must be the member's), the member's details are
/// recorded, the group epoch and the target assignment move if anything changed, and the member
/// is reconciled towards its target. The flag says whether the group must be persisted.
#[allow(clippy::too_many_arguments)]
pub fn heartbeat(
    group: &mut ConsumerGroup,
    req: &ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    new_member_id: String,
    now: i64,
    cfg: &ConsumerProtocolConfig,
    catalog: &dyn TopicCatalog,
) -> (ConsumerGroupHeartbeatResponse, bool) {
    let epoch = req.member_epoch;
    if epoch == -1 || epoch == -2 {
        return leave(group, req);
    }
    let regex = match requested_regex(req) {
        Ok(regex) => regex,
        Err(refusal) => return (refusal.response(), false),
    };
    let admitted = if epoch == 0 {
        join_member(group, req, client_id, client_host, new_member_id, now, cfg)
    } else {
        known_member(group, req).map(|id| (id, false))
    };
    // Any change to membership, subscriptions or topics moves the group epoch once.
    let (member_id, mut bump) = match admitted {
        Ok(admitted) => admitted,
        Err(refusal) => return (refusal.response(), false),
    };
    let Some(m) = group.members.get_mut(&member_id) else {
        return (err(ResponseError::UnknownMemberId, "unknown member"), false);
    };
    m.last_heartbeat_ms = now;
    bump |= resubscribe(m, req);
    if let Some(regex) = regex {
        let same =
            m.subscribed_regex.as_ref().map(|r| &r.source) == regex.as_ref().map(|r| &r.source);
        if !same {
            m.subscribed_regex = regex;
            m.regex_topics.clear();
            group.regexes_resolved_at = None;
            bump = true;
        }
    }
    let mut changed = update_member(m, req);
    changed |= advance_epochs(group, bump, cfg, catalog);
    reconcile_and_respond(group, member_id, epoch, now, cfg, changed)
}

/// A heartbeat refused before it changed anything: the error and its message.
pub(crate) struct Refusal(ResponseError, String);

impl Refusal {
    fn new(error: ResponseError, message: &str) -> Self {
        Self(error, message.to_string())
    }

    pub(crate) fn response(&self) -> ConsumerGroupHeartbeatResponse {
        err(self.0, &self.1)
    }
}

/// The epoch of a static member that left for a while (KIP-848's `LEAVE_GROUP_STATIC_MEMBER_EPOCH`).
pub(crate) const STATIC_MEMBER_AWAY: i32 = -2;

/// A member leaving (epoch -1) goes at once, and the group epoch moves so that its partitions
/// are given to the others. A static member leaving with epoch -2 is only away: it keeps its
/// place and partitions, at epoch -2, until its session times out or its next incarnation
/// (same instance id) takes them over without a rebalance.
fn leave(
    group: &mut ConsumerGroup,
    req: &ConsumerGroupHeartbeatRequest,
) -> (ConsumerGroupHeartbeatResponse, bool) {
    let id = req.member_id.to_string();
    if req.member_epoch == STATIC_MEMBER_AWAY {
        if let Some(m) = group
            .members
            .get_mut(&id)
            .filter(|m| m.instance_id.is_some() && m.classic.is_none())
        {
            m.epoch = STATIC_MEMBER_AWAY;
            // What it was giving up is given up.
            m.revoking.clear();
            m.last_sent = None;
            tracing::info!(member = %id, "static consumer group member left for now");
            return (
                ConsumerGroupHeartbeatResponse::default()
                    .with_member_id(Some(req.member_id.clone()))
                    .with_member_epoch(STATIC_MEMBER_AWAY),
                true,
            );
        }
    }
    if group.members.shift_remove(&id).is_none() {
        return (err(ResponseError::UnknownMemberId, "unknown member"), false);
    }
    group.target.remove(&id);
    group.group_epoch += 1;
    tracing::info!(member = %id, "consumer group member left");
    (
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(req.member_id.clone()))
            .with_member_epoch(req.member_epoch),
        true,
    )
}

/// From this ConsumerGroupHeartbeat version on the client makes up its member id (KIP-1082),
/// so even a joining member must send one.
pub(crate) const CLIENT_MEMBER_ID_REQUIRED_VERSION: i16 = 1;

/// Whether a string field counts as empty for Kafka's checks: nothing but whitespace.
pub(crate) fn blank(v: &str) -> bool {
    v.trim().is_empty()
}

/// Kafka's checks of a ConsumerGroupHeartbeat before it touches the group: the fields each
/// member epoch requires, no empty ids, and an assignor the coordinator has. The refusal is
/// INVALID_REQUEST (UNSUPPORTED_ASSIGNOR for the assignor) with Kafka's message.
pub(crate) fn check_request(
    req: &ConsumerGroupHeartbeatRequest,
    version: i16,
) -> Result<(), Refusal> {
    let invalid = |message: &str| Err(Refusal::new(ResponseError::InvalidRequest, message));
    if version >= CLIENT_MEMBER_ID_REQUIRED_VERSION && blank(&req.member_id) {
        return invalid("MemberId can't be empty.");
    }
    if req.instance_id.as_ref().is_some_and(|i| blank(i)) {
        return invalid("InstanceId can't be empty.");
    }
    if req.rack_id.as_ref().is_some_and(|r| blank(r)) {
        return invalid("RackId can't be empty.");
    }
    match req.member_epoch {
        e if e > 0 || e == -1 => {
            if blank(&req.member_id) {
                return invalid("MemberId can't be empty.");
            }
        }
        0 => {
            if req.rebalance_timeout_ms == -1 {
                return invalid("RebalanceTimeoutMs must be provided in first request.");
            }
            if req
                .topic_partitions
                .as_ref()
                .is_some_and(|tps| !tps.is_empty())
            {
                return invalid("TopicPartitions must be empty when (re-)joining.");
            }
        }
        STATIC_MEMBER_AWAY => {
            if blank(&req.member_id) {
                return invalid("MemberId can't be empty.");
            }
            if req.instance_id.is_none() {
                return invalid("InstanceId can't be null.");
            }
        }
        _ => return invalid("MemberEpoch is invalid."),
    }
    check_assignor(req)
}

/// A member may ask only for an assignor the coordinator has.
fn check_assignor(req: &ConsumerGroupHeartbeatRequest) -> Result<(), Refusal> {
    match &req.server_assignor {
        Some(a) if !assignor::is_known(a) => Err(Refusal(
            ResponseError::UnsupportedAssignor,
            format!("assignor `{}` is not one of uniform, range", a.as_str()),
        )),
        _ => Ok(()),
    }
}

/// A member joining (epoch 0): a known member starts over with nothing assigned; a new one is
/// added, taking the place of its previous incarnation if it is a static member. Returns the
/// member's id and whether membership changed.
fn join_member(
    group: &mut ConsumerGroup,
    req: &ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    new_member_id: String,
    now: i64,
    cfg: &ConsumerProtocolConfig,
) -> Result<(String, bool), Refusal> {
    check_join_subscription(req)?;
    let id = if req.member_id.is_empty() {
        new_member_id
    } else {
        req.member_id.to_string()
    };
    if let Some(m) = group.members.get_mut(&id) {
        // Rejoining at epoch 0: start over.
        m.assigned.clear();
        m.revoking.clear();
        m.last_sent = None;
        m.epoch = 0;
        return Ok((id, false));
    }
    // A static member's next incarnation takes over its place, its partitions and its target,
    // once the previous one has left for now (epoch -2); a classic one it replaces at once.
    if let Some(old) = previous_incarnation(group, req) {
        let released = group
            .members
            .get(&old)
            .is_some_and(|m| m.epoch == STATIC_MEMBER_AWAY || m.classic.is_some());
        if !released {
            return Err(Refusal(
                ResponseError::UnreleasedInstanceId,
                format!(
                    "Static member {id} cannot join the group because its instance id is \
                     owned by member {old}."
                ),
            ));
        }
        let Some(mut m) = group.members.shift_remove(&old) else {
            return Err(Refusal::new(
                ResponseError::UnknownMemberId,
                "unknown member",
            ));
        };
        tracing::info!(old = %old, member = %id, "static member rejoined as a new incarnation");
        if let Some(target) = group.target.remove(&old) {
            group.target.insert(id.clone(), target);
        }
        m.id = id.clone();
        m.epoch = 0;
        m.previous_epoch = 0;
        m.revoking.clear();
        m.last_sent = None;
        m.classic = None;
        m.client_id = client_id.to_string();
        m.client_host = client_host.to_string();
        m.last_heartbeat_ms = now;
        group.members.insert(id.clone(), m);
        return Ok((id, false));
    } else if group.members.len() >= cfg.max_size {
        return Err(Refusal::new(
            ResponseError::GroupMaxSizeReached,
            "group is full",
        ));
    }
    let member = new_member(&id, req, client_id, client_host, now);
    group.members.insert(id.clone(), member);
    tracing::info!(member = %id, "consumer group member joined");
    Ok((id, true))
}

/// A join must name its topics, by name or by regular expression.
fn check_join_subscription(req: &ConsumerGroupHeartbeatRequest) -> Result<(), Refusal> {
    if req.subscribed_topic_names.is_none() && req.subscribed_topic_regex.is_none() {
        return Err(Refusal::new(
            ResponseError::InvalidRequest,
            "SubscribedTopicNames or SubscribedTopicRegex must be set in first request",
        ));
    }
    Ok(())
}

/// The regular expression the request subscribes with: `None` when the request does not touch
/// it, `Some(None)` when an empty one clears it. An expression that does not compile is
/// INVALID_REGULAR_EXPRESSION, as Kafka answers.
fn requested_regex(
    req: &ConsumerGroupHeartbeatRequest,
) -> Result<Option<Option<TopicRegex>>, Refusal> {
    let Some(source) = &req.subscribed_topic_regex else {
        return Ok(None);
    };
    if source.is_empty() {
        return Ok(Some(None));
    }
    TopicRegex::compile(source.as_str())
        .map(|re| Some(Some(re)))
        .map_err(|e| {
            Refusal(
                ResponseError::InvalidRegularExpression,
                format!(
                    "SubscribedTopicRegex `{}` is not a valid regular expression: {e}",
                    source.as_str()
                ),
            )
        })
}

/// The id of the member with the joining member's instance id, if any.
fn previous_incarnation(
    group: &ConsumerGroup,
    req: &ConsumerGroupHeartbeatRequest,
) -> Option<String> {
    req.instance_id.as_ref().and_then(|inst| {
        group
            .members
            .values()
            .find(|m| m.instance_id.as_deref() == Some(inst.as_str()))
            .map(|m| m.id.clone())
    })
}

/// A member as it joins, with its client's details (the heartbeat records its subscription and
/// assignor next).
fn new_member(
    id: &str,
    req: &ConsumerGroupHeartbeatRequest,
    client_id: &str,
    client_host: &str,
    now: i64,
) -> ConsumerMember {
    ConsumerMember {
        client_id: client_id.to_string(),
        client_host: client_host.to_string(),
        rebalance_timeout_ms: req.rebalance_timeout_ms.max(0),
        ..ConsumerMember::joining(id, req.instance_id.as_ref().map(|i| i.to_string()), now)
    }
}

/// A member already in the group must heartbeat at its epoch, or at its previous one when the
/// response that moved it was lost (and it owns nothing beyond what it is assigned).
fn known_member(
    group: &ConsumerGroup,
    req: &ConsumerGroupHeartbeatRequest,
) -> Result<String, Refusal> {
    let epoch = req.member_epoch;
    let id = req.member_id.to_string();
    let Some(m) = group.members.get(&id) else {
        return Err(Refusal::new(
            ResponseError::UnknownMemberId,
            "unknown member",
        ));
    };
    if m.classic.is_some() {
        return Err(Refusal::new(
            ResponseError::UnknownMemberId,
            "member uses the classic protocol",
        ));
    }
    let owned = req.topic_partitions.as_deref().map(from_wire);
    let lost_response = epoch == m.previous_epoch
        && owned
            .as_ref()
            .is_none_or(|o| is_empty(&minus(o, &m.assigned)));
    if epoch != m.epoch && !lost_response {
        return Err(Refusal::new(
            ResponseError::FencedMemberEpoch,
            "member epoch is stale",
        ));
    }
    Ok(id)
}

/// Records the member's subscription, sorted and without duplicates, if the request has one.
/// Returns whether it changed.
fn resubscribe(m: &mut ConsumerMember, req: &ConsumerGroupHeartbeatRequest) -> bool {
    let Some(topics) = &req.subscribed_topic_names else {
        return false;
    };
    let mut names: Vec<String> = topics.iter().map(|t| t.to_string()).collect();
    names.sort();
    names.dedup();
    if names == m.subscribed {
        return false;
    }
    m.subscribed = names;
    true
}

/// Records the assignor, rack and rebalance timeout the member sent, and ends a revocation it
/// has confirmed. Returns whether it confirmed one.
fn update_member(m: &mut ConsumerMember, req: &ConsumerGroupHeartbeatRequest) -> bool {
    if let Some(a) = &req.server_assignor {
        m.server_assignor = Some(a.to_string());
    }
    if let Some(r) = &req.rack_id {
        m.rack = Some(r.to_string());
    }
    if req.rebalance_timeout_ms > 0 {
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
    }
    // The member reports what it owns: partitions no longer listed are revoked.
    if let Some(owned) = req.topic_partitions.as_deref().map(from_wire) {
        if !is_empty(&m.revoking) && is_empty(&intersect(&owned, &m.revoking)) {
            m.revoking.clear();
            return true;
        }
    }
    false
}

/// Moves the group epoch once for a change to membership, subscriptions (`bump`) or subscribed
/// topics, then recomputes the target if it was computed for an older epoch. Returns whether
/// the group changed.
pub(crate) fn advance_epochs(
    group: &mut ConsumerGroup,
    bump: bool,
    cfg: &ConsumerProtocolConfig,
    catalog: &dyn TopicCatalog,
) -> bool {
    let mut changed = false;
    let topics_changed = group.refresh_metadata(catalog);
    if bump || topics_changed {
        group.group_epoch += 1;
        changed = true;
    }
    if group.assignment_epoch < group.group_epoch {
        group.compute_target(cfg);
        changed = true;
    }
    changed
}

/// Moves the member towards its target and answers with its epoch, and with its assignment on
/// a join or when it differs from the one last sent. The flag is `changed`, or whether the
/// member's epoch or assignment moved.
fn reconcile_and_respond(
    group: &mut ConsumerGroup,
    member_id: String,
    epoch: i32,
    now: i64,
    cfg: &ConsumerProtocolConfig,
    mut changed: bool,
) -> (ConsumerGroupHeartbeatResponse, bool) {
    let before = group
        .members
        .get(&member_id)
        .map(|m| (m.epoch, m.assigned.clone()));
    group.reconcile(&member_id, now);
    let Some(m) = group.members.get_mut(&member_id) else {
        return (
            err(ResponseError::UnknownMemberId, "unknown member"),
            changed,
        );
    };
    if before.as_ref() != Some(&(m.epoch, m.assigned.clone())) {
        changed = true;
    }
    let send = epoch == 0 || m.last_sent.as_ref() != Some(&m.assigned);
    let assignment = send.then(|| to_wire(&m.assigned));
    if send {
        m.last_sent = Some(m.assigned.clone());
    }
    (
        ConsumerGroupHeartbeatResponse::default()
            .with_member_id(Some(StrBytes::from_string(member_id)))
            .with_member_epoch(m.epoch)
            .with_heartbeat_interval_ms(cfg.heartbeat_interval_ms)
            .with_assignment(assignment),
        changed,
    )
}

/// Expired sessions and members that never confirmed a revocation leave the group; returns
/// them. A member of the classic protocol has its own session timeout.
pub fn expire(
    group: &mut ConsumerGroup,
    now: i64,
    cfg: &ConsumerProtocolConfig,
) -> Vec<ConsumerMember> {
    let dead: Vec<String> = group
        .members
        .values()
        .filter(|m| {
            let session = m
                .classic
                .as_ref()
                .map_or(cfg.session_timeout_ms, |c| c.session_timeout_ms);
            let deadline_passed = m.revoke_deadline_ms <= now;
            m.last_heartbeat_ms + i64::from(session) <= now
                || (!is_empty(&m.revoking) && deadline_passed)
                || (m.classic.is_some() && m.revoke_deadline_ms > 0 && deadline_passed)
                || (m.sync_deadline_ms > 0 && m.sync_deadline_ms <= now)
        })
        .map(|m| m.id.clone())
        .collect();
    let mut gone = Vec::new();
    for id in &dead {
        tracing::info!(member = %id, "consumer group member expired");
        gone.extend(group.members.shift_remove(id));
        group.target.remove(id);
    }
    if !gone.is_empty() {
        group.group_epoch += 1;
    }
    gone
}

/// Rebuilds a consumer group from its record; members get a fresh session.
pub(crate) fn restore(v: ConsumerGroupValue, now: i64) -> ConsumerGroup {
    let mut g = ConsumerGroup {
        group_epoch: v.group_epoch,
        assignment_epoch: v.assignment_epoch,
        assignor: v.assignor,
        ..ConsumerGroup::default()
    };
    for m in v.members {
        g.target.insert(m.member_id.clone(), m.target);
        g.members.insert(
            m.member_id.clone(),
            ConsumerMember {
                id: m.member_id,
                instance_id: m.instance_id,
                rack: m.rack,
                client_id: m.client_id,
                client_host: m.client_host,
                subscribed: m.subscribed,
                // A regex stored by this coordinator compiled then; one that no longer does
                // is dropped rather than failing the load.
                subscribed_regex: m
                    .subscribed_regex
                    .and_then(|r| TopicRegex::compile(&r).ok()),
                regex_topics: Vec::new(),
                server_assignor: m.server_assignor,
                rebalance_timeout_ms: m.rebalance_timeout_ms,
                epoch: m.epoch,
                previous_epoch: m.previous_epoch,
                assigned: m.assigned,
                revoking: Assignment::new(),
                revoke_deadline_ms: 0,
                sync_deadline_ms: 0,
                last_heartbeat_ms: now,
                last_sent: None,
                classic: m.classic,
            },
        );
    }
    g
}
