//! Config handlers end to end inside one broker: MirrorMaker 2-style DELETEs, keys Kafka 4
//! removed, and a dynamic cluster default reaching the log of a topic without an override.

use std::sync::Arc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::tests::{broker, call, create};
use crate::broker::Broker;

fn op(name: &str, operation: i8, value: Option<&str>) -> AlterableConfig {
    AlterableConfig::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_config_operation(operation)
        .with_value(value.map(|v| StrBytes::from_string(v.to_string())))
}

async fn incremental(
    b: &Arc<Broker>,
    rtype: i8,
    name: &str,
    ops: Vec<AlterableConfig>,
) -> (i16, String) {
    let body = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(rtype)
            .with_resource_name(StrBytes::from_string(name.to_string()))
            .with_configs(ops),
    ]);
    let ResponseKind::IncrementalAlterConfigs(r) = call(
        b,
        ApiKey::IncrementalAlterConfigs,
        1,
        RequestKind::IncrementalAlterConfigs(body),
    )
    .await
    else {
        panic!("not an IncrementalAlterConfigs response");
    };
    let r = &r.responses[0];
    (
        r.error_code,
        r.error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

#[tokio::test]
async fn delete_of_keys_at_their_default_or_unknown_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    let created = create(
        &b,
        "mm2",
        1,
        &[("retention.ms", "1000"), ("message.format.version", "2.8")],
    )
    .await;
    let stored = b.metadata.topic("mm2").unwrap().configs;
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["retention.ms"]);
    // CreateTopics v5+ lists the new topic's configs: never a key Kafka 4 removed.
    let listed: Vec<&str> = created.topics[0]
        .configs
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert!(listed.contains(&"retention.ms") && listed.contains(&"preallocate"));
    assert!(!listed.contains(&"message.format.version"));
    let (code, msg) = incremental(
        &b,
        2,
        "mm2",
        vec![
            op("retention.ms", 1, None),
            op("flush.ms", 1, None),
            op("message.downconversion.enable", 1, None),
            op("no.such.key", 1, None),
            op("preallocate", 0, Some("true")),
        ],
    )
    .await;
    assert_eq!(code, 0, "{msg}");
    let stored = b.metadata.topic("mm2").unwrap().configs;
    assert_eq!(stored.keys().collect::<Vec<_>>(), ["preallocate"]);
    let (code, msg) = incremental(&b, 2, "mm2", vec![op("no.such.key", 0, Some("1"))]).await;
    assert_eq!(code, ResponseError::InvalidConfig.code());
    assert_eq!(msg, "Unknown topic config name: no.such.key");
}

#[tokio::test]
async fn a_dynamic_cluster_default_reaches_topics_without_an_override() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "plain", 1, &[]).await;
    create(&b, "own", 1, &[("retention.bytes", "10")]).await;
    let (code, msg) =
        incremental(&b, 4, "", vec![op("log.retention.bytes", 0, Some("4096"))]).await;
    assert_eq!(code, 0, "{msg}");
    let retention = |topic: &str| {
        let tp = ferry_common::TopicPartition::new(topic, 0);
        b.replicas
            .partition(&tp)
            .unwrap()
            .log
            .config()
            .retention_bytes
    };
    assert_eq!(retention("plain"), 4096);
    assert_eq!(retention("own"), 10);
    assert_eq!(
        b.metadata.image().broker_configs[""]["log.retention.bytes"],
        "4096"
    );
    // A key that is not dynamic, or a bad value, is refused and nothing changes.
    let (code, _) = incremental(&b, 4, "", vec![op("log.dirs", 0, Some("/tmp"))]).await;
    assert_eq!(code, ResponseError::InvalidConfig.code());
    let (code, _) = incremental(&b, 4, "x", vec![op("log.retention.bytes", 0, Some("1"))]).await;
    assert_eq!(code, ResponseError::InvalidRequest.code());
    let (code, msg) = incremental(&b, 4, "", vec![op("log.retention.bytes", 1, None)]).await;
    assert_eq!(code, 0, "{msg}");
    assert_eq!(retention("plain"), -1);
}
