//! Request-handling tests against an in-process broker on a temporary directory.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use ferry_protocol::DecodedRequest;
use ferry_test_support::{Batches, Keys};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::broker::Broker;
use crate::server::{open_broker, MetadataQuorum, Server};
use ferry_config::broker_config::BrokerConfig;

pub(super) fn config(dir: &std::path::Path, extra: &str) -> BrokerConfig {
    let text = format!(
        "listeners = \"PLAINTEXT://127.0.0.1:0\"\n\"metrics.address\" = \"\"\n\"log.dirs\" = \"{}\"\n{extra}",
        dir.display()
    );
    BrokerConfig::parse(&text).unwrap()
}

/// The handlers' context without a listener or a controller: the metadata is a local quorum
/// (kept in memory), and no background task runs.
pub(super) async fn broker(dir: &std::path::Path, extra: &str) -> Arc<Broker> {
    let advertised = crate::server::Advertised::plaintext("127.0.0.1", 9092);
    open_broker(
        config(dir, extra),
        ferry_common::system_clock(),
        advertised,
        MetadataQuorum::Local,
    )
    .await
    .unwrap()
    .0
}

/// A broker as `ferry serve` starts it (a bound listener, the controller quorum on disk), for
/// what must survive a restart.
async fn broker_with_controller(dir: &std::path::Path) -> Arc<Broker> {
    Server::start(config(dir, ""), ferry_common::system_clock())
        .await
        .unwrap()
        .broker
}

pub(super) fn request(key: ApiKey, version: i16, body: RequestKind) -> DecodedRequest {
    DecodedRequest {
        api_key: key,
        header: RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version),
        body,
    }
}

pub(super) fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One record per value, keyed `k{i}`; without a producer, one batch per record.
pub(super) fn batch(values: &[&str], producer: Option<(i64, i16, i32)>) -> Bytes {
    let records = Batches::values(values.iter().map(|v| v.to_string())).keys(Keys::Indexed);
    match producer {
        Some((id, epoch, sequence)) => records.producer(id, epoch, sequence),
        None => records.batch_per_record(),
    }
    .encode()
}

pub(super) async fn create(
    b: &Arc<Broker>,
    topic: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) -> CreateTopicsResponse {
    let t = CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(partitions)
        .with_replication_factor(-1)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    CreatableTopicConfig::default()
                        .with_name(StrBytes::from_string(k.to_string()))
                        .with_value(Some(StrBytes::from_string(v.to_string())))
                })
                .collect(),
        );
    let r = request(
        ApiKey::CreateTopics,
        7,
        RequestKind::CreateTopics(CreateTopicsRequest::default().with_topics(vec![t])),
    );
    match super::handle(b, r, &super::RequestContext::for_tests()).await {
        Some(ResponseKind::CreateTopics(r)) => r,
        other => panic!("{other:?}"),
    }
}

pub(super) async fn produce(
    b: &Arc<Broker>,
    topic: &str,
    partition: i32,
    records: Bytes,
    acks: i16,
) -> Option<ProduceResponse> {
    let body = ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(1000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(name(topic))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(partition)
                .with_records(Some(records))])]);
    match super::handle(
        b,
        request(ApiKey::Produce, 9, RequestKind::Produce(body)),
        &super::RequestContext::for_tests(),
    )
    .await
    {
        Some(ResponseKind::Produce(r)) => Some(r),
        None => None,
        other => panic!("{other:?}"),
    }
}

pub(super) fn produce_result(r: &ProduceResponse) -> (i16, i64) {
    let p = &r.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

/// A Fetch that answers at once (no wait, no minimum), of up to 64 MiB, of `topic`'s partitions
/// each from its `(partition, offset)`, up to `partition_max` bytes each.
pub(super) fn fetch_of_partitions(
    topic: &str,
    from: &[(i32, i64)],
    partition_max: i32,
) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(64 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(
                from.iter()
                    .map(|&(p, offset)| {
                        FetchPartition::default()
                            .with_partition(p)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(partition_max)
                    })
                    .collect(),
            )])
}

pub(super) async fn fetch(
    b: &Arc<Broker>,
    topic: &str,
    partition: i32,
    offset: i64,
    wait_ms: i32,
    min_bytes: i32,
) -> FetchResponse {
    let body = FetchRequest::default()
        .with_max_wait_ms(wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(1 << 20)])]);
    send_fetch(b, body).await
}

