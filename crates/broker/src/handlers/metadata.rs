//! Metadata: brokers, and the topics a client asks for (auto-creating them when allowed).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use super::str_bytes;
use crate::broker::Broker;
use ferry_cluster::metadata_store::TopicMeta;

/// Sentinel for "authorized operations not requested".
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// All operations a principal could hold on a topic / the cluster; ferry has no ACLs yet.
const ALL_TOPIC_OPERATIONS: i32 = 0b1_1111_1111_1000;
const ALL_CLUSTER_OPERATIONS: i32 = 0b1_1111_1111_1000;

/// Answers with the brokers' endpoints on `listener`, the one the client connected on.
pub fn handle(
    broker: &Arc<Broker>,
    request: MetadataRequest,
    version: i16,
    listener: &str,
) -> MetadataResponse {
    let auto_create = version < 4 || request.allow_auto_topic_creation;
    let topics: Vec<MetadataResponseTopic> = match request.topics {
        // v0: an empty list means all topics; v1+: null means all topics.
        None => all_topics(broker),
        Some(list) if list.is_empty() && version == 0 => all_topics(broker),
        Some(list) => list
            .into_iter()
            .map(|t| match t.name {
                Some(name) => by_name(broker, &name, auto_create),
                None => by_id(broker, t.topic_id),
            })
            .collect(),
    };
    let topics = topics
        .into_iter()
        .map(|mut t| {
            t.topic_authorized_operations = if request.include_topic_authorized_operations {
                ALL_TOPIC_OPERATIONS
            } else {
                AUTHORIZED_OPERATIONS_OMITTED
            };
            t
        })
        .collect::<Vec<_>>();
    for t in &topics {
        broker.metrics.error("Metadata", t.error_code);
    }
    let brokers = live_brokers(broker, listener)
        .into_iter()
        .map(|(id, host, port, rack)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(id))
                .with_host(str_bytes(&host))
                .with_port(i32::from(port))
                .with_rack(rack.map(|r| str_bytes(&r)))
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(&broker.metadata.cluster_id())))
        .with_controller_id(BrokerId(broker.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(if request.include_cluster_authorized_operations {
            ALL_CLUSTER_OPERATIONS
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        })
}

fn all_topics(broker: &Broker) -> Vec<MetadataResponseTopic> {
    broker
        .metadata
        .topics()
        .iter()
        .map(|t| describe(broker, t))
        .collect()
}

fn by_name(broker: &Broker, name: &TopicName, auto_create: bool) -> MetadataResponseTopic {
    let found = match broker.metadata.topic(name) {
        Some(t) => Ok(t),
        None if auto_create => broker.auto_create(name).map_err(|e| e.error),
        None => Err(ResponseError::UnknownTopicOrPartition),
    };
    match found {
        Ok(t) => describe(broker, &t),
        Err(e) => MetadataResponseTopic::default()
            .with_name(Some(name.clone()))
            .with_error_code(e.code()),
    }
}

fn by_id(broker: &Broker, id: Uuid) -> MetadataResponseTopic {
    match broker.metadata.topic_by_id(id) {
        Some(t) => describe(broker, &t),
        None => MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(ResponseError::UnknownTopicId.code()),
    }
}

/// The registered, unfenced brokers of the image as (id, host, port, rack) on `listener`,
/// leaving out brokers without that listener (as Kafka does); this broker (as configured) is
/// added if the image does not show it live yet.
pub fn live_brokers(broker: &Broker, listener: &str) -> Vec<(i32, String, u16, Option<String>)> {
    let image = broker.metadata.image();
    let live: Vec<_> = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .filter_map(|b| {
            let (host, port) = b.endpoint(listener)?;
            Some((b.id, host.to_string(), port, b.rack.clone()))
        })
        .collect();
    if image
        .brokers
        .get(&broker.node_id)
        .is_some_and(|b| !b.fenced)
    {
        return live;
    }
    let mut all = live;
    if let Some((host, port)) = broker.advertised(listener) {
        all.push((broker.node_id, host, port, broker.config.rack()));
    }
    all
}

fn describe(broker: &Broker, topic: &TopicMeta) -> MetadataResponseTopic {
    let image = broker.metadata.image();
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let partitions = match image.topic(&topic.name) {
        Some(t) => t
            .partitions
            .iter()
            .enumerate()
            .map(|(i, state)| {
                let offline: Vec<i32> = state
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| !image.is_live(*r))
                    .collect();
                let base = MetadataResponsePartition::default()
                    .with_partition_index(i32::try_from(i).unwrap_or(i32::MAX))
                    .with_leader_id(BrokerId(state.leader))
                    .with_leader_epoch(state.leader_epoch)
                    .with_replica_nodes(ids(&state.replicas))
                    .with_isr_nodes(ids(&state.isr))
                    .with_offline_replicas(ids(&offline));
                if state.leader < 0 {
                    base.with_error_code(ResponseError::LeaderNotAvailable.code())
                } else {
                    base
                }
            })
            .collect(),
        None => Vec::new(),
    };
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&topic.name))))
        .with_topic_id(topic.id)
        .with_is_internal(Broker::is_internal_topic(&topic.name))
        .with_partitions(partitions)
}
