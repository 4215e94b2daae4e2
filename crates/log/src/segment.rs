//! One log segment, Kafka's `LogSegment`: a `.log` file of whole v2 batches plus its sparse
//! offset and time indexes and its aborted-transaction index (see [`crate::txn`]).
//!
//! Ownership: [`SegmentFile`] (the open file) is shared through an `Arc` with readers, who pread
//! byte ranges below the size they saw under the log's read lock; only the single appender (who
//! holds the log's writer mutex) writes, always past that size, so readers never see a partial
//! batch. [`Segment`] (sizes, indexes, timestamps) is mutated only under the log's write lock.
//!
//! Invariants: `size` is the byte length of complete, validated batches; `next_offset` is one past
//! the last offset of the last batch (`base_offset` when empty); index entries point at batch
//! starts below `size`.
//!
//! Only the active segment keeps its offset and time indexes in memory; a closed one serves them
//! from its index files ([`Segment::offload_indexes`], see [`crate::index`]).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::batch::{scan_batch, BatchHeader, Scan, HEADER_SIZE, LOG_OVERHEAD};
use crate::error::{LogError, Result};
use crate::index::{Durability, OffsetIndex, TimeIndex, OFFSET_ENTRY_SIZE, TIME_ENTRY_SIZE};
use crate::txn::{read_txn_index, write_txn_index, AbortedTxn};

/// Suffixes of a segment's files.
const SEGMENT_SUFFIXES: [&str; 4] = ["log", "index", "timeindex", "txnindex"];
/// Suffixes of a segment's index files, written in this order: an `.index` file on disk implies
/// the `.txnindex` beside it (or its absence) is as current.
const INDEX_SUFFIXES: [&str; 3] = ["txnindex", "index", "timeindex"];

/// `<base_offset:020>.<suffix>` in `dir`, Kafka's segment file naming.
pub fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// The open `.log` file of a segment.
#[derive(Debug)]
pub struct SegmentFile {
    pub base_offset: i64,
    pub path: PathBuf,
    pub file: File,
}

impl std::os::fd::AsFd for SegmentFile {
    /// The open `.log` file, for `sendfile` of a planned read ([`crate::slice`]).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl SegmentFile {
    /// fsyncs the file's data.
    pub fn sync_data(&self) -> Result<()> {
        #[cfg(test)]
        crate::index::fsynced::note(&self.path);
        self.file.sync_data().map_err(LogError::io_at(&self.path))
    }

    /// Reads exactly `len` bytes at `pos`.
    pub fn read_exact_at(&self, pos: u64, len: usize) -> Result<Vec<u8>> {
        // pread into the spare capacity: a fetch reads up to a MB per partition, and zeroing
        // the buffer first was a pass over every byte served.
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            let at = pos + buf.len() as u64;
            match rustix::io::pread(&self.file, rustix::buffer::spare_capacity(&mut buf), at) {
                Ok(0) => {
                    let eof = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("segment ends before {len} bytes at {pos}"),
                    );
                    return Err(LogError::io_at(&self.path)(eof));
                }
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(LogError::io_at(&self.path)(e.into())),
            }
        }
        Ok(buf)
    }

    /// Reads the batch header at `pos` if a whole header lies below `limit`.
    pub fn header_at(&self, pos: u64, limit: u64) -> Result<Option<BatchHeader>> {
        if pos + HEADER_SIZE as u64 > limit {
            return Ok(None);
        }
        #[cfg(test)]
        header_reads::note();
        let mut buf = [0u8; HEADER_SIZE];
        self.file
            .read_exact_at(&mut buf, pos)
            .map_err(LogError::io_at(&self.path))?;
        let h = BatchHeader::parse(&buf);
        Ok(h.filter(|h| h.batch_length >= 0 && pos + h.total_size() as u64 <= limit))
    }

    /// Finds the first batch at or after `pos` (a batch start) whose last offset is >= `offset`,
    /// reading no further than `limit`. Returns its position and header.
    pub fn translate_offset(
        &self,
        offset: i64,
        mut pos: u64,
        limit: u64,
    ) -> Result<Option<(u64, BatchHeader)>> {
        while let Some(h) = self.header_at(pos, limit)? {
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }
}

/// Batch headers read by [`SegmentFile::header_at`] on this thread (tests count the preads a
/// planned read makes).
#[cfg(test)]
pub(crate) mod header_reads {
    use std::cell::Cell;

