//! Requests Kafka's brokers forward to the active controller: ElectLeaders (KIP-183, KIP-460)
//! and DescribeQuorum (KIP-595).
//!
//! ElectLeaders is ferry's other controller-bound admin requests' way (CreateTopics,
//! CreatePartitions): this broker decides each partition's election from its image and proposes
//! the `AlterPartition` record to the quorum, which forwards it to the active controller; the
//! image's partition-epoch check there rejects a decision made from a stale image, and the
//! election is then recomputed (`MetadataStore::elect_leaders`). The answer waits, up to the
//! request's `timeout_ms`, for every record to be committed and applied here; past it the
//! answer is REQUEST_TIMED_OUT (as Kafka's controller answers a request past its deadline; a
//! `timeout_ms` of 0 or less is past it at once, and nothing is proposed).
//!
//! DescribeQuorum is answered by the quorum's leader, which alone knows the voters' progress
//! (`Controller::describe_quorum`): a broker that is not the leader asks it over the quorum
//! transport, so every broker answers the same. The metadata partition is `__cluster_metadata`
//! partition 0, as in Kafka; any other is UNKNOWN_TOPIC_OR_PARTITION. Every ferry broker is a
//! voter, so there are no observers; v2's nodes are the voters with their controller listener
//! (the first of `controller.listener.names`, `CONTROLLER` when none is set).

use std::sync::Arc;
use std::time::Duration;

use ferry_authz::AclOperation;
use ferry_cluster::elect_leaders::ElectionType;
use ferry_cluster::metadata_store::TopicElections;
use ferry_cluster::QuorumInfo;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{
    BrokerId, DescribeQuorumRequest, DescribeQuorumResponse, ElectLeadersRequest,
    ElectLeadersResponse, TopicName,
};

use super::{message, str_bytes, RequestContext};
use crate::broker::Broker;

const ELECT_LEADERS: &str = "ElectLeaders";

pub async fn elect_leaders(
    broker: &Arc<Broker>,
    request: ElectLeadersRequest,
    version: i16,
    ctx: &RequestContext,
) -> ElectLeadersResponse {
    let wanted: Option<Vec<(String, Vec<i32>)>> = request.topic_partitions.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.topic.to_string(), t.partitions.clone()))
            .collect()
    });
    let refuse = |error: ResponseError, why: String| {
        refused(
            broker,
            wanted.as_deref().unwrap_or(&[]),
            version,
            error,
            why,
        )
    };
    if !ctx.may_cluster(broker, AclOperation::Alter) {
        return refuse(
            ResponseError::ClusterAuthorizationFailed,
            "ElectLeaders needs ALTER on the cluster".into(),
        );
    }
    // v0 has no election type: it is a preferred election.
    let kind = if version == 0 {
        Some(ElectionType::Preferred)
    } else {
        ElectionType::from_wire(request.election_type)
    };
    let Some(kind) = kind else {
        return refuse(
            ResponseError::InvalidRequest,
            format!("Unknown election type {}", request.election_type),
        );
    };
    let Ok(timeout_ms) = u64::try_from(request.timeout_ms) else {
        return refuse(
            ResponseError::RequestTimedOut,
            timed_out(request.timeout_ms),
        );
    };
    if timeout_ms == 0 {
        return refuse(
            ResponseError::RequestTimedOut,
            timed_out(request.timeout_ms),
        );
    }
    let elections = broker.metadata.elect_leaders(kind, wanted.clone());
    match tokio::time::timeout(Duration::from_millis(timeout_ms), elections).await {
        Ok(results) => answer(broker, results, kind),
        Err(_) => refuse(
            ResponseError::RequestTimedOut,
            timed_out(request.timeout_ms),
        ),
    }
}

fn timed_out(timeout_ms: i32) -> String {
    format!("the elections were not all committed within timeout_ms {timeout_ms}")
}

/// The answer to a request refused as a whole: the error at the top (v1+) and on every
/// partition asked for, as Kafka's `ElectLeadersRequest.getErrorResponse`.
fn refused(
    broker: &Broker,
    wanted: &[(String, Vec<i32>)],
    version: i16,
    error: ResponseError,
    why: String,
) -> ElectLeadersResponse {
    broker.metrics.error(ELECT_LEADERS, error.code());
    let results = wanted
        .iter()
        .map(|(topic, partitions)| {
            ReplicaElectionResult::default()
                .with_topic(TopicName(str_bytes(topic)))
                .with_partition_result(
                    partitions
                        .iter()
                        .map(|p| {
                            PartitionResult::default()
                                .with_partition_id(*p)
                                .with_error_code(error.code())
                                .with_error_message(message(why.clone()))
                        })
                        .collect(),
                )
        })
        .collect();
    let response = ElectLeadersResponse::default().with_replica_election_results(results);
    // v0 has no top-level error code; its partitions carry the error.
    if version >= 1 {
        response.with_error_code(error.code())
    } else {
        response
    }
}

