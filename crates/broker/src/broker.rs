//! The broker's shared state, and the topic operations several handlers need (create with
//! validation, auto-create, delete), so that every path applies the same rules.

use std::collections::BTreeMap;
use std::sync::Arc;

use ferry_cluster::BrokerId;
use ferry_common::SharedClock;
use kafka_protocol::error::ResponseError;

use crate::errors;
use crate::group_store::{LogOffsetsStore, OFFSETS_TOPIC};
use crate::replica_fetcher::ReplicaFetcher;
use crate::replica_manager::{IsrChange, IsrOutcome, Partition, ReplicaManager};
use ferry_cluster::metadata_store::{self as metadata, MetadataError, MetadataStore, TopicMeta};
use ferry_config::broker_config::BrokerConfig;
use ferry_config::topic_config;
use ferry_metrics::Metrics;
use ferry_replication::fetch_session::FetchSessionCache;
use ferry_txn::TRANSACTION_STATE_TOPIC;

/// Everything a request handler may touch.
pub struct Broker {
    pub config: BrokerConfig,
    pub node_id: i32,
    pub clock: SharedClock,
    pub metadata: Arc<MetadataStore>,
    pub replicas: Arc<ReplicaManager>,
    pub fetch_sessions: FetchSessionCache,
    pub metrics: Arc<Metrics>,
    /// Connections to the other brokers (replication, WAL metadata).
    pub peers: crate::inter_broker::PeerClient,
    /// The advertised endpoint of each listener, as registered.
    pub endpoints: Vec<ferry_cluster::Endpoint>,
    pub groups: ferry_group::GroupCoordinator,
    pub offsets_store: Arc<LogOffsetsStore>,
    /// Serializes the creation and loading of `__consumer_offsets`.
    pub group_init: std::sync::Mutex<()>,
    /// Serializes [`Broker::follow_offsets_leadership`]: each call acts on the leadership it
    /// reads, so two at once (the image task, start-up) could let a stale view act last, e.g.
    /// drop a partition the other call had just loaded.
    pub offsets_leadership: std::sync::Mutex<()>,
    /// The transaction coordinator (ferry-txn) and its `__transaction_state` store.
    pub txns: ferry_txn::TransactionCoordinator,
    pub txn_store: Arc<crate::txn_store::LogTxnStateStore>,
    /// Serializes the creation and loading of `__transaction_state`.
    pub txn_init: std::sync::Mutex<()>,
    /// Serializes [`Broker::follow_txn_leadership`] (as `offsets_leadership`).
    pub txn_leadership: std::sync::Mutex<()>,
    /// How followed partitions get their bytes from their leaders.
    pub fetcher: Box<dyn ReplicaFetcher>,
    /// The remote WAL (KIP-1176): uploader, WAL fetcher, metadata publisher and GC.
    pub remote_wal: Arc<crate::remote_wal::RemoteWal>,
    /// The long-term tier, with `remote.log.storage.system.enable`.
    pub tier: Option<Arc<crate::tier::Tier>>,
    /// Told of appends and follower reports as handlers serve them (the remote WAL).
    pub replication: Arc<dyn crate::replica_manager::ReplicationObserver>,
    /// ISR changes the partitions led here want; proposed to the controller by a task.
    pub isr_changes: tokio::sync::mpsc::UnboundedSender<IsrChange>,
    /// The authorizer requests are checked with (`authorizer.class.name`), if any.
    pub acls: crate::acl::AclAuthority,
    /// The client quotas in force (AlterClientQuotas), measured per principal and client id.
    pub quotas: crate::client_quotas::ClientQuotas,
    /// Replication throttles (KIP-73) for reassignments.
    pub replication_throttles: Arc<crate::replication_throttle::ReplicationThrottles>,
    /// The controller quorum's TLS on an `SSL` controller listener (reloaded with the others).
    pub controller_tls: Option<Arc<crate::tls::ControllerTls>>,
    /// Corrupt batches known on this broker's disks (see `crate::corruption`).
    pub integrity: Arc<crate::corruption::Integrity>,
}

/// A topic-level failure with the Kafka error and a message for the client.
#[derive(Debug)]
pub struct TopicError {
    pub error: ResponseError,
    pub message: String,
}

