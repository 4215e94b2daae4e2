//! Sparse offset and time indexes of one segment, kept in memory and persisted as Kafka's
//! `.index` and `.timeindex` files.
//!
//! Invariants: offset index keys (relative offsets) and positions strictly increase; time index
//! timestamps strictly increase. An offset entry `(rel, pos)` means the batch at file position
//! `pos` is the first one holding offsets >= `base + rel`. A time entry `(ts, rel)` means `ts` is
//! the largest timestamp of every batch before the one holding `base + rel`, and that batch has
//! max timestamp `ts`. The files are written on roll and close; after a crash they are rebuilt by
//! the recovery scan (see `loader`), so a stale file is never trusted on an unclean start.

use std::fs;
use std::io::Write;
use std::path::Path;

use crate::error::{LogError, Result};

/// Size of one offset index entry on disk (relative offset u32 + position u32).
pub const OFFSET_ENTRY_SIZE: u64 = 8;
/// Size of one time index entry on disk (timestamp i64 + relative offset u32).
pub const TIME_ENTRY_SIZE: u64 = 12;

/// In-memory offset index: `(relative offset, file position)` pairs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    pub entries: Vec<(u32, u32)>,
}

impl OffsetIndex {
    /// Adds an entry if it keeps keys and positions increasing.
    pub fn append(&mut self, rel: u32, pos: u32) {
        match self.entries.last() {
            Some(&(r, p)) if r >= rel || p >= pos => {}
            _ => self.entries.push((rel, pos)),
        }
    }

    /// File position of the largest entry whose relative offset is <= `rel` (0 if none).
    pub fn lookup(&self, rel: u32) -> u32 {
        let i = self.entries.partition_point(|&(r, _)| r <= rel);
        if i == 0 {
            0
        } else {
            self.entries[i - 1].1
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn write_to(&self, path: &Path) -> Result<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * OFFSET_ENTRY_SIZE as usize);
        for &(r, p) in &self.entries {
            buf.extend_from_slice(&r.to_be_bytes());
            buf.extend_from_slice(&p.to_be_bytes());
        }
        write_file_atomically(path, &buf)
    }

    /// Loads an index file; `None` if it is missing or not a whole number of valid entries.
    pub fn read_from(path: &Path) -> Result<Option<OffsetIndex>> {
        let Some(buf) = read_optional(path)? else {
            return Ok(None);
        };
        if !(buf.len() as u64).is_multiple_of(OFFSET_ENTRY_SIZE) {
            return Ok(None);
        }
        let mut idx = OffsetIndex::default();
        for c in buf.chunks_exact(OFFSET_ENTRY_SIZE as usize) {
            let r = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            let p = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
            if let Some(&(lr, lp)) = idx.entries.last() {
                if r <= lr || p <= lp {
                    return Ok(None);
                }
            }
            idx.entries.push((r, p));
        }
        Ok(Some(idx))
    }
}

/// In-memory time index: `(max timestamp so far, relative offset of the batch holding it)`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeIndex {
    pub entries: Vec<(i64, u32)>,
}

impl TimeIndex {
    /// Adds an entry if the timestamp grew.
    pub fn maybe_append(&mut self, ts: i64, rel: u32) {
        match self.entries.last() {
            Some(&(t, r)) if t >= ts || r > rel => {}
            _ => self.entries.push((ts, rel)),
        }
    }

    /// Relative offset of the largest entry with timestamp strictly below `ts`: every batch
    /// before that offset's batch has only timestamps < `ts`. `None` means "scan from the start".
    pub fn lookup_below(&self, ts: i64) -> Option<u32> {
        let i = self.entries.partition_point(|&(t, _)| t < ts);
        if i == 0 {
            None
        } else {
            Some(self.entries[i - 1].1)
        }
    }

    pub fn last(&self) -> Option<(i64, u32)> {
        self.entries.last().copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn write_to(&self, path: &Path) -> Result<()> {
        let mut buf = Vec::with_capacity(self.entries.len() * TIME_ENTRY_SIZE as usize);
        for &(t, r) in &self.entries {
            buf.extend_from_slice(&t.to_be_bytes());
            buf.extend_from_slice(&r.to_be_bytes());
        }
        write_file_atomically(path, &buf)
    }

    pub fn read_from(path: &Path) -> Result<Option<TimeIndex>> {
        let Some(buf) = read_optional(path)? else {
            return Ok(None);
        };
        if !(buf.len() as u64).is_multiple_of(TIME_ENTRY_SIZE) {
            return Ok(None);
        }
        let mut idx = TimeIndex::default();
        for c in buf.chunks_exact(TIME_ENTRY_SIZE as usize) {
            let mut t = [0u8; 8];
            t.copy_from_slice(&c[..8]);
            let t = i64::from_be_bytes(t);
            let r = u32::from_be_bytes([c[8], c[9], c[10], c[11]]);
            if let Some(&(lt, lr)) = idx.entries.last() {
                if t <= lt || r < lr {
                    return Ok(None);
                }
            }
            idx.entries.push((t, r));
        }
        Ok(Some(idx))
    }
}

pub(crate) fn read_optional(path: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(LogError::io_at(path)(e)),
    }
}

/// Writes `path` through a temporary file, fsync and rename, so readers see the old or the new
/// content, never a mix.
pub(crate) fn write_file_atomically(path: &Path, data: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = fs::File::create(&tmp).map_err(LogError::io_at(&tmp))?;
        f.write_all(data).map_err(LogError::io_at(&tmp))?;
        f.sync_all().map_err(LogError::io_at(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(LogError::io_at(path))?;
    Ok(())
}
