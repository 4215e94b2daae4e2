//! Transaction markers: the COMMIT or ABORT control batch the transaction coordinator has
//! every partition leader of a transaction write (WriteTxnMarkers). A leader writes a marker
//! in log order with its producers' appends, answers once the in-sync replicas hold it
//! (markers are written with acks=all, as in Kafka), and, for a `__consumer_offsets`
//! partition, then lets the group coordinator apply or drop the transaction's offsets.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use ferry_common::TopicPartition;
use ferry_metrics::{inter_broker_client_id, TrafficKind};
use ferry_txn::{MarkerOutcome, MarkerWriter, MarkersWritten, TxnMarkers, TxnResult};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;

use crate::broker::Broker;
use crate::group_store::OFFSETS_TOPIC;

/// How long a marker waits for the in-sync replicas, and a peer for its answer.
const MARKER_TIMEOUT: Duration = Duration::from_secs(30);
const CLIENT_PURPOSE: &str = "txn-markers";

/// Writes `marker` to `tp`, which this broker must lead, and waits for the in-sync replicas.
pub async fn write_local(
    broker: &Arc<Broker>,
    tp: &TopicPartition,
    marker: ferry_log::TxnMarker,
) -> Result<(), ResponseError> {
    let Some(partition) = broker.replicas.partition_of(&tp.topic, tp.partition) else {
        return Err(broker.missing_partition_error(&tp.topic, tp.partition));
    };
    if !partition.is_leader() {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    let epoch = partition.leader_epoch();
    let info = partition
        .append_marker_then(&marker, |p, info| {
            broker.replication.on_leader_append(p, info)
        })
        .map_err(|e| crate::errors::log_error(&e))?;
    crate::internal_topic::committed(partition, epoch, info.last_offset + 1, MARKER_TIMEOUT)
        .await
        .map_err(|(e, _)| e)?;
    if tp.topic == OFFSETS_TOPIC {
        let commit = marker.result == ferry_log::TxnResult::Commit;
        broker
            .groups
            .complete_transaction(tp.partition, marker.producer_id, commit);
    }
    Ok(())
}

/// The log's marker for a coordinator's.
pub fn log_marker(m: &TxnMarkers) -> ferry_log::TxnMarker {
    ferry_log::TxnMarker {
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        coordinator_epoch: m.coordinator_epoch,
        result: match m.result {
            TxnResult::Commit => ferry_log::TxnResult::Commit,
            TxnResult::Abort => ferry_log::TxnResult::Abort,
        },
    }
}

/// The transaction coordinator's [`MarkerWriter`]: local partitions directly, the others by
/// WriteTxnMarkers to their leaders. Built before the broker it needs, so it holds a late,
/// weak handle to it.
#[derive(Default)]
pub struct BrokerMarkerWriter {
    broker: OnceLock<Weak<Broker>>,
}

impl BrokerMarkerWriter {
    pub fn attach(&self, broker: &Arc<Broker>) {
        let _ = self.broker.set(Arc::downgrade(broker));
    }
}

impl MarkerWriter for BrokerMarkerWriter {
    fn write_markers(&self, markers: TxnMarkers) -> MarkersWritten {
        let broker = self.broker.get().and_then(Weak::upgrade);
        Box::pin(async move {
            let Some(broker) = broker else {
                let retry = MarkerOutcome::Retry(ResponseError::CoordinatorNotAvailable);
                return markers
                    .partitions
                    .into_iter()
                    .map(|tp| (tp, retry))
                    .collect();
            };
            write_all(&broker, markers).await
        })
    }
}

/// Every partition's outcome: partitions gone from the image are skipped, the rest written by
/// their leaders (grouped, one request per remote leader).
async fn write_all(
    broker: &Arc<Broker>,
    markers: TxnMarkers,
) -> Vec<(TopicPartition, MarkerOutcome)> {
    let mut out = Vec::new();
    let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    for tp in &markers.partitions {
        let exists = broker
            .metadata
            .topic(&tp.topic)
            .is_some_and(|t| tp.partition < t.partitions);
        if !exists {
            out.push((tp.clone(), MarkerOutcome::Skipped));
            continue;
        }
        let (leader, _) = broker.leader_of(&tp.topic, tp.partition);
        by_leader.entry(leader).or_default().push(tp.clone());
    }
    let marker = log_marker(&markers);
    for (leader, tps) in by_leader {
        if leader == broker.node_id {
            for tp in tps {
                let outcome =
                    MarkerOutcome::from_error(write_local(broker, &tp, marker).await.err());
                out.push((tp, outcome));
            }
        } else if leader < 0 {
            let retry = MarkerOutcome::Retry(ResponseError::NotLeaderOrFollower);
            out.extend(tps.into_iter().map(|tp| (tp, retry)));
        } else {
            out.extend(write_remote(broker, leader, &markers, tps).await);
        }
    }
    out
}

/// Sends one WriteTxnMarkers with `tps` to `leader` and reads each partition's outcome.
async fn write_remote(
    broker: &Arc<Broker>,
    leader: i32,
    markers: &TxnMarkers,
    tps: Vec<TopicPartition>,
) -> Vec<(TopicPartition, MarkerOutcome)> {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &tps {
        topics
            .entry(tp.topic.as_str())
            .or_default()
            .push(tp.partition);
    }
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(ProducerId(markers.producer_id))
            .with_producer_epoch(markers.producer_epoch)
            .with_transaction_result(markers.result == TxnResult::Commit)
            .with_coordinator_epoch(markers.coordinator_epoch)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(t, ps)| {
                        WritableTxnMarkerTopic::default()
                            .with_name(TopicName(StrBytes::from_string(t.to_string())))
                            .with_partition_indexes(ps)
                    })
                    .collect(),
            )]);
    let client_id = inter_broker_client_id(broker.node_id, CLIENT_PURPOSE);
    let answer = async {
        let mut c = broker.peers.connect(leader, TrafficKind::Other).await?;
        c.write_txn_markers(&request, &client_id).await
    };
    let retry = |tps: Vec<TopicPartition>| {
        tps.into_iter()
            .map(|tp| (tp, MarkerOutcome::Retry(ResponseError::NotLeaderOrFollower)))
            .collect()
    };
    let response = match tokio::time::timeout(MARKER_TIMEOUT, answer).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!(leader, error = %e, "WriteTxnMarkers failed; will retry");
            return retry(tps);
        }
        Err(_) => {
            tracing::warn!(leader, "WriteTxnMarkers timed out; will retry");
            return retry(tps);
        }
    };
    let mut errors: BTreeMap<(String, i32), i16> = BTreeMap::new();
    for m in response.markers {
        for t in m.topics {
            for p in t.partitions {
                errors.insert((t.name.to_string(), p.partition_index), p.error_code);
            }
        }
    }
    tps.into_iter()
        .map(|tp| {
            let code = errors
                .get(&(tp.topic.clone(), tp.partition))
                .copied()
                .unwrap_or(ResponseError::UnknownServerError.code());
            let error = (code != 0).then(|| {
                ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError)
            });
            (tp, MarkerOutcome::from_error(error))
        })
        .collect()
}
