//! The group APIs' answers around the coordinator: without one (each API carries the error
//! where Kafka puts it), and commits to partitions that do not exist.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic,
};
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::groups::unavailable;
use super::tests::{broker, create, name, request};
use super::RequestContext;

const NOT_AVAILABLE: i16 = 15;

fn group(id: &str) -> GroupId {
    GroupId(StrBytes::from_string(id.to_string()))
}

/// The unavailable answer of `body` at `version`, checked to encode.
fn answer(key: ApiKey, body: RequestKind, version: i16) -> ResponseKind {
    let r =
        unavailable(body, version, NOT_AVAILABLE).unwrap_or_else(|| panic!("{key:?}: no answer"));
    ferry_protocol::encode_response(key, version, 1, &r)
        .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
    r
}

/// The answer of `body` at the newest version ferry serves, checked to encode at every one.
fn answer_all(key: ApiKey, body: RequestKind) -> ResponseKind {
    let mut last = None;
    for v in versions(key) {
        last = Some(answer(key, body.clone(), v));
    }
    last.unwrap()
}

/// Every version ferry serves of `key`.
fn versions(key: ApiKey) -> std::ops::RangeInclusive<i16> {
    let range = ferry_protocol::supported_range(key).unwrap();
    range.min..=range.max
}

#[test]
fn apis_with_a_top_level_error_carry_it() {
    let cases = [
        (
            ApiKey::JoinGroup,
            RequestKind::JoinGroup(Default::default()),
        ),
        (
            ApiKey::SyncGroup,
            RequestKind::SyncGroup(Default::default()),
        ),
        (
            ApiKey::Heartbeat,
            RequestKind::Heartbeat(Default::default()),
        ),
        (
            ApiKey::LeaveGroup,
            RequestKind::LeaveGroup(Default::default()),
        ),
        (
            ApiKey::ListGroups,
            RequestKind::ListGroups(Default::default()),
        ),
        (
            ApiKey::OffsetDelete,
            RequestKind::OffsetDelete(Default::default()),
        ),
        (
            ApiKey::ConsumerGroupHeartbeat,
            RequestKind::ConsumerGroupHeartbeat(Default::default()),
        ),
    ];
    for (key, body, v) in cases
        .into_iter()
        .flat_map(|(key, body)| versions(key).map(move |v| (key, body.clone(), v)))
    {
        let code = match answer(key, body, v) {
            ResponseKind::JoinGroup(r) => r.error_code,
            ResponseKind::SyncGroup(r) => r.error_code,
            ResponseKind::Heartbeat(r) => r.error_code,
            ResponseKind::LeaveGroup(r) => r.error_code,
            ResponseKind::ListGroups(r) => r.error_code,
            ResponseKind::OffsetDelete(r) => r.error_code,
            ResponseKind::ConsumerGroupHeartbeat(r) => r.error_code,
            other => panic!("{key:?}: {other:?}"),
        };
        assert_eq!(code, NOT_AVAILABLE, "{key:?} v{v}");
    }
}

#[test]
fn offset_commit_answers_every_partition() {
    let body = OffsetCommitRequest::default()
        .with_group_id(group("g"))
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("a"))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(0),
                    OffsetCommitRequestPartition::default().with_partition_index(3),
                ]),
            OffsetCommitRequestTopic::default()
                .with_name(name("b"))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_partition_index(1)
                ]),
        ]);
    let ResponseKind::OffsetCommit(r) =
        answer_all(ApiKey::OffsetCommit, RequestKind::OffsetCommit(body))
    else {
        panic!()
    };
    let got: Vec<(String, i32, i16)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index, p.error_code))
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("a".into(), 0, NOT_AVAILABLE),
            ("a".into(), 3, NOT_AVAILABLE),
            ("b".into(), 1, NOT_AVAILABLE)
        ]
    );
}

