//! Config resources of brokers: BROKER (the static file, with the dynamic configs kept in the
//! controller quorum's metadata over it) and BROKER_LOGGER (log levels, [`crate::log_levels`]).
//!
//! A BROKER resource is `""` (the cluster-wide dynamic defaults) or a broker id. Altering one
//! proposes its complete new set of dynamic configs to the controller ([`MetadataRecord`]
//! `AlterBrokerConfigs`); every broker follows the image ([`Broker::follow_broker_configs`]), so
//! topics without an override take a new default on every broker and after restarts.
//!
//! [`MetadataRecord`]: ferry_cluster::MetadataRecord

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};

use super::configs::{entry, synonym, Describing, WantedKeys};
use super::message;
use crate::broker::{Broker, TopicError};
use ferry_config::broker_config::{ConfigDef, ConfigSource, BROKER_CONFIGS};
use ferry_config::dynamic;

/// The broker keys Kafka describes as synonyms of `name`, in its order
/// (`DynamicBrokerConfig.brokerConfigSynonyms`).
fn synonym_keys(name: &str) -> &[&str] {
    const RETENTION: &[&str] = &[
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ];
    const ROLL: &[&str] = &["log.roll.ms", "log.roll.hours"];
    const JITTER: &[&str] = &["log.roll.jitter.ms", "log.roll.jitter.hours"];
    const FLUSH: &[&str] = &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"];
    match name {
        "log.retention.ms" | "log.retention.minutes" | "log.retention.hours" => RETENTION,
        "log.roll.ms" | "log.roll.hours" => ROLL,
        "log.roll.jitter.ms" | "log.roll.jitter.hours" => JITTER,
        "log.flush.interval.ms" => FLUSH,
        _ => BROKER_CONFIGS
            .iter()
            .find(|d| d.name == name)
            .map(|d| std::slice::from_ref(&d.name))
            .unwrap_or_default(),
    }
}

/// Describes a BROKER resource: this broker's configs, or the cluster-wide dynamic defaults for
/// the empty name; another broker's id is an error, as in Kafka.
pub(super) fn describe_broker(
    broker: &Broker,
    asked: &Describing,
    wanted: &WantedKeys,
    base: DescribeConfigsResult,
    name: &str,
) -> DescribeConfigsResult {
    let dynamic = broker.config.dynamic();
    if name.is_empty() {
        let defaults = &dynamic.cluster_default;
        let configs = BROKER_CONFIGS
            .iter()
            .filter(|d| defaults.contains_key(d.name) && wanted.contains(d.name))
            .map(|d| broker_entry(broker, asked, d, false))
            .chain(custom_entries(
                asked,
                wanted,
                [(defaults, ConfigSource::DynamicDefaultBroker)],
            ))
            .collect();
        return base.with_configs(configs);
    }
    if name != broker.node_id.to_string() {
        return base
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(message(format!(
                "Unexpected broker id, expected {} or empty string, but received {name}",
                broker.node_id
            )));
    }
    let levels = [
        (&dynamic.per_broker, ConfigSource::DynamicBroker),
        (&dynamic.cluster_default, ConfigSource::DynamicDefaultBroker),
    ];
    base.with_configs(
        BROKER_CONFIGS
            .iter()
            .filter(|d| wanted.contains(d.name))
            .map(|d| broker_entry(broker, asked, d, true))
            .chain(custom_entries(asked, wanted, levels))
            .collect(),
    )
}

/// The custom keys set dynamically ([`dynamic::is_custom`]), each once, from the first of
/// `levels` that holds it: described as Kafka describes a key it does not declare, sensitive
/// (no value), of unknown type (0), and changeable.
fn custom_entries<'a, const N: usize>(
    asked: &'a Describing,
    wanted: &'a WantedKeys,
    levels: [(&'a BTreeMap<String, String>, ConfigSource); N],
) -> impl Iterator<Item = DescribeConfigsResourceResult> + 'a {
    let mut found: BTreeMap<&str, ConfigSource> = BTreeMap::new();
    for (configs, source) in levels {
        for key in configs.keys().filter(|k| dynamic::is_custom(k)) {
            found.entry(key.as_str()).or_insert(source);
        }
    }
    found
        .into_iter()
        .filter(|(key, _)| wanted.contains(key))
        .map(|(key, source)| {
            let synonyms = if asked.include_synonyms {
                vec![synonym(key, "", source).with_value(None)]
            } else {
                Vec::new()
            };
            DescribeConfigsResourceResult::default()
                .with_name(super::str_bytes(key))
                .with_value(None)
                .with_read_only(false)
                .with_is_sensitive(true)
                .with_config_source(source.code())
                .with_synonyms(synonyms)
        })
}

