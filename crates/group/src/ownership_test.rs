//! The coordinator serves only the groups of the `__consumer_offsets` partitions it leads:
//! election loads a partition's groups, resignation unloads them, anything else is
//! NOT_COORDINATOR; commits are answered once durable.

use std::sync::{mpsc, Arc, Mutex};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::*;

use crate::offsets_topic::partition_for;
use crate::store::StoreError;
use crate::tests::{
    commit_offset as commit, coordinator, s, MemStore, SlowStore, CLIENT, PARTITIONS,
};
use crate::GroupCoordinator;

/// Two group ids in different partitions.
fn two_groups() -> (String, String) {
    let a = "group-a".to_string();
    let b = (0..)
        .map(|i| format!("group-b{i}"))
        .find(|g| partition_for(g, PARTITIONS) != partition_for(&a, PARTITIONS))
        .unwrap();
    (a, b)
}

/// (top-level error, committed offset of t-0).
fn fetch(c: &GroupCoordinator, group: &str) -> (i16, i64) {
    let r = c.offset_fetch(
        OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0])])),
        7,
    );
    let offset = r
        .topics
        .first()
        .map_or(-1, |t| t.partitions[0].committed_offset);
    (r.error_code, offset)
}

fn heartbeat(c: &GroupCoordinator, group: &str) -> i16 {
    c.heartbeat(
        HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(1)
            .with_member_id(s("m")),
    )
    .error_code
}

const NOT_COORDINATOR: i16 = 16;

#[tokio::test]
async fn election_loads_one_partitions_groups_and_resignation_unloads_them() {
    let store = Arc::new(MemStore::default());
    let (a, b) = two_groups();
    let writer = coordinator(store.clone());
    writer.load().unwrap();
    assert_eq!(commit(&writer, &a, 11).await, 0);
    assert_eq!(commit(&writer, &b, 22).await, 0);

    let c = coordinator(store.clone());
    // Leads nothing yet: every group API says NOT_COORDINATOR.
    assert_eq!(fetch(&c, &a).0, NOT_COORDINATOR);
    assert_eq!(commit(&c, &a, 12).await, NOT_COORDINATOR);
    assert_eq!(heartbeat(&c, &a), NOT_COORDINATOR);
    let join = c
        .join_group(
            JoinGroupRequest::default()
                .with_group_id(GroupId(s(&a)))
                .with_session_timeout_ms(10_000)
                .with_protocol_type(s("consumer")),
            9,
            CLIENT,
        )
        .await;
    assert_eq!(join.error_code, NOT_COORDINATOR);
    let described = c.describe_groups(
        DescribeGroupsRequest::default().with_groups(vec![GroupId(s(&a))]),
        5,
    );
    assert_eq!(described.groups[0].error_code, NOT_COORDINATOR);
    let hb = c.consumer_group_heartbeat(
        ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(&a)))
            .with_member_epoch(0),
        0,
        CLIENT,
    );
    assert_eq!(hb.error_code, NOT_COORDINATOR);

    // Elected for a's partition only: a's offsets come back, b stays elsewhere.
    let pa = partition_for(&a, PARTITIONS);
    assert_eq!(c.on_election(pa, 3).unwrap(), 1);
    assert_eq!(fetch(&c, &a), (0, 11));
    assert_eq!(fetch(&c, &b).0, NOT_COORDINATOR);
    let listed = c.list_groups(ListGroupsRequest::default());
    let ids: Vec<&str> = listed.groups.iter().map(|g| g.group_id.as_str()).collect();
    assert_eq!(ids, vec![a.as_str()]);
    assert_eq!(c.led_partitions(), vec![(pa, 3)]);
    assert_eq!(commit(&c, &a, 13).await, 0);

    // Leadership moves away: a's state leaves memory.
    c.on_resignation(pa);
    assert_eq!(fetch(&c, &a).0, NOT_COORDINATOR);
    assert!(c
        .list_groups(ListGroupsRequest::default())
        .groups
        .is_empty());
    // And comes back: the log (with the commit made meanwhile) is replayed.
    c.on_election(pa, 5).unwrap();
    assert_eq!(fetch(&c, &a), (0, 13));
}

