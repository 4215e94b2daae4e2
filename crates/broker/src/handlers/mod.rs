//! Request handlers: one module per family of APIs. Each takes the decoded request and its
//! version and returns the response body; the connection layer adds the header and framing.
//!
//! Every handler checks what the request's principal ([`RequestContext::principal`]) may do
//! with the broker's authorizer (`crate::acl`), as Kafka's `KafkaApis` does, through the
//! context's helpers (`ctx.may_topic(broker, AclOperation::Read, name)`, ...); the group and
//! transaction APIs are checked around their coordinators (`group_acl`, `txn_acl`). Without an
//! authorizer every check is one branch and answers allowed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use ferry_authz::KafkaPrincipal;
use ferry_protocol::{DecodedRequest, FileRecords};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

mod acls;
mod broker_configs;
mod cluster;
mod config_resources;
mod configs;
mod controller;
pub(crate) mod fetch;
mod group_acl;
mod group_configs;
mod groups;
pub(crate) mod list_offsets;
mod metadata;
mod produce;
mod quotas;
mod reassignments;
mod records;
mod scram;
mod telemetry;
mod topic_partitions;
mod topics;
mod txn;
mod txn_acl;
mod txn_verify;

/// Who sent a request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub client_id: String,
    /// The peer address as Kafka reports client hosts (`/127.0.0.1`, IPv6 uncompressed as
    /// Java writes it: `/0:0:0:0:0:0:0:1`); ACL hosts are compared with it without the `/`.
    pub client_host: String,
    /// The listener and security of the connection the request came on.
    pub security: std::sync::Arc<crate::security::ConnectionSecurity>,
    /// Who the connection authenticated as; `User:ANONYMOUS` on unauthenticated listeners.
    pub principal: KafkaPrincipal,
    /// Set by a connection that sends file pieces (plaintext, with `sendfile`): a consumer
    /// Fetch leaves its record sets in the segment files and puts their placeholders in the
    /// response (see `ferry_protocol::FileRecords`). `None`: records are read into memory.
    pub file_records: Option<Arc<std::sync::Mutex<FileRecords>>>,
}

impl RequestContext {
    /// The context of a request from `peer` on a connection with `security`, before
    /// authentication.
    pub fn new(
        client_id: String,
        peer: std::net::IpAddr,
        security: std::sync::Arc<crate::security::ConnectionSecurity>,
    ) -> Self {
        Self {
            client_id,
            client_host: format!("/{}", ferry_authz::host_address(peer)),
            security,
            principal: KafkaPrincipal::ANONYMOUS,
            file_records: None,
        }
    }

    pub fn for_tests() -> Self {
        Self::new(
            "test".into(),
            std::net::Ipv4Addr::LOCALHOST.into(),
            std::sync::Arc::new(crate::security::ConnectionSecurity::plaintext("PLAINTEXT")),
        )
    }

