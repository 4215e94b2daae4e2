//! Whole batches from an offset of a segment in the tier, as a Fetch below the local log start
//! reads them (Kafka's `RemoteLogReader`).
//!
//! The segment's offset index gives the position of the last indexed batch at or before the
//! offset (an entry every `index.interval.bytes`, 4 KiB by default), so one ranged GET of the
//! wanted bytes plus a little slack usually holds the batch and what follows; batches that end
//! before the offset are skipped, and a first batch larger than what was read is read again
//! whole (a fetch always gets at least one batch, as Kafka's does). Offset indexes are kept in a
//! cache bounded in bytes: one GET per segment while it stays in use.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferry_log::batch::{BatchHeader, HEADER_SIZE, LOG_OVERHEAD};
use ferry_log::txn::parse_txn_index;
use ferry_log::AbortedTxn;
use uuid::Uuid;

use crate::error::{Result, TierError};
use crate::metadata::RemoteSegmentMetadata;
use crate::segment_store::{RemoteSegmentStore, SegmentFileKind};

/// A segment's offset index entries: (offset relative to the segment start, file position).
type OffsetIndex = Arc<[(u32, u32)]>;

/// Read past the wanted bytes, for the batches between the index entry and the offset.
const READ_SLACK: u64 = 16 * 1024;

/// A read from the tier fetches at least this much: the rest waits in the read-ahead cache for
/// the consumer's next fetch, so a sequential reader makes one GET per few megabytes, not one
/// per fetch (an object store answers a larger range in about the same time).
pub const READ_AHEAD: u64 = 4 << 20;

/// Bytes of read-ahead windows kept, over all segments.
const READ_AHEAD_CACHE_BYTES: usize = 64 << 20;

/// Bytes read at a time while scanning for a timestamp.
const SCAN_CHUNK: u64 = 64 * 1024;

/// Default bound of the offset index cache.
pub const DEFAULT_INDEX_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Reads batches from the tier.
#[derive(Debug)]
pub struct TierReader {
    store: RemoteSegmentStore,
    indexes: Mutex<IndexCache>,
    read_ahead: Mutex<ReadAhead>,
}

impl TierReader {
    pub fn new(store: RemoteSegmentStore, index_cache_bytes: usize) -> Self {
        Self {
            store,
            indexes: Mutex::new(IndexCache {
                capacity: index_cache_bytes,
                used: 0,
                entries: Vec::new(),
            }),
            read_ahead: Mutex::new(ReadAhead::default()),
        }
    }

    /// Whole batches of `meta`'s segment from the one holding `offset`, at most `max_bytes`
    /// of them but always the first whole. Empty when the segment holds nothing at or after
    /// `offset`.
    pub async fn read(
        &self,
        meta: &RemoteSegmentMetadata,
        offset: i64,
        max_bytes: usize,
    ) -> Result<Bytes> {
        if offset > meta.end_offset {
            return Ok(Bytes::new());
        }
        let offset = offset.max(meta.start_offset);
        let index = self.offset_index(meta).await?;
        let rel = u32::try_from(offset - meta.start_offset).unwrap_or(u32::MAX);
        let mut pos = u64::from(lookup(&index, rel));
        let mut want = max_bytes as u64 + READ_SLACK;
        loop {
            if pos >= meta.size_bytes {
                return Ok(Bytes::new());
            }
            let buf = self.log_bytes(meta, pos, want).await?;
            let at_end = pos + buf.len() as u64 >= meta.size_bytes;
            match find(meta, &buf, offset, max_bytes, at_end)? {
                Found::Batches(range) => return Ok(buf.slice(range)),
                Found::NotYet { skipped } => {
                    pos += skipped as u64;
                    want = max_bytes as u64 + READ_SLACK;
                }
                Found::Partial { from, total } => {
                    pos += from as u64;
                    want = (total as u64).max(max_bytes as u64);
                }
                Found::Nothing => return Ok(Bytes::new()),
            }
        }
    }

