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
use crate::metadata::TopicMeta;

/// Sentinel for "authorized operations not requested".
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
/// All operations a principal could hold on a topic / the cluster; ferry has no ACLs yet.
const ALL_TOPIC_OPERATIONS: i32 = 0b1_1111_1111_1000;
const ALL_CLUSTER_OPERATIONS: i32 = 0b1_1111_1111_1000;

pub fn handle(broker: &Arc<Broker>, request: MetadataRequest, version: i16) -> MetadataResponse {
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
    let (host, port) = &broker.advertised;
    MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(broker.node_id))
            .with_host(str_bytes(host))
            .with_port(i32::from(*port))
            .with_rack(broker.config.rack().map(|r| str_bytes(&r)))])
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

fn describe(broker: &Broker, topic: &TopicMeta) -> MetadataResponseTopic {
    let me = BrokerId(broker.node_id);
    let partitions = (0..topic.partitions)
        .map(|p| {
            let epoch = broker
                .replicas
                .partition_of(&topic.name, p)
                .map(|p| p.leader_epoch);
            let base = MetadataResponsePartition::default().with_partition_index(p);
            match epoch {
                Some(epoch) => base
                    .with_leader_id(me)
                    .with_leader_epoch(epoch)
                    .with_replica_nodes(vec![me])
                    .with_isr_nodes(vec![me]),
                // Known in metadata but its log failed to open.
                None => base
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(-1)
                    .with_replica_nodes(vec![me])
                    .with_offline_replicas(vec![me]),
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(&topic.name))))
        .with_topic_id(topic.id)
        .with_is_internal(Broker::is_internal_topic(&topic.name))
        .with_partitions(partitions)
}
