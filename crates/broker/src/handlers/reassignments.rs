//! AlterPartitionReassignments and ListPartitionReassignments (KIP-455, KIP-860): moving a
//! partition's replicas to other brokers, as `kafka-reassign-partitions.sh` and the admin
//! clients drive it.
//!
//! A request becomes one `ReassignPartition` record per partition, proposed to the controller
//! quorum (`MetadataStore::reassign_partitions`); the image then lists the partition's adding
//! and removing replicas. The brokers follow the image: an adding replica opens an empty log
//! and catches up from the leader like any follower, the leader adds it to the ISR once it has,
//! and that ISR change completes the reassignment (`ferry_cluster::reassignment`); a broker no
//! longer among a partition's replicas then deletes its replica. The answer waits, up to the
//! request's `timeout_ms`, for the records to be committed (not for the data to move).

use std::sync::Arc;
use std::time::Duration;

use ferry_authz::AclOperation;
use ferry_cluster::metadata_store::ReassignRequest;
use ferry_cluster::reassignment::original_replicas;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;

const ALTER: &str = "AlterPartitionReassignments";

/// A partition's error and its message.
type Refusal = (ResponseError, String);
const LIST: &str = "ListPartitionReassignments";

pub async fn alter(
    broker: &Arc<Broker>,
    request: AlterPartitionReassignmentsRequest,
    version: i16,
    ctx: &RequestContext,
) -> AlterPartitionReassignmentsResponse {
    // v0 predates KIP-860: a change of replication factor is allowed.
    let allow_rf_change = version == 0 || request.allow_replication_factor_change;
    let response = AlterPartitionReassignmentsResponse::default()
        .with_allow_replication_factor_change(allow_rf_change);
    let refuse = |e: ResponseError, why: String| {
        broker.metrics.error(ALTER, e.code());
        response
            .clone()
            .with_error_code(e.code())
            .with_error_message(message(why))
    };
    if !ctx.may_cluster(broker, AclOperation::Alter) {
        return refuse(
            ResponseError::ClusterAuthorizationFailed,
            "AlterPartitionReassignments needs ALTER on the cluster".into(),
        );
    }
    let timeout = match u64::try_from(request.timeout_ms) {
        Ok(ms) if ms > 0 => Duration::from_millis(ms),
        _ => {
            return refuse(
                ResponseError::RequestTimedOut,
                format!("timeout_ms {} leaves no time", request.timeout_ms),
            )
        }
    };
    // Checked here, before anything is proposed: the errors Kafka's controller gives without
    // changing anything. `None` marks a partition to propose.
    let image = broker.metadata.image();
    let mut checked: Vec<(String, i32, Option<Refusal>)> = Vec::new();
    let mut wanted = Vec::new();
    for topic in &request.topics {
        let name = topic.name.to_string();
        for p in &topic.partitions {
            let target: Option<Vec<i32>> = p
                .replicas
                .as_ref()
                .map(|rs| rs.iter().map(|b| b.0).collect());
            let state = image.topic(&name).and_then(|t| {
                usize::try_from(p.partition_index)
                    .ok()
                    .and_then(|i| t.partitions.get(i))
            });
            let refusal = match (state, &target) {
                (None, _) => Some((
                    ResponseError::UnknownTopicOrPartition,
                    format!(
                        "partition {} of topic `{name}` does not exist",
                        p.partition_index
                    ),
                )),
                (Some(state), Some(target))
                    if !allow_rf_change && target.len() != original_replicas(state).len() =>
                {
                    Some((
                        ResponseError::InvalidReplicationFactor,
                        format!(
                            "the replication factor would change from {} to {}, and \
                             allow_replication_factor_change is false",
                            original_replicas(state).len(),
                            target.len()
                        ),
                    ))
                }
                _ => None,
            };
            if refusal.is_none() {
                wanted.push(ReassignRequest {
                    topic: name.clone(),
                    partition: p.partition_index,
                    target,
                });
            }
            checked.push((name.clone(), p.partition_index, refusal));
        }
    }
    let outcomes =
        match tokio::time::timeout(timeout, broker.metadata.reassign_partitions(&wanted)).await {
            Ok(outcomes) => outcomes,
            Err(_) => {
                return refuse(
                    ResponseError::RequestTimedOut,
                    format!(
                        "the reassignments were not all committed within timeout_ms {}",
                        request.timeout_ms
                    ),
                )
            }
        };
    let mut outcomes = outcomes.into_iter().zip(&wanted);
    let mut topics: Vec<ReassignableTopicResponse> = Vec::new();
    for (name, partition, refusal) in checked {
        let error = match refusal {
            Some(refused) => Some(refused),
            None => match outcomes.next() {
                Some((Ok(()), r)) => {
                    tracing::info!(topic = %r.topic, partition = r.partition, target = ?r.target,
                        "partition reassignment requested");
                    None
                }
                Some((Err(e), _)) => Some((crate::errors::reassignment_error(&e), e.to_string())),
                None => Some((ResponseError::UnknownServerError, "no outcome".into())),
            },
        };
        let mut result = ReassignablePartitionResponse::default().with_partition_index(partition);
        if let Some((e, why)) = error {
            broker.metrics.error(ALTER, e.code());
            result = result
                .with_error_code(e.code())
                .with_error_message(message(why));
        }
        match topics.last_mut() {
            Some(t) if t.name.as_str() == name => t.partitions.push(result),
            _ => topics.push(
                ReassignableTopicResponse::default()
                    .with_name(TopicName(str_bytes(&name)))
                    .with_partitions(vec![result]),
            ),
        }
    }
    response.with_responses(topics)
}

