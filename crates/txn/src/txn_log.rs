//! Records of the internal topic `__transaction_state`, in Apache Kafka's binary layout so that
//! Kafka's tools (`kafka-dump-log --transaction-log-decoder`, console consumers with the
//! transaction log formatter) read ferry's too.
//!
//! Key (type 0, `TransactionLogKey` version 0): the transactional id as a classic string.
//! Value (`TransactionLogValue`): a version, then producer id, producer epoch, transaction
//! timeout, status byte, the partitions of the transaction (null when Empty), last update and
//! start timestamps. Version 0 uses classic (int16/int32 length) encodings; version 1 is
//! flexible: compact strings and arrays, and tagged fields for the previous producer id (tag 0),
//! the next producer id (tag 1) and the client's transaction version (tag 2), each written only
//! when it differs from its default. A null value is a tombstone: the id expired. The topic is
//! compacted, so the latest record per key is the id's state.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use ferry_common::TopicPartition;

use crate::state::TransactionState;

/// The internal topic holding transaction state.
pub const TRANSACTION_STATE_TOPIC: &str = "__transaction_state";

/// The record type of transaction log keys (Kafka's `CoordinatorRecordType.TRANSACTION_LOG`).
const KEY_TYPE: i16 = 0;
/// The newest value version; ferry writes it, as Kafka does once `transaction.version` >= 1.
pub const VALUE_VERSION: i16 = 1;

const NO_PRODUCER_ID: i64 = -1;

const TAG_PREVIOUS_PRODUCER_ID: u32 = 0;
const TAG_NEXT_PRODUCER_ID: u32 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u32 = 2;

/// Java's `String.hashCode`.
pub use ferry_group::offsets_topic::java_string_hash;

/// The `__transaction_state` partition that holds `transactional_id`: Kafka's
/// `Utils.abs(hashCode) % partitions`, where `abs(Integer.MIN_VALUE)` is 0.
pub fn partition_for(transactional_id: &str, partitions: i32) -> i32 {
    let hash = java_string_hash(transactional_id);
    let abs = if hash == i32::MIN { 0 } else { hash.abs() };
    abs % partitions.max(1)
}

/// Topics with their partition ids, as a value lists them.
pub type TopicPartitionIds = Vec<(String, Vec<i32>)>;

/// A `__transaction_state` value: the durable part of a transactional id's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnLogValue {
    pub producer_id: i64,
    /// The producer id before the last rotation (version 1, tag 0; -1 when none).
    pub previous_producer_id: i64,
    /// The producer id to take after an epoch overflow (version 1, tag 1; -1 when none).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub state: TransactionState,
    /// Topics and their partitions; `None` is Kafka's null array, written for Empty.
    pub partitions: Option<TopicPartitionIds>,
    pub last_update_ms: i64,
    pub start_ms: i64,
    /// The transaction version the client used (version 1, tag 2; 0 by default).
    pub client_transaction_version: i16,
}

impl TxnLogValue {
    /// The partitions as a flat set (a value in state Empty has none, whatever it holds).
    pub fn topic_partitions(&self) -> Vec<TopicPartition> {
        if self.state == TransactionState::Empty {
            return Vec::new();
        }
        self.partitions
            .iter()
            .flatten()
            .flat_map(|(t, ps)| ps.iter().map(move |p| TopicPartition::new(t.clone(), *p)))
            .collect()
    }

    /// Groups partitions by topic, in topic and partition order.
    pub fn group_partitions<'a>(
        partitions: impl IntoIterator<Item = &'a TopicPartition>,
    ) -> TopicPartitionIds {
        let mut by_topic: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
        for tp in partitions {
            by_topic.entry(&tp.topic).or_default().push(tp.partition);
        }
        by_topic
            .into_iter()
            .map(|(t, mut ps)| {
                ps.sort_unstable();
                ps.dedup();
                (t.to_string(), ps)
            })
            .collect()
    }
}

/// A record that cannot be read, or a value that cannot be written in Kafka's layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("__transaction_state record: {0}")]
pub struct RecordError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, RecordError> {
    Err(RecordError(msg.into()))
}

/// The key of `transactional_id`'s records.
pub fn encode_key(transactional_id: &str) -> Result<Bytes, RecordError> {
    let mut b = BytesMut::with_capacity(4 + transactional_id.len());
    b.put_i16(KEY_TYPE);
    put_classic_str(&mut b, transactional_id)?;
    Ok(b.freeze())
}

/// The transactional id of a key.
pub fn decode_key(data: Bytes) -> Result<String, RecordError> {
    let mut r = Reader(data);
    match r.i16()? {
        KEY_TYPE => r.classic_str(),
        v => err(format!("unknown key type {v}")),
    }
}

