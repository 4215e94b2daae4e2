//! The magic v2 record batch header, as Kafka lays it out, and the checks run on produced data.
//!
//! The log stores batches byte for byte. Only the fields outside the CRC (base offset, batch
//! length, partition leader epoch) are rewritten on append, plus, for LogAppendTime, the
//! timestamp-type bit and max timestamp, after which the CRC is recomputed.

use crate::error::{LogError, Result};

/// Bytes before `batchLength`'s payload: baseOffset (8) + batchLength (4).
pub const LOG_OVERHEAD: usize = 12;
/// Size of the whole v2 batch header, up to the first record.
pub const HEADER_SIZE: usize = 61;

pub const BASE_OFFSET_OFFSET: usize = 0;
pub const LENGTH_OFFSET: usize = 8;
pub const PARTITION_LEADER_EPOCH_OFFSET: usize = 12;
pub const MAGIC_OFFSET: usize = 16;
pub const CRC_OFFSET: usize = 17;
pub const ATTRIBUTES_OFFSET: usize = 21;
pub const LAST_OFFSET_DELTA_OFFSET: usize = 23;
pub const BASE_TIMESTAMP_OFFSET: usize = 27;
pub const MAX_TIMESTAMP_OFFSET: usize = 35;
pub const PRODUCER_ID_OFFSET: usize = 43;
pub const PRODUCER_EPOCH_OFFSET: usize = 51;
pub const BASE_SEQUENCE_OFFSET: usize = 53;
pub const RECORDS_COUNT_OFFSET: usize = 57;

pub const COMPRESSION_MASK: i16 = 0x07;
pub const TIMESTAMP_TYPE_BIT: i16 = 0x08;
pub const TRANSACTIONAL_BIT: i16 = 0x10;
pub const CONTROL_BIT: i16 = 0x20;
/// KIP-534: the batch's base timestamp is its delete horizon (set by the log cleaner on batches
/// it will remove later: the record timestamps stay base timestamp + delta).
pub const DELETE_HORIZON_BIT: i16 = 0x40;

fn i16_at(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// The parsed fixed-size header of one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// `batchLength`: bytes after the length field.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the header from the first [`HEADER_SIZE`] bytes of `b`. The caller checks length.
    pub fn parse(b: &[u8]) -> Option<BatchHeader> {
        if b.len() < HEADER_SIZE {
            return None;
        }
        Some(BatchHeader {
            base_offset: i64_at(b, BASE_OFFSET_OFFSET),
            batch_length: i32_at(b, LENGTH_OFFSET),
            partition_leader_epoch: i32_at(b, PARTITION_LEADER_EPOCH_OFFSET),
            magic: b[MAGIC_OFFSET] as i8,
            crc: u32_at(b, CRC_OFFSET),
            attributes: i16_at(b, ATTRIBUTES_OFFSET),
            last_offset_delta: i32_at(b, LAST_OFFSET_DELTA_OFFSET),
            base_timestamp: i64_at(b, BASE_TIMESTAMP_OFFSET),
            max_timestamp: i64_at(b, MAX_TIMESTAMP_OFFSET),
            producer_id: i64_at(b, PRODUCER_ID_OFFSET),
            producer_epoch: i16_at(b, PRODUCER_EPOCH_OFFSET),
            base_sequence: i32_at(b, BASE_SEQUENCE_OFFSET),
            records_count: i32_at(b, RECORDS_COUNT_OFFSET),
        })
    }

    /// Total bytes of the batch on disk, length prefix included.
    pub fn total_size(&self) -> usize {
        LOG_OVERHEAD + self.batch_length.max(0) as usize
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }
    pub fn compression(&self) -> i16 {
        self.attributes & COMPRESSION_MASK
    }
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }
    /// The delete horizon the cleaner set on this batch (its base timestamp), if any.
    pub fn delete_horizon_ms(&self) -> Option<i64> {
        (self.attributes & DELETE_HORIZON_BIT != 0).then_some(self.base_timestamp)
    }
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
    /// Last sequence number of the batch, wrapping at i32::MAX as Kafka does.
    pub fn last_sequence(&self) -> i32 {
        seq_add(self.base_sequence, self.last_offset_delta)
    }
}

/// `seq + delta` with Kafka's wraparound at i32::MAX back to 0.
pub fn seq_add(seq: i32, delta: i32) -> i32 {
    let sum = i64::from(seq) + i64::from(delta);
    if sum > i64::from(i32::MAX) {
        (sum - i64::from(i32::MAX) - 1) as i32
    } else {
        sum as i32
    }
}

