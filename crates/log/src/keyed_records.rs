//! Keyed records of the broker's own internal topics (`__consumer_offsets`,
//! `__remote_wal_log_metadata`): one v2 batch built from (key, value) pairs, and the pairs
//! read back from stored batches. One place, so both topics frame records alike.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// A record's key and value (`None`: a tombstone).
pub type KeyValue = (Bytes, Option<Bytes>);

/// One v2 batch of `records` (`None` value: a tombstone) with relative offsets (the leader
/// assigns the real ones), no producer id, and CreateTime `timestamp`.
pub fn encode(
    records: impl IntoIterator<Item = KeyValue>,
    timestamp: i64,
    compression: Compression,
) -> Result<Bytes, String> {
    encode_batch(records, timestamp, compression, None)
}

/// One transactional v2 batch of `records` in the transaction of `producer` (id, epoch, base
/// sequence), as a coordinator writes a TxnOffsetCommit.
pub fn encode_transactional(
    records: impl IntoIterator<Item = KeyValue>,
    timestamp: i64,
    producer: (i64, i16, i32),
) -> Result<Bytes, String> {
    encode_batch(records, timestamp, Compression::None, Some(producer))
}

/// One v2 batch; with `producer` (id, epoch, base sequence) a transactional one.
fn encode_batch(
    records: impl IntoIterator<Item = KeyValue>,
    timestamp: i64,
    compression: Compression,
    producer: Option<(i64, i16, i32)>,
) -> Result<Bytes, String> {
    let records: Vec<Record> = records
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.map_or(-1, |p| p.0),
            producer_epoch: producer.map_or(-1, |p| p.1),
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: producer.map_or(-1, |p| crate::batch::seq_add(p.2, i as i32)),
            timestamp,
            key: Some(key),
            value,
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| format!("encoding records: {e}"))?;
    Ok(buf.freeze())
}

/// The keyed records at or after offset `from` in `batches` (keyless ones are skipped), and
/// the offset after the last record seen (`from` if none).
pub fn decode(batches: Bytes, from: i64) -> Result<(Vec<KeyValue>, i64), String> {
    let mut out = Vec::new();
    let next = for_each_record(batches, from, |r| {
        if let Some(key) = r.key {
            out.push((key, r.value));
        }
    })?;
    Ok((out, next))
}

/// Calls `each` with every record at or after offset `from` in `batches`, in order (with its
/// batch's producer and control fields); returns the offset after the last record seen
/// (`from` if none).
pub fn for_each_record(
    mut batches: Bytes,
    from: i64,
    mut each: impl FnMut(Record),
) -> Result<i64, String> {
    let sets = RecordBatchDecoder::decode_all(&mut batches)
        .map_err(|e| format!("decoding records: {e}"))?;
    let mut next = from;
    for set in sets {
        for r in set.records {
            next = next.max(r.offset + 1);
            if r.offset >= from {
                each(r);
            }
        }
    }
    Ok(next)
}