    /// The listener the request came on.
    pub fn listener(&self) -> &str {
        &self.security.listener
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
    /// No answer, and the connection closes after the responses queued before it: an acks=0
    /// produce that failed (the reason, for the log), as Kafka does.
    Close(String),
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
            // The check is awaited here, before the append, so appends stay in request order.
            let refused = txn_verify::verify(broker, &r).await;
            let appended = produce::append(broker, r, header.request_api_version, &refused, ctx);
            if let Some(failures) = appended.acks_zero_failures() {
                Handled::Close(failures)
            } else if appended.is_complete() {
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
///
/// Each API family's function answers its own APIs and hands any other body back
/// ([`Routed`]), so an API is named in one place. The group APIs are listed here because
/// answering them first sets up the group coordinator.
pub async fn handle(
    broker: &Arc<Broker>,
    request: DecodedRequest,
    ctx: &RequestContext,
) -> Option<ResponseKind> {
    let v = request.header.request_api_version;
    let body = match cluster_request(broker, request.body, v, ctx) {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    let body = match txn::transaction_request(broker, body, v, ctx).await {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    let body = match records_request(broker, body, v, ctx).await {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    let body = match admin_request(broker, body, v, ctx) {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    let body = match security_request(broker, body, ctx).await {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    let body = match controller_request(broker, body, v, ctx).await {
        Routed::Answered(response) => return response,
        Routed::NotOurs(body) => body,
    };
    match body {
        body @ (RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DescribeGroups(_)
        | RequestKind::DeleteGroups(_)
        | RequestKind::ConsumerGroupHeartbeat(_)
        | RequestKind::ConsumerGroupDescribe(_)
        | RequestKind::OffsetDelete(_)) => group_request(broker, body, v, ctx).await,
        other => unserved(other),
    }
}

/// What an API family's function did with a request.
enum Routed {
    /// Answered it (`None`: no response is sent).
    Answered(Option<ResponseKind>),
    /// Not the family's API: the body back, for the next family.
    NotOurs(RequestKind),
}

/// For the tier's post-passes over a response (ListOffsets, DeleteRecords): the partition of
/// `topic` hosted here, when its topic is tiered, with the value the request gave for it
/// (`asked`: topic, partition, value).
pub(crate) fn tiered_partition(
    broker: &Broker,
    asked: &[(String, i32, i64)],
    topic: &str,
    partition: i32,
) -> Option<(Arc<crate::replica_manager::Partition>, i64)> {
    let part = broker.replicas.partition_of(topic, partition)?;
    if !part.log.is_tiered() {
        return None;
    }
    let (_, _, value) = asked
        .iter()
        .find(|(t, i, _)| t.as_str() == topic && *i == partition)?;
    Some((part, *value))
}

/// What the cluster is and where to send requests: API versions and features, metadata, the
/// cluster and its log dirs, the coordinator of a group, and what telemetry clients should push.
fn cluster_request(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
    ctx: &RequestContext,
) -> Routed {
    let response = match body {
        RequestKind::ApiVersions(_) => {
            let mut response = ferry_protocol::api_versions_response(0);
            // Kafka's features epoch is the offset of the metadata image they were read from.
            let epoch = i64::try_from(broker.metadata.image().applied_index).unwrap_or(i64::MAX);
            ferry_protocol::add_features(&mut response, v, epoch);
            ResponseKind::ApiVersions(response)
        }
        RequestKind::DescribeTopicPartitions(r) => ResponseKind::DescribeTopicPartitions(
            topic_partitions::describe(broker, r, ctx),
        ),
        RequestKind::GetTelemetrySubscriptions(r) => {
            ResponseKind::GetTelemetrySubscriptions(telemetry::subscriptions(r))
        }
        RequestKind::PushTelemetry(r) => ResponseKind::PushTelemetry(telemetry::push(r)),
        RequestKind::ListConfigResources(r) => ResponseKind::ListConfigResources(
            config_resources::list_config_resources(broker, r, v, ctx),
        ),
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(broker, r, v, ctx)),
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(cluster::describe_cluster(broker, r, v, ctx))
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(cluster::describe_log_dirs(broker, r, ctx))
        }
        RequestKind::AlterReplicaLogDirs(r) => {
            ResponseKind::AlterReplicaLogDirs(cluster::alter_replica_log_dirs(broker, r, ctx))
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(broker, r, v, ctx))
        }
        // A SASL listener's connection answers these before any handler (server::sasl); here
        // they come on a listener without SASL, as Kafka answers them there.
        RequestKind::SaslHandshake(_) => ResponseKind::SaslHandshake(
            SaslHandshakeResponse::default().with_error_code(ResponseError::IllegalSaslState.code()),
        ),
        RequestKind::SaslAuthenticate(_) => ResponseKind::SaslAuthenticate(
            SaslAuthenticateResponse::default()
                .with_error_code(ResponseError::IllegalSaslState.code())
                .with_error_message(Some(StrBytes::from_static_str(
                    "SaslAuthenticate request received on a listener without SASL or after successful authentication",
                ))),
        ),
        other => return Routed::NotOurs(other),
    };
    Routed::Answered(Some(response))
}

/// Reading and writing a partition's records, and what producers and followers ask about them.
async fn records_request(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
    ctx: &RequestContext,
) -> Routed {
    let response = match body {
        RequestKind::Produce(r) => {
            return Routed::Answered(
                produce::handle(broker, r, v, ctx)
                    .await
                    .map(ResponseKind::Produce),
            )
        }
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::handle(broker, r, v, ctx).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(list_offsets::handle(broker, r, v, ctx).await)
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(records::delete_records(broker, r, ctx).await)
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(records::offset_for_leader_epoch(broker, r, ctx))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(records::init_producer_id(broker, r, ctx))
        }
        other => return Routed::NotOurs(other),
    };
    Routed::Answered(Some(response))
}

/// Topic and config administration.
fn admin_request(broker: &Arc<Broker>, body: RequestKind, v: i16, ctx: &RequestContext) -> Routed {
    let response = match body {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(topics::create_topics(broker, r, v, ctx))
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(topics::delete_topics(broker, r, v, ctx))
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(topics::create_partitions(broker, r, ctx))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(configs::describe_configs(broker, r, v, ctx))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(configs::alter_configs(broker, r, ctx))
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            configs::incremental_alter_configs(broker, r, ctx),
        ),
        other => return Routed::NotOurs(other),
    };
    Routed::Answered(Some(response))
}

/// Security administration: SCRAM credentials, ACLs and client quotas, kept in the controller
/// quorum.
async fn security_request(broker: &Arc<Broker>, body: RequestKind, ctx: &RequestContext) -> Routed {
    let response = match body {
        RequestKind::AlterUserScramCredentials(r) => {
            ResponseKind::AlterUserScramCredentials(scram::alter(broker, r, ctx).await)
        }
        RequestKind::DescribeUserScramCredentials(r) => {
            ResponseKind::DescribeUserScramCredentials(scram::describe(broker, r, ctx))
        }
        RequestKind::CreateAcls(r) => ResponseKind::CreateAcls(acls::create(broker, r, ctx).await),
        RequestKind::DescribeAcls(r) => ResponseKind::DescribeAcls(acls::describe(broker, r, ctx)),
        RequestKind::DeleteAcls(r) => ResponseKind::DeleteAcls(acls::delete(broker, r, ctx).await),
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(quotas::alter(broker, r, ctx).await)
        }
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(quotas::describe(broker, r, ctx))
        }
        other => return Routed::NotOurs(other),
    };
    Routed::Answered(Some(response))
}

/// What Kafka's brokers forward to the active controller: leader elections, the quorum's
/// state, partition reassignments.
async fn controller_request(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
    ctx: &RequestContext,
) -> Routed {
    let response = match body {
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(controller::elect_leaders(broker, r, v, ctx).await)
        }
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(controller::describe_quorum(broker, r, v, ctx).await)
        }
        RequestKind::AlterPartitionReassignments(r) => {
            ResponseKind::AlterPartitionReassignments(reassignments::alter(broker, r, v, ctx).await)
        }
        RequestKind::ListPartitionReassignments(r) => {
            ResponseKind::ListPartitionReassignments(reassignments::list(broker, r, ctx).await)
        }
        other => return Routed::NotOurs(other),
    };
    Routed::Answered(Some(response))
}

