//! Topic-level configs: which keys exist, how their values are checked, how a topic's
//! effective config is resolved (topic override, else the broker default) and turned into the
//! log crate's [`LogConfig`].

use std::collections::BTreeMap;

use ferry_log::{LogConfig, TimestampType};

use crate::broker_config::{BrokerConfig, ConfigType};

pub use crate::topic_config_table::{
    Check, Effect, Synonym, TopicConfigDef, TopicDefault, TOPIC_CONFIGS,
};

pub fn lookup(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Why a topic config was refused; maps to INVALID_CONFIG. The messages are Kafka's.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopicConfigError {
    #[error("Unknown topic config name: {0}")]
    Unknown(String),
    #[error("Invalid value {value} for configuration {name}: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
}

/// Checks one key and value as Kafka's `LogConfig` does: the type, then the key's validator.
pub fn validate(name: &str, value: &str) -> Result<(), TopicConfigError> {
    let def = lookup(name).ok_or_else(|| TopicConfigError::Unknown(name.to_string()))?;
    let invalid = |reason: String| TopicConfigError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        reason,
    };
    let text = value.trim();
    let number = match def.ty {
        ConfigType::Int => {
            let n = text
                .parse::<i32>()
                .map_err(|_| invalid("Not a number of type INT".into()))?;
            Some(i64::from(n))
        }
        ConfigType::Long => Some(
            text.parse::<i64>()
                .map_err(|_| invalid("Not a number of type LONG".into()))?,
        ),
        ConfigType::Boolean => {
            if !text.eq_ignore_ascii_case("true") && !text.eq_ignore_ascii_case("false") {
                return Err(invalid("Expected value to be either true or false".into()));
            }
            None
        }
        ConfigType::Double => {
            let v = text
                .parse::<f64>()
                .map_err(|_| invalid("Not a number of type DOUBLE".into()))?;
            if !(0.0..=1.0).contains(&v) {
                return Err(invalid(if v < 0.0 {
                    "Value must be at least 0".into()
                } else {
                    "Value must be no more than 1".into()
                }));
            }
            None
        }
        ConfigType::String | ConfigType::List | ConfigType::Password => None,
    };
    let n = number.unwrap_or_default();
    match &def.check {
        Check::Any => Ok(()),
        Check::AtLeast(min) if n < *min => Err(invalid(format!("Value must be at least {min}"))),
        Check::AtLeast(_) => Ok(()),
        Check::Between(min, _) if n < *min => Err(invalid(format!("Value must be at least {min}"))),
        Check::Between(_, max) if n > *max => {
            Err(invalid(format!("Value must be no more than {max}")))
        }
        Check::Between(..) => Ok(()),
        Check::Level { min, max, or } => {
            if (*min..=*max).contains(&n) || n == *or {
                Ok(())
            } else if *or < *min {
                Err(invalid(format!(
                    "Value must be between {min} and {max} or equal to {or}"
                )))
            } else if n < *min {
                Err(invalid(format!("Value must be at least {min}")))
            } else {
                Err(invalid(format!("Value must be no more than {max}")))
            }
        }
        Check::OneOf(allowed) => {
            if allowed.contains(&value) {
                Ok(())
            } else {
                Err(invalid(format!(
                    "String must be one of: {}",
                    allowed.join(", ")
                )))
            }
        }
        // An empty list is valid, as in Kafka's `ValidList`: an empty `cleanup.policy` neither
        // deletes nor compacts, so the log keeps everything (`log_config`).
        Check::ListOf(_) if value.trim().is_empty() => Ok(()),
        Check::ListOf(allowed) => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            match items.iter().find(|i| !allowed.contains(i)) {
                Some(_) => Err(invalid(format!(
                    "String must be one of: {}",
                    allowed.join(", ")
                ))),
                None => Ok(()),
            }
        }
        Check::ThrottledReplicas => {
            let items: Vec<&str> = value.split(',').map(str::trim).collect();
            let replica = |s: &&str| {
                s.is_empty()
                    || s.split_once(':').is_some_and(|(p, b)| {
                        !p.is_empty()
                            && !b.is_empty()
                            && p.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
                    })
            };
            if text == "*" || items.iter().all(replica) {
                Ok(())
            } else {
                Err(invalid(format!("{name} must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")))
            }
        }
        Check::Version => {
            // As Kafka's `MetadataVersion.fromVersionString`: only the first three segments of
            // a 0.x release and the first two of a later one name it ("0.10.0.0" is 0.10.0,
            // "2.8.1" is 2.8); what follows them is not read.
            let segments: Vec<&str> = text.split('.').collect();
            let named = if text.starts_with("0.") { 3 } else { 2 };
            let key = segments.get(..named).unwrap_or(&segments);
            let numeric = |p: &str| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit());
            let ok = match key.split_last() {
                Some((last, release)) if !release.is_empty() => {
                    let (last, iv) = match last.split_once("-IV") {
                        Some((l, iv)) => (l, Some(iv)),
                        None => (*last, None),
                    };
                    release.iter().all(|p| numeric(p)) && numeric(last) && iv.is_none_or(numeric)
                }
                _ => false,
            };
            if ok {
                Ok(())
            } else {
                Err(invalid(format!("Version `{value}` is not a valid version")))
            }
        }
        Check::RemoteStorage => Ok(()),
    }
}

