//! The seam between the coordinator and the `__consumer_offsets` log.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;

/// A record of `__consumer_offsets`: key, and value or `None` for a tombstone.
pub type StoredRecord = (Bytes, Option<Bytes>);

/// A failed append to or read of a coordinator's internal topic, with the error its APIs
/// answer (for groups, Kafka's mapping: a lost leadership is NOT_COORDINATOR, too few in-sync
/// replicas COORDINATOR_NOT_AVAILABLE, an ISR that did not acknowledge in time
/// REQUEST_TIMED_OUT). The transaction coordinator uses it too.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct StoreError {
    pub error: ResponseError,
    pub message: String,
}

impl StoreError {
    pub fn new(error: ResponseError, message: impl Into<String>) -> Self {
        Self {
            error,
            message: message.into(),
        }
    }

    /// Anything else: the coordinator cannot serve the group for now.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ResponseError::CoordinatorNotAvailable, message)
    }
}

/// Resolves once the in-sync replicas hold an append (acks=all).
pub type Durable = Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send>>;

/// An append written to the leader's log.
pub struct Appended {
    /// The offset after the last record appended: orders appends to the same partition.
    pub end_offset: i64,
    pub durable: Durable,
}

/// What a `__consumer_offsets` partition holds, in log order, as the coordinator replays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredEntry {
    /// A record written outside any transaction.
    Record(StoredRecord),
    /// A record of producer `producer_id`'s transaction (TxnOffsetCommit): it takes effect at
    /// the transaction's COMMIT marker and is dropped at ABORT.
    Transactional {
        producer_id: i64,
        record: StoredRecord,
    },
    /// The COMMIT (`commit`) or ABORT marker ending producer `producer_id`'s transaction.
    Marker { producer_id: i64, commit: bool },
}

/// Durable storage for group records, one partition per group (see
/// [`crate::offsets_topic::partition_for`]).
pub trait OffsetsStore: Send + Sync {
    /// Appends records to a partition this broker leads. Returns once they are in the leader's
    /// log; [`Appended::durable`] resolves when the in-sync replicas hold them.
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError>;
    /// Appends records as part of the transaction of `producer_id` at `producer_epoch` (a
    /// transactional batch, as Kafka writes a TxnOffsetCommit), like [`Self::append`].
    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        records: &[StoredRecord],
    ) -> Result<Appended, StoreError>;
    /// Everything in a partition up to its log end, oldest first, with its log offset.
    fn read_all(&self, partition: i32) -> Result<Vec<(i64, StoredEntry)>, StoreError>;
}
