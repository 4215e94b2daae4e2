//! ListConfigResources: which resources have configs (KIP-1142; v0 is KIP-714's
//! ListClientMetricsResources).
//!
//! v0 lists client-metrics subscriptions only, and ferry keeps none. v1 lists, for the types
//! asked (all of them when none is named), in Kafka's order: groups with dynamic group configs,
//! client-metrics subscriptions (none), then every broker with an endpoint on the request's
//! listener as a BROKER_LOGGER and as a BROKER resource, then every topic. A type outside those
//! fails the whole request with UNSUPPORTED_VERSION, as in Kafka. Needs DESCRIBE_CONFIGS on the
//! cluster.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::list_config_resources_response::ConfigResource;
use kafka_protocol::messages::{ListConfigResourcesRequest, ListConfigResourcesResponse};

use super::{str_bytes, RequestContext};
use crate::broker::Broker;
use ferry_authz::AclOperation;

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const CLIENT_METRICS: i8 = 16;
const GROUP: i8 = 32;

/// The types v1 lists, in the order of its answer.
const LISTED_IN_ORDER: [i8; 5] = [GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC];

pub fn list_config_resources(
    broker: &Arc<Broker>,
    request: ListConfigResourcesRequest,
    version: i16,
    ctx: &RequestContext,
) -> ListConfigResourcesResponse {
    let response = ListConfigResourcesResponse::default();
    if !ctx.may_cluster(broker, AclOperation::DescribeConfigs) {
        return response.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let wanted: Vec<i8> = if version == 0 {
        vec![CLIENT_METRICS]
    } else if request.resource_types.is_empty() {
        LISTED_IN_ORDER.to_vec()
    } else {
        request.resource_types.clone()
    };
    if wanted.iter().any(|t| !LISTED_IN_ORDER.contains(t)) {
        return response.with_error_code(ResponseError::UnsupportedVersion.code());
    }
    let image = broker.metadata.image();
    let mut brokers: Vec<i32> = super::metadata::live_brokers(broker, ctx.listener())
        .into_iter()
        .map(|(id, ..)| id)
        .collect();
    brokers.sort_unstable();
    brokers.dedup();
    let mut out = Vec::new();
    let mut add = |ty: i8, name: &str| {
        out.push(
            ConfigResource::default()
                .with_resource_type(ty)
                .with_resource_name(str_bytes(name)),
        )
    };
    for ty in LISTED_IN_ORDER.into_iter().filter(|t| wanted.contains(t)) {
        match ty {
            GROUP => image.group_configs.keys().for_each(|g| add(ty, g)),
            BROKER_LOGGER | BROKER => brokers.iter().for_each(|id| add(ty, &id.to_string())),
            TOPIC => image.topics.keys().for_each(|t| add(ty, t)),
            // ferry keeps no client-metrics subscriptions.
            _ => {}
        }
    }
    response.with_config_resources(out)
}
