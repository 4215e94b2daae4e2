//! Tests of topic configs: every key's default passes its own check, Kafka's validators and
//! messages, dropped Kafka-4-removed keys, and how overrides reach the log config.

use super::*;

#[test]
fn every_topic_key_has_a_default_that_passes_its_check() {
    let b = BrokerConfig::default();
    for d in TOPIC_CONFIGS {
        let (v, source) = effective(&b, &BTreeMap::new(), d.name)
            .unwrap_or_else(|| panic!("{} has no default", d.name));
        assert_eq!(source, ConfigSource::Default, "{}", d.name);
        validate(d.name, &v).unwrap_or_else(|e| panic!("default of {}: {e}", d.name));
    }
}

#[test]
fn every_kafka_4_topic_key_is_accepted() {
    // LogConfig's keys in Kafka 4.x, and the deprecated ones Kafka 4 still takes.
    for (k, v) in [
        ("cleanup.policy", "compact,delete"),
        ("compression.gzip.level", "9"),
        ("compression.lz4.level", "17"),
        ("compression.type", "zstd"),
        ("compression.zstd.level", "-5"),
        ("delete.retention.ms", "0"),
        ("file.delete.delay.ms", "0"),
        ("flush.messages", "1"),
        ("flush.ms", "1000"),
        ("follower.replication.throttled.replicas", "0:1,1:2"),
        ("index.interval.bytes", "0"),
        ("leader.replication.throttled.replicas", "*"),
        ("local.retention.bytes", "-2"),
        ("local.retention.ms", "-2"),
        ("max.compaction.lag.ms", "1"),
        ("max.message.bytes", "0"),
        ("message.timestamp.after.max.ms", "3600000"),
        ("message.timestamp.before.max.ms", "0"),
        ("message.timestamp.type", "LogAppendTime"),
        ("min.cleanable.dirty.ratio", "0.1"),
        ("min.compaction.lag.ms", "0"),
        ("min.insync.replicas", "2"),
        ("preallocate", "true"),
        ("remote.log.copy.disable", "false"),
        ("remote.log.delete.on.disable", "false"),
        ("remote.storage.enable", "false"),
        ("retention.bytes", "-1"),
        ("retention.ms", "-1"),
        ("segment.bytes", "1048576"),
        ("segment.index.bytes", "4"),
        ("segment.jitter.ms", "0"),
        ("segment.ms", "1"),
        ("unclean.leader.election.enable", "TRUE"),
        ("message.format.version", "2.8-IV1"),
        ("message.format.version", "0.10.2"),
        ("message.format.version", "0.10.0.0"),
        ("message.format.version", "0.10.0-IV1"),
        ("message.format.version", "1.0.1"),
        ("message.timestamp.difference.max.ms", "1000"),
        ("message.downconversion.enable", "false"),
    ] {
        validate(k, v).unwrap_or_else(|e| panic!("{k}={v}: {e}"));
    }
}

#[test]
fn bad_values_are_refused_with_kafkas_message() {
    for (k, v, msg) in [
        (
            "retention.ms",
            "soon",
            "Invalid value soon for configuration retention.ms: Not a number of type LONG",
        ),
        (
            "retention.ms",
            "-5",
            "Invalid value -5 for configuration retention.ms: Value must be at least -1",
        ),
        ("segment.bytes", "1", "Value must be at least 14"),
        (
            "message.timestamp.type",
            "Now",
            "String must be one of: CreateTime, LogAppendTime",
        ),
        (
            "cleanup.policy",
            "shred",
            "String must be one of: compact, delete",
        ),
        (
            "max.message.bytes",
            "99999999999",
            "Not a number of type INT",
        ),
        (
            "unclean.leader.election.enable",
            "yes",
            "Expected value to be either true or false",
        ),
        (
            "compression.gzip.level",
            "10",
            "Value must be between 1 and 9 or equal to -1",
        ),
        (
            "compression.lz4.level",
            "18",
            "Value must be no more than 17",
        ),
        (
            "compression.zstd.level",
            "23",
            "Value must be no more than 22",
        ),
        ("flush.ms", "-1", "Value must be at least 0"),
        (
            "leader.replication.throttled.replicas",
            "0-1",
            "must be the literal '*'",
        ),
        (
            "min.cleanable.dirty.ratio",
            "1.5",
            "Value must be no more than 1",
        ),
        ("message.format.version", "banana", "is not a valid version"),
        ("message.format.version", "3", "is not a valid version"),
        (
            "message.format.version",
            "0.10.x.0",
            "is not a valid version",
        ),
        ("remote.storage.enable", "maybe", "remote.storage.enable"),
    ] {
        let e = validate(k, v).unwrap_err().to_string();
        assert!(e.contains(k), "{e}");
        assert!(e.contains(msg), "{k}={v}: {e}");
    }
    assert_eq!(
        validate("retention.msx", "1").unwrap_err().to_string(),
        "Unknown topic config name: retention.msx"
    );
    let e = validate_all([
        ("min.compaction.lag.ms", "10"),
        ("max.compaction.lag.ms", "5"),
    ])
    .unwrap_err()
    .to_string();
    assert!(e.contains("conflict topic config setting"), "{e}");
}

#[test]
fn keys_removed_in_kafka_4_are_dropped_not_stored() {
    let mut c = BTreeMap::new();
    c.insert("message.format.version".to_string(), "2.8".to_string());
    c.insert(
        "message.downconversion.enable".to_string(),
        "true".to_string(),
    );
    c.insert("retention.ms".to_string(), "100".to_string());
    c.insert("preallocate".to_string(), "true".to_string());
    let kept: Vec<String> = stored(c).into_keys().collect();
    assert_eq!(kept, ["preallocate", "retention.ms"]);
}

