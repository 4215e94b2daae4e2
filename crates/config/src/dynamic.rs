//! Dynamic broker configs: the broker keys Kafka lets operators change at run time
//! (AlterConfigs / IncrementalAlterConfigs on a BROKER resource), per broker (`"1"`) or as the
//! cluster-wide default (`""`).
//!
//! Owns: which keys are dynamic ([`is_dynamic`]), how a dynamic value is checked, and the
//! current dynamic layer of one broker ([`DynamicConfigs`]). The values live in the controller
//! quorum's metadata image (so they survive restarts and reach every broker); each broker copies
//! its own and the cluster default into the [`DynamicConfigs`] its [`BrokerConfig`] shares, and
//! every lookup of a topic default then sees them (see [`BrokerConfig::topic_default`]).
//!
//! Precedence, as Kafka's: a per-broker value, then the cluster default, then the config file,
//! then the built-in default.

use std::collections::BTreeMap;

use crate::broker_config::{lookup_def, BrokerConfig, ConfigError};
use crate::topic_config::{TopicDefault, TOPIC_CONFIGS};

/// The dynamic values one broker follows: its own (`per_broker`) and the cluster default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicConfigs {
    pub per_broker: BTreeMap<String, String>,
    pub cluster_default: BTreeMap<String, String>,
}

/// Broker keys that are dynamic besides the topic defaults.
const OTHER_DYNAMIC_KEYS: &[&str] = &["num.partitions"];

/// Whether a broker key can be changed at run time: the broker key behind each topic config
/// (the first of its synonyms, as Kafka's `DynamicLogConfig`: `log.retention.ms`,
/// `log.segment.bytes`, `log.cleaner.delete.retention.ms`, ...) and `num.partitions`.
pub fn is_dynamic(key: &str) -> bool {
    OTHER_DYNAMIC_KEYS.contains(&key)
        || TOPIC_CONFIGS.iter().any(|t| match t.default {
            TopicDefault::Broker(synonyms) => synonyms.first().is_some_and(|s| s.key == key),
            TopicDefault::Fixed(_) => false,
        })
}

/// Checks one dynamic value: a known key that may change at run time, with a value of its type
/// and range (the checks of the config file). The message is what INVALID_CONFIG carries.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    if lookup_def(key).is_none() {
        return Err(format!("Unknown broker config name: {key}"));
    }
    if !is_dynamic(key) {
        return Err(format!(
            "Cannot update these configs dynamically: Set({key})"
        ));
    }
    let mut scratch = BrokerConfig::default();
    scratch.set(key, value).map_err(|e| match e {
        ConfigError::BadValue { detail, .. } => {
            format!("Invalid value {value} for configuration {key}: {detail}")
        }
        other => other.to_string(),
    })
}

/// The name of a BROKER config resource: `""` (the cluster default) or a broker id.
pub fn validate_resource_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.parse::<i32>().is_ok_and(|id| id >= 0) {
        Ok(())
    } else {
        Err(format!("Invalid broker name {name}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_defaults_and_num_partitions_are_dynamic() {
        for key in [
            "log.retention.ms",
            "log.retention.bytes",
            "log.segment.bytes",
            "log.cleaner.delete.retention.ms",
            "log.cleaner.min.cleanable.ratio",
            "num.partitions",
            "message.max.bytes",
        ] {
            assert!(is_dynamic(key), "{key}");
            validate(key, "100").unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        for key in ["log.retention.hours", "node.id", "log.dirs"] {
            assert!(!is_dynamic(key), "{key}");
            assert!(validate(key, "1").unwrap_err().contains("dynamically"));
        }
        assert!(validate("log.retention.ms", "soon")
            .unwrap_err()
            .contains("log.retention.ms"));
        assert!(validate("no.such.key", "1")
            .unwrap_err()
            .contains("Unknown"));
        assert!(validate_resource_name("").is_ok());
        assert!(validate_resource_name("3").is_ok());
        assert!(validate_resource_name("x").is_err());
    }

    #[test]
    fn dynamic_values_win_over_the_file_per_broker_first() {
        let c = BrokerConfig::parse("\"log.retention.ms\" = 5000").unwrap();
        let syn = match crate::topic_config::lookup("retention.ms").unwrap().default {
            TopicDefault::Broker(s) => s,
            TopicDefault::Fixed(_) => unreachable!(),
        };
        use crate::broker_config::ConfigSource::*;
        assert_eq!(c.topic_default(syn).unwrap(), ("5000".into(), StaticBroker));
        let mut d = DynamicConfigs::default();
        d.cluster_default
            .insert("log.retention.ms".into(), "7000".into());
        c.set_dynamic(d.clone());
        assert_eq!(
            c.topic_default(syn).unwrap(),
            ("7000".into(), DynamicDefaultBroker)
        );
        // A clone shares the dynamic layer: every holder sees a change.
        let shared = c.clone();
        d.per_broker
            .insert("log.retention.ms".into(), "9000".into());
        c.set_dynamic(d);
        assert_eq!(
            shared.topic_default(syn).unwrap(),
            ("9000".into(), DynamicBroker)
        );
        c.set_dynamic(DynamicConfigs::default());
        assert_eq!(c.topic_default(syn).unwrap().1, StaticBroker);
    }
}
