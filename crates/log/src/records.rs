//! Record-level access to stored v2 batches, for the log cleaner and the compacted-topic key
//! check: decompression, a parse of each record that keeps its key, value and headers as raw
//! bytes, and the re-encoding of a subset of a batch's records into a new batch.
//!
//! Records are never decoded into owned structures: a kept record is written back byte for byte
//! except for its length, timestamp delta and offset delta, so keys, values and headers (including
//! duplicate or non-UTF-8 header keys) survive cleaning unchanged.

use std::ops::Range;

use bytes::{Buf, BufMut, Bytes};
use kafka_protocol::compression::{self as codec, Compressor, Decompressor};

use crate::batch::{
    compute_crc, BatchHeader, COMPRESSION_MASK, CRC_OFFSET, DELETE_HORIZON_BIT, HEADER_SIZE,
    LOG_OVERHEAD,
};
use crate::error::{LogError, RejectedRecord, Result};

/// One record of a [`DecodedBatch`], as ranges into its decompressed payload.
#[derive(Clone, Debug)]
pub(crate) struct RecordView {
    pub offset: i64,
    /// `baseTimestamp + timestampDelta` (not the LogAppendTime; see [`DecodedBatch::timestamp_of`]).
    pub timestamp: i64,
    pub attributes: u8,
    /// The key bytes, `None` for a null key.
    pub key: Option<Range<usize>>,
    /// The value is null (a tombstone).
    pub null_value: bool,
    /// The value bytes, `None` for a null value.
    pub value: Option<Range<usize>>,
    /// From the key length varint to the end of the record: key, value, headers.
    pub tail: Range<usize>,
}

/// A batch with its records parsed.
#[derive(Debug)]
pub(crate) struct DecodedBatch {
    pub header: BatchHeader,
    pub payload: Vec<u8>,
    pub records: Vec<RecordView>,
}

impl DecodedBatch {
    pub fn key(&self, r: &RecordView) -> Option<&[u8]> {
        r.key.as_ref().map(|k| &self.payload[k.clone()])
    }

    pub fn value(&self, r: &RecordView) -> Option<&[u8]> {
        r.value.as_ref().map(|v| &self.payload[v.clone()])
    }

    /// The timestamp a reader sees: the batch max timestamp for LogAppendTime batches.
    pub fn timestamp_of(&self, r: &RecordView) -> i64 {
        if self.header.is_log_append_time() {
            self.header.max_timestamp
        } else {
            r.timestamp
        }
    }
}

fn corrupt(what: impl std::fmt::Display) -> LogError {
    LogError::CorruptMessage(what.to_string())
}

fn decompress_with<D: Decompressor<Bytes>>(mut data: Bytes) -> Result<Vec<u8>> {
    D::decompress(&mut data, |b| Ok(b.copy_to_bytes(b.remaining()).to_vec()))
        .map_err(|e| corrupt(format!("cannot decompress batch: {e}")))
}

fn compress_with<C: Compressor<Vec<u8>>>(raw: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len() / 2 + 64);
    C::compress(&mut out, |b| {
        b.put_slice(raw);
        Ok(())
    })
    .map_err(|e| LogError::KafkaStorage(format!("cannot compress cleaned batch: {e}")))?;
    Ok(out)
}

/// Decompresses the records section of a batch with the codec of `attributes`.
pub(crate) fn decompress(attributes: i16, data: &[u8]) -> Result<Vec<u8>> {
    if attributes & COMPRESSION_MASK == 0 {
        return Ok(data.to_vec());
    }
    let data = Bytes::copy_from_slice(data);
    match attributes & COMPRESSION_MASK {
        1 => decompress_with::<codec::Gzip>(data),
        2 => decompress_with::<codec::Snappy>(data),
        3 => decompress_with::<codec::Lz4>(data),
        4 => decompress_with::<codec::Zstd>(data),
        c => Err(corrupt(format!("unknown compression codec {c}"))),
    }
}

/// Compresses a records section with the codec of `attributes`.
pub(crate) fn compress(attributes: i16, raw: &[u8]) -> Result<Vec<u8>> {
    match attributes & COMPRESSION_MASK {
        0 => Ok(raw.to_vec()),
        1 => compress_with::<codec::Gzip>(raw),
        2 => compress_with::<codec::Snappy>(raw),
        3 => compress_with::<codec::Lz4>(raw),
        4 => compress_with::<codec::Zstd>(raw),
        c => Err(corrupt(format!("unknown compression codec {c}"))),
    }
}

