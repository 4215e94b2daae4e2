//! The APIs clients and tools call beside produce and consume: ApiVersions' feature levels,
//! DescribeTopicPartitions (KIP-966) with its paging and authorization, client telemetry
//! (KIP-714), and a follower's known high watermark in Fetch v18 (KIP-1166).

use std::sync::Arc;

use ferry_authz::{
    AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType, ResourcePattern,
    ResourceType as Rt,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_topic_partitions_request::{Cursor, TopicRequest};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::*;

use super::tests::{batch, broker, create, name, produce, request};
use super::RequestContext;
use crate::broker::Broker;

async fn call(b: &Arc<Broker>, ctx: &RequestContext, v: i16, body: RequestKind) -> ResponseKind {
    let key = match &body {
        RequestKind::DescribeTopicPartitions(_) => ApiKey::DescribeTopicPartitions,
        RequestKind::ApiVersions(_) => ApiKey::ApiVersions,
        RequestKind::GetTelemetrySubscriptions(_) => ApiKey::GetTelemetrySubscriptions,
        RequestKind::PushTelemetry(_) => ApiKey::PushTelemetry,
        RequestKind::ListConfigResources(_) => ApiKey::ListConfigResources,
        RequestKind::Fetch(_) => ApiKey::Fetch,
        other => panic!("no key for {other:?}"),
    };
    super::handle(b, request(key, v, body), ctx)
        .await
        .expect("a response")
}

fn user(name: &str) -> RequestContext {
    let mut c = RequestContext::for_tests();
    c.principal = ferry_authz::KafkaPrincipal::user(name);
    c
}

fn dtp(topics: &[&str], limit: i32, cursor: Option<(&str, i32)>) -> RequestKind {
    RequestKind::DescribeTopicPartitions(
        DescribeTopicPartitionsRequest::default()
            .with_topics(
                topics
                    .iter()
                    .map(|t| TopicRequest::default().with_name(name(t)))
                    .collect(),
            )
            .with_response_partition_limit(limit)
            .with_cursor(cursor.map(|(t, p)| {
                Cursor::default()
                    .with_topic_name(name(t))
                    .with_partition_index(p)
            })),
    )
}

async fn describe_as(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    body: RequestKind,
) -> DescribeTopicPartitionsResponse {
    match call(b, ctx, 0, body).await {
        ResponseKind::DescribeTopicPartitions(r) => r,
        other => panic!("{other:?}"),
    }
}

/// (topic, error, partition indexes) of each answered topic, and the next cursor.
type Page = (Vec<(String, i16, Vec<i32>)>, Option<(String, i32)>);

fn page(r: &DescribeTopicPartitionsResponse) -> Page {
    let topics = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
                t.partitions.iter().map(|p| p.partition_index).collect(),
            )
        })
        .collect();
    let cursor = r
        .next_cursor
        .as_ref()
        .map(|c| (c.topic_name.to_string(), c.partition_index));
    (topics, cursor)
}

fn t(name: &str, partitions: std::ops::Range<i32>) -> (String, i16, Vec<i32>) {
    (name.to_string(), 0, partitions.collect())
}

