//! Transactional offset commits: pending until their transaction's marker, visible at COMMIT,
//! dropped at ABORT, unstable to `require_stable` fetches meanwhile, and rebuilt alike by a
//! reload from the log.

use std::sync::{mpsc, Arc, Mutex};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;

use crate::offsets_topic::partition_for;
use crate::store::OffsetsStore;
use crate::tests::{commit_offset, coordinator, s, MemStore, SlowStore, PARTITIONS};
use crate::GroupCoordinator;

const PRODUCER: i64 = 4000;

fn partition() -> i32 {
    partition_for("g", PARTITIONS)
}

fn txn_commit_req(
    producer_id: i64,
    generation: i32,
    member: &str,
    offset: i64,
) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s("tx")))
        .with_group_id(GroupId(s("g")))
        .with_producer_id(ProducerId(producer_id))
        .with_producer_epoch(0)
        .with_generation_id(generation)
        .with_member_id(s(member))
        .with_topics(vec![TxnOffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(2)])])
}

async fn txn_commit(c: &GroupCoordinator, producer_id: i64, offset: i64) -> i16 {
    c.txn_offset_commit(txn_commit_req(producer_id, -1, "", offset), 3)
        .await
        .topics[0]
        .partitions[0]
        .error_code
}

async fn commit(c: &GroupCoordinator, offset: i64) -> i16 {
    commit_offset(c, "g", offset).await
}

/// (partition error, committed offset) of t-0, with `require_stable` as given (v7 and v8).
fn fetch(c: &GroupCoordinator, require_stable: bool) -> (i16, i64) {
    let v7 = c.offset_fetch(
        OffsetFetchRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_require_stable(require_stable)
            .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                .with_name(TopicName(s("t")))
                .with_partition_indexes(vec![0])])),
        7,
    );
    let p = &v7.topics[0].partitions[0];
    let answer = (p.error_code, p.committed_offset);
    let v8 = c.offset_fetch(
        OffsetFetchRequest::default()
            .with_require_stable(require_stable)
            .with_groups(vec![
                offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s("g")))
                    .with_topics(Some(vec![
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(TopicName(s("t")))
                            .with_partition_indexes(vec![0]),
                    ])),
            ]),
        8,
    );
    let p8 = &v8.groups[0].topics[0].partitions[0];
    assert_eq!(
        (p8.error_code, p8.committed_offset),
        answer,
        "v8 answers as v7"
    );
    answer
}

const UNSTABLE: i16 = ResponseError::UnstableOffsetCommit.code();

#[tokio::test]
async fn a_transactional_commit_takes_effect_at_the_commit_marker() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    assert_eq!(commit(&c, 5).await, 0);
    assert_eq!(txn_commit(&c, PRODUCER, 9).await, 0);
    // Pending: the old offset stays; a stable read is told to retry.
    assert_eq!(fetch(&c, false), (0, 5));
    assert_eq!(fetch(&c, true), (UNSTABLE, -1));
    store.write_marker(partition(), PRODUCER, true);
    c.complete_transaction(partition(), PRODUCER, true);
    assert_eq!(fetch(&c, true), (0, 9));
    // Another producer's marker on the same partition changes nothing.
    c.complete_transaction(partition(), PRODUCER + 1, false);
    assert_eq!(fetch(&c, true), (0, 9));
}

#[tokio::test]
async fn an_aborted_transaction_leaves_the_committed_offset() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    assert_eq!(commit(&c, 5).await, 0);
    assert_eq!(txn_commit(&c, PRODUCER, 9).await, 0);
    store.write_marker(partition(), PRODUCER, false);
    c.complete_transaction(partition(), PRODUCER, false);
    assert_eq!(fetch(&c, true), (0, 5));
    // A marker for a partition of another coordinator is ignored.
    c.complete_transaction(partition() + 1, PRODUCER, true);
    assert_eq!(fetch(&c, true), (0, 5));
}

