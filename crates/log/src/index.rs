//! Sparse offset and time indexes of one segment, persisted as Kafka's `.index` and `.timeindex`
//! files.
//!
//! Invariants: offset index keys (relative offsets) and positions strictly increase; time index
//! timestamps strictly increase. An offset entry `(rel, pos)` means the batch at file position
//! `pos` is the first one holding offsets >= `base + rel`. A time entry `(ts, rel)` means `ts` is
//! the largest timestamp of every batch before the one holding `base + rel`, and that batch has
//! max timestamp `ts`. The files are written on roll and close; after a crash they are rebuilt by
//! the recovery scan (see `loader`), so a stale file is never trusted on an unclean start.
//!
//! Memory (issue 16): only the active segment's indexes live in memory ([`Entries::InMemory`]),
//! since only they grow. A closed segment's indexes are written to their files and then served
//! from them ([`Entries::OnDisk`]): a lookup binary-searches the file with positional reads
//! (single entries until the range fits one 4 KiB block, then that block), so what a closed
//! segment keeps in memory is its path, entry count and last entry, whatever its size. Open file
//! handles of on-disk indexes are kept in one small process-wide cache ([`OPEN_INDEX_FILES`]), so
//! neither memory nor descriptors grow with the number of closed segments. A lookup that cannot
//! read its file (deleted or replaced under it, I/O error) answers "no entry", which makes the
//! caller scan the segment from its start: slower, never wrong.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tracing::debug;

use crate::error::{LogError, Result};

/// Size of one offset index entry on disk (relative offset u32 + position u32).
pub const OFFSET_ENTRY_SIZE: u64 = 8;
/// Size of one time index entry on disk (timestamp i64 + relative offset u32).
pub const TIME_ENTRY_SIZE: u64 = 12;

/// Open index files kept for on-disk lookups, process-wide (least recently used evicted).
pub const OPEN_INDEX_FILES: usize = 64;

/// Bytes read at once at the end of an on-disk binary search.
const SEARCH_BLOCK: usize = 4096;

/// One index entry, its big-endian on-disk form, and its packed in-memory form.
pub(crate) trait Entry: Copy + std::fmt::Debug + PartialEq {
    const SIZE: usize;
    /// How an active segment holds the entry in memory: no padding, so an index costs what its
    /// file would (12 bytes a time entry, not the 16 of `(i64, u32)`), as Kafka's mapped files.
    type Packed: Copy + std::fmt::Debug + PartialEq;
    fn pack(self) -> Self::Packed;
    fn unpack(p: Self::Packed) -> Self;
    fn decode(b: &[u8]) -> Self;
    fn encode(&self, out: &mut Vec<u8>);
    /// Whether `next` may follow `self` (keys increase).
    fn may_precede(&self, next: &Self) -> bool;
}

impl Entry for (u32, u32) {
    const SIZE: usize = OFFSET_ENTRY_SIZE as usize;
    type Packed = (u32, u32);
    fn pack(self) -> Self::Packed {
        self
    }
    fn unpack(p: Self::Packed) -> Self {
        p
    }
    fn decode(c: &[u8]) -> Self {
        (
            u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
            u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
        )
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn may_precede(&self, next: &Self) -> bool {
        next.0 > self.0 && next.1 > self.1
    }
}

impl Entry for (i64, u32) {
    const SIZE: usize = TIME_ENTRY_SIZE as usize;
    /// The timestamp's high and low halves, then the relative offset.
    type Packed = [u32; 3];
    fn pack(self) -> Self::Packed {
        let t = self.0 as u64;
        [(t >> 32) as u32, t as u32, self.1]
    }
    fn unpack(p: Self::Packed) -> Self {
        ((((p[0] as u64) << 32) | p[1] as u64) as i64, p[2])
    }
    fn decode(c: &[u8]) -> Self {
        let mut t = [0u8; 8];
        t.copy_from_slice(&c[..8]);
        (
            i64::from_be_bytes(t),
            u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
        )
    }
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }
    fn may_precede(&self, next: &Self) -> bool {
        next.0 > self.0 && next.1 >= self.1
    }
}

/// Identity of one version of an index file: a file replaced under the same name (the cleaner's
/// swap) differs in inode, size or mtime, so a handle never serves another file's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: i64,
    mtime_nsec: i64,
}

impl FileId {
    fn of(m: &fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        }
    }
}