#[tokio::test]
async fn describe_topic_partitions_pages_by_partitions_in_name_order() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "b", 3, &[]).await;
    create(&b, "a", 2, &[]).await;
    create(&b, "c", 1, &[]).await;
    let ctx = RequestContext::for_tests();

    // All topics, two partitions a page: the cut falls inside "b", then at its end.
    let p1 = describe_as(&b, &ctx, dtp(&[], 2, None)).await;
    assert_eq!(page(&p1), (vec![t("a", 0..2)], Some(("b".into(), 0))));
    let p2 = describe_as(&b, &ctx, dtp(&[], 2, Some(("b", 0)))).await;
    assert_eq!(page(&p2), (vec![t("b", 0..2)], Some(("b".into(), 2))));
    let p3 = describe_as(&b, &ctx, dtp(&[], 2, Some(("b", 2)))).await;
    assert_eq!(page(&p3), (vec![t("b", 2..3), t("c", 0..1)], None));

    // What a partition carries: leader, epoch, replicas, ISR, empty ELR lists, no offline.
    let part = &p1.topics[0].partitions[0];
    assert_eq!(part.leader_id, BrokerId(b.node_id));
    assert!(part.leader_epoch >= 0);
    assert_eq!(part.replica_nodes, vec![BrokerId(b.node_id)]);
    assert_eq!(part.isr_nodes, vec![BrokerId(b.node_id)]);
    assert_eq!(part.eligible_leader_replicas, Some(vec![]));
    assert_eq!(part.last_known_elr, Some(vec![]));
    assert!(part.offline_replicas.is_empty());
    let topic = &p1.topics[0];
    assert_eq!(Some(topic.topic_id), b.metadata.topic("a").map(|t| t.id));
    assert!(!topic.is_internal);
    assert_ne!(topic.topic_authorized_operations, i32::MIN);

    // Named topics: a missing one is answered in its place, an invalid name as such.
    let named = describe_as(&b, &ctx, dtp(&["c", "nope", "a", "bad/name"], 2000, None)).await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let invalid = ResponseError::InvalidTopicException.code();
    assert_eq!(
        page(&named),
        (
            vec![
                t("a", 0..2),
                ("bad/name".into(), invalid, vec![]),
                t("c", 0..1),
                ("nope".into(), unknown, vec![]),
            ],
            None
        )
    );
    // A limit below 1 is read as 1.
    let one = describe_as(&b, &ctx, dtp(&["a"], 0, None)).await;
    assert_eq!(page(&one), (vec![t("a", 0..1)], Some(("a".into(), 1))));
}

#[tokio::test]
async fn describe_topic_partitions_refuses_a_cursor_outside_the_request() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "a", 1, &[]).await;
    let ctx = RequestContext::for_tests();
    let bad = ResponseError::InvalidRequest.code();
    let r = describe_as(&b, &ctx, dtp(&["a"], 10, Some(("z", 0)))).await;
    assert_eq!(page(&r), (vec![("a".into(), bad, vec![])], None));
    let r = describe_as(&b, &ctx, dtp(&["a"], 10, Some(("a", -1)))).await;
    assert_eq!(page(&r), (vec![("a".into(), bad, vec![])], None));
}

#[tokio::test]
async fn describe_topic_partitions_hides_or_refuses_topics_without_describe() {
    let authorizer = "\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\"super.users\" = \"User:ANONYMOUS\"\n";
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), authorizer).await;
    create(&b, "open", 1, &[]).await;
    create(&b, "secret", 1, &[]).await;
    let allow = AclBinding::new(
        ResourcePattern::literal(Rt::Topic, "open"),
        AccessControlEntry::new("User:alice", "*", Op::Describe, AclPermissionType::Allow),
    );
    b.acls.set_bindings(vec![allow]).unwrap();
    let alice = user("alice");

    // All topics: the secret one is not mentioned.
    let all = describe_as(&b, &alice, dtp(&[], 2000, None)).await;
    assert_eq!(page(&all), (vec![t("open", 0..1)], None));
    // By name: refused, whether it exists or not, with no topic id, after the page.
    let named = describe_as(&b, &alice, dtp(&["secret", "ghost", "open"], 2000, None)).await;
    let denied = ResponseError::TopicAuthorizationFailed.code();
    assert_eq!(
        page(&named),
        (
            vec![
                t("open", 0..1),
                ("ghost".into(), denied, vec![]),
                ("secret".into(), denied, vec![]),
            ],
            None
        )
    );
    assert!(named.topics[2].topic_id.is_nil());
}

