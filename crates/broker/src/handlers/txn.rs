//! The transaction APIs: the coordinator's (InitProducerId with a transactional id,
//! AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions),
//! answered by ferry-txn once `__transaction_state` exists; TxnOffsetCommit, answered by the
//! group coordinator; WriteTxnMarkers, which a coordinator sends to partition leaders; and
//! DescribeProducers, a partition leader's producer state.

use std::sync::Arc;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsResponse,
    EndTxnResponse, ListTransactionsResponse, ProducerId, RequestKind, ResponseKind,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};

use super::{RequestContext, Routed};
use crate::broker::Broker;

/// Answers the transaction APIs; hands any other body back.
pub async fn transaction_request(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
    ctx: &RequestContext,
) -> Routed {
    let (body, denied) = match super::txn_acl::check(broker, ctx, body, v) {
        Ok(checked) => checked,
        Err(refused) => return Routed::Answered(Some(refused)),
    };
    let response = match body {
        RequestKind::InitProducerId(r) if r.transactional_id.is_some() => {
            let response = match broker.txn_coordinator() {
                Ok(t) => t.init_producer_id(r, v).await,
                Err(e) => kafka_protocol::messages::InitProducerIdResponse::default()
                    .with_producer_id(kafka_protocol::messages::ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_error_code(e.code()),
            };
            broker.metrics.error("InitProducerId", response.error_code);
            ResponseKind::InitProducerId(response)
        }
        RequestKind::AddPartitionsToTxn(r) => match broker.txn_coordinator() {
            Ok(t) => ResponseKind::AddPartitionsToTxn(t.add_partitions_to_txn(r, v).await),
            Err(e) => ResponseKind::AddPartitionsToTxn(add_partitions_error(&r, v, e)),
        },
        RequestKind::AddOffsetsToTxn(r) => match broker.txn_coordinator() {
            Ok(t) => ResponseKind::AddOffsetsToTxn(t.add_offsets_to_txn(r, v).await),
            Err(e) => ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::EndTxn(r) => match broker.txn_coordinator() {
            Ok(t) => ResponseKind::EndTxn(t.end_txn(r, v).await),
            Err(e) => ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(e.code())),
        },
        RequestKind::DescribeTransactions(r) => match broker.txn_coordinator() {
            Ok(t) => ResponseKind::DescribeTransactions(t.describe_transactions(r, v)),
            Err(_) => ResponseKind::DescribeTransactions(DescribeTransactionsResponse::default()),
        },
        RequestKind::ListTransactions(r) => match broker.txn_coordinator() {
            Ok(t) => ResponseKind::ListTransactions(t.list_transactions(r, v)),
            Err(e) => ResponseKind::ListTransactions(
                ListTransactionsResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(txn_offset_commit(broker, r, v).await)
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(write_txn_markers(broker, r).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(describe_producers(broker, r))
        }
        other => return Routed::NotOurs(other),
    };
    let response = super::txn_acl::amend(broker, ctx, response, denied);
    Routed::Answered(Some(response))
}

/// AddPartitionsToTxn answered with one error for every partition (the coordinator is not
/// available); v4+ carries it per transaction.
fn add_partitions_error(
    r: &AddPartitionsToTxnRequest,
    version: i16,
    e: ResponseError,
) -> AddPartitionsToTxnResponse {
    if version >= 4 {
        return AddPartitionsToTxnResponse::default().with_error_code(e.code());
    }
    add_partitions_errors(&r.v3_and_below_topics, |_| e)
}

/// AddPartitionsToTxn v0-3 answered with `error(topic)` for every partition of each topic.
pub(super) fn add_partitions_errors(
    topics: &[AddPartitionsToTxnTopic],
    error: impl Fn(&AddPartitionsToTxnTopic) -> ResponseError,
) -> AddPartitionsToTxnResponse {
    let results = topics.iter().map(|t| {
        let code = error(t).code();
        AddPartitionsToTxnTopicResult::default()
            .with_name(t.name.clone())
            .with_results_by_partition(
                t.partitions
                    .iter()
                    .map(|p| {
                        AddPartitionsToTxnPartitionResult::default()
                            .with_partition_index(*p)
                            .with_partition_error_code(code)
                    })
                    .collect(),
            )
    });
    AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results.collect())
}

/// TxnOffsetCommit, answered by the group coordinator; partitions that do not exist are
/// answered UNKNOWN_TOPIC_OR_PARTITION first, as for OffsetCommit.
async fn txn_offset_commit(
    broker: &Arc<Broker>,
    mut r: TxnOffsetCommitRequest,
    v: i16,
) -> TxnOffsetCommitResponse {
    let unknown = super::groups::take_unknown_partitions(
        broker,
        &mut r.topics,
        |t| (&t.name, &mut t.partitions),
        |p| p.partition_index,
    );
    let mut response = if !unknown.is_empty() && r.topics.is_empty() {
        TxnOffsetCommitResponse::default()
    } else {
        match broker.group_coordinator() {
            Ok(g) => g.txn_offset_commit(r, v).await,
            Err(e) => ferry_group::txn_offset_commit_error(&r, e),
        }
    };
    super::groups::add_unknown_partitions(
        &mut response.topics,
        unknown,
        |t| (&t.name, &mut t.partitions),
        |name| TxnOffsetCommitResponseTopic::default().with_name(name),
        |p, code| {
            TxnOffsetCommitResponsePartition::default()
                .with_partition_index(p)
                .with_error_code(code)
        },
    );
    response
}

/// WriteTxnMarkers: each marker written to each of its partitions this broker leads, answered
/// once the in-sync replicas hold it.
async fn write_txn_markers(
    broker: &Arc<Broker>,
    r: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let mut results = Vec::with_capacity(r.markers.len());
    for m in r.markers {
        let marker = ferry_log::TxnMarker {
            producer_id: m.producer_id.0,
            producer_epoch: m.producer_epoch,
            coordinator_epoch: m.coordinator_epoch,
            result: if m.transaction_result {
                ferry_log::TxnResult::Commit
            } else {
                ferry_log::TxnResult::Abort
            },
        };
        let mut topics = Vec::with_capacity(m.topics.len());
        for t in m.topics {
            let mut partitions = Vec::with_capacity(t.partition_indexes.len());
            for p in t.partition_indexes {
                let tp = TopicPartition {
                    topic: t.name.to_string(),
                    partition: p,
                };
                let code = match crate::txn_markers::write_local(broker, &tp, marker).await {
                    Ok(()) => 0,
                    Err(e) => e.code(),
                };
                broker.metrics.error("WriteTxnMarkers", code);
                partitions.push(
                    WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(p)
                        .with_error_code(code),
                );
            }
            topics.push(
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name)
                    .with_partitions(partitions),
            );
        }
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(m.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}

/// DescribeProducers: the producers a partition leader knows, with their open transaction.
fn describe_producers(
    broker: &Arc<Broker>,
    r: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = r
        .topics
        .into_iter()
        .map(|t| {
            let partitions = t
                .partition_indexes
                .iter()
                .map(|&index| producers_of(broker, &t.name, index))
                .collect();
            TopicResponse::default()
                .with_name(t.name)
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}

fn producers_of(broker: &Arc<Broker>, topic: &str, index: i32) -> PartitionResponse {
    let base = PartitionResponse::default().with_partition_index(index);
    let error = match broker.replicas.partition_of(topic, index) {
        None => Err(broker.missing_partition_error(topic, index)),
        Some(p) if !p.is_leader() => Err(ResponseError::NotLeaderOrFollower),
        Some(p) => Ok(p),
    };
    let p = match error {
        Ok(p) => p,
        Err(e) => {
            broker.metrics.error("DescribeProducers", e.code());
            return base.with_error_code(e.code());
        }
    };
    let active = p
        .log
        .active_producers()
        .into_iter()
        .map(|(id, e)| {
            let last = e.batches.back();
            ProducerState::default()
                .with_producer_id(ProducerId(id))
                .with_producer_epoch(i32::from(e.epoch))
                .with_last_sequence(last.map_or(-1, |b| b.last_seq))
                .with_last_timestamp(last.map_or(-1, |b| b.max_timestamp))
                .with_coordinator_epoch(e.coordinator_epoch)
                .with_current_txn_start_offset(e.txn_first_offset.unwrap_or(-1))
        })
        .collect();
    base.with_active_producers(active)
}
