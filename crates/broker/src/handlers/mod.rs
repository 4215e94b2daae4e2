//! Request handlers: one module per family of APIs. Each takes the decoded request and its
//! version and returns the response body; the connection layer adds the header and framing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ferry_protocol::DecodedRequest;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

mod cluster;
mod configs;
mod fetch;
mod groups;
mod list_offsets;
mod metadata;
mod produce;
mod records;
mod topics;

/// Who sent a request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub client_id: String,
    /// The peer address as Kafka reports client hosts (`/127.0.0.1`).
    pub client_host: String,
}

impl RequestContext {
    pub fn for_tests() -> Self {
        Self {
            client_id: "test".into(),
            client_host: "/127.0.0.1".into(),
        }
    }
}

/// A handled request: its response now, or, for a produce that waits for the in-sync replicas,
/// a future of it.
// Built once per request and moved straight into the writer's queue: boxing `Now` would cost an
// allocation per request to save a move.
#[allow(clippy::large_enum_variant)]
pub enum Handled {
    Now(Option<ResponseKind>),
    Later(Pin<Box<dyn Future<Output = Option<ResponseKind>> + Send>>),
}

/// Handles one request, but does not wait for replicas: a produce's records are appended now
/// and its acks=all answer comes as [`Handled::Later`], so the connection can go on reading
/// (a producer's pipelined batches then share one replication round trip instead of queueing
/// behind each other's).
pub async fn handle_pipelined(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    ctx: &RequestContext,
) -> Handled {
    let DecodedRequest {
        api_key,
        header,
        body,
    } = request;
    match body {
        RequestKind::Produce(r) => {
            let appended = produce::append(broker, r, header.request_api_version);
            if appended.is_complete() {
                Handled::Now(appended.respond().await.map(ResponseKind::Produce))
            } else {
                Handled::Later(Box::pin(async move {
                    appended.respond().await.map(ResponseKind::Produce)
                }))
            }
        }
        body => Handled::Now(
            handle(
                broker,
                DecodedRequest {
                    api_key,
                    header,
                    body,
                },
                ctx,
            )
            .await,
        ),
    }
}

/// Handles one request. `None` means no response is sent (Produce with acks=0).
pub async fn handle(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    ctx: &RequestContext,
) -> Option<ResponseKind> {
    let v = request.header.request_api_version;
    let client = ferry_group::ClientInfo {
        client_id: &ctx.client_id,
        client_host: &ctx.client_host,
    };
    let response = match request.body {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(ferry_protocol::api_versions_response(0))
        }
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(broker, r, v)),
        RequestKind::Produce(r) => {
            return produce::handle(broker, r, v)
                .await
                .map(ResponseKind::Produce)
        }
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::handle(broker, r, v).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, r, v))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(topics::create_topics(broker, r, v))
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(topics::delete_topics(broker, r, v))
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(topics::create_partitions(broker, r))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(configs::describe_configs(broker, r, v))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter_configs(broker, r))
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(configs::incremental_alter_configs(broker, r))
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(cluster::describe_cluster(broker, r, v))
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(cluster::describe_log_dirs(broker, r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(records::delete_records(broker, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(records::offset_for_leader_epoch(broker, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(records::init_producer_id(broker, r))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(broker, r, v))
        }
        RequestKind::JoinGroup(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::JoinGroup(g.join_group(r, v, client).await),
            Err(e) => ResponseKind::JoinGroup(
                kafka_protocol::messages::JoinGroupResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::SyncGroup(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::SyncGroup(g.sync_group(r, v).await),
            Err(e) => ResponseKind::SyncGroup(
                kafka_protocol::messages::SyncGroupResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::Heartbeat(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::Heartbeat(g.heartbeat(r)),
            Err(e) => ResponseKind::Heartbeat(
                kafka_protocol::messages::HeartbeatResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::LeaveGroup(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::LeaveGroup(g.leave_group(r, v)),
            Err(e) => ResponseKind::LeaveGroup(
                kafka_protocol::messages::LeaveGroupResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::OffsetCommit(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::OffsetCommit(g.offset_commit(r, v).await),
            Err(_) => ResponseKind::OffsetCommit(Default::default()),
        },
        RequestKind::OffsetFetch(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::OffsetFetch(g.offset_fetch(r, v)),
            Err(e) => ResponseKind::OffsetFetch(
                kafka_protocol::messages::OffsetFetchResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::ListGroups(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::ListGroups(g.list_groups(r)),
            Err(e) => ResponseKind::ListGroups(
                kafka_protocol::messages::ListGroupsResponse::default().with_error_code(e.code()),
            ),
        },
        RequestKind::DescribeGroups(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::DescribeGroups(g.describe_groups(r, v)),
            Err(_) => ResponseKind::DescribeGroups(Default::default()),
        },
        RequestKind::DeleteGroups(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::DeleteGroups(g.delete_groups(r)),
            Err(_) => ResponseKind::DeleteGroups(Default::default()),
        },
        RequestKind::ConsumerGroupHeartbeat(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::ConsumerGroupHeartbeat(g.consumer_group_heartbeat(r, client)),
            Err(e) => ResponseKind::ConsumerGroupHeartbeat(
                kafka_protocol::messages::ConsumerGroupHeartbeatResponse::default()
                    .with_error_code(e.code()),
            ),
        },
        RequestKind::ConsumerGroupDescribe(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::ConsumerGroupDescribe(g.consumer_group_describe(r)),
            Err(_) => ResponseKind::ConsumerGroupDescribe(Default::default()),
        },
        RequestKind::OffsetDelete(r) => match broker.group_coordinator() {
            Ok(g) => ResponseKind::OffsetDelete(g.offset_delete(r)),
            Err(e) => ResponseKind::OffsetDelete(
                kafka_protocol::messages::OffsetDeleteResponse::default().with_error_code(e.code()),
            ),
        },
        other => {
            // decode_request only lets through APIs in the served table, all matched above.
            tracing::warn!(request = ?std::mem::discriminant(&other), "no handler for a served API");
            return None;
        }
    };
    Some(response)
}

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn message(m: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(m.into()))
}

#[cfg(test)]
mod tests;