#[tokio::test]
async fn a_plain_commit_written_after_the_transactional_one_wins_at_commit() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    assert_eq!(txn_commit(&c, PRODUCER, 9).await, 0);
    assert_eq!(commit(&c, 12).await, 0);
    store.write_marker(partition(), PRODUCER, true);
    c.complete_transaction(partition(), PRODUCER, true);
    assert_eq!(fetch(&c, true), (0, 12));
    // And a reload, which replays the same log, agrees.
    let again = coordinator(store.clone());
    again.load().unwrap();
    assert_eq!(fetch(&again, true), (0, 12));
}

#[tokio::test]
async fn a_reload_replays_pending_committed_and_aborted_transactions() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    assert_eq!(txn_commit(&c, PRODUCER, 7).await, 0);
    assert_eq!(txn_commit(&c, PRODUCER + 1, 8).await, 0);
    store.write_marker(partition(), PRODUCER, true);
    store.write_marker(partition(), PRODUCER + 1, false);
    let again = coordinator(store.clone());
    again.load().unwrap();
    assert_eq!(
        fetch(&again, true),
        (0, 7),
        "committed kept, aborted dropped"
    );

    // A transaction still open in the log is pending after the reload too.
    assert_eq!(txn_commit(&again, PRODUCER + 2, 11).await, 0);
    let third = coordinator(store.clone());
    third.load().unwrap();
    assert_eq!(fetch(&third, true), (UNSTABLE, -1));
    assert_eq!(fetch(&third, false), (0, 7));
    store.write_marker(partition(), PRODUCER + 2, true);
    third.complete_transaction(partition(), PRODUCER + 2, true);
    assert_eq!(fetch(&third, true), (0, 11));
}

#[tokio::test]
async fn a_transactional_commit_naming_a_member_is_checked_against_the_group() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone());
    c.load().unwrap();
    let code = |r: TxnOffsetCommitResponse| r.topics[0].partitions[0].error_code;
    // No such member in the (new, empty) group.
    let r = c
        .txn_offset_commit(txn_commit_req(PRODUCER, 1, "ghost", 3), 3)
        .await;
    assert_eq!(code(r), ResponseError::UnknownMemberId.code());
    // Without member and generation (a producer whose consumer uses assign()): taken.
    assert_eq!(txn_commit(&c, PRODUCER, 3).await, 0);
    let r = c
        .txn_offset_commit(
            txn_commit_req(PRODUCER, -1, "", 4).with_group_id(GroupId(s(""))),
            3,
        )
        .await;
    assert_eq!(code(r), ResponseError::InvalidGroupId.code());
    // Nothing of the refused commits is pending.
    store.write_marker(partition(), PRODUCER, true);
    c.complete_transaction(partition(), PRODUCER, true);
    assert_eq!(fetch(&c, true), (0, 3));
}

#[tokio::test]
async fn a_transaction_ending_while_the_partition_loads_is_applied_after_the_load() {
    let (tx, rx) = mpsc::channel();
    let store = Arc::new(SlowStore {
        inner: MemStore::default(),
        release: Mutex::new(rx),
    });
    // The log holds the transactional offset but (as read) not yet its marker.
    store
        .inner
        .append_transactional(
            partition(),
            PRODUCER,
            0,
            &[(
                crate::offsets_topic::encode_key(&crate::offsets_topic::RecordKey::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 0,
                }),
                Some(crate::offsets_topic::encode_value(
                    &crate::offsets_topic::RecordValue::Offset(crate::offsets_topic::OffsetValue {
                        offset: 21,
                        leader_epoch: -1,
                        metadata: String::new(),
                        commit_timestamp: 1,
                    }),
                )),
            )],
        )
        .unwrap();
    let c = Arc::new(coordinator(store.clone()));
    let loader = {
        let c = c.clone();
        std::thread::spawn(move || c.on_election(partition(), 1))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while fetch_error(&c) != ResponseError::CoordinatorLoadInProgress.code() {
        assert!(std::time::Instant::now() < deadline, "never seen loading");
        std::thread::yield_now();
    }
    c.complete_transaction(partition(), PRODUCER, true);
    tx.send(()).unwrap();
    loader.join().unwrap().unwrap();
    assert_eq!(fetch(&c, true), (0, 21));
}

fn fetch_error(c: &GroupCoordinator) -> i16 {
    c.offset_fetch(
        OffsetFetchRequest::default().with_group_id(GroupId(s("g"))),
        7,
    )
    .error_code
}