    thread_local! {
        static READS: Cell<u64> = const { Cell::new(0) };
    }

    pub(crate) fn note() {
        READS.with(|r| r.set(r.get() + 1));
    }

    /// Reads since the last call.
    pub(crate) fn take() -> u64 {
        READS.with(|r| r.replace(0))
    }
}

/// Sequential reader of the batches of a segment file in large chunks (recovery, replay).
pub struct BatchScanner<'a> {
    file: &'a SegmentFile,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_pos: u64,
    /// Position of the next batch to return.
    pub pos: u64,
    file_len: u64,
}

const SCAN_CHUNK: usize = 1 << 20;

impl<'a> BatchScanner<'a> {
    pub fn new(file: &'a SegmentFile, start: u64, file_len: u64) -> Self {
        Self {
            file,
            buf: Vec::new(),
            buf_pos: start,
            pos: start,
            file_len,
        }
    }

    /// Makes `need` bytes from `self.pos` available in the buffer if the file has them.
    fn fill(&mut self, need: usize) -> Result<bool> {
        let off = (self.pos - self.buf_pos) as usize;
        if off + need <= self.buf.len() {
            return Ok(true);
        }
        if self.pos + need as u64 > self.file_len {
            return Ok(false);
        }
        let want = need
            .max(SCAN_CHUNK)
            .min((self.file_len - self.pos) as usize);
        self.buf = self.file.read_exact_at(self.pos, want)?;
        self.buf_pos = self.pos;
        Ok(true)
    }

    /// The next batch: `Scan::Valid` with its bytes when `verify` (CRC checked), else the header
    /// only with the length checked. `Scan::Torn` at a clean or torn end of file.
    pub fn next_batch(&mut self, verify: bool) -> Result<(Scan, &[u8])> {
        if !self.fill(LOG_OVERHEAD)? {
            return Ok((Scan::Torn, &[]));
        }
        let off = (self.pos - self.buf_pos) as usize;
        let len = i32::from_be_bytes([
            self.buf[off + 8],
            self.buf[off + 9],
            self.buf[off + 10],
            self.buf[off + 11],
        ]);
        if len < (HEADER_SIZE - LOG_OVERHEAD) as i32 {
            return Ok((
                Scan::Corrupt(format!("batch length {len} at position {}", self.pos)),
                &[],
            ));
        }
        let total = LOG_OVERHEAD + len as usize;
        let need = if verify { total } else { HEADER_SIZE };
        if self.pos + total as u64 > self.file_len || !self.fill(need)? {
            return Ok((Scan::Torn, &[]));
        }
        let off = (self.pos - self.buf_pos) as usize;
        let scan = if verify {
            scan_batch(&self.buf[off..off + total])
        } else {
            match BatchHeader::parse(&self.buf[off..off + HEADER_SIZE]) {
                Some(h) if h.magic == 2 => Scan::Valid(h),
                Some(h) => Scan::Corrupt(format!("magic {}", h.magic)),
                None => Scan::Torn,
            }
        };
        let bytes = &self.buf[off..off + need];
        if matches!(scan, Scan::Valid(_)) {
            self.pos += total as u64;
        }
        Ok((scan, bytes))
    }
}

/// The mutable description of one segment, guarded by the log's lock.
#[derive(Debug)]
pub struct Segment {
    pub file: std::sync::Arc<SegmentFile>,
    pub base_offset: i64,
    /// Bytes of complete batches.
    pub size: u64,
    /// One past the last offset stored (the base offset when empty).
    pub next_offset: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    /// Largest batch max timestamp, -1 when empty.
    pub max_timestamp: i64,
    /// Base offset of the first batch carrying `max_timestamp`.
    pub offset_of_max_timestamp: i64,
    pub bytes_since_last_index_entry: u64,
    /// Clock time when this process created or opened the segment (segment.ms fallback).
    pub created_ms: i64,
    /// Max timestamp of the first batch, the segment.ms roll basis (as Kafka).
    pub first_batch_timestamp: Option<i64>,
    /// Transactions aborted by markers in this segment, in marker order.
    pub txn_index: Vec<AbortedTxn>,
    /// The in-memory indexes differ from the index files.
    pub dirty: bool,
}

