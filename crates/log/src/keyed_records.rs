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
            // The encoder starts a new batch wherever offset minus sequence changes; without a
            // producer the batch's base sequence is -1, and these keep all records in one batch.
            sequence: crate::batch::seq_add(producer.map_or(-1, |p| p.2), i as i32),
            timestamp,
            key: Some(key),
            value,
            headers: Default::default(),
        })
        .collect();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    let mut buf = BytesMut::new();
    let mut rest = records.as_slice();
    while !rest.is_empty() {
        // A new batch every MAX_BATCH_PAYLOAD bytes, so that a call with many pairs (an offset
        // commit of thousands of partitions) stays within the topic's max.message.bytes.
        let mut payload = 0;
        let n = rest
            .iter()
            .take_while(|r| {
                payload += r.key.as_ref().map_or(0, Bytes::len)
                    + r.value.as_ref().map_or(0, Bytes::len)
                    + RECORD_OVERHEAD;
                payload <= MAX_BATCH_PAYLOAD
            })
            .count()
            .max(1);
        let (batch, later) = rest.split_at(n);
        RecordBatchEncoder::encode(&mut buf, batch, &options)
            .map_err(|e| format!("encoding records: {e}"))?;
        rest = later;
    }
    Ok(buf.freeze())
}

/// Key and value bytes one batch of [`encode`] holds at most (before compression).
const MAX_BATCH_PAYLOAD: usize = 256 << 10;
/// A record's bytes besides its key and value, as counted against [`MAX_BATCH_PAYLOAD`].
const RECORD_OVERHEAD: usize = 24;

/// The keyed records at or after offset `from` in `batches` (keyless ones are skipped), and
/// the offset after the last batch (`from` if none; see [`for_each_record`]).
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
/// batch's producer and control fields); returns the offset after the last batch (`from` if
/// none).
///
/// The end of a batch, not of its last record: compaction keeps some batches with fewer
/// records, or none (a producer's or a segment's last batch keeps its header, as in Kafka), and
/// a reader that stopped at its last record would read the same batch again for ever.
pub fn for_each_record(
    mut batches: Bytes,
    from: i64,
    mut each: impl FnMut(Record),
) -> Result<i64, String> {
    let mut next = crate::batch::whole_batches(&batches)
        .map(|b| b.last_offset + 1)
        .fold(from, i64::max);
    let sets = RecordBatchDecoder::decode_all(&mut batches)
        .map_err(|e| format!("decoding records: {e}"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: &str) -> KeyValue {
        (Bytes::from(k.to_owned()), Some(Bytes::from(v.to_owned())))
    }

    /// One stored batch of `pairs` at `base_offset` (as the leader would assign).
    fn stored(base_offset: i64, pairs: &[KeyValue]) -> Vec<u8> {
        let mut b = encode(pairs.iter().cloned(), 1_000, Compression::None)
            .expect("encodes")
            .to_vec();
        b[..8].copy_from_slice(&base_offset.to_be_bytes());
        b
    }

    #[test]
    fn a_read_moves_past_a_batch_that_compaction_emptied() {
        // Offsets 0-2 in a batch the cleaner emptied but kept (a segment's last batch keeps
        // its header), then 3-4 with records.
        let full = stored(0, &[kv("a", "1"), kv("b", "2"), kv("c", "3")]);
        let header = crate::batch::BatchHeader::parse(&full).expect("a header");
        assert_eq!((header.records_count, header.total_size()), (3, full.len()));
        let decoded = crate::records::decode_batch(&full).expect("decodes");
        let emptied = crate::records::rebuild_batch(&decoded, &[], true).expect("rebuilds");
        let mut both = emptied.clone();
        both.extend(stored(3, &[kv("d", "4"), kv("e", "5")]));

        // The empty batch alone: the next read starts after it, not on it again.
        let (records, next) = decode(Bytes::from(emptied), 0).expect("decodes");
        assert!(records.is_empty());
        assert_eq!(next, 3);

        let (records, next) = decode(Bytes::from(both), 0).expect("decodes");
        let keys: Vec<&[u8]> = records.iter().map(|(k, _)| k.as_ref()).collect();
        assert_eq!(keys, vec![b"d".as_ref(), b"e".as_ref()]);
        assert_eq!(next, 5);
    }

    #[test]
    fn the_pairs_of_one_call_make_one_batch_and_a_transactional_one_keeps_its_sequences() {
        let plain = encode([kv("a", "1"), kv("b", "2")], 5, Compression::None).expect("encodes");
        let h = crate::batch::BatchHeader::parse(&plain).expect("a header");
        assert_eq!(
            (h.records_count, h.base_sequence, h.producer_id),
            (2, -1, -1)
        );
        assert_eq!(h.total_size(), plain.len());
        let txn =
            encode_transactional([kv("a", "1"), kv("b", "2")], 5, (7, 0, 40)).expect("encodes");
        let h = crate::batch::BatchHeader::parse(&txn).expect("a header");
        assert_eq!(
            (h.records_count, h.base_sequence, h.producer_id),
            (2, 40, 7)
        );
        assert!(h.is_transactional());
    }

    #[test]
    fn many_pairs_make_several_batches_of_bounded_size_with_consecutive_offsets() {
        let value = "v".repeat(1_000);
        let pairs: Vec<KeyValue> = (0..1_000).map(|i| kv(&format!("k{i}"), &value)).collect();
        let encoded = encode(pairs, 5, Compression::None).expect("encodes");
        let spans: Vec<_> = crate::batch::whole_batches(&encoded).collect();
        let mut next = 0;
        for b in &spans {
            assert_eq!(b.base_offset, next, "offsets continue across batches");
            assert!(
                b.bytes.len() <= MAX_BATCH_PAYLOAD + (64 << 10),
                "{}",
                b.bytes.len()
            );
            next = b.last_offset + 1;
        }
        let batches = spans.len();
        assert_eq!(spans.last().map(|b| b.bytes.end), Some(encoded.len()));
        assert_eq!(next, 1_000);
        assert!((4..=5).contains(&batches), "{batches} batches");
        let (records, end) = decode(encoded, 0).expect("decodes");
        assert_eq!((records.len(), end), (1_000, 1_000));
    }

    #[test]
    fn records_before_the_start_are_skipped_and_nothing_read_leaves_the_start() {
        let batch = stored(10, &[kv("a", "1"), kv("b", "2")]);
        let (records, next) = decode(Bytes::from(batch), 11).expect("decodes");
        assert_eq!(records.len(), 1);
        assert_eq!(next, 12);
        let (records, next) = decode(Bytes::new(), 7).expect("decodes");
        assert!(records.is_empty());
        assert_eq!(next, 7);
    }
}
