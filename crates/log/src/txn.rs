//! Transactions in the log: end-transaction markers (control batches) and the aborted-transaction
//! index, in Kafka's formats.
//!
//! A marker is a control batch: magic 2, attributes with the transactional and control bits, the
//! producer id and epoch of the transaction, base sequence -1, and one record whose key is
//! `version: i16 = 0, type: i16` (0 = ABORT, 1 = COMMIT) and whose value is
//! `version: i16 = 0, coordinator_epoch: i32`.
//!
//! Every segment keeps the transactions aborted by the markers it holds, and persists them as
//! `<base_offset:020>.txnindex`: 34-byte entries `version: i16 = 0, producer_id: i64,
//! first_offset: i64, last_offset: i64, last_stable_offset: i64`, big endian (Kafka's
//! `TransactionIndex`). The file is absent when the segment aborted nothing.

use std::path::Path;

use crate::batch::{
    compute_crc, BatchHeader, CONTROL_BIT, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD, TRANSACTIONAL_BIT,
};
use crate::error::{LogError, Result};
use crate::index::{read_optional, write_file_atomically, Durability};
use crate::segment::remove_if_exists;

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TxnResult {
    Abort,
    Commit,
}

impl TxnResult {
    /// Kafka's `ControlRecordType` id.
    pub fn control_type(self) -> i16 {
        match self {
            TxnResult::Abort => 0,
            TxnResult::Commit => 1,
        }
    }

    /// The marker a control record's key (version i16, type i16) stands for; `None` for a
    /// short key or another control type.
    pub fn from_control_key(key: &[u8]) -> Option<TxnResult> {
        match key.get(2..4).map(|t| i16::from_be_bytes([t[0], t[1]]))? {
            0 => Some(TxnResult::Abort),
            1 => Some(TxnResult::Commit),
            _ => None,
        }
    }
}

/// An end-transaction marker for one partition (Kafka's `EndTransactionMarker` plus the
/// producer id and epoch its batch carries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TxnMarker {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub result: TxnResult,
}

/// Bytes of the one record of a marker batch: length varint, attributes, timestamp and offset
/// deltas, key length, 4-byte key, value length, 6-byte value, header count.
const MARKER_RECORD_SIZE: usize = 17;
/// Total bytes of a marker batch.
pub const MARKER_BATCH_SIZE: usize = HEADER_SIZE + MARKER_RECORD_SIZE;

