//! The cluster metadata image: everything the controller quorum agrees on, as a deterministic
//! state machine over [`MetadataRecord`]s.
//!
//! Owns: registered brokers (rack, endpoints per listener, broker epoch, fenced or not), topics (name, id,
//! config overrides, partitions with replicas, leader, leader epoch, partition epoch and ISR),
//! the next unallocated producer id, the cluster id, the security records (SCRAM
//! credentials, ACLs, client quotas; see [`crate::security`] for their invariants), and the
//! dynamic broker configs (per broker id, and the cluster default under `""`).
//!
//! Invariants, checked by [`Image::apply`] before it changes anything (a rejected record leaves the
//! image untouched, so every replica of the Raft log ends in the same image):
//! - topic names and topic ids are unique, and a topic id is never nil;
//! - every replica of a partition is a registered broker, and appears once in its replica list;
//! - the ISR is a subset of the replicas; the leader is in the ISR, or is `-1` (no leader);
//! - a partition's partition epoch grows by exactly one with every change (a change computed from
//!   a stale image is rejected, like a compare-and-set);
//! - a partition's leader epoch never decreases, and grows with every change of leader;
//! - a newly chosen leader is a registered, unfenced broker;
//! - producer ids are handed out in blocks that never overlap;
//! - the cluster id is set once and never changes.
//!
//! [`Image::apply`] is pure: no clock, no randomness, no I/O. Everything random (topic ids, the
//! cluster id) travels inside the record. Crash repair is the Raft layer's job: the image is
//! rebuilt from the last snapshot plus the committed log.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::security::{
    AclBinding, ClientQuotas, QuotaEntity, QuotaValue, ScramCredential, ScramMechanism,
};

/// A Kafka broker id (`node.id`).
pub type BrokerId = i32;

/// "No leader", as Kafka writes it.
pub const NO_LEADER: BrokerId = -1;

/// One listener of a broker as registered: clients that connected on listener `name` are told
/// to reach this broker at `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The listener name (`PLAINTEXT`, `CLIENT`, ...).
    pub name: String,
    pub host: String,
    pub port: u16,
    /// `PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`.
    pub security_protocol: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    pub rack: Option<String>,
    /// The inter-broker listener's endpoint (the only one registrations before named listeners
    /// carried).
    pub host: String,
    pub port: u16,
    /// Every listener's endpoint; empty in registrations written before named listeners.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// Grows with every registration of this broker id, so requests from a previous
    /// incarnation can be told apart.
    pub epoch: i64,
    /// A fenced broker leads nothing and joins no ISR. Brokers register fenced.
    pub fenced: bool,
    /// Replicas of this broker that went offline with a failed log dir, as its heartbeats
    /// reported them; a new registration (a restart) starts with none.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub offline_replicas: BTreeSet<OfflineReplica>,
}

/// One replica of a broker that is offline (its log dir failed), by topic id and partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OfflineReplica {
    pub topic_id: Uuid,
    pub partition: i32,
}

impl BrokerRegistration {
    /// Where clients of `listener` reach this broker: its endpoint on that listener, `None`
    /// when it has none (Kafka leaves such a broker out of the answer). A registration from
    /// before named listeners has one endpoint, given on every listener.
    pub fn endpoint(&self, listener: &str) -> Option<(&str, u16)> {
        if self.endpoints.is_empty() {
            return Some((self.host.as_str(), self.port));
        }
        self.endpoints
            .iter()
            .find(|e| e.name == listener)
            .map(|e| (e.host.as_str(), e.port))
    }

    /// This broker's endpoint on `listener` with its security protocol (inter-broker clients).
    pub fn endpoint_with_protocol(&self, listener: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == listener)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Replica order matters: the first replica is the preferred leader.
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    pub leader: BrokerId,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    /// During a reassignment (KIP-455): the replicas being added, which are in `replicas`
    /// but not yet in the ISR. Empty otherwise (and absent from older records).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub adding_replicas: Vec<BrokerId>,
    /// During a reassignment: the replicas leaving once the adding ones are in sync.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removing_replicas: Vec<BrokerId>,
}

impl PartitionState {
    /// A partition whose replicas are being moved (adding or removing some).
    pub fn is_reassigning(&self) -> bool {
        !self.adding_replicas.is_empty() || !self.removing_replicas.is_empty()
    }

