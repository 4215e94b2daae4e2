//! ListOffsets: earliest, latest, by timestamp, max timestamp (KIP-734), earliest local (KIP-405).

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::{RequestContext, TOPIC_DENIED};
use crate::broker::Broker;
use crate::errors;
use ferry_authz::AclOperation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
/// ListOffsets EARLIEST_LOCAL_TIMESTAMP: the local log start (KIP-405).
pub(crate) const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
    ctx: &RequestContext,
) -> ListOffsetsResponse {
    let asked: Vec<(String, i32, i64)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index, p.timestamp))
        })
        .collect();
    let mut response = answer_locally(broker, request, version, ctx);
    if let Some(tier) = &broker.tier {
        with_the_tier(broker, tier, &asked, &mut response).await;
    }
    response
}

/// The tier's part of the answers for tiered partitions (KIP-405): the earliest offset is the
/// tier's first, -5 (KIP-1005) the last offset it holds, and a timestamp is looked for in the
/// tier's segments below the local log start before the local log.
async fn with_the_tier(
    broker: &Broker,
    tier: &crate::tier::Tier,
    asked: &[(String, i32, i64)],
    response: &mut ListOffsetsResponse,
) {
    for topic in &mut response.topics {
        for p in &mut topic.partitions {
            if p.error_code != 0 {
                continue;
            }
            let Some((part, timestamp)) =
                super::tiered_partition(broker, asked, topic.name.as_str(), p.partition_index)
            else {
                continue;
            };
            if !tier.is_ready()
                && (timestamp >= 0 || timestamp == EARLIEST || timestamp == LATEST_TIERED)
            {
                p.error_code = ResponseError::KafkaStorageError.code();
                p.offset = -1;
                continue;
            }
            match timestamp {
                EARLIEST => p.offset = tier.log_start_offset(&part),
                LATEST_TIERED => p.offset = tier.highest_copied_offset(&part),
                ts if ts >= 0 => match tier.offset_for_timestamp(&part, ts).await {
                    Ok(Some((offset, found))) => {
                        p.offset = offset;
                        p.timestamp = found;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(partition = %part.tp, error = %e,
                            "a timestamp lookup in the long-term tier failed");
                        p.error_code = ResponseError::KafkaStorageError.code();
                    }
                },
                _ => {}
            }
        }
    }
}

fn answer_locally(
    broker: &Arc<Broker>,
    request: ListOffsetsRequest,
    version: i16,
    ctx: &RequestContext,
) -> ListOffsetsResponse {
    let replica_id = request.replica_id.0;
    let read_committed = request.isolation_level == 1;
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let denied = !ctx.may_topic(broker, AclOperation::Describe, &topic.name);
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    let base = ListOffsetsPartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1);
                    let result = match broker.replicas.partition_of(&topic.name, p.partition_index)
                    {
                        _ if denied => base.with_error_code(TOPIC_DENIED.code()),
                        None => base.with_error_code(
                            broker
                                .missing_partition_error(&topic.name, p.partition_index)
                                .code(),
                        ),
                        // Consumers' ListOffsets go to the leader (replica_id -1).
                        Some(part) if !part.is_leader() && replica_id < 0 => {
                            base.with_error_code(ResponseError::NotLeaderOrFollower.code())
                        }
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
                        Some(part) => {
                            let log = &part.log;
                            let epoch_at = |offset: i64| {
                                if version < 4 {
                                    return -1;
                                }
                                if p.timestamp == EARLIEST_LOCAL {
                                    // The epoch of the local log start (a follower starting
                                    // from the tier looks up the segment below it).
                                    return log
                                        .epoch_entries()
                                        .iter()
                                        .take_while(|(_, start)| *start <= offset)
                                        .last()
                                        .map_or(-1, |(epoch, _)| *epoch);
                                }
                                log.end_offset_for_epoch(part.leader_epoch())
                                    .map(|_| part.leader_epoch())
                                    .filter(|_| offset >= 0)
                                    .unwrap_or(-1)
                            };
                            let found: Result<Option<(i64, i64)>, ResponseError> = match p.timestamp
                            {
                                // Latest is the high watermark, or the last stable offset
                                // for a read_committed consumer (isolation level 1).
                                LATEST if read_committed => {
                                    Ok(Some((part.last_stable_offset(), -1)))
                                }
                                LATEST => Ok(Some((part.high_watermark(), -1))),
                                // The tier's part, for tiered topics: `with_the_tier`.
                                EARLIEST | EARLIEST_LOCAL => Ok(Some((log.log_start_offset(), -1))),
                                LATEST_TIERED => Ok(Some((-1, -1))),
                                MAX_TIMESTAMP => log.max_timestamp().map_err(|e| {
                                    broker.replicas.failures().report(log, &e);
                                    errors::log_error(&e)
                                }),
                                ts if ts >= 0 => log.offset_for_timestamp(ts).map_err(|e| {
                                    broker.replicas.failures().report(log, &e);
                                    errors::log_error(&e)
                                }),
                                _ => Err(ResponseError::InvalidRequest),
                            };
                            match found {
                                Ok(Some((offset, timestamp))) => base
                                    .with_offset(offset)
                                    .with_timestamp(timestamp)
                                    .with_leader_epoch(epoch_at(offset)),
                                // No record at or after that timestamp: offset -1, as Kafka.
                                Ok(None) => base,
                                Err(e) => base.with_error_code(e.code()),
                            }
                        }
                    };
                    broker.metrics.error("ListOffsets", result.error_code);
                    result
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}