fn answer(
    broker: &Broker,
    results: Vec<TopicElections>,
    kind: ElectionType,
) -> ElectLeadersResponse {
    let results = results
        .into_iter()
        .map(|t| {
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let result = PartitionResult::default().with_partition_id(p.partition);
                    match p.result {
                        Ok(elected) => {
                            broker.metrics.controller.election(elected.unclean);
                            tracing::info!(topic = %t.topic, partition = p.partition, leader = elected.leader, leader_epoch = elected.leader_epoch, unclean = elected.unclean, "partition leader changed by ElectLeaders");
                            result
                        }
                        Err(e) => {
                            let code = crate::errors::election_error(&e, kind);
                            broker.metrics.error(ELECT_LEADERS, code.code());
                            result
                                .with_error_code(code.code())
                                .with_error_message(message(e.to_string()))
                        }
                    }
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(TopicName(str_bytes(&t.topic)))
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_replica_election_results(results)
}

/// Kafka's metadata partition, the one DescribeQuorum describes.
const METADATA_TOPIC: &str = "__cluster_metadata";
const DESCRIBE_QUORUM: &str = "DescribeQuorum";

pub async fn describe_quorum(
    broker: &Arc<Broker>,
    request: DescribeQuorumRequest,
    version: i16,
    ctx: &RequestContext,
) -> DescribeQuorumResponse {
    if !ctx.may_cluster(broker, AclOperation::Describe) {
        let e = ResponseError::ClusterAuthorizationFailed;
        broker.metrics.error(DESCRIBE_QUORUM, e.code());
        return quorum_error(e, version, "DescribeQuorum needs DESCRIBE on the cluster");
    }
    let is_metadata_partition = matches!(request.topics.as_slice(),
        [t] if t.topic_name.as_str() == METADATA_TOPIC
            && matches!(t.partitions.as_slice(), [p] if p.partition_index == 0));
    if !is_metadata_partition {
        // Kafka's answer: the error on every partition asked about.
        let e = ResponseError::UnknownTopicOrPartition;
        broker.metrics.error(DESCRIBE_QUORUM, e.code());
        let topics = request
            .topics
            .iter()
            .map(|t| {
                TopicData::default()
                    .with_topic_name(t.topic_name.clone())
                    .with_partitions(
                        t.partitions
                            .iter()
                            .map(|p| {
                                PartitionData::default()
                                    .with_partition_index(p.partition_index)
                                    .with_error_code(e.code())
                            })
                            .collect(),
                    )
            })
            .collect();
        return DescribeQuorumResponse::default().with_topics(topics);
    }
    match broker.metadata.describe_quorum().await {
        Ok(info) => described(broker, info, version),
        Err(e) => {
            let code = crate::errors::describe_quorum_error(&e);
            broker.metrics.error(DESCRIBE_QUORUM, code.code());
            let partition = PartitionData::default()
                .with_error_code(code.code())
                .with_leader_id(BrokerId(-1))
                .with_leader_epoch(-1)
                .with_high_watermark(-1);
            let partition = if version >= 2 {
                partition.with_error_message(message(e.to_string()))
            } else {
                partition
            };
            DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
                .with_topic_name(TopicName(str_bytes(METADATA_TOPIC)))
                .with_partitions(vec![partition])])
        }
    }
}

/// A top-level error (the error message only where the version has it).
fn quorum_error(e: ResponseError, version: i16, why: &str) -> DescribeQuorumResponse {
    let response = DescribeQuorumResponse::default().with_error_code(e.code());
    if version >= 2 {
        response.with_error_message(message(why))
    } else {
        response
    }
}

fn described(broker: &Broker, info: QuorumInfo, version: i16) -> DescribeQuorumResponse {
    let id = |n: u64| BrokerId(i32::try_from(n).unwrap_or(i32::MAX));
    let voters = info
        .voters
        .iter()
        .map(|v| {
            let state = ReplicaState::default()
                .with_replica_id(id(v.id))
                .with_log_end_offset(v.log_end_offset);
            // The timestamps came with v1; v0 has no field for them.
            if version >= 1 {
                state
                    .with_last_fetch_timestamp(v.last_fetch_ms)
                    .with_last_caught_up_timestamp(v.last_caught_up_ms)
            } else {
                state
            }
        })
        .collect();
    let partition = PartitionData::default()
        .with_partition_index(0)
        .with_leader_id(id(info.leader_id))
        .with_leader_epoch(i32::try_from(info.leader_epoch).unwrap_or(i32::MAX))
        .with_high_watermark(info.high_watermark)
        .with_current_voters(voters);
    let response = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(str_bytes(METADATA_TOPIC)))
        .with_partitions(vec![partition])]);
    if version < 2 {
        return response;
    }
    let listener = broker
        .config
        .controller_listener()
        .ok()
        .flatten()
        .map_or_else(|| "CONTROLLER".to_string(), |(name, _)| name);
    let nodes = info
        .voters
        .iter()
        .map(|v| {
            let listeners = split_host_port(&v.addr)
                .map(|(host, port)| {
                    Listener::default()
                        .with_name(str_bytes(&listener))
                        .with_host(str_bytes(host))
                        .with_port(port)
                })
                .into_iter()
                .collect();
            Node::default()
                .with_node_id(id(v.id))
                .with_listeners(listeners)
        })
        .collect();
    response.with_nodes(nodes)
}

/// `host:port` (or `[v6]:port`) split; `None` for an empty or malformed address.
fn split_host_port(addr: &str) -> Option<(&str, u16)> {
    let (host, port) = addr.rsplit_once(':')?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some((host, port.parse().ok()?)).filter(|(h, _)| !h.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn voter_addresses_split_into_host_and_port() {
        assert_eq!(
            super::split_host_port("127.0.0.1:9093"),
            Some(("127.0.0.1", 9093))
        );
        assert_eq!(super::split_host_port("[::1]:9094"), Some(("::1", 9094)));
        assert_eq!(super::split_host_port(""), None);
        assert_eq!(super::split_host_port("host:x"), None);
    }
}