#[tokio::test]
async fn resignation_answers_a_parked_join_with_not_coordinator() {
    let c = Arc::new(coordinator(Arc::new(MemStore::default())));
    c.load().unwrap();
    let join = |member: &str| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_member_id(s(member))
            .with_protocol_type(s("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(s("range"))])
    };
    let first = c.join_group(join("m1"), 9, CLIENT).await;
    assert_eq!(first.error_code, ResponseError::UnknownMemberId.code());
    let first = c.join_group(join(""), 9, CLIENT).await;
    let id1 = first.member_id.to_string();
    let r1 = c.join_group(join(&id1), 9, CLIENT).await;
    assert_eq!(r1.error_code, 0);
    // A second member parks its join while the first has not rejoined.
    let id2 = c
        .join_group(join(""), 9, CLIENT)
        .await
        .member_id
        .to_string();
    let c2 = c.clone();
    let parked = tokio::spawn(async move { c2.join_group(join(&id2), 9, CLIENT).await });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!parked.is_finished());
    c.on_resignation(partition_for("g", PARTITIONS));
    assert_eq!(parked.await.unwrap().error_code, NOT_COORDINATOR);
}

#[tokio::test]
async fn a_commit_the_isr_does_not_acknowledge_is_not_visible() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    assert_eq!(commit(&c, "g", 5).await, 0);
    *store.not_durable.lock().unwrap() = Some(StoreError::new(
        ResponseError::RequestTimedOut,
        "the in-sync replicas did not acknowledge in time",
    ));
    assert_eq!(
        commit(&c, "g", 6).await,
        ResponseError::RequestTimedOut.code()
    );
    assert_eq!(fetch(&c, "g"), (0, 5));
}

#[test]
fn groups_of_a_loading_partition_get_load_in_progress() {
    let (tx, rx) = mpsc::channel();
    let c = Arc::new(coordinator(Arc::new(SlowStore {
        inner: MemStore::default(),
        release: Mutex::new(rx),
    })));
    let p = partition_for("g", PARTITIONS);
    let loader = {
        let c = c.clone();
        std::thread::spawn(move || c.on_election(p, 1))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while heartbeat(&c, "g") != ResponseError::CoordinatorLoadInProgress.code() {
        assert!(std::time::Instant::now() < deadline, "never seen loading");
        std::thread::yield_now();
    }
    assert_eq!(
        c.list_groups(ListGroupsRequest::default()).error_code,
        ResponseError::CoordinatorLoadInProgress.code()
    );
    tx.send(()).unwrap();
    loader.join().unwrap().unwrap();
    assert_eq!(heartbeat(&c, "g"), ResponseError::UnknownMemberId.code());
}

/// The group timer expires an empty group that has no offsets. A commit to a new group (a
/// consumer that assigns its partitions itself, so never joins) appends, then waits for the
/// in-sync replicas; if the timer ran in between, the group was forgotten and the commit,
/// acknowledged, never became visible: OffsetFetch found nothing (librdkafka's test 0030,
/// once in a parallel run). Kafka counts commits in flight as offsets of the group.
#[tokio::test]
async fn a_commit_in_flight_keeps_its_new_group_from_expiring() {
    let store = Arc::new(MemStore::default());
    let gate = Arc::new(tokio::sync::Notify::new());
    *store.durable_gate.lock().unwrap() = Some(gate.clone());
    let c = Arc::new(coordinator(store.clone()));
    c.load().unwrap();
    let committing = tokio::spawn({
        let c = c.clone();
        async move { commit(&c, "assigner", 42).await }
    });
    // Appended, not yet durable.
    while c
        .lock()
        .get("assigner")
        .is_none_or(|g| g.commits_in_flight == 0)
    {
        tokio::task::yield_now().await;
    }
    c.tick();
    gate.notify_one();
    assert_eq!(committing.await.unwrap(), 0);
    assert_eq!(fetch(&c, "assigner"), (0, 42));
    assert_eq!(c.lock()["assigner"].commits_in_flight, 0);
}
