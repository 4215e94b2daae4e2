//! Authorization in the request handlers: for each API family an allowed and a denied request
//! with Kafka's error code, against an in-process broker whose ACLs are set through the hook
//! the cluster metadata calls ([`crate::acl::AclAuthority::set_bindings`]). The test broker's
//! `User:ANONYMOUS` (the helpers' principal) is a super user, so set-up needs no ACLs; the
//! principals under test are `User:alice` and `User:bob`.

use std::sync::Arc;

use ferry_authz::{
    AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType, ResourcePattern,
    ResourceType as Rt, CLUSTER_NAME,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::tests::{batch, broker, create, name, produce, produce_result, request};
use super::RequestContext;
use crate::broker::Broker;

const AUTHORIZER: &str =
    "\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\"super.users\" = \"User:ANONYMOUS\"\n";

async fn acl_broker(dir: &std::path::Path) -> Arc<Broker> {
    broker(dir, AUTHORIZER).await
}

fn ctx(user: &str) -> RequestContext {
    let mut c = RequestContext::for_tests();
    c.principal = ferry_authz::KafkaPrincipal::user(user);
    c
}

fn acl(
    user: &str,
    op: Op,
    rt: Rt,
    resource: &str,
    prefixed: bool,
    permission: AclPermissionType,
) -> AclBinding {
    let pattern = if prefixed {
        ResourcePattern::prefixed(rt, resource)
    } else {
        ResourcePattern::literal(rt, resource)
    };
    AclBinding::new(
        pattern,
        AccessControlEntry::new(format!("User:{user}"), "*", op, permission),
    )
}

fn allow(user: &str, op: Op, rt: Rt, resource: &str) -> AclBinding {
    acl(user, op, rt, resource, false, AclPermissionType::Allow)
}

fn deny(user: &str, op: Op, rt: Rt, resource: &str) -> AclBinding {
    acl(user, op, rt, resource, false, AclPermissionType::Deny)
}

fn set(b: &Broker, bindings: Vec<AclBinding>) {
    b.acls.set_bindings(bindings).unwrap();
}

async fn call_as(
    b: &Arc<Broker>,
    who: &str,
    key: ApiKey,
    v: i16,
    body: RequestKind,
) -> ResponseKind {
    super::handle(b, request(key, v, body), &ctx(who))
        .await
        .expect("a response")
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn produce_body(topic: &str, records: bytes::Bytes, txn: Option<&str>) -> RequestKind {
    RequestKind::Produce(
        ProduceRequest::default()
            .with_acks(1)
            .with_timeout_ms(1000)
            .with_transactional_id(txn.map(|t| TransactionalId(s(t))))
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(0)
                    .with_records(Some(records))])]),
    )
}

async fn produce_as(b: &Arc<Broker>, who: &str, body: RequestKind) -> i16 {
    match call_as(b, who, ApiKey::Produce, 9, body).await {
        ResponseKind::Produce(r) => produce_result(&r).0,
        other => panic!("{other:?}"),
    }
}

fn fetch_body(topic: &str, replica: i32) -> RequestKind {
    RequestKind::Fetch(
        FetchRequest::default()
            .with_replica_id(BrokerId(replica))
            .with_max_bytes(1 << 20)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)])]),
    )
}

async fn fetch_as(b: &Arc<Broker>, who: &str, body: RequestKind) -> i16 {
    match call_as(b, who, ApiKey::Fetch, 12, body).await {
        ResponseKind::Fetch(r) => r.responses[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

async fn metadata_as(b: &Arc<Broker>, who: &str, topics: Option<&[&str]>) -> MetadataResponse {
    let body = MetadataRequest::default()
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(name(t))))
                .collect()
        }))
        .with_allow_auto_topic_creation(true)
        .with_include_topic_authorized_operations(true)
        .with_include_cluster_authorized_operations(true);
    match call_as(b, who, ApiKey::Metadata, 12, RequestKind::Metadata(body)).await {
        ResponseKind::Metadata(r) => r,
        other => panic!("{other:?}"),
    }
}