    pub fn preferred_leader(&self) -> BrokerId {
        self.replicas.first().copied().unwrap_or(NO_LEADER)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    /// Topic-level overrides only; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
    pub partitions: Vec<PartitionState>,
}

/// One change to the image. Records are the payload of the Raft log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum MetadataRecord {
    /// Sets the cluster id; accepted once (repeating the same id is a no-op).
    InitCluster {
        cluster_id: String,
    },
    /// (Re-)registers a broker, fenced, with a new broker epoch.
    RegisterBroker {
        id: BrokerId,
        rack: Option<String>,
        /// The inter-broker endpoint.
        host: String,
        port: u16,
        /// Every listener's endpoint; absent in records written before named listeners.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        endpoints: Vec<Endpoint>,
    },
    FenceBroker {
        id: BrokerId,
    },
    /// Adds replicas of the broker registered with `broker_epoch` that went offline with a
    /// failed log dir (Metadata lists them among a partition's offline replicas).
    MarkReplicasOffline {
        id: BrokerId,
        broker_epoch: i64,
        replicas: Vec<OfflineReplica>,
    },
    UnfenceBroker {
        id: BrokerId,
    },
    /// Creates a topic. Each partition gets its listed replicas; its ISR is the replicas that are
    /// live (registered, unfenced), its leader the first of them (or none).
    CreateTopic {
        name: String,
        id: Uuid,
        configs: BTreeMap<String, String>,
        /// One replica list per partition.
        assignments: Vec<Vec<BrokerId>>,
    },
    DeleteTopic {
        name: String,
    },
    /// Replaces the topic's config overrides.
    AlterConfigs {
        name: String,
        configs: BTreeMap<String, String>,
    },
    /// Starts (or replaces) the reassignment of one partition to `target`, or cancels the
    /// ongoing one when `target` is `None` (KIP-455; see [`crate::reassignment`]).
    ReassignPartition {
        topic_id: Uuid,
        partition: i32,
        target: Option<Vec<BrokerId>>,
    },
    /// Adds partitions to a topic, one replica list per new partition.
    CreatePartitions {
        name: String,
        assignments: Vec<Vec<BrokerId>>,
    },
    /// The new state of one partition: a leader change, an ISR change, or both.
    AlterPartition {
        topic_id: Uuid,
        partition: i32,
        leader: BrokerId,
        leader_epoch: i32,
        isr: Vec<BrokerId>,
        /// Must be the current partition epoch plus one.
        partition_epoch: i32,
        /// Set by an unclean election: the leader need not have been in the ISR (the new ISR is
        /// then just the leader).
        unclean: bool,
    },
    /// Reserves `count` producer ids for `broker`.
    AllocateProducerIds {
        broker: BrokerId,
        count: i64,
    },
    /// Creates or replaces the SCRAM credential of `user` for `mechanism`.
    UpsertScramCredential {
        user: String,
        mechanism: ScramMechanism,
        credential: ScramCredential,
    },
    /// Removes the SCRAM credential of `user` for `mechanism`; rejected if there is none.
    DeleteScramCredential {
        user: String,
        mechanism: ScramMechanism,
    },
    /// Stores an ACL binding under `id` (a no-op if the same binding is stored already).
    CreateAcl {
        id: Uuid,
        binding: AclBinding,
    },
    /// Removes the ACL binding with `id`; rejected if there is none.
    DeleteAcl {
        id: Uuid,
    },
    /// Sets (`Some`) or removes (`None`) one quota of a client quota entity.
    AlterClientQuota {
        entity: QuotaEntity,
        key: String,
        value: Option<QuotaValue>,
    },
    /// Replaces the dynamic configs of a BROKER resource: `""` is the cluster default, else a
    /// broker id (which need not be registered, as in Kafka).
    AlterBrokerConfigs {
        resource: String,
        configs: BTreeMap<String, String>,
    },
    /// Replaces the configs of a GROUP resource (KIP-848 groups' session timeout and heartbeat
    /// interval); the group need not exist. An empty map removes them.
    AlterGroupConfigs {
        group: String,
        configs: BTreeMap<String, String>,
    },
}

