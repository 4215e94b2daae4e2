//! DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: topics here, BROKER and
//! BROKER_LOGGER resources in [`super::broker_configs`], GROUP resources in
//! [`super::group_configs`].
//!
//! Topic configs are checked as Kafka's `LogConfig` checks them (INVALID_CONFIG with Kafka's
//! message), stored as the topic's complete set of overrides in the controller quorum's
//! metadata, and described with Kafka's synonyms: the override, then the broker keys behind the
//! default in Kafka's order (dynamic per broker, dynamic cluster default, the file, the built-in
//! default). Unlike Kafka, the broker synonyms are listed even when the first broker key is not
//! set (Kafka drops everything before it, so `retention.ms` would show no synonym when only
//! `log.retention.hours` is set).

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
use ferry_config::broker_config::ConfigType;
use ferry_config::topic_config::{
    self, ConfigSource, Effect, TopicConfigDef, TopicDefault, TOPIC_CONFIGS,
};

use super::{broker_configs, group_configs};

const TOPIC: i8 = 2;
const BROKER: i8 = 4;
const BROKER_LOGGER: i8 = 8;
const GROUP: i8 = 32;

pub(super) const OP_SET: i8 = 0;
pub(super) const OP_DELETE: i8 = 1;
pub(super) const OP_APPEND: i8 = 2;
pub(super) const OP_SUBTRACT: i8 = 3;

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
pub(super) struct Describing {
    pub version: i16,
    pub include_synonyms: bool,
    pub include_documentation: bool,
}

/// The config names a resource asks for: all of them when it lists none.
pub(super) struct WantedKeys(Option<Vec<String>>);

impl WantedKeys {
    pub fn contains(&self, name: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|ks| ks.iter().any(|k| k == name))
    }
}

/// Describes one resource: a topic, this broker, a group, or an error for any other.
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
        BROKER => {
            broker_configs::describe_broker(broker, asked, &wanted, base, r.resource_name.as_str())
        }
        BROKER_LOGGER => {
            broker_configs::describe_logger(broker, &wanted, base, r.resource_name.as_str())
        }
        GROUP => {
            group_configs::describe_group(broker, asked, &wanted, base, r.resource_name.as_str())
        }
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
            .filter(|d| d.effect != Effect::Removed && wanted.contains(d.name))
            .filter_map(|d| topic_entry(broker, asked, &meta.configs, d))
            .collect(),
    )
}

/// One topic config's effective value, with its synonyms (the topic override, then the broker
/// keys behind the default in Kafka's order) when asked; `None` for a key without one.
fn topic_entry(
    broker: &Broker,
    asked: &Describing,
    overrides: &BTreeMap<String, String>,
    d: &TopicConfigDef,
) -> Option<DescribeConfigsResourceResult> {
    let (value, source) = topic_config::effective(&broker.config, overrides, d.name)?;
    let mut synonyms = Vec::new();
    if asked.include_synonyms {
        if let Some(v) = overrides.get(d.name) {
            synonyms.push(synonym(d.name, v, ConfigSource::Topic));
        }
        if let TopicDefault::Broker(keys) = d.default {
            let keys: Vec<&str> = keys.iter().map(|s| s.key).collect();
            for (k, v, s) in broker.config.synonyms(&keys) {
                synonyms.push(synonym(&k, &v, s));
            }
        }
    }
    Some(entry(
        d.name, &value, source, false, d.ty, d.doc, asked, synonyms,
    ))
}

pub(super) fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source.code())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn entry(
    name: &str,
    value: &str,
    source: ConfigSource,
    read_only: bool,
    ty: ConfigType,
    doc: &str,
    asked: &Describing,
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
        .with_documentation(asked.include_documentation.then(|| str_bytes(doc)));
    if asked.version >= 3 {
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
    let old = broker
        .metadata
        .topic(topic)
        .map(|t| t.configs)
        .unwrap_or_default();
    topic_config::validate_all(configs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .and_then(|()| topic_config::validate_with_broker(&broker.config, &configs))
        .and_then(|()| topic_config::validate_change(&broker.config, &old, &configs))
        .map_err(|e| TopicError::new(ResponseError::InvalidConfig, e.to_string()))?;
    if validate_only {
        return Ok(());
    }
    let configs = topic_config::stored(configs);
    let meta = broker
        .metadata
        .set_configs(topic, configs)
        .map_err(|e| TopicError::new(crate::errors::metadata_error(&e), e.to_string()))?;
    let log_config = topic_config::log_config(&broker.config, &meta.configs);
    broker.replicas.update_topic_config(topic, &log_config);
    tracing::info!(topic, configs = ?meta.configs, "altered topic configs");
    Ok(())
}

/// Kafka's check of a config resource: `op` on the topic, on the cluster for a broker, on the
/// group for a group.
fn config_denied(
    broker: &Broker,
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
    op: AclOperation,
) -> Option<TopicError> {
    let (allowed, error) = match resource_type {
        TOPIC => (ctx.may_topic(broker, op, name), super::TOPIC_DENIED),
        BROKER | BROKER_LOGGER => (
            ctx.may_cluster(broker, op),
            ResponseError::ClusterAuthorizationFailed,
        ),
        GROUP => (
            ctx.may_group(broker, op, name),
            ResponseError::GroupAuthorizationFailed,
        ),
        _ => (true, ResponseError::InvalidRequest),
    };
    (!allowed).then(|| TopicError::new(error, format!("not authorized to {op} this resource")))
}

/// The current overrides of a resource whose configs the request may alter: a topic's, a
/// BROKER resource's dynamic configs, or a GROUP's configs.
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
        BROKER => broker_configs::current_dynamic(broker, name),
        GROUP => group_configs::current(broker, name),
        other => Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!("Config resource type {other} is not served"),
        )),
    }
}