/// Encodes `value` as value `version` (0 or 1).
pub fn encode_value(value: &TxnLogValue, version: i16) -> Result<Bytes, RecordError> {
    let flexible = match version {
        0 => false,
        1 => true,
        v => return err(format!("cannot write value version {v}")),
    };
    let mut b = BytesMut::with_capacity(64);
    b.put_i16(version);
    b.put_i64(value.producer_id);
    b.put_i16(value.producer_epoch);
    b.put_i32(value.timeout_ms);
    b.put_i8(value.state.id());
    put_partitions(&mut b, value.partitions.as_deref(), flexible)?;
    b.put_i64(value.last_update_ms);
    b.put_i64(value.start_ms);
    if flexible {
        put_tagged_fields(&mut b, value);
    }
    Ok(b.freeze())
}

fn put_partitions(
    b: &mut BytesMut,
    partitions: Option<&[(String, Vec<i32>)]>,
    flexible: bool,
) -> Result<(), RecordError> {
    let Some(topics) = partitions else {
        if flexible {
            put_uvarint(b, 0);
        } else {
            b.put_i32(-1);
        }
        return Ok(());
    };
    put_array_len(b, topics.len(), flexible)?;
    for (topic, ids) in topics {
        if flexible {
            put_compact_str(b, topic);
        } else {
            put_classic_str(b, topic)?;
        }
        put_array_len(b, ids.len(), flexible)?;
        for id in ids {
            b.put_i32(*id);
        }
        if flexible {
            put_uvarint(b, 0); // the topic entry's tagged fields: none
        }
    }
    Ok(())
}

