//! What the transaction coordinator (ferry-txn) needs from the broker: `__transaction_state` as
//! its store, producer ids from the controller, and the topics of the metadata image.

use std::sync::Arc;
use std::time::Duration;

use ferry_cluster::metadata_store::MetadataStore;
use ferry_common::SharedClock;
use ferry_txn::{
    Appended, PartitionCatalog, ProducerIdSource, StoreError, StoredRecord, TxnStateStore,
    TRANSACTION_STATE_TOPIC,
};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::Compression;

use crate::internal_topic::{InternalTopicLog, LogFailure};
use crate::replica_manager::Partition;

/// `__transaction_state` as the transaction coordinator's store.
pub struct LogTxnStateStore {
    log: InternalTopicLog,
}

impl LogTxnStateStore {
    pub fn new(clock: SharedClock, commit_timeout: Duration) -> Self {
        Self {
            log: InternalTopicLog::new(TRANSACTION_STATE_TOPIC, clock, commit_timeout),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.log.is_ready()
    }

    /// Takes the partitions hosted here and the topic's `min.insync.replicas`.
    pub fn set_partitions(&self, partitions: Vec<Arc<Partition>>, min_isr: i32) {
        self.log.set_partitions(partitions, min_isr);
    }
}

fn txn_error((error, message): LogFailure) -> StoreError {
    ferry_txn::append_error(error, message)
}

impl TxnStateStore for LogTxnStateStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        if records.is_empty() {
            let end_offset = self.log.log_end(partition).map_err(txn_error)?;
            return Ok(Appended {
                end_offset,
                durable: Box::pin(async { Ok(()) }),
            });
        }
        let now = self.log.now_ms();
        let buf = ferry_log::keyed_records::encode(records.iter().cloned(), now, Compression::None)
            .map_err(|e| StoreError::new(ResponseError::CoordinatorNotAvailable, e))?;
        let appended = self.log.append(partition, &buf).map_err(txn_error)?;
        Ok(Appended {
            end_offset: appended.end_offset,
            durable: Box::pin(async move { appended.durable.await.map_err(txn_error) }),
        })
    }

    fn read_all(&self, partition: i32) -> Result<Vec<StoredRecord>, StoreError> {
        let mut out = Vec::new();
        self.log
            .read_to_end(partition, |batches, from| {
                let (records, next) = ferry_log::keyed_records::decode(batches, from)?;
                out.extend(records);
                Ok(next)
            })
            .map_err(txn_error)?;
        Ok(out)
    }
}

/// Producer ids from the controller's blocks (the same source idempotent producers use).
pub struct ControllerProducerIds(pub Arc<MetadataStore>);

impl ProducerIdSource for ControllerProducerIds {
    fn next_producer_id(&self) -> Result<i64, ResponseError> {
        self.0.allocate_producer_id().map_err(|e| {
            tracing::error!(error = %e, "cannot allocate a producer id");
            ResponseError::CoordinatorNotAvailable
        })
    }
}

/// Whether a topic partition exists, by the metadata image (AddPartitionsToTxn).
pub struct ImagePartitions(pub Arc<MetadataStore>);

impl PartitionCatalog for ImagePartitions {
    fn partition_exists(&self, topic: &str, partition: i32) -> bool {
        self.0
            .topic(topic)
            .is_some_and(|t| partition >= 0 && partition < t.partitions)
    }
}