impl TxnMarker {
    /// The marker's control batch, as a leader writes it: `base_offset` and `leader_epoch` are
    /// outside the CRC (the append rewrites them anyway); `timestamp` is its CreateTime.
    pub fn to_batch(&self, base_offset: i64, leader_epoch: i32, timestamp: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(MARKER_BATCH_SIZE);
        out.extend_from_slice(&base_offset.to_be_bytes());
        out.extend_from_slice(&((MARKER_BATCH_SIZE - LOG_OVERHEAD) as i32).to_be_bytes());
        out.extend_from_slice(&leader_epoch.to_be_bytes());
        out.push(2u8);
        out.extend_from_slice(&[0u8; 4]); // CRC, filled below
        out.extend_from_slice(&(TRANSACTIONAL_BIT | CONTROL_BIT).to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(&timestamp.to_be_bytes());
        out.extend_from_slice(&self.producer_id.to_be_bytes());
        out.extend_from_slice(&self.producer_epoch.to_be_bytes());
        out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        out.extend_from_slice(&1i32.to_be_bytes()); // record count
        debug_assert_eq!(out.len(), HEADER_SIZE);
        // The record; varints are zigzag encoded, and every value here fits in one byte.
        out.push(((MARKER_RECORD_SIZE - 1) * 2) as u8); // record length 16
        out.push(0); // attributes
        out.push(0); // timestamp delta
        out.push(0); // offset delta
        out.push(4 * 2); // key length 4
        out.extend_from_slice(&0i16.to_be_bytes()); // key version
        out.extend_from_slice(&self.result.control_type().to_be_bytes());
        out.push(6 * 2); // value length 6
        out.extend_from_slice(&0i16.to_be_bytes()); // value version
        out.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        out.push(0); // no headers
        debug_assert_eq!(out.len(), MARKER_BATCH_SIZE);
        let crc = compute_crc(&out);
        out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// The marker held by the whole control batch `batch` (CRC already checked by the caller).
    /// `None` for an empty control batch (a cleaned one) or a control record that is not a
    /// transaction marker (those belong to KRaft logs, never to a partition's data).
    pub fn from_control_batch(batch: &[u8]) -> Result<Option<TxnMarker>> {
        let h = BatchHeader::parse(batch)
            .ok_or_else(|| LogError::CorruptMessage("short control batch header".into()))?;
        if !h.is_control() {
            return Err(LogError::InvalidRecord(format!(
                "batch at offset {} is not a control batch",
                h.base_offset
            )));
        }
        if h.records_count <= 0 {
            return Ok(None);
        }
        let decoded = crate::records::decode_batch(batch)?;
        let Some(record) = decoded.records.first() else {
            return Ok(None);
        };
        let key = decoded.key(record).unwrap_or_default();
        let value = decoded.value(record).unwrap_or_default();
        let invalid = |what: &str| {
            LogError::InvalidRecord(format!("control batch at offset {}: {what}", h.base_offset))
        };
        if key.len() < 4 {
            return Err(invalid("control record key shorter than 4 bytes"));
        }
        if i16::from_be_bytes([key[0], key[1]]) < 0 {
            return Err(invalid("negative control record key version"));
        }
        let Some(result) = TxnResult::from_control_key(key) else {
            return Ok(None);
        };
        // Later value versions only add fields after these (Kafka parses them as version 0).
        if value.len() < 6 {
            return Err(invalid("end transaction marker value shorter than 6 bytes"));
        }
        if i16::from_be_bytes([value[0], value[1]]) < 0 {
            return Err(invalid("negative end transaction marker version"));
        }
        Ok(Some(TxnMarker {
            producer_id: h.producer_id,
            producer_epoch: h.producer_epoch,
            coordinator_epoch: i32::from_be_bytes([value[2], value[3], value[4], value[5]]),
            result,
        }))
    }
}

/// One aborted transaction of a partition (Kafka's `AbortedTxn`), recorded in the index of the
/// segment holding its ABORT marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbortedTxn {
    pub producer_id: i64,
    /// Offset of the transaction's first batch in this partition.
    pub first_offset: i64,
    /// Offset of the ABORT marker.
    pub last_offset: i64,
    /// The first unstable offset right after this transaction completed: the first offset of
    /// the oldest transaction of another producer still ongoing, else `last_offset + 1`.
    pub last_stable_offset: i64,
}

/// Bytes of one `.txnindex` entry.
pub const TXN_INDEX_ENTRY_SIZE: usize = 34;

/// Writes `entries` as a `.txnindex` file at `path`, or removes the file when there are none.
pub(crate) fn write_txn_index(
    path: &Path,
    entries: &[AbortedTxn],
    durability: Durability,
) -> Result<()> {
    if entries.is_empty() {
        return remove_if_exists(path);
    }
    let mut buf = Vec::with_capacity(entries.len() * TXN_INDEX_ENTRY_SIZE);
    for e in entries {
        buf.extend_from_slice(&0i16.to_be_bytes());
        buf.extend_from_slice(&e.producer_id.to_be_bytes());
        buf.extend_from_slice(&e.first_offset.to_be_bytes());
        buf.extend_from_slice(&e.last_offset.to_be_bytes());
        buf.extend_from_slice(&e.last_stable_offset.to_be_bytes());
    }
    write_file_atomically(path, &buf, durability)
}

/// Reads a `.txnindex` file: empty when the file is missing (the segment aborted nothing),
/// `None` when it is not a whole number of version-0 entries (the caller rebuilds it).
pub(crate) fn read_txn_index(path: &Path) -> Result<Option<Vec<AbortedTxn>>> {
    let Some(buf) = read_optional(path)? else {
        return Ok(Some(Vec::new()));
    };
    Ok(parse_txn_index(&buf))
}

/// The entries of a `.txnindex` file's bytes (a copy in the long-term tier, say), `None` when
/// they are not a whole number of version-0 entries.
pub fn parse_txn_index(buf: &[u8]) -> Option<Vec<AbortedTxn>> {
    if !buf.len().is_multiple_of(TXN_INDEX_ENTRY_SIZE) {
        return None;
    }
    let i64_at = |c: &[u8], at: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&c[at..at + 8]);
        i64::from_be_bytes(a)
    };
    let mut out = Vec::with_capacity(buf.len() / TXN_INDEX_ENTRY_SIZE);
    for c in buf.chunks_exact(TXN_INDEX_ENTRY_SIZE) {
        if i16::from_be_bytes([c[0], c[1]]) != 0 {
            return None;
        }
        out.push(AbortedTxn {
            producer_id: i64_at(c, 2),
            first_offset: i64_at(c, 10),
            last_offset: i64_at(c, 18),
            last_stable_offset: i64_at(c, 26),
        });
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{scan_batch, Scan};

    #[test]
    fn marker_batch_is_a_valid_control_batch_and_parses_back() {
        for result in [TxnResult::Abort, TxnResult::Commit] {
            let m = TxnMarker {
                producer_id: 77,
                producer_epoch: 3,
                coordinator_epoch: 9,
                result,
            };
            let b = m.to_batch(42, 5, 1_234);
            assert_eq!(b.len(), MARKER_BATCH_SIZE);
            let Scan::Valid(h) = scan_batch(&b) else {
                panic!("marker batch fails its CRC or length check");
            };
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.base_offset, h.partition_leader_epoch, h.base_sequence),
                (42, 5, -1)
            );
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.records_count),
                (77, 3, 1)
            );
            assert_eq!(h.max_timestamp, 1_234);
            // Key: version 0 + type; value: version 0 + coordinator epoch.
            let key_at = HEADER_SIZE + 5;
            assert_eq!(
                &b[key_at..key_at + 4],
                &[0, 0, 0, result.control_type() as u8]
            );
            assert_eq!(TxnMarker::from_control_batch(&b).unwrap(), Some(m));
        }
    }

    #[test]
    fn kafka_encoded_marker_parses() {
        // A COMMIT marker as Kafka's client library encodes it (kafka-protocol crate).
        use bytes::{Bytes, BytesMut};
        use kafka_protocol::records::{
            Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
        };
        let record = Record {
            transactional: true,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 5,
            producer_epoch: 2,
            timestamp_type: TimestampType::Creation,
            offset: 0,
            sequence: -1,
            timestamp: 10,
            key: Some(Bytes::from_static(&[0, 0, 0, 1])),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 7])),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut buf,
            &[record],
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        assert_eq!(
            TxnMarker::from_control_batch(&buf).unwrap(),
            Some(TxnMarker {
                producer_id: 5,
                producer_epoch: 2,
                coordinator_epoch: 7,
                result: TxnResult::Commit
            })
        );
    }

    #[test]
    fn txn_index_file_round_trips_in_kafka_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.txnindex");
        let entries = vec![
            AbortedTxn {
                producer_id: 1,
                first_offset: 2,
                last_offset: 3,
                last_stable_offset: 4,
            },
            AbortedTxn {
                producer_id: -5,
                first_offset: 10,
                last_offset: 20,
                last_stable_offset: 21,
            },
        ];
        write_txn_index(&path, &entries, Durability::Synced).unwrap();
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(raw.len(), 68);
        assert_eq!(&raw[..10], &[0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(read_txn_index(&path).unwrap(), Some(entries));
        std::fs::write(&path, &raw[..33]).unwrap();
        assert_eq!(read_txn_index(&path).unwrap(), None);
        write_txn_index(&path, &[], Durability::Synced).unwrap();
        assert!(!path.exists());
        assert_eq!(read_txn_index(&path).unwrap(), Some(vec![]));
    }
}