pub async fn list(
    broker: &Arc<Broker>,
    request: ListPartitionReassignmentsRequest,
    ctx: &RequestContext,
) -> ListPartitionReassignmentsResponse {
    if !ctx.may_cluster(broker, AclOperation::Describe) {
        let e = ResponseError::ClusterAuthorizationFailed;
        broker.metrics.error(LIST, e.code());
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(e.code())
            .with_error_message(message(
                "ListPartitionReassignments needs DESCRIBE on the cluster",
            ));
    }
    let image = broker.metadata.image();
    // Unknown topics and partitions are left out, as Kafka's controller does.
    let wanted: Vec<(String, Option<Vec<i32>>)> = match &request.topics {
        Some(topics) => topics
            .iter()
            .map(|t| (t.name.to_string(), Some(t.partition_indexes.clone())))
            .collect(),
        None => image.topics.keys().map(|n| (n.clone(), None)).collect(),
    };
    let ids = |v: &[i32]| v.iter().map(|b| BrokerId(*b)).collect::<Vec<_>>();
    let topics = wanted
        .into_iter()
        .filter_map(|(name, partitions)| {
            let topic = image.topic(&name)?;
            let indexes: Vec<i32> = partitions.unwrap_or_else(|| {
                (0..i32::try_from(topic.partitions.len()).unwrap_or(0)).collect()
            });
            let ongoing: Vec<OngoingPartitionReassignment> = indexes
                .into_iter()
                .filter_map(|i| {
                    let state = topic.partitions.get(usize::try_from(i).ok()?)?;
                    state.is_reassigning().then(|| {
                        OngoingPartitionReassignment::default()
                            .with_partition_index(i)
                            .with_replicas(ids(&state.replicas))
                            .with_adding_replicas(ids(&state.adding_replicas))
                            .with_removing_replicas(ids(&state.removing_replicas))
                    })
                })
                .collect();
            (!ongoing.is_empty()).then(|| {
                OngoingTopicReassignment::default()
                    .with_name(TopicName(str_bytes(&name)))
                    .with_partitions(ongoing)
            })
        })
        .collect();
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