/// What the recovery scan of one segment found.
#[derive(Debug)]
pub struct RecoveryResult {
    /// Bytes cut from the end of the file (0 when it was intact).
    pub truncated_bytes: u64,
    /// Why the scan stopped early, when it did.
    pub reason: Option<String>,
}

impl Segment {
    fn open_file(path: &Path, create_new: bool) -> Result<File> {
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        if create_new {
            o.create(true).truncate(true);
        }
        o.open(path).map_err(LogError::io_at(path))
    }

    fn empty(file: SegmentFile, now_ms: i64) -> Segment {
        let base = file.base_offset;
        Segment {
            file: std::sync::Arc::new(file),
            base_offset: base,
            size: 0,
            next_offset: base,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            max_timestamp: -1,
            offset_of_max_timestamp: base,
            bytes_since_last_index_entry: 0,
            created_ms: now_ms,
            first_batch_timestamp: None,
            txn_index: Vec::new(),
            dirty: true,
        }
    }

    /// Creates a new, empty segment (replacing any stale files of the same base offset).
    pub fn create(dir: &Path, base_offset: i64, now_ms: i64) -> Result<Segment> {
        let path = segment_path(dir, base_offset, "log");
        let file = Self::open_file(&path, true)?;
        for suffix in INDEX_SUFFIXES {
            remove_if_exists(&segment_path(dir, base_offset, suffix))?;
        }
        Ok(Self::empty(
            SegmentFile {
                base_offset,
                path,
                file,
            },
            now_ms,
        ))
    }

    /// Opens an existing segment file without reading it.
    pub fn open(dir: &Path, base_offset: i64, now_ms: i64) -> Result<Segment> {
        let path = segment_path(dir, base_offset, "log");
        let file = Self::open_file(&path, false)?;
        let len = file.metadata().map_err(LogError::io_at(&path))?.len();
        let mut seg = Self::empty(
            SegmentFile {
                base_offset,
                path,
                file,
            },
            now_ms,
        );
        seg.size = len;
        Ok(seg)
    }

    pub fn dir(&self) -> Option<&Path> {
        self.file.path.parent()
    }

    fn rel(&self, offset: i64) -> u32 {
        (offset - self.base_offset).clamp(0, i64::from(u32::MAX)) as u32
    }

    /// Updates indexes and bookkeeping for one batch just written at `pos`.
    pub fn note_batch(&mut self, pos: u64, h: &BatchHeader, index_interval_bytes: u64) {
        let size = h.total_size() as u64;
        if self.first_batch_timestamp.is_none() {
            self.first_batch_timestamp = Some(h.max_timestamp);
        }
        if h.max_timestamp > self.max_timestamp {
            self.max_timestamp = h.max_timestamp;
            self.offset_of_max_timestamp = h.base_offset;
        }
        if self.bytes_since_last_index_entry > index_interval_bytes {
            self.offset_index
                .append(self.rel(h.base_offset), pos as u32);
            if self.max_timestamp >= 0 {
                self.time_index
                    .maybe_append(self.max_timestamp, self.rel(self.offset_of_max_timestamp));
            }
            self.bytes_since_last_index_entry = 0;
        }
        self.bytes_since_last_index_entry += size;
        self.dirty = true;
        self.size = pos + size;
        self.next_offset = h.next_offset();
    }

    /// Adds the final time index entry (Kafka does this on roll/close) so the last entry holds
    /// the segment's largest timestamp.
    pub fn seal_time_index(&mut self) {
        if self.max_timestamp >= 0 {
            self.time_index
                .maybe_append(self.max_timestamp, self.rel(self.offset_of_max_timestamp));
        }
    }

    /// Entries the offset index may hold under `segment.index.bytes`.
    pub fn index_full(&self, segment_index_bytes: u64) -> bool {
        let max_offset_entries = (segment_index_bytes / OFFSET_ENTRY_SIZE).max(1);
        let max_time_entries = (segment_index_bytes / TIME_ENTRY_SIZE).max(1);
        self.offset_index.len() as u64 >= max_offset_entries
            || self.time_index.len() as u64 >= max_time_entries
    }

    fn reset_indexes(&mut self) {
        self.offset_index = OffsetIndex::default();
        self.time_index = TimeIndex::default();
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = self.base_offset;
        self.bytes_since_last_index_entry = 0;
        self.first_batch_timestamp = None;
        self.next_offset = self.base_offset;
        self.dirty = true;
    }

