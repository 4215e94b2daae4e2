//! `__consumer_offsets` as the group coordinator's store: records are appended to the
//! partitions led here through the replica manager like an acks=all produce, and read back up to
//! the log end when this broker is elected leader of a partition.

use std::sync::Arc;
use std::time::Duration;

use ferry_cluster::metadata_store::MetadataStore;
use ferry_common::SharedClock;
use ferry_group::{Appended, OffsetsStore, StoreError, StoredEntry, StoredRecord, TopicCatalog};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::Compression;
use uuid::Uuid;

use crate::internal_topic::{InternalTopicLog, LogFailure};
use crate::replica_manager::Partition;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The cluster's topics as the group coordinator looks them up (KIP-848 assignments).
pub struct MetadataCatalog(pub Arc<MetadataStore>);

impl TopicCatalog for MetadataCatalog {
    fn topic(&self, name: &str) -> Option<(Uuid, i32)> {
        self.0.topic(name).map(|t| (t.id, t.partitions))
    }
    fn topic_name(&self, id: Uuid) -> Option<String> {
        self.0.topic_by_id(id).map(|t| t.name)
    }
    fn topic_names(&self) -> Vec<String> {
        self.0
            .topics()
            .into_iter()
            .map(|t| t.name)
            .filter(|name| !crate::broker::Broker::is_internal_topic(name))
            .collect()
    }
    fn topic_names_version(&self) -> Option<u64> {
        Some(self.0.image().applied_index)
    }
}

/// `__consumer_offsets` as the group coordinator's store.
pub struct LogOffsetsStore {
    log: InternalTopicLog,
}

impl LogOffsetsStore {
    pub fn new(clock: SharedClock, commit_timeout: Duration) -> Self {
        Self {
            log: InternalTopicLog::new(OFFSETS_TOPIC, clock, commit_timeout),
        }
    }

    pub fn is_ready(&self) -> bool {
        self.log.is_ready()
    }

    /// Takes the partitions hosted here (the replica manager's) and the topic's
    /// `min.insync.replicas`.
    pub fn set_partitions(&self, partitions: Vec<Arc<Partition>>, min_isr: i32) {
        self.log.set_partitions(partitions, min_isr);
    }
}

/// The error a group API answers for a failed append or read (Kafka's mapping: a lost
/// leadership or a storage error is NOT_COORDINATOR, too few in-sync replicas
/// COORDINATOR_NOT_AVAILABLE, a record too large INVALID_COMMIT_OFFSET_SIZE, an ISR that did
/// not acknowledge in time REQUEST_TIMED_OUT).
fn group_error((error, message): LogFailure) -> StoreError {
    let error = match error {
        ResponseError::NotLeaderOrFollower | ResponseError::KafkaStorageError => {
            ResponseError::NotCoordinator
        }
        ResponseError::MessageTooLarge | ResponseError::RecordListTooLarge => {
            ResponseError::InvalidCommitOffsetSize
        }
        ResponseError::RequestTimedOut => ResponseError::RequestTimedOut,
        _ => ResponseError::CoordinatorNotAvailable,
    };
    StoreError::new(error, message)
}

impl OffsetsStore for LogOffsetsStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        if records.is_empty() {
            let end_offset = self.log.log_end(partition).map_err(group_error)?;
            return Ok(Appended {
                end_offset,
                durable: Box::pin(async { Ok(()) }),
            });
        }
        let now = self.log.now_ms();
        let buf = ferry_log::keyed_records::encode(records.iter().cloned(), now, Compression::None)
            .map_err(StoreError::unavailable)?;
        let appended = self.log.append(partition, &buf).map_err(group_error)?;
        Ok(Appended {
            end_offset: appended.end_offset,
            durable: Box::pin(async move { appended.durable.await.map_err(group_error) }),
        })
    }

    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        producer_epoch: i16,
        records: &[StoredRecord],
    ) -> Result<Appended, StoreError> {
        let p = self.log.partition(partition).map_err(group_error)?;
        // Numbered after the producer's last batch here: the coordinator's appends of one
        // group partition are serialized by its lock.
        let sequence = p.log.next_sequence(producer_id, producer_epoch);
        let now = self.log.now_ms();
        let buf = ferry_log::keyed_records::encode_transactional(
            records.iter().cloned(),
            now,
            (producer_id, producer_epoch, sequence),
        )
        .map_err(StoreError::unavailable)?;
        let appended = self.log.append(partition, &buf).map_err(group_error)?;
        Ok(Appended {
            end_offset: appended.end_offset,
            durable: Box::pin(async move { appended.durable.await.map_err(group_error) }),
        })
    }

    fn read_all(&self, partition: i32) -> Result<Vec<(i64, StoredEntry)>, StoreError> {
        let mut out = Vec::new();
        self.log
            .read_to_end(partition, |batches, from| {
                decode_entries(batches, from, &mut out)
            })
            .map_err(group_error)?;
        Ok(out)
    }
}

/// Appends to `out` the entries at or after offset `from` in `batches`: plain and
/// transactional records (keyless ones skipped) and transaction markers. Returns the offset
/// after the last batch (`from` if none), past batches compaction emptied.
fn decode_entries(
    batches: bytes::Bytes,
    from: i64,
    out: &mut Vec<(i64, StoredEntry)>,
) -> Result<i64, String> {
    ferry_log::keyed_records::for_each_record(batches, from, |r| {
        let Some(key) = r.key else { return };
        let entry = if r.control {
            // Other control records (none today) say nothing about offsets.
            let Some(result) = ferry_log::TxnResult::from_control_key(&key) else {
                return;
            };
            StoredEntry::Marker {
                producer_id: r.producer_id,
                commit: result == ferry_log::TxnResult::Commit,
            }
        } else if r.transactional {
            StoredEntry::Transactional {
                producer_id: r.producer_id,
                record: (key, r.value),
            }
        } else {
            StoredEntry::Record((key, r.value))
        };
        out.push((r.offset, entry));
    })
}