fn values_of(records: &Bytes) -> Vec<String> {
    let mut buf = records.clone();
    RecordBatchDecoder::decode_all(&mut buf)
        .unwrap()
        .into_iter()
        .flat_map(|set| set.records)
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn produce_then_fetch_round_trips_records_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    let created = create(&b, "orders", 2, &[]).await;
    assert_eq!(created.topics[0].error_code, 0);
    assert_eq!(created.topics[0].num_partitions, 2);

    let r = produce(&b, "orders", 1, batch(&["a", "b", "c"], None), 1)
        .await
        .unwrap();
    assert_eq!(produce_result(&r), (0, 0));
    let r = produce(&b, "orders", 1, batch(&["d"], None), -1)
        .await
        .unwrap();
    assert_eq!(produce_result(&r), (0, 3));

    let f = fetch(&b, "orders", 1, 0, 0, 0).await;
    let p = &f.responses[0].partitions[0];
    assert_eq!(p.error_code, 0);
    assert_eq!(p.high_watermark, 4);
    assert_eq!(
        values_of(p.records.as_ref().unwrap()),
        vec!["a", "b", "c", "d"]
    );

    // An empty partition answers with an empty (not null) record set.
    let f = fetch(&b, "orders", 0, 0, 0, 0).await;
    assert_eq!(
        f.responses[0].partitions[0]
            .records
            .as_ref()
            .map(|r| r.len()),
        Some(0)
    );
}

#[tokio::test]
async fn acks_zero_sends_no_response_and_bad_acks_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    assert!(produce(&b, "t", 0, batch(&["x"], None), 0).await.is_none());
    let r = produce(&b, "t", 0, batch(&["y"], None), 2).await.unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::InvalidRequiredAcks.code()
    );
    let f = fetch(&b, "t", 0, 0, 0, 0).await;
    assert_eq!(
        values_of(f.responses[0].partitions[0].records.as_ref().unwrap()),
        vec!["x"]
    );
}

pub(super) async fn send_fetch(b: &Arc<Broker>, body: FetchRequest) -> FetchResponse {
    match super::handle(
        b,
        request(ApiKey::Fetch, 12, RequestKind::Fetch(body)),
        &super::RequestContext::for_tests(),
    )
    .await
    {
        Some(ResponseKind::Fetch(r)) => r,
        other => panic!("{other:?}"),
    }
}

/// A read_committed fetch (isolation level 1) of partition 0 from offset 0.
async fn fetch_committed(b: &Arc<Broker>, topic: &str) -> FetchResponse {
    let body = FetchRequest::default()
        .with_max_bytes(1 << 20)
        .with_isolation_level(1)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(name(topic))
            .with_partitions(vec![FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    send_fetch(b, body).await
}

#[tokio::test]
async fn read_committed_stops_at_an_open_transaction_and_lists_aborted_ones() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let p = b.replicas.partition_of("t", 0).unwrap();
    let txn = |values: &[&str], seq: i32| {
        Batches::values(values.iter().map(|v| v.to_string()))
            .producer(7, 0, seq)
            .transactional()
            .encode()
    };
    produce(&b, "t", 0, batch(&["plain"], None), 1)
        .await
        .unwrap();
    // Transactional records need a transactional id in the request (Kafka's rule).
    let r = produce(&b, "t", 0, txn(&["no-id"], 0), 1).await.unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::TransactionalIdAuthorizationFailed.code()
    );
    p.append(&txn(&["open-1", "open-2"], 0)).unwrap();
    // Open: read_committed reads up to the transaction's first offset (the LSO), and its
    // ListOffsets latest is the LSO.
    let latest = |isolation: i8| {
        request(
            ApiKey::ListOffsets,
            7,
            RequestKind::ListOffsets(
                ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_isolation_level(isolation)
                    .with_topics(vec![ListOffsetsTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(-1)
                            .with_current_leader_epoch(-1)])]),
            ),
        )
    };
    for (isolation, want) in [(0, 3), (1, 1)] {
        match super::handle(&b, latest(isolation), &super::RequestContext::for_tests()).await {
            Some(ResponseKind::ListOffsets(r)) => {
                assert_eq!(
                    r.topics[0].partitions[0].offset, want,
                    "isolation {isolation}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    let f = fetch_committed(&b, "t").await;
    let d = &f.responses[0].partitions[0];
    assert_eq!((d.high_watermark, d.last_stable_offset), (3, 1));
    assert_eq!(values_of(d.records.as_ref().unwrap()), vec!["plain"]);
    assert_eq!(d.aborted_transactions.as_deref(), Some(&[][..]));
    // Aborted: everything is readable, with the transaction to drop.
    let marker = ferry_log::TxnMarker {
        producer_id: 7,
        producer_epoch: 0,
        coordinator_epoch: 0,
        result: ferry_log::TxnResult::Abort,
    };
    p.append_marker_then(&marker, |_, _| {}).unwrap();
    let f = fetch_committed(&b, "t").await;
    let d = &f.responses[0].partitions[0];
    assert_eq!((d.high_watermark, d.last_stable_offset), (4, 4));
    let aborted = d.aborted_transactions.as_ref().unwrap();
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].producer_id.0, aborted[0].first_offset), (7, 1));
    // read_uncommitted has no aborted list and reads to the high watermark.
    let f = fetch(&b, "t", 0, 0, 0, 0).await;
    let d = &f.responses[0].partitions[0];
    assert_eq!(d.aborted_transactions, None);
    // (the marker's control batch too: clients skip it)
    let values = values_of(d.records.as_ref().unwrap());
    assert_eq!(values.len(), 4);
    assert_eq!(values[..3], ["plain", "open-1", "open-2"]);
}

