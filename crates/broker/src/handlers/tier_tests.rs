//! The handlers of a broker with the long-term tier whose `__remote_log_metadata` has not been
//! read yet (no background task runs here): it does not know what the tier holds, so reads
//! below a tiered partition's local log start, its earliest offset and DeleteRecords answer
//! KAFKA_STORAGE_ERROR (retriable) instead of OFFSET_OUT_OF_RANGE, which would reset a consumer
//! past the tier; a topic that is not tiered answers as before.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
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
