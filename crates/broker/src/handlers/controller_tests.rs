//! ElectLeaders and DescribeQuorum at the handler: authorization, the request-level errors,
//! each version's encoding, and the partition codes on a single broker (a local quorum; the
//! elections themselves are tested in `ferry_cluster`, the cluster in tests/e2e).

use std::sync::Arc;

use bytes::BytesMut;
use ferry_authz::{AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType};
use ferry_authz::{ResourcePattern, ResourceType as Rt, CLUSTER_NAME};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;

use super::tests::{broker, create, name, request};
use super::RequestContext;
use crate::broker::Broker;

const AUTHORIZER: &str =
    "\"authorizer.class.name\" = \"org.apache.kafka.metadata.authorizer.StandardAuthorizer\"\n\"super.users\" = \"User:ANONYMOUS\"\n";

fn ctx(user: &str) -> RequestContext {
    let mut c = RequestContext::for_tests();
    c.principal = ferry_authz::KafkaPrincipal::user(user);
    c
}

fn allow_cluster(b: &Broker, user: &str, op: Op) {
    b.acls
        .set_bindings(vec![AclBinding::new(
            ResourcePattern::literal(Rt::Cluster, CLUSTER_NAME),
            AccessControlEntry::new(format!("User:{user}"), "*", op, AclPermissionType::Allow),
        )])
        .unwrap();
}

fn elect_request(kind: i8, partitions: Option<&[(&str, &[i32])]>, timeout_ms: i32) -> RequestKind {
    RequestKind::ElectLeaders(
        ElectLeadersRequest::default()
            .with_election_type(kind)
            .with_timeout_ms(timeout_ms)
            .with_topic_partitions(partitions.map(|ps| {
                ps.iter()
                    .map(|(t, p)| {
                        TopicPartitions::default()
                            .with_topic(name(t))
                            .with_partitions(p.to_vec())
                    })
                    .collect()
            })),
    )
}

/// The response, checked to encode at `version`.
async fn elect_as(
    b: &Arc<Broker>,
    who: &RequestContext,
    version: i16,
    body: RequestKind,
) -> ElectLeadersResponse {
    match super::handle(b, request(ApiKey::ElectLeaders, version, body), who).await {
        Some(ResponseKind::ElectLeaders(r)) => {
            r.encode(&mut BytesMut::new(), version)
                .unwrap_or_else(|e| panic!("v{version} does not encode: {e}"));
            r
        }
        other => panic!("{other:?}"),
    }
}

/// (topic, partition, error code) of every partition result.
fn codes(r: &ElectLeadersResponse) -> Vec<(String, i32, i16)> {
    r.replica_election_results
        .iter()
        .flat_map(|t| {
            t.partition_result
                .iter()
                .map(|p| (t.topic.to_string(), p.partition_id, p.error_code))
        })
        .collect()
}

#[tokio::test]
async fn elect_leaders_needs_alter_on_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), AUTHORIZER).await;
    create(&b, "t", 1, &[]).await;
    let body = || elect_request(0, Some(&[("t", &[0])]), 10_000);
    let denied = ResponseError::ClusterAuthorizationFailed.code();
    for version in [1, 2] {
        let r = elect_as(&b, &ctx("alice"), version, body()).await;
        assert_eq!(r.error_code, denied);
        assert_eq!(codes(&r), vec![("t".into(), 0, denied)]);
    }
    // v0 has no top-level error: the partitions carry it.
    let r = elect_as(&b, &ctx("alice"), 0, body()).await;
    assert_eq!(
        (r.error_code, codes(&r)),
        (0, vec![("t".into(), 0, denied)])
    );
    // DESCRIBE is not enough; ALTER is.
    allow_cluster(&b, "alice", Op::Describe);
    let r = elect_as(&b, &ctx("alice"), 2, body()).await;
    assert_eq!(r.error_code, denied);
    allow_cluster(&b, "alice", Op::Alter);
    let r = elect_as(&b, &ctx("alice"), 2, body()).await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        codes(&r),
        vec![("t".into(), 0, ResponseError::ElectionNotNeeded.code())]
    );
}

