//! What background parts of the broker (the remote WAL, the internal-topic followers) use of it,
//! as handles built before the `Broker`: the broker holds those parts, and they hold these,
//! never the `Broker` itself.

use std::sync::{Arc, Weak};

use ferry_cluster::BrokerId;
use ferry_common::SharedClock;

use crate::inter_broker::PeerClient;
use crate::replica_manager::ReplicaManager;
use ferry_cluster::metadata_store::MetadataStore;
use ferry_config::broker_config::BrokerConfig;
use ferry_config::topic_config;
use ferry_metrics::Metrics;

#[derive(Clone)]
pub struct HostHandles {
    pub node_id: BrokerId,
    pub config: Arc<BrokerConfig>,
    pub clock: SharedClock,
    pub metadata: Arc<MetadataStore>,
    /// Held weakly: the WAL's tasks end when the broker (the replicas' owner) is gone.
    pub replicas: Weak<ReplicaManager>,
    pub peers: PeerClient,
    pub metrics: Arc<Metrics>,
}

impl std::fmt::Debug for HostHandles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostHandles")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl HostHandles {
    /// The replica manager, while the broker lives.
    pub fn replicas(&self) -> Option<Arc<ReplicaManager>> {
        self.replicas.upgrade()
    }

    /// Registered, unfenced brokers in the image (this one at least).
    pub fn live_broker_count(&self) -> i32 {
        self.metadata.live_broker_count().max(1)
    }

    /// Opens the local logs of a topic this broker just created, before its image arrives (as
    /// CreateTopics does; the same lock as image application, see
    /// [`ReplicaManager::image_apply_guard`]).
    pub fn open_topic(&self, name: &str) -> anyhow::Result<()> {
        let Some(replicas) = self.replicas() else {
            anyhow::bail!("the broker is shutting down");
        };
        let _applying = replicas.image_apply_guard();
        let image = self.metadata.image();
        let Some(topic) = image.topic(name) else {
            anyhow::bail!("topic `{name}` is not in the metadata image");
        };
        let log_config = topic_config::log_config(&self.config, &topic.configs);
        replicas.ensure_topic(topic, log_config)?;
        Ok(())
    }
}
