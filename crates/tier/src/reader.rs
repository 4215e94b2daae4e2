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

/// A window that holds at least this much from a read's position answers it, even if short of
/// what the read wanted: a read that straddles two windows is not worth a GET of its own.
const MIN_SERVE: u64 = 256 * 1024;

/// Bytes read at a time while scanning for a timestamp.
const SCAN_CHUNK: u64 = 64 * 1024;

/// Default bound of the offset index cache.
pub const DEFAULT_INDEX_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Reads batches from the tier.
#[derive(Debug)]
pub struct TierReader {
    store: RemoteSegmentStore,
    indexes: Mutex<IndexCache>,
    /// Shared with the prefetch tasks, which put the windows they fetched.
    read_ahead: Arc<Mutex<ReadAhead>>,
    /// Bytes one GET of the log fetches at least ([`READ_AHEAD`]).
    window: u64,
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
            read_ahead: Arc::new(Mutex::new(ReadAhead::default())),
            window: READ_AHEAD,
        }
    }

    /// With read-ahead windows of `window` bytes instead of [`READ_AHEAD`] (tests use small
    /// segments).
    pub fn with_window(mut self, window: u64) -> Self {
        self.window = window.max(1);
        self
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
        // What a read-ahead window must hold from `pos` to answer (short of `want` is fine,
        // unless the first batch is known to need all of it).
        let mut at_least = self.min_serve();
        loop {
            if pos >= meta.size_bytes {
                return Ok(Bytes::new());
            }
            let buf = self.log_bytes(meta, pos, want, at_least).await?;
            let at_end = pos + buf.len() as u64 >= meta.size_bytes;
            match find(meta, &buf, offset, max_bytes, at_end)? {
                Found::Batches(range) => return Ok(buf.slice(range)),
                Found::NotYet { skipped } => {
                    pos += skipped as u64;
                    want = max_bytes as u64 + READ_SLACK;
                    at_least = self.min_serve();
                }
                Found::Partial { from, total } => {
                    pos += from as u64;
                    want = (total as u64).max(max_bytes as u64);
                    at_least = total as u64;
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

    /// The segment's log from `pos`, `want` bytes (fewer at its end, or when a held window has
    /// `at_least` of them): from a
    /// read-ahead window when one holds them, else one GET of at least [`READ_AHEAD`], whose
    /// rest is kept for the next read.
    ///
    /// Once a reader is within half a window of a window's end, the next window is fetched in
    /// the background (one at a time per segment), so a sequential reader finds it ready rather
    /// than waiting for a GET at every window: readers that need its bytes before it arrives
    /// wait for that GET instead of sending their own.
    async fn log_bytes(
        &self,
        meta: &RemoteSegmentMetadata,
        pos: u64,
        want: u64,
        at_least: u64,
    ) -> Result<Bytes> {
        let needed = want.min(meta.size_bytes.saturating_sub(pos));
        let min_serve = at_least.min(needed);
        if let Some((bytes, window_end)) = self.held(meta, pos, needed, min_serve).await {
            self.prefetch_after(meta, pos + needed, window_end);
            return Ok(bytes);
        }
        // The end of one window and the start of the next (held or on its way): joined, a
        // copy of at most `needed` bytes, rather than a GET of bytes mostly held already.
        let tail = self.windows().tail(meta.segment_id, pos);
        if let Some((tail, end)) = tail {
            let rest = needed.saturating_sub(tail.len() as u64);
            let rest_at_least = min_serve.saturating_sub(tail.len() as u64).max(1);
            if let Some((next, next_end)) = self.held(meta, end, rest.max(1), rest_at_least).await {
                let take = usize::try_from(rest).unwrap_or(usize::MAX).min(next.len());
                let mut joined = bytes::BytesMut::with_capacity(tail.len() + take);
                joined.extend_from_slice(&tail);
                joined.extend_from_slice(&next[..take]);
                self.prefetch_after(meta, pos + needed, next_end);
                return Ok(joined.freeze());
            }
        }
        let buf = self
            .store
            .fetch_log(meta, pos..pos + want.max(self.window))
            .await?;
        self.windows().put(meta.segment_id, pos, buf.clone());
        self.prefetch_after(meta, pos + needed, pos + buf.len() as u64);
        Ok(buf)
    }

    /// The segment's bytes from `pos` that a window holds, or a window being fetched will hold
    /// (waiting for it), when it is at least `needed` of them or `min_serve`; with the
    /// window's end.
    async fn held(
        &self,
        meta: &RemoteSegmentMetadata,
        pos: u64,
        needed: u64,
        min_serve: u64,
    ) -> Option<(Bytes, u64)> {
        let id = meta.segment_id;
        // Bound first: a lock held in an `if let` scrutinee lives through its block.
        let hit = self.windows().get(id, pos, needed, min_serve);
        if hit.is_some() {
            return hit;
        }
        let in_flight = self.windows().pending_covering(id, pos, needed, min_serve);
        let (start, mut done) = in_flight?;
        let fetched = done
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone());
        // A failed fetch ahead is the caller's to retry, with a GET of its own.
        let window = fetched?.ok()?;
        let from = usize::try_from(pos - start).ok()?;
        (from <= window.len()).then(|| (window.slice(from..), start + window.len() as u64))
    }

    /// Starts fetching the window after `window_end` when the reader, at `read_to`, has less
    /// than half a window left of it, and no window or fetch there exists yet.
    fn prefetch_after(&self, meta: &RemoteSegmentMetadata, read_to: u64, window_end: u64) {
        if window_end >= meta.size_bytes || window_end.saturating_sub(read_to) > self.window / 2 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let id = meta.segment_id;
        let end = (window_end + self.window).min(meta.size_bytes);
        let started = self.windows().start_pending(id, window_end, end);
        let Some(done_tx) = started else {
            return;
        };
        let (store, cache, meta) = (
            self.store.clone(),
            Arc::clone(&self.read_ahead),
            meta.clone(),
        );
        runtime.spawn(async move {
            let fetched = store.fetch_log(&meta, window_end..end).await;
            let mut windows = cache.lock().unwrap_or_else(|e| e.into_inner());
            windows.finish_pending(id, window_end);
            if let Ok(bytes) = &fetched {
                windows.put(id, window_end, bytes.clone());
            }
            drop(windows);
            let _ = done_tx.send(Some(fetched.map_err(|e| e.to_string())));
        });
    }

    /// What a window must still hold from a read's position to answer it short (the
    /// consumer's next fetch reads on from the next window) rather than with a GET of its own.
    fn min_serve(&self) -> u64 {
        (self.window / 4).min(MIN_SERVE)
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
    /// Windows being fetched ahead of their readers: (segment, start, end, the outcome).
    pending: Vec<(Uuid, u64, u64, PendingWindow)>,
}

/// Whether a window ending at `end` answers a read of `needed` bytes from `pos`: all of them,
/// or at least `min_serve` (the read is answered short).
fn covers(pos: u64, needed: u64, end: u64, min_serve: u64) -> bool {
    pos + needed <= end || end.saturating_sub(pos) >= min_serve
}

/// Where the fetch ahead of a window sends its outcome.
type PendingOutcome = tokio::sync::watch::Sender<Option<std::result::Result<Bytes, String>>>;

/// The outcome of a window fetched ahead, once there is one.
type PendingWindow = tokio::sync::watch::Receiver<Option<std::result::Result<Bytes, String>>>;

impl ReadAhead {
    /// The bytes of a window from `pos` on, if one holds at least `needed` of them, with the
    /// window's end.
    fn get(&mut self, id: Uuid, pos: u64, needed: u64, min_serve: u64) -> Option<(Bytes, u64)> {
        let i = self.windows.iter().position(|(w, start, bytes)| {
            let end = start + bytes.len() as u64;
            *w == id && *start <= pos && covers(pos, needed, end, min_serve)
        })?;
        let hit = self.windows.remove(i);
        let from = usize::try_from(pos - hit.1).ok()?;
        let out = hit.2.slice(from..);
        let end = hit.1 + hit.2.len() as u64;
        self.windows.push(hit);
        Some((out, end))
    }

    /// The bytes from `pos` to the end of a window that holds `pos`, with that end.
    fn tail(&self, id: Uuid, pos: u64) -> Option<(Bytes, u64)> {
        self.windows.iter().find_map(|(w, start, bytes)| {
            let end = start + bytes.len() as u64;
            (*w == id && *start <= pos && pos < end).then(|| {
                let from = usize::try_from(pos - start).unwrap_or(0);
                (bytes.slice(from..), end)
            })
        })
    }

    /// A window being fetched that will hold `needed` bytes from `pos`: its start and outcome.
    fn pending_covering(
        &self,
        id: Uuid,
        pos: u64,
        needed: u64,
        min_serve: u64,
    ) -> Option<(u64, PendingWindow)> {
        self.pending
            .iter()
            .find(|(w, start, end, _)| {
                *w == id && *start <= pos && covers(pos, needed, *end, min_serve)
            })
            .map(|(_, start, _, done)| (*start, done.clone()))
    }

    /// Records a fetch ahead of `start..end` and returns where to send its outcome; `None` when
    /// a window or a fetch starts there already (no channel is made then).
    fn start_pending(&mut self, id: Uuid, start: u64, end: u64) -> Option<PendingOutcome> {
        let exists = self.windows.iter().any(|(w, s, _)| *w == id && *s == start)
            || self
                .pending
                .iter()
                .any(|(w, s, _, _)| *w == id && *s == start);
        if exists {
            return None;
        }
        let (done_tx, done) = tokio::sync::watch::channel(None);
        self.pending.push((id, start, end, done));
        Some(done_tx)
    }

    fn finish_pending(&mut self, id: Uuid, start: u64) {
        self.pending
            .retain(|(w, s, _, _)| !(*w == id && *s == start));
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
