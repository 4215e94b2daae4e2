//! Topic-level configs: which keys exist, how their values are checked, how a topic's
//! effective config is resolved (topic override, else the broker default) and turned into the
//! log crate's [`LogConfig`].

use std::collections::BTreeMap;

use ferry_log::{LogConfig, TimestampType};

use crate::broker_config::{BrokerConfig, ConfigType};

/// One topic config key.
#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    pub ty: ConfigType,
    pub doc: &'static str,
}

const fn t(name: &'static str, ty: ConfigType, doc: &'static str) -> TopicConfigDef {
    TopicConfigDef { name, ty, doc }
}

/// Every topic-level key ferry accepts (CreateTopics, AlterConfigs, IncrementalAlterConfigs).
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    t(
        "cleanup.policy",
        ConfigType::List,
        "`delete` (retention by time and size) and/or `compact` (keep the latest record per key).",
    ),
    t(
        "delete.retention.ms",
        ConfigType::Long,
        "How long a tombstone survives on a compacted topic.",
    ),
    t(
        "min.compaction.lag.ms",
        ConfigType::Long,
        "Records younger than this are not compacted.",
    ),
    t(
        "max.compaction.lag.ms",
        ConfigType::Long,
        "Records older than this are compacted whatever the dirty ratio.",
    ),
    t(
        "min.cleanable.dirty.ratio",
        ConfigType::Double,
        "Compact when this share of the log is uncompacted.",
    ),
    t(
        "retention.ms",
        ConfigType::Long,
        "Delete segments whose newest record is older than this; -1 keeps data forever.",
    ),
    t(
        "local.retention.ms",
        ConfigType::Long,
        "How long data stays in the local log (KIP-405); -2 means `retention.ms`, -1 forever. Remote-WAL objects whose replicas have not all read them are kept at most this long, and a new remote-WAL leader republishes no older data.",
    ),
    t(
        "retention.bytes",
        ConfigType::Long,
        "Delete the oldest segments while the partition is larger than this; -1 means no limit.",
    ),
    t(
        "segment.bytes",
        ConfigType::Int,
        "Roll a new segment at this size.",
    ),
    t(
        "segment.ms",
        ConfigType::Long,
        "Roll a new segment at this age.",
    ),
    t(
        "segment.index.bytes",
        ConfigType::Int,
        "Largest offset index before a roll.",
    ),
    t(
        "index.interval.bytes",
        ConfigType::Int,
        "Bytes between offset-index entries.",
    ),
    t(
        "max.message.bytes",
        ConfigType::Int,
        "Largest record batch accepted (MESSAGE_TOO_LARGE above).",
    ),
    t(
        "message.timestamp.type",
        ConfigType::String,
        "`CreateTime` (the producer's) or `LogAppendTime` (the broker's clock).",
    ),
    t(
        "flush.messages",
        ConfigType::Long,
        "fsync after this many messages.",
    ),
    t(
        "file.delete.delay.ms",
        ConfigType::Long,
        "Delay before a deleted segment's files are removed.",
    ),
    t(
        "min.insync.replicas",
        ConfigType::Int,
        "Replicas that must hold a write for acks=all.",
    ),
    t(
        "compression.type",
        ConfigType::String,
        "`producer` stores batches as the producer compressed them; `uncompressed`/`none`, `gzip`, `snappy`, `lz4`, `zstd` re-encode them with that codec.",
    ),
    t(
        "unclean.leader.election.enable",
        ConfigType::Boolean,
        "Allow an out-of-sync replica to become leader.",
    ),
    t(
        "remote.wal.enable",
        ConfigType::Boolean,
        "Replicate through the object store of the leader's rack (KIP-1176 remote WAL) instead of by Fetch across racks.",
    ),
];

