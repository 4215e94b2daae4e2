//! The one place where internal errors become Kafka wire error codes.

use ferry_cluster::election::AlterIsrError;
use ferry_log::LogError;
use kafka_protocol::error::ResponseError;

use ferry_cluster::elect_leaders::{ElectionRefused, ElectionType};
use ferry_cluster::metadata_store::{ElectError, MetadataError};
use ferry_cluster::ClusterError;
use ferry_config::topic_config::TopicConfigError;

/// The Kafka error for a log-layer failure.
pub fn log_error(e: &LogError) -> ResponseError {
    match e {
        LogError::CorruptMessage(_) => ResponseError::CorruptMessage,
        LogError::InvalidRecord(_) | LogError::RecordsRejected(_) => ResponseError::InvalidRecord,
        LogError::InvalidTimestamp(_) | LogError::TimestampsRejected(_) => {
            ResponseError::InvalidTimestamp
        }
        LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
        LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        LogError::OutOfOrderSequence { .. } => ResponseError::OutOfOrderSequenceNumber,
        LogError::InvalidProducerEpoch { .. } => ResponseError::InvalidProducerEpoch,
        LogError::InvalidTxnState(_) => ResponseError::InvalidTxnState,
        LogError::TransactionCoordinatorFenced { .. } => {
            ResponseError::TransactionCoordinatorFenced
        }
        _ => ResponseError::KafkaStorageError,
    }
}

pub fn metadata_error(e: &MetadataError) -> ResponseError {
    match e {
        MetadataError::TopicExists(_) => ResponseError::TopicAlreadyExists,
        MetadataError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        MetadataError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        MetadataError::Placement(_) => ResponseError::InvalidReplicationFactor,
        MetadataError::AlterPartitionRefused(e) => alter_partition_error(e),
        e if e.is_retriable() => ResponseError::NotController,
        _ => ResponseError::KafkaStorageError,
    }
}

/// The Kafka error for a failed write of a security record (SCRAM credential, ACL, client
/// quota): the image's refusal in Kafka's terms, or the controller being unreachable.
pub fn security_record_error(e: &MetadataError) -> ResponseError {
    use ferry_cluster::{ClusterError, ImageError};
    match e {
        MetadataError::Controller(ClusterError::Rejected(rejected)) => match rejected {
            ImageError::InvalidCredential(_) => ResponseError::UnacceptableCredential,
            ImageError::UnknownCredential(..) | ImageError::UnknownAcl(_) => {
                ResponseError::ResourceNotFound
            }
            _ => ResponseError::InvalidRequest,
        },
        e if e.is_retriable() => ResponseError::NotController,
        _ => ResponseError::UnknownServerError,
    }
}

/// Kafka's ElectLeaders error for one partition whose election did not happen.
pub fn election_error(e: &ElectError, kind: ElectionType) -> ResponseError {
    match e {
        ElectError::Refused(refused) => match refused {
            ElectionRefused::NotNeeded => ResponseError::ElectionNotNeeded,
            ElectionRefused::PreferredLeaderNotAvailable => {
                ResponseError::PreferredLeaderNotAvailable
            }
            ElectionRefused::EligibleLeadersNotAvailable => {
                ResponseError::EligibleLeadersNotAvailable
            }
            ElectionRefused::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        },
        // Rejected in every round: the state kept changing under the election (the chosen
        // leader fenced meanwhile, say); the answer is the election type's "no leader".
        ElectError::Controller(ClusterError::Rejected(_)) => match kind {
            ElectionType::Preferred => ResponseError::PreferredLeaderNotAvailable,
            ElectionType::Unclean => ResponseError::EligibleLeadersNotAvailable,
        },
        ElectError::Controller(e) if e.kind() == ferry_cluster::ErrorKind::Retriable => {
            ResponseError::NotController
        }
        ElectError::Controller(_) => ResponseError::UnknownServerError,
    }
}

/// Kafka's DescribeQuorum error when the quorum's leader could not describe it: with no leader
/// to ask right now (an election, the leader unreachable) NOT_LEADER_OR_FOLLOWER, which clients
/// retry, as Kafka's Raft client answers on a node that does not lead.
pub fn describe_quorum_error(e: &ClusterError) -> ResponseError {
    if e.kind() == ferry_cluster::ErrorKind::Retriable {
        ResponseError::NotLeaderOrFollower
    } else {
        ResponseError::UnknownServerError
    }
}

/// Kafka's AlterPartition error codes.
pub fn alter_partition_error(e: &AlterIsrError) -> ResponseError {
    match e {
        AlterIsrError::UnknownTopicOrPartition => ResponseError::UnknownTopicOrPartition,
        AlterIsrError::NotLeaderOrFollower => ResponseError::NotLeaderOrFollower,
        AlterIsrError::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch,
        AlterIsrError::InvalidUpdateVersion => ResponseError::InvalidUpdateVersion,
        AlterIsrError::InvalidRequest(_) => ResponseError::InvalidRequest,
        AlterIsrError::IneligibleReplica(_) => ResponseError::IneligibleReplica,
    }
}

pub fn config_error(_: &TopicConfigError) -> ResponseError {
    ResponseError::InvalidConfig
}

/// KIP-320: a request's `current_leader_epoch` (-1 = not given) against the partition's. An
/// older epoch is fenced; a newer one means this broker has not learned of it yet.
pub fn leader_epoch_error(requested: i32, current: i32) -> Option<ResponseError> {
    if requested < 0 || requested == current {
        None
    } else if requested > current {
        Some(ResponseError::UnknownLeaderEpoch)
    } else {
        Some(ResponseError::FencedLeaderEpoch)
    }
}

/// Error code for a wire field: 0 for success.
pub fn code(e: Option<ResponseError>) -> i16 {
    e.map(|e| e.code()).unwrap_or(0)
}

/// Kafka's AlterPartitionReassignments error for one partition.
pub fn reassignment_error(e: &MetadataError) -> ResponseError {
    use ferry_cluster::ImageError;
    match e {
        MetadataError::UnknownTopic(_) => ResponseError::UnknownTopicOrPartition,
        MetadataError::Controller(ClusterError::Rejected(rejected)) => match rejected {
            ImageError::UnknownTopicId(_) | ImageError::UnknownPartition { .. } => {
                ResponseError::UnknownTopicOrPartition
            }
            ImageError::NoReassignmentInProgress { .. } => ResponseError::NoReassignmentInProgress,
            ImageError::UnknownBroker(_) | ImageError::InvalidReplicas(_) => {
                ResponseError::InvalidReplicaAssignment
            }
            _ => ResponseError::UnknownServerError,
        },
        e if e.is_retriable() => ResponseError::NotController,
        _ => ResponseError::UnknownServerError,
    }
}