/// The consumer group APIs, which the group coordinator answers once `__consumer_offsets`
/// exists.
async fn group_request(
    broker: &Arc<Broker>,
    body: RequestKind,
    v: i16,
    ctx: &RequestContext,
) -> Option<ResponseKind> {
    let (body, denied) = match group_acl::check(broker, ctx, body, v) {
        Ok(checked) => checked,
        Err(refused) => return Some(refused),
    };
    // Kafka answers a commit to a partition that does not exist before the coordinator sees it.
    let (body, unknown) = match body {
        RequestKind::OffsetCommit(mut r) => {
            let unknown = groups::unknown_commit_partitions(broker, &mut r);
            (RequestKind::OffsetCommit(r), unknown)
        }
        body => (body, Vec::new()),
    };
    let client = ferry_group::ClientInfo {
        client_id: &ctx.client_id,
        client_host: &ctx.client_host,
    };
    // Nothing left to commit: the coordinator is not asked (nor the group created), as Kafka.
    let nothing_left =
        !unknown.is_empty() && matches!(&body, RequestKind::OffsetCommit(r) if r.topics.is_empty());
    let response = if nothing_left {
        Some(ResponseKind::OffsetCommit(Default::default()))
    } else {
        match broker.group_coordinator() {
            Ok(g) => group_response(g, body, v, client).await,
            Err(e) => groups::unavailable(body, v, e.code()),
        }
    };
    let response = match response {
        Some(ResponseKind::OffsetCommit(mut r)) => {
            groups::answer_unknown_commit_partitions(&mut r, unknown);
            Some(ResponseKind::OffsetCommit(r))
        }
        other => other,
    };
    response.map(|r| group_acl::amend(broker, ctx, r, denied))
}

