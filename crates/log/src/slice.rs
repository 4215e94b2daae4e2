//! Reads planned, not made: [`PartitionLog::read_slice`] answers a fetch with the byte range of
//! one segment file that [`PartitionLog::read`] would return for the same arguments, without
//! reading that range. The broker sends it with `sendfile` (issue 16), so record bytes go from
//! the page cache to the socket without a copy through user space.
//!
//! Invariants: a [`FileSlice`] covers whole batches of one segment file, from the batch holding
//! the fetch offset; every batch in it ends below the size published when it was planned (the
//! appender only writes past that size), and its last offset is below the `max_offset` of the
//! plan. The slice holds the segment's open file: a segment deleted (retention) after planning
//! stays readable through it; a segment truncated below the slice (a follower's truncation, a
//! DeleteRecords that removed it and its file was reused) makes a later read of it come up
//! short, which the sender must treat as an error, never as data.

use std::sync::Arc;

use bytes::Bytes;
use tracing::warn;

use crate::batch::HEADER_SIZE;
use crate::error::Result;
use crate::log::PartitionLog;
use crate::segment::SegmentFile;

/// A planned read: `len` bytes of whole batches at `position` in one segment file.
#[derive(Clone, Debug)]
pub struct FileSlice {
    /// The segment's open `.log` file (kept open while the slice lives).
    pub file: Arc<SegmentFile>,
    pub position: u64,
    pub len: usize,
    /// The last offset of the last batch in the slice.
    pub last_offset: i64,
}

impl FileSlice {
    /// The slice's bytes, read now (the copying path, for callers that cannot send a file).
    pub fn read(&self) -> Result<Bytes> {
        self.file
            .read_exact_at(self.position, self.len)
            .map(Bytes::from)
    }
}

/// What [`PartitionLog::read_slice`] planned: `slice` is `None` where [`PartitionLog::read`]
/// returns no records.
#[derive(Clone, Debug)]
pub struct SliceData {
    pub slice: Option<FileSlice>,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

impl PartitionLog {
    /// Plans the read [`PartitionLog::read`] makes with the same arguments: the same batches
    /// (from the one holding `offset`, whole, within `max_bytes` unless `min_one_batch` lets
    /// the first exceed it, with last offsets below `max_offset`), as a range of one segment
    /// file. Batch headers are read (a small pread each) to find where to cut; record bytes
    /// are not.
    pub fn read_slice(
        &self,
        offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<SliceData> {
        let start = self.read_start(offset, max_offset)?;
        let (log_start_offset, log_end_offset) = (start.log_start_offset, start.log_end_offset);
        let planned = |slice| SliceData {
            slice,
            log_start_offset,
            log_end_offset,
        };
        let Some((file, pos, h, size)) = start.batch else {
            return Ok(planned(None));
        };
        let first = h.total_size();
        let avail = (size - pos) as usize;
        let want = max_bytes.min(avail);
        if want < first {
            if !min_one_batch {
                return Ok(planned(None));
            }
            return Ok(planned(Some(FileSlice {
                file,
                position: pos,
                len: first,
                last_offset: h.last_offset(),
            })));
        }
        // The same cut as `read`'s walk over the bytes it read: whole batches within `want`,
        // each ending below `max_offset`.
        let limit = pos + want as u64;
        let mut len = first;
        let mut last_offset = h.last_offset();
        // The offset index names batch starts, so the walk can resume near the cut and read
        // only the headers after that point (one `pread` per batch otherwise, 7 % of a broker's
        // CPU when it streams many partitions' records). The batch where it resumes must be
        // part of the cut; should the index say otherwise, walk from the first batch.
        let resume_at = self
            .state
            .read()
            .indexed_walk_start(&file, limit, max_offset)
            .filter(|&at| at > pos + len as u64);
        if let Some(at) = resume_at {
            match file.header_at(at, limit)? {
                Some(h) if h.last_offset() < max_offset => {
                    len = (at - pos) as usize + h.total_size();
                    last_offset = h.last_offset();
                }
                _ => warn!(
                    path = %file.path.display(),
                    position = at,
                    "offset index names no batch that fits; reading every header"
                ),
            }
        }
        while len + HEADER_SIZE <= want {
            let Some(next) = file.header_at(pos + len as u64, limit)? else {
                break;
            };
            if next.last_offset() >= max_offset {
                break;
            }
            len += next.total_size();
            last_offset = next.last_offset();
        }
        Ok(planned(Some(FileSlice {
            file,
            position: pos,
            len,
            last_offset,
        })))
    }
}
