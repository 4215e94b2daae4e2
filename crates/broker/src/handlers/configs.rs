//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and describing the
//! broker's static configs; ferry has no dynamic broker configs yet).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{message, str_bytes, RequestContext};
use crate::broker::{Broker, TopicError};
use ferry_authz::AclOperation;
use ferry_config::broker_config::{ConfigDef, ConfigType, BROKER_CONFIGS};
use ferry_config::topic_config::{self, ConfigSource, TopicConfigDef, TOPIC_CONFIGS};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;

const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;
const OP_APPEND: i8 = 2;
const OP_SUBTRACT: i8 = 3;

fn type_code(ty: ConfigType) -> i8 {
    match ty {
        ConfigType::Boolean => 1,
        ConfigType::String => 2,
        ConfigType::Int => 3,
        ConfigType::Long => 5,
        ConfigType::List => 7,
        ConfigType::Double => 6,
        ConfigType::Password => 9,
    }
}

pub fn describe_configs(
    broker: &Arc<Broker>,
    request: DescribeConfigsRequest,
    version: i16,
    ctx: &RequestContext,
) -> DescribeConfigsResponse {
    let asked = Describing {
        version,
        include_synonyms: request.include_synonyms,
        include_documentation: request.include_documentation,
    };
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let op = AclOperation::DescribeConfigs;
            let result = match config_denied(broker, ctx, r.resource_type, &r.resource_name, op) {
                Some(e) => DescribeConfigsResult::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name)
                    .with_error_code(e.error.code())
                    .with_error_message(message(e.message)),
                None => describe_resource(broker, &asked, r),
            };
            broker.metrics.error("DescribeConfigs", result.error_code);
            result
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// What a DescribeConfigs request asks to see of every config it describes.
struct Describing {
    version: i16,
    include_synonyms: bool,
    include_documentation: bool,
}

/// The config names a resource asks for: all of them when it lists none.
struct WantedKeys(Option<Vec<String>>);

impl WantedKeys {
    fn contains(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|ks| ks.iter().any(|k| k == name))
    }
}

/// Describes one resource: a topic, this broker, or an error for any other.
fn describe_resource(
    broker: &Broker,
    asked: &Describing,
    r: DescribeConfigsResource,
) -> DescribeConfigsResult {
    let wanted = WantedKeys(
        r.configuration_keys
            .as_ref()
            .map(|ks| ks.iter().map(|k| k.to_string()).collect()),
    );
    let base = DescribeConfigsResult::default()
        .with_resource_type(r.resource_type)
        .with_resource_name(r.resource_name.clone());
    match r.resource_type {
        TOPIC => describe_topic(broker, asked, &wanted, base, &r.resource_name),
        BROKER => describe_broker(broker, asked, &wanted, base, r.resource_name.as_str()),
        other => base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(message(format!(
                "Config resource type {other} is not served"
            ))),
    }
}

/// A topic's effective configs, or UNKNOWN_TOPIC_OR_PARTITION.
fn describe_topic(
    broker: &Broker,
    asked: &Describing,
    wanted: &WantedKeys,
    base: DescribeConfigsResult,
    name: &StrBytes,
) -> DescribeConfigsResult {
    let Some(meta) = broker.metadata.topic(name) else {
        return base
            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
            .with_error_message(message(format!("Topic '{}' does not exist", name.as_str())));
    };
    base.with_configs(
        TOPIC_CONFIGS
            .iter()
            .filter(|d| wanted.contains(d.name))
            .filter_map(|d| topic_entry(broker, asked, &meta.configs, d))
            .collect(),
    )
}