    /// Kafka's `LogSegment.recover`: scans every batch checking length and CRC, rebuilds the
    /// indexes, and truncates the file at the first torn or corrupt batch.
    pub fn recover(&mut self, index_interval_bytes: u64) -> Result<RecoveryResult> {
        let file_len = self
            .file
            .file
            .metadata()
            .map_err(LogError::io_at(&self.file.path))?
            .len();
        self.reset_indexes();
        let file = std::sync::Arc::clone(&self.file);
        let mut scanner = BatchScanner::new(&file, 0, file_len);
        let mut reason = None;
        loop {
            let pos = scanner.pos;
            let (scan, _) = scanner.next_batch(true)?;
            match scan {
                Scan::Valid(h) => self.note_batch(pos, &h, index_interval_bytes),
                Scan::Torn => {
                    if pos < file_len {
                        reason = Some(format!("torn batch at position {pos}"));
                    }
                    break;
                }
                Scan::Corrupt(why) => {
                    reason = Some(why);
                    break;
                }
            }
        }
        self.size = scanner.pos;
        self.seal_time_index();
        let truncated_bytes = file_len - self.size;
        if truncated_bytes > 0 {
            self.file
                .file
                .set_len(self.size)
                .map_err(LogError::io_at(&self.file.path))?;
        }
        Ok(RecoveryResult {
            truncated_bytes,
            reason,
        })
    }

    /// Rebuilds indexes from the file without verifying CRCs (missing index files on a clean
    /// start); stops at the first batch that does not fit, without truncating.
    pub fn rebuild_indexes(&mut self, index_interval_bytes: u64) -> Result<()> {
        let file_len = self.size;
        self.reset_indexes();
        let file = std::sync::Arc::clone(&self.file);
        let mut scanner = BatchScanner::new(&file, 0, file_len);
        loop {
            let pos = scanner.pos;
            match scanner.next_batch(false)?.0 {
                Scan::Valid(h) => self.note_batch(pos, &h, index_interval_bytes),
                _ => break,
            }
        }
        self.size = scanner.pos;
        self.seal_time_index();
        Ok(())
    }

    /// Clean-start load: the persisted indexes, then a short header scan from the last offset
    /// index entry to find `next_offset` and the tail's timestamps. Falls back to a rebuild when
    /// an index file is missing or does not fit the log file. Returns whether it fell back: the
    /// aborted-transaction index is then not trusted either and must be rebuilt by a replay of
    /// producer state (see [`crate::loader`]); a missing `.txnindex` alone means "nothing aborted".
    pub fn load_clean(&mut self, index_interval_bytes: u64) -> Result<bool> {
        let dir = self.dir().map(Path::to_path_buf).unwrap_or_default();
        let oi = OffsetIndex::read_from(&segment_path(&dir, self.base_offset, "index"))?;
        let ti = TimeIndex::read_from(&segment_path(&dir, self.base_offset, "timeindex"))?;
        let txn = read_txn_index(&segment_path(&dir, self.base_offset, "txnindex"))?;
        let (Some(oi), Some(ti), Some(txn)) = (oi, ti, txn) else {
            self.rebuild_indexes(index_interval_bytes)?;
            return Ok(true);
        };
        let fits = oi.last().is_none_or(|(_, p)| u64::from(p) < self.size);
        if !fits {
            self.rebuild_indexes(index_interval_bytes)?;
            return Ok(true);
        }
        // Written with the `.index` just read, so as current as it is.
        self.txn_index = txn;
        if self.size > 0 && oi.is_empty() {
            // A segment smaller than the index interval: nothing to trust, a cheap scan. The
            // files need no rewrite when they hold what the scan found.
            self.rebuild_indexes(index_interval_bytes)?;
            if self.offset_index == oi && self.time_index == ti {
                self.dirty = false;
            }
            return Ok(false);
        }
        let (start_pos, start_rel) = oi.last().map_or((0, 0), |(r, p)| (p, r));
        self.offset_index = oi;
        self.time_index = ti;
        if let Some((ts, rel)) = self.time_index.last() {
            self.max_timestamp = ts;
            self.offset_of_max_timestamp = self.base_offset + i64::from(rel);
        }
        self.next_offset = self.base_offset + i64::from(start_rel);
        let file = std::sync::Arc::clone(&self.file);
        let mut scanner = BatchScanner::new(&file, u64::from(start_pos), self.size);
        loop {
            let pos = scanner.pos;
            match scanner.next_batch(false)?.0 {
                Scan::Valid(h) => {
                    if pos == 0 {
                        self.first_batch_timestamp = Some(h.max_timestamp);
                    }
                    if h.max_timestamp > self.max_timestamp {
                        self.max_timestamp = h.max_timestamp;
                        self.offset_of_max_timestamp = h.base_offset;
                    }
                    self.next_offset = h.next_offset();
                }
                _ => break,
            }
        }
        let time_index_fits = self
            .time_index
            .last()
            .is_none_or(|(_, rel)| self.base_offset + i64::from(rel) < self.next_offset);
        if scanner.pos != self.size || !time_index_fits {
            // The file has bytes that are not whole batches, or the time index points past the
            // segment: not a clean file after all.
            self.rebuild_indexes(index_interval_bytes)?;
            return Ok(true);
        }
        self.bytes_since_last_index_entry = self.size - u64::from(start_pos);
        self.dirty = false;
        if self.first_batch_timestamp.is_none() && self.size > 0 {
            if let Some(h) = self.file.header_at(0, self.size)? {
                self.first_batch_timestamp = Some(h.max_timestamp);
            }
        }
        Ok(false)
    }