/// A whole batch in a buffer of batches: where its bytes are and which offsets it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSpan {
    pub bytes: std::ops::Range<usize>,
    pub base_offset: i64,
    pub last_offset: i64,
}

/// The whole batches at the start of `records`, in order, read from their headers alone (no
/// CRC check). Stops at a partial batch (a fetch response may end in one) or a negative length.
pub fn whole_batches(records: &[u8]) -> impl Iterator<Item = BatchSpan> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        // The header fields read here end with the last offset delta (bytes 23..27).
        if records.len() < pos + LAST_OFFSET_DELTA_OFFSET + 4 {
            return None;
        }
        let len = usize::try_from(i32_at(records, pos + LENGTH_OFFSET)).ok()?;
        let end = pos.checked_add(LOG_OVERHEAD + len)?;
        if end > records.len() {
            return None;
        }
        let base_offset = i64_at(records, pos + BASE_OFFSET_OFFSET);
        let delta = i32_at(records, pos + LAST_OFFSET_DELTA_OFFSET);
        let span = BatchSpan {
            bytes: pos..end,
            base_offset,
            last_offset: base_offset + i64::from(delta),
        };
        pos = end;
        Some(span)
    })
}

/// CRC-32C over the bytes the v2 CRC covers (attributes to end of batch).
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..])
}

/// Outcome of a structural check of one batch at the start of a buffer (recovery scan).
pub enum Scan {
    /// A whole, CRC-valid batch.
    Valid(BatchHeader),
    /// The buffer ends before the batch does.
    Torn,
    /// Bytes that are not a valid batch.
    Corrupt(String),
}

/// Checks the batch at the start of `b` (length, magic, CRC), the recovery scan's test.
pub fn scan_batch(b: &[u8]) -> Scan {
    scan_batch_with(b, BatchCrcs::Check)
}

/// Whether a follower append checks each batch's CRC-32C.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchCrcs {
    /// Check them, as for bytes from a Fetch response.
    Check,
    /// The bytes already matched a checksum that covers all of them (a remote-WAL slice's
    /// CRC-32C, written by the leader that validated the batches): they are the leader's bytes,
    /// and a second pass over them would find nothing the first did not.
    AlreadyVerified,
}

/// [`scan_batch`], checking the batch CRC only when `crcs` asks for it.
pub fn scan_batch_with(b: &[u8], crcs: BatchCrcs) -> Scan {
    let h = match scan_header(b, b.len()) {
        Scan::Valid(h) => h,
        other => return other,
    };
    if crcs == BatchCrcs::AlreadyVerified {
        return Scan::Valid(h);
    }
    let total = h.total_size();
    let crc = compute_crc(&b[..total]);
    if crc != h.crc {
        return Scan::Corrupt(format!(
            "CRC mismatch at base offset {}: stored {:#x}, computed {crc:#x}",
            h.base_offset, h.crc
        ));
    }
    Scan::Valid(h)
}

/// The checks of [`scan_batch_with`] that need only the batch's header (length, magic):
/// `header` holds the batch's first bytes (at least its header, or all there are), and
/// `available` bytes of the batch are at hand in all. `Torn` when fewer than the batch's length.
pub fn scan_header(header: &[u8], available: usize) -> Scan {
    if header.len() < LOG_OVERHEAD {
        return Scan::Torn;
    }
    let len = i32_at(header, LENGTH_OFFSET);
    if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
        return Scan::Corrupt(format!("batch length {len} below the v2 header size"));
    }
    let total = LOG_OVERHEAD + len as usize;
    if available < total {
        return Scan::Torn;
    }
    let Some(h) = BatchHeader::parse(header) else {
        return Scan::Torn;
    };
    if h.magic != 2 {
        return Scan::Corrupt(format!("magic {} is not 2", h.magic));
    }
    Scan::Valid(h)
}

