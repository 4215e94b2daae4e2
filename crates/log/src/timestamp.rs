//! ListOffsets by timestamp and MAX_TIMESTAMP (KIP-734), at record level.
//!
//! Segments are skipped by their largest timestamp, the time index narrows the start position
//! inside a segment, batch headers (max timestamp) pick the batch, and only that batch's records
//! are decoded, decompressing when needed. LogAppendTime batches give every record the batch's
//! max timestamp.

use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::batch::{BatchHeader, HEADER_SIZE};
use crate::error::{LogError, Result};
use crate::log::PartitionLog;
use crate::segment::SegmentFile;

/// `(offset, timestamp)` of every record of one batch.
pub fn record_timestamps(batch: &[u8]) -> Result<Vec<(i64, i64)>> {
    let h = BatchHeader::parse(batch)
        .ok_or_else(|| LogError::CorruptMessage("short batch header".into()))?;
    if h.is_log_append_time() && h.records_count != h.last_offset_delta + 1 {
        // A cleaned batch (compacted topic): offsets have gaps, list the records left.
        let d = crate::records::decode_batch(batch)?;
        return Ok(d
            .records
            .iter()
            .map(|r| (r.offset, h.max_timestamp))
            .collect());
    }
    if h.is_log_append_time() {
        return Ok((0..=i64::from(h.last_offset_delta))
            .map(|d| (h.base_offset + d, h.max_timestamp))
            .collect());
    }
    if h.compression() == 0 {
        return parse_uncompressed(&h, &batch[HEADER_SIZE..]);
    }
    let mut bytes = Bytes::copy_from_slice(batch);
    let set = RecordBatchDecoder::decode(&mut bytes)
        .map_err(|e| LogError::CorruptMessage(format!("cannot decode batch: {e}")))?;
    Ok(set
        .records
        .iter()
        .map(|r| (r.offset, r.timestamp))
        .collect())
}

fn read_varint(b: &[u8], pos: &mut usize) -> Result<i64> {
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *b
            .get(*pos)
            .ok_or_else(|| LogError::CorruptMessage("record ends inside a varint".into()))?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return Err(LogError::CorruptMessage("varint too long".into()));
        }
    }
    // zig-zag
    Ok(((value >> 1) as i64) ^ -((value & 1) as i64))
}

/// Walks the v2 records: length, attributes, timestampDelta, offsetDelta, then skips the rest.
fn parse_uncompressed(h: &BatchHeader, b: &[u8]) -> Result<Vec<(i64, i64)>> {
    let mut out = Vec::with_capacity(h.records_count.max(0) as usize);
    let mut pos = 0usize;
    for _ in 0..h.records_count.max(0) {
        let len = read_varint(b, &mut pos)?;
        let start = pos;
        if len < 0 || start + len as usize > b.len() {
            return Err(LogError::CorruptMessage(
                "record length past batch end".into(),
            ));
        }
        pos += 1; // attributes
        let ts_delta = read_varint(b, &mut pos)?;
        let off_delta = read_varint(b, &mut pos)?;
        out.push((h.base_offset + off_delta, h.base_timestamp + ts_delta));
        pos = start + len as usize;
    }
    Ok(out)
}

impl PartitionLog {
    /// The earliest record offset whose timestamp is >= `ts`, with that record's timestamp.
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>> {
        let (lso, targets) = {
            let st = self.state.read();
            let targets: Vec<(Arc<SegmentFile>, u64, u64)> = st
                .segments
                .iter()
                .filter(|s| s.max_timestamp >= ts && s.next_offset > st.log_start_offset)
                .map(|s| {
                    let start = s
                        .time_index
                        .lookup_below(ts)
                        .map_or(0, |rel| u64::from(s.offset_index.lookup(rel)));
                    (Arc::clone(&s.file), start, s.size)
                })
                .collect();
            (st.log_start_offset, targets)
        };
        for (file, mut pos, size) in targets {
            while let Some(h) = file.header_at(pos, size)? {
                let batch_pos = pos;
                pos += h.total_size() as u64;
                if h.max_timestamp < ts || h.last_offset() < lso {
                    continue;
                }
                let batch = file.read_exact_at(batch_pos, h.total_size())?;
                let found = record_timestamps(&batch)?
                    .into_iter()
                    .find(|&(o, t)| t >= ts && o >= lso);
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP (KIP-734): the record with the largest timestamp (earliest such
    /// offset) and that timestamp; `None` when the log holds no records.
    pub fn max_timestamp(&self) -> Result<Option<(i64, i64)>> {
        let target = {
            let st = self.state.read();
            let mut best: Option<(i64, i64, Arc<SegmentFile>, u64, u64)> = None;
            for s in &st.segments {
                if s.size == 0 || s.next_offset <= st.log_start_offset {
                    continue;
                }
                if best.as_ref().is_none_or(|b| s.max_timestamp > b.0) {
                    let rel = (s.offset_of_max_timestamp - s.base_offset)
                        .clamp(0, i64::from(u32::MAX)) as u32;
                    best = Some((
                        s.max_timestamp,
                        s.offset_of_max_timestamp,
                        Arc::clone(&s.file),
                        u64::from(s.offset_index.lookup(rel)),
                        s.size,
                    ));
                }
            }
            best.map(|b| (b, st.log_start_offset))
        };
        let Some(((max_ts, offset, file, start, size), lso)) = target else {
            return Ok(None);
        };
        let Some((pos, h)) = file.translate_offset(offset, start, size)? else {
            return Ok(None);
        };
        let batch = file.read_exact_at(pos, h.total_size())?;
        let records = record_timestamps(&batch)?;
        let found = records
            .iter()
            .find(|&&(o, t)| t == max_ts && o >= lso)
            .or_else(|| records.iter().find(|&&(o, _)| o >= lso))
            .map(|&(o, _)| (o, max_ts));
        Ok(found.or(Some((h.base_offset.max(lso), max_ts))))
    }
}
