//! DeleteRecords, OffsetForLeaderEpoch and InitProducerId.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, InitProducerIdRequest, InitProducerIdResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, ProducerId,
};

use super::{RequestContext, TOPIC_DENIED};
use crate::broker::Broker;
use crate::errors;
use ferry_authz::AclOperation;

/// DeleteRecords with offset -1 means "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub async fn delete_records(
    broker: &Arc<Broker>,
    request: DeleteRecordsRequest,
    ctx: &RequestContext,
) -> DeleteRecordsResponse {
    let asked: Vec<(String, i32, i64)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index, p.offset))
        })
        .collect();
    let mut response = delete_locally(broker, request, ctx);
    if let Some(tier) = &broker.tier {
        delete_in_the_tier(broker, tier, &asked, &mut response).await;
    }
    response
}

/// DeleteRecords on tiered partitions (KIP-405): the partition's log start moves in the tier
/// too, so records below it are not served from there either; the low watermark is the
/// partition's new log start.
async fn delete_in_the_tier(
    broker: &Broker,
    tier: &crate::tier::Tier,
    asked: &[(String, i32, i64)],
    response: &mut DeleteRecordsResponse,
) {
    for topic in &mut response.topics {
        for p in &mut topic.partitions {
            if p.error_code != 0 {
                continue;
            }
            let Some((part, offset)) =
                super::tiered_partition(broker, asked, topic.name.as_str(), p.partition_index)
            else {
                continue;
            };
            let target = if offset == HIGH_WATERMARK {
                part.high_watermark()
            } else {
                offset
            };
            match tier.delete_records_before(&part, target).await {
                Ok(low) => p.low_watermark = low,
                Err(e) => {
                    tracing::warn!(partition = %part.tp, error = %e,
                        "moving the log start offset in the long-term tier failed");
                    p.error_code = ResponseError::KafkaStorageError.code();
                }
            }
        }
    }
}

fn delete_locally(
    broker: &Arc<Broker>,
    request: DeleteRecordsRequest,
    ctx: &RequestContext,
) -> DeleteRecordsResponse {
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let denied = !ctx.may_topic(broker, AclOperation::Delete, &topic.name);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let base = DeleteRecordsPartitionResult::default()
                        .with_partition_index(p.partition_index)
                        .with_low_watermark(-1);
                    let r = match broker.replicas.partition_of(&topic.name, p.partition_index) {
                        _ if denied => base.with_error_code(TOPIC_DENIED.code()),
                        None => base.with_error_code(
                            broker
                                .missing_partition_error(&topic.name, p.partition_index)
                                .code(),
                        ),
                        Some(part) if !part.is_leader() => {
                            base.with_error_code(ResponseError::NotLeaderOrFollower.code())
                        }
                        // A tiered partition's start is not known before the tier's
                        // metadata is read: nothing is deleted, the client retries.
                        Some(part)
                            if part.log.is_tiered()
                                && broker.tier.as_ref().is_some_and(|t| !t.is_ready()) =>
                        {
                            base.with_error_code(ResponseError::KafkaStorageError.code())
                        }
                        Some(part) => {
                            let hw = part.high_watermark();
                            let target = if p.offset == HIGH_WATERMARK {
                                hw
                            } else {
                                p.offset
                            };
                            if target < 0 || target > hw {
                                base.with_error_code(ResponseError::OffsetOutOfRange.code())
                            } else {
                                match part.log.delete_records_before(target) {
                                    Ok(low) => base.with_low_watermark(low),
                                    Err(e) => {
                                        broker.replicas.failures().report(&part.log, &e);
                                        base.with_error_code(errors::log_error(&e).code())
                                    }
                                }
                            }
                        }
                    };
                    broker.metrics.error("DeleteRecords", r.error_code);
                    r
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

pub fn offset_for_leader_epoch(
    broker: &Arc<Broker>,
    request: OffsetForLeaderEpochRequest,
    ctx: &RequestContext,
) -> OffsetForLeaderEpochResponse {
    // As Kafka: CLUSTER_ACTION on the cluster (followers) allows every topic, else DESCRIBE.
    let cluster_action = ctx.may_cluster(broker, AclOperation::ClusterAction);
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let denied =
                !cluster_action && !ctx.may_topic(broker, AclOperation::Describe, &topic.topic);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let base = EpochEndOffset::default()
                        .with_partition(p.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let r = match broker.replicas.partition_of(&topic.topic, p.partition) {
                        _ if denied => base.with_error_code(TOPIC_DENIED.code()),
                        None => base.with_error_code(ResponseError::UnknownTopicOrPartition.code()),
                        Some(part)
                            if errors::leader_epoch_error(
                                p.current_leader_epoch,
                                part.leader_epoch(),
                            )
                            .is_some() =>
                        {
                            let e = errors::leader_epoch_error(
                                p.current_leader_epoch,
                                part.leader_epoch(),
                            );
                            base.with_error_code(errors::code(e))
                        }
                        Some(part) => match part.log.end_offset_for_epoch(p.leader_epoch) {
                            Some((epoch, end)) => {
                                base.with_leader_epoch(epoch).with_end_offset(end)
                            }
                            None => base,
                        },
                    };
                    broker.metrics.error("OffsetForLeaderEpoch", r.error_code);
                    r
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}

/// Idempotent producers get a fresh producer id at epoch 0. Transactions need a transaction
/// coordinator, which ferry does not run yet.
pub fn init_producer_id(
    broker: &Arc<Broker>,
    request: InitProducerIdRequest,
    ctx: &RequestContext,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1)
        .with_ongoing_txn_producer_id(ProducerId(-1))
        .with_ongoing_txn_producer_epoch(-1);
    let response = if request.transactional_id.is_some() {
        response.with_error_code(ResponseError::NotCoordinator.code())
    } else if !ctx.may_idempotent_write(broker) {
        response.with_error_code(ResponseError::ClusterAuthorizationFailed.code())
    } else {
        match broker.metadata.allocate_producer_id() {
            Ok(id) => response
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(0),
            Err(e) => {
                tracing::error!(error = %e, "cannot allocate a producer id");
                response.with_error_code(ResponseError::KafkaStorageError.code())
            }
        }
    };
    broker.metrics.error("InitProducerId", response.error_code);
    response
}
