//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs for topics (and describing the
//! broker's static configs; ferry has no dynamic broker configs yet).

use std::collections::BTreeMap;
use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse as IncrementalResult;
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{message, str_bytes};
use crate::broker::{Broker, TopicError};
use ferry_config::broker_config::{ConfigType, BROKER_CONFIGS};
use ferry_config::topic_config::{self, ConfigSource, TOPIC_CONFIGS};

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
    }
}

pub fn describe_configs(
    broker: &Arc<Broker>,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let keys: Option<Vec<String>> = r
                .configuration_keys
                .as_ref()
                .map(|ks| ks.iter().map(|k| k.to_string()).collect());
            let wanted = |name: &str| keys.as_ref().is_none_or(|ks| ks.iter().any(|k| k == name));
            let base = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let result = match r.resource_type {
                TOPIC => match broker.metadata.topic(&r.resource_name) {
                    None => base
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(message(format!(
                            "Topic '{}' does not exist",
                            r.resource_name.as_str()
                        ))),
                    Some(meta) => base.with_configs(
                        TOPIC_CONFIGS
                            .iter()
                            .filter(|d| wanted(d.name))
                            .filter_map(|d| {
                                let (value, source, broker_key) =
                                    topic_config::effective(&broker.config, &meta.configs, d.name)?;
                                let mut synonyms = Vec::new();
                                if request.include_synonyms {
                                    if let Some(v) = meta.configs.get(d.name) {
                                        synonyms.push(synonym(d.name, v, ConfigSource::Topic));
                                    }
                                    if broker.config.is_set(broker_key) {
                                        synonyms.push(synonym(
                                            broker_key,
                                            broker.config.raw(broker_key),
                                            ConfigSource::StaticBroker,
                                        ));
                                    }
                                    if let Some(def) =
                                        ferry_config::broker_config::lookup_def(broker_key)
                                    {
                                        synonyms.push(synonym(
                                            broker_key,
                                            def.default,
                                            ConfigSource::Default,
                                        ));
                                    }
                                }
                                Some(entry(
                                    d.name,
                                    &value,
                                    source,
                                    false,
                                    d.ty,
                                    d.doc,
                                    version,
                                    request.include_documentation,
                                    synonyms,
                                ))
                            })
                            .collect(),
                    ),
                },
                BROKER => {
                    let name = r.resource_name.as_str();
                    if name.is_empty() {
                        // Cluster-wide dynamic defaults: ferry has none.
                        base
                    } else if name != broker.node_id.to_string() {
                        base.with_error_code(ResponseError::InvalidRequest.code())
                            .with_error_message(message(format!(
                                "Unexpected broker id, expected {} but received {name}",
                                broker.node_id
                            )))
                    } else {
                        base.with_configs(
                            BROKER_CONFIGS
                                .iter()
                                .filter(|d| wanted(d.name))
                                .map(|d| {
                                    let source = if broker.config.is_set(d.name) {
                                        ConfigSource::StaticBroker
                                    } else {
                                        ConfigSource::Default
                                    };
                                    let value = broker.config.raw(d.name);
                                    let synonyms = if request.include_synonyms {
                                        vec![synonym(d.name, value, source)]
                                    } else {
                                        Vec::new()
                                    };
                                    entry(
                                        d.name,
                                        value,
                                        source,
                                        true,
                                        d.ty,
                                        d.doc,
                                        version,
                                        request.include_documentation,
                                        synonyms,
                                    )
                                })
                                .collect(),
                        )
                    }
                }
                other => base
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(message(format!(
                        "Config resource type {other} is not served"
                    ))),
            };
            broker.metrics.error("DescribeConfigs", result.error_code);
            result
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
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
    let e = DescribeConfigsResourceResult::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_read_only(read_only)
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

fn resource_check(
    broker: &Broker,
    resource_type: i8,
    name: &StrBytes,
) -> Result<BTreeMap<String, String>, TopicError> {
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

pub fn alter_configs(broker: &Arc<Broker>, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let outcome =
                resource_check(broker, r.resource_type, &r.resource_name).and_then(|_| {
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
) -> IncrementalAlterConfigsResponse {
    let responses = request
        .resources
        .into_iter()
        .map(|r| {
            let outcome = resource_check(broker, r.resource_type, &r.resource_name).and_then(|mut configs| {
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
