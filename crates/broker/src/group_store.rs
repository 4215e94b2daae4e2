//! `__consumer_offsets` as the group coordinator's store: records are appended to the
//! partitions led here through the replica manager like an acks=all produce, and read back up to
//! the log end when this broker is elected leader of a partition.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ferry_cluster::metadata_store::MetadataStore;
use ferry_common::SharedClock;
use ferry_group::{Appended, OffsetsStore, StoreError, StoredEntry, StoredRecord, TopicCatalog};
use kafka_protocol::error::ResponseError;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use uuid::Uuid;

use crate::replica_manager::{CommitStatus, Partition};

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
}

/// The partitions of `__consumer_offsets` hosted here, known once the topic exists.
pub struct LogOffsetsStore {
    partitions: RwLock<HashMap<i32, Arc<Partition>>>,
    ready: AtomicBool,
    /// `min.insync.replicas` of the topic: fewer in-sync replicas refuse an append.
    min_isr: AtomicI32,
    /// `offsets.commit.timeout.ms`
    commit_timeout: Duration,
    clock: SharedClock,
}

impl LogOffsetsStore {
    pub fn new(clock: SharedClock, commit_timeout: Duration) -> Self {
        Self {
            partitions: RwLock::new(HashMap::new()),
            ready: AtomicBool::new(false),
            min_isr: AtomicI32::new(1),
            commit_timeout,
            clock,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// Takes the partitions hosted here (the replica manager's) and the topic's
    /// `min.insync.replicas`.
    pub fn set_partitions(&self, partitions: Vec<Arc<Partition>>, min_isr: i32) {
        let map = partitions
            .into_iter()
            .map(|p| (p.tp.partition, p))
            .collect();
        *self.partitions.write().unwrap_or_else(|p| p.into_inner()) = map;
        self.min_isr.store(min_isr.max(1), Ordering::Release);
        self.ready.store(true, Ordering::Release);
    }

    fn partition(&self, p: i32) -> Result<Arc<Partition>, StoreError> {
        self.partitions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&p)
            .cloned()
            .ok_or_else(|| {
                StoreError::new(
                    ResponseError::NotCoordinator,
                    format!("partition {p} of {OFFSETS_TOPIC} is not hosted here"),
                )
            })
    }
}

impl OffsetsStore for LogOffsetsStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<Appended, StoreError> {
        let p = self.partition(partition)?;
        if !p.is_leader() {
            return Err(StoreError::new(
                ResponseError::NotCoordinator,
                format!("{} is not led by this broker", p.tp),
            ));
        }
        if records.is_empty() {
            return Ok(Appended {
                end_offset: p.log.log_end_offset(),
                durable: Box::pin(async { Ok(()) }),
            });
        }
        // As an acks=all produce: NOT_ENOUGH_REPLICAS, which Kafka's coordinator answers as
        // COORDINATOR_NOT_AVAILABLE.
        let min_isr = self.min_isr.load(Ordering::Acquire);
        let isr = i32::try_from(p.isr().len()).unwrap_or(i32::MAX);
        if isr < min_isr {
            return Err(StoreError::unavailable(format!(
                "{}: min.insync.replicas is {min_isr} but the in-sync replica set has {isr} member(s)",
                p.tp
            )));
        }
        let now = self.clock.now_ms();
        let buf = ferry_log::keyed_records::encode(records.iter().cloned(), now, Compression::None)
            .map_err(StoreError::unavailable)?;
        let epoch = p.leader_epoch();
        let info = p.append(&buf).map_err(|e| {
            // Kafka: a storage error or lost leadership is NOT_COORDINATOR, a record too large
            // INVALID_COMMIT_OFFSET_SIZE.
            let error = match crate::errors::log_error(&e) {
                ResponseError::MessageTooLarge => ResponseError::InvalidCommitOffsetSize,
                ResponseError::KafkaStorageError => ResponseError::NotCoordinator,
                _ => ResponseError::CoordinatorNotAvailable,
            };
            StoreError::new(error, e.to_string())
        })?;
        let end_offset = info.last_offset + 1;
        Ok(Appended {
            end_offset,
            durable: Box::pin(committed(p, epoch, end_offset, self.commit_timeout)),
        })
    }

