//! Metadata: brokers, and the topics a client asks for (auto-creating them when allowed).
//!
//! With an authorizer, as Kafka: a topic the principal may not DESCRIBE is left out of an
//! all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when asked for (by name or id), so
//! its existence is not revealed; auto-creation needs CREATE on the cluster or the topic.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use uuid::Uuid;

use super::{str_bytes, RequestContext, TOPIC_DENIED};
use crate::broker::Broker;
use ferry_authz::{AclOperation, ResourceType};
use ferry_cluster::metadata_store::TopicMeta;

/// Sentinel for "authorized operations not requested".
const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

/// Answers with the brokers' endpoints on the listener the client connected on.
pub fn handle(
    broker: &Arc<Broker>,
    request: MetadataRequest,
    version: i16,
    ctx: &RequestContext,
) -> MetadataResponse {
    let auto_create = version < 4 || request.allow_auto_topic_creation;
    let topics: Vec<MetadataResponseTopic> = match request.topics {
        // v0: an empty list means all topics; v1+: null means all topics.
        None => all_topics(broker, ctx),
        Some(list) if list.is_empty() && version == 0 => all_topics(broker, ctx),
        Some(list) => list
            .into_iter()
            .map(|t| match t.name {
                Some(name) => by_name(broker, ctx, &name, auto_create),
                None => by_id(broker, ctx, t.topic_id),
            })
            .collect(),
    };
    let topics = topics
        .into_iter()
        .map(|mut t| {
            t.topic_authorized_operations = match &t.name {
                Some(name) if request.include_topic_authorized_operations && t.error_code == 0 => {
                    broker
                        .acls
                        .authorized_operations(ctx, ResourceType::Topic, name)
                        .unwrap_or_else(|| ResourceType::Topic.all_operations_mask())
                }
                _ if request.include_topic_authorized_operations && !broker.acls.is_enabled() => {
                    ResourceType::Topic.all_operations_mask()
                }
                _ => AUTHORIZED_OPERATIONS_OMITTED,
            };
            t
        })
        .collect::<Vec<_>>();
    for t in &topics {
        broker.metrics.error("Metadata", t.error_code);
    }
    let brokers = live_brokers(broker, ctx.listener())
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
            super::cluster::cluster_authorized_operations(broker, ctx)
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        })
}

/// Every topic the principal may describe.
fn all_topics(broker: &Broker, ctx: &RequestContext) -> Vec<MetadataResponseTopic> {
    broker
        .metadata
        .topics()
        .iter()
        .filter(|t| ctx.may_topic(broker, AclOperation::Describe, &t.name))
        .map(|t| describe(broker, t))
        .collect()
}

fn by_name(
    broker: &Broker,
    ctx: &RequestContext,
    name: &TopicName,
    auto_create: bool,
) -> MetadataResponseTopic {
    let found = match broker.metadata.topic(name) {
        _ if !ctx.may_topic(broker, AclOperation::Describe, name) => Err(TOPIC_DENIED),
        Some(t) => Ok(t),
        None if auto_create && !ctx.may_create_topic(broker, name) => Err(TOPIC_DENIED),
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

fn by_id(broker: &Broker, ctx: &RequestContext, id: Uuid) -> MetadataResponseTopic {
    match broker.metadata.topic_by_id(id) {
        // Kafka: ids are not secret, so the error may confirm the id; the name stays hidden.
        Some(t) if !ctx.may_topic(broker, AclOperation::Describe, &t.name) => {
            MetadataResponseTopic::default()
                .with_topic_id(id)
                .with_error_code(TOPIC_DENIED.code())
        }
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

/// The replicas of partition `partition` of `topic` that are not live brokers or sat in a log
/// dir that failed (Metadata's and DescribeTopicPartitions' `offline_replicas`).
pub(crate) fn offline_replicas(
    image: &ferry_cluster::image::Image,
    topic: &ferry_cluster::image::TopicImage,
    partition: i32,
) -> Vec<i32> {
    let Some(state) = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
    else {
        return Vec::new();
    };
    state
        .replicas
        .iter()
        .copied()
        .filter(|r| !image.is_live(*r) || image.is_offline_replica(*r, topic.id, partition))
        .collect()
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
                let index = i32::try_from(i).unwrap_or(i32::MAX);
                let offline = offline_replicas(&image, t, index);
                let base = MetadataResponsePartition::default()
                    .with_partition_index(index)
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