    /// The earliest record of the segment whose timestamp is at least `ts`, with that
    /// timestamp (ListOffsets by timestamp), `None` when the segment has none. The time index
    /// gives where to start; batch headers skip what is older; only the batch that holds the
    /// answer is decoded.
    pub async fn offset_for_timestamp(
        &self,
        meta: &RemoteSegmentMetadata,
        ts: i64,
    ) -> Result<Option<(i64, i64)>> {
        if meta.max_timestamp_ms < ts {
            return Ok(None);
        }
        let raw = self.store.fetch(meta, SegmentFileKind::TimeIndex).await?;
        // (timestamp, relative offset) entries, timestamps increasing; the last one below `ts`.
        let below = raw
            .chunks_exact(12)
            .map(|c| {
                let mut t = [0u8; 8];
                t.copy_from_slice(&c[..8]);
                (
                    i64::from_be_bytes(t),
                    u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
                )
            })
            .take_while(|&(t, _)| t < ts)
            .last();
        let mut pos = match below {
            Some((_, rel)) => u64::from(lookup(&self.offset_index(meta).await?, rel)),
            None => 0,
        };
        let mut want = SCAN_CHUNK;
        while pos < meta.size_bytes {
            let buf = self.store.fetch_log(meta, pos..pos + want).await?;
            let mut at = 0;
            while let Some(h) = header_at(meta, &buf, at)? {
                let end = at + h.total_size();
                if end > buf.len() {
                    break;
                }
                if h.max_timestamp >= ts {
                    let found = ferry_log::record_timestamps(&buf[at..end])
                        .map_err(|e| TierError::BadSegment {
                            segment: meta.segment_id,
                            reason: e.to_string(),
                        })?
                        .into_iter()
                        .find(|&(_, t)| t >= ts);
                    if found.is_some() {
                        return Ok(found);
                    }
                }
                at = end;
            }
            if at == 0 {
                // Not one whole batch in the read: read the first one whole.
                let h = header_at(meta, &buf, 0)?.ok_or_else(|| TierError::BadSegment {
                    segment: meta.segment_id,
                    reason: "the log ends inside a batch header".into(),
                })?;
                if buf.len() as u64 >= meta.size_bytes - pos {
                    return Err(TierError::BadSegment {
                        segment: meta.segment_id,
                        reason: "the log ends inside a batch".into(),
                    });
                }
                want = h.total_size() as u64;
                continue;
            }
            pos += at as u64;
            want = SCAN_CHUNK;
        }
        Ok(None)
    }

    /// The aborted transactions of the segment that overlap `[start_offset, upper_bound)`, and
    /// whether the search can stop at this segment (an entry's last stable offset reaches the
    /// bound): Kafka's `collectAbortedTransactions`, one segment at a time, for a
    /// read_committed Fetch from the tier.
    pub async fn aborted_transactions(
        &self,
        meta: &RemoteSegmentMetadata,
        start_offset: i64,
        upper_bound: i64,
    ) -> Result<(Vec<AbortedTxn>, bool)> {
        if !meta.has_txn_index {
            return Ok((Vec::new(), false));
        }
        let raw = self.store.fetch(meta, SegmentFileKind::TxnIndex).await?;
        let entries = parse_txn_index(&raw).ok_or_else(|| TierError::BadSegment {
            segment: meta.segment_id,
            reason: "the transaction index is not whole entries".into(),
        })?;
        let mut out = Vec::new();
        for t in entries {
            if t.last_offset >= start_offset && t.first_offset < upper_bound {
                out.push(t);
            }
            if t.last_stable_offset >= upper_bound {
                return Ok((out, true));
            }
        }
        Ok((out, false))
    }

    /// The segment's log from `pos`, at least `want` bytes (fewer only at its end): from a
    /// read-ahead window when one holds them, else one GET of at least [`READ_AHEAD`], whose
    /// rest is kept for the next read.
    async fn log_bytes(&self, meta: &RemoteSegmentMetadata, pos: u64, want: u64) -> Result<Bytes> {
        let needed = want.min(meta.size_bytes.saturating_sub(pos));
        if let Some(hit) = self.windows().get(meta.segment_id, pos, needed) {
            return Ok(hit);
        }
        let buf = self
            .store
            .fetch_log(meta, pos..pos + want.max(READ_AHEAD))
            .await?;
        self.windows().put(meta.segment_id, pos, buf.clone());
        Ok(buf)
    }