/// Validates every batch a producer sent, returning their headers in order.
///
/// Checks, per batch: whole length present, magic 2, size under `max_message_bytes`, CRC-32C,
/// sane record count and offset delta, no control batches (only a transaction coordinator
/// writes those, through [`crate::PartitionLog::append_control_marker`]), and a producer id,
/// epoch and sequence on every transactional batch.
pub fn validate_produced(records: &[u8], max_message_bytes: usize) -> Result<Vec<BatchHeader>> {
    if records.is_empty() {
        return Err(LogError::InvalidRecord("empty record set".into()));
    }
    let mut out = Vec::with_capacity(1 + records.len() / 16384);
    let mut pos = 0usize;
    while pos < records.len() {
        let rest = &records[pos..];
        if rest.len() < HEADER_SIZE {
            if rest.len() > MAGIC_OFFSET && rest[MAGIC_OFFSET] as i8 != 2 {
                return Err(LogError::InvalidRecord(format!(
                    "unsupported magic {} (only v2 batches are accepted)",
                    rest[MAGIC_OFFSET] as i8
                )));
            }
            return Err(LogError::CorruptMessage(format!(
                "{} trailing bytes are shorter than a batch header",
                rest.len()
            )));
        }
        let magic = rest[MAGIC_OFFSET] as i8;
        if magic != 2 {
            return Err(LogError::InvalidRecord(format!(
                "unsupported magic {magic} (only v2 batches are accepted)"
            )));
        }
        let len = i32_at(rest, LENGTH_OFFSET);
        if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
            return Err(LogError::CorruptMessage(format!(
                "batch length {len} below the v2 header size"
            )));
        }
        let total = LOG_OVERHEAD + len as usize;
        if total > max_message_bytes {
            return Err(LogError::MessageTooLarge {
                size: total,
                max: max_message_bytes,
            });
        }
        if total > rest.len() {
            return Err(LogError::CorruptMessage(format!(
                "batch length {len} runs past the end of the {} byte record set",
                rest.len()
            )));
        }
        let batch = &rest[..total];
        let Some(h) = BatchHeader::parse(batch) else {
            return Err(LogError::CorruptMessage("short batch header".into()));
        };
        if compute_crc(batch) != h.crc {
            return Err(LogError::CorruptMessage(format!(
                "CRC-32C mismatch in batch {} of the record set",
                out.len()
            )));
        }
        if h.records_count <= 0 {
            return Err(LogError::InvalidRecord(format!(
                "record count {} is not positive",
                h.records_count
            )));
        }
        if h.last_offset_delta != h.records_count - 1 {
            return Err(LogError::InvalidRecord(format!(
                "last offset delta {} does not match record count {}",
                h.last_offset_delta, h.records_count
            )));
        }
        if h.is_control() {
            return Err(LogError::InvalidRecord(
                "control batches are not accepted from producers".into(),
            ));
        }
        if h.is_transactional() && !h.has_producer_id() {
            return Err(LogError::InvalidRecord(
                "transactional batch without a producer id".into(),
            ));
        }
        if h.has_producer_id() && (h.producer_epoch < 0 || h.base_sequence < 0) {
            return Err(LogError::InvalidRecord(format!(
                "idempotent batch of producer {} lacks epoch or sequence",
                h.producer_id
            )));
        }
        out.push(h);
        pos += total;
    }
    Ok(out)
}

/// Rewrites the header of the batch at the start of `b` for the leader append: base offset,
/// leader epoch and, when `log_append_time` is set, the timestamp type and max timestamp (the CRC
/// is then recomputed; the other fields are outside the CRC).
pub fn stamp_batch(
    b: &mut [u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time: Option<i64>,
) {
    b[BASE_OFFSET_OFFSET..BASE_OFFSET_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
    b[PARTITION_LEADER_EPOCH_OFFSET..PARTITION_LEADER_EPOCH_OFFSET + 4]
        .copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(ts) = log_append_time {
        let attrs = i16_at(b, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
        b[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
        b[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8].copy_from_slice(&ts.to_be_bytes());
        let crc = compute_crc(b);
        b[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

#[cfg(test)]
mod whole_batches_tests {
    use super::*;
    use crate::test_util::simple;

    /// `n` records in one batch at base offset `base` (outside the CRC).
    fn at(n: usize, base: i64) -> Vec<u8> {
        let mut b = simple(n, 1_000);
        b[..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    #[test]
    fn whole_batches_lists_each_batch_and_stops_at_a_partial_one() {
        let mut buf = at(3, 10);
        let first = buf.len();
        buf.extend(at(2, 13));
        let spans: Vec<BatchSpan> = whole_batches(&buf).collect();
        assert_eq!(
            spans,
            vec![
                BatchSpan {
                    bytes: 0..first,
                    base_offset: 10,
                    last_offset: 12
                },
                BatchSpan {
                    bytes: first..buf.len(),
                    base_offset: 13,
                    last_offset: 14
                },
            ]
        );
        // A response cut inside the second batch, or inside a header.
        assert_eq!(whole_batches(&buf[..buf.len() - 1]).count(), 1);
        assert_eq!(whole_batches(&buf[..first + 20]).count(), 1);
        // A negative length ends the walk instead of wrapping.
        let mut bad = buf.clone();
        bad[first + LENGTH_OFFSET..first + LENGTH_OFFSET + 4]
            .copy_from_slice(&(-5i32).to_be_bytes());
        assert_eq!(whole_batches(&bad).count(), 1);
        assert_eq!(whole_batches(&[]).count(), 0);
    }
}