#[tokio::test]
async fn api_versions_reports_kafka_4_feature_levels() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    let ctx = RequestContext::for_tests();
    let body = || RequestKind::ApiVersions(ApiVersionsRequest::default());
    let ResponseKind::ApiVersions(v4) = call(&b, &ctx, 4, body()).await else {
        panic!("not ApiVersions")
    };
    let finalized: Vec<(String, i16)> = v4
        .finalized_features
        .iter()
        .map(|f| (f.name.to_string(), f.max_version_level))
        .collect();
    assert_eq!(
        finalized,
        [
            ("metadata.version".to_string(), 25),
            ("group.version".to_string(), 1),
            ("transaction.version".to_string(), 1),
        ]
    );
    assert!(v4.finalized_features_epoch >= 0);
    assert_eq!(v4.supported_features.len(), 3);
    // v3: the ranges starting at 0 are left out (KAFKA-17492).
    let ResponseKind::ApiVersions(v3) = call(&b, &ctx, 3, body()).await else {
        panic!("not ApiVersions")
    };
    assert_eq!(v3.supported_features.len(), 1);
    assert_eq!(v3.finalized_features.len(), 3);
}

#[tokio::test]
async fn telemetry_asks_for_no_metrics_and_accepts_a_push_of_its_subscription() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    let ctx = RequestContext::for_tests();
    let get = RequestKind::GetTelemetrySubscriptions(Default::default());
    let ResponseKind::GetTelemetrySubscriptions(sub) = call(&b, &ctx, 0, get).await else {
        panic!("not GetTelemetrySubscriptions")
    };
    assert_eq!(sub.error_code, 0);
    assert!(!sub.client_instance_id.is_nil());
    assert!(sub.requested_metrics.is_empty());
    assert!(sub.push_interval_ms > 0);
    let push = |subscription_id| {
        RequestKind::PushTelemetry(
            PushTelemetryRequest::default()
                .with_client_instance_id(sub.client_instance_id)
                .with_subscription_id(subscription_id)
                .with_terminating(true),
        )
    };
    let ResponseKind::PushTelemetry(ok) = call(&b, &ctx, 0, push(sub.subscription_id)).await else {
        panic!("not PushTelemetry")
    };
    assert_eq!(ok.error_code, 0);
    let ResponseKind::PushTelemetry(stale) =
        call(&b, &ctx, 0, push(sub.subscription_id.wrapping_add(1))).await
    else {
        panic!("not PushTelemetry")
    };
    assert_eq!(
        stale.error_code,
        ResponseError::UnknownSubscriptionId.code()
    );

    let list = RequestKind::ListConfigResources(Default::default());
    let ResponseKind::ListConfigResources(l) = call(&b, &ctx, 0, list).await else {
        panic!("not ListConfigResources")
    };
    assert_eq!(l.error_code, 0);
    assert!(l.config_resources.is_empty());
}

#[tokio::test]
async fn listing_client_metrics_resources_needs_describe_configs_on_the_cluster() {
    let authorizer = "\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\"super.users\" = \"User:ANONYMOUS\"\n";
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), authorizer).await;
    let list = || RequestKind::ListConfigResources(Default::default());
    let ResponseKind::ListConfigResources(l) = call(&b, &user("bob"), 0, list()).await else {
        panic!("not ListConfigResources")
    };
    assert_eq!(
        l.error_code,
        ResponseError::ClusterAuthorizationFailed.code()
    );
}

/// A v18 follower fetch (this broker leads; replica 2 fetches) at the log end offset, with
/// `known` as the high watermark the follower reports (or none).
fn follower_fetch(b: &Broker, offset: i64, known: Option<i64>) -> RequestKind {
    let topic_id = b.metadata.topic("t").map(|t| t.id).unwrap_or_default();
    RequestKind::Fetch(
        FetchRequest::default()
            .with_replica_state(ReplicaState::default().with_replica_id(BrokerId(2)))
            .with_max_wait_ms(60_000)
            .with_min_bytes(1 << 20)
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)
                    .with_high_watermark(known.unwrap_or(i64::MAX))])]),
    )
}

