//! Builders of valid v2 batches and log fixtures for the unit tests.

use std::path::Path;
use std::sync::Arc;

use ferry_common::{ManualClock, SharedClock, TopicPartition};
use ferry_test_support::{Batches, Keys};
use kafka_protocol::records::Compression;

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

/// Record `i` has timestamp `ts + i`, key `k{i}` and `value_len` bytes of value; one batch.
pub fn batch(o: B) -> Vec<u8> {
    let mut records = Batches::of(o.records, |_| vec![b'v'; o.value_len])
        .keys(Keys::Indexed)
        .timestamp(o.ts)
        .compression(o.compression);
    if o.producer_id >= 0 {
        records = records.producer(o.producer_id, o.epoch, o.seq);
    }
    let buf = records.encode();
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

/// `b` (one batch) with `bits` added to its attributes and the CRC recomputed.
pub fn with_attributes(mut b: Vec<u8>, bits: i16) -> Vec<u8> {
    use crate::batch::{compute_crc, ATTRIBUTES_OFFSET, CRC_OFFSET};
    let attrs = i16::from_be_bytes([b[ATTRIBUTES_OFFSET], b[ATTRIBUTES_OFFSET + 1]]) | bits;
    b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    let crc = compute_crc(&b);
    b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

/// A transactional batch of `n` records.
pub fn txn(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    with_attributes(idem(pid, epoch, seq, n), crate::batch::TRANSACTIONAL_BIT)
}

/// A marker of producer `pid`, coordinator epoch 0.
pub fn marker(pid: i64, epoch: i16, result: crate::TxnResult) -> crate::TxnMarker {
    crate::TxnMarker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch: 0,
        result,
    }
}

/// Every closed segment serves its indexes from its files, and for every offset of every segment
/// the indexed lookup finds the batch a scan from the segment's start finds (issue 16).
pub fn assert_closed_indexes_on_disk_and_consistent(log: &PartitionLog) {
    let st = log.state.read();
    let n = st.segments.len();
    for (i, s) in st.segments.iter().enumerate() {
        if i + 1 < n {
            assert!(s.offset_index.is_on_disk(), "segment {}", s.base_offset);
            assert!(s.time_index.is_on_disk(), "segment {}", s.base_offset);
            assert_eq!(s.in_memory_index_entries(), 0, "segment {}", s.base_offset);
        }
        for o in s.base_offset..s.next_offset {
            let indexed = s.translate_offset(o).unwrap().map(|(p, _)| p);
            let scanned = s
                .file
                .translate_offset(o, 0, s.size)
                .unwrap()
                .map(|(p, _)| p);
            assert_eq!(indexed, scanned, "segment {} offset {o}", s.base_offset);
        }
    }
}