/// Process-wide cache of open on-disk index files, most recently used last. A cached handle keeps
/// its inode alive, so no other file can take its identity while it is cached.
static OPEN_FILES: Mutex<Vec<(FileId, Arc<File>)>> = Mutex::new(Vec::new());

fn open_files() -> std::sync::MutexGuard<'static, Vec<(FileId, Arc<File>)>> {
    OPEN_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The open file `path` if it still is the version `id`.
fn open_index_file(path: &Path, id: FileId) -> std::io::Result<Arc<File>> {
    {
        let mut cache = open_files();
        if let Some(i) = cache.iter().position(|(k, _)| *k == id) {
            let hit = cache.remove(i);
            let file = Arc::clone(&hit.1);
            cache.push(hit);
            return Ok(file);
        }
    }
    let file = File::open(path)?;
    if FileId::of(&file.metadata()?) != id {
        return Err(std::io::Error::other("index file was replaced"));
    }
    let file = Arc::new(file);
    let mut cache = open_files();
    if !cache.iter().any(|(k, _)| *k == id) {
        if cache.len() >= OPEN_INDEX_FILES {
            cache.remove(0);
        }
        cache.push((id, Arc::clone(&file)));
    }
    Ok(file)
}

/// A closed segment's index file, searched in place.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DiskIndex<E> {
    path: PathBuf,
    id: FileId,
    /// Number of entries in the file.
    len: usize,
    last: Option<E>,
}

impl<E> Drop for DiskIndex<E> {
    fn drop(&mut self) {
        // Closes the file if cached (a deleted segment's file is then freed at once). A clone
        // dropping early only costs the next lookup an open.
        open_files().retain(|(k, _)| *k != self.id);
    }
}

impl<E: Entry> DiskIndex<E> {
    /// The last entry of the prefix of entries satisfying `pred`.
    fn last_where(&self, pred: impl Fn(&E) -> bool) -> std::io::Result<Option<E>> {
        if self.len == 0 {
            return Ok(None);
        }
        let file = open_index_file(&self.path, self.id)?;
        let size = E::SIZE as u64;
        let block_entries = (SEARCH_BLOCK / E::SIZE) as u64;
        // Entries below `lo` satisfy `pred`, entries from `hi` do not.
        let (mut lo, mut hi) = (0u64, self.len as u64);
        let mut best = None;
        let mut one = [0u8; 16];
        while hi - lo > block_entries {
            let mid = lo + (hi - lo) / 2;
            let buf = &mut one[..E::SIZE];
            file.read_exact_at(buf, mid * size)?;
            let e = E::decode(buf);
            if pred(&e) {
                best = Some(e);
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let mut block = [0u8; SEARCH_BLOCK];
        let buf = &mut block[..((hi - lo) * size) as usize];
        file.read_exact_at(buf, lo * size)?;
        for c in buf.chunks_exact(E::SIZE) {
            let e = E::decode(c);
            if !pred(&e) {
                break;
            }
            best = Some(e);
        }
        Ok(best)
    }

    fn read_all(&self) -> Result<Vec<E>> {
        let file = open_index_file(&self.path, self.id).map_err(LogError::io_at(&self.path))?;
        let mut buf = vec![0u8; self.len * E::SIZE];
        file.read_exact_at(&mut buf, 0)
            .map_err(LogError::io_at(&self.path))?;
        Ok(buf.chunks_exact(E::SIZE).map(E::decode).collect())
    }
}

/// The entries of one index: in memory (the active segment) or in its file (closed segments).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Entries<E: Entry> {
    InMemory(Vec<E::Packed>),
    OnDisk(DiskIndex<E>),
}

impl<E: Entry> Default for Entries<E> {
    fn default() -> Self {
        Entries::InMemory(Vec::new())
    }
}

impl<E: Entry> Entries<E> {
    fn len(&self) -> usize {
        match self {
            Entries::InMemory(v) => v.len(),
            Entries::OnDisk(d) => d.len,
        }
    }

    fn last(&self) -> Option<E> {
        match self {
            Entries::InMemory(v) => v.last().map(|&p| E::unpack(p)),
            Entries::OnDisk(d) => d.last,
        }
    }

    /// Appends to an in-memory index. Closed segments are never appended to; were it to happen,
    /// dropping the entry keeps the index valid (sparser), so it is only a debug assertion.
    fn push(&mut self, e: E) {
        match self {
            Entries::InMemory(v) => v.push(e.pack()),
            Entries::OnDisk(d) => debug_assert!(false, "append to on-disk index {:?}", d.path),
        }
    }

