//! Kafka's authorization of the consumer group APIs, around the group coordinator: what a
//! request may not touch is taken out before the coordinator sees it and answered with its
//! error after ([`check`], then [`amend`]), as Kafka's `KafkaApis` does.
//!
//! - JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat: READ on the group;
//!   ConsumerGroupHeartbeat also DESCRIBE on every subscribed topic (TOPIC_AUTHORIZATION_FAILED).
//! - OffsetCommit: READ on the group, READ on each topic.
//! - OffsetFetch: DESCRIBE on the group; topics without DESCRIBE are left out of an all-topics
//!   answer and answered TOPIC_AUTHORIZATION_FAILED when named.
//! - OffsetDelete: DELETE on the group, READ on each topic.
//! - DescribeGroups, ConsumerGroupDescribe: DESCRIBE on each group, and its authorized
//!   operations from the authorizer.
//! - ListGroups: every group with DESCRIBE on the cluster, else those the principal may DESCRIBE.
//! - DeleteGroups: DELETE on each group.
//!
//! Without an authorizer every check passes and [`amend`] changes nothing.

use ferry_authz::{AclOperation, ResourceType};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{
    delete_groups_response::DeletableGroupResult, GroupId, OffsetCommitResponse, RequestKind,
    ResponseKind, TopicName,
};

use super::{RequestContext, TOPIC_DENIED};
use crate::broker::Broker;

const GROUP_DENIED: ResponseError = ResponseError::GroupAuthorizationFailed;

/// What [`check`] took out of a request, for [`amend`] to answer.
#[derive(Default)]
pub struct Denied {
    /// Topics (with their partitions) the request may not act on.
    topics: Vec<(TopicName, Vec<i32>)>,
    /// Groups the request may not act on.
    groups: Vec<GroupId>,
    /// OffsetFetch named its topics (else: all topics, and the denied ones are left out).
    named_topics: bool,
    /// The request asked for authorized-operations masks.
    include_operations: bool,
}

/// The request with what it may not touch taken out, or its whole answer when the principal
/// may not use the group at all.
// The refusal is built once and returned as the answer: boxing it would cost an allocation
// per refused request to save a move.
#[allow(clippy::result_large_err)]
pub fn check(
    broker: &Broker,
    ctx: &RequestContext,
    body: RequestKind,
    version: i16,
) -> Result<(RequestKind, Denied), ResponseKind> {
    if !broker.acls.is_enabled() {
        return Ok((body, Denied::default()));
    }
    let (mut topics, mut groups, mut named_topics, mut include_operations) =
        (Vec::new(), Vec::new(), false, false);
    let may_group = |op, id: &str| ctx.may_group(broker, op, id);
    let mut may_read_topic = |name: &TopicName, partitions: Vec<i32>| {
        let allowed = ctx.may_topic(broker, AclOperation::Read, name);
        if !allowed {
            topics.push((name.clone(), partitions));
        }
        allowed
    };
    let body = match body {
        RequestKind::JoinGroup(ref r) if !may_group(AclOperation::Read, &r.group_id) => {
            return Err(refused(body, version))
        }
        RequestKind::SyncGroup(ref r) if !may_group(AclOperation::Read, &r.group_id) => {
            return Err(refused(body, version))
        }
        RequestKind::Heartbeat(ref r) if !may_group(AclOperation::Read, &r.group_id) => {
            return Err(refused(body, version))
        }
        RequestKind::LeaveGroup(ref r) if !may_group(AclOperation::Read, &r.group_id) => {
            return Err(refused(body, version))
        }
        RequestKind::ConsumerGroupHeartbeat(ref r)
            if !may_group(AclOperation::Read, &r.group_id) =>
        {
            return Err(refused(body, version))
        }
        // Kafka: every subscribed topic must be describable, else the heartbeat is refused.
        RequestKind::ConsumerGroupHeartbeat(ref r)
            if r.subscribed_topic_names.as_ref().is_some_and(|ts| {
                ts.iter()
                    .any(|t| !ctx.may_topic(broker, AclOperation::Describe, t))
            }) =>
        {
            return Err(refused_with(body, version, TOPIC_DENIED))
        }
        RequestKind::OffsetFetch(ref r)
            if r.groups.is_empty() && !may_group(AclOperation::Describe, &r.group_id) =>
        {
            return Err(refused(body, version))
        }
        RequestKind::OffsetDelete(ref r) if !may_group(AclOperation::Delete, &r.group_id) => {
            return Err(refused(body, version))
        }
        RequestKind::OffsetCommit(r) if !may_group(AclOperation::Read, &r.group_id) => {
            let topics = r
                .topics
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            return Err(ResponseKind::OffsetCommit(commit_errors(
                topics,
                GROUP_DENIED,
            )));
        }
        RequestKind::OffsetCommit(mut r) => {
            r.topics.retain(|t| {
                may_read_topic(
                    &t.name,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            });
            RequestKind::OffsetCommit(r)
        }
        RequestKind::OffsetDelete(mut r) => {
            r.topics.retain(|t| {
                may_read_topic(
                    &t.name,
                    t.partitions.iter().map(|p| p.partition_index).collect(),
                )
            });
            RequestKind::OffsetDelete(r)
        }
        RequestKind::DeleteGroups(mut r) => {
            r.groups_names.retain(|g| {
                let allowed = may_group(AclOperation::Delete, g);
                if !allowed {
                    groups.push(g.clone());
                }
                allowed
            });
            RequestKind::DeleteGroups(r)
        }
        RequestKind::OffsetFetch(r) => {
            named_topics = r.topics.is_some() || r.groups.iter().any(|g| g.topics.is_some());
            RequestKind::OffsetFetch(r)
        }
        RequestKind::DescribeGroups(r) => {
            include_operations = r.include_authorized_operations;
            RequestKind::DescribeGroups(r)
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            include_operations = r.include_authorized_operations;
            RequestKind::ConsumerGroupDescribe(r)
        }
        other => other,
    };
    let denied = Denied {
        topics,
        groups,
        named_topics,
        include_operations,
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
    let may_describe_group = |id: &str| ctx.may_group(broker, AclOperation::Describe, id);
    let may_describe_topic = |name: &str| ctx.may_topic(broker, AclOperation::Describe, name);
    let group_ops = |id: &str| {
        broker
            .acls
            .authorized_operations(ctx, ResourceType::Group, id)
            .unwrap_or(i32::MIN)
    };
    // DescribeGroups and ConsumerGroupDescribe: the same fields in two generated types.
    macro_rules! describe_groups {
        ($groups:expr) => {
            for g in &mut $groups {
                if !may_describe_group(&g.group_id) {
                    let id = std::mem::take(&mut g.group_id);
                    *g = Default::default();
                    g.group_id = id;
                    g.error_code = GROUP_DENIED.code();
                } else if denied.include_operations {
                    g.authorized_operations = group_ops(&g.group_id);
                }
            }
        };
    }
    match response {
        ResponseKind::OffsetCommit(mut r) => {
            r.topics
                .extend(commit_errors(denied.topics, TOPIC_DENIED).topics);
            ResponseKind::OffsetCommit(r)
        }
        ResponseKind::OffsetDelete(mut r) => {
            r.topics.extend(refused_topics(
                denied.topics,
                |p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(TOPIC_DENIED.code())
                },
                |name, ps| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(name)
                        .with_partitions(ps)
                },
            ));
            ResponseKind::OffsetDelete(r)
        }
        ResponseKind::DeleteGroups(mut r) => {
            r.results.extend(denied.groups.into_iter().map(|g| {
                DeletableGroupResult::default()
                    .with_group_id(g)
                    .with_error_code(GROUP_DENIED.code())
            }));
            ResponseKind::DeleteGroups(r)
        }
        ResponseKind::ListGroups(mut r) => {
            if !ctx.may_cluster(broker, AclOperation::Describe) {
                r.groups.retain(|g| may_describe_group(&g.group_id));
            }
            ResponseKind::ListGroups(r)
        }
        ResponseKind::DescribeGroups(mut r) => {
            describe_groups!(r.groups);
            ResponseKind::DescribeGroups(r)
        }
        ResponseKind::ConsumerGroupDescribe(mut r) => {
            describe_groups!(r.groups);
            ResponseKind::ConsumerGroupDescribe(r)
        }
        ResponseKind::OffsetFetch(mut r) => {
            let named = denied.named_topics;
            // v0-7: one group (checked before); v8+: each group checked here.
            hide_topics(
                &mut r.topics,
                named,
                &may_describe_topic,
                |t| &t.name,
                |t| {
                    for p in &mut t.partitions {
                        p.committed_offset = -1;
                        p.metadata = None;
                        p.error_code = TOPIC_DENIED.code();
                    }
                },
            );
            for g in &mut r.groups {
                if !may_describe_group(&g.group_id) {
                    g.topics.clear();
                    g.error_code = GROUP_DENIED.code();
                    continue;
                }
                hide_topics(
                    &mut g.topics,
                    named,
                    &may_describe_topic,
                    |t| &t.name,
                    |t| {
                        for p in &mut t.partitions {
                            p.committed_offset = -1;
                            p.metadata = None;
                            p.error_code = TOPIC_DENIED.code();
                        }
                    },
                );
            }
            ResponseKind::OffsetFetch(r)
        }
        other => other,
    }
}