#[test]
fn topic_defaults_follow_the_broker_synonyms_in_kafkas_order() {
    let b =
        BrokerConfig::parse("\"log.retention.hours\" = 2\n\"log.roll.jitter.hours\" = 1").unwrap();
    let none = BTreeMap::new();
    assert_eq!(
        effective(&b, &none, "retention.ms").unwrap(),
        ("7200000".to_string(), ConfigSource::StaticBroker)
    );
    assert_eq!(
        effective(&b, &none, "segment.jitter.ms").unwrap().0,
        "3600000"
    );
    assert_eq!(effective(&b, &none, "local.retention.ms").unwrap().0, "-2");
    assert_eq!(
        effective(&b, &none, "leader.replication.throttled.replicas").unwrap(),
        (String::new(), ConfigSource::Default)
    );
    let keys = [
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
    ];
    let names: Vec<(String, ConfigSource)> = b
        .synonyms(&keys)
        .into_iter()
        .map(|(k, _, s)| (k, s))
        .collect();
    assert_eq!(
        names,
        [
            (
                "log.retention.hours".to_string(),
                ConfigSource::StaticBroker
            ),
            ("log.retention.hours".to_string(), ConfigSource::Default),
        ]
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

#[test]
fn a_dynamic_broker_default_reaches_topics_without_an_override() {
    let b = BrokerConfig::default();
    let mut d = crate::dynamic::DynamicConfigs::default();
    d.cluster_default
        .insert("log.retention.bytes".to_string(), "4096".to_string());
    b.set_dynamic(d);
    let none = BTreeMap::new();
    assert_eq!(log_config(&b, &none).retention_bytes, 4096);
    let mut o = BTreeMap::new();
    o.insert("retention.bytes".to_string(), "10".to_string());
    assert_eq!(log_config(&b, &o).retention_bytes, 10);
}

#[test]
fn remote_storage_needs_the_brokers_tier_and_a_topic_that_is_not_compacted() {
    let on = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut b = BrokerConfig::default();
    let remote = on(&[("remote.storage.enable", "true")]);
    let e = validate_with_broker(&b, &remote).unwrap_err().to_string();
    assert!(
        e.contains("Tiered Storage functionality is disabled"),
        "{e}"
    );
    assert!(validate_with_broker(&b, &on(&[("remote.storage.enable", "false")])).is_ok());
    b.set("remote.log.storage.system.enable", "true").unwrap();
    assert!(validate_with_broker(&b, &remote).is_ok());
    let compacted = on(&[
        ("remote.storage.enable", "true"),
        ("cleanup.policy", "compact,delete"),
    ]);
    let e = validate_with_broker(&b, &compacted)
        .unwrap_err()
        .to_string();
    assert!(e.contains("compacted"), "{e}");
    b.set("log.cleanup.policy", "compact").unwrap();
    assert!(
        validate_with_broker(&b, &remote).is_err(),
        "compacted by the broker default"
    );
}

#[test]
fn local_retention_resolves_against_the_total() {
    let b = BrokerConfig::default();
    let log = |pairs: &[(&str, &str)]| {
        let o: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        log_config(&b, &o)
    };
    let c = log(&[
        ("remote.storage.enable", "true"),
        ("retention.bytes", "1000"),
    ]);
    assert!(c.remote_storage);
    assert_eq!(c.local_retention_bytes, 1000, "-2: as retention.bytes");
    assert_eq!(c.local_retention_ms, c.retention_ms);
    let c = log(&[
        ("retention.bytes", "1000"),
        ("local.retention.bytes", "5000"),
    ]);
    assert_eq!(c.local_retention_bytes, 1000, "never above the total");
    let c = log(&[("retention.bytes", "-1"), ("local.retention.bytes", "300")]);
    assert_eq!(c.local_retention_bytes, 300);
    assert!(!c.remote_storage);
    let c = log(&[
        ("remote.storage.enable", "true"),
        ("cleanup.policy", "compact"),
    ]);
    assert!(!c.remote_storage, "compacted topics do not tier");
}

#[test]
fn turning_the_tier_off_must_say_what_becomes_of_its_data() {
    let on = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let b = BrokerConfig::default();
    let tiered = on(&[("remote.storage.enable", "true")]);
    let e = validate_change(&b, &tiered, &on(&[("remote.storage.enable", "false")]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("remote.log.delete.on.disable=true"), "{e}");
    // Removing the override turns it off too.
    assert!(validate_change(&b, &tiered, &on(&[])).is_err());
    let deleting = on(&[
        ("remote.storage.enable", "false"),
        ("remote.log.delete.on.disable", "true"),
    ]);
    assert!(validate_change(&b, &tiered, &deleting).is_ok());
    // Read-only, or any change of a topic that never tiered: fine.
    let read_only = on(&[
        ("remote.storage.enable", "true"),
        ("remote.log.copy.disable", "true"),
    ]);
    assert!(validate_change(&b, &tiered, &read_only).is_ok());
    assert!(validate_change(&b, &on(&[]), &on(&[("retention.ms", "5")])).is_ok());
}

/// An empty `cleanup.policy` is valid, as in Kafka (what an incremental SUBTRACT of the last
/// policy leaves): the log is neither trimmed by retention nor compacted.
#[test]
fn an_empty_cleanup_policy_keeps_everything() {
    assert!(validate("cleanup.policy", "").is_ok());
    assert!(validate("cleanup.policy", "compact,").is_err());
    let b = BrokerConfig::parse("\"log.retention.ms\" = 5000").unwrap();
    let mut o = BTreeMap::new();
    o.insert("cleanup.policy".to_string(), String::new());
    let lc = log_config(&b, &o);
    assert_eq!((lc.retention_ms, lc.retention_bytes), (-1, -1));
    assert!(!lc.compact);
}
