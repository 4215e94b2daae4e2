//! What the transaction coordinator needs from the broker: the `__transaction_state` log
//! ([`TxnStateStore`]), a way to write transaction markers to partition leaders
//! ([`MarkerWriter`]), fresh producer ids ([`ProducerIdSource`]) and which partitions exist
//! ([`PartitionCatalog`]).

use std::future::Future;
use std::pin::Pin;

use ferry_common::TopicPartition;
use kafka_protocol::error::ResponseError;

// The store seam's types are the group coordinator's: both coordinators write an internal
// topic the same way (keyed records, acks=all).
pub use ferry_group::{Appended, Durable, StoreError, StoredRecord};

/// Kafka's mapping from a `__transaction_state` append's error to the coordinator's answer: a
/// partition that is not available or under-replicated, or a timed-out append, is
/// COORDINATOR_NOT_AVAILABLE (the client retries); a lost leadership or a broken disk is
/// NOT_COORDINATOR (the client looks the coordinator up again); a too-large record is
/// UNKNOWN_SERVER_ERROR.
pub fn append_error(error: ResponseError, message: impl Into<String>) -> StoreError {
    use ResponseError::*;
    let mapped = match error {
        UnknownTopicOrPartition
        | NotEnoughReplicas
        | NotEnoughReplicasAfterAppend
        | RequestTimedOut => CoordinatorNotAvailable,
        NotLeaderOrFollower | KafkaStorageError => NotCoordinator,
        MessageTooLarge | RecordListTooLarge => UnknownServerError,
        other => other,
    };
    StoreError::new(mapped, message)
}

/// Durable storage of transaction state, one partition per transactional id (see
/// [`crate::txn_log::partition_for`]). The broker writes with acks=all, uncompressed, to a
/// compacted topic, as Kafka does.
pub trait TxnStateStore: Send + Sync {
    /// Appends records to a partition this broker leads. Returns once they are in the leader's
    /// log; [`Appended::durable`] resolves when the in-sync replicas hold them. Errors should
    /// be mapped with [`append_error`]. Called with the coordinator's lock
    /// held, so that appends of one id stay in decision order: it must not block on the
    /// network.
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError>;
    /// Every record of a partition up to its log end, oldest first.
    fn read_all(&self, partition: i32) -> Result<Vec<StoredRecord>, StoreError>;
}

/// Which marker to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnResult {
    Commit,
    Abort,
}

/// Markers ending one transaction, to be written to each of `partitions` (WriteTxnMarkers to
/// each partition's leader).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMarkers {
    /// For logs only: WriteTxnMarkers does not carry it.
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The leader epoch of the `__transaction_state` partition: a leader that has seen a higher
    /// one rejects the marker (TRANSACTION_COORDINATOR_FENCED).
    pub coordinator_epoch: i32,
    pub result: TxnResult,
    pub partitions: Vec<TopicPartition>,
}

/// What became of the marker for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// The leader wrote it.
    Written,
    /// Nothing to write: the partition no longer exists (its topic was deleted) or cannot hold
    /// markers. The partition leaves the transaction.
    Skipped,
    /// Not written this time (no leader, leadership moved, too few replicas, timeout): the
    /// coordinator tries again.
    Retry(ResponseError),
    /// The leader knows a newer producer epoch or coordinator epoch: this coordinator's markers
    /// are obsolete and it stops sending them.
    Fenced(ResponseError),
}

impl MarkerOutcome {
    /// Kafka's reading of a partition's error in a WriteTxnMarkers response.
    pub fn from_error(error: Option<ResponseError>) -> Self {
        use ResponseError::*;
        match error {
            None => MarkerOutcome::Written,
            Some(e @ (InvalidProducerEpoch | TransactionCoordinatorFenced)) => {
                MarkerOutcome::Fenced(e)
            }
            // The producer could not have written to such a partition.
            Some(UnsupportedForMessageFormat | UnsupportedVersion) => MarkerOutcome::Skipped,
            Some(e) => MarkerOutcome::Retry(e),
        }
    }
}

/// The outcome per partition; a partition left out counts as [`MarkerOutcome::Retry`].
pub type MarkersWritten =
    Pin<Box<dyn Future<Output = Vec<(TopicPartition, MarkerOutcome)>> + Send>>;

/// Writes transaction markers through the partitions' leaders.
pub trait MarkerWriter: Send + Sync {
    /// Sends `markers` to the leader of each partition. The coordinator calls it again with the
    /// partitions to retry until each has an outcome other than Retry, or until it loses the
    /// `__transaction_state` partition.
    fn write_markers(&self, markers: TxnMarkers) -> MarkersWritten;
}

/// Hands out producer ids.
pub trait ProducerIdSource: Send + Sync {
    /// A producer id never handed out before in the cluster. An error (such as
    /// COORDINATOR_LOAD_IN_PROGRESS while a new block of ids is being fetched) is the answer to
    /// the InitProducerId that asked. Called with the coordinator's lock held: it must not
    /// block (hand out ids from a block fetched ahead, as Kafka's `RPCProducerIdManager` does).
    fn next_producer_id(&self) -> Result<i64, ResponseError>;
}

/// The partitions of the cluster, as AddPartitionsToTxn checks them.
pub trait PartitionCatalog: Send + Sync {
    fn partition_exists(&self, topic: &str, partition: i32) -> bool;
}

#[cfg(test)]
mod tests {
    use super::*;
    use ResponseError::*;

    #[test]
    fn append_errors_map_to_coordinator_errors() {
        let map = |e| append_error(e, "").error;
        assert_eq!(map(NotEnoughReplicas), CoordinatorNotAvailable);
        assert_eq!(map(RequestTimedOut), CoordinatorNotAvailable);
        assert_eq!(map(NotLeaderOrFollower), NotCoordinator);
        assert_eq!(map(MessageTooLarge), UnknownServerError);
        assert_eq!(map(InvalidRequest), InvalidRequest);
    }

    #[test]
    fn marker_errors_read_as_kafka_reads_them() {
        assert_eq!(MarkerOutcome::from_error(None), MarkerOutcome::Written);
        assert_eq!(
            MarkerOutcome::from_error(Some(InvalidProducerEpoch)),
            MarkerOutcome::Fenced(InvalidProducerEpoch)
        );
        assert_eq!(
            MarkerOutcome::from_error(Some(UnsupportedForMessageFormat)),
            MarkerOutcome::Skipped
        );
        assert_eq!(
            MarkerOutcome::from_error(Some(NotLeaderOrFollower)),
            MarkerOutcome::Retry(NotLeaderOrFollower)
        );
    }
}
