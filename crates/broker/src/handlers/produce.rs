//! Produce: append each partition's batches to its log (all or nothing per partition).
//!
//! Only the leader accepts records (else NOT_LEADER_OR_FOLLOWER with the current leader, v10+).
//! With acks=all the in-sync replica set must have at least `min.insync.replicas` members before
//! the append (else NOT_ENOUGH_REPLICAS), and the response waits in a delayed-produce purgatory
//! until the high watermark passes each partition's last appended offset, or answers
//! REQUEST_TIMED_OUT for the partitions still waiting at the request's `timeout_ms`. If this
//! broker stops leading at the epoch of the append meanwhile, the answer is
//! NOT_LEADER_OR_FOLLOWER whatever its high watermark says later: as a follower it learns the new
//! leader's high watermark, over a log that may no longer hold the records. On a single node the
//! high watermark moves with the append, so nothing waits.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, LeaderIdAndEpoch, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{BrokerId, ProduceRequest, ProduceResponse, TopicName};

use std::time::Duration;

use bytes::Bytes;
use ferry_log::{AppendInfo, LogError};
use futures::future::select_all;

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;
use crate::errors;
use crate::replica_manager::{CommitStatus, Partition};
use ferry_authz::AclOperation;
use ferry_config::topic_config;

/// A partition whose response waits for the high watermark.
#[derive(Clone)]
struct Wait {
    /// Where its response is: topic index, partition index.
    topic: usize,
    index: usize,
    partition: Arc<Partition>,
    /// The leader epoch the records were appended at.
    leader_epoch: i32,
    /// The offset the high watermark must reach.
    end_offset: i64,
    /// The topic's `min.insync.replicas`.
    min_isr: i32,
}

impl Wait {
    fn status(&self) -> CommitStatus {
        self.partition
            .commit_status(self.leader_epoch, self.end_offset)
    }
}

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

    /// With acks=0, the partitions that refused their records and why, if any did. Kafka then
    /// closes the connection instead of staying silent, so that the producer refreshes its
    /// metadata (a NOT_LEADER_OR_FOLLOWER it never sees would send every later batch to the
    /// same wrong broker).
    pub fn acks_zero_failures(&self) -> Option<String> {
        if self.acks != 0 {
            return None;
        }
        let failures: Vec<String> = self
            .responses
            .iter()
            .flat_map(|topic| {
                topic
                    .partition_responses
                    .iter()
                    .filter(|p| p.error_code != 0)
                    .map(move |p| {
                        let error = ResponseError::try_from_code(p.error_code)
                            .map_or_else(|| p.error_code.to_string(), |e| format!("{e:?}"));
                        format!("{}-{}: {error}", topic.name.as_str(), p.index)
                    })
            })
            .collect();
        (!failures.is_empty()).then(|| failures.join(", "))
    }

    /// The response (`None` for acks=0), after the delayed-produce purgatory for acks=all.
    pub async fn respond(mut self) -> Option<ProduceResponse> {
        if self.acks == 0 {
            return None;
        }
        if !self.waits.is_empty() {
            let not_committed: std::collections::HashMap<(usize, usize), CommitStatus> =
                wait_for_high_watermark(&self.waits, self.timeout)
                    .await
                    .into_iter()
                    .map(|(w, status)| ((w.topic, w.index), status))
                    .collect();
            for w in &self.waits {
                let status = not_committed
                    .get(&(w.topic, w.index))
                    .copied()
                    .unwrap_or(CommitStatus::Committed);
                let (error, text) = match status {
                    CommitStatus::Pending => (
                        ResponseError::RequestTimedOut,
                        "the in-sync replicas did not acknowledge the records in time".to_string(),
                    ),
                    CommitStatus::LeadershipLost => (
                        ResponseError::NotLeaderOrFollower,
                        "leadership moved before the records were acknowledged".to_string(),
                    ),
                    CommitStatus::Committed => {
                        // Kafka's rule: records the high watermark passed while the ISR had
                        // shrunk below min.insync.replicas are in the log but not acknowledged
                        // as durable.
                        let isr = i32::try_from(w.partition.isr().len()).unwrap_or(i32::MAX);
                        if isr >= w.min_isr {
                            continue;
                        }
                        (
                            ResponseError::NotEnoughReplicasAfterAppend,
                            format!(
                                "the records are in the log but the in-sync replica set shrank to {isr}, below min.insync.replicas {}",
                                w.min_isr
                            ),
                        )
                    }
                };
                let Some(r) = self
                    .responses
                    .get_mut(w.topic)
                    .and_then(|topic| topic.partition_responses.get_mut(w.index))
                else {
                    continue;
                };
                r.error_code = error.code();
                r.error_message = message(text);
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
    ctx: &RequestContext,
) -> Option<ProduceResponse> {
    let refused = super::txn_verify::verify(broker, &request).await;
    append(broker, request, version, &refused, ctx)
        .respond()
        .await
}

/// Kafka's request-level checks of a produce: WRITE on its transactional id, else, for
/// idempotent records, IDEMPOTENT_WRITE on the cluster or WRITE on some topic. The error every
/// partition then answers, if denied.
fn request_denied(
    broker: &Broker,
    request: &ProduceRequest,
    ctx: &RequestContext,
) -> Option<ResponseError> {
    if !broker.acls.is_enabled() {
        return None;
    }
    if let Some(id) = &request.transactional_id {
        return (!ctx.may_txn(broker, AclOperation::Write, id))
            .then_some(ResponseError::TransactionalIdAuthorizationFailed);
    }
    let idempotent = request.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|p| {
            p.records
                .as_ref()
                .and_then(|r| ferry_log::batch::BatchHeader::parse(r))
                .is_some_and(|h| h.producer_id >= 0)
        })
    });
    (idempotent && !ctx.may_idempotent_write(broker))
        .then_some(ResponseError::ClusterAuthorizationFailed)
}