/// One broker config: its value with the dynamic layer over the file, the source of that value,
/// and its synonyms in Kafka's order (per-broker and default dynamic values, the file, the
/// built-in default). The cluster-default resource lists only the dynamic defaults.
fn broker_entry(
    broker: &Broker,
    asked: &Describing,
    d: &ConfigDef,
    per_broker: bool,
) -> DescribeConfigsResourceResult {
    let all = broker.config.synonyms(synonym_keys(d.name));
    // Kafka drops synonyms before the described key itself (e.g. `log.retention.ms` when
    // `log.retention.hours` is described).
    let all: Vec<_> = all
        .into_iter()
        .skip_while(|(k, _, _)| k != d.name)
        .filter(|(_, _, s)| per_broker || *s == ConfigSource::DynamicDefaultBroker)
        .collect();
    let source = all.first().map_or(ConfigSource::Default, |(_, _, s)| *s);
    let value = if per_broker {
        broker.config.current(d.name).0
    } else {
        all.first().map(|(_, v, _)| v.clone()).unwrap_or_default()
    };
    let synonyms = if asked.include_synonyms {
        all.iter().map(|(k, v, s)| synonym(k, v, *s)).collect()
    } else {
        Vec::new()
    };
    // A secret (a `password` key) comes back without its value: `entry` sees to it.
    entry(
        d.name,
        &value,
        source,
        !dynamic::is_dynamic(d.name),
        d.ty,
        d.doc,
        asked,
        synonyms,
    )
}

/// Describes a BROKER_LOGGER resource: every logger and its level.
pub(super) fn describe_logger(
    broker: &Broker,
    wanted: &WantedKeys,
    base: DescribeConfigsResult,
    name: &str,
) -> DescribeConfigsResult {
    if let Err(e) = own_broker(broker, name) {
        return base
            .with_error_code(e.error.code())
            .with_error_message(message(e.message));
    }
    let loggers = crate::log_levels::current()
        .map(|l| l.loggers())
        .unwrap_or_default();
    base.with_configs(
        loggers
            .into_iter()
            .filter(|(n, _)| wanted.contains(n))
            .map(|(n, level)| {
                DescribeConfigsResourceResult::default()
                    .with_name(super::str_bytes(&n))
                    .with_value(Some(super::str_bytes(&level)))
                    .with_config_source(ConfigSource::BrokerLogger.code())
                    .with_read_only(false)
                    .with_is_sensitive(false)
            })
            .collect(),
    )
}

/// A BROKER_LOGGER resource names this broker.
fn own_broker(broker: &Broker, name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "Broker id must not be empty",
        ));
    }
    if name != broker.node_id.to_string() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            format!(
                "Unexpected broker id, expected {} but received {name}",
                broker.node_id
            ),
        ));
    }
    Ok(())
}

/// The current dynamic configs of a BROKER resource (`""` or a broker id).
pub(super) fn current_dynamic(
    broker: &Broker,
    name: &str,
) -> Result<BTreeMap<String, String>, TopicError> {
    dynamic::validate_resource_name(name)
        .map_err(|m| TopicError::new(ResponseError::InvalidRequest, m))?;
    Ok(broker
        .metadata
        .image()
        .broker_configs
        .get(name)
        .cloned()
        .unwrap_or_default())
}

/// Checks and stores a BROKER resource's complete new set of dynamic configs, and applies it
/// here at once (the other brokers follow the image).
pub(super) fn apply_dynamic(
    broker: &Broker,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), TopicError> {
    for (k, v) in &configs {
        dynamic::validate(k, v).map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))?;
    }
    if validate_only {
        return Ok(());
    }
    broker
        .metadata
        .set_broker_configs(name, configs.clone())
        .map_err(|e| TopicError::new(crate::errors::metadata_error(&e), e.to_string()))?;
    broker.follow_broker_configs(&broker.metadata.image());
    // Custom keys may hold anything, secrets among them: their values are not logged.
    let shown: BTreeMap<&str, &str> = configs
        .iter()
        .map(|(k, v)| {
            let v = if dynamic::is_custom(k) {
                "(hidden)"
            } else {
                v.as_str()
            };
            (k.as_str(), v)
        })
        .collect();
    tracing::info!(resource = %name, configs = ?shown, "altered dynamic broker configs");
    Ok(())
}

/// Applies IncrementalAlterConfigs operations to a BROKER_LOGGER resource: SET and DELETE of
/// loggers' levels (Kafka refuses APPEND and SUBTRACT here).
pub(super) fn alter_loggers(
    broker: &Broker,
    name: &str,
    ops: &[(String, i8, Option<String>)],
    validate_only: bool,
) -> Result<(), TopicError> {
    own_broker(broker, name)?;
    let mut changes = Vec::new();
    for (logger, op, value) in ops {
        match (*op, value) {
            (super::configs::OP_SET, Some(level)) => {
                changes.push((logger.clone(), Some(level.clone())))
            }
            (super::configs::OP_DELETE, _) => changes.push((logger.clone(), None)),
            (super::configs::OP_SET, None) => {
                return Err(TopicError::new(
                    ResponseError::InvalidConfig,
                    format!("Null value not supported for logger {logger}"),
                ))
            }
            (op, _) => {
                return Err(TopicError::new(
                    ResponseError::InvalidRequest,
                    format!(
                        "{} operation is not allowed for the BROKER_LOGGER resource",
                        op_name(op)
                    ),
                ))
            }
        }
    }
    crate::log_levels::alter(&changes, validate_only)
        .map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))
}

fn op_name(op: i8) -> String {
    match op {
        super::configs::OP_APPEND => "APPEND".into(),
        super::configs::OP_SUBTRACT => "SUBTRACT".into(),
        other => format!("Operation {other}"),
    }
}