fn read_uvarint(b: &[u8], pos: &mut usize) -> Result<u64> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *b
            .get(*pos)
            .ok_or_else(|| corrupt("record ends inside a varint"))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(corrupt("varint too long"));
        }
    }
}

fn read_varlong(b: &[u8], pos: &mut usize) -> Result<i64> {
    let v = read_uvarint(b, pos)?;
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

fn write_varlong(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Reads a length-prefixed (varint, -1 = null) field, returning its byte range.
fn read_bytes_field(b: &[u8], pos: &mut usize, end: usize) -> Result<Option<Range<usize>>> {
    let len = read_varlong(b, pos)?;
    if len == -1 {
        return Ok(None);
    }
    if len < 0 || *pos + len as usize > end {
        return Err(corrupt(format!("field length {len} runs past its record")));
    }
    let r = *pos..*pos + len as usize;
    *pos = r.end;
    Ok(Some(r))
}

/// Parses every record of the whole batch `batch` (decompressing when needed).
pub(crate) fn decode_batch(batch: &[u8]) -> Result<DecodedBatch> {
    let header = BatchHeader::parse(batch).ok_or_else(|| corrupt("short batch header"))?;
    let total = header.total_size();
    if total > batch.len() || total < HEADER_SIZE {
        return Err(corrupt("batch length past the end of its buffer"));
    }
    let payload = decompress(header.attributes, &batch[HEADER_SIZE..total])?;
    let count = header.records_count.max(0) as usize;
    let mut records = Vec::with_capacity(count);
    let mut pos = 0usize;
    for _ in 0..count {
        let len = read_varlong(&payload, &mut pos)?;
        let end = pos
            .checked_add(usize::try_from(len).map_err(|_| corrupt("negative record length"))?)
            .filter(|e| *e <= payload.len())
            .ok_or_else(|| corrupt("record length past the end of the batch"))?;
        let attributes = *payload
            .get(pos)
            .ok_or_else(|| corrupt("record without attributes"))?;
        pos += 1;
        let ts_delta = read_varlong(&payload, &mut pos)?;
        let off_delta = read_varlong(&payload, &mut pos)?;
        let tail_start = pos;
        let key = read_bytes_field(&payload, &mut pos, end)?;
        let value = read_bytes_field(&payload, &mut pos, end)?;
        if pos > end {
            return Err(corrupt("record fields run past the record length"));
        }
        records.push(RecordView {
            offset: header.base_offset + off_delta,
            timestamp: header.base_timestamp.wrapping_add(ts_delta),
            attributes,
            key,
            null_value: value.is_none(),
            value,
            tail: tail_start..end,
        });
        pos = end;
    }
    Ok(DecodedBatch {
        header,
        payload,
        records,
    })
}

/// The records of `batch` that have a null key, which a compacted topic refuses (Kafka's
/// `LogValidator.validateKey`), by their index in the batch.
pub(crate) fn keyless_records(batch: &[u8]) -> Result<Vec<RejectedRecord>> {
    let decoded = decode_batch(batch)?;
    Ok(decoded
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.key.is_none())
        .map(|(index, _)| RejectedRecord {
            batch_index: i32::try_from(index).unwrap_or(i32::MAX),
            message: "compacted topic cannot accept a record without key".to_string(),
        })
        .collect())
}

/// The records of `batch` whose CreateTime timestamp is more than `before_max_ms` before `now`
/// or more than `after_max_ms` after it (KIP-937), by their index in the batch, as Kafka's
/// `LogValidator.validateTimestamp` refuses them. A record without a timestamp (-1) passes.
pub(crate) fn records_out_of_time(
    batch: &[u8],
    now: i64,
    before_max_ms: i64,
    after_max_ms: i64,
) -> Result<Vec<RejectedRecord>> {
    let decoded = decode_batch(batch)?;
    let earliest = now.saturating_sub(before_max_ms);
    let latest = now.saturating_add(after_max_ms);
    Ok(decoded
        .records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.timestamp >= 0 && !(earliest..=latest).contains(&r.timestamp))
        .map(|(index, r)| RejectedRecord {
            batch_index: i32::try_from(index).unwrap_or(i32::MAX),
            message: format!(
                "Timestamp {} of message with offset {} is out of range. The timestamp should be within [{earliest}, {latest}]",
                r.timestamp, r.offset
            ),
        })
        .collect())
}