    /// The last entry of the prefix satisfying `pred` (`None`, "scan from the start", when none
    /// does or the file cannot be read).
    fn last_where(&self, pred: impl Fn(&E) -> bool) -> Option<E> {
        match self {
            Entries::InMemory(v) => {
                let i = v.partition_point(|&p| pred(&E::unpack(p)));
                i.checked_sub(1).map(|i| E::unpack(v[i]))
            }
            Entries::OnDisk(d) => d.last_where(pred).unwrap_or_else(|e| {
                // Expected briefly while the cleaner swaps the segment's files.
                debug!(path = %d.path.display(), error = %e, "index file unreadable, scanning the segment");
                None
            }),
        }
    }

    fn to_vec(&self) -> Result<Vec<E>> {
        match self {
            Entries::InMemory(v) => Ok(v.iter().map(|&p| E::unpack(p)).collect()),
            Entries::OnDisk(d) => d.read_all(),
        }
    }

    fn in_memory_len(&self) -> usize {
        match self {
            Entries::InMemory(v) => v.len(),
            Entries::OnDisk(_) => 0,
        }
    }

    fn write_to(&self, path: &Path, durability: Durability) -> Result<()> {
        if let Entries::OnDisk(d) = self {
            if d.path == path {
                return Ok(()); // Already there, unchangeable.
            }
        }
        let entries = self.to_vec()?;
        let mut buf = Vec::with_capacity(entries.len() * E::SIZE);
        for e in &entries {
            e.encode(&mut buf);
        }
        write_file_atomically(path, &buf, durability)
    }

    /// These entries served from `path`, which must hold exactly them (just written or just
    /// read); `None` when its size says otherwise.
    fn on_disk(&self, path: &Path) -> Result<Option<Entries<E>>> {
        if let Entries::OnDisk(_) = self {
            return Ok(Some(self.clone()));
        }
        let id = match fs::metadata(path) {
            Ok(m) => FileId::of(&m),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LogError::io_at(path)(e)),
        };
        if id.len != (self.len() * E::SIZE) as u64 {
            return Ok(None);
        }
        Ok(Some(Entries::OnDisk(DiskIndex {
            path: path.to_path_buf(),
            id,
            len: self.len(),
            last: self.last(),
        })))
    }

    /// Loads an index file; `None` if it is missing, not a whole number of entries, or its keys
    /// do not increase.
    fn read_from(path: &Path) -> Result<Option<Vec<E>>> {
        let Some(buf) = read_optional(path)? else {
            return Ok(None);
        };
        if !buf.len().is_multiple_of(E::SIZE) {
            return Ok(None);
        }
        let mut v: Vec<E> = Vec::with_capacity(buf.len() / E::SIZE);
        for c in buf.chunks_exact(E::SIZE) {
            let e = E::decode(c);
            if v.last().is_some_and(|l| !l.may_precede(&e)) {
                return Ok(None);
            }
            v.push(e);
        }
        Ok(Some(v))
    }
}

/// An offset or time index of one segment; the operations both kinds share.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Index<E: Entry> {
    entries: Entries<E>,
}

/// Offset index: `(relative offset, file position)` pairs.
pub type OffsetIndex = Index<(u32, u32)>;

/// Time index: `(max timestamp so far, relative offset of the batch holding it)`.
pub type TimeIndex = Index<(i64, u32)>;

impl<E: Entry> Index<E> {
    pub fn from_entries(entries: Vec<E>) -> Self {
        Index {
            entries: Entries::InMemory(entries.into_iter().map(E::pack).collect()),
        }
    }