/// Appends every partition's batches (the part of a produce that must happen in request order),
/// except those of `refused` partitions (a transaction's verification), answered with their
/// error.
pub fn append(
    broker: &Arc<Broker>,
    request: ProduceRequest,
    version: i16,
    refused: &super::txn_verify::Refused,
    ctx: &RequestContext,
) -> AppendedProduce {
    let request_denied = request_denied(broker, &request, ctx);
    let acks = request.acks;
    let timeout = Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0));
    let transactional = request.transactional_id.is_some();
    let mut waits: Vec<Wait> = Vec::new();
    let mut responses = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let target = TopicTarget::resolve(broker, &topic, version);
        let mut partition_responses = Vec::with_capacity(topic.partition_data.len());
        let denied = request_denied.or_else(|| {
            (!target.name.is_empty() && !ctx.may_topic(broker, AclOperation::Write, &target.name))
                .then_some(super::TOPIC_DENIED)
        });
        for data in topic.partition_data {
            if let Some(e) = denied {
                broker.metrics.error("Produce", e.code());
                partition_responses.push(refused_partition(data.index, e, None));
                continue;
            }
            let append = PartitionAppend {
                broker,
                topic: &target,
                acks,
                transactional,
                // Almost always empty: no key is built then (a String per partition).
                refused: (!refused.is_empty())
                    .then(|| refused.get(&(target.name.clone(), data.index)).copied())
                    .flatten(),
                at: (responses.len(), partition_responses.len()),
            };
            let (response, wait) = append.answer(data);
            waits.extend(wait);
            partition_responses.push(response);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(TopicName(str_bytes(&target.name)))
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

/// A partition's answer before anything is known (no offsets, no error).
/// The records a refusal names one by one (Produce v8+ `record_errors`; older versions leave
/// the field out, and their clients fail the whole batch).
fn record_errors(e: &LogError) -> Vec<BatchIndexAndErrorMessage> {
    match e {
        LogError::RecordsRejected(records) | LogError::TimestampsRejected(records) => records
            .iter()
            .map(|r| {
                BatchIndexAndErrorMessage::default()
                    .with_batch_index(r.batch_index)
                    .with_batch_index_error_message(message(r.message.clone()))
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn partition_base(index: i32) -> PartitionProduceResponse {
    PartitionProduceResponse::default()
        .with_index(index)
        .with_base_offset(-1)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1)
}

/// A partition's answer when its records are refused with `e`.
fn refused_partition(
    index: i32,
    e: ResponseError,
    msg: Option<String>,
) -> PartitionProduceResponse {
    partition_base(index)
        .with_error_code(e.code())
        .with_error_message(msg.and_then(message))
}

/// What a produce needs to know of one topic, resolved once for all its partitions.
struct TopicTarget {
    /// Empty when a v13+ request names an unknown topic id.
    name: String,
    /// The topic is in the metadata.
    known: bool,
    /// The topic's `min.insync.replicas` (1 for an unknown topic).
    min_isr: i32,
    /// Broker-side compression: `None` keeps the producer's codec.
    codec: Option<ferry_log::recompress::TargetCodec>,
    /// What a partition of an unknown topic answers: v13+ names topics by id.
    unknown_topic_error: ResponseError,
}

impl TopicTarget {
    /// Looks `topic` up in the metadata: by id from v13, else by name.
    fn resolve(broker: &Broker, topic: &TopicProduceData, version: i16) -> Self {
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
                .and_then(|(v, _)| v.parse::<i32>().ok())
                .unwrap_or(1)
        });
        let codec = meta.as_ref().and_then(|m| {
            use ferry_log::recompress::{target_codec, TargetCodec};
            let effective = |key| topic_config::effective(&broker.config, &m.configs, key);
            let compression = effective("compression.type").and_then(|(v, _)| target_codec(&v))?;
            let level = TargetCodec::level_key(compression)
                .and_then(effective)
                .and_then(|(v, _)| v.parse::<i32>().ok())
                .unwrap_or_else(|| TargetCodec::default_level(compression));
            Some(TargetCodec { compression, level })
        });
        let unknown_topic_error = if version >= 13 {
            ResponseError::UnknownTopicId
        } else {
            ResponseError::UnknownTopicOrPartition
        };
        TopicTarget {
            name,
            known: meta.is_some(),
            min_isr: min_isr.unwrap_or(1),
            codec,
            unknown_topic_error,
        }
    }
}

/// One partition's part of a produce request.
struct PartitionAppend<'a> {
    broker: &'a Arc<Broker>,
    topic: &'a TopicTarget,
    acks: i16,
    /// The request has a `transactional_id`.
    transactional: bool,
    /// The transaction coordinator's refusal of this partition (KIP-890), if any.
    refused: Option<ResponseError>,
    /// Where its response is: topic index, partition index.
    at: (usize, usize),
}

impl PartitionAppend<'_> {
    /// Appends `data`'s records if the partition takes them, and answers: the partition's
    /// response, and the acks=all wait it needs, if any.
    fn answer(&self, data: PartitionProduceData) -> (PartitionProduceResponse, Option<Wait>) {
        let broker = self.broker;
        let base = partition_base(data.index);
        let fail = |e: ResponseError, msg: String| refused_partition(data.index, e, Some(msg));
        let (response, wait) = match self.writable_partition(data.index) {
            Err((e, msg)) => (fail(e, msg), None),
            Ok(partition) => match data.records {
                None => (
                    fail(
                        ResponseError::CorruptMessage,
                        "produce request without records".into(),
                    ),
                    None,
                ),
                Some(records) => match self.refusal(&records) {
                    Some((e, msg)) => (fail(e, msg), None),
                    None => self.append_answer(&partition, records, base.clone()),
                },
            },
        };
        broker.metrics.error("Produce", response.error_code);
        if response.error_code != ResponseError::NotLeaderOrFollower.code() {
            return (response, wait);
        }
        let (leader, epoch) = broker.leader_of(&self.topic.name, data.index);
        let response = response.with_current_leader(
            LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(leader))
                .with_leader_epoch(epoch),
        );
        (response, wait)
    }

    /// Appends `records` to `partition` (led here) and answers: the offsets, or the log's
    /// refusal; with the acks=all wait, if any.
    fn append_answer(
        &self,
        partition: &Arc<Partition>,
        records: Bytes,
        base: PartitionProduceResponse,
    ) -> (PartitionProduceResponse, Option<Wait>) {
        match self.append_records(partition, records) {
            Ok(info) => {
                let wait = self.appended(partition, &info);
                let response = base
                    .with_base_offset(info.first_offset)
                    .with_log_append_time_ms(info.log_append_time)
                    .with_log_start_offset(info.log_start_offset);
                (response, wait)
            }
            Err(e) => {
                let code = errors::log_error(&e);
                if e.is_disk_full() {
                    // The log dir said so once; the ferry_log_dir_full metric says it meanwhile.
                    tracing::debug!(partition = %partition.tp, error = %e, "append refused: log dir full");
                } else if code == ResponseError::KafkaStorageError {
                    tracing::error!(partition = %partition.tp, error = %e, "append failed");
                } else {
                    tracing::debug!(partition = %partition.tp, error = %e, "append refused");
                }
                let response = base
                    .with_error_code(code.code())
                    .with_error_message(message(e.to_string()))
                    .with_record_errors(record_errors(&e));
                (response, None)
            }
        }
    }

    /// Why this partition's records are refused before the append, if they are: the
    /// coordinator said the partition is not in the producer's transaction (KIP-890), or the
    /// records are transactional in a request without a transactional id (Kafka's rule: no
    /// authorization for them can be checked then).
    fn refusal(&self, records: &[u8]) -> Option<(ResponseError, String)> {
        if let Some(e) = self.refused {
            let msg = "the partition is not in the producer's ongoing transaction";
            return Some((e, msg.into()));
        }
        if !self.transactional && has_transactional_batch(records) {
            let msg = "transactional records in a produce request without a transactional id";
            return Some((
                ResponseError::TransactionalIdAuthorizationFailed,
                msg.into(),
            ));
        }
        None
    }

    /// The partition `index` whose leader takes this request's records, or why it is refused
    /// (error and message), checked in this order.
    fn writable_partition(&self, index: i32) -> Result<Arc<Partition>, (ResponseError, String)> {
        let broker = self.broker;
        let acks = self.acks;
        let TopicTarget {
            name,
            known,
            min_isr,
            unknown_topic_error,
            ..
        } = self.topic;
        if !matches!(acks, -1..=1) {
            return Err((
                ResponseError::InvalidRequiredAcks,
                format!("acks must be -1, 0 or 1, got {acks}"),
            ));
        }
        match broker.replicas.partition_of(name, index) {
            None if broker
                .replicas
                .is_offline(&ferry_common::TopicPartition::new(name.as_str(), index)) =>
            {
                Err((
                    ResponseError::KafkaStorageError,
                    format!("{name}-{index} is in a failed log dir of this broker"),
                ))
            }
            None if *known
                && broker.missing_partition_error(name, index)
                    == ResponseError::NotLeaderOrFollower =>
            {
                Err((
                    ResponseError::NotLeaderOrFollower,
                    format!("this broker is not the leader of {name}-{index}"),
                ))
            }
            None => Err((
                *unknown_topic_error,
                format!("{name}-{index} is not hosted here"),
            )),
            Some(p) if !p.is_leader() => Err((
                ResponseError::NotLeaderOrFollower,
                format!("this broker is not the leader of {}", p.tp),
            )),
            // Internal topics are written only by their coordinators, as in Kafka.
            Some(_) if name == crate::group_store::OFFSETS_TOPIC => Err((
                ResponseError::InvalidTopicException,
                format!("Cannot append to internal topic {name}"),
            )),
            Some(p)
                if acks == -1 && i32::try_from(p.isr().len()).unwrap_or(i32::MAX) < *min_isr =>
            {
                Err((
                    ResponseError::NotEnoughReplicas,
                    format!(
                        "min.insync.replicas is {} but the in-sync replica set has {} member(s)",
                        min_isr,
                        p.isr().len()
                    ),
                ))
            }
            Some(partition) => Ok(partition),
        }
    }

    /// Recompresses `records` for the topic's `compression.type`, if it asks for a codec, and
    /// appends them.
    fn append_records(
        &self,
        partition: &Partition,
        records: Bytes,
    ) -> Result<AppendInfo, LogError> {
        self.topic
            .codec
            .map(|c| ferry_log::recompress::recompress(&records, c))
            .transpose()
            .map(|r| r.flatten().unwrap_or(records))
            .map_err(|e| {
                LogError::CorruptMessage(format!("cannot recompress for compression.type: {e}"))
            })
            .and_then(|records| {
                partition.append_then(&records, |p, info| {
                    self.broker.replication.on_leader_append(p, info)
                })
            })
    }

    /// Counts the appended records, and returns the wait for the in-sync replicas an acks=all
    /// answer needs while they are not committed. The wait is for the epoch the batches were
    /// stamped with: if it moves on before they are committed, the wait reports lost
    /// leadership (a retry), never a false ack.
    fn appended(&self, partition: &Arc<Partition>, info: &AppendInfo) -> Option<Wait> {
        let broker = self.broker;
        if !info.duplicate {
            let name = &self.topic.name;
            broker
                .metrics
                .topic(&broker.metrics.messages_in, name, info.record_count);
            broker
                .metrics
                .topic(&broker.metrics.bytes_in, name, info.bytes as u64);
        }
        let (topic, index) = self.at;
        let wait = Wait {
            topic,
            index,
            partition: partition.clone(),
            leader_epoch: info.leader_epoch,
            end_offset: info.last_offset + 1,
            min_isr: self.topic.min_isr,
        };
        (self.acks == -1 && wait.status() != CommitStatus::Committed).then_some(wait)
    }
}

