//! Finding and repairing corrupt batches in a partition's segments (ferry's own; Kafka checks
//! CRCs only on produce, on recovery after a crash, and in clients with `check.crcs`).
//!
//! Three pieces, each usable without the others:
//! - [`first_corrupt_batch`]: the first batch of a buffer of whole batches whose structure or
//!   CRC-32C is wrong (a leader checks what it is about to send a follower);
//! - [`PartitionLog::scrub_chunk`]: checks the next batches of one segment from a
//!   [`ScrubCursor`], reading no more than a chunk, and reports the first [`CorruptRange`];
//! - [`PartitionLog::repair_range`]: overwrites a corrupt range in place with the same offsets'
//!   bytes from another replica (replicas hold byte-identical batches: a follower appends the
//!   leader's batches as they are).
//!
//! Locks: a scrub reads through the segment's shared file handle and takes only the log's
//! `state` read lock, briefly, to check the segment is still in the log; it never takes
//! `writer`, so appends never wait on it. A segment that retention deleted or the cleaner
//! replaced while a scan was under way is reported [`ScrubStep::Gone`] (its open handle keeps
//! the old bytes readable meanwhile, so nothing fails).
//!
//! Why an in-place repair is safe: it holds `writer` (so no append, roll, retention,
//! truncation or cleaner swap runs meanwhile), checks under `state` that the segment is still
//! the same file and that the range lies below its published size, and writes only bytes of
//! the same length over bytes that were already whole batches; positions, indexes, offsets,
//! producer state and leader epochs are unchanged. Readers pread without locks, so one reading
//! during the pwrite may see a mix of the old and new bytes of that range: both are caught by a
//! CRC check (a follower's fetch is checked by the leader, and the broker keeps the range hidden
//! from consumers until the repair returned, then re-checks reads that overlapped the repair).

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::batch::{
    compute_crc, BatchHeader, BatchSpan, HEADER_SIZE, LAST_OFFSET_DELTA_OFFSET, LENGTH_OFFSET,
    LOG_OVERHEAD,
};
use crate::error::Result;
use crate::log::PartitionLog;
use crate::segment::SegmentFile;

/// A segment of a log as it was when listed: its file handle and extent.
#[derive(Clone, Debug)]
pub struct SegmentRef {
    file: Arc<SegmentFile>,
    base_offset: i64,
    /// One past the last offset the segment held.
    next_offset: i64,
    size: u64,
}

impl SegmentRef {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    /// Bytes of whole batches when listed.
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn path(&self) -> &std::path::Path {
        &self.file.path
    }
    /// A scrub from the start of the segment.
    pub fn cursor(&self) -> ScrubCursor {
        ScrubCursor {
            position: 0,
            next_offset: self.base_offset,
        }
    }
}

/// Where a scrub of a segment stands: the next batch's position and the least offset it may
/// hold (offsets increase; a compacted segment may skip some).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrubCursor {
    pub position: u64,
    pub next_offset: i64,
}

/// Bytes of a segment that are not a valid batch, and the offsets they should hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRange {
    pub segment_base_offset: i64,
    /// File position of the range.
    pub position: u64,
    pub length: u64,
    /// The offsets whose batches belong in the range.
    pub first_offset: i64,
    pub last_offset: i64,
    /// What was wrong, for the log line.
    pub reason: String,
}

impl CorruptRange {
    pub fn end(&self) -> u64 {
        self.position + self.length
    }
}

/// What one [`PartitionLog::scrub_chunk`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum ScrubStep {
    /// `bytes` more checked and sound; the cursor moved past them.
    Checked { bytes: u64 },
    /// `bytes` checked (the corrupt range included); the cursor moved past the range.
    Corrupt { bytes: u64, range: CorruptRange },
    /// The cursor is at the segment's end.
    Done,
    /// The segment is no longer a closed segment of the log (deleted, cleaned, truncated).
    Gone,
}

/// How a [`PartitionLog::repair_range`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The range now holds the replacement, fsynced.
    Repaired,
    /// The range already held the replacement (repaired meanwhile).
    AlreadyIntact,
    /// The segment is no longer in the log, or no longer reaches the range.
    SegmentGone,
    /// The replacement is not the range's batches (different offsets or length, bad CRC).
    Mismatch(String),
}

/// The first batch in `records` (whole batches, as a log read returns them) that is not a
/// sound v2 batch: its byte offset in `records` (where the sound prefix ends), its span, and
/// why. A partial batch at the end is not corruption (a response may end in one).
pub fn first_corrupt_batch(records: &[u8]) -> Option<(usize, BatchSpan, String)> {
    let mut pos = 0usize;
    while records.len() >= pos + LAST_OFFSET_DELTA_OFFSET + 4 {
        let rest = &records[pos..];
        let len = i32_at(rest, LENGTH_OFFSET);
        let base_offset = i64_at(rest, 0);
        let delta = i32_at(rest, LAST_OFFSET_DELTA_OFFSET);
        let span = |end: usize| BatchSpan {
            bytes: pos..end,
            base_offset,
            last_offset: base_offset + i64::from(delta),
        };
        if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
            let why = format!("batch length {len} below the v2 header size");
            return Some((pos, span(records.len()), why));
        }
        let end = pos + LOG_OVERHEAD + len as usize;
        if end > records.len() {
            return None;
        }
        if let Some(why) = batch_fault(&records[pos..end]) {
            return Some((pos, span(end), why));
        }
        pos = end;
    }
    None
}