/// KIP-1166: a follower that reports a high watermark below the leader's is answered at once,
/// not after the long poll, so it learns the new one. (Paused tokio time: the long poll's
/// 60 s pass on the test clock only.)
#[tokio::test(start_paused = true)]
async fn a_follower_reporting_a_stale_high_watermark_is_not_kept_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    produce(&b, "t", 0, batch(&["a", "b", "c"], None), 1).await;
    let ctx = RequestContext::for_tests();

    let started = tokio::time::Instant::now();
    let ResponseKind::Fetch(r) = call(&b, &ctx, 18, follower_fetch(&b, 3, Some(0))).await else {
        panic!("not Fetch")
    };
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(r.responses[0].partitions[0].error_code, 0);
    assert_eq!(r.responses[0].partitions[0].high_watermark, 3);

    // Reporting the current one (or nothing, as before v18), it waits out the long poll.
    for known in [Some(3), None] {
        let started = tokio::time::Instant::now();
        call(&b, &ctx, 18, follower_fetch(&b, 3, known)).await;
        assert!(
            started.elapsed() >= std::time::Duration::from_secs(60),
            "{known:?}"
        );
    }
}

/// ListConfigResources v1 (KIP-1142): the resources that have configs, for the types asked (all
/// when none), in Kafka's order; a type it does not list fails the request.
#[tokio::test]
async fn list_config_resources_v1_lists_brokers_and_topics_in_kafkas_order() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "zeta", 1, &[]).await;
    create(&b, "alpha", 1, &[]).await;
    let ctx = RequestContext::for_tests();
    let list = |types: Vec<i8>| {
        RequestKind::ListConfigResources(
            ListConfigResourcesRequest::default().with_resource_types(types),
        )
    };
    let rows = |r: ResponseKind| match r {
        ResponseKind::ListConfigResources(l) => {
            assert_eq!(l.error_code, 0);
            l.config_resources
                .iter()
                .map(|c| (c.resource_type, c.resource_name.to_string()))
                .collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };
    let node = b.node_id.to_string();
    let all = rows(call(&b, &ctx, 1, list(vec![])).await);
    let topics: Vec<(i8, String)> = all.iter().filter(|(t, _)| *t == 2).cloned().collect();
    assert!(topics.contains(&(2, "alpha".into())) && topics.contains(&(2, "zeta".into())));
    let alpha = all.iter().position(|r| *r == (2, "alpha".into())).unwrap();
    let zeta = all.iter().position(|r| *r == (2, "zeta".into())).unwrap();
    assert!(alpha < zeta, "topics sorted: {all:?}");
    // The broker as a BROKER_LOGGER, then as a BROKER, before the topics.
    assert_eq!(all[0], (8, node.clone()), "{all:?}");
    assert_eq!(all[1], (4, node.clone()), "{all:?}");
    // Only the types asked, in Kafka's order whatever the request's.
    let brokers_only = rows(call(&b, &ctx, 1, list(vec![4])).await);
    assert_eq!(brokers_only, vec![(4, node.clone())]);
    let two = rows(call(&b, &ctx, 1, list(vec![2, 8])).await);
    assert_eq!(two[0], (8, node.clone()));
    assert!(two[1..].iter().all(|(t, _)| *t == 2));
    // v0 is client metrics only: ferry has none.
    assert!(rows(call(&b, &ctx, 0, list(vec![])).await).is_empty());
    // A type it does not list fails the whole request.
    match call(&b, &ctx, 1, list(vec![2, 64])).await {
        ResponseKind::ListConfigResources(l) => {
            assert_eq!(l.error_code, ResponseError::UnsupportedVersion.code());
            assert!(l.config_resources.is_empty());
        }
        other => panic!("{other:?}"),
    }
}