fn put_tagged_fields(b: &mut BytesMut, value: &TxnLogValue) {
    let mut tags: Vec<(u32, Vec<u8>)> = Vec::new();
    if value.previous_producer_id != NO_PRODUCER_ID {
        tags.push((
            TAG_PREVIOUS_PRODUCER_ID,
            value.previous_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if value.next_producer_id != NO_PRODUCER_ID {
        tags.push((
            TAG_NEXT_PRODUCER_ID,
            value.next_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if value.client_transaction_version != 0 {
        tags.push((
            TAG_CLIENT_TRANSACTION_VERSION,
            value.client_transaction_version.to_be_bytes().to_vec(),
        ));
    }
    put_uvarint(b, tags.len() as u32);
    for (tag, data) in tags {
        put_uvarint(b, tag);
        put_uvarint(b, data.len() as u32);
        b.put_slice(&data);
    }
}

/// Decodes a value (not a tombstone). Unknown tagged fields, such as those newer Kafka versions
/// add, are skipped.
pub fn decode_value(data: Bytes) -> Result<TxnLogValue, RecordError> {
    let mut r = Reader(data);
    let flexible = match r.i16()? {
        0 => false,
        1 => true,
        v => return err(format!("unknown value version {v}")),
    };
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let timeout_ms = r.i32()?;
    let status = r.i8()?;
    let state = TransactionState::from_id(status)
        .ok_or_else(|| RecordError(format!("unknown transaction status {status}")))?;
    let partitions = r.partitions(flexible)?;
    let mut value = TxnLogValue {
        producer_id,
        previous_producer_id: NO_PRODUCER_ID,
        next_producer_id: NO_PRODUCER_ID,
        producer_epoch,
        timeout_ms,
        state,
        partitions,
        last_update_ms: r.i64()?,
        start_ms: r.i64()?,
        client_transaction_version: 0,
    };
    if flexible {
        r.tagged_fields(&mut value)?;
    }
    Ok(value)
}

fn put_classic_str(b: &mut BytesMut, s: &str) -> Result<(), RecordError> {
    let len = i16::try_from(s.len())
        .map_err(|_| RecordError(format!("string of {} bytes is too long", s.len())))?;
    b.put_i16(len);
    b.put_slice(s.as_bytes());
    Ok(())
}

fn put_compact_str(b: &mut BytesMut, s: &str) {
    put_uvarint(b, s.len() as u32 + 1);
    b.put_slice(s.as_bytes());
}

fn put_array_len(b: &mut BytesMut, len: usize, flexible: bool) -> Result<(), RecordError> {
    let n = i32::try_from(len).map_err(|_| RecordError("array too long".into()))?;
    if flexible {
        put_uvarint(b, n as u32 + 1);
    } else {
        b.put_i32(n);
    }
    Ok(())
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize) -> Result<(), RecordError> {
        if self.0.remaining() < n {
            err(format!("needs {n} more bytes, has {}", self.0.remaining()))
        } else {
            Ok(())
        }
    }
    fn i8(&mut self) -> Result<i8, RecordError> {
        self.need(1)?;
        Ok(self.0.get_i8())
    }
    fn i16(&mut self) -> Result<i16, RecordError> {
        self.need(2)?;
        Ok(self.0.get_i16())
    }
    fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.0.get_i32())
    }
    fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.0.get_i64())
    }
    fn uvarint(&mut self) -> Result<u32, RecordError> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            self.need(1)?;
            let byte = self.0.get_u8();
            v |= u32::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        err("varint longer than 5 bytes")
    }
    fn utf8(&mut self, len: usize) -> Result<String, RecordError> {
        self.need(len)?;
        let raw = self.0.split_to(len);
        String::from_utf8(raw.to_vec()).map_err(|_| RecordError("string is not UTF-8".into()))
    }
    fn classic_str(&mut self) -> Result<String, RecordError> {
        let len = self.i16()?;
        if len < 0 {
            return err("null where a string is required");
        }
        self.utf8(len as usize)
    }
    fn compact_str(&mut self) -> Result<String, RecordError> {
        match self.uvarint()? {
            0 => err("null where a string is required"),
            n => self.utf8(n as usize - 1),
        }
    }
    /// An array length; `None` for a null array.
    fn array_len(&mut self, flexible: bool) -> Result<Option<usize>, RecordError> {
        if flexible {
            Ok(self.uvarint()?.checked_sub(1).map(|n| n as usize))
        } else {
            let n = self.i32()?;
            Ok((n >= 0).then_some(n as usize))
        }
    }
    fn partitions(&mut self, flexible: bool) -> Result<Option<TopicPartitionIds>, RecordError> {
        let Some(topics) = self.array_len(flexible)? else {
            return Ok(None);
        };
        // No pre-allocation from a length read off the wire: a corrupt length must not
        // reserve gigabytes before the bytes run out.
        let mut out = Vec::new();
        for _ in 0..topics {
            let topic = if flexible {
                self.compact_str()?
            } else {
                self.classic_str()?
            };
            let count = self
                .array_len(flexible)?
                .ok_or_else(|| RecordError("null partition list".into()))?;
            let mut ids = Vec::new();
            for _ in 0..count {
                ids.push(self.i32()?);
            }
            if flexible {
                self.skip_tagged_fields()?;
            }
            out.push((topic, ids));
        }
        Ok(Some(out))
    }
    fn skip_tagged_fields(&mut self) -> Result<(), RecordError> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.need(size)?;
            self.0.advance(size);
        }
        Ok(())
    }
    fn tagged_fields(&mut self, value: &mut TxnLogValue) -> Result<(), RecordError> {
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            self.need(size)?;
            let mut field = Reader(self.0.split_to(size));
            match tag {
                TAG_PREVIOUS_PRODUCER_ID => value.previous_producer_id = field.i64()?,
                TAG_NEXT_PRODUCER_ID => value.next_producer_id = field.i64()?,
                TAG_CLIENT_TRANSACTION_VERSION => value.client_transaction_version = field.i16()?,
                _ => {}
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ongoing() -> TxnLogValue {
        TxnLogValue {
            producer_id: 1000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 3,
            timeout_ms: 60_000,
            state: TransactionState::Ongoing,
            partitions: Some(vec![("t".into(), vec![0, 1])]),
            last_update_ms: 2,
            start_ms: 1,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn partition_for_uses_kafka_abs_not_a_mask() {
        assert_eq!(partition_for("", 50), 0);
        assert_eq!(partition_for("a", 50), 97 % 50);
        // "polygenelubricants".hashCode() is Integer.MIN_VALUE: Utils.abs gives 0.
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // A negative hash is negated (Math.abs), which differs from masking the sign bit.
        let h = java_string_hash("zzzzzzzzzz");
        assert!(h < 0);
        assert_eq!(partition_for("zzzzzzzzzz", 50), (-h) % 50);
        assert_ne!(partition_for("zzzzzzzzzz", 50), (h & 0x7fff_ffff) % 50);
    }

    #[test]
    fn key_bytes_match_kafka() {
        // int16 type 0, int16 length 3, "tx1".
        assert_eq!(
            encode_key("tx1").unwrap().as_ref(),
            &[0, 0, 0, 3, b't', b'x', b'1']
        );
        assert_eq!(decode_key(encode_key("tx1").unwrap()).unwrap(), "tx1");
    }

    #[test]
    fn value_v0_bytes_match_kafka_schema() {
        let bytes = encode_value(&ongoing(), 0).unwrap();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 0][..],                           // version 0
            &1000i64.to_be_bytes(),                // ProducerId
            &[0, 3],                               // ProducerEpoch
            &60_000i32.to_be_bytes(),              // TransactionTimeoutMs
            &[1],                                  // TransactionStatus: Ongoing
            &[0, 0, 0, 1],                         // TransactionPartitions: 1 topic
            &[0, 1, b't'],                         //   Topic "t"
            &[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1], //   PartitionIds [0, 1]
            &2i64.to_be_bytes(),                   // TransactionLastUpdateTimestampMs
            &1i64.to_be_bytes(),                   // TransactionStartTimestampMs
        ]
        .concat();
        assert_eq!(bytes.as_ref(), expected.as_slice());
        assert_eq!(decode_value(bytes).unwrap(), ongoing());
    }

    #[test]
    fn value_v1_bytes_match_kafka_schema() {
        let mut v = ongoing();
        v.previous_producer_id = 999;
        let bytes = encode_value(&v, 1).unwrap();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 1][..],                 // version 1
            &1000i64.to_be_bytes(),      // ProducerId
            &[0, 3],                     // ProducerEpoch
            &60_000i32.to_be_bytes(),    // TransactionTimeoutMs
            &[1],                        // TransactionStatus: Ongoing
            &[2],                        // compact array: 1 topic
            &[2, b't'],                  //   compact string "t"
            &[3, 0, 0, 0, 0, 0, 0, 0, 1],//   compact array [0, 1]
            &[0],                        //   no tagged fields
            &2i64.to_be_bytes(),         // TransactionLastUpdateTimestampMs
            &1i64.to_be_bytes(),         // TransactionStartTimestampMs
            &[1],                        // one tagged field:
            &[0, 8],                     //   tag 0 (PreviousProducerId), 8 bytes
            &999i64.to_be_bytes(),
        ]
        .concat();
        assert_eq!(bytes.as_ref(), expected.as_slice());
        assert_eq!(decode_value(bytes).unwrap(), v);
    }

    #[test]
    fn empty_state_writes_a_null_partition_array() {
        let mut v = ongoing();
        v.state = TransactionState::Empty;
        v.partitions = None;
        let b0 = encode_value(&v, 0).unwrap();
        assert_eq!(&b0[2 + 8 + 2 + 4 + 1..][..4], &[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(decode_value(b0).unwrap(), v);
        let b1 = encode_value(&v, 1).unwrap();
        assert_eq!(b1[2 + 8 + 2 + 4 + 1], 0);
        assert_eq!(decode_value(b1).unwrap(), v);
    }

    #[test]
    fn round_trips_all_tags_and_skips_unknown_ones() {
        let mut v = ongoing();
        v.previous_producer_id = 7;
        v.next_producer_id = 8;
        v.client_transaction_version = 2;
        v.partitions = Some(vec![("a".into(), vec![3]), ("b".into(), vec![])]);
        let bytes = encode_value(&v, 1).unwrap();
        assert_eq!(decode_value(bytes.clone()).unwrap(), v);
        // Append an unknown tag 9 (as a newer Kafka might) by rewriting the tag count.
        let mut raw = bytes.to_vec();
        let count_at = raw.len() - (1 + 3 * 2 + 8 + 8 + 2);
        assert_eq!(raw[count_at], 3);
        raw[count_at] = 4;
        raw.extend_from_slice(&[9, 2, 0xab, 0xcd]);
        assert_eq!(decode_value(Bytes::from(raw)).unwrap(), v);
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let good = encode_value(&ongoing(), 1).unwrap();
        for cut in 0..good.len() - 1 {
            assert!(decode_value(good.slice(..cut)).is_err(), "cut at {cut}");
        }
        assert!(decode_key(Bytes::from_static(&[0, 1, 0])).is_err());
        assert!(decode_key(Bytes::from_static(&[0, 0, 0xff, 0xff])).is_err());
        assert!(decode_value(Bytes::from_static(&[0, 2])).is_err());
        let mut bad_state = encode_value(&ongoing(), 0).unwrap().to_vec();
        bad_state[2 + 8 + 2 + 4] = 9;
        assert!(decode_value(Bytes::from(bad_state)).is_err());
        // A huge array length fails on missing bytes, without allocating for it.
        let mut huge = encode_value(&ongoing(), 0).unwrap().to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_value(Bytes::from(huge)).is_err());
        // A varint that never ends.
        let mut v1 = good.to_vec();
        v1.truncate(17);
        v1.extend_from_slice(&[0xff; 6]);
        assert!(decode_value(Bytes::from(v1)).is_err());
    }
}
