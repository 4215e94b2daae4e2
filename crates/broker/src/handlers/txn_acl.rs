//! Kafka's authorization of the transaction APIs, around the transaction and group
//! coordinators ([`check`] before them, [`amend`] after), as Kafka's `KafkaApis` does.
//!
//! - InitProducerId with a transactional id, EndTxn: WRITE on the transactional id.
//! - AddPartitionsToTxn v0-3: WRITE on the transactional id, WRITE on each topic (a denied
//!   topic fails the whole request: its partitions TOPIC_AUTHORIZATION_FAILED, the others
//!   OPERATION_NOT_ATTEMPTED); v4+ (brokers verifying a produce): CLUSTER_ACTION.
//! - AddOffsetsToTxn: WRITE on the transactional id, READ on the group.
//! - TxnOffsetCommit: WRITE on the transactional id, READ on the group, READ on each topic.
//! - DescribeTransactions, ListTransactions: DESCRIBE on each transactional id (ListTransactions
//!   leaves out the others).
//! - WriteTxnMarkers (a coordinator to partition leaders): CLUSTER_ACTION on the cluster.
//! - DescribeProducers: READ on each topic.

use ferry_authz::AclOperation;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::describe_producers_response::PartitionResponse;
use kafka_protocol::messages::describe_transactions_response::TransactionState;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnResponse, EndTxnResponse, InitProducerIdResponse,
    ProducerId, RequestKind, ResponseKind, TopicName, TransactionalId, WriteTxnMarkersResponse,
};

use super::group_acl::refused_topics;
use super::{RequestContext, TOPIC_DENIED};
use crate::broker::Broker;

const TXN_DENIED: ResponseError = ResponseError::TransactionalIdAuthorizationFailed;
const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;
const CLUSTER_DENIED: ResponseError = ResponseError::ClusterAuthorizationFailed;

/// What [`check`] took out of a request, for [`amend`] to answer.
#[derive(Default)]
pub struct Denied {
    /// TxnOffsetCommit's topics (with partitions) the request may not commit.
    topics: Vec<(TopicName, Vec<i32>)>,
    /// DescribeTransactions' ids the request may not describe.
    ids: Vec<TransactionalId>,
}

/// The request with what it may not touch taken out, or its whole answer when refused.
// The refusal is built once and returned as the answer: boxing it would cost an allocation
// per refused request to save a move.
#[allow(clippy::result_large_err)]
pub fn check(
    broker: &Broker,
    ctx: &RequestContext,
    body: RequestKind,
    version: i16,
) -> Result<(RequestKind, Denied), ResponseKind> {
    let mut denied = Denied::default();
    if !broker.acls.is_enabled() {
        return Ok((body, denied));
    }
    let may_write_txn = |id: &str| ctx.may_txn(broker, AclOperation::Write, id);
    let may_read_group = |id: &str| ctx.may_group(broker, AclOperation::Read, id);
    let may_topic = |op, name: &str| ctx.may_topic(broker, op, name);
    let body = match body {
        RequestKind::InitProducerId(r)
            if r.transactional_id
                .as_ref()
                .is_some_and(|id| !may_write_txn(id)) =>
        {
            return Err(ResponseKind::InitProducerId(
                InitProducerIdResponse::default()
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1)
                    .with_error_code(TXN_DENIED.code()),
            ))
        }
        RequestKind::EndTxn(r) if !may_write_txn(&r.transactional_id) => {
            return Err(ResponseKind::EndTxn(
                EndTxnResponse::default().with_error_code(TXN_DENIED.code()),
            ))
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let error = if !may_write_txn(&r.transactional_id) {
                TXN_DENIED
            } else if !may_read_group(&r.group_id) {
                GROUP_DENIED
            } else {
                return Ok((RequestKind::AddOffsetsToTxn(r), denied));
            };
            return Err(ResponseKind::AddOffsetsToTxn(
                AddOffsetsToTxnResponse::default().with_error_code(error.code()),
            ));
        }
        RequestKind::AddPartitionsToTxn(r) if version >= 4 => {
            if !ctx.may_cluster(broker, AclOperation::ClusterAction) {
                return Err(ResponseKind::AddPartitionsToTxn(
                    AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_DENIED.code()),
                ));
            }
            RequestKind::AddPartitionsToTxn(r)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            let txn_denied = !may_write_txn(&r.v3_and_below_transactional_id);
            let topic_denied = |t: &TopicName| txn_denied || !may_topic(AclOperation::Write, t);
            if !r.v3_and_below_topics.iter().any(|t| topic_denied(&t.name)) {
                return Ok((RequestKind::AddPartitionsToTxn(r), denied));
            }
            let error = |t: &AddPartitionsToTxnTopic| match () {
                _ if txn_denied => TXN_DENIED,
                _ if topic_denied(&t.name) => TOPIC_DENIED,
                _ => ResponseError::OperationNotAttempted,
            };
            return Err(ResponseKind::AddPartitionsToTxn(
                super::txn::add_partitions_errors(&r.v3_and_below_topics, error),
            ));
        }
        RequestKind::TxnOffsetCommit(mut r) => {
            let error = if !may_write_txn(&r.transactional_id) {
                Some(TXN_DENIED)
            } else if !may_read_group(&r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            if let Some(e) = error {
                return Err(ResponseKind::TxnOffsetCommit(
                    ferry_group::txn_offset_commit_error(&r, e),
                ));
            }
            r.topics.retain(|t| {
                let allowed = may_topic(AclOperation::Read, &t.name);
                if !allowed {
                    let ps = t.partitions.iter().map(|p| p.partition_index).collect();
                    denied.topics.push((t.name.clone(), ps));
                }
                allowed
            });
            RequestKind::TxnOffsetCommit(r)
        }
        RequestKind::DescribeTransactions(mut r) => {
            r.transactional_ids.retain(|id| {
                let allowed = ctx.may_txn(broker, AclOperation::Describe, id);
                if !allowed {
                    denied.ids.push(id.clone());
                }
                allowed
            });
            RequestKind::DescribeTransactions(r)
        }
        RequestKind::WriteTxnMarkers(r)
            if !ctx.may_cluster(broker, AclOperation::ClusterAction) =>
        {
            return Err(ResponseKind::WriteTxnMarkers(markers_refused(r)));
        }
        other => other,
    };
    Ok((body, denied))
}

