//! Produce: append each partition's batches to its log (all or nothing per partition).
//!
//! Only the leader accepts records (else NOT_LEADER_OR_FOLLOWER with the current leader, v10+).
//! With acks=all the in-sync replica set must have at least `min.insync.replicas` members before
//! the append (else NOT_ENOUGH_REPLICAS), and the response waits in a delayed-produce purgatory
//! until the high watermark passes each partition's last appended offset, or answers
//! REQUEST_TIMED_OUT for the partitions still waiting at the request's `timeout_ms`. On a single
//! node the high watermark moves with the append, so nothing waits.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, TopicName};

use std::time::Duration;

use futures::future::select_all;

use super::{message, str_bytes};
use crate::broker::Broker;
use crate::errors;
use crate::replica_manager::Partition;
use crate::topic_config;

/// A partition whose response waits for the high watermark: (topic index, partition index,
/// partition, offset the high watermark must reach, the topic's `min.insync.replicas`).
type Wait = (usize, usize, Arc<Partition>, i64, i32);

/// A produce request whose records are appended; its answer may still wait for the in-sync
/// replicas. The connection answers it later, so it can read and append the next request of
/// the same connection meanwhile (responses still go out in request order).
pub struct AppendedProduce {
    broker: Arc<Broker>,
    acks: i16,
    timeout: Duration,
    waits: Vec<Wait>,
    responses: Vec<TopicProduceResponse>,
}

impl AppendedProduce {
    /// True when the answer is known without waiting for replicas.
    pub fn is_complete(&self) -> bool {
        self.acks == 0 || self.waits.is_empty()
    }

    /// The response (`None` for acks=0), after the delayed-produce purgatory for acks=all.
    pub async fn respond(mut self) -> Option<ProduceResponse> {
        if self.acks == 0 {
            return None;
        }
        if !self.waits.is_empty() {
            let still_waiting = wait_for_high_watermark(&self.waits, self.timeout).await;
            // Kafka's rule: records the high watermark passed while the ISR had shrunk below
            // min.insync.replicas are in the log but not acknowledged as durable.
            let timed_out: std::collections::HashSet<(usize, usize)> =
                still_waiting.iter().map(|w| (w.0, w.1)).collect();
            for (t, p, partition, _, min_isr) in &self.waits {
                let isr = i32::try_from(partition.isr().len()).unwrap_or(i32::MAX);
                if timed_out.contains(&(*t, *p)) || isr >= *min_isr {
                    continue;
                }
                let Some(r) = self
                    .responses
                    .get_mut(*t)
                    .and_then(|topic| topic.partition_responses.get_mut(*p))
                else {
                    continue;
                };
                r.error_code = ResponseError::NotEnoughReplicasAfterAppend.code();
                r.error_message = message(format!(
                    "the records are in the log but the in-sync replica set shrank to {isr}, below min.insync.replicas {min_isr}"
                ));
                self.broker.metrics.error("Produce", r.error_code);
            }
            for (t, p, partition, _, _) in still_waiting {
                let Some(r) = self
                    .responses
                    .get_mut(t)
                    .and_then(|topic| topic.partition_responses.get_mut(p))
                else {
                    continue;
                };
                let (error, text) = if partition.is_leader() {
                    (
                        ResponseError::RequestTimedOut,
                        "the in-sync replicas did not acknowledge the records in time",
                    )
                } else {
                    (
                        ResponseError::NotLeaderOrFollower,
                        "leadership moved before the records were acknowledged",
                    )
                };
                r.error_code = error.code();
                r.error_message = message(text.to_string());
                self.broker.metrics.error("Produce", r.error_code);
            }
        }
        Some(ProduceResponse::default().with_responses(self.responses))
    }
}

pub async fn handle(
    broker: &Arc<Broker>,
    request: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    append(broker, request, version).respond().await
}

/// Appends every partition's batches (the part of a produce that must happen in request order).
pub fn append(broker: &Arc<Broker>, request: ProduceRequest, version: i16) -> AppendedProduce {
    let acks = request.acks;
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0));
    let mut waits: Vec<Wait> = Vec::new();
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
                    None if meta.is_some()
                        && broker.missing_partition_error(&name, data.index)
                            == ResponseError::NotLeaderOrFollower =>
                    {
                        fail(
                            ResponseError::NotLeaderOrFollower,
                            format!("this broker is not the leader of {name}-{}", data.index),
                        )
                    }
                    None => fail(
                        unknown_topic_error,
                        format!("{name}-{} is not hosted here", data.index),
                    ),
                    Some(p) if !p.is_leader() => fail(
                        ResponseError::NotLeaderOrFollower,
                        format!("this broker is not the leader of {}", p.tp),
                    ),
                    // Internal topics are written only by their coordinators, as in Kafka.
                    Some(_) if name == crate::group_store::OFFSETS_TOPIC => fail(
                        ResponseError::InvalidTopicException,
                        format!("Cannot append to internal topic {name}"),
                    ),
                    Some(p)
                        if acks == -1
                            && i32::try_from(p.isr().len()).unwrap_or(i32::MAX)
                                < min_isr.unwrap_or(1) =>
                    {
                        fail(
                            ResponseError::NotEnoughReplicas,
                            format!(
                                "min.insync.replicas is {} but the in-sync replica set has {} member(s)",
                                min_isr.unwrap_or(1),
                                p.isr().len()
                            ),
                        )
                    }
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
                            .and_then(|records| {
                                partition.append_then(&records, |p, info| {
                                    broker.remote_wal.on_leader_append(p, info)
                                })
                            })
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
                                if acks == -1 && partition.high_watermark() <= info.last_offset {
                                    waits.push((
                                        responses.len(),
                                        partition_responses.len(),
                                        partition.clone(),
                                        info.last_offset + 1,
                                        min_isr.unwrap_or(1),
                                    ));
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
                let (leader, epoch) = broker.leader_of(&name, data.index);
                partition_responses.push(
                    response.with_current_leader(
                        LeaderIdAndEpoch::default()
                            .with_leader_id(BrokerId(leader))
                            .with_leader_epoch(epoch),
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
    AppendedProduce {
        broker: broker.clone(),
        acks,
        timeout,
        waits,
        responses,
    }
}

/// The delayed-produce purgatory: waits until every partition's high watermark reaches its
/// target, its leadership is lost, or `timeout` passes. Returns the waits not completed.
async fn wait_for_high_watermark(waits: &[Wait], timeout: Duration) -> Vec<Wait> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut watchers: Vec<_> = waits.iter().map(|w| w.2.subscribe()).collect();
    loop {
        let pending: Vec<usize> = waits
            .iter()
            .enumerate()
            .filter(|(_, w)| w.2.high_watermark() < w.3 && w.2.is_leader())
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() {
            // Completed, or leadership lost (reported below as NOT_LEADER_OR_FOLLOWER).
            return waits
                .iter()
                .filter(|w| w.2.high_watermark() < w.3)
                .cloned()
                .collect();
        }
        if tokio::time::Instant::now() >= deadline {
            return pending.into_iter().map(|i| waits[i].clone()).collect();
        }
        let changed = select_all(
            watchers
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| pending.contains(i))
                .map(|(_, w)| Box::pin(w.changed())),
        );
        let _ = tokio::time::timeout_at(deadline, changed).await;
    }
}
