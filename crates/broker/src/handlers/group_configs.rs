//! Config resources of groups: GROUP (Kafka 4.0's group configs, KIP-848). A group's configs
//! override the broker's consumer-protocol session timeout and heartbeat interval for that
//! group; they live in the controller quorum's metadata ([`MetadataRecord`]
//! `AlterGroupConfigs`), and every broker hands them to its group coordinator as it follows the
//! image ([`Broker::follow_group_configs`]). The group need not exist.
//!
//! [`MetadataRecord`]: ferry_cluster::MetadataRecord

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};

use super::configs::{synonym, Describing, WantedKeys};
use super::{message, str_bytes};
use crate::broker::{Broker, TopicError};
use ferry_config::group_config::{self, GROUP_CONFIGS};
use ferry_config::ConfigSource;

/// Kafka's INT type code in DescribeConfigs v3+.
const INT_TYPE: i8 = 3;

fn check_name(name: &str) -> Result<(), TopicError> {
    if name.is_empty() {
        return Err(TopicError::new(
            ResponseError::InvalidRequest,
            "Group name can't be empty.",
        ));
    }
    Ok(())
}

/// Describes a GROUP resource: each group key with the group's value, else the broker's.
pub(super) fn describe_group(
    broker: &Broker,
    asked: &Describing,
    wanted: &WantedKeys,
    base: DescribeConfigsResult,
    name: &str,
) -> DescribeConfigsResult {
    if let Err(e) = check_name(name) {
        return base
            .with_error_code(e.error.code())
            .with_error_message(message(e.message));
    }
    let image = broker.metadata.image();
    let overrides = image.group_configs.get(name).cloned().unwrap_or_default();
    let configs = GROUP_CONFIGS
        .iter()
        .filter(|d| wanted.contains(d.name))
        .map(|d| {
            let (value, source) = group_config::effective(&broker.config, &overrides, d);
            let mut synonyms = Vec::new();
            if asked.include_synonyms {
                if let Some(v) = overrides.get(d.name) {
                    synonyms.push(synonym(d.name, v, ConfigSource::Group));
                }
                let (v, s) = broker.config.current(d.default_key);
                synonyms.push(synonym(d.default_key, &v, s));
            }
            let e = DescribeConfigsResourceResult::default()
                .with_name(str_bytes(d.name))
                .with_value(Some(str_bytes(&value)))
                .with_read_only(false)
                .with_is_sensitive(false)
                .with_config_source(source.code())
                .with_synonyms(synonyms)
                .with_documentation(asked.include_documentation.then(|| str_bytes(d.doc)));
            if asked.version >= 3 {
                e.with_config_type(INT_TYPE)
            } else {
                e
            }
        })
        .collect();
    base.with_configs(configs)
}

/// The current configs of a GROUP resource.
pub(super) fn current(broker: &Broker, name: &str) -> Result<BTreeMap<String, String>, TopicError> {
    check_name(name)?;
    Ok(broker
        .metadata
        .image()
        .group_configs
        .get(name)
        .cloned()
        .unwrap_or_default())
}

/// The effective value of a group key, for IncrementalAlterConfigs' APPEND and SUBTRACT (which
/// Kafka refuses on these INT keys).
pub(super) fn current_value(
    broker: &Broker,
    configs: &BTreeMap<String, String>,
    name: &str,
) -> Option<String> {
    let def = group_config::lookup(name)?;
    Some(group_config::effective(&broker.config, configs, def).0)
}

/// Checks and stores a GROUP resource's complete new set of configs.
pub(super) fn apply(
    broker: &Broker,
    name: &str,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), TopicError> {
    check_name(name)?;
    for (k, v) in &configs {
        group_config::validate(&broker.config, k, v)
            .map_err(|m| TopicError::new(ResponseError::InvalidConfig, m))?;
    }
    if validate_only {
        return Ok(());
    }
    broker
        .metadata
        .set_group_configs(name, configs.clone())
        .map_err(|e| TopicError::new(crate::errors::metadata_error(&e), e.to_string()))?;
    broker.follow_group_configs(&broker.metadata.image());
    tracing::info!(group = %name, ?configs, "altered group configs");
    Ok(())
}
