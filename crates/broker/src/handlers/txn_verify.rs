//! KIP-890 part 1: before a partition leader appends the first transactional batch of a
//! producer's transaction, it asks the transaction coordinator whether the partition is in
//! that transaction (`transaction.partition.verification.enable`). Without the check, a
//! produce delayed past its transaction's abort would open a transaction in the partition that
//! no marker ever closes, and hold its last stable offset back forever (a "hanging
//! transaction").

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferry_metrics::{inter_broker_client_id, TrafficKind};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;

const VERIFY_TIMEOUT: Duration = Duration::from_secs(10);
const CLIENT_PURPOSE: &str = "txn-verify";

/// Partitions of a produce refused by the verification, by (topic, partition).
pub type Refused = HashMap<(String, i32), ResponseError>;

/// A producer: id and epoch.
type Producer = (i64, i16);

/// The transactional batches' producer (id, epoch) of partitions led here that have no open
/// transaction of that producer yet: the ones to verify.
fn to_verify(broker: &Broker, request: &ProduceRequest) -> (Option<Producer>, Vec<(String, i32)>) {
    let mut producer = None;
    let mut partitions = Vec::new();
    for topic in &request.topic_data {
        for data in &topic.partition_data {
            let Some(records) = &data.records else {
                continue;
            };
            let Some(h) = ferry_log::batch::BatchHeader::parse(records) else {
                continue;
            };
            if !h.is_transactional() {
                continue;
            }
            producer = Some((h.producer_id, h.producer_epoch));
            let Some(p) = broker.replicas.partition_of(&topic.name, data.index) else {
                continue;
            };
            if p.is_leader() && p.log.ongoing_txn_first_offset(h.producer_id).is_none() {
                partitions.push((topic.name.to_string(), data.index));
            }
        }
    }
    (producer, partitions)
}

/// Verifies a transactional produce's new partitions with the coordinator of its transactional
/// id; returns the refused ones. Nothing to verify (or verification disabled): empty.
pub async fn verify(broker: &Arc<Broker>, request: &ProduceRequest) -> Refused {
    let Some(txn_id) = request.transactional_id.as_ref().map(|t| t.to_string()) else {
        return Refused::new();
    };
    if broker
        .config
        .raw("transaction.partition.verification.enable")
        != "true"
    {
        return Refused::new();
    }
    let (Some((producer_id, epoch)), partitions) = to_verify(broker, request) else {
        return Refused::new();
    };
    if partitions.is_empty() {
        return Refused::new();
    }
    let coordinator = broker.txns.partition_for(&txn_id);
    let (leader, _) = broker.leader_of(ferry_txn::TRANSACTION_STATE_TOPIC, coordinator);
    let answers: Vec<((String, i32), Option<ResponseError>)> = if leader == broker.node_id {
        partitions
            .into_iter()
            .map(|(t, p)| {
                let e = broker
                    .txns
                    .verify_partition(&txn_id, producer_id, epoch, &t, p)
                    .err();
                ((t, p), e)
            })
            .collect()
    } else {
        ask_coordinator(broker, leader, &txn_id, producer_id, epoch, partitions).await
    };
    answers
        .into_iter()
        .filter_map(|(tp, e)| e.map(|e| (tp, produce_error(e))))
        .collect()
}

/// The produce error for a verification answer, as Kafka's leader gives it to a client of
/// transactions v1: a partition not in the transaction is INVALID_TXN_STATE (the producer
/// aborts); a fenced producer is told INVALID_PRODUCER_EPOCH, the error producers expect from
/// a Produce (PRODUCER_FENCED there is unknown to librdkafka, which then only aborts the
/// transaction instead of failing fatally as a fenced producer must); anything transient (the
/// coordinator moving or loading, the transaction ending) is NOT_ENOUGH_REPLICAS, which
/// producers retry.
fn produce_error(e: ResponseError) -> ResponseError {
    use ResponseError::*;
    match e {
        TransactionAbortable => InvalidTxnState,
        ProducerFenced => InvalidProducerEpoch,
        InvalidProducerEpoch | InvalidProducerIdMapping | InvalidTxnState => e,
        _ => NotEnoughReplicas,
    }
}

/// AddPartitionsToTxn v4, verify only, to the coordinator broker `leader`.
async fn ask_coordinator(
    broker: &Arc<Broker>,
    leader: i32,
    txn_id: &str,
    producer_id: i64,
    epoch: i16,
    partitions: Vec<(String, i32)>,
) -> Vec<((String, i32), Option<ResponseError>)> {
    let unavailable = |partitions: Vec<(String, i32)>| {
        partitions
            .into_iter()
            .map(|tp| (tp, Some(ResponseError::CoordinatorNotAvailable)))
            .collect()
    };
    if leader < 0 {
        return unavailable(partitions);
    }
    let mut by_topic: HashMap<&str, Vec<i32>> = HashMap::new();
    for (t, p) in &partitions {
        by_topic.entry(t.as_str()).or_default().push(*p);
    }
    let request = AddPartitionsToTxnRequest::default().with_transactions(vec![
        AddPartitionsToTxnTransaction::default()
            .with_transactional_id(TransactionalId(StrBytes::from_string(txn_id.to_string())))
            .with_producer_id(ProducerId(producer_id))
            .with_producer_epoch(epoch)
            .with_verify_only(true)
            .with_topics(
                by_topic
                    .into_iter()
                    .map(|(t, ps)| {
                        AddPartitionsToTxnTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partitions(ps)
                    })
                    .collect(),
            ),
    ]);
    let client_id = inter_broker_client_id(broker.node_id, CLIENT_PURPOSE);
    let answer = async {
        let mut c = broker.peers.connect(leader, TrafficKind::Other).await?;
        c.add_partitions_to_txn(&request, &client_id).await
    };
    let response = match tokio::time::timeout(VERIFY_TIMEOUT, answer).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::debug!(leader, error = %e, "transaction verification failed");
            return unavailable(partitions);
        }
        Err(_) => return unavailable(partitions),
    };
    let top = ResponseError::try_from_code(response.error_code);
    let mut errors: HashMap<(String, i32), i16> = HashMap::new();
    for result in &response.results_by_transaction {
        for t in &result.topic_results {
            for p in &t.results_by_partition {
                errors.insert(
                    (t.name.to_string(), p.partition_index),
                    p.partition_error_code,
                );
            }
        }
    }
    partitions
        .into_iter()
        .map(|tp| {
            let code = errors.get(&tp).copied().unwrap_or(response.error_code);
            let e = ResponseError::try_from_code(code).or(top);
            (tp, e)
        })
        .collect()
}