/// Why the whole batch `b` is not a sound v2 batch, if it is not.
fn batch_fault(b: &[u8]) -> Option<String> {
    let h = BatchHeader::parse(b)?;
    if h.magic != 2 {
        return Some(format!("magic {} is not 2", h.magic));
    }
    if h.last_offset_delta < 0 {
        return Some(format!(
            "negative last offset delta {}",
            h.last_offset_delta
        ));
    }
    let crc = compute_crc(b);
    (crc != h.crc).then(|| {
        format!(
            "CRC-32C mismatch at base offset {}: stored {:#x}, computed {crc:#x}",
            h.base_offset, h.crc
        )
    })
}

fn i32_at(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn i64_at(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

/// Whether `replacement` is exactly the batches `range` should hold: same length, sound
/// batches, from the range's first offset to its last.
fn check_replacement(range: &CorruptRange, replacement: &[u8]) -> std::result::Result<(), String> {
    if replacement.len() as u64 != range.length {
        return Err(format!(
            "the replica's batches for offsets {}..={} take {} bytes, the corrupt range {}",
            range.first_offset,
            range.last_offset,
            replacement.len(),
            range.length
        ));
    }
    if let Some((_, span, why)) = first_corrupt_batch(replacement) {
        return Err(format!(
            "the replica's batch at offset {} is not sound either: {why}",
            span.base_offset
        ));
    }
    let spans: Vec<BatchSpan> = crate::batch::whole_batches(replacement).collect();
    let covered = spans.last().map_or(0, |s| s.bytes.end);
    match (spans.first(), spans.last()) {
        (Some(first), Some(last))
            if covered == replacement.len()
                && first.base_offset == range.first_offset
                && last.last_offset == range.last_offset =>
        {
            Ok(())
        }
        _ => Err(format!(
            "the replica's batches do not hold exactly offsets {}..={}",
            range.first_offset, range.last_offset
        )),
    }
}

impl PartitionLog {
    /// The log's closed segments (all but the active one), oldest first.
    pub fn closed_segments(&self) -> Vec<SegmentRef> {
        let st = self.state.read();
        let closed = st.segments.len().saturating_sub(1);
        st.segments[..closed]
            .iter()
            .map(|s| SegmentRef {
                file: Arc::clone(&s.file),
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size: s.size,
            })
            .collect()
    }

    /// The segment's current published size if it is still in the log as the same file
    /// (`closed_only`: and not the active segment).
    fn current_size(&self, seg: &SegmentRef, closed_only: bool) -> Option<u64> {
        let st = self.state.read();
        let n = st.segments.len();
        st.segments
            .iter()
            .enumerate()
            .find(|(_, s)| Arc::ptr_eq(&s.file, &seg.file))
            .filter(|(i, _)| !closed_only || i + 1 < n)
            .map(|(_, s)| s.size)
    }

    /// Checks the batches of `seg` from `cursor`, reading about `chunk` bytes (more when one
    /// batch is larger), and moves the cursor past what it checked. Takes no writer lock.
    pub fn scrub_chunk(
        &self,
        seg: &SegmentRef,
        cursor: &mut ScrubCursor,
        chunk: usize,
    ) -> Result<ScrubStep> {
        let Some(size) = self.current_size(seg, true) else {
            return Ok(ScrubStep::Gone);
        };
        if cursor.position >= size {
            return Ok(ScrubStep::Done);
        }
        let want = (chunk.max(HEADER_SIZE) as u64).min(size - cursor.position) as usize;
        let mut buf = match seg.file.read_exact_at(cursor.position, want) {
            Ok(b) => b,
            // Shrunk under us (a truncation): no longer the segment that was listed.
            Err(_) if self.current_size(seg, true) != Some(size) => return Ok(ScrubStep::Gone),
            Err(e) => return Err(e),
        };
        let start = cursor.position;
        let corrupt_to_end = |cursor: &ScrubCursor, why: String| CorruptRange {
            segment_base_offset: seg.base_offset,
            position: cursor.position,
            length: size - cursor.position,
            first_offset: cursor.next_offset,
            last_offset: seg.next_offset - 1,
            reason: why,
        };
        let mut off = 0usize;
        loop {
            if cursor.position >= size {
                break;
            }
            if buf.len() < off + HEADER_SIZE {
                if off > 0 {
                    break;
                }
                let why = format!(
                    "{} bytes at the end are not a batch",
                    size - cursor.position
                );
                return Ok(self.corrupt_step(cursor, start, corrupt_to_end(cursor, why), size));
            }
            let h = BatchHeader::parse(&buf[off..]);
            let fault = match h {
                None => Some("unreadable batch header".to_string()),
                Some(h) if h.batch_length < (HEADER_SIZE - LOG_OVERHEAD) as i32 => Some(format!(
                    "batch length {} below the v2 header size",
                    h.batch_length
                )),
                Some(h) if cursor.position + h.total_size() as u64 > size => Some(format!(
                    "batch length {} runs past the segment's end",
                    h.batch_length
                )),
                Some(h) if h.magic != 2 => Some(format!("magic {} is not 2", h.magic)),
                Some(h)
                    if h.base_offset < cursor.next_offset
                        || h.last_offset_delta < 0
                        || h.last_offset() >= seg.next_offset =>
                {
                    Some(format!(
                        "batch offsets {}..={} outside {}..{}",
                        h.base_offset,
                        h.last_offset(),
                        cursor.next_offset,
                        seg.next_offset
                    ))
                }
                Some(_) => None,
            };
            let Some(h) = h.filter(|_| fault.is_none()) else {
                let why = fault.unwrap_or_default();
                return Ok(self.corrupt_step(cursor, start, corrupt_to_end(cursor, why), size));
            };
            let total = h.total_size();
            if buf.len() < off + total {
                if off > 0 {
                    break;
                }
                // One batch larger than the chunk: read it whole.
                buf = seg.file.read_exact_at(cursor.position, total)?;
            }
            let batch = &buf[off..off + total];
            let crc = compute_crc(batch);
            if crc != h.crc {
                let range = CorruptRange {
                    segment_base_offset: seg.base_offset,
                    position: cursor.position,
                    length: total as u64,
                    first_offset: h.base_offset,
                    last_offset: h.last_offset(),
                    reason: format!(
                        "CRC-32C mismatch at base offset {}: stored {:#x}, computed {crc:#x}",
                        h.base_offset, h.crc
                    ),
                };
                return Ok(self.corrupt_step(cursor, start, range, size));
            }
            off += total;
            cursor.position += total as u64;
            cursor.next_offset = h.next_offset();
        }
        Ok(ScrubStep::Checked {
            bytes: cursor.position - start,
        })
    }

    /// Moves `cursor` past `range` and reports it.
    fn corrupt_step(
        &self,
        cursor: &mut ScrubCursor,
        start: u64,
        range: CorruptRange,
        size: u64,
    ) -> ScrubStep {
        cursor.position = range.end().min(size);
        cursor.next_offset = range.last_offset + 1;
        ScrubStep::Corrupt {
            bytes: cursor.position - start,
            range,
        }
    }

    /// The segment and range of the batch holding `offset` when that batch's CRC (or
    /// structure) is wrong; `None` when it is sound or no longer in the log. Reads one batch.
    pub fn corrupt_batch_at(&self, offset: i64) -> Result<Option<(SegmentRef, CorruptRange)>> {
        let (seg, start) = {
            let st = self.state.read();
            if offset < st.log_start_offset || offset >= st.log_end_offset {
                return Ok(None);
            }
            let s = &st.segments[st.segment_index_for(offset)];
            let rel = (offset - s.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
            let seg = SegmentRef {
                file: Arc::clone(&s.file),
                base_offset: s.base_offset,
                next_offset: s.next_offset,
                size: s.size,
            };
            (seg, u64::from(s.offset_index.lookup(rel)))
        };
        let Some((pos, h)) = seg.file.translate_offset(offset, start, seg.size)? else {
            return Ok(None);
        };
        let batch = seg.file.read_exact_at(pos, h.total_size())?;
        let Some(why) = batch_fault(&batch) else {
            return Ok(None);
        };
        let range = CorruptRange {
            segment_base_offset: seg.base_offset,
            position: pos,
            length: batch.len() as u64,
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            reason: why,
        };
        Ok(Some((seg, range)))
    }

    /// Overwrites `range` of `seg` with `replacement` (another replica's batches for the same
    /// offsets) and fsyncs, after checking it is exactly those batches, sound, and that the
    /// segment still holds the range. See the module docs for why readers stay safe.
    pub fn repair_range(
        &self,
        seg: &SegmentRef,
        range: &CorruptRange,
        replacement: &[u8],
    ) -> Result<RepairOutcome> {
        if let Err(why) = check_replacement(range, replacement) {
            return Ok(RepairOutcome::Mismatch(why));
        }
        let _writer = self.writer.lock();
        match self.current_size(seg, false) {
            Some(size) if size >= range.end() => {}
            _ => return Ok(RepairOutcome::SegmentGone),
        }
        let current = seg.file.read_exact_at(range.position, replacement.len())?;
        if current == replacement {
            return Ok(RepairOutcome::AlreadyIntact);
        }
        seg.file
            .file
            .write_all_at(replacement, range.position)
            .map_err(crate::error::LogError::io_at(&seg.file.path))?;
        seg.file.sync_data()?;
        Ok(RepairOutcome::Repaired)
    }
}