pub fn lookup(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Why a topic config was refused; maps to INVALID_CONFIG.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopicConfigError {
    #[error("unknown topic config `{0}`")]
    Unknown(String),
    #[error("invalid value `{value}` for topic config `{name}`: {reason}")]
    Invalid {
        name: String,
        value: String,
        reason: String,
    },
}

/// Checks one key and value.
pub fn validate(name: &str, value: &str) -> Result<(), TopicConfigError> {
    let def = lookup(name).ok_or_else(|| TopicConfigError::Unknown(name.to_string()))?;
    let invalid = |reason: &str| TopicConfigError::Invalid {
        name: name.to_string(),
        value: value.to_string(),
        reason: reason.to_string(),
    };
    let number = || {
        value
            .trim()
            .parse::<i64>()
            .map_err(|_| invalid("not a number"))
    };
    match def.ty {
        ConfigType::Int => {
            let n = number()?;
            if i32::try_from(n).is_err() {
                return Err(invalid("does not fit in an int"));
            }
        }
        ConfigType::Long => {
            number()?;
        }
        ConfigType::Boolean => {
            if !matches!(value.trim(), "true" | "false") {
                return Err(invalid("must be true or false"));
            }
        }
        ConfigType::Double => {
            let v = value
                .trim()
                .parse::<f64>()
                .map_err(|_| invalid("not a number"))?;
            if !(0.0..=1.0).contains(&v) {
                return Err(invalid("must be between 0 and 1"));
            }
        }
        ConfigType::String | ConfigType::List | ConfigType::Password => {}
    }
    let at_least = |min: i64| -> Result<(), TopicConfigError> {
        if number()? < min {
            Err(invalid(&format!("must be at least {min}")))
        } else {
            Ok(())
        }
    };
    match name {
        "retention.ms" | "retention.bytes" => at_least(-1),
        "local.retention.ms" => at_least(-2),
        "segment.bytes" => at_least(14),
        "segment.ms" => at_least(1),
        "segment.index.bytes" => at_least(8),
        "index.interval.bytes"
        | "file.delete.delay.ms"
        | "delete.retention.ms"
        | "min.compaction.lag.ms" => at_least(0),
        "max.compaction.lag.ms" => at_least(1),
        "max.message.bytes" => at_least(0),
        "flush.messages" | "min.insync.replicas" => at_least(1),
        "message.timestamp.type" => match value {
            "CreateTime" | "LogAppendTime" => Ok(()),
            _ => Err(invalid("must be CreateTime or LogAppendTime")),
        },
        "cleanup.policy" => {
            let ok = !value.trim().is_empty()
                && value
                    .split(',')
                    .all(|p| matches!(p.trim(), "delete" | "compact"));
            if ok {
                Ok(())
            } else {
                Err(invalid("must be a list of delete and compact"))
            }
        }
        "compression.type" => match value {
            "producer" | "none" | "gzip" | "snappy" | "lz4" | "zstd" | "uncompressed" => Ok(()),
            _ => Err(invalid(
                "must be one of producer, uncompressed, none, gzip, snappy, lz4, zstd",
            )),
        },
        _ => Ok(()),
    }
}

/// Checks a whole set of overrides.
pub fn validate_all<'a>(
    configs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), TopicConfigError> {
    for (k, v) in configs {
        validate(k, v)?;
    }
    Ok(())
}

/// Where an effective value comes from, as DescribeConfigs reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// Set on the topic (DescribeConfigs source TOPIC_CONFIG = 1).
    Topic,
    /// Set in the broker's config file (STATIC_BROKER_CONFIG = 4).
    StaticBroker,
    /// Built-in default (DEFAULT_CONFIG = 5).
    Default,
}

impl ConfigSource {
    pub fn code(self) -> i8 {
        match self {
            ConfigSource::Topic => 1,
            ConfigSource::StaticBroker => 4,
            ConfigSource::Default => 5,
        }
    }
}

/// The effective value of one topic key, its source, and the broker key behind the default.
pub fn effective(
    broker: &BrokerConfig,
    overrides: &BTreeMap<String, String>,
    name: &str,
) -> Option<(String, ConfigSource, &'static str)> {
    let (default, broker_key, set) = broker.topic_default(name)?;
    if let Some(v) = overrides.get(name) {
        return Some((v.clone(), ConfigSource::Topic, broker_key));
    }
    let source = if set {
        ConfigSource::StaticBroker
    } else {
        ConfigSource::Default
    };
    Some((default, source, broker_key))
}