const DENIED_TOPIC: i16 = 29; // TOPIC_AUTHORIZATION_FAILED
const DENIED_GROUP: i16 = 30; // GROUP_AUTHORIZATION_FAILED
const DENIED_CLUSTER: i16 = 31; // CLUSTER_AUTHORIZATION_FAILED
const DENIED_TXN: i16 = 53; // TRANSACTIONAL_ID_AUTHORIZATION_FAILED

#[test]
fn the_codes_are_kafkas() {
    assert_eq!(ResponseError::TopicAuthorizationFailed.code(), DENIED_TOPIC);
    assert_eq!(ResponseError::GroupAuthorizationFailed.code(), DENIED_GROUP);
    assert_eq!(
        ResponseError::ClusterAuthorizationFailed.code(),
        DENIED_CLUSTER
    );
    assert_eq!(
        ResponseError::TransactionalIdAuthorizationFailed.code(),
        DENIED_TXN
    );
}

#[tokio::test]
async fn without_an_authorizer_everything_is_allowed_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "orders", 1, &[]).await;
    // The hook does nothing without an authorizer.
    set(&b, vec![deny("alice", Op::All, Rt::Topic, "orders")]);
    assert_eq!(
        produce_as(
            &b,
            "alice",
            produce_body("orders", batch(&["a"], None), None)
        )
        .await,
        0
    );
    assert_eq!(fetch_as(&b, "alice", fetch_body("orders", -1)).await, 0);
    let m = metadata_as(&b, "alice", None).await;
    assert_eq!(m.topics.len(), 1);
    // Kafka's answer without an authorizer: the operations it defines for each type. A topic
    // has READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    // (bits 3-8, 10, 11); a cluster CREATE, ALTER, DESCRIBE, CLUSTER_ACTION,
    // DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE (bits 5, 7-12).
    assert_eq!(m.topics[0].topic_authorized_operations, 0b0_1101_1111_1000);
    assert_eq!(m.cluster_authorized_operations, 0b1_1111_1010_0000);
}

#[tokio::test]
async fn produce_needs_write_on_the_topic_and_the_transactional_id() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    set(
        &b,
        vec![
            allow("alice", Op::Write, Rt::Topic, "orders"),
            allow("alice", Op::Write, Rt::TransactionalId, "tx-a"),
        ],
    );
    let plain = || produce_body("orders", batch(&["a"], None), None);
    assert_eq!(produce_as(&b, "alice", plain()).await, 0);
    assert_eq!(produce_as(&b, "bob", plain()).await, DENIED_TOPIC);
    // An unknown topic is not revealed to a principal who may not write it.
    let unknown = produce_body("nope", batch(&["a"], None), None);
    assert_eq!(produce_as(&b, "bob", unknown).await, DENIED_TOPIC);
    // Transactional: WRITE on the transactional id first.
    let txn = |id: &str| {
        let records = ferry_test_support::Batches::values(["v"])
            .producer(9, 0, 0)
            .transactional()
            .encode();
        produce_body("orders", records, Some(id))
    };
    assert_eq!(produce_as(&b, "alice", txn("tx-b")).await, DENIED_TXN);
    assert_ne!(produce_as(&b, "alice", txn("tx-a")).await, DENIED_TXN);
    // Idempotent: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic.
    let idempotent = || produce_body("orders", batch(&["i"], Some((5, 0, 0))), None);
    assert_eq!(produce_as(&b, "bob", idempotent()).await, DENIED_CLUSTER);
    assert_eq!(produce_as(&b, "alice", idempotent()).await, 0);
}

#[tokio::test]
async fn fetch_needs_read_and_a_follower_cluster_action() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    produce(&b, "orders", 0, batch(&["a"], None), 1).await;
    set(
        &b,
        vec![
            allow("alice", Op::Read, Rt::Topic, "orders"),
            allow("broker2", Op::ClusterAction, Rt::Cluster, CLUSTER_NAME),
        ],
    );
    assert_eq!(fetch_as(&b, "alice", fetch_body("orders", -1)).await, 0);
    assert_eq!(
        fetch_as(&b, "bob", fetch_body("orders", -1)).await,
        DENIED_TOPIC
    );
    // A follower's fetch: READ on the topic is not enough.
    assert_eq!(
        fetch_as(&b, "alice", fetch_body("orders", 2)).await,
        DENIED_TOPIC
    );
    assert_ne!(
        fetch_as(&b, "broker2", fetch_body("orders", 2)).await,
        DENIED_TOPIC
    );
}