/// What applying an accepted record produced, beyond the change itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Applied {
    Done,
    /// The broker epoch given to a registration.
    BrokerEpoch(i64),
    /// Producer ids `first .. first + count` belong to the requester.
    ProducerIds {
        first: i64,
        count: i64,
    },
}

/// Why a record was rejected. The image is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ImageError {
    #[error("the cluster id is already {0}")]
    ClusterIdSet(String),
    #[error("broker {0} is not registered")]
    UnknownBroker(BrokerId),
    #[error("broker {id} is registered with epoch {current}, not {got}")]
    StaleBrokerEpoch {
        id: BrokerId,
        current: i64,
        got: i64,
    },
    #[error("topic `{0}` already exists")]
    TopicExists(String),
    #[error("topic id {0} is nil or already in use")]
    InvalidTopicId(Uuid),
    #[error("topic `{0}` does not exist")]
    UnknownTopic(String),
    #[error("topic id {0} does not exist")]
    UnknownTopicId(Uuid),
    #[error("partition {partition} of topic {topic} does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("invalid replica assignment: {0}")]
    InvalidReplicas(String),
    #[error("no reassignment is in progress for partition {partition} of topic {topic}")]
    NoReassignmentInProgress { topic: String, partition: i32 },
    #[error("partition epoch {got} is not the next one after {current}")]
    StalePartitionEpoch { current: i32, got: i32 },
    #[error("leader epoch {got} is invalid after {current}: {why}")]
    InvalidLeaderEpoch { current: i32, got: i32, why: String },
    #[error("invalid ISR {isr:?}: {why}")]
    InvalidIsr { isr: Vec<BrokerId>, why: String },
    #[error("invalid leader {leader}: {why}")]
    InvalidLeader { leader: BrokerId, why: String },
    #[error("invalid producer id count {0}")]
    InvalidProducerIdCount(i64),
    #[error("invalid SCRAM credential: {0}")]
    InvalidCredential(String),
    #[error("user `{0}` has no {1:?} credential")]
    UnknownCredential(String, ScramMechanism),
    #[error("invalid ACL binding: {0}")]
    InvalidAcl(String),
    #[error("ACL id {0} is nil or already in use")]
    InvalidAclId(Uuid),
    #[error("ACL {0} does not exist")]
    UnknownAcl(Uuid),
    #[error("invalid client quota: {0}")]
    InvalidQuota(String),
    #[error("invalid broker config resource `{0}`: neither empty nor a broker id")]
    InvalidBrokerResource(String),
}

/// The metadata image. Cheap to share as `Arc<Image>`; a new image is published after each
/// batch of applied records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<BrokerId, BrokerRegistration>,
    pub topics: BTreeMap<String, TopicImage>,
    /// The lowest producer id not yet handed out.
    pub next_producer_id: i64,
    /// The last broker epoch handed out (a registration gets the next one).
    pub last_broker_epoch: i64,
    /// The Raft log index of the last entry applied to this image (0 before any). Set by the
    /// state machine, not by records.
    pub applied_index: u64,
    /// SCRAM credentials by user, then mechanism. (Absent from images written before ferry
    /// kept security records, hence the serde defaults.)
    #[serde(default)]
    pub scram_credentials: BTreeMap<String, BTreeMap<ScramMechanism, ScramCredential>>,
    /// ACL bindings by id.
    #[serde(default)]
    pub acls: BTreeMap<Uuid, AclBinding>,
    #[serde(default)]
    pub client_quotas: ClientQuotas,
    /// Dynamic broker configs by BROKER resource name (`""`: the cluster default, else a
    /// broker id); a resource without any is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Configs of GROUP resources by group id; a group without any is absent.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
}

impl Image {
    pub fn topic(&self, name: &str) -> Option<&TopicImage> {
        self.topics.get(name)
    }

    /// Whether `broker`'s replica of partition `partition` of topic `topic_id` went offline
    /// with a failed log dir.
    pub fn is_offline_replica(&self, broker: BrokerId, topic_id: Uuid, partition: i32) -> bool {
        self.brokers.get(&broker).is_some_and(|b| {
            b.offline_replicas.contains(&OfflineReplica {
                topic_id,
                partition,
            })
        })
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topics.values().find(|t| t.id == id)
    }

    pub fn partition(&self, topic_id: Uuid, partition: i32) -> Option<&PartitionState> {
        let index = usize::try_from(partition).ok()?;
        self.topic_by_id(topic_id)?.partitions.get(index)
    }