pub(super) async fn call(
    b: &Arc<Broker>,
    key: ApiKey,
    version: i16,
    body: RequestKind,
) -> ResponseKind {
    super::handle(
        b,
        request(key, version, body),
        &super::RequestContext::for_tests(),
    )
    .await
    .expect("a response")
}

/// A transaction end to end through the handlers: the coordinator hands out the producer id,
/// a partition not added to the transaction is refused (KIP-890), an added one takes the
/// records, and EndTxn's marker makes them visible to read_committed.
#[tokio::test]
async fn a_transaction_through_the_handlers() {
    use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "\"transaction.state.log.num.partitions\" = 2").await;
    create(&b, "t", 1, &[]).await;
    let txn_id = || TransactionalId(StrBytes::from_static_str("tx"));
    let ResponseKind::InitProducerId(init) = call(
        &b,
        ApiKey::InitProducerId,
        4,
        RequestKind::InitProducerId(
            InitProducerIdRequest::default()
                .with_transactional_id(Some(txn_id()))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        ),
    )
    .await
    else {
        panic!("not an InitProducerId response")
    };
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let produce_txn = |seq: i32| {
        let records = Batches::values(["v"])
            .producer(pid, epoch, seq)
            .transactional()
            .encode();
        RequestKind::Produce(
            ProduceRequest::default()
                .with_transactional_id(Some(txn_id()))
                .with_acks(-1)
                .with_timeout_ms(5000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(name("t"))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records))])]),
        )
    };
    let ResponseKind::Produce(r) = call(&b, ApiKey::Produce, 9, produce_txn(0)).await else {
        panic!("not a Produce response")
    };
    assert_eq!(produce_result(&r).0, ResponseError::InvalidTxnState.code());
    let ResponseKind::AddPartitionsToTxn(added) = call(
        &b,
        ApiKey::AddPartitionsToTxn,
        3,
        RequestKind::AddPartitionsToTxn(
            AddPartitionsToTxnRequest::default()
                .with_v3_and_below_transactional_id(txn_id())
                .with_v3_and_below_producer_id(ProducerId(pid))
                .with_v3_and_below_producer_epoch(epoch)
                .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![0])]),
        ),
    )
    .await
    else {
        panic!("not an AddPartitionsToTxn response")
    };
    let code = added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0);
    let ResponseKind::Produce(r) = call(&b, ApiKey::Produce, 9, produce_txn(0)).await else {
        panic!("not a Produce response")
    };
    assert_eq!(produce_result(&r), (0, 0));
    let d = fetch_committed(&b, "t").await.responses[0].partitions[0].clone();
    assert_eq!(d.last_stable_offset, 0, "open transaction");
    // DescribeProducers shows the producer and where its transaction started.
    let describe = || {
        RequestKind::DescribeProducers(DescribeProducersRequest::default().with_topics(vec![
            describe_producers_request::TopicRequest::default()
                .with_name(name("t"))
                .with_partition_indexes(vec![0]),
        ]))
    };
    let ResponseKind::DescribeProducers(dp) =
        call(&b, ApiKey::DescribeProducers, 0, describe()).await
    else {
        panic!("not a DescribeProducers response")
    };
    let state = &dp.topics[0].partitions[0].active_producers[0];
    assert_eq!(
        (
            state.producer_id.0,
            state.producer_epoch,
            state.last_sequence,
            state.current_txn_start_offset
        ),
        (pid, i32::from(epoch), 0, 0)
    );
    assert!(state.last_timestamp > 0);
    let ResponseKind::EndTxn(end) = call(
        &b,
        ApiKey::EndTxn,
        3,
        RequestKind::EndTxn(
            EndTxnRequest::default()
                .with_transactional_id(txn_id())
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch)
                .with_committed(true),
        ),
    )
    .await
    else {
        panic!("not an EndTxn response")
    };
    assert_eq!(end.error_code, 0);
    // The marker is written after EndTxn is answered (PrepareCommit is durable).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let d = fetch_committed(&b, "t").await.responses[0].partitions[0].clone();
        if d.last_stable_offset == 2 {
            assert_eq!(values_of(d.records.as_ref().unwrap())[0], "v");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no commit marker: {d:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_refused_acks_zero_produce_names_its_failures() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "\"auto.create.topics.enable\" = false").await;
    create(&b, "t", 1, &[]).await;
    let request = |partition: i32, acks: i16| {
        ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(name("t"))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(batch(&["x"], None)))])])
    };
    // accepted: no failures, so the connection stays
    assert_eq!(
        super::produce::append(
            &b,
            request(0, 0),
            9,
            &Default::default(),
            &super::RequestContext::for_tests()
        )
        .acks_zero_failures(),
        None
    );
    // refused at acks=0: the failures, so the connection closes (Kafka's rule)
    let failures = super::produce::append(
        &b,
        request(7, 0),
        9,
        &Default::default(),
        &super::RequestContext::for_tests(),
    )
    .acks_zero_failures();
    assert_eq!(failures.as_deref(), Some("t-7: UnknownTopicOrPartition"));
    // refused at acks=1: the error goes in the response instead
    assert_eq!(
        super::produce::append(
            &b,
            request(7, 1),
            9,
            &Default::default(),
            &super::RequestContext::for_tests()
        )
        .acks_zero_failures(),
        None
    );
}