#[tokio::test]
async fn an_unknown_election_type_is_an_invalid_request() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let r = elect_as(
        &b,
        &RequestContext::for_tests(),
        2,
        elect_request(7, Some(&[("t", &[0])]), 10_000),
    )
    .await;
    let invalid = ResponseError::InvalidRequest.code();
    assert_eq!(r.error_code, invalid);
    assert_eq!(codes(&r), vec![("t".into(), 0, invalid)]);
    // v0 carries no election type: the same byte there is ignored (preferred).
    let r = elect_as(
        &b,
        &RequestContext::for_tests(),
        0,
        elect_request(7, Some(&[("t", &[0])]), 10_000),
    )
    .await;
    assert_eq!(
        codes(&r),
        vec![("t".into(), 0, ResponseError::ElectionNotNeeded.code())]
    );
}

#[tokio::test]
async fn a_timeout_of_zero_is_past_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let r = elect_as(
        &b,
        &RequestContext::for_tests(),
        1,
        elect_request(1, Some(&[("t", &[0])]), 0),
    )
    .await;
    let timed_out = ResponseError::RequestTimedOut.code();
    assert_eq!(r.error_code, timed_out);
    assert_eq!(codes(&r), vec![("t".into(), 0, timed_out)]);
}

#[tokio::test]
async fn partition_codes_and_null_partitions_on_one_broker() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 2, &[]).await;
    let who = RequestContext::for_tests();
    let r = elect_as(
        &b,
        &who,
        2,
        elect_request(1, Some(&[("t", &[0, 5]), ("nope", &[0])]), 10_000),
    )
    .await;
    assert_eq!(r.error_code, 0);
    assert_eq!(
        codes(&r),
        vec![
            ("t".into(), 0, ResponseError::ElectionNotNeeded.code()),
            ("t".into(), 5, ResponseError::UnknownTopicOrPartition.code()),
            (
                "nope".into(),
                0,
                ResponseError::UnknownTopicOrPartition.code()
            ),
        ]
    );
    // Every partition: none needs an election, so none is listed; the topic is.
    let r = elect_as(&b, &who, 2, elect_request(0, None, 10_000)).await;
    assert_eq!(r.error_code, 0);
    assert!(codes(&r).is_empty(), "{r:?}");
    assert!(r
        .replica_election_results
        .iter()
        .any(|t| t.topic.as_str() == "t"));
}

fn quorum_request(topic: &str, partition: i32) -> RequestKind {
    RequestKind::DescribeQuorum(DescribeQuorumRequest::default().with_topics(
        vec![TopicData::default()
            .with_topic_name(name(topic))
            .with_partitions(vec![
                PartitionData::default().with_partition_index(partition)
            ])],
    ))
}

async fn describe_as(
    b: &Arc<Broker>,
    who: &RequestContext,
    version: i16,
    body: RequestKind,
) -> DescribeQuorumResponse {
    match super::handle(b, request(ApiKey::DescribeQuorum, version, body), who).await {
        Some(ResponseKind::DescribeQuorum(r)) => {
            r.encode(&mut BytesMut::new(), version)
                .unwrap_or_else(|e| panic!("v{version} does not encode: {e}"));
            r
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn describe_quorum_of_a_single_broker_in_every_version() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    let who = RequestContext::for_tests();
    for version in 0..=2 {
        let r = describe_as(&b, &who, version, quorum_request("__cluster_metadata", 0)).await;
        assert_eq!(r.error_code, 0);
        let p = &r.topics[0].partitions[0];
        assert_eq!((p.error_code, p.leader_id.0), (0, b.node_id));
        assert!(p.high_watermark > 0);
        assert_eq!(p.current_voters.len(), 1);
        assert_eq!(p.current_voters[0].replica_id.0, b.node_id);
        assert!(p.observers.is_empty());
        if version >= 1 {
            assert!(p.current_voters[0].last_fetch_timestamp > 0);
        }
        if version >= 2 {
            assert_eq!(r.nodes.len(), 1);
        }
    }
    let r = describe_as(&b, &who, 2, quorum_request("__cluster_metadata", 1)).await;
    assert_eq!(
        r.topics[0].partitions[0].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
}

#[tokio::test]
async fn describe_quorum_needs_describe_on_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), AUTHORIZER).await;
    for version in [0, 2] {
        let r = describe_as(
            &b,
            &ctx("bob"),
            version,
            quorum_request("__cluster_metadata", 0),
        )
        .await;
        assert_eq!(
            r.error_code,
            ResponseError::ClusterAuthorizationFailed.code()
        );
    }
    allow_cluster(&b, "bob", Op::Describe);
    let r = describe_as(&b, &ctx("bob"), 2, quorum_request("__cluster_metadata", 0)).await;
    assert_eq!(r.error_code, 0);
}
