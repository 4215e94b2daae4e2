//! Produce: append each partition's batches to its log (all or nothing per partition).
//!
//! On a single node the in-sync replica set is this broker alone, so acks=all is satisfied as
//! soon as the append returns, unless `min.insync.replicas` asks for more replicas than that.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, TopicName};

use super::{message, str_bytes};
use crate::broker::Broker;
use crate::errors;
use crate::topic_config;

pub fn handle(
    broker: &Arc<Broker>,
    request: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = request.acks;
    let mut responses = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        // v13+ names topics by id.
        let (name, meta) = if version >= 13 {
            match broker.metadata.topic_by_id(topic.topic_id) {
                Some(m) => (m.name.clone(), Some(m)),
                None => (String::new(), None),
            }
        } else {
            (topic.name.to_string(), broker.metadata.topic(&topic.name))
        };
        let min_isr = meta.as_ref().map(|m| {
            topic_config::effective(&broker.config, &m.configs, "min.insync.replicas")
                .and_then(|(v, _, _)| v.parse::<i32>().ok())
                .unwrap_or(1)
        });
        // Broker-side compression: None keeps the producer's codec.
        let codec = meta.as_ref().and_then(|m| {
            topic_config::effective(&broker.config, &m.configs, "compression.type")
                .and_then(|(v, _, _)| crate::recompress::target_codec(&v))
        });
        let unknown_topic_error = if version >= 13 {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        let mut partition_responses = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let base = PartitionProduceResponse::default()
                .with_index(data.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            let fail = |e: ResponseError, msg: String| {
                base.clone()
                    .with_error_code(e.code())
                    .with_error_message(message(msg))
            };
            let response = if !matches!(acks, -1..=1) {
                fail(
                    ResponseError::InvalidRequiredAcks,
                    format!("acks must be -1, 0 or 1, got {acks}"),
                )
            } else if request.transactional_id.is_some() {
                fail(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactions are not served by this broker yet".into(),
                )
            } else {
                match broker.replicas.partition_of(&name, data.index) {
                    None => fail(
                        unknown_topic_error,
                        format!("{name}-{} is not hosted here", data.index),
                    ),
                    // Internal topics are written only by their coordinators, as in Kafka.
                    Some(_) if name == crate::group_store::OFFSETS_TOPIC => fail(
                        ResponseError::InvalidTopicException,
                        format!("Cannot append to internal topic {name}"),
                    ),
                    Some(_) if acks == -1 && min_isr.unwrap_or(1) > 1 => fail(
                        ResponseError::NotEnoughReplicas,
                        format!(
                            "min.insync.replicas is {} but the in-sync replica set has 1 member",
                            min_isr.unwrap_or(1)
                        ),
                    ),
                    Some(partition) => match data.records {
                        None => fail(
                            ResponseError::CorruptMessage,
                            "produce request without records".into(),
                        ),
                        Some(records) => match codec
                            .map(|c| crate::recompress::recompress(&records, c))
                            .transpose()
                            .map(|r| r.flatten().unwrap_or(records))
                            .map_err(|e| {
                                ferry_log::LogError::CorruptMessage(format!(
                                    "cannot recompress for compression.type: {e}"
                                ))
                            })
                            .and_then(|records| partition.append(&records))
                        {
                            Ok(info) => {
                                if !info.duplicate {
                                    broker.metrics.topic(
                                        &broker.metrics.messages_in,
                                        &name,
                                        info.record_count,
                                    );
                                    broker.metrics.topic(
                                        &broker.metrics.bytes_in,
                                        &name,
                                        info.bytes as u64,
                                    );
                                }
                                base.clone()
                                    .with_base_offset(info.first_offset)
                                    .with_log_append_time_ms(info.log_append_time)
                                    .with_log_start_offset(info.log_start_offset)
                            }
                            Err(e) => {
                                let code = errors::log_error(&e);
                                if code == ResponseError::KafkaStorageError {
                                    tracing::error!(partition = %partition.tp, error = %e, "append failed");
                                } else {
                                    tracing::debug!(partition = %partition.tp, error = %e, "append refused");
                                }
                                fail(code, e.to_string())
                            }
                        },
                    },
                }
            };
            broker.metrics.error("Produce", response.error_code);
            if response.error_code == ResponseError::NotLeaderOrFollower.code() {
                partition_responses.push(
                    response.with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(-1))
                            .with_leader_epoch(-1),
                    ),
                );
            } else {
                partition_responses.push(response);
            }
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(TopicName(str_bytes(&name)))
                .with_topic_id(topic.topic_id)
                .with_partition_responses(partition_responses),
        );
    }
    if acks == 0 {
        return None;
    }
    Some(ProduceResponse::default().with_responses(responses))
}