#[tokio::test]
async fn unknown_partition_corrupt_batch_and_min_isr_errors() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "\"auto.create.topics.enable\" = false").await;
    create(&b, "t", 1, &[("min.insync.replicas", "2")]).await;
    let r = produce(&b, "nope", 0, batch(&["x"], None), 1)
        .await
        .unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let r = produce(&b, "t", 5, batch(&["x"], None), 1).await.unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::UnknownTopicOrPartition.code()
    );

    let mut bad = BytesMut::from(&batch(&["x"], None)[..]);
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let r = produce(&b, "t", 0, bad.freeze(), 1).await.unwrap();
    assert_eq!(produce_result(&r).0, ResponseError::CorruptMessage.code());

    // acks=all cannot be met by one replica when min.insync.replicas is 2; acks=1 can.
    let r = produce(&b, "t", 0, batch(&["x"], None), -1).await.unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::NotEnoughReplicas.code()
    );
    let r = produce(&b, "t", 0, batch(&["x"], None), 1).await.unwrap();
    assert_eq!(produce_result(&r), (0, 0));
}

#[tokio::test]
async fn idempotent_retry_is_not_written_twice_and_gap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let init = match super::handle(
        &b,
        request(
            ApiKey::InitProducerId,
            4,
            RequestKind::InitProducerId(
                InitProducerIdRequest::default()
                    .with_transactional_id(None)
                    .with_transaction_timeout_ms(60000),
            ),
        ),
        &super::RequestContext::for_tests(),
    )
    .await
    {
        Some(ResponseKind::InitProducerId(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(init.error_code, 0);
    let pid = init.producer_id.0;
    let first = batch(&["a", "b"], Some((pid, 0, 0)));
    assert_eq!(
        produce_result(&produce(&b, "t", 0, first.clone(), -1).await.unwrap()),
        (0, 0)
    );
    // The same batch again: the original offset, nothing new written.
    assert_eq!(
        produce_result(&produce(&b, "t", 0, first, -1).await.unwrap()),
        (0, 0)
    );
    // Sequence 5 after 0..=1 is a gap.
    let r = produce(&b, "t", 0, batch(&["z"], Some((pid, 0, 5))), -1)
        .await
        .unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::OutOfOrderSequenceNumber.code()
    );
    let f = fetch(&b, "t", 0, 0, 0, 0).await;
    assert_eq!(f.responses[0].partitions[0].high_watermark, 2);
}

#[tokio::test]
async fn long_poll_fetch_returns_when_data_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    let b2 = b.clone();
    let waiter = tokio::spawn(async move { fetch(&b2, "t", 0, 0, 30_000, 1).await });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(
        !waiter.is_finished(),
        "fetch with min_bytes=1 must wait for data"
    );
    produce(&b, "t", 0, batch(&["late"], None), 1).await;
    let f = waiter.await.unwrap();
    assert_eq!(
        values_of(f.responses[0].partitions[0].records.as_ref().unwrap()),
        vec!["late"]
    );
}

