//! Builders of valid v2 batches and log fixtures for the unit tests.

use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use ferry_common::{ManualClock, SharedClock, TopicPartition};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

use crate::{LogConfig, PartitionLog};

/// Options of one test batch.
#[derive(Clone, Debug)]
pub struct B {
    pub records: usize,
    pub ts: i64,
    pub producer_id: i64,
    pub epoch: i16,
    pub seq: i32,
    pub value_len: usize,
    pub compression: Compression,
}

impl Default for B {
    fn default() -> Self {
        B {
            records: 1,
            ts: 1_000,
            producer_id: -1,
            epoch: -1,
            seq: -1,
            value_len: 10,
            compression: Compression::None,
        }
    }
}

/// Record `i` has timestamp `ts + i`.
pub fn batch(o: B) -> Vec<u8> {
    let records: Vec<Record> = (0..o.records)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: o.producer_id,
            producer_epoch: o.epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder groups records whose `offset - sequence` agree; -1 + i keeps the base
            // sequence at -1 (no sequence) for non-idempotent batches.
            sequence: if o.seq < 0 {
                i as i32 - 1
            } else {
                o.seq + i as i32
            },
            timestamp: o.ts + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(vec![b'v'; o.value_len])),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: o.compression,
        },
    )
    .unwrap();
    assert_eq!(batch_ranges(&buf).len(), 1, "encoder split the batch");
    buf.to_vec()
}

/// `n` records, timestamps from `ts`.
pub fn simple(n: usize, ts: i64) -> Vec<u8> {
    batch(B {
        records: n,
        ts,
        ..B::default()
    })
}

pub fn idem(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    batch(B {
        records: n,
        producer_id: pid,
        epoch,
        seq,
        ..B::default()
    })
}

pub fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

pub fn tp_named(topic: &str) -> TopicPartition {
    TopicPartition::new(topic, 0)
}

pub fn clock(ms: i64) -> (Arc<ManualClock>, SharedClock) {
    let c = ManualClock::new(ms);
    let shared: SharedClock = c.clone();
    (c, shared)
}

pub fn open(dir: &Path, config: LogConfig, clean: bool, clock: &SharedClock) -> PartitionLog {
    PartitionLog::open(dir.to_path_buf(), tp(), config, clean, Arc::clone(clock)).unwrap()
}

/// Splits a record set into `(base_offset, last_offset)` per batch.
pub fn batch_ranges(records: &[u8]) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < records.len() {
        let h = crate::batch::BatchHeader::parse(&records[p..]).unwrap();
        out.push((h.base_offset, h.last_offset()));
        p += h.total_size();
    }
    out
}
