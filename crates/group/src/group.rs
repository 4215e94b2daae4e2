//! Group state: members, generation, protocol, and committed offsets.

use std::collections::HashMap;

use bytes::Bytes;
use indexmap::IndexMap;
use kafka_protocol::messages::{JoinGroupResponse, SyncGroupResponse};
use tokio::sync::oneshot;

use crate::offsets_topic::OffsetValue;

/// The classic protocol's group states, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    /// A JoinGroup waiting for the rebalance to complete, with its request version.
    pub join_waiter: Option<(oneshot::Sender<JoinGroupResponse>, i16)>,
    pub sync_waiter: Option<(oneshot::Sender<SyncGroupResponse>, i16)>,
    pub last_heartbeat_ms: i64,
}

impl Member {
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    pub fn protocol_names(&self) -> impl Iterator<Item = &str> {
        self.protocols.iter().map(|(n, _)| n.as_str())
    }
}

pub struct Group {
    pub id: String,
    pub state: GroupState,
    pub state_since_ms: i64,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub generation: i32,
    pub leader: Option<String>,
    pub members: IndexMap<String, Member>,
    /// Member ids handed out by a MEMBER_ID_REQUIRED answer, with the time they lapse (KIP-394).
    pub pending: HashMap<String, i64>,
    /// group.instance.id → member id (KIP-345).
    pub static_members: HashMap<String, String>,
    /// When the current PreparingRebalance gives up on members that have not rejoined.
    pub rebalance_deadline_ms: i64,
    /// While the first rebalance of an empty group waits for more members to arrive.
    pub initial_join_deadline_ms: Option<i64>,
    /// When a CompletingRebalance gives up waiting for the leader's SyncGroup.
    pub sync_deadline_ms: i64,
    pub offsets: HashMap<(String, i32), OffsetValue>,
    /// The log end after the record of each offset committed since the group was loaded, so
    /// that commits answered out of order are applied in log order.
    pub offset_log_ends: HashMap<(String, i32), i64>,
    /// Offsets committed inside a transaction (TxnOffsetCommit), by producer id: they take
    /// effect when the transaction commits, with the log end after their record.
    pub pending_txn_offsets: HashMap<i64, PendingTxnOffsets>,
    /// Offset commits appended to the log and not yet settled (durable and visible, or
    /// failed). While there is one, the group is not expired: Kafka's `hasOffsets` counts
    /// pending commits too, and an acknowledged commit must find its group when it becomes
    /// visible. Not persisted.
    pub commits_in_flight: usize,
    /// Set when the group runs the KIP-848 consumer protocol instead of the classic one.
    pub consumer: Option<crate::consumer::ConsumerGroup>,
}

/// One producer's transactional offsets of a group: (topic, partition) → offset, and the log
/// end after the record that holds it.
pub type PendingTxnOffsets = HashMap<(String, i32), (OffsetValue, i64)>;

impl Group {
    pub fn new(id: &str, now: i64) -> Self {
        Self {
            id: id.to_string(),
            state: GroupState::Empty,
            state_since_ms: now,
            protocol_type: None,
            protocol: None,
            generation: 0,
            leader: None,
            members: IndexMap::new(),
            pending: HashMap::new(),
            static_members: HashMap::new(),
            rebalance_deadline_ms: 0,
            initial_join_deadline_ms: None,
            sync_deadline_ms: 0,
            offsets: HashMap::new(),
            offset_log_ends: HashMap::new(),
            pending_txn_offsets: HashMap::new(),
            commits_in_flight: 0,
            consumer: None,
        }
    }

    /// A KIP-848 group with members.
    pub fn has_consumer_members(&self) -> bool {
        self.consumer
            .as_ref()
            .is_some_and(|c| !c.members.is_empty())
    }

    /// No member of either protocol.
    pub fn is_empty_of_members(&self) -> bool {
        (self.is(GroupState::Empty) || self.is(GroupState::Dead)) && !self.has_consumer_members()
    }

    pub fn transition(&mut self, state: GroupState, now: i64) {
        self.state = state;
        self.state_since_ms = now;
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    /// Protocols every member supports.
    pub fn candidate_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return Vec::new();
        };
        let mut candidates: Vec<String> = first.protocol_names().map(str::to_string).collect();
        for m in members {
            candidates.retain(|c| m.protocol_names().any(|n| n == c));
        }
        candidates
    }

    /// Whether a member with these protocols could join (shares at least one with everyone).
    pub fn supports_protocols(&self, protocol_type: &str, names: &[String]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !names.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && self
                .candidate_protocols()
                .iter()
                .any(|c| names.iter().any(|n| n == c))
    }

    /// Each member votes for its most preferred candidate; the most votes wins.
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes: IndexMap<&str, usize> = IndexMap::new();
        for m in self.members.values() {
            if let Some(choice) = m
                .protocol_names()
                .find(|n| candidates.iter().any(|c| c == n))
            {
                *votes.entry(choice).or_default() += 1;
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, n) in votes {
            if best.is_none_or(|(_, b)| n > b) {
                best = Some((name, n));
            }
        }
        best.map(|(n, _)| n.to_string())
    }

    pub fn all_members_joined(&self) -> bool {
        self.pending.is_empty() && self.members.values().all(|m| m.join_waiter.is_some())
    }

    pub fn max_rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| i64::from(m.rebalance_timeout_ms))
            .max()
            .unwrap_or(0)
    }
}