    /// Position and header of the first batch whose last offset is >= `offset`.
    pub fn translate_offset(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        let start = u64::from(self.offset_index.lookup(self.rel(offset)));
        self.file.translate_offset(offset, start, self.size)
    }

    /// Cuts the segment so that it ends before the batch holding `offset`, then rebuilds indexes.
    pub fn truncate_to(&mut self, offset: i64, index_interval_bytes: u64) -> Result<()> {
        let Some((pos, _)) = self.translate_offset(offset)? else {
            return Ok(());
        };
        self.file
            .file
            .set_len(pos)
            .map_err(LogError::io_at(&self.file.path))?;
        self.size = pos;
        self.rebuild_indexes(index_interval_bytes)?;
        // Kafka's `TransactionIndex.truncateTo`: markers at or past the cut are gone.
        let end = self.next_offset;
        self.txn_index.retain(|t| t.last_offset < end);
        Ok(())
    }

    /// The index contents to persist, with the final time index entry added.
    pub fn index_snapshot(&self) -> IndexSnapshot {
        let mut time_index = self.time_index.clone();
        if self.max_timestamp >= 0 {
            time_index.maybe_append(self.max_timestamp, self.rel(self.offset_of_max_timestamp));
        }
        IndexSnapshot {
            dir: self.dir().map(Path::to_path_buf).unwrap_or_default(),
            base_offset: self.base_offset,
            offset_index: self.offset_index.clone(),
            time_index,
            txn_index: self.txn_index.clone(),
        }
    }

    /// Writes the `.index` and `.timeindex` files.
    pub fn persist_indexes(&mut self, durability: Durability) -> Result<()> {
        self.index_snapshot().write(durability)?;
        self.dirty = false;
        Ok(())
    }

    /// For a closed segment: drops the in-memory index entries and serves lookups from the
    /// `.index` / `.timeindex` files, writing them first when memory differs from them. If a
    /// file does not hold what memory does (it should, the caller holds the log's writer), the
    /// indexes stay in memory and a warning says so.
    pub fn offload_indexes(&mut self, durability: Durability) -> Result<()> {
        let entries = self.time_index.len();
        self.seal_time_index();
        if self.time_index.len() != entries {
            self.dirty = true;
        }
        if self.dirty {
            self.persist_indexes(durability)?;
        }
        let dir = self.dir().map(Path::to_path_buf).unwrap_or_default();
        let oi = self
            .offset_index
            .on_disk(&segment_path(&dir, self.base_offset, "index"))?;
        let ti = self
            .time_index
            .on_disk(&segment_path(&dir, self.base_offset, "timeindex"))?;
        match (oi, ti) {
            (Some(oi), Some(ti)) => {
                self.offset_index = oi;
                self.time_index = ti;
            }
            _ => tracing::warn!(
                segment = %self.file.path.display(),
                "index files do not match the closed segment's indexes; keeping them in memory"
            ),
        }
        Ok(())
    }

    /// For the active segment: brings indexes served from their files back into memory, so
    /// they can grow.
    pub fn load_indexes_into_memory(&mut self) -> Result<()> {
        if self.offset_index.is_on_disk() {
            self.offset_index = OffsetIndex::from_entries(self.offset_index.to_vec()?);
        }
        if self.time_index.is_on_disk() {
            self.time_index = TimeIndex::from_entries(self.time_index.to_vec()?);
        }
        Ok(())
    }

