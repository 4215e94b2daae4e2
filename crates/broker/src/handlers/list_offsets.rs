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
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub fn handle(
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
                                EARLIEST | EARLIEST_LOCAL => Ok(Some((log.log_start_offset(), -1))),
                                // Nothing is tiered yet.
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
