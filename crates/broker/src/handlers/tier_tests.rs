//! The handlers of a broker with the long-term tier whose `__remote_log_metadata` has not been
//! read yet (no background task runs here): it does not know what the tier holds, so reads
//! below a tiered partition's local log start, its earliest offset and DeleteRecords answer
//! KAFKA_STORAGE_ERROR (retriable) instead of OFFSET_OUT_OF_RANGE, which would reset a consumer
//! past the tier; a topic that is not tiered answers as before.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::*;

use super::tests::{batch, broker, create, fetch, name, produce, request};

async fn earliest(b: &std::sync::Arc<crate::broker::Broker>, topic: &str) -> (i16, i64) {
    let r = request(
        ApiKey::ListOffsets,
        7,
        RequestKind::ListOffsets(
            ListOffsetsRequest::default()
                .with_replica_id(BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-2)
                        .with_current_leader_epoch(-1)])]),
        ),
    );
    match super::handle(b, r, &super::RequestContext::for_tests()).await {
        Some(ResponseKind::ListOffsets(r)) => {
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.offset)
        }
        other => panic!("{other:?}"),
    }
}

async fn delete_before(b: &std::sync::Arc<crate::broker::Broker>, topic: &str, offset: i64) -> i16 {
    let r = request(
        ApiKey::DeleteRecords,
        2,
        RequestKind::DeleteRecords(
            DeleteRecordsRequest::default()
                .with_timeout_ms(1000)
                .with_topics(vec![DeleteRecordsTopic::default()
                    .with_name(name(topic))
                    .with_partitions(vec![DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset)])]),
        ),
    );
    match super::handle(b, r, &super::RequestContext::for_tests()).await {
        Some(ResponseKind::DeleteRecords(r)) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn before_the_tier_metadata_is_read_tiered_partitions_answer_a_retriable_error() {
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "\"remote.log.storage.system.enable\" = true\n\"remote.log.storage.local.dir\" = \"{}\"\n",
        dir.path().join("tier").display()
    );
    let b = broker(&dir.path().join("data"), &extra).await;
    for (topic, tiered) in [("tiered", "true"), ("plain", "false")] {
        create(&b, topic, 1, &[("remote.storage.enable", tiered)]).await;
        for i in 0..10 {
            produce(&b, topic, 0, batch(&[&format!("v{i}")], None), 1).await;
        }
        // As local retention would: the local log starts at 5.
        let part = b.replicas.partition_of(topic, 0).unwrap();
        part.log.delete_records_before(5).unwrap();
    }
    let storage = ResponseError::KafkaStorageError.code();

    let r = fetch(&b, "tiered", 0, 0, 0, 0).await;
    assert_eq!(r.responses[0].partitions[0].error_code, storage);
    assert_eq!(earliest(&b, "tiered").await, (storage, -1));
    assert_eq!(delete_before(&b, "tiered", 7).await, storage);
    let part = b.replicas.partition_of("tiered", 0).unwrap();
    assert_eq!(part.log.log_start_offset(), 5, "nothing deleted");
    // Above the local log start it reads as ever.
    let r = fetch(&b, "tiered", 0, 6, 0, 0).await;
    assert_eq!(r.responses[0].partitions[0].error_code, 0);

    let r = fetch(&b, "plain", 0, 0, 0, 0).await;
    assert_eq!(
        r.responses[0].partitions[0].error_code,
        ResponseError::OffsetOutOfRange.code()
    );
    assert_eq!(earliest(&b, "plain").await, (0, 5));
    assert_eq!(delete_before(&b, "plain", 7).await, 0);
}

/// A follower's fetch (replica_id >= 0) of a tiered partition: below the leader's local log
/// start but within the log (the tier's first offset on) the answer is
/// OFFSET_MOVED_TO_TIERED_STORAGE, so the follower starts from the tier instead of copying it;
/// below the tier it stays OFFSET_OUT_OF_RANGE with the tier's first offset as the log start;
/// at the local log start the records come as ever. A topic that is not tiered keeps
/// OFFSET_OUT_OF_RANGE with its log start. Consumers are still served from the tier.
#[tokio::test]
async fn a_follower_below_the_local_log_start_of_a_tiered_partition_is_told_the_offset_moved() {
    use ferry_tier::metadata::{RemoteSegmentState, TierMetadataEvent};
    use ferry_tier::RemoteSegmentMetadata;

    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "\"remote.log.storage.system.enable\" = true\n\"remote.log.storage.local.dir\" = \"{}\"\n",
        dir.path().join("tier").display()
    );
    let b = broker(&dir.path().join("data"), &extra).await;
    let tier = b.tier.clone().expect("the tier is on");
    for (topic, tiered) in [("tiered", "true"), ("plain", "false")] {
        create(&b, topic, 1, &[("remote.storage.enable", tiered)]).await;
        for i in 0..10 {
            produce(&b, topic, 0, batch(&[&format!("v{i}")], None), 1).await;
        }
        let part = b.replicas.partition_of(topic, 0).unwrap();
        part.log.delete_records_before(5).unwrap();
    }
    // The tier holds offsets 2..=4 (what retention left of it), as its metadata says.
    let part = b.replicas.partition_of("tiered", 0).unwrap();
    let meta = RemoteSegmentMetadata {
        topic_id: part.topic_id,
        partition: 0,
        segment_id: uuid::Uuid::from_u128(42),
        start_offset: 2,
        end_offset: 4,
        max_timestamp_ms: 0,
        broker_id: b.node_id,
        event_time_ms: 0,
        size_bytes: 100,
        leader_epochs: vec![(0, 2)],
        has_txn_index: false,
        has_producer_snapshot: false,
        state: RemoteSegmentState::CopyStarted,
    };
    tier.cache().apply(TierMetadataEvent::Update(meta.clone()));
    tier.cache().apply(TierMetadataEvent::Update(
        meta.with_state(RemoteSegmentState::CopyFinished, 1),
    ));
    crate::topic_follower::FollowedRecords::caught_up(tier.cache().as_ref());

    let follower_fetch = |topic: &'static str, offset: i64| {
        let b = b.clone();
        async move {
            let body = FetchRequest::default()
                .with_replica_id(BrokerId(2))
                .with_max_bytes(1 << 20)
                .with_session_epoch(-1)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name(topic))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(-1)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])]);
            let r = super::tests::send_fetch(&b, body).await;
            let p = &r.responses[0].partitions[0];
            (p.error_code, p.log_start_offset)
        }
    };
    let moved = ResponseError::OffsetMovedToTieredStorage.code();
    let out_of_range = ResponseError::OffsetOutOfRange.code();
    assert_eq!(follower_fetch("tiered", 3).await.0, moved);
    assert_eq!(follower_fetch("tiered", 2).await.0, moved);
    assert_eq!(follower_fetch("tiered", 0).await, (out_of_range, 2));
    assert_eq!(follower_fetch("tiered", 5).await.0, 0);
    assert_eq!(follower_fetch("plain", 3).await, (out_of_range, 5));
}