/// The log crate's view of a topic's effective config.
pub fn log_config(broker: &BrokerConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let get = |k: &str| {
        effective(broker, overrides, k)
            .map(|(v, _, _)| v)
            .unwrap_or_default()
    };
    let num = |k: &str, fallback: i64| get(k).trim().parse::<i64>().unwrap_or(fallback);
    let defaults = LogConfig::default();
    let policy = get("cleanup.policy");
    let deletes = policy.split(',').any(|p| p.trim() == "delete");
    let compact = policy.split(',').any(|p| p.trim() == "compact");
    LogConfig {
        segment_bytes: num("segment.bytes", defaults.segment_bytes as i64).max(14) as u64,
        segment_ms: num("segment.ms", defaults.segment_ms).max(1),
        segment_index_bytes: num("segment.index.bytes", defaults.segment_index_bytes as i64).max(8)
            as u64,
        index_interval_bytes: num("index.interval.bytes", defaults.index_interval_bytes as i64)
            .max(0) as u64,
        // A compact-only topic is never trimmed by time or size; the cleaner keeps it small.
        retention_ms: if deletes {
            num("retention.ms", defaults.retention_ms)
        } else {
            -1
        },
        retention_bytes: if deletes {
            num("retention.bytes", defaults.retention_bytes)
        } else {
            -1
        },
        max_message_bytes: num("max.message.bytes", defaults.max_message_bytes as i64).max(0)
            as usize,
        message_timestamp_type: if get("message.timestamp.type") == "LogAppendTime" {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        },
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_key_has_a_broker_default() {
        let b = BrokerConfig::default();
        for d in TOPIC_CONFIGS {
            let (v, _, _) = effective(&b, &BTreeMap::new(), d.name)
                .unwrap_or_else(|| panic!("{} has no default", d.name));
            validate(d.name, &v).unwrap_or_else(|e| panic!("default of {}: {e}", d.name));
        }
    }

    #[test]
    fn bad_values_are_refused_with_the_key_named() {
        for (k, v) in [
            ("retention.ms", "soon"),
            ("segment.bytes", "1"),
            ("message.timestamp.type", "Now"),
            ("cleanup.policy", "shred"),
            ("max.message.bytes", "99999999999"),
            ("unclean.leader.election.enable", "yes"),
        ] {
            let e = validate(k, v).unwrap_err();
            assert!(e.to_string().contains(k), "{e}");
        }
        assert_eq!(
            validate("retention.msx", "1"),
            Err(TopicConfigError::Unknown("retention.msx".into()))
        );
    }

    #[test]
    fn overrides_win_and_reach_the_log_config() {
        let b = BrokerConfig::parse("\"log.retention.ms\" = 5000").unwrap();
        let mut o = BTreeMap::new();
        assert_eq!(log_config(&b, &o).retention_ms, 5000);
        assert_eq!(
            effective(&b, &o, "retention.ms").unwrap().1,
            ConfigSource::StaticBroker
        );
        o.insert("retention.ms".to_string(), "100".to_string());
        o.insert(
            "message.timestamp.type".to_string(),
            "LogAppendTime".to_string(),
        );
        let lc = log_config(&b, &o);
        assert_eq!(lc.retention_ms, 100);
        assert_eq!(lc.message_timestamp_type, TimestampType::LogAppendTime);
        assert_eq!(
            effective(&b, &o, "retention.ms").unwrap().1,
            ConfigSource::Topic
        );
        o.insert("cleanup.policy".to_string(), "compact".to_string());
        assert_eq!(log_config(&b, &o).retention_ms, -1);
        assert!(log_config(&b, &o).compact);
        o.insert("cleanup.policy".to_string(), "compact,delete".to_string());
        assert_eq!(log_config(&b, &o).retention_ms, 100);
        assert!(log_config(&b, &o).compact);
    }
}
