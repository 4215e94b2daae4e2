//! The seam between the coordinator and the `__consumer_offsets` log.

use bytes::Bytes;

/// A record of `__consumer_offsets`: key, and value or `None` for a tombstone.
pub type StoredRecord = (Bytes, Option<Bytes>);

#[derive(Debug, thiserror::Error)]
#[error("__consumer_offsets: {0}")]
pub struct StoreError(pub String);

/// Durable storage for group records, one partition per group (see
/// [`crate::offsets_topic::partition_for`]).
pub trait OffsetsStore: Send + Sync {
    /// Appends records to a partition; returns once they are as durable as an acks=all produce.
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<(), StoreError>;
    /// Every record of a partition, oldest first.
    fn read_all(&self, partition: i32) -> Result<Vec<StoredRecord>, StoreError>;
}