#[test]
fn offset_fetch_carries_the_error_where_each_version_has_it() {
    let topics = Some(vec![OffsetFetchRequestTopic::default()
        .with_name(name("a"))
        .with_partition_indexes(vec![0, 1])]);
    let v1 = OffsetFetchRequest::default()
        .with_group_id(group("g"))
        .with_topics(topics.clone());
    // v0-1 have no top-level error: each partition carries it.
    let ResponseKind::OffsetFetch(r) =
        answer(ApiKey::OffsetFetch, RequestKind::OffsetFetch(v1.clone()), 1)
    else {
        panic!()
    };
    let parts = &r.topics[0].partitions;
    assert_eq!(parts.len(), 2);
    assert!(parts
        .iter()
        .all(|p| p.error_code == NOT_AVAILABLE && p.committed_offset == -1));
    // v2-7: at the top.
    let ResponseKind::OffsetFetch(r) = answer(ApiKey::OffsetFetch, RequestKind::OffsetFetch(v1), 7)
    else {
        panic!()
    };
    assert_eq!(r.error_code, NOT_AVAILABLE);
    assert!(r.topics.is_empty());
    // v8+: per group.
    let v8 = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default().with_group_id(group("g1")),
        OffsetFetchRequestGroup::default()
            .with_group_id(group("g2"))
            .with_topics(None),
    ]);
    let ResponseKind::OffsetFetch(r) = answer(ApiKey::OffsetFetch, RequestKind::OffsetFetch(v8), 9)
    else {
        panic!()
    };
    let groups: Vec<(&str, i16)> = r
        .groups
        .iter()
        .map(|g| (g.group_id.as_str(), g.error_code))
        .collect();
    assert_eq!(groups, vec![("g1", NOT_AVAILABLE), ("g2", NOT_AVAILABLE)]);
}

#[test]
fn describe_and_delete_answer_each_group() {
    let ids = vec![group("g1"), group("g2")];
    let ResponseKind::DescribeGroups(r) = answer_all(
        ApiKey::DescribeGroups,
        RequestKind::DescribeGroups(DescribeGroupsRequest::default().with_groups(ids.clone())),
    ) else {
        panic!()
    };
    assert_eq!(r.groups.len(), 2);
    assert!(r.groups.iter().all(|g| g.error_code == NOT_AVAILABLE));
    assert_eq!(r.groups[1].group_id, ids[1]);

    let ResponseKind::DeleteGroups(r) = answer_all(
        ApiKey::DeleteGroups,
        RequestKind::DeleteGroups(DeleteGroupsRequest::default().with_groups_names(ids.clone())),
    ) else {
        panic!()
    };
    assert_eq!(r.results.len(), 2);
    assert!(r.results.iter().all(|g| g.error_code == NOT_AVAILABLE));
    assert_eq!(r.results[0].group_id, ids[0]);

    let ResponseKind::ConsumerGroupDescribe(r) = answer_all(
        ApiKey::ConsumerGroupDescribe,
        RequestKind::ConsumerGroupDescribe(
            ConsumerGroupDescribeRequest::default().with_group_ids(ids.clone()),
        ),
    ) else {
        panic!()
    };
    assert_eq!(r.groups.len(), 2);
    assert!(r.groups.iter().all(|g| g.error_code == NOT_AVAILABLE));
    assert_eq!(r.groups[0].group_id, ids[0]);
}

fn commit_request(partitions: &[(&str, i32)]) -> OffsetCommitRequest {
    let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
    for (t, p) in partitions {
        let partition = OffsetCommitRequestPartition::default()
            .with_partition_index(*p)
            .with_committed_offset(7);
        match topics.iter_mut().find(|x| x.name.as_str() == *t) {
            Some(x) => x.partitions.push(partition),
            None => topics.push(
                OffsetCommitRequestTopic::default()
                    .with_name(name(t))
                    .with_partitions(vec![partition]),
            ),
        }
    }
    OffsetCommitRequest::default()
        .with_group_id(group("g"))
        .with_generation_id_or_member_epoch(-1)
        .with_topics(topics)
}

/// (topic, partition, error) of every partition of a commit answer, sorted.
fn commit_codes(topics: &[(String, Vec<(i32, i16)>)]) -> Vec<(String, i32, i16)> {
    let mut all: Vec<(String, i32, i16)> = topics
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |(p, e)| (t.clone(), *p, *e)))
        .collect();
    all.sort();
    all
}

