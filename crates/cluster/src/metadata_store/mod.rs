//! The cluster metadata as the broker uses it: topics (name, id, partition count, config
//! overrides), the cluster id, producer ids and the live brokers, backed by the controller
//! quorum ([`crate::Controller`]). With the default config the node is its own quorum.
//!
//! Writes are [`MetadataRecord`]s proposed to the controller; each call returns once the record
//! is committed (durable in the Raft log) and applied to this node's image, so a topic a client
//! was told exists survives a crash. Reads come from the applied image.
//!
//! Start-up ([`MetadataStore::open`]): the cluster id is set on first start (22-char URL-safe
//! base64, as Kafka); in a cluster, a previous incarnation of this broker that the image still
//! shows live is fenced first (it died: its leaderships move to other in-sync replicas); this
//! broker registers (rack, advertised endpoint) with a new broker epoch and is unfenced (taking
//! the lead of partitions that had no live in-sync replica but itself), and the
//! JSON file of earlier versions (`ferry-metadata.json` in the first log dir), if still present,
//! is imported once: its cluster id, its topics with their ids and configs, and its producer-id
//! position; then it is renamed to `ferry-metadata.json.imported`. An import interrupted by a
//! crash resumes at the next start (topics already in the image are skipped).
//!
//! Producer ids are reserved from the controller in blocks; a block is never handed out twice,
//! and ids of a block left unused at shutdown are skipped.

mod elect;
mod legacy;
mod quorum;
mod reassign;
mod security;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::image::TopicImage;
use crate::placement::{self, PlacementBroker, PlacementError};
use crate::{Applied, BrokerId, ClusterError, ControllerConfig, Image, ImageError, MetadataRecord};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use elect::{ElectError, Elected, PartitionElection, TopicElections};
pub use legacy::{FILE_NAME as LEGACY_FILE_NAME, IMPORTED_NAME as LEGACY_IMPORTED_NAME};
pub use reassign::ReassignRequest;