#[tokio::test]
async fn list_offsets_earliest_latest_and_by_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "t", 1, &[]).await;
    produce(&b, "t", 0, batch(&["a", "b", "c"], None), 1).await; // timestamps 1000..=1002
    let ask = |ts: i64| {
        request(
            ApiKey::ListOffsets,
            7,
            RequestKind::ListOffsets(
                ListOffsetsRequest::default()
                    .with_replica_id(BrokerId(-1))
                    .with_topics(vec![ListOffsetsTopic::default()
                        .with_name(name("t"))
                        .with_partitions(vec![ListOffsetsPartition::default()
                            .with_partition_index(0)
                            .with_timestamp(ts)
                            .with_current_leader_epoch(-1)])]),
            ),
        )
    };
    let mut got = Vec::new();
    for ts in [-2, -1, 1001, 5000, -3] {
        match super::handle(&b, ask(ts), &super::RequestContext::for_tests()).await {
            Some(ResponseKind::ListOffsets(r)) => {
                let p = &r.topics[0].partitions[0];
                got.push((p.error_code, p.offset));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, vec![(0, 0), (0, 3), (0, 1), (0, -1), (0, 2)]);
}

#[tokio::test]
async fn create_topic_errors_carry_kafka_codes() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    assert_eq!(create(&b, "ok", 1, &[]).await.topics[0].error_code, 0);
    assert_eq!(
        create(&b, "ok", 1, &[]).await.topics[0].error_code,
        ResponseError::TopicAlreadyExists.code()
    );
    assert_eq!(
        create(&b, "bad name", 1, &[]).await.topics[0].error_code,
        ResponseError::InvalidTopicException.code()
    );
    assert_eq!(
        create(&b, "zero", 0, &[]).await.topics[0].error_code,
        ResponseError::InvalidPartitions.code()
    );
    let r = create(&b, "cfg", 1, &[("retention.ms", "soon")]).await;
    assert_eq!(r.topics[0].error_code, ResponseError::InvalidConfig.code());
    assert!(r.topics[0]
        .error_message
        .as_ref()
        .unwrap()
        .contains("retention.ms"));
}

#[tokio::test]
async fn topics_and_data_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let id = {
        let b = broker_with_controller(dir.path()).await;
        let id = create(&b, "keep", 1, &[("retention.ms", "123456")])
            .await
            .topics[0]
            .topic_id;
        produce(&b, "keep", 0, batch(&["a", "b"], None), 1).await;
        b.replicas.shutdown().unwrap();
        id
    };
    let b = broker_with_controller(dir.path()).await;
    let meta = b.metadata.topic("keep").unwrap();
    assert_eq!(meta.id, id);
    assert_eq!(
        meta.configs.get("retention.ms").map(String::as_str),
        Some("123456")
    );
    let f = fetch(&b, "keep", 0, 0, 0, 0).await;
    assert_eq!(
        values_of(f.responses[0].partitions[0].records.as_ref().unwrap()),
        vec!["a", "b"]
    );
}