/// The delayed-produce purgatory: waits until every partition's records are committed, its
/// leadership at the epoch of the append is lost, or `timeout` passes. Returns the waits not
/// committed, each with why: still pending at the deadline, or leadership lost.
async fn wait_for_high_watermark(waits: &[Wait], timeout: Duration) -> Vec<(Wait, CommitStatus)> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut watchers: Vec<_> = waits.iter().map(|w| w.partition.subscribe()).collect();
    // A wait is decided once: committed stays committed, lost stays lost, even if the
    // partition's state moves on before the others are decided.
    let mut decided: Vec<Option<CommitStatus>> = vec![None; waits.len()];
    loop {
        for (d, w) in decided.iter_mut().zip(waits) {
            if d.is_none() {
                match w.status() {
                    CommitStatus::Pending => {}
                    s => *d = Some(s),
                }
            }
        }
        let pending: Vec<usize> = decided
            .iter()
            .enumerate()
            .filter(|(_, d)| d.is_none())
            .map(|(i, _)| i)
            .collect();
        if pending.is_empty() || tokio::time::Instant::now() >= deadline {
            return waits
                .iter()
                .zip(decided)
                .filter_map(|(w, d)| match d.unwrap_or(CommitStatus::Pending) {
                    CommitStatus::Committed => None,
                    s => Some((w.clone(), s)),
                })
                .collect();
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

/// Some whole batch of `records` has the transactional bit.
fn has_transactional_batch(records: &[u8]) -> bool {
    ferry_log::batch::whole_batches(records).any(|span| {
        records
            .get(span.bytes)
            .and_then(ferry_log::batch::BatchHeader::parse)
            .is_some_and(|h| h.is_transactional())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote_wal::test_support::{batch, replicas, topic};

    type Waiting = tokio::task::JoinHandle<Vec<(Wait, CommitStatus)>>;

    /// Broker 1 leads `t-0` at epoch 0 (ISR 1, 2, 3), appended three records, and waits for
    /// them in the purgatory.
    fn leader_waiting_on_three_records(
        dir: &std::path::Path,
    ) -> (
        crate::replica_manager::ReplicaManager,
        Arc<Partition>,
        Waiting,
    ) {
        let rm = replicas(dir, 1, &topic(1, 0));
        let p = rm.partition_of("t", 0).unwrap();
        let info = p.append(&batch(3)).unwrap();
        let wait = Wait {
            topic: 0,
            index: 0,
            partition: p.clone(),
            leader_epoch: 0,
            end_offset: info.last_offset + 1,
            min_isr: 2,
        };
        let waiting =
            tokio::spawn(
                async move { wait_for_high_watermark(&[wait], Duration::from_secs(30)).await },
            );
        (rm, p, waiting)
    }

    /// Leader 1 appends at epoch 0 and waits for followers that never fetch. Leadership moves
    /// to 2 (which lacks the records); as its follower, 1 truncates and takes 2's records and
    /// high watermark, which passes the waiting offsets. The wait must end as lost leadership
    /// (NOT_LEADER_OR_FOLLOWER, so the producer retries), not as an acknowledgement.
    #[tokio::test]
    async fn a_wait_whose_leadership_moves_is_never_acknowledged() {
        let dir = tempfile::tempdir().unwrap();
        let (rm, p, waiting) = leader_waiting_on_three_records(dir.path());
        tokio::task::yield_now().await;

        rm.ensure_topic(&topic(2, 1), ferry_log::LogConfig::default())
            .unwrap();
        p.truncate_to(0).unwrap();
        p.append_as_follower(&batch(5)).unwrap();
        p.update_follower_high_watermark(5);
        assert!(p.high_watermark() >= 3, "the new leader's high watermark");

        let left = waiting.await.unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].1, CommitStatus::LeadershipLost);
    }

    #[tokio::test]
    async fn a_wait_ends_committed_when_the_isr_holds_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let (_rm, p, waiting) = leader_waiting_on_three_records(dir.path());
        // The ISR is 1, 2 and 3.
        p.record_follower_fetch(2, 3);
        p.record_follower_fetch(3, 3);
        assert!(waiting.await.unwrap().is_empty(), "committed");
    }
}