impl TopicError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }
}

/// A validated request to create a topic.
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// A manual replica assignment (one broker list per partition), else placement decides.
    pub assignments: Option<Vec<Vec<i32>>>,
}

impl Broker {
    /// This broker's advertised (host, port) on `listener`, `None` if it has no such listener.
    pub fn advertised(&self, listener: &str) -> Option<(String, u16)> {
        self.endpoints
            .iter()
            .find(|e| e.name == listener)
            .map(|e| (e.host.clone(), e.port))
    }

    /// Registered, unfenced brokers in the controller's image (this one at least).
    pub fn live_broker_count(&self) -> i32 {
        self.metadata.live_broker_count().max(1)
    }

    /// Checks a CreateTopics entry; -1 partitions / replication factor mean the broker default.
    pub fn validate_new_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
        configs: BTreeMap<String, String>,
    ) -> Result<NewTopic, TopicError> {
        metadata::validate_topic_name(name)
            .map_err(|m| TopicError::new(ResponseError::InvalidTopicException, m))?;
        if self.metadata.topic(name).is_some() {
            return Err(TopicError::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{name}' already exists."),
            ));
        }
        if let Some(other) = self
            .metadata
            .topics()
            .into_iter()
            .find(|t| metadata::collides(&t.name, name))
        {
            return Err(TopicError::new(
                ResponseError::InvalidTopicException,
                format!("Topic '{name}' collides with existing topic '{}': '.' and '_' are interchangeable in metric names", other.name),
            ));
        }
        let partitions = if partitions == -1 {
            self.config.num_partitions()
        } else {
            partitions
        };
        if partitions <= 0 {
            return Err(TopicError::new(
                ResponseError::InvalidPartitions,
                format!("Number of partitions must be larger than 0, got {partitions}."),
            ));
        }
        let replication_factor = if replication_factor == -1 {
            self.config.default_replication_factor()
        } else {
            replication_factor
        };
        if replication_factor <= 0 {
            return Err(TopicError::new(
                ResponseError::InvalidReplicationFactor,
                format!("Replication factor must be larger than 0, got {replication_factor}."),
            ));
        }
        if i32::from(replication_factor) > self.live_broker_count() {
            return Err(TopicError::new(
                ResponseError::InvalidReplicationFactor,
                format!(
                    "Replication factor: {replication_factor} larger than available brokers: {}.",
                    self.live_broker_count()
                ),
            ));
        }
        topic_config::validate_all(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .and_then(|()| topic_config::validate_with_broker(&self.config, &configs))
            .map_err(|e| TopicError::new(errors::config_error(&e), e.to_string()))?;
        let configs = topic_config::stored(configs);
        Ok(NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs,
            assignments: None,
        })
    }

    /// Records the topic in the metadata and opens its partition logs.
    pub fn create_topic(&self, topic: NewTopic) -> Result<TopicMeta, TopicError> {
        let created = match topic.assignments {
            Some(lists) => self
                .metadata
                .create_topic_assigned(&topic.name, lists, topic.configs),
            None => self.metadata.create_topic(
                &topic.name,
                topic.partitions,
                topic.replication_factor,
                topic.configs,
            ),
        };
        let meta =
            created.map_err(|e| TopicError::new(errors::metadata_error(&e), e.to_string()))?;
        self.open_topic(&meta)?;
        tracing::info!(topic = %meta.name, id = %meta.id, partitions = meta.partitions, "created topic");
        Ok(meta)
    }

    /// Opens the logs of the partitions of a known topic that this broker hosts, as leader or
    /// follower by the image.
    pub fn open_topic(&self, meta: &TopicMeta) -> Result<(), TopicError> {
        let _applying = self.replicas.image_apply_guard();
        let image = self.metadata.image();
        let Some(topic) = image.topic(&meta.name) else {
            return Err(TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic `{}` is not in the metadata image", meta.name),
            ));
        };
        let log_config = topic_config::log_config(&self.config, &topic.configs);
        // New followers start fetching when the image task syncs the fetchers.
        self.replicas
            .ensure_topic(topic, log_config)
            .map(|_| ())
            .map_err(|e| TopicError::new(errors::log_error(&e), e.to_string()))
    }

    /// The error for a partition not hosted here: KAFKA_STORAGE_ERROR if its replica here was
    /// in a failed log dir (Kafka's answer for an offline partition), NOT_LEADER_OR_FOLLOWER if
    /// the image knows it (another broker hosts it), else UNKNOWN_TOPIC_OR_PARTITION.
    pub fn missing_partition_error(&self, topic: &str, partition: i32) -> ResponseError {
        if self
            .replicas
            .is_offline(&ferry_common::TopicPartition::new(topic, partition))
        {
            return ResponseError::KafkaStorageError;
        }
        let known = self
            .metadata
            .image()
            .topic(topic)
            .is_some_and(|t| partition >= 0 && (partition as usize) < t.partitions.len());
        if known {
            ResponseError::NotLeaderOrFollower
        } else {
            ResponseError::UnknownTopicOrPartition
        }
    }

    /// The leader of a partition by the image, with its epoch: (-1, -1) if unknown.
    pub fn leader_of(&self, topic: &str, partition: i32) -> (i32, i32) {
        self.metadata.leader_of(topic, partition)
    }

    /// Takes this broker's dynamic configs and the cluster defaults from `image`; when they
    /// changed, every hosted topic's log config is recomputed (a topic without an override
    /// follows a new default at once).
    pub fn follow_broker_configs(&self, image: &ferry_cluster::Image) {
        let next = ferry_config::DynamicConfigs {
            per_broker: image
                .broker_configs
                .get(&self.node_id.to_string())
                .cloned()
                .unwrap_or_default(),
            cluster_default: image.broker_configs.get("").cloned().unwrap_or_default(),
        };
        if self.config.dynamic() == next {
            return;
        }
        self.config.set_dynamic(next);
        self.replication_throttles.follow_rates(&self.config);
        for topic in self.metadata.topics() {
            let log_config = topic_config::log_config(&self.config, &topic.configs);
            self.replicas.update_topic_config(&topic.name, &log_config);
        }
    }

    /// Hands the groups' own settings (GROUP config resources) in `image` to the group
    /// coordinator.
    pub fn follow_group_configs(&self, image: &ferry_cluster::Image) {
        use ferry_config::group_config::override_ms;
        let overrides = image
            .group_configs
            .iter()
            .map(|(group, configs)| {
                let o = ferry_group::ConsumerGroupOverrides {
                    heartbeat_interval_ms: override_ms(configs, "consumer.heartbeat.interval.ms"),
                    session_timeout_ms: override_ms(configs, "consumer.session.timeout.ms"),
                };
                (group.clone(), o)
            })
            .collect();
        self.groups.set_group_overrides(overrides);
    }

    /// Follows a new metadata image: partitions, roles, deleted topics, fetchers.
    pub fn apply_image(self: &Arc<Self>, image: &ferry_cluster::Image) {
        // A topic created since `image` was taken already has logs (CreateTopics opens them):
        // an older image would delete them as gone, so follow the newest image, read under the
        // same lock `open_topic` holds.
        let applying = self.replicas.image_apply_guard();
        let latest = self.metadata.image();
        let image = if latest.applied_index > image.applied_index {
            &*latest
        } else {
            image
        };
        self.metrics.set_peer_racks(peer_racks(image));
        self.follow_broker_configs(image);
        self.follow_group_configs(image);
        let changes = self.replicas.apply_image(image, |t| {
            topic_config::log_config(&self.config, &t.configs)
        });
        drop(applying);
        for topic in &changes.deleted_topics {
            self.fetch_sessions.forget_topic(topic);
            tracing::info!(topic = %topic, "deleted the local replicas of a deleted topic");
        }
        self.remote_wal.on_image(image);
        self.acls.follow_image(&image.acls);
        self.quotas.follow_image(image.client_quotas());
        self.replication_throttles.follow_image(image);
        // Every change of a leader's ISR or replica set arrives through the image.
        self.metrics
            .under_replicated_partitions
            .set(i64::try_from(self.replicas.under_replicated_count()).unwrap_or(i64::MAX));
        self.fetcher.sync(self.replicas.all());
        if image.topic(OFFSETS_TOPIC).is_some() {
            self.follow_offsets_leadership();
        }
        if image.topic(TRANSACTION_STATE_TOPIC).is_some() {
            self.follow_txn_leadership();
        }
    }

    /// Proposes a leader's ISR change to the controller (blocking), as Kafka's
    /// AlterPartitionManager does: a change refused for a stale partition epoch (the image moved
    /// on since the partition last applied it) is restated once against the current partition
    /// state and proposed again, or dropped when that state already has it or the leadership
    /// moved. Returns how it ended and the ISR proposed last.
    pub fn propose_isr_change(&self, change: &IsrChange) -> (IsrOutcome, Vec<BrokerId>) {
        let first = self.metadata.alter_isr(&change.request());
        if !matches!(&first, Err(e) if is_stale_partition_epoch(e)) {
            return (self.isr_outcome(change, first), change.new_isr.clone());
        }
        let image = self.metadata.image();
        let Some(state) = image.partition(change.topic_id, change.partition) else {
            return (IsrOutcome::AwaitImage, change.new_isr.clone());
        };
        let rebased = ferry_cluster::election::rebase_isr_change(
            state,
            change.leader,
            change.leader_epoch,
            &change.current_isr,
            &change.new_isr,
        );
        let ferry_cluster::election::Rebased::Retry(new_isr) = rebased else {
            tracing::debug!(topic_id = %change.topic_id, partition = change.partition, outcome = ?rebased,
                "ISR change refused for a stale partition epoch; nothing left to propose");
            return (IsrOutcome::AwaitImage, change.new_isr.clone());
        };
        let retry = IsrChange {
            partition_epoch: state.partition_epoch,
            current_isr: state.isr.clone(),
            expands: new_isr.len() > state.isr.len(),
            new_isr,
            ..change.clone()
        };
        let second = self.metadata.alter_isr(&retry.request());
        (self.isr_outcome(&retry, second), retry.new_isr)
    }

    /// What the answer to an AlterPartition means for the leader (and the metrics).
    fn isr_outcome(&self, change: &IsrChange, result: Result<(), MetadataError>) -> IsrOutcome {
        use ferry_cluster::election::AlterIsrError as E;
        let e = match result {
            Ok(()) => {
                if change.expands {
                    self.metrics.isr_expands.inc();
                } else {
                    self.metrics.isr_shrinks.inc();
                }
                return IsrOutcome::Committed;
            }
            Err(e) => e,
        };
        let outcome = match &e {
            MetadataError::AlterPartitionRefused(
                E::IneligibleReplica(_) | E::InvalidRequest(_),
            ) => IsrOutcome::Refused,
            MetadataError::AlterPartitionRefused(_) => IsrOutcome::AwaitImage,
            // The controller's image rejected it: it is ahead of this broker's.
            MetadataError::Controller(ferry_cluster::ClusterError::Rejected(_)) => {
                IsrOutcome::AwaitImage
            }
            _ => IsrOutcome::Unavailable,
        };
        tracing::debug!(topic_id = %change.topic_id, partition = change.partition, isr = ?change.new_isr,
            partition_epoch = change.partition_epoch, error = %e, ?outcome, "ISR change not made");
        outcome
    }

    /// Creates a topic on first use when `auto.create.topics.enable` allows it.
    pub fn auto_create(&self, name: &str) -> Result<TopicMeta, TopicError> {
        if let Some(t) = self.metadata.topic(name) {
            return Ok(t);
        }
        if !self.config.auto_create_topics() {
            return Err(TopicError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("Topic '{name}' does not exist and auto.create.topics.enable is false"),
            ));
        }
        let new = self.validate_new_topic(name, -1, -1, BTreeMap::new())?;
        match self.create_topic(new) {
            Err(e) if e.error == ResponseError::TopicAlreadyExists => {
                self.metadata.topic(name).ok_or_else(|| {
                    TopicError::new(ResponseError::UnknownTopicOrPartition, "topic vanished")
                })
            }
            other => other,
        }
    }

    pub fn delete_topic(&self, name: &str) -> Result<TopicMeta, TopicError> {
        let meta = self
            .metadata
            .delete_topic(name)
            .map_err(|e| TopicError::new(errors::metadata_error(&e), e.to_string()))?;
        self.fetch_sessions.forget_topic(name);
        self.replicas
            .delete_topic(name)
            .map_err(|e| TopicError::new(errors::log_error(&e), e.to_string()))?;
        tracing::info!(topic = %name, "deleted topic");
        Ok(meta)
    }

    /// Creates `__consumer_offsets` on first use and loads the groups it holds.
    pub fn ensure_group_coordinator(&self) -> Result<(), TopicError> {
        if self.offsets_store.is_ready() {
            return Ok(());
        }
        let _guard = self.group_init.lock().unwrap_or_else(|p| p.into_inner());
        if self.offsets_store.is_ready() {
            return Ok(());
        }
        let partitions = self.groups.config().offsets_topic_partitions;
        let meta = self.internal_topic(OFFSETS_TOPIC, partitions, "offsets.topic", None)?;
        self.open_topic(&meta)?;
        self.follow_offsets_leadership();
        Ok(())
    }

    /// Creates `__transaction_state` on first use and loads the transactions it holds.
    pub fn ensure_txn_coordinator(&self) -> Result<(), TopicError> {
        if self.txn_store.is_ready() {
            return Ok(());
        }
        let _guard = self.txn_init.lock().unwrap_or_else(|p| p.into_inner());
        if self.txn_store.is_ready() {
            return Ok(());
        }
        let partitions = self.txns.config().state_log_partitions;
        let min_isr = self
            .config
            .raw("transaction.state.log.min.isr")
            .parse::<i32>()
            .unwrap_or(1);
        let meta = self.internal_topic(
            TRANSACTION_STATE_TOPIC,
            partitions,
            "transaction.state.log",
            Some(min_isr),
        )?;
        self.open_topic(&meta)?;
        self.follow_txn_leadership();
        Ok(())
    }

    /// A coordinator's compacted internal topic, created if it does not exist yet: its
    /// replication factor and segment size from `<prefix>.replication.factor` and
    /// `<prefix>.segment.bytes`, the factor capped at the live brokers, and `min_isr` (if
    /// given) capped at the factor.
    fn internal_topic(
        &self,
        name: &str,
        partitions: i32,
        prefix: &str,
        min_isr: Option<i32>,
    ) -> Result<TopicMeta, TopicError> {
        if let Some(meta) = self.metadata.topic(name) {
            return Ok(meta);
        }
        let rf = (self
            .config
            .raw(&format!("{prefix}.replication.factor"))
            .parse::<i32>()
            .unwrap_or(1))
        .min(self.live_broker_count())
        .max(1);
        let mut configs = BTreeMap::new();
        configs.insert("cleanup.policy".to_string(), "compact".to_string());
        configs.insert(
            "segment.bytes".to_string(),
            self.config
                .raw(&format!("{prefix}.segment.bytes"))
                .to_string(),
        );
        if let Some(min_isr) = min_isr {
            configs.insert(
                "min.insync.replicas".to_string(),
                min_isr.clamp(1, rf).to_string(),
            );
        }
        let meta = self
            .metadata
            .create_topic(name, partitions, rf as i16, configs)
            .map_err(|e| TopicError::new(errors::metadata_error(&e), e.to_string()))?;
        tracing::info!(partitions, "created {name}");
        Ok(meta)
    }

    /// The group coordinator follows the leadership of `__consumer_offsets` (Kafka's
    /// `onElection` / `onResignation`): it loads the groups of each partition that became led
    /// here, at each new leader epoch, and unloads those of partitions led elsewhere now.
    pub fn follow_offsets_leadership(&self) {
        let _serial = self
            .offsets_leadership
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let led: std::collections::HashMap<i32, i32> =
            self.groups.led_partitions().into_iter().collect();
        let Some((hosted, min_isr, changes)) = self.leadership_changes(OFFSETS_TOPIC, &led) else {
            return;
        };
        self.offsets_store.set_partitions(hosted, min_isr);
        for change in changes {
            match change {
                Leadership::Elected(p, epoch) => {
                    if let Err(e) = self.groups.on_election(p, epoch) {
                        tracing::error!(partition = p, error = %e, "cannot load consumer groups");
                    }
                }
                Leadership::Resigned(p) => self.groups.on_resignation(p),
            }
        }
    }

    /// The transaction coordinator follows the leadership of `__transaction_state`, as the
    /// group coordinator follows `__consumer_offsets`.
    pub fn follow_txn_leadership(&self) {
        let _serial = self
            .txn_leadership
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let led: std::collections::HashMap<i32, i32> =
            self.txns.led_partitions().into_iter().collect();
        let Some((hosted, min_isr, changes)) =
            self.leadership_changes(TRANSACTION_STATE_TOPIC, &led)
        else {
            return;
        };
        self.txn_store.set_partitions(hosted, min_isr);
        for change in changes {
            match change {
                Leadership::Elected(p, epoch) => {
                    if let Err(e) = self.txns.on_election(p, epoch) {
                        tracing::error!(partition = p, error = %e, "cannot load transactions");
                    }
                }
                Leadership::Resigned(p) => self.txns.on_resignation(p),
            }
        }
    }

    /// For a coordinator's internal `topic`: the partitions hosted here, the topic's
    /// `min.insync.replicas`, and the leaderships to take (led here at an epoch the coordinator
    /// did not load, `led`) or give up. `None` if the topic does not exist.
    fn leadership_changes(
        &self,
        topic: &str,
        led: &std::collections::HashMap<i32, i32>,
    ) -> Option<(Vec<Arc<Partition>>, i32, Vec<Leadership>)> {
        let meta = self.metadata.topic(topic)?;
        let min_isr = topic_config::effective(&self.config, &meta.configs, "min.insync.replicas")
            .and_then(|(v, _)| v.parse::<i32>().ok())
            .unwrap_or(1);
        let hosted: Vec<_> = (0..meta.partitions)
            .filter_map(|p| self.replicas.partition_of(topic, p))
            .collect();
        let mut changes = Vec::new();
        for p in 0..meta.partitions {
            let leading = self
                .replicas
                .partition_of(topic, p)
                .filter(|x| x.is_leader())
                .map(|x| x.leader_epoch());
            match leading {
                Some(epoch) if led.get(&p) != Some(&epoch) => {
                    changes.push(Leadership::Elected(p, epoch));
                }
                Some(_) => {}
                None if led.contains_key(&p) => changes.push(Leadership::Resigned(p)),
                None => {}
            }
        }
        Some((hosted, min_isr, changes))
    }

    /// The transaction coordinator, once `__transaction_state` exists.
    pub fn txn_coordinator(&self) -> Result<&ferry_txn::TransactionCoordinator, ResponseError> {
        self.ensure_txn_coordinator()
            .map(|_| &self.txns)
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    /// The group coordinator, once `__consumer_offsets` exists.
    pub fn group_coordinator(&self) -> Result<&ferry_group::GroupCoordinator, ResponseError> {
        self.ensure_group_coordinator()
            .map(|_| &self.groups)
            .map_err(|_| ResponseError::CoordinatorNotAvailable)
    }

    pub fn is_internal_topic(name: &str) -> bool {
        name.starts_with("__")
    }
}

/// A coordinator's partition that became led here (at a leader epoch) or is led elsewhere now.
enum Leadership {
    Elected(i32, i32),
    Resigned(i32),
}

/// Every registered broker's rack as a metric label (`none` for a broker without one).
pub fn peer_racks(image: &ferry_cluster::Image) -> std::collections::HashMap<i32, String> {
    image
        .brokers
        .values()
        .map(|b| (b.id, b.rack.clone().unwrap_or_else(|| "none".to_string())))
        .collect()
}

/// Whether an AlterPartition was refused because the partition changed since the leader last
/// saw it (this broker's image or the controller's is ahead of the partition's state).
fn is_stale_partition_epoch(e: &MetadataError) -> bool {
    matches!(
        e,
        MetadataError::AlterPartitionRefused(
            ferry_cluster::election::AlterIsrError::InvalidUpdateVersion
        ) | MetadataError::Controller(ferry_cluster::ClusterError::Rejected(
            ferry_cluster::ImageError::StalePartitionEpoch { .. }
        ))
    )
}