async fn commit(
    b: &std::sync::Arc<crate::broker::Broker>,
    parts: &[(&str, i32)],
) -> OffsetCommitResponse {
    let r = request(
        ApiKey::OffsetCommit,
        9,
        RequestKind::OffsetCommit(commit_request(parts)),
    );
    match super::handle(b, r, &RequestContext::for_tests()).await {
        Some(ResponseKind::OffsetCommit(r)) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn commits_to_partitions_that_do_not_exist_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 2, &[]).await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();

    let r = commit(&b, &[("t", 0), ("t", 2), ("t", -1), ("nope", 0)]).await;
    let topics: Vec<(String, Vec<(i32, i16)>)> = r
        .topics
        .iter()
        .map(|t| {
            (
                t.name.to_string(),
                t.partitions
                    .iter()
                    .map(|p| (p.partition_index, p.error_code))
                    .collect(),
            )
        })
        .collect();
    // One entry per topic, every requested partition answered.
    assert_eq!(topics.len(), 2, "{topics:?}");
    assert_eq!(
        commit_codes(&topics),
        vec![
            ("nope".into(), 0, unknown),
            ("t".into(), -1, unknown),
            ("t".into(), 0, 0),
            ("t".into(), 2, unknown),
        ]
    );

    // Only the existing partition's offset is stored.
    let fetch = OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
        .with_group_id(group("g"))
        .with_topics(None)]);
    let r = request(ApiKey::OffsetFetch, 9, RequestKind::OffsetFetch(fetch));
    let Some(ResponseKind::OffsetFetch(r)) =
        super::handle(&b, r, &RequestContext::for_tests()).await
    else {
        panic!()
    };
    let stored: Vec<(String, i32, i64)> = r.groups[0]
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index, p.committed_offset))
        })
        .collect();
    assert_eq!(stored, vec![("t".to_string(), 0, 7)]);

    // A commit of nothing that exists does not create its group.
    let body = commit_request(&[("nope", 0)]).with_group_id(group("ghost"));
    let r = request(ApiKey::OffsetCommit, 9, RequestKind::OffsetCommit(body));
    let Some(ResponseKind::OffsetCommit(r)) =
        super::handle(&b, r, &RequestContext::for_tests()).await
    else {
        panic!()
    };
    assert_eq!(r.topics[0].partitions[0].error_code, unknown);
    let list = request(
        ApiKey::ListGroups,
        5,
        RequestKind::ListGroups(Default::default()),
    );
    let Some(ResponseKind::ListGroups(l)) =
        super::handle(&b, list, &RequestContext::for_tests()).await
    else {
        panic!()
    };
    assert!(l.groups.iter().all(|g| g.group_id.as_str() != "ghost"));
}

#[tokio::test]
async fn txn_offset_commits_to_partitions_that_do_not_exist_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let part = |p: i32| {
        TxnOffsetCommitRequestPartition::default()
            .with_partition_index(p)
            .with_committed_offset(3)
    };
    let body = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(StrBytes::from_static_str("tx")))
        .with_group_id(group("g"))
        .with_producer_id(ProducerId(1))
        .with_producer_epoch(0)
        .with_topics(vec![
            TxnOffsetCommitRequestTopic::default()
                .with_name(name("t"))
                .with_partitions(vec![part(0), part(4)]),
            TxnOffsetCommitRequestTopic::default()
                .with_name(name("nope"))
                .with_partitions(vec![part(0)]),
        ]);
    let r = request(
        ApiKey::TxnOffsetCommit,
        4,
        RequestKind::TxnOffsetCommit(body),
    );
    let Some(ResponseKind::TxnOffsetCommit(r)) =
        super::handle(&b, r, &RequestContext::for_tests()).await
    else {
        panic!()
    };
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(r.topics.len(), 2);
    let t = &r.topics[0];
    assert_eq!(t.name.as_str(), "t");
    assert_eq!(t.partitions.len(), 2);
    // t-0 went to the coordinator (whatever it says of this producer), t-4 did not.
    assert_eq!(t.partitions[0].partition_index, 0);
    assert_ne!(t.partitions[0].error_code, unknown);
    assert_eq!(
        (t.partitions[1].partition_index, t.partitions[1].error_code),
        (4, unknown)
    );
    assert_eq!(r.topics[1].name.as_str(), "nope");
    assert_eq!(r.topics[1].partitions[0].error_code, unknown);
}