/// One topic config's effective value, with its synonyms (the topic override, the broker's
/// setting and the broker default behind it) when asked; `None` for a key without one.
fn topic_entry(
    broker: &Broker,
    asked: &Describing,
    overrides: &BTreeMap<String, String>,
    d: &TopicConfigDef,
) -> Option<DescribeConfigsResourceResult> {
    let (value, source, broker_key) = topic_config::effective(&broker.config, overrides, d.name)?;
    let mut synonyms = Vec::new();
    if asked.include_synonyms {
        if let Some(v) = overrides.get(d.name) {
            synonyms.push(synonym(d.name, v, ConfigSource::Topic));
        }
        if broker.config.is_set(broker_key) {
            synonyms.push(synonym(
                broker_key,
                broker.config.raw(broker_key),
                ConfigSource::StaticBroker,
            ));
        }
        if let Some(def) = ferry_config::broker_config::lookup_def(broker_key) {
            synonyms.push(synonym(broker_key, def.default, ConfigSource::Default));
        }
    }
    Some(entry(
        d.name,
        &value,
        source,
        false,
        d.ty,
        d.doc,
        asked.version,
        asked.include_documentation,
        synonyms,
    ))
}

/// This broker's static configs (read-only: ferry has no dynamic broker configs). The empty
/// name asks for the cluster-wide dynamic defaults, of which ferry has none; another broker's
/// id is an error.
fn describe_broker(
    broker: &Broker,
    asked: &Describing,
    wanted: &WantedKeys,
    base: DescribeConfigsResult,
    name: &str,
) -> DescribeConfigsResult {
    if name.is_empty() {
        return base;
    }
    if name != broker.node_id.to_string() {
        return base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(message(format!(
                "Unexpected broker id, expected {} but received {name}",
                broker.node_id
            )));
    }
    base.with_configs(
        BROKER_CONFIGS
            .iter()
            .filter(|d| wanted.contains(d.name))
            .map(|d| broker_entry(broker, asked, d))
            .collect(),
    )
}

/// One broker config's value: from the config file if set there, else its default.
fn broker_entry(
    broker: &Broker,
    asked: &Describing,
    d: &ConfigDef,
) -> DescribeConfigsResourceResult {
    let source = if broker.config.is_set(d.name) {
        ConfigSource::StaticBroker
    } else {
        ConfigSource::Default
    };
    let value = broker.config.raw(d.name);
    let synonyms = if asked.include_synonyms {
        vec![synonym(d.name, value, source)]
    } else {
        Vec::new()
    };
    // A secret (a `password` key) comes back without its value: `entry` sees to it.
    entry(
        d.name,
        value,
        source,
        true,
        d.ty,
        d.doc,
        asked.version,
        asked.include_documentation,
        synonyms,
    )
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source.code())
}

#[allow(clippy::too_many_arguments)]
fn entry(
    name: &str,
    value: &str,
    source: ConfigSource,
    read_only: bool,
    ty: ConfigType,
    doc: &str,
    version: i16,
    include_documentation: bool,
    synonyms: Vec<DescribeConfigsSynonym>,
) -> DescribeConfigsResourceResult {
    // A secret is described as Kafka does: sensitive, with no value, in its synonyms too.
    let sensitive = ty.is_sensitive();
    let synonyms = if sensitive {
        synonyms.into_iter().map(|s| s.with_value(None)).collect()
    } else {
        synonyms
    };
    let e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value((!sensitive).then(|| str_bytes(value)))
        .with_read_only(read_only)
        .with_is_sensitive(sensitive)
        .with_config_source(source.code())
        .with_synonyms(synonyms)
        .with_documentation(include_documentation.then(|| str_bytes(doc)));
    if version >= 3 {
        e.with_config_type(type_code(ty))
    } else {
        e
    }
}