const PRODUCER_ID_BLOCK: i64 = 1000;
/// How long start-up keeps retrying a proposal the quorum could not take yet.
const START_PROPOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopicMeta {
    pub name: String,
    pub id: Uuid,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Topic-level overrides only; defaults come from the broker config.
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    fn from_image(t: &TopicImage) -> Self {
        let rf = t.partitions.first().map(|p| p.replicas.len()).unwrap_or(0);
        Self {
            name: t.name.clone(),
            id: t.id,
            partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
            replication_factor: i16::try_from(rf).unwrap_or(i16::MAX),
            configs: t.configs.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("metadata file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("metadata file {path} is corrupt: {detail}")]
    Corrupt { path: PathBuf, detail: String },
    #[error("metadata belongs to node {found}, this broker is node.id {configured}")]
    NodeIdMismatch { found: i32, configured: i32 },
    #[error("topic `{0}` already exists")]
    TopicExists(String),
    #[error("topic `{0}` does not exist")]
    UnknownTopic(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("cannot place replicas: {0}")]
    Placement(#[from] PlacementError),
    #[error("controller: {0}")]
    Controller(#[from] ClusterError),
    /// A partition leader's ISR change, refused by the check against the current image.
    #[error("AlterPartition refused: {0}")]
    AlterPartitionRefused(crate::election::AlterIsrError),
    #[error("invalid node.id {0}: a controller id must not be negative")]
    InvalidNodeId(i32),
}

impl MetadataError {
    /// Whether the controller could not be reached right now (no leader, leader moved).
    pub fn is_retriable(&self) -> bool {
        matches!(self, MetadataError::Controller(e) if e.kind() == crate::ErrorKind::Retriable)
    }
}

/// Where and as whom to open the metadata.
#[derive(Debug, Clone)]
pub struct MetadataOptions {
    pub node_id: i32,
    /// The controller's Raft log and snapshots (`metadata.log.dir`).
    pub dir: PathBuf,
    /// Where an older ferry kept `ferry-metadata.json` (the first log dir).
    pub legacy_dir: PathBuf,
    /// `controller.quorum.voters`; empty: this node alone.
    pub voters: BTreeMap<u64, String>,
    pub rack: Option<String>,
    /// The advertised endpoint of this broker's inter-broker listener.
    pub host: String,
    pub port: u16,
    /// The advertised endpoint of every listener of this broker.
    pub endpoints: Vec<crate::image::Endpoint>,
    /// Told the bytes of the controller's traffic with each peer.
    pub traffic: Option<crate::TrafficObserver>,
    /// TLS on the controller quorum (an `SSL` controller listener); `None`: plain TCP.
    pub quorum_tls: Option<crate::QuorumTls>,
    /// `unclean.leader.election.enable`, the default for topics that do not set it.
    pub unclean_leader_election: bool,
    /// Disk space the controller's Raft log may release on a full disk.
    pub space_reserve: std::sync::Arc<ferry_common::SpaceReserve>,
}

/// The next unused producer id of this broker's current block, and the block's end.
#[derive(Debug, Default)]
struct ProducerIds {
    next: i64,
    end: i64,
}

pub struct MetadataStore {
    node_id: i32,
    /// The epoch this incarnation's registration got (what its heartbeats carry).
    broker_epoch: std::sync::atomic::AtomicI64,
    /// Whether other voters exist (a single node has nobody to hand leaderships to).
    clustered: bool,
    quorum: quorum::Quorum,
    producer_ids: Mutex<ProducerIds>,
}

impl MetadataStore {
    /// Starts the controller, registers this broker and imports an old JSON metadata file.
    pub fn open(options: MetadataOptions) -> Result<Self, MetadataError> {
        let node_id = options.node_id;
        let raft_id = u64::try_from(node_id).map_err(|_| MetadataError::InvalidNodeId(node_id))?;
        std::fs::create_dir_all(&options.dir).map_err(|source| MetadataError::Io {
            path: options.dir.clone(),
            source,
        })?;
        let legacy = legacy::read(&options.legacy_dir, node_id)?;
        let mut config = ControllerConfig::new(raft_id, options.voters.clone(), &options.dir);
        config.traffic = options.traffic.clone();
        config.tls = options.quorum_tls.clone();
        config.space_reserve = options.space_reserve.clone();
        if options.voters.len() <= 1 {
            // Alone, there is nobody to wait for: elect quickly after a restart.
            config.heartbeat_interval = std::time::Duration::from_millis(50);
            config.election_timeout_min = std::time::Duration::from_millis(150);
            config.election_timeout_max = std::time::Duration::from_millis(300);
        }
        let quorum = quorum::Quorum::Raft(quorum::RaftQuorum::start(config)?);
        Self::start(&options, quorum, legacy)
    }

    /// A store on a local quorum: no Raft, no controller, nothing kept across restarts (see
    /// [`quorum::Quorum::Local`]); start-up is the same (cluster id, registration, unfencing).
    /// For tests that build a broker without a controller.
    pub fn local(options: &MetadataOptions) -> Result<Self, MetadataError> {
        Self::start(
            options,
            quorum::Quorum::Local(quorum::LocalQuorum::new()),
            None,
        )
    }

    /// Start-up on a running quorum: the cluster id, this incarnation's registration and
    /// unfencing, then the one-time import of `legacy`.
    fn start(
        options: &MetadataOptions,
        quorum: quorum::Quorum,
        legacy: Option<(PathBuf, legacy::LegacyState)>,
    ) -> Result<Self, MetadataError> {
        let node_id = options.node_id;
        let store = Self {
            node_id,
            broker_epoch: std::sync::atomic::AtomicI64::new(-1),
            clustered: options.voters.len() > 1,
            quorum,
            producer_ids: Mutex::new(ProducerIds::default()),
        };
        if store.image().cluster_id.is_none() {
            let cluster_id = legacy
                .as_ref()
                .map(|(_, l)| l.cluster_id.clone())
                .unwrap_or_else(new_cluster_id);
            match store.propose_at_start(MetadataRecord::InitCluster { cluster_id }) {
                // Another voter set it first.
                Err(MetadataError::Controller(ClusterError::Rejected(
                    ImageError::ClusterIdSet(_),
                ))) => {}
                other => {
                    other?;
                }
            }
        }
        let unclean = options.unclean_leader_election;
        if store.clustered && store.image().is_live(node_id) {
            // The previous incarnation crashed before its session expired; what it led must
            // move to replicas that are in sync now (this one restarts as a follower).
            let records = crate::election::fence_broker(&store.image(), node_id, unclean);
            store.propose_all(records)?;
        }
        // Every start is a new incarnation with a new broker epoch.
        let registered = store.propose_at_start(MetadataRecord::RegisterBroker {
            id: node_id,
            rack: options.rack.clone(),
            host: options.host.clone(),
            port: options.port,
            endpoints: options.endpoints.clone(),
        })?;
        if let Applied::BrokerEpoch(epoch) = registered {
            store
                .broker_epoch
                .store(epoch, std::sync::atomic::Ordering::Relaxed);
        }
        let records = crate::election::unfence_broker(&store.image(), node_id, unclean);
        store.propose_all(records)?;
        if let Some((path, state)) = legacy {
            store.import(&state)?;
            legacy::mark_imported(&path)?;
            tracing::info!(
                file = %path.display(),
                topics = state.topics.len(),
                "imported the JSON metadata into the controller"
            );
        }
        Ok(store)
    }

    fn import(&self, state: &legacy::LegacyState) -> Result<(), MetadataError> {
        for topic in state.topics.values() {
            if self.image().topic(&topic.name).is_some() {
                continue;
            }
            let rf = i32::from(topic.replication_factor)
                .clamp(1, self.live_brokers().len().max(1) as i32);
            let assignments = self.assign(&topic.name, topic.partitions, rf, 0)?;
            self.propose(MetadataRecord::CreateTopic {
                name: topic.name.clone(),
                id: topic.id,
                configs: topic.configs.clone(),
                assignments,
            })?;
        }
        let behind = state.producer_id_block_end - self.image().next_producer_id;
        if behind > 0 {
            self.propose(MetadataRecord::AllocateProducerIds {
                broker: self.node_id,
                count: behind,
            })?;
        }
        Ok(())
    }

    /// Stops the controller; later writes fail. Also done on drop.
    pub fn shutdown(&self) {
        self.quorum.shutdown();
    }

    /// The metadata image as applied on this node.
    pub fn image(&self) -> Arc<Image> {
        self.quorum.image()
    }

    /// The leader and leader epoch of a partition in the current image (-1, -1 when unknown).
    pub fn leader_of(&self, topic: &str, partition: i32) -> (i32, i32) {
        let image = self.image();
        image
            .topic(topic)
            .and_then(|t| t.partitions.get(usize::try_from(partition).ok()?))
            .map(|p| (p.leader, p.leader_epoch))
            .unwrap_or((-1, -1))
    }

    fn propose(&self, record: MetadataRecord) -> Result<Applied, MetadataError> {
        Ok(self.quorum.propose(record)?.applied)
    }

    /// Like [`Self::propose`], but rides out a leadership change: while the voters start
    /// together, the leader one node saw may step down before its proposal reaches it.
    fn propose_at_start(&self, record: MetadataRecord) -> Result<Applied, MetadataError> {
        let deadline = tokio::time::Instant::now() + START_PROPOSE_WAIT;
        loop {
            match self.propose(record.clone()) {
                Err(e) if e.is_retriable() && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(error = %e, "controller busy at start-up; retrying");
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    /// Proposes election records in order. A partition change computed from an image that has
    /// moved on since is rejected and skipped (the controller's liveness task reconciles it).
    fn propose_all(&self, records: Vec<MetadataRecord>) -> Result<(), MetadataError> {
        for record in records {
            match self.propose_at_start(record) {
                Err(MetadataError::Controller(ClusterError::Rejected(e))) => {
                    tracing::info!(error = %e, "election record rejected; left to the controller");
                }
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    /// [`MetadataStore::propose`] for async callers; the error is the controller's.
    pub async fn propose_async(&self, record: MetadataRecord) -> Result<(), ClusterError> {
        self.quorum.propose_async(record).await.map(|_| ())
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// The broker epoch of this incarnation's registration.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the quorum has other voters.
    pub fn clustered(&self) -> bool {
        self.clustered
    }

    /// Sends a heartbeat of this broker to the active controller.
    pub async fn heartbeat(
        &self,
        request: crate::BrokerHeartbeat,
        ttl: std::time::Duration,
    ) -> Result<crate::HeartbeatReply, crate::HeartbeatError> {
        self.quorum.heartbeat(request, ttl).await
    }

    /// The metadata quorum as its leader describes it (DescribeQuorum). A local quorum (no
    /// Raft) is described as this node alone, leading in epoch 0, with the image's applied
    /// index as its log end and high watermark.
    pub async fn describe_quorum(&self) -> Result<crate::raft::QuorumInfo, ClusterError> {
        if let Some(described) = self.quorum.describe().await {
            return described;
        }
        let end = i64::try_from(self.image().applied_index).unwrap_or(i64::MAX);
        let now = ferry_common::Clock::now_ms(&ferry_common::SystemClock);
        let id = u64::try_from(self.node_id).unwrap_or_default();
        Ok(crate::raft::QuorumInfo {
            leader_id: id,
            leader_epoch: 0,
            high_watermark: end,
            voters: vec![crate::raft::VoterInfo {
                id,
                addr: String::new(),
                log_end_offset: end,
                last_fetch_ms: now,
                last_caught_up_ms: now,
            }],
        })
    }

    /// The heartbeats other brokers send to this voter (once; the liveness task takes them).
    pub fn take_heartbeats(&self) -> Option<crate::HeartbeatInbox> {
        self.quorum.take_heartbeats()
    }

    /// Whether this node is the active controller (the Raft leader).
    pub fn is_active_controller(&self) -> bool {
        self.quorum.is_leader()
    }

    fn live_brokers(&self) -> Vec<PlacementBroker> {
        self.image()
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .map(|b| PlacementBroker {
                id: b.id,
                rack: b.rack.clone(),
            })
            .collect()
    }

    /// A receiver that sees every newly applied image.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<Image>> {
        self.quorum.subscribe()
    }

    /// Proposes a partition leader's ISR change (Kafka's AlterPartition), checked against the
    /// current image first.
    pub fn alter_isr(
        &self,
        request: &crate::election::AlterIsrRequest,
    ) -> Result<(), MetadataError> {
        let record = crate::election::alter_isr(&self.image(), request)
            .map_err(MetadataError::AlterPartitionRefused)?;
        self.propose(record)?;
        Ok(())
    }

    /// Registered, unfenced brokers.
    pub fn live_broker_count(&self) -> i32 {
        i32::try_from(self.live_brokers().len()).unwrap_or(i32::MAX)
    }

    fn assign(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        first_partition: i32,
    ) -> Result<Vec<Vec<BrokerId>>, MetadataError> {
        // Kafka starts at a random broker; a hash of the name spreads topics just as well.
        let start = name
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        Ok(placement::assign_replicas(
            &self.live_brokers(),
            partitions,
            replication_factor,
            first_partition,
            start,
        )?)
    }

    pub fn cluster_id(&self) -> String {
        self.image().cluster_id.clone().unwrap_or_default()
    }

    pub fn topics(&self) -> Vec<TopicMeta> {
        self.image()
            .topics
            .values()
            .map(TopicMeta::from_image)
            .collect()
    }

    pub fn topic(&self, name: &str) -> Option<TopicMeta> {
        self.image().topic(name).map(TopicMeta::from_image)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<TopicMeta> {
        self.image().topic_by_id(id).map(TopicMeta::from_image)
    }

    fn committed_topic(&self, name: &str) -> Result<TopicMeta, MetadataError> {
        self.topic(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))
    }

    pub fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        let assignments = self.assign(name, partitions, i32::from(replication_factor), 0)?;
        self.create_topic_assigned(name, assignments, configs)
    }

    /// Creates a topic whose partitions get the given replica lists (a manual assignment, or
    /// the placement's).
    pub fn create_topic_assigned(
        &self,
        name: &str,
        assignments: Vec<Vec<BrokerId>>,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        let image = self.image();
        if image.topic(name).is_some() {
            return Err(MetadataError::TopicExists(name.to_string()));
        }
        let mut id = Uuid::new_v4();
        while id.is_nil() || image.topic_by_id(id).is_some() {
            id = Uuid::new_v4();
        }
        let record = MetadataRecord::CreateTopic {
            name: name.to_string(),
            id,
            configs,
            assignments,
        };
        match self.propose(record) {
            Ok(_) => self.committed_topic(name),
            Err(MetadataError::Controller(ClusterError::Rejected(ImageError::TopicExists(_)))) => {
                Err(MetadataError::TopicExists(name.to_string()))
            }
            Err(e) => Err(e),
        }
    }

    pub fn delete_topic(&self, name: &str) -> Result<TopicMeta, MetadataError> {
        let meta = self.committed_topic(name)?;
        self.propose(MetadataRecord::DeleteTopic {
            name: name.to_string(),
        })
        .map_err(|e| unknown_topic(e, name))?;
        Ok(meta)
    }

    /// Grows a topic to `count` partitions; the new ones get `manual` replica lists if given.
    pub fn set_partition_count(
        &self,
        name: &str,
        count: i32,
        manual: Option<Vec<Vec<BrokerId>>>,
    ) -> Result<TopicMeta, MetadataError> {
        let image = self.image();
        let topic = image
            .topic(name)
            .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
        let current = TopicMeta::from_image(topic);
        if count == current.partitions {
            return Ok(current);
        }
        if count < current.partitions {
            return Err(MetadataError::InvalidPartitions(format!(
                "topic `{name}` has {} partitions; the count cannot shrink to {count}",
                current.partitions
            )));
        }
        let assignments = match manual {
            Some(lists) => lists,
            None => self.assign(
                name,
                count - current.partitions,
                i32::from(current.replication_factor).max(1),
                current.partitions,
            )?,
        };
        self.propose(MetadataRecord::CreatePartitions {
            name: name.to_string(),
            assignments,
        })
        .map_err(|e| unknown_topic(e, name))?;
        self.committed_topic(name)
    }

    pub fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicMeta, MetadataError> {
        self.propose(MetadataRecord::AlterConfigs {
            name: name.to_string(),
            configs,
        })
        .map_err(|e| unknown_topic(e, name))?;
        self.committed_topic(name)
    }

    /// Replaces the dynamic configs of a BROKER resource (`""`: the cluster default, else a
    /// broker id); an empty map removes them.
    pub fn set_broker_configs(
        &self,
        resource: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.propose(MetadataRecord::AlterBrokerConfigs {
            resource: resource.to_string(),
            configs,
        })?;
        Ok(())
    }

    /// Replaces the configs of a GROUP resource; an empty map removes them.
    pub fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.propose(MetadataRecord::AlterGroupConfigs {
            group: group.to_string(),
            configs,
        })?;
        Ok(())
    }

    /// A producer id never handed out before, across restarts and brokers.
    pub fn allocate_producer_id(&self) -> Result<i64, MetadataError> {
        let mut ids = self.producer_ids.lock().unwrap_or_else(|p| p.into_inner());
        if ids.next >= ids.end {
            match self.propose(MetadataRecord::AllocateProducerIds {
                broker: self.node_id,
                count: PRODUCER_ID_BLOCK,
            })? {
                Applied::ProducerIds { first, count } => {
                    ids.next = first;
                    ids.end = first + count;
                }
                other => {
                    return Err(MetadataError::Controller(ClusterError::Raft(format!(
                        "producer id allocation returned {other:?}"
                    ))))
                }
            }
        }
        let id = ids.next;
        ids.next += 1;
        Ok(id)
    }
}

fn unknown_topic(e: MetadataError, name: &str) -> MetadataError {
    match e {
        MetadataError::Controller(ClusterError::Rejected(ImageError::UnknownTopic(_))) => {
            MetadataError::UnknownTopic(name.to_string())
        }
        other => other,
    }
}

/// Kafka cluster ids are 16 random bytes in URL-safe base64 without padding (22 chars).
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Uuid::new_v4().into_bytes();
    let mut bits: u128 = u128::from_be_bytes(bytes);
    let mut out = String::with_capacity(22);
    for _ in 0..22 {
        out.push(ALPHABET[(bits & 63) as usize] as char);
        bits >>= 6;
    }
    out
}

/// Kafka's topic name rules: 1..=249 chars of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("topic name is empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("topic name cannot be `{name}`"));
    }
    if name.len() > 249 {
        return Err(format!(
            "topic name is {} characters, the limit is 249",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "topic name `{name}` contains `{c}`; legal characters are ASCII letters, digits, `.`, `_` and `-`"
        ));
    }
    Ok(())
}

/// Topics whose names differ only by `.` versus `_` collide in metric names (Kafka refuses them).
pub fn collides(a: &str, b: &str) -> bool {
    a != b && a.replace('.', "_") == b.replace('.', "_")
}

#[cfg(test)]
mod tests;