#[tokio::test]
async fn metadata_hides_topics_and_computes_operations() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    create(&b, "secret", 1, &[]).await;
    set(
        &b,
        vec![
            allow("alice", Op::Read, Rt::Topic, "orders"),
            allow("alice", Op::Describe, Rt::Cluster, CLUSTER_NAME),
        ],
    );
    let all = metadata_as(&b, "alice", None).await;
    let names: Vec<_> = all
        .topics
        .iter()
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    assert_eq!(names, vec!["orders"]);
    // READ implies DESCRIBE.
    assert_eq!(
        all.topics[0].topic_authorized_operations,
        Op::Read.bit() | Op::Describe.bit()
    );
    assert_eq!(all.cluster_authorized_operations, Op::Describe.bit());
    let named = metadata_as(&b, "alice", Some(&["secret"])).await;
    assert_eq!(named.topics[0].error_code, DENIED_TOPIC);
    assert!(named.topics[0].partitions.is_empty());
    // Auto-creation needs CREATE: nothing is created.
    let auto = metadata_as(&b, "alice", Some(&["fresh"])).await;
    assert_eq!(auto.topics[0].error_code, DENIED_TOPIC);
    assert!(b.metadata.topic("fresh").is_none());
    assert!(metadata_as(&b, "bob", None).await.topics.is_empty());
}

fn create_body(topic: &str) -> RequestKind {
    RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![
        CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(1)
            .with_replication_factor(-1),
    ]))
}

async fn create_as(b: &Arc<Broker>, who: &str, topic: &str) -> i16 {
    match call_as(b, who, ApiKey::CreateTopics, 7, create_body(topic)).await {
        ResponseKind::CreateTopics(r) => r.topics[0].error_code,
        other => panic!("{other:?}"),
    }
}

