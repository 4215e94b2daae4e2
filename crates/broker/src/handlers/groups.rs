//! FindCoordinator, and the consumer group APIs' answers around the group coordinator: without
//! one, and for the partitions of a commit that do not exist.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::consumer_group_describe_response;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::{
    BrokerId, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse, DeleteGroupsResponse,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatResponse,
    JoinGroupResponse, LeaveGroupResponse, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
    RequestKind, ResponseKind, SyncGroupResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;
use ferry_authz::AclOperation;

const KEY_GROUP: i8 = 0;
const KEY_TRANSACTION: i8 = 1;

pub fn find_coordinator(
    broker: &Arc<Broker>,
    request: FindCoordinatorRequest,
    version: i16,
    ctx: &RequestContext,
) -> FindCoordinatorResponse {
    let keys: Vec<StrBytes> = if version >= 4 {
        request.coordinator_keys.clone()
    } else {
        vec![request.key.clone()]
    };
    let coordinators: Vec<Coordinator> = keys
        .into_iter()
        .map(|key| {
            let base = Coordinator::default()
                .with_key(key.clone())
                .with_node_id(BrokerId(-1))
                .with_port(-1);
            let result = match request.key_type {
                KEY_GROUP if key.is_empty() && version >= 4 => {
                    Err((ResponseError::InvalidRequest, "empty group id"))
                }
                KEY_GROUP if !ctx.may_group(broker, AclOperation::Describe, &key) => Err((
                    ResponseError::GroupAuthorizationFailed,
                    "not authorized to describe the group",
                )),
                KEY_GROUP => match broker.ensure_group_coordinator() {
                    Ok(()) => Ok(()),
                    Err(_) => Err((
                        ResponseError::CoordinatorNotAvailable,
                        "the group coordinator is not available",
                    )),
                },
                KEY_TRANSACTION if key.is_empty() && version >= 4 => {
                    Err((ResponseError::InvalidRequest, "empty transactional id"))
                }
                KEY_TRANSACTION if !ctx.may_txn(broker, AclOperation::Describe, &key) => Err((
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "not authorized to describe the transactional id",
                )),
                KEY_TRANSACTION => match broker.ensure_txn_coordinator() {
                    Ok(()) => Ok(()),
                    Err(_) => Err((
                        ResponseError::CoordinatorNotAvailable,
                        "the transaction coordinator is not available",
                    )),
                },
                _ => Err((
                    ResponseError::InvalidRequest,
                    "unknown coordinator key type",
                )),
            };
            // The coordinator of a group is the leader of its `__consumer_offsets` partition,
            // of a transactional id the leader of its `__transaction_state` partition.
            let result = result.and_then(|()| {
                let (leader, _) = if request.key_type == KEY_TRANSACTION {
                    let partition = broker.txns.partition_for(&key);
                    broker.leader_of(ferry_txn::TRANSACTION_STATE_TOPIC, partition)
                } else {
                    let partition = broker.groups.partition_for(&key);
                    broker.leader_of(crate::group_store::OFFSETS_TOPIC, partition)
                };
                super::metadata::live_brokers(broker, ctx.listener())
                    .into_iter()
                    .find(|b| b.0 == leader)
                    .map(|(id, h, p, _)| (id, h, p))
                    .ok_or((
                        ResponseError::CoordinatorNotAvailable,
                        "the coordinator's partition has no live leader",
                    ))
            });
            let c = match result {
                Ok((id, host, port)) => base
                    .with_node_id(BrokerId(id))
                    .with_host(str_bytes(&host))
                    .with_port(i32::from(port)),
                Err((e, m)) => base
                    .with_error_code(e.code())
                    .with_error_message(message(m)),
            };
            broker.metrics.error("FindCoordinator", c.error_code);
            c
        })
        .collect();
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let c = coordinators.into_iter().next().unwrap_or_default();
    let mut r = FindCoordinatorResponse::default()
        .with_error_code(c.error_code)
        .with_node_id(c.node_id)
        .with_host(c.host)
        .with_port(c.port);
    if version >= 1 {
        r = r.with_error_message(c.error_message);
    }
    r
}