    fn append_transactional(
        &self,
        partition: i32,
        producer_id: i64,
        _producer_epoch: i16,
        _records: &[StoredRecord],
    ) -> Result<Appended, StoreError> {
        // TxnOffsetCommit is not served until the transaction coordinator runs; the log's
        // coordinator-origin append (no client sequence checks) comes with it.
        Err(StoreError::unavailable(format!(
            "transactional offsets of producer {producer_id} for partition {partition}: transactions are not served yet"
        )))
    }

    fn read_all(&self, partition: i32) -> Result<Vec<(i64, StoredEntry)>, StoreError> {
        let p = self.partition(partition)?;
        let mut out = Vec::new();
        let mut offset = p.log.log_start_offset();
        // Up to the log end, as Kafka's coordinator loads on election: a new leader's log is
        // the partition's truth, and its high watermark catches up to it.
        let end = p.log.log_end_offset();
        while offset < end {
            let data = p
                .log
                .read(offset, 1 << 20, end, true)
                .map_err(|e| StoreError::unavailable(e.to_string()))?;
            if data.records.is_empty() {
                break;
            }
            let next = decode_entries(data.records, offset, &mut out).map_err(|e| {
                StoreError::unavailable(format!("{OFFSETS_TOPIC}-{partition}: {e}"))
            })?;
            if next <= offset {
                break;
            }
            offset = next;
        }
        Ok(out)
    }
}

/// Appends to `out` the entries at or after offset `from` in `batches`: plain and
/// transactional records (keyless ones skipped) and transaction markers. Returns the offset
/// after the last record seen (`from` if none).
fn decode_entries(
    mut batches: bytes::Bytes,
    from: i64,
    out: &mut Vec<(i64, StoredEntry)>,
) -> Result<i64, String> {
    let sets = RecordBatchDecoder::decode_all(&mut batches)
        .map_err(|e| format!("decoding records: {e}"))?;
    let mut next = from;
    for set in sets {
        for r in set.records {
            next = next.max(r.offset + 1);
            if r.offset < from {
                continue;
            }
            let Some(key) = r.key else { continue };
            let entry = if r.control {
                // A control record's key: version (i16), then type: 0 ABORT, 1 COMMIT.
                match key.get(2..4).map(|t| i16::from_be_bytes([t[0], t[1]])) {
                    Some(0) => StoredEntry::Marker {
                        producer_id: r.producer_id,
                        commit: false,
                    },
                    Some(1) => StoredEntry::Marker {
                        producer_id: r.producer_id,
                        commit: true,
                    },
                    // Other control records (none today) say nothing about offsets.
                    _ => continue,
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
        }
    }
    Ok(next)
}

/// Resolves when the high watermark of `p` reaches `end_offset` while this broker still leads
/// it at `epoch`: NOT_COORDINATOR once leadership moved, REQUEST_TIMED_OUT after `timeout`.
async fn committed(
    p: Arc<Partition>,
    epoch: i32,
    end_offset: i64,
    timeout: Duration,
) -> Result<(), StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut changes = p.subscribe();
    loop {
        match p.commit_status(epoch, end_offset) {
            CommitStatus::Committed => return Ok(()),
            CommitStatus::LeadershipLost => {
                return Err(StoreError::new(
                    ResponseError::NotCoordinator,
                    format!(
                        "leadership of {} moved before the ISR held the records",
                        p.tp
                    ),
                ))
            }
            CommitStatus::Pending => {}
        }
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => {
                return Err(StoreError::new(
                    ResponseError::NotCoordinator,
                    format!("{} is no longer hosted here", p.tp),
                ))
            }
            Err(_) => {
                return Err(StoreError::new(
                    ResponseError::RequestTimedOut,
                    format!(
                        "the in-sync replicas of {} did not acknowledge within offsets.commit.timeout.ms",
                        p.tp
                    ),
                ))
            }
        }
    }
}