/// Leaves out the topics the principal may not describe (all-topics request), or answers them
/// with TOPIC_AUTHORIZATION_FAILED (`deny`) when the request named them.
fn hide_topics<T>(
    topics: &mut Vec<T>,
    named: bool,
    may_describe: &dyn Fn(&str) -> bool,
    name: impl Fn(&T) -> &TopicName,
    deny: impl Fn(&mut T),
) {
    if named {
        topics
            .iter_mut()
            .filter(|t| !may_describe(name(t)))
            .for_each(deny);
    } else {
        topics.retain(|t| may_describe(name(t)));
    }
}

/// The response entries of refused `topics`: one `topic(name, partitions)` each, its
/// partitions made by `partition(index)`.
pub(super) fn refused_topics<T, P>(
    topics: Vec<(TopicName, Vec<i32>)>,
    partition: impl Fn(i32) -> P,
    topic: impl Fn(TopicName, Vec<P>) -> T,
) -> Vec<T> {
    topics
        .into_iter()
        .map(|(name, ps)| topic(name, ps.into_iter().map(&partition).collect()))
        .collect()
}

/// OffsetCommit's answer with `error` for every partition of `topics`.
fn commit_errors(topics: Vec<(TopicName, Vec<i32>)>, error: ResponseError) -> OffsetCommitResponse {
    let topics = refused_topics(
        topics,
        |p| {
            OffsetCommitResponsePartition::default()
                .with_partition_index(p)
                .with_error_code(error.code())
        },
        |name, ps| {
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(ps)
        },
    );
    OffsetCommitResponse::default().with_topics(topics)
}

/// A group request refused as a whole: GROUP_AUTHORIZATION_FAILED where the response has a
/// top-level error.
fn refused(body: RequestKind, version: i16) -> ResponseKind {
    refused_with(body, version, GROUP_DENIED)
}

/// A group request refused as a whole with `error`.
fn refused_with(body: RequestKind, version: i16, error: ResponseError) -> ResponseKind {
    super::groups::unavailable(body, version, error.code())
        .unwrap_or(ResponseKind::OffsetCommit(Default::default()))
}
