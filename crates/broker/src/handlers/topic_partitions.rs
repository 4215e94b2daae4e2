//! DescribeTopicPartitions (KIP-966): what Kafka 3.7+ admin clients send for `describeTopics`,
//! a Metadata for topics that is paged by partitions.
//!
//! As Kafka's handler: topics are answered in name order, starting at the request's cursor
//! (its topic at its partition, every later topic from partition 0). At most
//! `response_partition_limit` partitions are answered (clamped to 1..=2000, Kafka's
//! `max.request.partition.size.limit` default); where the limit cuts, `next_cursor` names the
//! first partition left out, and a topic none of whose partitions fit is left for the next
//! page. With an authorizer: a topic the principal may not DESCRIBE is left out of an
//! all-topics answer and, when asked for by name, answered TOPIC_AUTHORIZATION_FAILED (after
//! the page, with the zero topic id) without saying whether it exists. A requested topic that
//! does not exist is UNKNOWN_TOPIC_OR_PARTITION (INVALID_TOPIC_EXCEPTION for an invalid name);
//! an all-topics request lists only topics that exist. A cursor whose topic is not among the
//! requested ones, or whose partition is negative, is INVALID_REQUEST for every requested
//! topic. ferry has no eligible leader replicas (ELR stays off), so both ELR lists are empty.

use std::collections::BTreeSet;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_response::{
    Cursor, DescribeTopicPartitionsResponsePartition, DescribeTopicPartitionsResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse, TopicName,
};
use uuid::Uuid;

use super::metadata::offline_replicas;
use super::{str_bytes, RequestContext, TOPIC_DENIED};
use crate::broker::Broker;
use ferry_authz::{AclOperation, ResourceType};
use ferry_cluster::image::{Image, TopicImage};
use ferry_cluster::metadata_store::validate_topic_name;

/// Kafka's `max.request.partition.size.limit` default: the most partitions in one answer.
pub(crate) const MAX_PARTITIONS_PER_RESPONSE: i32 = 2000;

pub fn describe(
    broker: &Arc<Broker>,
    request: DescribeTopicPartitionsRequest,
    ctx: &RequestContext,
) -> DescribeTopicPartitionsResponse {
    let all_topics = request.topics.is_empty();
    let (cursor_topic, cursor_partition) = match &request.cursor {
        Some(c) => (c.topic_name.as_str(), c.partition_index),
        None => ("", 0),
    };
    let image = broker.metadata.image();
    let names: BTreeSet<&str> = if all_topics {
        image.topics.keys().map(String::as_str).collect()
    } else {
        request.topics.iter().map(|t| t.name.as_str()).collect()
    };
    // Topics before the cursor's were answered on earlier pages.
    let names: Vec<&str> = names.into_iter().filter(|n| *n >= cursor_topic).collect();
    let cursor_outside_request =
        request.cursor.is_some() && !all_topics && !names.contains(&cursor_topic);
    if cursor_outside_request || cursor_partition < 0 {
        let topics = request
            .topics
            .iter()
            .map(|t| {
                DescribeTopicPartitionsResponseTopic::default()
                    .with_name(Some(t.name.clone()))
                    .with_error_code(ResponseError::InvalidRequest.code())
            })
            .collect();
        return DescribeTopicPartitionsResponse::default().with_topics(topics);
    }

    let mut denied = Vec::new();
    let allowed: Vec<&str> = names
        .into_iter()
        .filter(|name| {
            let may = ctx.may_topic(broker, AclOperation::Describe, name);
            if !may && !all_topics {
                denied.push(
                    DescribeTopicPartitionsResponseTopic::default()
                        .with_name(Some(TopicName(str_bytes(name))))
                        .with_topic_id(Uuid::nil())
                        .with_error_code(TOPIC_DENIED.code()),
                );
            }
            may
        })
        .collect();

    let limit = request
        .response_partition_limit
        .clamp(1, MAX_PARTITIONS_PER_RESPONSE);
    let start = |name: &str| {
        if name == cursor_topic {
            cursor_partition
        } else {
            0
        }
    };
    let (mut topics, next_cursor) = page(&image, &allowed, start, limit, all_topics);
    // As Kafka: every topic of the page, found or not, carries the operations allowed on it.
    for t in &mut topics {
        if let Some(name) = &t.name {
            t.topic_authorized_operations = broker
                .acls
                .authorized_operations(ctx, ResourceType::Topic, name)
                .unwrap_or_else(|| ResourceType::Topic.all_operations_mask());
        }
    }
    topics.extend(denied);
    for t in &topics {
        broker
            .metrics
            .error("DescribeTopicPartitions", t.error_code);
    }
    DescribeTopicPartitionsResponse::default()
        .with_topics(topics)
        .with_next_cursor(next_cursor)
}

/// One page of `names` (sorted), `limit` partitions at most, each topic from its `start`
/// partition; and the cursor of the next page, if the limit cut the answer short.
fn page(
    image: &Image,
    names: &[&str],
    start: impl Fn(&str) -> i32,
    limit: i32,
    all_topics: bool,
) -> (Vec<DescribeTopicPartitionsResponseTopic>, Option<Cursor>) {
    let mut topics = Vec::new();
    let mut remaining = limit;
    for &name in names {
        if remaining == 0 {
            return (topics, Some(cursor(name, 0)));
        }
        let Some(topic) = image.topic(name) else {
            if !all_topics {
                topics.push(missing_topic(name));
            }
            continue;
        };
        let first = start(name);
        let count = i32::try_from(topic.partitions.len()).unwrap_or(i32::MAX);
        let end = count.min(first.saturating_add(remaining));
        let partitions: Vec<_> = (first..end)
            .filter_map(|i| partition(image, topic, i))
            .collect();
        remaining -= end.saturating_sub(first).max(0);
        topics.push(
            DescribeTopicPartitionsResponseTopic::default()
                .with_name(Some(TopicName(str_bytes(name))))
                .with_topic_id(topic.id)
                .with_is_internal(Broker::is_internal_topic(name))
                .with_partitions(partitions),
        );
        if end < count {
            return (topics, Some(cursor(name, end)));
        }
    }
    (topics, None)
}

fn cursor(topic: &str, partition: i32) -> Cursor {
    Cursor::default()
        .with_topic_name(TopicName(str_bytes(topic)))
        .with_partition_index(partition)
}

/// A requested topic that does not exist: its name says whether it could.
fn missing_topic(name: &str) -> DescribeTopicPartitionsResponseTopic {
    let error = match validate_topic_name(name) {
        Ok(()) => ResponseError::UnknownTopicOrPartition,
        Err(_) => ResponseError::InvalidTopicException,
    };
    DescribeTopicPartitionsResponseTopic::default()
        .with_name(Some(TopicName(str_bytes(name))))
        .with_is_internal(Broker::is_internal_topic(name))
        .with_error_code(error.code())
}

fn partition(
    image: &Image,
    topic: &TopicImage,
    index: i32,
) -> Option<DescribeTopicPartitionsResponsePartition> {
    let state = topic.partitions.get(usize::try_from(index).ok()?)?;
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let offline = offline_replicas(image, topic, index);
    Some(
        DescribeTopicPartitionsResponsePartition::default()
            .with_partition_index(index)
            .with_leader_id(BrokerId(state.leader))
            .with_leader_epoch(state.leader_epoch)
            .with_replica_nodes(ids(&state.replicas))
            .with_isr_nodes(ids(&state.isr))
            .with_eligible_leader_replicas(Some(Vec::new()))
            .with_last_known_elr(Some(Vec::new()))
            .with_offline_replicas(ids(&offline)),
    )
}