/// The listeners are bound before the logs load (the advertised ports are known) but listen
/// only once every log is loaded: a client connecting during recovery is refused.
#[tokio::test]
async fn listeners_refuse_connections_until_the_logs_are_loaded() {
    let dir = tempfile::tempdir().unwrap();
    {
        let b = broker_with_controller(dir.path()).await;
        create(&b, "loaded", 6, &[]).await;
        for p in 0..6 {
            produce(&b, "loaded", p, batch(&["a", "b", "c"], None), 1).await;
        }
        // No clean shutdown: the next start recovers every log.
    }
    let starting = Server::bind(config(dir.path(), ""), ferry_common::system_clock()).unwrap();
    let addr = starting.listener_addrs()[0].1;
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert_eq!(
        refused.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::ConnectionRefused),
        "connection accepted before the logs were loaded"
    );
    let server = starting.open().await.unwrap();
    assert_eq!(server.local_addr, addr);
    for p in 0..6 {
        let part = server.broker.replicas.partition_of("loaded", p).unwrap();
        assert_eq!(part.log.log_end_offset(), 3, "partition {p}");
    }
    tokio::net::TcpStream::connect(addr).await.unwrap();
}

#[tokio::test]
async fn fetch_reads_across_segment_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    // Tiny segments: every batch rolls a new one.
    create(&b, "rolled", 1, &[("segment.bytes", "100")]).await;
    for v in ["a", "b", "c", "d", "e"] {
        produce(&b, "rolled", 0, batch(&[v], None), 1).await;
    }
    let part = b.replicas.partition_of("rolled", 0).unwrap();
    assert!(part.log.segment_count() >= 5, "segments did not roll");
    let f = fetch(&b, "rolled", 0, 0, 0, 0).await;
    assert_eq!(
        values_of(f.responses[0].partitions[0].records.as_ref().unwrap()),
        vec!["a", "b", "c", "d", "e"]
    );
    let f = fetch(&b, "rolled", 0, 2, 0, 0).await;
    assert_eq!(
        values_of(f.responses[0].partitions[0].records.as_ref().unwrap()),
        vec!["c", "d", "e"]
    );
}

/// A consumer Fetch asking for more than the broker's `fetch.max.bytes` gets whole batches up to
/// that limit, and the rest on its next Fetch. The default stays below 32 MiB, the size from
/// which glibc's malloc maps every buffer afresh: librdkafka reads a response into one buffer,
/// and at 55 MiB (Kafka's default) a many-partition consumer spent a third of its CPU on page
/// faults (docs/configuration.md, `fetch.max.bytes`).
#[tokio::test]
async fn a_large_fetch_is_cut_at_the_brokers_fetch_max_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "capped", 4, &[]).await;
    let value = "v".repeat(100_000);
    let per_partition = 100;
    for p in 0..4 {
        for _ in 0..per_partition {
            produce(&b, "capped", p, batch(&[value.as_str()], None), 1).await;
        }
    }
    let fetch_from = |offsets: [i64; 4]| {
        let from: Vec<(i32, i64)> = (0..4).map(|p| (p, offsets[p as usize])).collect();
        fetch_of_partitions("capped", &from, 16 << 20)
    };
    let records_per_partition = |r: &FetchResponse| -> Vec<usize> {
        r.responses[0]
            .partitions
            .iter()
            .map(|p| p.records.as_ref().map_or(0, |r| values_of(r).len()))
            .collect()
    };
    let first = records_per_partition(&send_fetch(&b, fetch_from([0; 4])).await);
    let batch_len = batch(&[value.as_str()], None).len();
    let sent: usize = first.iter().sum::<usize>() * batch_len;
    assert!(sent < 32 << 20, "{sent} bytes in one response: {first:?}");
    assert!(
        sent + batch_len > b.config.fetch_max_bytes(),
        "the response stops short of the limit: {first:?}"
    );
    // The next Fetch, from where each partition stopped, carries the rest.
    let next = records_per_partition(
        &send_fetch(&b, fetch_from(std::array::from_fn(|p| first[p] as i64))).await,
    );
    for p in 0..4 {
        assert_eq!(
            first[p] + next[p],
            per_partition,
            "partition {p}: {first:?} then {next:?}"
        );
    }
}