/// Checks a whole set of overrides: each key and value, then the checks across keys Kafka
/// makes (`min.compaction.lag.ms` at most `max.compaction.lag.ms`).
pub fn validate_all<'a>(
    configs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), TopicConfigError> {
    let mut min_lag = 0i64;
    let mut max_lag = i64::MAX;
    for (k, v) in configs {
        validate(k, v)?;
        match k {
            "min.compaction.lag.ms" => min_lag = v.trim().parse().unwrap_or(min_lag),
            "max.compaction.lag.ms" => max_lag = v.trim().parse().unwrap_or(max_lag),
            _ => {}
        }
    }
    if min_lag > max_lag {
        return Err(TopicConfigError::Invalid {
            name: "min.compaction.lag.ms".into(),
            value: min_lag.to_string(),
            reason: format!(
                "conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
            ),
        });
    }
    Ok(())
}

/// The checks of a topic's overrides that depend on the broker, as Kafka's `LogConfig`
/// validation makes them: `remote.storage.enable=true` needs the broker's tier
/// (`remote.log.storage.system.enable`) and a topic that is not compacted.
pub fn validate_with_broker(
    broker: &BrokerConfig,
    configs: &BTreeMap<String, String>,
) -> Result<(), TopicConfigError> {
    let remote = configs
        .get("remote.storage.enable")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !remote {
        return Ok(());
    }
    let invalid = |reason: &str| TopicConfigError::Invalid {
        name: "remote.storage.enable".into(),
        value: "true".into(),
        reason: reason.into(),
    };
    if !broker
        .raw("remote.log.storage.system.enable")
        .trim()
        .eq_ignore_ascii_case("true")
    {
        return Err(invalid("Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."));
    }
    let compact = effective(broker, configs, "cleanup.policy")
        .is_some_and(|(policy, _)| policy.split(',').any(|p| p.trim() == "compact"));
    if compact {
        return Err(invalid(
            "Remote log storage is unsupported for the compacted topics",
        ));
    }
    Ok(())
}

/// Checks a change of a topic's overrides from `old` to `new` that its values alone cannot:
/// turning the long-term tier off (`remote.storage.enable` true to false) must say what
/// becomes of the tier's data, as Kafka 4 requires (KIP-950): deleted
/// (`remote.log.delete.on.disable=true`), or kept read-only by leaving the tier on with
/// `remote.log.copy.disable=true`.
pub fn validate_change(
    broker: &BrokerConfig,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) -> Result<(), TopicConfigError> {
    let on = |configs: &BTreeMap<String, String>, key: &str| {
        effective(broker, configs, key).is_some_and(|(v, _)| v.trim().eq_ignore_ascii_case("true"))
    };
    if on(old, "remote.storage.enable")
        && !on(new, "remote.storage.enable")
        && !on(new, "remote.log.delete.on.disable")
    {
        return Err(TopicConfigError::Invalid {
            name: "remote.storage.enable".into(),
            value: "false".into(),
            reason: "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable remote storage and delete all remote data, please set `remote.storage.enable=false,remote.log.delete.on.disable=true`.".into(),
        });
    }
    Ok(())
}

