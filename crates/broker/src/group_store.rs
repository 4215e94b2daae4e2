//! `__consumer_offsets` as the group coordinator's store: records are appended to the topic's
//! partitions through the replica manager like any produce, and read back for replay.

use std::sync::{Arc, OnceLock};

use bytes::{Bytes, BytesMut};
use ferry_common::SharedClock;
use ferry_group::{OffsetsStore, StoreError, StoredRecord};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::replica_manager::Partition;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The partitions of `__consumer_offsets`, known once the topic exists.
pub struct LogOffsetsStore {
    partitions: OnceLock<Vec<Arc<Partition>>>,
    clock: SharedClock,
}

impl LogOffsetsStore {
    pub fn new(clock: SharedClock) -> Self {
        Self {
            partitions: OnceLock::new(),
            clock,
        }
    }

    pub fn is_ready(&self) -> bool {
        self.partitions.get().is_some()
    }

    pub fn set_partitions(&self, partitions: Vec<Arc<Partition>>) {
        let _ = self.partitions.set(partitions);
    }

    fn partition(&self, p: i32) -> Result<&Arc<Partition>, StoreError> {
        self.partitions
            .get()
            .and_then(|ps| ps.get(p as usize))
            .ok_or_else(|| {
                StoreError(format!(
                    "partition {p} of {OFFSETS_TOPIC} is not hosted here"
                ))
            })
    }
}

impl OffsetsStore for LogOffsetsStore {
    fn append(&self, partition: i32, records: &[StoredRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        let now = self.clock.now_ms();
        let records: Vec<Record> = records
            .iter()
            .enumerate()
            .map(|(i, (key, value))| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: -1,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: -1,
                timestamp: now,
                key: Some(key.clone()),
                value: value.clone(),
                headers: Default::default(),
            })
            .collect();
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .map_err(|e| StoreError(format!("encoding records: {e}")))?;
        self.partition(partition)?
            .append(&buf)
            .map(|_| ())
            .map_err(|e| StoreError(e.to_string()))
    }

    fn read_all(&self, partition: i32) -> Result<Vec<StoredRecord>, StoreError> {
        let p = self.partition(partition)?;
        let mut out = Vec::new();
        let mut offset = p.log.log_start_offset();
        let end = p.high_watermark();
        while offset < end {
            let data = p
                .log
                .read(offset, 1 << 20, end, true)
                .map_err(|e| StoreError(e.to_string()))?;
            if data.records.is_empty() {
                break;
            }
            let mut buf: Bytes = data.records;
            let sets = RecordBatchDecoder::decode_all(&mut buf)
                .map_err(|e| StoreError(format!("decoding records: {e}")))?;
            let mut next = offset;
            for set in sets {
                for r in set.records {
                    next = next.max(r.offset + 1);
                    if r.offset < offset {
                        continue;
                    }
                    if let Some(key) = r.key {
                        out.push((key, r.value));
                    }
                }
            }
            if next <= offset {
                break;
            }
            offset = next;
        }
        Ok(out)
    }
}