    pub fn last(&self) -> Option<E> {
        self.entries.last()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// Entries held in memory (0 when served from the file).
    pub fn in_memory_len(&self) -> usize {
        self.entries.in_memory_len()
    }

    /// Bytes the entries held in memory take (0 when served from the file).
    #[cfg(test)]
    pub(crate) fn in_memory_bytes(&self) -> usize {
        self.entries.in_memory_len() * std::mem::size_of::<E::Packed>()
    }

    pub fn is_on_disk(&self) -> bool {
        matches!(self.entries, Entries::OnDisk(_))
    }

    /// Every entry (read from the file when on disk).
    pub fn to_vec(&self) -> Result<Vec<E>> {
        self.entries.to_vec()
    }

    pub fn write_to(&self, path: &Path, durability: Durability) -> Result<()> {
        self.entries.write_to(path, durability)
    }

    /// This index served from `path`, which holds it; `None` if the file does not match.
    pub fn on_disk(&self, path: &Path) -> Result<Option<Self>> {
        Ok(self.entries.on_disk(path)?.map(|entries| Index { entries }))
    }

    /// Loads an index file into memory; `None` if it is missing or not a whole number of valid
    /// entries.
    pub fn read_from(path: &Path) -> Result<Option<Self>> {
        Ok(Entries::read_from(path)?.map(Self::from_entries))
    }
}

impl OffsetIndex {
    /// Adds an entry if it keeps keys and positions increasing.
    pub fn append(&mut self, rel: u32, pos: u32) {
        match self.entries.last() {
            Some((r, p)) if r >= rel || p >= pos => {}
            _ => self.entries.push((rel, pos)),
        }
    }

    /// File position of the largest entry whose relative offset is <= `rel` (0 if none).
    pub fn lookup(&self, rel: u32) -> u32 {
        self.entries
            .last_where(|&(r, _)| r <= rel)
            .map_or(0, |e| e.1)
    }

    /// File position of the last entry at or below position `pos` whose relative offset is at
    /// or below `rel` (`None` if none is): a batch start before which every batch ends at or
    /// below `pos` and has offsets below `rel`'s. Both columns increase, so the entries that
    /// qualify are a prefix.
    pub fn last_batch_start_within(&self, pos: u32, rel: u32) -> Option<u32> {
        self.entries
            .last_where(|&(r, p)| p <= pos && r <= rel)
            .map(|e| e.1)
    }
}

impl TimeIndex {
    /// Adds an entry if the timestamp grew.
    pub fn maybe_append(&mut self, ts: i64, rel: u32) {
        match self.entries.last() {
            Some((t, r)) if t >= ts || r > rel => {}
            _ => self.entries.push((ts, rel)),
        }
    }

    /// Relative offset of the largest entry with timestamp strictly below `ts`: every batch
    /// before that offset's batch has only timestamps < `ts`. `None` means "scan from the start".
    pub fn lookup_below(&self, ts: i64) -> Option<u32> {
        self.entries.last_where(|&(t, _)| t < ts).map(|e| e.1)
    }
}

pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LogError::io_at(path)(e)),
    }
}

/// When a file the log writes beside its segments (an index, a checkpoint, a snapshot) reaches
/// the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Durability {
    /// fsynced before the write returns.
    Synced,
    /// Left in the page cache for one `syncfs` of the log dir's file system later, and not
    /// written at all when the file already holds these bytes. Loading or closing thousands of
    /// partitions writes several such files each, most of them unchanged: one sync for all and
    /// a read instead of a create and rename for the unchanged ones is what lets a broker start
    /// and stop in seconds. The caller syncs the file system before anything vouches for these
    /// files (a recovery point on disk, the clean-shutdown marker).
    Unsynced,
}

/// Writes `path` through a temporary file, fsync (unless `durability` defers it) and rename, so
/// readers see the old or the new content, never a mix.
pub(crate) fn write_file_atomically(
    path: &Path,
    data: &[u8],
    durability: Durability,
) -> Result<()> {
    if durability == Durability::Unsynced && read_optional(path)?.is_some_and(|old| old == data) {
        return Ok(());
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    let written = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(data)?;
        if durability == Durability::Synced {
            f.sync_all()?;
            #[cfg(test)]
            fsynced::note(&tmp);
        }
        Ok(())
    })();
    if let Err(e) = written {
        // On a full disk a half-written temporary file would hold space that is needed back.
        let _ = fs::remove_file(&tmp);
        return Err(LogError::io_at(&tmp)(e));
    }
    fs::rename(&tmp, path).map_err(LogError::io_at(path))?;
    Ok(())
}

/// Test-only record of the files the log fsyncs, so a test can count what an operation costs.
#[cfg(test)]
pub(crate) mod fsynced {
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    static FILES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

    pub(crate) fn note(path: &Path) {
        FILES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(path.to_path_buf());
    }

    /// fsyncs so far of files under `dir` (tests run in parallel, each in its own dir).
    pub(crate) fn count_under(dir: &Path) -> usize {
        FILES
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|p| p.starts_with(dir))
            .count()
    }
}