async fn delete_as(b: &Arc<Broker>, who: &str, topic: &str) -> i16 {
    let body = DeleteTopicsRequest::default().with_topic_names(vec![name(topic)]);
    match call_as(
        b,
        who,
        ApiKey::DeleteTopics,
        5,
        RequestKind::DeleteTopics(body),
    )
    .await
    {
        ResponseKind::DeleteTopics(r) => r.responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn create_and_delete_topics_with_literal_and_prefixed_acls() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    set(
        &b,
        vec![
            acl(
                "alice",
                Op::Create,
                Rt::Topic,
                "team-",
                true,
                AclPermissionType::Allow,
            ),
            acl(
                "alice",
                Op::Delete,
                Rt::Topic,
                "team-",
                true,
                AclPermissionType::Allow,
            ),
            allow("ops", Op::Create, Rt::Cluster, CLUSTER_NAME),
        ],
    );
    assert_eq!(create_as(&b, "alice", "team-a").await, 0);
    assert_eq!(create_as(&b, "alice", "other").await, DENIED_TOPIC);
    assert!(b.metadata.topic("other").is_none());
    // CREATE on the cluster covers every topic.
    assert_eq!(create_as(&b, "ops", "other").await, 0);
    assert_eq!(delete_as(&b, "alice", "other").await, DENIED_TOPIC);
    assert_eq!(delete_as(&b, "ops", "team-a").await, DENIED_TOPIC);
    assert_eq!(delete_as(&b, "alice", "team-a").await, 0);
}

#[tokio::test]
async fn configs_need_describe_and_alter_configs() {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    set(
        &b,
        vec![allow("alice", Op::AlterConfigs, Rt::Topic, "orders")],
    );
    let describe = |ty: i8, n: &str| {
        RequestKind::DescribeConfigs(DescribeConfigsRequest::default().with_resources(vec![
            DescribeConfigsResource::default()
                .with_resource_type(ty)
                .with_resource_name(s(n)),
        ]))
    };
    let describe_as = |who: &'static str, ty: i8, n: &'static str| {
        let b = b.clone();
        async move {
            match call_as(&b, who, ApiKey::DescribeConfigs, 4, describe(ty, n)).await {
                ResponseKind::DescribeConfigs(r) => r.results[0].error_code,
                other => panic!("{other:?}"),
            }
        }
    };
    // ALTER_CONFIGS implies DESCRIBE_CONFIGS.
    assert_eq!(describe_as("alice", 2, "orders").await, 0);
    assert_eq!(describe_as("bob", 2, "orders").await, DENIED_TOPIC);
    assert_eq!(describe_as("alice", 4, "1").await, DENIED_CLUSTER);
    let alter = RequestKind::IncrementalAlterConfigs(
        IncrementalAlterConfigsRequest::default().with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(s("orders"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(s("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(s("1000")))]),
        ]),
    );
    for (who, want) in [("bob", DENIED_TOPIC), ("alice", 0)] {
        match call_as(&b, who, ApiKey::IncrementalAlterConfigs, 1, alter.clone()).await {
            ResponseKind::IncrementalAlterConfigs(r) => {
                assert_eq!(r.responses[0].error_code, want, "{who}")
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn group_apis_need_the_group_and_topic_operations() {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    create(&b, "secret", 1, &[]).await;
    set(
        &b,
        vec![
            allow("alice", Op::Read, Rt::Group, "g"),
            allow("alice", Op::Read, Rt::Topic, "orders"),
        ],
    );
    let find = |group: &str| {
        RequestKind::FindCoordinator(
            FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![s(group)]),
        )
    };
    for (who, want) in [("alice", 0), ("bob", DENIED_GROUP)] {
        match call_as(&b, who, ApiKey::FindCoordinator, 4, find("g")).await {
            ResponseKind::FindCoordinator(r) => assert_eq!(r.coordinators[0].error_code, want),
            other => panic!("{other:?}"),
        }
    }
    // KIP-848 heartbeats: READ on the group, DESCRIBE on every subscribed topic.
    let cg = |topic: &str| {
        RequestKind::ConsumerGroupHeartbeat(
            ConsumerGroupHeartbeatRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_member_epoch(0)
                .with_rebalance_timeout_ms(30_000)
                .with_subscribed_topic_names(Some(vec![name(topic)])),
        )
    };
    for (who, topic, want) in [
        ("bob", "orders", DENIED_GROUP),
        ("alice", "secret", DENIED_TOPIC),
    ] {
        match call_as(&b, who, ApiKey::ConsumerGroupHeartbeat, 0, cg(topic)).await {
            ResponseKind::ConsumerGroupHeartbeat(r) => assert_eq!(r.error_code, want, "{who}"),
            other => panic!("{other:?}"),
        }
    }
    let heartbeat =
        RequestKind::Heartbeat(HeartbeatRequest::default().with_group_id(GroupId(s("g"))));
    match call_as(&b, "bob", ApiKey::Heartbeat, 4, heartbeat).await {
        ResponseKind::Heartbeat(r) => assert_eq!(r.error_code, DENIED_GROUP),
        other => panic!("{other:?}"),
    }
    let commit = |group: &str| {
        let topic = |t: &str| {
            OffsetCommitRequestTopic::default()
                .with_name(name(t))
                .with_partitions(vec![OffsetCommitRequestPartition::default()
                    .with_partition_index(0)
                    .with_committed_offset(1)])
        };
        RequestKind::OffsetCommit(
            OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_generation_id_or_member_epoch(-1)
                .with_topics(vec![topic("orders"), topic("secret")]),
        )
    };
    let codes = |r: &OffsetCommitResponse| -> Vec<(String, i16)> {
        let mut v: Vec<_> = r
            .topics
            .iter()
            .map(|t| (t.name.to_string(), t.partitions[0].error_code))
            .collect();
        v.sort();
        v
    };
    // The super user commits both topics; alice only the one she may read.
    match call_as(&b, "ANONYMOUS", ApiKey::OffsetCommit, 8, commit("g")).await {
        ResponseKind::OffsetCommit(r) => {
            assert_eq!(codes(&r), vec![("orders".into(), 0), ("secret".into(), 0)])
        }
        other => panic!("{other:?}"),
    }
    match call_as(&b, "alice", ApiKey::OffsetCommit, 8, commit("g")).await {
        ResponseKind::OffsetCommit(r) => assert_eq!(
            codes(&r),
            vec![("orders".into(), 0), ("secret".into(), DENIED_TOPIC)]
        ),
        other => panic!("{other:?}"),
    }
    match call_as(&b, "bob", ApiKey::OffsetCommit, 8, commit("g")).await {
        ResponseKind::OffsetCommit(r) => assert_eq!(
            codes(&r),
            vec![
                ("orders".into(), DENIED_GROUP),
                ("secret".into(), DENIED_GROUP)
            ]
        ),
        other => panic!("{other:?}"),
    }
    // OffsetFetch of all topics: READ on the group implies DESCRIBE; only "orders" is shown.
    let fetch = RequestKind::OffsetFetch(
        OffsetFetchRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_topics(None),
    );
    match call_as(&b, "alice", ApiKey::OffsetFetch, 7, fetch.clone()).await {
        ResponseKind::OffsetFetch(r) => {
            assert_eq!(r.error_code, 0);
            let names: Vec<_> = r.topics.iter().map(|t| t.name.to_string()).collect();
            assert_eq!(names, vec!["orders"]);
        }
        other => panic!("{other:?}"),
    }
    match call_as(&b, "bob", ApiKey::OffsetFetch, 7, fetch).await {
        ResponseKind::OffsetFetch(r) => assert_eq!(r.error_code, DENIED_GROUP),
        other => panic!("{other:?}"),
    }
    // ListGroups shows only groups the principal may describe.
    let list = RequestKind::ListGroups(ListGroupsRequest::default());
    for (who, want) in [("alice", 1), ("bob", 0)] {
        match call_as(&b, who, ApiKey::ListGroups, 4, list.clone()).await {
            ResponseKind::ListGroups(r) => assert_eq!(r.groups.len(), want, "{who}"),
            other => panic!("{other:?}"),
        }
    }
    let delete = RequestKind::DeleteGroups(
        DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
    );
    match call_as(&b, "alice", ApiKey::DeleteGroups, 2, delete).await {
        ResponseKind::DeleteGroups(r) => assert_eq!(r.results[0].error_code, DENIED_GROUP),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn transaction_apis_need_write_on_the_transactional_id() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    use kafka_protocol::messages::write_txn_markers_request::{
        WritableTxnMarker, WritableTxnMarkerTopic,
    };
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    set(
        &b,
        vec![allow("alice", Op::Write, Rt::TransactionalId, "tx")],
    );
    let init = |id: &str| {
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(s(id))))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
    };
    match call_as(&b, "bob", ApiKey::InitProducerId, 4, init("tx")).await {
        ResponseKind::InitProducerId(r) => assert_eq!(r.error_code, DENIED_TXN),
        other => panic!("{other:?}"),
    }
    match call_as(&b, "alice", ApiKey::InitProducerId, 4, init("tx")).await {
        ResponseKind::InitProducerId(r) => assert_ne!(r.error_code, DENIED_TXN),
        other => panic!("{other:?}"),
    }
    // Without WRITE on the topic: the topic is refused, the rest not attempted.
    let add = RequestKind::AddPartitionsToTxn(
        AddPartitionsToTxnRequest::default()
            .with_v3_and_below_transactional_id(TransactionalId(s("tx")))
            .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                .with_name(name("orders"))
                .with_partitions(vec![0])]),
    );
    match call_as(&b, "alice", ApiKey::AddPartitionsToTxn, 3, add).await {
        ResponseKind::AddPartitionsToTxn(r) => assert_eq!(
            r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
            DENIED_TOPIC
        ),
        other => panic!("{other:?}"),
    }
    let end = RequestKind::EndTxn(
        EndTxnRequest::default().with_transactional_id(TransactionalId(s("other"))),
    );
    match call_as(&b, "alice", ApiKey::EndTxn, 3, end).await {
        ResponseKind::EndTxn(r) => assert_eq!(r.error_code, DENIED_TXN),
        other => panic!("{other:?}"),
    }
    // Markers come from other brokers: CLUSTER_ACTION.
    let markers =
        RequestKind::WriteTxnMarkers(WriteTxnMarkersRequest::default().with_markers(vec![
            WritableTxnMarker::default().with_topics(vec![WritableTxnMarkerTopic::default()
            .with_name(name("orders"))
            .with_partition_indexes(vec![0])]),
        ]));
    match call_as(&b, "alice", ApiKey::WriteTxnMarkers, 1, markers).await {
        ResponseKind::WriteTxnMarkers(r) => assert_eq!(
            r.markers[0].topics[0].partitions[0].error_code,
            DENIED_CLUSTER
        ),
        other => panic!("{other:?}"),
    }
}

/// DescribeCluster is answered to everyone (as Kafka); without DESCRIBE on the cluster its
/// authorized-operations mask is 0.
#[tokio::test]
async fn cluster_apis_need_describe_on_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    set(
        &b,
        vec![allow("alice", Op::Describe, Rt::Cluster, CLUSTER_NAME)],
    );
    let describe = RequestKind::DescribeCluster(
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(true),
    );
    match call_as(&b, "alice", ApiKey::DescribeCluster, 1, describe.clone()).await {
        ResponseKind::DescribeCluster(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.cluster_authorized_operations, Op::Describe.bit());
        }
        other => panic!("{other:?}"),
    }
    match call_as(&b, "bob", ApiKey::DescribeCluster, 1, describe).await {
        ResponseKind::DescribeCluster(r) => {
            assert_eq!(r.error_code, 0);
            assert_eq!(r.cluster_authorized_operations, 0);
        }
        other => panic!("{other:?}"),
    }
    let dirs = RequestKind::DescribeLogDirs(DescribeLogDirsRequest::default());
    match call_as(&b, "bob", ApiKey::DescribeLogDirs, 4, dirs).await {
        ResponseKind::DescribeLogDirs(r) => assert_eq!(r.error_code, DENIED_CLUSTER),
        other => panic!("{other:?}"),
    }
    // Moving a replica between log dirs needs ALTER on the cluster: DESCRIBE is not enough.
    let alter = || {
        use kafka_protocol::messages::alter_replica_log_dirs_request::{
            AlterReplicaLogDir, AlterReplicaLogDirTopic,
        };
        RequestKind::AlterReplicaLogDirs(AlterReplicaLogDirsRequest::default().with_dirs(vec![
            AlterReplicaLogDir::default()
                .with_path(StrBytes::from_static_str("/elsewhere"))
                .with_topics(vec![AlterReplicaLogDirTopic::default()
                    .with_name(TopicName(StrBytes::from_static_str("orders")))
                    .with_partitions(vec![0])]),
        ]))
    };
    for who in ["alice", "bob"] {
        match call_as(&b, who, ApiKey::AlterReplicaLogDirs, 2, alter()).await {
            ResponseKind::AlterReplicaLogDirs(r) => {
                assert_eq!(
                    r.results[0].partitions[0].error_code, DENIED_CLUSTER,
                    "{who}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn deny_beats_allow_and_super_users_pass_everything() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    create(&b, "orders", 1, &[]).await;
    set(
        &b,
        vec![
            acl(
                "alice",
                Op::All,
                Rt::Topic,
                "ord",
                true,
                AclPermissionType::Allow,
            ),
            deny("alice", Op::Write, Rt::Topic, "orders"),
            deny("ANONYMOUS", Op::All, Rt::Topic, "*"),
        ],
    );
    let plain = || produce_body("orders", batch(&["a"], None), None);
    assert_eq!(produce_as(&b, "alice", plain()).await, DENIED_TOPIC);
    // DENY WRITE does not deny READ.
    assert_eq!(fetch_as(&b, "alice", fetch_body("orders", -1)).await, 0);
    // ANONYMOUS is a super user of the test broker: its DENY does not apply.
    assert_eq!(produce_as(&b, "ANONYMOUS", plain()).await, 0);
}

#[tokio::test]
async fn allow_everyone_if_no_acl_found() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!("{AUTHORIZER}\"allow.everyone.if.no.acl.found\" = true\n");
    let b = broker(dir.path(), &extra).await;
    create(&b, "open", 1, &[]).await;
    create(&b, "closed", 1, &[]).await;
    set(&b, vec![allow("alice", Op::Write, Rt::Topic, "closed")]);
    let to = |t: &str| produce_body(t, batch(&["a"], None), None);
    assert_eq!(produce_as(&b, "bob", to("open")).await, 0);
    // An ACL applies to "closed": the flag no longer decides.
    assert_eq!(produce_as(&b, "bob", to("closed")).await, DENIED_TOPIC);
    assert_eq!(produce_as(&b, "alice", to("closed")).await, 0);
}

#[tokio::test]
async fn acl_hosts_are_compared_as_java_writes_them() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    let entry = AccessControlEntry::new(
        "User:alice",
        "0:0:0:0:0:0:0:1",
        Op::Write,
        AclPermissionType::Allow,
    );
    set(
        &b,
        vec![AclBinding::new(
            ResourcePattern::literal(Rt::Topic, "orders"),
            entry,
        )],
    );
    let mut v6 = RequestContext::new(
        "c".into(),
        "::1".parse().unwrap(),
        Arc::new(crate::security::ConnectionSecurity::plaintext("PLAINTEXT")),
    );
    v6.principal = ferry_authz::KafkaPrincipal::user("alice");
    assert_eq!(v6.client_host, "/0:0:0:0:0:0:0:1");
    assert!(v6.may_topic(&b, Op::Write, "orders"));
    // The same principal from 127.0.0.1 is not allowed.
    assert!(!ctx("alice").may_topic(&b, Op::Write, "orders"));
}

#[tokio::test]
async fn new_bindings_replace_the_old_and_keep_the_settings() {
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    set(&b, vec![allow("alice", Op::Write, Rt::Topic, "orders")]);
    assert!(ctx("alice").may_topic(&b, Op::Write, "orders"));
    set(&b, vec![allow("bob", Op::Write, Rt::Topic, "orders")]);
    assert!(!ctx("alice").may_topic(&b, Op::Write, "orders"));
    assert!(ctx("bob").may_topic(&b, Op::Write, "orders"));
    // super.users survives the replacement.
    assert!(ctx("ANONYMOUS").may_topic(&b, Op::Write, "orders"));
    assert_eq!(b.acls.bindings().len(), 1);
}

/// The whole path: CreateAcls stores a binding in the cluster metadata, the broker applies the
/// new image (as its image-following task does), and the authorizer then decides with it;
/// DeleteAcls takes it away again.
#[tokio::test]
async fn acls_created_through_the_api_decide_once_the_image_is_applied() {
    use kafka_protocol::messages::create_acls_request::AclCreation;
    use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
    let dir = tempfile::tempdir().unwrap();
    let b = acl_broker(dir.path()).await;
    assert!(!ctx("alice").may_topic(&b, Op::Write, "orders"));
    let create = CreateAclsRequest::default().with_creations(vec![AclCreation::default()
        .with_resource_type(Rt::Topic.code())
        .with_resource_name(s("orders"))
        .with_resource_pattern_type(3)
        .with_principal(s("User:alice"))
        .with_host(s("*"))
        .with_operation(Op::Write.code())
        .with_permission_type(AclPermissionType::Allow.code())]);
    let ResponseKind::CreateAcls(r) = call_as(
        &b,
        "ANONYMOUS",
        ApiKey::CreateAcls,
        3,
        RequestKind::CreateAcls(create),
    )
    .await
    else {
        panic!("not a CreateAcls response");
    };
    assert_eq!(r.results[0].error_code, 0);
    b.apply_image(&b.metadata.image());
    assert!(ctx("alice").may_topic(&b, Op::Write, "orders"));
    assert!(!ctx("bob").may_topic(&b, Op::Write, "orders"));

    let delete = DeleteAclsRequest::default().with_filters(vec![DeleteAclsFilter::default()
        .with_resource_type_filter(Rt::Topic.code())
        .with_resource_name_filter(Some(s("orders")))
        .with_pattern_type_filter(3)
        .with_principal_filter(Some(s("User:alice")))
        .with_host_filter(None)
        .with_operation(Op::Any.code())
        .with_permission_type(AclPermissionType::Any.code())]);
    let ResponseKind::DeleteAcls(r) = call_as(
        &b,
        "ANONYMOUS",
        ApiKey::DeleteAcls,
        3,
        RequestKind::DeleteAcls(delete),
    )
    .await
    else {
        panic!("not a DeleteAcls response");
    };
    assert_eq!(r.filter_results[0].error_code, 0);
    b.apply_image(&b.metadata.image());
    assert!(!ctx("alice").may_topic(&b, Op::Write, "orders"));
}
