//! Group configs: the keys of a GROUP config resource (Kafka 4.0's `GroupConfig`, KIP-848),
//! which override, for one consumer-protocol group, the broker's session timeout and heartbeat
//! interval. They are set with IncrementalAlterConfigs or AlterConfigs (`kafka-configs.sh
//! --entity-type groups --entity-name <group> --alter --add-config
//! consumer.session.timeout.ms=50000`), kept in the controller quorum's metadata, and need no
//! existing group. Each value must lie within the broker's `group.consumer.min.*` and
//! `group.consumer.max.*` bounds, as Kafka checks them. Share groups' `share.*` keys are not
//! served (ferry has no share groups).

use crate::broker_config::{BrokerConfig, ConfigSource};

/// One group key: the broker key that is its default, and the broker keys bounding it.
pub struct GroupConfigDef {
    pub name: &'static str,
    pub doc: &'static str,
    pub default_key: &'static str,
    pub min_key: &'static str,
    pub max_key: &'static str,
}

/// Every key a GROUP resource has, in Kafka's order.
pub const GROUP_CONFIGS: &[GroupConfigDef] = &[
    GroupConfigDef {
        name: "consumer.heartbeat.interval.ms",
        doc: "The heartbeat interval given to the members of this consumer-protocol group.",
        default_key: "group.consumer.heartbeat.interval.ms",
        min_key: "group.consumer.min.heartbeat.interval.ms",
        max_key: "group.consumer.max.heartbeat.interval.ms",
    },
    GroupConfigDef {
        name: "consumer.session.timeout.ms",
        doc: "The session timeout of the members of this consumer-protocol group.",
        default_key: "group.consumer.session.timeout.ms",
        min_key: "group.consumer.min.session.timeout.ms",
        max_key: "group.consumer.max.session.timeout.ms",
    },
];

pub fn lookup(name: &str) -> Option<&'static GroupConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// Checks one group config: a known key with an integer value within the broker's bounds. The
/// message is what INVALID_CONFIG carries (Kafka's words).
pub fn validate(broker: &BrokerConfig, key: &str, value: &str) -> Result<(), String> {
    let def = lookup(key).ok_or_else(|| format!("Unknown group config name: {key}"))?;
    let v: i64 = value.trim().parse().map_err(|_| {
        format!("Invalid value {value} for configuration {key}: Not a number of type INT")
    })?;
    if i32::try_from(v).is_err() {
        return Err(format!(
            "Invalid value {value} for configuration {key}: Not a number of type INT"
        ));
    }
    let (min, max) = (broker.long(def.min_key), broker.long(def.max_key));
    if v < min {
        return Err(format!(
            "{key} must be greater than or equal to {}",
            def.min_key
        ));
    }
    if v > max {
        return Err(format!(
            "{key} must be less than or equal to {}",
            def.max_key
        ));
    }
    Ok(())
}

/// The effective value of `key` for a group with `overrides`: the override (source: the
/// group's own config), else the broker key behind it with that key's source.
pub fn effective(
    broker: &BrokerConfig,
    overrides: &std::collections::BTreeMap<String, String>,
    def: &GroupConfigDef,
) -> (String, ConfigSource) {
    match overrides.get(def.name) {
        Some(v) => (v.clone(), ConfigSource::Group),
        None => broker.current(def.default_key),
    }
}

/// The integer override of `key` in `overrides`, if set and well formed (stored values were
/// checked when they were set).
pub fn override_ms(
    overrides: &std::collections::BTreeMap<String, String>,
    key: &str,
) -> Option<i32> {
    overrides.get(key).and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_must_be_known_keys_within_the_broker_bounds() {
        let b = BrokerConfig::default();
        validate(&b, "consumer.session.timeout.ms", "50000").unwrap();
        validate(&b, "consumer.heartbeat.interval.ms", "5000").unwrap();
        let low = validate(&b, "consumer.session.timeout.ms", "1000").unwrap_err();
        assert!(
            low.contains("group.consumer.min.session.timeout.ms"),
            "{low}"
        );
        let high = validate(&b, "consumer.heartbeat.interval.ms", "20000").unwrap_err();
        assert!(
            high.contains("group.consumer.max.heartbeat.interval.ms"),
            "{high}"
        );
        assert!(validate(&b, "consumer.session.timeout.ms", "soon")
            .unwrap_err()
            .contains("Not a number"));
        assert_eq!(
            validate(&b, "share.record.lock.duration.ms", "1").unwrap_err(),
            "Unknown group config name: share.record.lock.duration.ms"
        );
        let wide = BrokerConfig::parse("\"group.consumer.min.session.timeout.ms\" = 1000").unwrap();
        validate(&wide, "consumer.session.timeout.ms", "1000").unwrap();
    }

    #[test]
    fn an_unset_key_reads_the_broker_default() {
        let b = BrokerConfig::parse("\"group.consumer.session.timeout.ms\" = 50000").unwrap();
        let def = lookup("consumer.session.timeout.ms").unwrap();
        let mut overrides = std::collections::BTreeMap::new();
        assert_eq!(
            effective(&b, &overrides, def),
            ("50000".to_string(), ConfigSource::StaticBroker)
        );
        overrides.insert(def.name.to_string(), "55000".to_string());
        assert_eq!(
            effective(&b, &overrides, def),
            ("55000".to_string(), ConfigSource::Group)
        );
        assert_eq!(override_ms(&overrides, def.name), Some(55000));
    }
}
