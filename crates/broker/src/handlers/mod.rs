//! Request handlers: one module per family of APIs. Each takes the decoded request and its
//! version and returns the response body; the connection layer adds the header and framing.

use std::sync::Arc;

use ferry_protocol::DecodedRequest;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

mod cluster;
mod configs;
mod fetch;
mod list_offsets;
mod metadata;
mod produce;
mod records;
mod topics;

/// Handles one request. `None` means no response is sent (Produce with acks=0).
pub async fn handle(broker: &Arc<Broker>, request: DecodedRequest) -> Option<ResponseKind> {
    let v = request.header.request_api_version;
    let response = match request.body {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(ferry_protocol::api_versions_response(0))
        }
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(broker, r, v)),
        RequestKind::Produce(r) => return produce::handle(broker, r, v).map(ResponseKind::Produce),
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
