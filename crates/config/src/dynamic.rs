//! Dynamic broker configs: the broker keys Kafka lets operators change at run time
//! (AlterConfigs / IncrementalAlterConfigs on a BROKER resource), per broker (`"1"`) or as the
//! cluster-wide default (`""`).
//!
//! Owns: which keys are dynamic ([`is_dynamic`]), how a dynamic value is checked, the
//! current dynamic layer of one broker ([`DynamicConfigs`]), the lookups that see it
//! ([`BrokerConfig::current`], [`BrokerConfig::topic_default`], [`BrokerConfig::synonyms`]) and
//! the [`ConfigSource`] each value is described with. The values live in the controller
//! quorum's metadata image (so they survive restarts and reach every broker); each broker copies
//! its own and the cluster default into the [`DynamicConfigs`] its [`BrokerConfig`] shares, and
//! every lookup of a topic default then sees them (see [`BrokerConfig::topic_default`]).
//!
//! Precedence, as Kafka's: a per-broker value, then the cluster default, then the config file,
//! then the built-in default.

use std::collections::BTreeMap;

use crate::broker_config::{lookup_def, scale, BrokerConfig, ConfigError};
use crate::topic_config::{Synonym, TopicDefault, TOPIC_CONFIGS};

/// Where a config value comes from, as DescribeConfigs reports it (Kafka's `ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (DYNAMIC_TOPIC_CONFIG = 1).
    Topic,
    /// Set dynamically for this broker (DYNAMIC_BROKER_CONFIG = 2).
    DynamicBroker,
    /// Set dynamically as the cluster default (DYNAMIC_DEFAULT_BROKER_CONFIG = 3).
    DynamicDefaultBroker,
    /// Set in the broker's config file (STATIC_BROKER_CONFIG = 4).
    StaticBroker,
    /// Built-in default (DEFAULT_CONFIG = 5).
    Default,
    /// A log level of a BROKER_LOGGER resource (DYNAMIC_BROKER_LOGGER_CONFIG = 6).
    BrokerLogger,
    /// Set on a GROUP resource (GROUP_CONFIG = 8).
    Group,
}

impl ConfigSource {
    pub fn code(self) -> i8 {
        match self {
            ConfigSource::Topic => 1,
            ConfigSource::DynamicBroker => 2,
            ConfigSource::DynamicDefaultBroker => 3,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
            ConfigSource::BrokerLogger => 6,
            ConfigSource::Group => 8,
        }
    }
}

/// The dynamic layer of a [`BrokerConfig`] and the lookups that see it.
impl BrokerConfig {
    /// Replaces the dynamic layer (the broker follows the metadata image with it).
    pub fn set_dynamic(&self, configs: DynamicConfigs) {
        *self.dynamic.write().unwrap_or_else(|p| p.into_inner()) = configs;
    }