    /// Registered and unfenced.
    pub fn is_live(&self, broker: BrokerId) -> bool {
        self.brokers.get(&broker).is_some_and(|b| !b.fenced)
    }

    /// Validates `record` against this image and applies it; on error nothing changed.
    pub fn apply(&mut self, record: &MetadataRecord) -> Result<Applied, ImageError> {
        match record {
            MetadataRecord::InitCluster { cluster_id } => match &self.cluster_id {
                Some(existing) if existing != cluster_id => {
                    Err(ImageError::ClusterIdSet(existing.clone()))
                }
                _ => {
                    self.cluster_id = Some(cluster_id.clone());
                    Ok(Applied::Done)
                }
            },
            MetadataRecord::RegisterBroker {
                id,
                rack,
                host,
                port,
                endpoints,
            } => {
                self.last_broker_epoch += 1;
                let epoch = self.last_broker_epoch;
                self.brokers.insert(
                    *id,
                    BrokerRegistration {
                        id: *id,
                        rack: rack.clone(),
                        host: host.clone(),
                        port: *port,
                        endpoints: endpoints.clone(),
                        epoch,
                        fenced: true,
                        offline_replicas: BTreeSet::new(),
                    },
                );
                Ok(Applied::BrokerEpoch(epoch))
            }
            MetadataRecord::FenceBroker { id } => self.set_fenced(*id, true),
            MetadataRecord::MarkReplicasOffline {
                id,
                broker_epoch,
                replicas,
            } => {
                let broker = self
                    .brokers
                    .get_mut(id)
                    .ok_or(ImageError::UnknownBroker(*id))?;
                if broker.epoch != *broker_epoch {
                    return Err(ImageError::StaleBrokerEpoch {
                        id: *id,
                        current: broker.epoch,
                        got: *broker_epoch,
                    });
                }
                broker.offline_replicas.extend(replicas.iter().copied());
                Ok(Applied::Done)
            }
            MetadataRecord::UnfenceBroker { id } => self.set_fenced(*id, false),
            MetadataRecord::CreateTopic {
                name,
                id,
                configs,
                assignments,
            } => {
                if self.topics.contains_key(name) {
                    return Err(ImageError::TopicExists(name.clone()));
                }
                if id.is_nil() || self.topic_by_id(*id).is_some() {
                    return Err(ImageError::InvalidTopicId(*id));
                }
                if assignments.is_empty() {
                    return Err(ImageError::InvalidReplicas(
                        "a topic needs at least one partition".into(),
                    ));
                }
                let partitions = self.new_partitions(assignments)?;
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        id: *id,
                        configs: configs.clone(),
                        partitions,
                    },
                );
                Ok(Applied::Done)
            }
            MetadataRecord::DeleteTopic { name } => match self.topics.remove(name) {
                Some(_) => Ok(Applied::Done),
                None => Err(ImageError::UnknownTopic(name.clone())),
            },
            MetadataRecord::AlterConfigs { name, configs } => {
                let topic = self
                    .topics
                    .get_mut(name)
                    .ok_or_else(|| ImageError::UnknownTopic(name.clone()))?;
                topic.configs = configs.clone();
                Ok(Applied::Done)
            }
            MetadataRecord::CreatePartitions { name, assignments } => {
                if !self.topics.contains_key(name) {
                    return Err(ImageError::UnknownTopic(name.clone()));
                }
                let new = self.new_partitions(assignments)?;
                if let Some(topic) = self.topics.get_mut(name) {
                    topic.partitions.extend(new);
                }
                Ok(Applied::Done)
            }
            MetadataRecord::AlterPartition {
                topic_id,
                partition,
                leader,
                leader_epoch,
                isr,
                partition_epoch,
                unclean,
            } => {
                let change = PartitionChange {
                    leader: *leader,
                    leader_epoch: *leader_epoch,
                    isr,
                    partition_epoch: *partition_epoch,
                    unclean: *unclean,
                };
                let live = |b: BrokerId| self.is_live(b);
                let topic = self
                    .topic_by_id(*topic_id)
                    .ok_or(ImageError::UnknownTopicId(*topic_id))?;
                let current = usize::try_from(*partition)
                    .ok()
                    .and_then(|p| topic.partitions.get(p))
                    .ok_or_else(|| ImageError::UnknownPartition {
                        topic: topic.name.clone(),
                        partition: *partition,
                    })?;
                let next = change.validate(current, live)?;
                let name = topic.name.clone();
                if let Some(slot) = self
                    .topics
                    .get_mut(&name)
                    .and_then(|t| t.partitions.get_mut(*partition as usize))
                {
                    *slot = next;
                }
                Ok(Applied::Done)
            }
            MetadataRecord::ReassignPartition {
                topic_id,
                partition,
                target,
            } => {
                let topic = self
                    .topic_by_id(*topic_id)
                    .ok_or(ImageError::UnknownTopicId(*topic_id))?;
                let index = usize::try_from(*partition)
                    .ok()
                    .filter(|i| *i < topic.partitions.len())
                    .ok_or_else(|| ImageError::UnknownPartition {
                        topic: topic.name.clone(),
                        partition: *partition,
                    })?;
                let current = &topic.partitions[index];
                let next = match target {
                    Some(target) => {
                        if let Some(b) = target.iter().find(|b| !self.brokers.contains_key(b)) {
                            return Err(ImageError::UnknownBroker(*b));
                        }
                        crate::reassignment::start(current, target, |b| self.is_live(b))?
                    }
                    None if !current.is_reassigning() => {
                        return Err(ImageError::NoReassignmentInProgress {
                            topic: topic.name.clone(),
                            partition: *partition,
                        })
                    }
                    None => crate::reassignment::cancel(current, |b| self.is_live(b))?,
                };
                let name = topic.name.clone();
                if let Some(slot) = self
                    .topics
                    .get_mut(&name)
                    .and_then(|t| t.partitions.get_mut(index))
                {
                    *slot = next;
                }
                Ok(Applied::Done)
            }
            MetadataRecord::AllocateProducerIds { broker, count } => {
                if !self.brokers.contains_key(broker) {
                    return Err(ImageError::UnknownBroker(*broker));
                }
                if *count <= 0 || self.next_producer_id.checked_add(*count).is_none() {
                    return Err(ImageError::InvalidProducerIdCount(*count));
                }
                let first = self.next_producer_id;
                self.next_producer_id += count;
                Ok(Applied::ProducerIds {
                    first,
                    count: *count,
                })
            }
            MetadataRecord::UpsertScramCredential {
                user,
                mechanism,
                credential,
            } => self.upsert_scram(user, *mechanism, credential),
            MetadataRecord::DeleteScramCredential { user, mechanism } => {
                self.delete_scram(user, *mechanism)
            }
            MetadataRecord::CreateAcl { id, binding } => self.create_acl(*id, binding),
            MetadataRecord::DeleteAcl { id } => self.delete_acl(*id),
            MetadataRecord::AlterClientQuota { entity, key, value } => {
                self.alter_client_quota(entity, key, value.map(|v| v.0))
            }
            MetadataRecord::AlterBrokerConfigs { resource, configs } => {
                if !resource.is_empty() && resource.parse::<BrokerId>().is_err() {
                    return Err(ImageError::InvalidBrokerResource(resource.clone()));
                }
                if configs.is_empty() {
                    self.broker_configs.remove(resource);
                } else {
                    self.broker_configs
                        .insert(resource.clone(), configs.clone());
                }
                Ok(Applied::Done)
            }
            MetadataRecord::AlterGroupConfigs { group, configs } => {
                if configs.is_empty() {
                    self.group_configs.remove(group);
                } else {
                    self.group_configs.insert(group.clone(), configs.clone());
                }
                Ok(Applied::Done)
            }
        }
    }

    fn set_fenced(&mut self, id: BrokerId, fenced: bool) -> Result<Applied, ImageError> {
        let broker = self
            .brokers
            .get_mut(&id)
            .ok_or(ImageError::UnknownBroker(id))?;
        broker.fenced = fenced;
        Ok(Applied::Done)
    }

    fn new_partitions(
        &self,
        assignments: &[Vec<BrokerId>],
    ) -> Result<Vec<PartitionState>, ImageError> {
        assignments
            .iter()
            .map(|replicas| {
                if replicas.is_empty() {
                    return Err(ImageError::InvalidReplicas(
                        "a partition needs at least one replica".into(),
                    ));
                }
                let distinct: BTreeSet<_> = replicas.iter().collect();
                if distinct.len() != replicas.len() {
                    return Err(ImageError::InvalidReplicas(format!(
                        "{replicas:?} names a broker twice"
                    )));
                }
                if let Some(b) = replicas.iter().find(|b| !self.brokers.contains_key(b)) {
                    return Err(ImageError::UnknownBroker(*b));
                }
                let isr: Vec<BrokerId> = replicas
                    .iter()
                    .copied()
                    .filter(|b| self.is_live(*b))
                    .collect();
                Ok(PartitionState {
                    replicas: replicas.clone(),
                    leader: isr.first().copied().unwrap_or(NO_LEADER),
                    isr,
                    leader_epoch: 0,
                    partition_epoch: 0,
                    adding_replicas: Vec::new(),
                    removing_replicas: Vec::new(),
                })
            })
            .collect()
    }
}