    fn windows(&self) -> std::sync::MutexGuard<'_, ReadAhead> {
        self.read_ahead.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn offset_index(&self, meta: &RemoteSegmentMetadata) -> Result<OffsetIndex> {
        if let Some(hit) = self.cache().get(meta.segment_id) {
            return Ok(hit);
        }
        let raw = self.store.fetch(meta, SegmentFileKind::OffsetIndex).await?;
        let entries: OffsetIndex = raw
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            // A preallocated index file ends in zero entries; keys must increase.
            .scan(None::<u32>, |last, e| {
                let ok = last.is_none_or(|l| e.0 > l);
                *last = Some(e.0);
                Some(ok.then_some(e))
            })
            .map_while(|e| e)
            .collect();
        self.cache().put(meta.segment_id, Arc::clone(&entries));
        Ok(entries)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, IndexCache> {
        self.indexes.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The position of the last index entry whose relative offset is at most `rel`, else 0.
fn lookup(index: &[(u32, u32)], rel: u32) -> u32 {
    let n = index.partition_point(|&(r, _)| r <= rel);
    if n == 0 {
        0
    } else {
        index[n - 1].1
    }
}

enum Found {
    /// The batches to return, as a range of the buffer.
    Batches(std::ops::Range<usize>),
    /// Every whole batch in the buffer ends before the offset; read on from `skipped`.
    NotYet { skipped: usize },
    /// The first wanted batch starts at `from` and is `total` bytes, more than was read.
    Partial { from: usize, total: usize },
    /// The segment ends before the offset.
    Nothing,
}

/// The checked header of the batch at `at` in `buf`, `None` when fewer than a header's bytes
/// are left. A batch that is not a v2 batch inside the segment's offsets is an error: the object
/// does not match its metadata, or the index pointed elsewhere.
fn header_at(meta: &RemoteSegmentMetadata, buf: &[u8], at: usize) -> Result<Option<BatchHeader>> {
    let bad = |reason: String| TierError::BadSegment {
        segment: meta.segment_id,
        reason,
    };
    if buf.len() - at < HEADER_SIZE {
        return Ok(None);
    }
    let h = BatchHeader::parse(&buf[at..]).ok_or_else(|| bad("short header".into()))?;
    if h.magic != 2 || (h.batch_length as usize) < HEADER_SIZE - LOG_OVERHEAD {
        return Err(bad(format!(
            "no batch at a position the index gave (magic {}, length {})",
            h.magic, h.batch_length
        )));
    }
    if h.base_offset < meta.start_offset || h.last_offset() > meta.end_offset {
        return Err(bad(format!(
            "batch {}..={} outside the segment {}..={}",
            h.base_offset,
            h.last_offset(),
            meta.start_offset,
            meta.end_offset
        )));
    }
    Ok(Some(h))
}

/// Finds the wanted batches in `buf`, checking what it walks over.
fn find(
    meta: &RemoteSegmentMetadata,
    buf: &[u8],
    offset: i64,
    max_bytes: usize,
    at_end: bool,
) -> Result<Found> {
    let bad = |reason: &str| TierError::BadSegment {
        segment: meta.segment_id,
        reason: reason.to_string(),
    };
    let mut at = 0;
    let first = loop {
        let Some(h) = header_at(meta, buf, at)? else {
            if at_end && buf.len() == at {
                return Ok(Found::Nothing);
            }
            if at_end || at == 0 {
                // At the end, or not even one header in a read that was not cut by the end:
                // the object is shorter than the metadata says.
                return Err(bad("the log ends inside a batch header"));
            }
            return Ok(Found::NotYet { skipped: at });
        };
        if h.last_offset() >= offset {
            break h;
        }
        if at + h.total_size() > buf.len() {
            // A skipped batch runs past what was read: go on from its end.
            return Ok(Found::NotYet {
                skipped: at + h.total_size(),
            });
        }
        at += h.total_size();
    };
    let start = at;
    if start + first.total_size() > buf.len() {
        if at_end {
            return Err(bad("the log ends inside a batch"));
        }
        return Ok(Found::Partial {
            from: start,
            total: first.total_size(),
        });
    }
    let mut end = start + first.total_size();
    while let Some(h) = header_at(meta, buf, end)? {
        let next = end + h.total_size();
        if next > buf.len() || next - start > max_bytes {
            break;
        }
        end = next;
    }
    Ok(Found::Batches(start..end))
}

/// Read-ahead windows: (segment, start position, bytes), least recently used first, bounded in
/// bytes.
#[derive(Debug, Default)]
struct ReadAhead {
    used: usize,
    windows: Vec<(Uuid, u64, Bytes)>,
}

impl ReadAhead {
    /// The bytes of a window from `pos` on, if one holds at least `needed` of them.
    fn get(&mut self, id: Uuid, pos: u64, needed: u64) -> Option<Bytes> {
        let i = self.windows.iter().position(|(w, start, bytes)| {
            *w == id && *start <= pos && pos + needed <= start + bytes.len() as u64
        })?;
        let hit = self.windows.remove(i);
        let from = usize::try_from(pos - hit.1).ok()?;
        let out = hit.2.slice(from..);
        self.windows.push(hit);
        Some(out)
    }

    fn put(&mut self, id: Uuid, start: u64, bytes: Bytes) {
        let size = bytes.len();
        if size > READ_AHEAD_CACHE_BYTES {
            return;
        }
        while self.used + size > READ_AHEAD_CACHE_BYTES && !self.windows.is_empty() {
            let (_, _, old) = self.windows.remove(0);
            self.used -= old.len();
        }
        self.used += size;
        self.windows.push((id, start, bytes));
    }
}

/// Offset indexes by segment id, least recently used first, bounded in bytes.
#[derive(Debug)]
struct IndexCache {
    capacity: usize,
    used: usize,
    entries: Vec<(Uuid, OffsetIndex)>,
}

impl IndexCache {
    fn get(&mut self, id: Uuid) -> Option<OffsetIndex> {
        let i = self.entries.iter().position(|(k, _)| *k == id)?;
        let hit = self.entries.remove(i);
        let out = Arc::clone(&hit.1);
        self.entries.push(hit);
        Some(out)
    }

    fn put(&mut self, id: Uuid, index: OffsetIndex) {
        let size = index.len() * 8;
        if size > self.capacity || self.entries.iter().any(|(k, _)| *k == id) {
            return;
        }
        while self.used + size > self.capacity && !self.entries.is_empty() {
            let (_, old) = self.entries.remove(0);
            self.used -= old.len() * 8;
        }
        self.used += size;
        self.entries.push((id, index));
    }
}