    /// The dynamic layer as it stands.
    pub fn dynamic(&self) -> DynamicConfigs {
        self.dynamic
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The value of a key with the dynamic layer over the file: per broker, then the cluster
    /// default, then the file, then the built-in default.
    pub fn current(&self, key: &str) -> (String, ConfigSource) {
        let dynamic = self.dynamic.read().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = dynamic.per_broker.get(key) {
            return (v.clone(), ConfigSource::DynamicBroker);
        }
        if let Some(v) = dynamic.cluster_default.get(key) {
            return (v.clone(), ConfigSource::DynamicDefaultBroker);
        }
        match self.explicit.get(key) {
            Some(v) => (v.clone(), ConfigSource::StaticBroker),
            None => (self.raw(key).to_string(), ConfigSource::Default),
        }
    }

    /// Broker default of a topic-level config from the broker keys behind it, in Kafka's order
    /// of precedence (`retention.ms` ← `log.retention.ms`, `log.retention.minutes`,
    /// `log.retention.hours`): the first key set at any level (per broker, cluster default,
    /// file) wins, scaled to the topic key's unit; else the default of the last key.
    pub fn topic_default(&self, synonyms: &[Synonym]) -> Option<(String, ConfigSource)> {
        let dynamic = self.dynamic.read().unwrap_or_else(|p| p.into_inner());
        for syn in synonyms {
            let found = dynamic
                .per_broker
                .get(syn.key)
                .map(|v| (v, ConfigSource::DynamicBroker))
                .or_else(|| {
                    dynamic
                        .cluster_default
                        .get(syn.key)
                        .map(|v| (v, ConfigSource::DynamicDefaultBroker))
                })
                .or_else(|| {
                    self.explicit
                        .get(syn.key)
                        .map(|v| (v, ConfigSource::StaticBroker))
                });
            if let Some((v, source)) = found {
                return Some((scale(v, syn.factor), source));
            }
        }
        let last = synonyms.last()?;
        Some((
            scale(lookup_def(last.key)?.default, last.factor),
            ConfigSource::Default,
        ))
    }

    /// Every value the broker keys `keys` have, in Kafka's order for DescribeConfigs synonyms:
    /// per-broker dynamic values, then cluster defaults, then the file, each in `keys`' order,
    /// then the built-in default of the last key (Kafka declares a default only on the last of
    /// a group such as `log.retention.{ms,minutes,hours}`).
    pub fn synonyms(&self, keys: &[&str]) -> Vec<(String, String, ConfigSource)> {
        let dynamic = self.dynamic.read().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let levels = [
            (&dynamic.per_broker, ConfigSource::DynamicBroker),
            (&dynamic.cluster_default, ConfigSource::DynamicDefaultBroker),
            (&self.explicit, ConfigSource::StaticBroker),
        ];
        for (map, source) in levels {
            for key in keys {
                if let Some(v) = map.get(*key) {
                    out.push((key.to_string(), v.clone(), source));
                }
            }
        }
        if let Some(def) = keys.last().and_then(|k| lookup_def(k)) {
            out.push((
                def.name.to_string(),
                def.default.to_string(),
                ConfigSource::Default,
            ));
        }
        out
    }
}

/// The dynamic values one broker follows: its own (`per_broker`) and the cluster default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicConfigs {
    pub per_broker: BTreeMap<String, String>,
    pub cluster_default: BTreeMap<String, String>,
}

/// Broker keys that are dynamic besides the topic defaults.
const OTHER_DYNAMIC_KEYS: &[&str] = &[
    "num.partitions",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
];

/// Whether a broker key can be changed at run time: the broker key behind each topic config
/// (the first of its synonyms, as Kafka's `DynamicLogConfig`: `log.retention.ms`,
/// `log.segment.bytes`, `log.cleaner.delete.retention.ms`, ...), `num.partitions` and the
/// replication throttle rates.
pub fn is_dynamic(key: &str) -> bool {
    OTHER_DYNAMIC_KEYS.contains(&key)
        || TOPIC_CONFIGS.iter().any(|t| match t.default {
            TopicDefault::Broker(synonyms) => synonyms.first().is_some_and(|s| s.key == key),
            TopicDefault::Fixed(_) => false,
        })
}

/// Whether `key` is a custom broker config: a name the broker does not declare. Kafka keeps
/// such keys dynamically as they are given (`DynamicConfig.Broker` allows custom properties,
/// for plugins and for settings of features a broker does not run), and describes them as
/// secrets, without their value and of unknown type.
pub fn is_custom(key: &str) -> bool {
    !crate::broker_config::is_declared(key)
}

/// Checks one dynamic value: a custom key (any value), or a declared key that may change at
/// run time, with a value of its type and range (the checks of the config file). The message is
/// what INVALID_CONFIG carries.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    if is_custom(key) {
        return Ok(());
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
        // Kafka keeps custom keys (a Kerberos setting on a broker without Kerberos, a plugin's
        // key); a declared key that is not dynamic stays refused, per listener too.
        for key in ["no.such.key", "sasl.kerberos.min.time.before.relogin"] {
            assert!(is_custom(key), "{key}");
            validate(key, "58000").unwrap_or_else(|e| panic!("{key}: {e}"));
        }
        assert!(!is_custom("listener.name.external.ssl.keystore.location"));
        assert!(
            validate("listener.name.external.ssl.keystore.location", "/x")
                .unwrap_err()
                .contains("dynamically")
        );
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