/// Writes a v2 batch holding `kept` (records of `src`, in order) and returns its bytes.
///
/// Header fields come from the original batch (leader epoch, attributes and so the codec and
/// timestamp type, producer id, epoch and base sequence). With `span: None` the base offset is
/// the first kept record's offset and the last offset delta reaches the last kept record; the
/// base timestamp is the smallest kept timestamp and, for CreateTime, the max timestamp the
/// largest. With `span: Some(..)` the base offset, last offset delta, base timestamp and max
/// timestamp of the original are kept, so the header reads exactly as before (used for the last
/// batch of each producer, whose header carries the producer state); `kept` may then be empty
/// and an empty batch (no records, no compression) is written, as Kafka's cleaner does.
pub(crate) fn rebuild_batch(
    src: &DecodedBatch,
    kept: &[&RecordView],
    keep_span: bool,
) -> Result<Vec<u8>> {
    encode_batch(src, kept, keep_span, None)
}

/// The whole batch `src` with its span, records and max timestamp unchanged, and the delete
/// horizon `horizon_ms` set (Kafka's KIP-534 layout: attribute bit and base timestamp; record
/// timestamp deltas are rewritten relative to it, so every record keeps its timestamp).
pub(crate) fn with_delete_horizon(src: &DecodedBatch, horizon_ms: i64) -> Result<Vec<u8>> {
    let all: Vec<&RecordView> = src.records.iter().collect();
    encode_batch(src, &all, true, Some(horizon_ms))
}

fn encode_batch(
    src: &DecodedBatch,
    kept: &[&RecordView],
    keep_span: bool,
    delete_horizon: Option<i64>,
) -> Result<Vec<u8>> {
    let h = &src.header;
    let (base_offset, last_offset_delta, base_ts, max_ts) = if keep_span {
        (
            h.base_offset,
            h.last_offset_delta,
            delete_horizon.unwrap_or(h.base_timestamp),
            h.max_timestamp,
        )
    } else {
        let (Some(first), Some(last)) = (kept.first(), kept.last()) else {
            return Err(LogError::KafkaStorage(
                "cleaner asked to rebuild a batch without records".into(),
            ));
        };
        let delta = i32::try_from(last.offset - first.offset)
            .map_err(|_| corrupt("record offsets of one batch too far apart"))?;
        let min_ts = kept
            .iter()
            .map(|r| r.timestamp)
            .min()
            .unwrap_or(h.base_timestamp);
        let max_ts = if h.is_log_append_time() {
            h.max_timestamp
        } else {
            kept.iter()
                .map(|r| r.timestamp)
                .max()
                .unwrap_or(h.max_timestamp)
        };
        (first.offset, delta, min_ts, max_ts)
    };
    let mut raw = Vec::with_capacity(src.payload.len());
    let mut body = Vec::with_capacity(64);
    for r in kept {
        body.clear();
        body.push(r.attributes);
        write_varlong(&mut body, r.timestamp.wrapping_sub(base_ts));
        write_varlong(&mut body, r.offset - base_offset);
        body.extend_from_slice(&src.payload[r.tail.clone()]);
        write_varlong(&mut raw, body.len() as i64);
        raw.extend_from_slice(&body);
    }
    let mut attributes = if kept.is_empty() {
        h.attributes & !COMPRESSION_MASK
    } else {
        h.attributes
    };
    if delete_horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    } else if !keep_span {
        // The base timestamp is now the smallest record timestamp, not a horizon.
        attributes &= !DELETE_HORIZON_BIT;
    }
    let records = if kept.is_empty() {
        Vec::new()
    } else {
        compress(attributes, &raw)?
    };
    let total = HEADER_SIZE + records.len();
    let batch_length = i32::try_from(total - LOG_OVERHEAD)
        .map_err(|_| LogError::KafkaStorage("cleaned batch too large".into()))?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&h.partition_leader_epoch.to_be_bytes());
    out.push(2u8);
    out.extend_from_slice(&[0u8; 4]); // CRC, filled below
    out.extend_from_slice(&attributes.to_be_bytes());
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&base_ts.to_be_bytes());
    out.extend_from_slice(&max_ts.to_be_bytes());
    out.extend_from_slice(&h.producer_id.to_be_bytes());
    out.extend_from_slice(&h.producer_epoch.to_be_bytes());
    out.extend_from_slice(&h.base_sequence.to_be_bytes());
    out.extend_from_slice(&(kept.len() as i32).to_be_bytes());
    debug_assert_eq!(out.len(), HEADER_SIZE);
    out.extend_from_slice(&records);
    let crc = compute_crc(&out);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}