#[tokio::test]
async fn clients_cannot_write_or_delete_the_offsets_topic() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    b.ensure_group_coordinator().unwrap();
    let r = produce(&b, "__consumer_offsets", 0, batch(&["x"], None), 1)
        .await
        .unwrap();
    assert_eq!(
        produce_result(&r).0,
        ResponseError::InvalidTopicException.code()
    );
    let del = request(
        ApiKey::DeleteTopics,
        5,
        RequestKind::DeleteTopics(
            DeleteTopicsRequest::default().with_topic_names(vec![name("__consumer_offsets")]),
        ),
    );
    match super::handle(&b, del, &super::RequestContext::for_tests()).await {
        Some(ResponseKind::DeleteTopics(r)) => {
            assert_eq!(
                r.responses[0].error_code,
                ResponseError::InvalidRequest.code()
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(b.metadata.topic("__consumer_offsets").is_some());
}

/// `delete.topic.enable = false` refuses every topic of a DeleteTopics, with Kafka's code for
/// the version, and deletes nothing.
#[tokio::test]
async fn topic_deletion_can_be_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "\"delete.topic.enable\" = false").await;
    create(&b, "kept", 1, &[]).await;
    for (version, code) in [
        (5, ResponseError::TopicDeletionDisabled.code()),
        (2, ResponseError::InvalidRequest.code()),
    ] {
        let del = request(
            ApiKey::DeleteTopics,
            version,
            RequestKind::DeleteTopics(
                DeleteTopicsRequest::default().with_topic_names(vec![name("kept"), name("none")]),
            ),
        );
        match super::handle(&b, del, &super::RequestContext::for_tests()).await {
            Some(ResponseKind::DeleteTopics(r)) => {
                let codes: Vec<i16> = r.responses.iter().map(|t| t.error_code).collect();
                assert_eq!(codes, vec![code, code], "v{version}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(b.metadata.topic("kept").is_some());
}

#[tokio::test]
async fn topic_compression_type_reencodes_batches() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(dir.path(), "").await;
    create(&b, "zipped", 1, &[("compression.type", "gzip")]).await;
    let r = produce(&b, "zipped", 0, batch(&["a", "b"], None), 1)
        .await
        .unwrap();
    assert_eq!(produce_result(&r), (0, 0));
    let f = fetch(&b, "zipped", 0, 0, 0, 0).await;
    let records = f.responses[0].partitions[0].records.clone().unwrap();
    // attributes (bytes 21..23): codec 1 = gzip
    assert_eq!(records[22] & 0x07, 1, "stored with the topic's codec");
    assert_eq!(values_of(&records), vec!["a", "b"]);
    // An unknown codec is refused.
    let bad = create(&b, "weird", 1, &[("compression.type", "brotli")]).await;
    assert_eq!(
        bad.topics[0].error_code,
        ResponseError::InvalidConfig.code()
    );
}

#[tokio::test]
async fn describe_configs_never_returns_a_secret() {
    let dir = tempfile::tempdir().unwrap();
    let b = broker(
        dir.path(),
        "\"remote.wal.s3.secret.access.key\" = \"very-secret-key\"",
    )
    .await;
    let body = DescribeConfigsRequest::default()
        .with_include_synonyms(true)
        .with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(StrBytes::from_static_str("1"))
                .with_configuration_keys(None),
        ]);
    let ResponseKind::DescribeConfigs(r) = call(
        &b,
        ApiKey::DescribeConfigs,
        4,
        RequestKind::DescribeConfigs(body),
    )
    .await
    else {
        panic!("not a DescribeConfigs response");
    };
    assert_eq!(
        r.results[0].error_code, 0,
        "{:?}",
        r.results[0].error_message
    );
    let configs = &r.results[0].configs;
    let secret = configs
        .iter()
        .find(|c| c.name.as_str() == "remote.wal.s3.secret.access.key")
        .unwrap_or_else(|| panic!("the secret is not listed among {} configs", configs.len()));
    assert!(secret.is_sensitive);
    assert_eq!(secret.value, None);
    assert!(secret.synonyms.iter().all(|s| s.value.is_none()));
    let plain = configs
        .iter()
        .find(|c| c.name.as_str() == "log.dirs")
        .expect("log.dirs is listed");
    assert!(!plain.is_sensitive);
    assert!(plain.value.is_some());
    let shown = format!("{r:?} {:?}", b.config);
    assert!(!shown.contains("very-secret-key"), "{shown}");
}