    /// Index entries held in memory (0 for a segment whose indexes are served from disk).
    pub fn in_memory_index_entries(&self) -> usize {
        self.offset_index.in_memory_len() + self.time_index.in_memory_len()
    }

    /// Largest timestamp for retention: the max record timestamp, else the file's mtime.
    pub fn largest_timestamp(&self) -> i64 {
        if self.max_timestamp >= 0 {
            return self.max_timestamp;
        }
        self.file
            .file
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(self.created_ms, |d| d.as_millis() as i64)
    }

    pub fn sync(&self) -> Result<()> {
        self.file.sync_data()
    }

    /// Removes the segment's files (the open handle keeps serving in-flight reads).
    pub fn delete_files(&self) -> Result<()> {
        let dir = self.dir().map(Path::to_path_buf).unwrap_or_default();
        for suffix in SEGMENT_SUFFIXES {
            remove_if_exists(&segment_path(&dir, self.base_offset, suffix))?;
        }
        Ok(())
    }
}

/// A copy of a segment's indexes, written without holding the log's lock.
pub struct IndexSnapshot {
    dir: PathBuf,
    base_offset: i64,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    txn_index: Vec<AbortedTxn>,
}

impl IndexSnapshot {
    pub fn write(&self, durability: Durability) -> Result<()> {
        write_txn_index(
            &segment_path(&self.dir, self.base_offset, "txnindex"),
            &self.txn_index,
            durability,
        )?;
        self.offset_index.write_to(
            &segment_path(&self.dir, self.base_offset, "index"),
            durability,
        )?;
        self.time_index.write_to(
            &segment_path(&self.dir, self.base_offset, "timeindex"),
            durability,
        )
    }
}

/// fsyncs a directory, so that creations, renames and removals in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(LogError::io_at(dir))
}

pub(crate) fn remove_if_exists(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(LogError::io_at(path)(e)),
    }
}

impl Segment {
    /// [`Segment::create`], named for call sites that replace a segment in place.
    pub fn create_or_replace(dir: &Path, base_offset: i64, now_ms: i64) -> Result<Segment> {
        Self::create(dir, base_offset, now_ms)
    }
}

impl Segment {
    /// A segment over a rewritten file (the cleaner's `.cleaned` file, later renamed to the
    /// segment's `.log` name, which `path` already holds): sizes and indexes are rebuilt from it.
    pub fn from_rewritten(
        dir: &Path,
        base_offset: i64,
        file: File,
        created_ms: i64,
        index_interval_bytes: u64,
    ) -> Result<Segment> {
        let path = segment_path(dir, base_offset, "log");
        let len = file.metadata().map_err(LogError::io_at(&path))?.len();
        let mut seg = Self::empty(
            SegmentFile {
                base_offset,
                path,
                file,
            },
            created_ms,
        );
        seg.size = len;
        seg.rebuild_indexes(index_interval_bytes)?;
        if seg.size != len {
            return Err(LogError::KafkaStorage(format!(
                "rewritten segment {base_offset} holds {} bytes that are not whole batches",
                len - seg.size
            )));
        }
        Ok(seg)
    }
}

#[cfg(test)]
mod read_tests {
    use super::*;

    fn segment_file_of(bytes: &[u8]) -> (tempfile::TempDir, SegmentFile) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::write(&path, bytes).unwrap();
        let file = File::open(&path).unwrap();
        let seg = SegmentFile {
            base_offset: 0,
            path,
            file,
        };
        (dir, seg)
    }

    #[test]
    fn read_exact_at_reads_the_range_and_refuses_one_past_the_end() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (_dir, seg) = segment_file_of(&data);
        assert_eq!(seg.read_exact_at(0, 10_000).unwrap(), data);
        assert_eq!(seg.read_exact_at(123, 4_000).unwrap(), &data[123..4_123]);
        assert!(seg.read_exact_at(10_000, 0).unwrap().is_empty());
        let err = seg.read_exact_at(9_000, 1_001).unwrap_err();
        assert!(
            matches!(&err, LogError::IoAt { source, .. } if source.kind() == std::io::ErrorKind::UnexpectedEof),
            "{err:?}"
        );
    }
}