/// A group API's answer without a coordinator (or refused as a whole): `code` where Kafka puts
/// it, the top-level error where the response has one, else per group or per partition, so
/// that no client reads an answer without an error as success.
pub(super) fn unavailable(body: RequestKind, version: i16, code: i16) -> Option<ResponseKind> {
    let response = match body {
        RequestKind::JoinGroup(_) => {
            ResponseKind::JoinGroup(JoinGroupResponse::default().with_error_code(code))
        }
        RequestKind::SyncGroup(_) => {
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(code))
        }
        RequestKind::Heartbeat(_) => {
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(code))
        }
        RequestKind::LeaveGroup(_) => {
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(code))
        }
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(commit_errors(&r.topics, code)),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(fetch_errors(r, version, code)),
        RequestKind::ListGroups(_) => {
            ResponseKind::ListGroups(ListGroupsResponse::default().with_error_code(code))
        }
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(
            DescribeGroupsResponse::default().with_groups(
                r.groups
                    .into_iter()
                    .map(|g| {
                        DescribedGroup::default()
                            .with_group_id(g)
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(
            DeleteGroupsResponse::default().with_results(
                r.groups_names
                    .into_iter()
                    .map(|g| {
                        DeletableGroupResult::default()
                            .with_group_id(g)
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::ConsumerGroupHeartbeat(_) => ResponseKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatResponse::default().with_error_code(code),
        ),
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeResponse::default().with_groups(
                r.group_ids
                    .into_iter()
                    .map(|g| {
                        consumer_group_describe_response::DescribedGroup::default()
                            .with_group_id(g)
                            .with_error_code(code)
                    })
                    .collect(),
            ),
        ),
        RequestKind::OffsetDelete(_) => {
            ResponseKind::OffsetDelete(OffsetDeleteResponse::default().with_error_code(code))
        }
        _ => return None,
    };
    Some(response)
}

/// OffsetCommit's answer with `code` for every partition of `topics` (the response has no
/// top-level error).
fn commit_errors(topics: &[OffsetCommitRequestTopic], code: i16) -> OffsetCommitResponse {
    OffsetCommitResponse::default().with_topics(
        topics
            .iter()
            .map(|t| {
                OffsetCommitResponseTopic::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                OffsetCommitResponsePartition::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// OffsetFetch's error answer as Kafka builds it: v0-1 have no top-level error, so each named
/// partition carries it; v2-7 carry it at the top; v8+ per group.
fn fetch_errors(r: OffsetFetchRequest, version: i16, code: i16) -> OffsetFetchResponse {
    if version >= 8 {
        return OffsetFetchResponse::default().with_groups(
            r.groups
                .into_iter()
                .map(|g| {
                    OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id)
                        .with_error_code(code)
                })
                .collect(),
        );
    }
    let response = OffsetFetchResponse::default().with_error_code(code);
    if version >= 2 {
        return response;
    }
    response.with_topics(
        r.topics
            .unwrap_or_default()
            .into_iter()
            .map(|t| {
                OffsetFetchResponseTopic::default()
                    .with_name(t.name)
                    .with_partitions(
                        t.partition_indexes
                            .into_iter()
                            .map(|p| {
                                OffsetFetchResponsePartition::default()
                                    .with_partition_index(p)
                                    .with_committed_offset(-1)
                                    .with_metadata(Some(StrBytes::default()))
                                    .with_error_code(code)
                            })
                            .collect(),
                    )
            })
            .collect(),
    )
}

/// Partitions of an offset commit (OffsetCommit, TxnOffsetCommit) that the cluster's metadata
/// does not know: Kafka checks its metadata cache before committing and answers them
/// UNKNOWN_TOPIC_OR_PARTITION, so an offset is never stored for a partition that does not
/// exist. Takes them out of `topics` (dropping topics left without partitions) and returns
/// them by topic.
pub(super) fn take_unknown_partitions<T, P>(
    broker: &Broker,
    topics: &mut Vec<T>,
    topic_of: impl Fn(&mut T) -> (&TopicName, &mut Vec<P>),
    index_of: impl Fn(&P) -> i32,
) -> Vec<(TopicName, Vec<i32>)> {
    let image = broker.metadata.image();
    let mut unknown = Vec::new();
    topics.retain_mut(|t| {
        let (name, partitions) = topic_of(t);
        let count = image.topic(name).map_or(0, |m| m.partitions.len());
        let known = |p: i32| usize::try_from(p).is_ok_and(|p| p < count);
        let missing: Vec<i32> = partitions
            .iter()
            .map(&index_of)
            .filter(|p| !known(*p))
            .collect();
        if missing.is_empty() {
            return true;
        }
        partitions.retain(|p| known(index_of(p)));
        let keep = !partitions.is_empty();
        unknown.push((name.clone(), missing));
        keep
    });
    unknown
}

/// Adds UNKNOWN_TOPIC_OR_PARTITION answers for `unknown` partitions to a commit response's
/// topics, into the entry of their topic where it has one.
pub(super) fn add_unknown_partitions<T, P>(
    topics: &mut Vec<T>,
    unknown: Vec<(TopicName, Vec<i32>)>,
    parts_of: impl Fn(&mut T) -> (&TopicName, &mut Vec<P>),
    topic: impl Fn(TopicName) -> T,
    partition: impl Fn(i32, i16) -> P,
) {
    let code = ResponseError::UnknownTopicOrPartition.code();
    for (name, missing) in unknown {
        let at = match topics.iter_mut().position(|t| *parts_of(t).0 == name) {
            Some(at) => at,
            None => {
                topics.push(topic(name));
                topics.len() - 1
            }
        };
        let (_, partitions) = parts_of(&mut topics[at]);
        partitions.extend(missing.into_iter().map(|p| partition(p, code)));
    }
}

/// Takes OffsetCommit's unknown partitions out of the request (see
/// [`take_unknown_partitions`]).
pub(super) fn unknown_commit_partitions(
    broker: &Broker,
    r: &mut OffsetCommitRequest,
) -> Vec<(TopicName, Vec<i32>)> {
    take_unknown_partitions(
        broker,
        &mut r.topics,
        |t| (&t.name, &mut t.partitions),
        |p| p.partition_index,
    )
}

/// Answers, in an OffsetCommit response, the partitions [`unknown_commit_partitions`] took out
/// of its request.
pub(super) fn answer_unknown_commit_partitions(
    r: &mut OffsetCommitResponse,
    unknown: Vec<(TopicName, Vec<i32>)>,
) {
    add_unknown_partitions(
        &mut r.topics,
        unknown,
        |t| (&t.name, &mut t.partitions),
        |name| OffsetCommitResponseTopic::default().with_name(name),
        |p, code| {
            OffsetCommitResponsePartition::default()
                .with_partition_index(p)
                .with_error_code(code)
        },
    );
}