/// The overrides to store once validated: keys Kafka 4 removed ([`Effect::Removed`]) are
/// dropped, as a Kafka 4 broker drops them, so a config copied from an older cluster is taken.
pub fn stored(mut configs: BTreeMap<String, String>) -> BTreeMap<String, String> {
    configs.retain(|k, _| lookup(k).is_none_or(|d| d.effect != Effect::Removed));
    configs
}

pub use crate::broker_config::ConfigSource;

/// The effective value of one topic key and where it comes from: the topic's override, else
/// the broker keys behind it (dynamic, then static, then their default), else Kafka's fixed
/// default. `None` for a key ferry does not know.
pub fn effective(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    name: &str,
) -> Option<(String, ConfigSource)> {
    let def = lookup(name)?;
    if let Some(v) = overrides.get(name) {
        return Some((v.clone(), ConfigSource::Topic));
    }
    match def.default {
        TopicDefault::Broker(synonyms) => broker.topic_default(synonyms),
        TopicDefault::Fixed(v) => Some((v.to_string(), ConfigSource::Default)),
    }
}

/// The log crate's view of a topic's effective config.
pub fn log_config(broker: &BrokerConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let get = |k: &str| {
        effective(broker, overrides, k)
            .map(|(v, _)| v)
            .unwrap_or_default()
    };
    let num = |k: &str, fallback: i64| get(k).trim().parse::<i64>().unwrap_or(fallback);
    let defaults = LogConfig::default();
    let policy = get("cleanup.policy");
    let deletes = policy.split(',').any(|p| p.trim() == "delete");
    let compact = policy.split(',').any(|p| p.trim() == "compact");
    let retention_ms = if deletes {
        num("retention.ms", defaults.retention_ms)
    } else {
        -1
    };
    let retention_bytes = if deletes {
        num("retention.bytes", defaults.retention_bytes)
    } else {
        -1
    };
    LogConfig {
        segment_bytes: num("segment.bytes", defaults.segment_bytes as i64).max(14) as u64,
        segment_ms: num("segment.ms", defaults.segment_ms).max(1),
        segment_index_bytes: num("segment.index.bytes", defaults.segment_index_bytes as i64).max(8)
            as u64,
        index_interval_bytes: num("index.interval.bytes", defaults.index_interval_bytes as i64)
            .max(0) as u64,
        // A compact-only topic is never trimmed by time or size; the cleaner keeps it small.
        retention_ms,
        retention_bytes,
        max_message_bytes: num("max.message.bytes", defaults.max_message_bytes as i64).max(0)
            as usize,
        message_timestamp_type: if get("message.timestamp.type") == "LogAppendTime" {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
        timestamp_before_max_ms: num(
            "message.timestamp.before.max.ms",
            defaults.timestamp_before_max_ms,
        )
        .max(0),
        timestamp_after_max_ms: num(
            "message.timestamp.after.max.ms",
            defaults.timestamp_after_max_ms,
        )
        .max(0),
        flush_interval_messages: num("flush.messages", i64::MAX).max(1) as u64,
        file_delete_delay_ms: num("file.delete.delay.ms", defaults.file_delete_delay_ms).max(0),
        compact,
        delete_retention_ms: num("delete.retention.ms", defaults.delete_retention_ms).max(0),
        min_compaction_lag_ms: num("min.compaction.lag.ms", defaults.min_compaction_lag_ms).max(0),
        max_compaction_lag_ms: num("max.compaction.lag.ms", defaults.max_compaction_lag_ms).max(1),
        min_cleanable_dirty_ratio: get("min.cleanable.dirty.ratio")
            .trim()
            .parse::<f64>()
            .unwrap_or(defaults.min_cleanable_dirty_ratio),
        remote_storage: deletes && get("remote.storage.enable").trim() == "true",
        remote_copy_disabled: get("remote.log.copy.disable").trim() == "true",
        local_retention_ms: local(num("local.retention.ms", -2), retention_ms),
        local_retention_bytes: local(num("local.retention.bytes", -2), retention_bytes),
    }
}

/// `local.retention.*`: -2 means "as `retention.*`"; a local limit never exceeds the total
/// one (Kafka refuses such a config; here the total wins).
fn local(value: i64, total: i64) -> i64 {
    match (value, total) {
        (-2, _) => total,
        (v, t) if t >= 0 && (v < 0 || v > t) => t,
        (v, _) => v,
    }
}

#[cfg(test)]
#[path = "topic_config_test.rs"]
mod tests;