/// The coordinator's answer with the errors of what [`check`] took out, and with what the
/// principal may not see left out.
pub fn amend(
    broker: &Broker,
    ctx: &RequestContext,
    response: ResponseKind,
    denied: Denied,
) -> ResponseKind {
    if !broker.acls.is_enabled() {
        return response;
    }
    match response {
        ResponseKind::TxnOffsetCommit(mut r) => {
            r.topics.extend(refused_topics(
                denied.topics,
                |p| {
                    TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(TOPIC_DENIED.code())
                },
                |name, ps| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(name)
                        .with_partitions(ps)
                },
            ));
            ResponseKind::TxnOffsetCommit(r)
        }
        ResponseKind::DescribeTransactions(mut r) => {
            r.transaction_states
                .extend(denied.ids.into_iter().map(|id| {
                    TransactionState::default()
                        .with_transactional_id(id)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1)
                        .with_error_code(TXN_DENIED.code())
                }));
            ResponseKind::DescribeTransactions(r)
        }
        ResponseKind::ListTransactions(mut r) => {
            r.transaction_states
                .retain(|s| ctx.may_txn(broker, AclOperation::Describe, &s.transactional_id));
            ResponseKind::ListTransactions(r)
        }
        ResponseKind::DescribeProducers(mut r) => {
            for t in &mut r.topics {
                if !ctx.may_topic(broker, AclOperation::Read, &t.name) {
                    for p in &mut t.partitions {
                        *p = PartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(TOPIC_DENIED.code());
                    }
                }
            }
            ResponseKind::DescribeProducers(r)
        }
        other => other,
    }
}

/// WriteTxnMarkers answered CLUSTER_AUTHORIZATION_FAILED for every partition.
fn markers_refused(r: kafka_protocol::messages::WriteTxnMarkersRequest) -> WriteTxnMarkersResponse {
    let markers = r.markers.into_iter().map(|m| {
        let topics = m.topics.into_iter().map(|t| {
            let partitions = t.partition_indexes.iter().map(|p| {
                WritableTxnMarkerPartitionResult::default()
                    .with_partition_index(*p)
                    .with_error_code(CLUSTER_DENIED.code())
            });
            WritableTxnMarkerTopicResult::default()
                .with_name(t.name)
                .with_partitions(partitions.collect())
        });
        WritableTxnMarkerResult::default()
            .with_producer_id(m.producer_id)
            .with_topics(topics.collect())
    });
    WriteTxnMarkersResponse::default().with_markers(markers.collect())
}