/// A group API's answer from the coordinator.
async fn group_response(
    g: &ferry_group::GroupCoordinator,
    body: RequestKind,
    v: i16,
    client: ferry_group::ClientInfo<'_>,
) -> Option<ResponseKind> {
    let response = match body {
        RequestKind::JoinGroup(r) => ResponseKind::JoinGroup(g.join_group(r, v, client).await),
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(g.sync_group(r, v).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(g.heartbeat(r)),
        RequestKind::LeaveGroup(r) => ResponseKind::LeaveGroup(g.leave_group(r, v)),
        RequestKind::OffsetCommit(r) => ResponseKind::OffsetCommit(g.offset_commit(r, v).await),
        RequestKind::OffsetFetch(r) => ResponseKind::OffsetFetch(g.offset_fetch(r, v)),
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(g.list_groups(r)),
        RequestKind::DescribeGroups(r) => ResponseKind::DescribeGroups(g.describe_groups(r, v)),
        RequestKind::DeleteGroups(r) => ResponseKind::DeleteGroups(g.delete_groups(r)),
        RequestKind::ConsumerGroupHeartbeat(r) => {
            ResponseKind::ConsumerGroupHeartbeat(g.consumer_group_heartbeat(r, v, client))
        }
        RequestKind::ConsumerGroupDescribe(r) => {
            ResponseKind::ConsumerGroupDescribe(g.consumer_group_describe(r))
        }
        RequestKind::OffsetDelete(r) => ResponseKind::OffsetDelete(g.offset_delete(r)),
        other => return unserved(other),
    };
    Some(response)
}

/// A request no handler answers: nothing is sent back.
fn unserved(other: RequestKind) -> Option<ResponseKind> {
    // decode_request only lets through APIs in the served table, all routed in `handle`.
    tracing::warn!(request = ?std::mem::discriminant(&other), "no handler for a served API");
    None
}

/// The error of a topic the request may not act on.
pub(crate) const TOPIC_DENIED: ResponseError = ResponseError::TopicAuthorizationFailed;

pub(crate) fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(crate) fn message(m: impl Into<String>) -> Option<StrBytes> {
    Some(StrBytes::from_string(m.into()))
}

#[cfg(test)]
mod acl_tests;
#[cfg(test)]
mod client_apis_tests;
#[cfg(test)]
mod configs_tests;
#[cfg(test)]
mod controller_tests;
#[cfg(test)]
mod dispatch_tests;
#[cfg(test)]
#[path = "fetch_files_test.rs"]
mod fetch_files_test;
#[cfg(test)]
mod groups_tests;
#[cfg(test)]
#[path = "listeners_test.rs"]
mod listeners_test;
#[cfg(test)]
mod security_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tier_tests;