/// Checks and stores a topic's complete new set of overrides.
fn apply(
    broker: &Broker,
    topic: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), TopicError> {
    topic_config::validate_all(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .map_err(|e| TopicError::new(ResponseError::InvalidConfig, e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    let meta = broker
        .metadata
        .set_configs(topic, configs)
        .map_err(|e| TopicError::new(crate::errors::metadata_error(&e), e.to_string()))?;
    let log_config = topic_config::log_config(&broker.config, &meta.configs);
    broker.replicas.update_topic_config(topic, &log_config);
    tracing::info!(topic, configs = ?meta.configs, "altered topic configs");
    Ok(())
}

/// Kafka's check of a config resource: `op` on the topic, or on the cluster for a broker.
fn config_denied(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
    op: AclOperation,
) -> Option<TopicError> {
    let (allowed, error) = match resource_type {
        TOPIC => (ctx.may_topic(broker, op, name), super::TOPIC_DENIED),
        BROKER => (
            ctx.may_cluster(broker, op),
            ResponseError::ClusterAuthorizationFailed,
        ),
        _ => (true, ResponseError::InvalidRequest),
    };
    (!allowed).then(|| TopicError::new(error, format!("not authorized to {op} this resource")))
}

/// The current overrides of a resource whose configs the request may alter.
fn resource_check(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &StrBytes,
) -> Result<BTreeMap<String, String>, TopicError> {
    if let Some(e) = config_denied(broker, ctx, resource_type, name, AclOperation::AlterConfigs) {
        return Err(e);
    }
    match resource_type {
        TOPIC => broker
            .metadata
            .topic(name)
            .map(|t| t.configs)
            .ok_or_else(|| {
                TopicError::new(
                    ResponseError::UnknownTopicOrPartition,
                    format!("Topic '{}' does not exist", name.as_str()),
                )
            }),
        BROKER => Err(TopicError::new(
            ResponseError::InvalidRequest,
            "ferry has no dynamic broker configs; change the config file and restart",
        )),
        other => Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("Config resource type {other} is not served"),
        )),
    }
}

pub fn alter_configs(
    broker: &Arc<Broker>,
    request: AlterConfigsRequest,
    ctx: &RequestContext,
) -> AlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let outcome =
                resource_check(broker, ctx, r.resource_type, &r.resource_name).and_then(|_| {
                    // AlterConfigs replaces the whole set of overrides.
                    let mut configs = BTreeMap::new();
                    for c in &r.configs {
                        if let Some(v) = &c.value {
                            configs.insert(c.name.to_string(), v.to_string());
                        }
                    }
                    apply(broker, &r.resource_name, configs, request.validate_only)
                });
            let result = AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            let result = match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(e.error.code())
                    .with_error_message(message(e.message)),
            };
            broker.metrics.error("AlterConfigs", result.error_code);
            result
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

pub fn incremental_alter_configs(
    broker: &Arc<Broker>,
    request: IncrementalAlterConfigsRequest,
    ctx: &RequestContext,
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let outcome = resource_check(broker, ctx, r.resource_type, &r.resource_name).and_then(|mut configs| {
                for c in &r.configs {
                    let name = c.name.to_string();
                    let def = topic_config::lookup(&name).ok_or_else(|| {
                        TopicError::new(ResponseError::InvalidConfig, format!("unknown topic config `{name}`"))
                    })?;
                    let value = c.value.as_ref().map(|v| v.to_string());
                    match (c.config_operation, value) {
                        (OP_SET, Some(v)) => {
                            configs.insert(name, v);
                        }
                        (OP_DELETE, _) => {
                            configs.remove(&name);
                        }
                        (OP_APPEND | OP_SUBTRACT, Some(v)) if def.ty == ConfigType::List => {
                            let current = topic_config::effective(&broker.config, &configs, &name)
                                .map(|(v, _, _)| v)
                                .unwrap_or_default();
                            let mut items: Vec<String> =
                                current.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
                            for item in v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()) {
                                if c.config_operation == OP_APPEND {
                                    if !items.contains(&item) {
                                        items.push(item);
                                    }
                                } else {
                                    items.retain(|i| *i != item);
                                }
                            }
                            configs.insert(name, items.join(","));
                        }
                        (OP_APPEND | OP_SUBTRACT, _) => {
                            return Err(TopicError::new(
                                ResponseError::InvalidConfig,
                                format!("Config value append or subtract is not allowed for config key `{name}` of a non-list type"),
                            ))
                        }
                        (OP_SET, None) => {
                            return Err(TopicError::new(ResponseError::InvalidConfig, format!("Null value not supported for `{name}`")))
                        }
                        (op, _) => {
                            return Err(TopicError::new(ResponseError::InvalidRequest, format!("unknown config operation {op}")))
                        }
                    }
                }
                apply(broker, &r.resource_name, configs, request.validate_only)
            });
            let result = IncrementalResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            let result = match outcome {
                Ok(()) => result,
                Err(e) => result.with_error_code(e.error.code()).with_error_message(message(e.message)),
            };
            broker.metrics.error("IncrementalAlterConfigs", result.error_code);
            result
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