/// Stores the complete new set of configs of a TOPIC, BROKER or GROUP resource.
fn apply_resource(
    broker: &Broker,
    resource_type: i8,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), TopicError> {
    match resource_type {
        BROKER => broker_configs::apply_dynamic(broker, name, configs, validate_only),
        GROUP => group_configs::apply(broker, name, configs, validate_only),
        _ => apply(broker, name, configs, validate_only),
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
            let outcome = if r.resource_type == BROKER_LOGGER {
                Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    "AlterConfigs does not support BROKER_LOGGER resources; use IncrementalAlterConfigs",
                ))
            } else {
                resource_check(broker, ctx, r.resource_type, &r.resource_name).and_then(|_| {
                    // AlterConfigs replaces the whole set of overrides.
                    let mut configs = BTreeMap::new();
                    for c in &r.configs {
                        if let Some(v) = &c.value {
                            configs.insert(c.name.to_string(), v.to_string());
                        }
                    }
                    apply_resource(
                        broker,
                        r.resource_type,
                        &r.resource_name,
                        configs,
                        request.validate_only,
                    )
                })
            };
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

/// One IncrementalAlterConfigs operation on `configs` (a topic's overrides or a BROKER
/// resource's dynamic configs). DELETE of any key succeeds, whether set, at its default or
/// unknown, as in Kafka (MirrorMaker 2's config sync deletes keys it does not copy).
fn apply_op(
    configs: &mut BTreeMap<String, String>,
    name: String,
    op: i8,
    value: Option<String>,
    current: impl Fn(&BTreeMap<String, String>, &str) -> Option<(String, ConfigType)>,
) -> Result<(), TopicError> {
    match (op, value) {
        (OP_DELETE, _) => {
            configs.remove(&name);
        }
        (OP_SET, Some(v)) => {
            configs.insert(name, v);
        }
        (OP_SET, None) => {
            return Err(TopicError::new(
                ResponseError::InvalidConfig,
                format!("Null value not supported for : {name}"),
            ))
        }
        (OP_APPEND | OP_SUBTRACT, Some(v)) => {
            let Some((now, ty)) = current(configs, &name) else {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!("Unknown config name: {name}"),
                ));
            };
            if ty != ConfigType::List {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!("Config value append is not allowed for config key: {name}"),
                ));
            }
            let split = |s: &str| -> Vec<String> {
                s.split(',')
                    .map(|i| i.trim().to_string())
                    .filter(|i| !i.is_empty())
                    .collect()
            };
            let mut items = split(&now);
            for item in split(&v) {
                if op == OP_APPEND {
                    if !items.contains(&item) {
                        items.push(item);
                    }
                } else {
                    items.retain(|i| *i != item);
                }
            }
            configs.insert(name, items.join(","));
        }
        (OP_APPEND | OP_SUBTRACT, None) => {
            return Err(TopicError::new(
                ResponseError::InvalidConfig,
                format!("Null value not supported for : {name}"),
            ))
        }
        (op, _) => {
            return Err(TopicError::new(
                ResponseError::InvalidRequest,
                format!("Unknown config operation {op}"),
            ))
        }
    }
    Ok(())
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
            let ops: Vec<(String, i8, Option<String>)> = r
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.config_operation,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect();
            let outcome = if r.resource_type == BROKER_LOGGER {
                match config_denied(
                    broker,
                    ctx,
                    BROKER_LOGGER,
                    &r.resource_name,
                    AclOperation::AlterConfigs,
                ) {
                    Some(e) => Err(e),
                    None => broker_configs::alter_loggers(
                        broker,
                        &r.resource_name,
                        &ops,
                        request.validate_only,
                    ),
                }
            } else {
                resource_check(broker, ctx, r.resource_type, &r.resource_name).and_then(
                    |mut configs| {
                        let kind = r.resource_type;
                        let current = |c: &BTreeMap<String, String>, name: &str| {
                            if kind == TOPIC {
                                let def = topic_config::lookup(name)?;
                                topic_config::effective(&broker.config, c, name)
                                    .map(|(v, _)| (v, def.ty))
                            } else if kind == GROUP {
                                group_configs::current_value(broker, c, name)
                                    .map(|v| (v, ConfigType::Int))
                            } else {
                                let def = ferry_config::broker_config::lookup_def(name)?;
                                let v = c
                                    .get(name)
                                    .cloned()
                                    .unwrap_or_else(|| broker.config.current(name).0);
                                Some((v, def.ty))
                            }
                        };
                        for (name, op, value) in &ops {
                            apply_op(&mut configs, name.clone(), *op, value.clone(), current)?;
                        }
                        apply_resource(
                            broker,
                            r.resource_type,
                            &r.resource_name,
                            configs,
                            request.validate_only,
                        )
                    },
                )
            };
            let result = IncrementalResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name);
            let result = match outcome {
                Ok(()) => result,
                Err(e) => result
                    .with_error_code(e.error.code())
                    .with_error_message(message(e.message)),
            };
            broker
                .metrics
                .error("IncrementalAlterConfigs", result.error_code);
            result
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