/// The proposed next state of a partition, as carried by `AlterPartition`.
struct PartitionChange<'a> {
    leader: BrokerId,
    leader_epoch: i32,
    isr: &'a [BrokerId],
    partition_epoch: i32,
    unclean: bool,
}

impl PartitionChange<'_> {
    /// Checks the partition invariants of the module doc and returns the new state.
    fn validate(
        &self,
        current: &PartitionState,
        live: impl Fn(BrokerId) -> bool,
    ) -> Result<PartitionState, ImageError> {
        if self.partition_epoch != current.partition_epoch.wrapping_add(1) {
            return Err(ImageError::StalePartitionEpoch {
                current: current.partition_epoch,
                got: self.partition_epoch,
            });
        }
        if self.leader_epoch < current.leader_epoch {
            return Err(ImageError::InvalidLeaderEpoch {
                current: current.leader_epoch,
                got: self.leader_epoch,
                why: "leader epochs never decrease".into(),
            });
        }
        let leader_changed = self.leader != current.leader;
        if leader_changed && self.leader_epoch == current.leader_epoch {
            return Err(ImageError::InvalidLeaderEpoch {
                current: current.leader_epoch,
                got: self.leader_epoch,
                why: "a new leader needs a new leader epoch".into(),
            });
        }
        let distinct: BTreeSet<_> = self.isr.iter().collect();
        if distinct.len() != self.isr.len() {
            return Err(ImageError::InvalidIsr {
                isr: self.isr.to_vec(),
                why: "a replica appears twice".into(),
            });
        }
        if let Some(b) = self.isr.iter().find(|b| !current.replicas.contains(b)) {
            return Err(ImageError::InvalidIsr {
                isr: self.isr.to_vec(),
                why: format!("{b} is not a replica"),
            });
        }
        if self.leader != NO_LEADER {
            if !current.replicas.contains(&self.leader) {
                return Err(ImageError::InvalidLeader {
                    leader: self.leader,
                    why: "not a replica".into(),
                });
            }
            if !self.isr.contains(&self.leader) {
                return Err(ImageError::InvalidLeader {
                    leader: self.leader,
                    why: "not in the ISR".into(),
                });
            }
            if leader_changed && !live(self.leader) {
                return Err(ImageError::InvalidLeader {
                    leader: self.leader,
                    why: "not a live broker".into(),
                });
            }
            if leader_changed && !self.unclean && !current.isr.contains(&self.leader) {
                return Err(ImageError::InvalidLeader {
                    leader: self.leader,
                    why: "was not in the ISR and the election is not unclean".into(),
                });
            }
            if self.unclean && self.isr != [self.leader] {
                return Err(ImageError::InvalidIsr {
                    isr: self.isr.to_vec(),
                    why: "after an unclean election the ISR is the leader alone".into(),
                });
            }
        }
        let next = PartitionState {
            replicas: current.replicas.clone(),
            isr: self.isr.to_vec(),
            leader: self.leader,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            adding_replicas: current.adding_replicas.clone(),
            removing_replicas: current.removing_replicas.clone(),
        };
        // An ISR that now holds every replica being added completes the reassignment in the
        // same change, as Kafka's controller does.
        Ok(crate::reassignment::complete_if_in_sync(next, live))
    }
}

#[cfg(test)]
#[path = "image_test.rs"]
pub(crate) mod tests;
