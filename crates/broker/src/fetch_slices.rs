//! Consumer reads planned as ranges of segment files, which a plaintext connection's writer
//! sends with `sendfile` or streams (issue 16): [`Partition::read_slices`] and [`Partition::read_committed_slices`]
//! cover exactly the batches [`Partition::read`] and [`Partition::read_committed`] return,
//! joined across segments the same way, without reading them.
//!
//! Only consumer fetches take this path: a leader checks the CRC of every batch it sends a
//! follower (`crate::corruption`), which needs the bytes.

use ferry_log::{AbortedTxn, FileSlice, LogError};

use crate::replica_manager::Partition;

/// Whole batches of a partition as ranges of its segment files, in log order.
#[derive(Clone, Debug, Default)]
pub struct FetchSlices {
    pub slices: Vec<FileSlice>,
    /// Bytes in all the slices.
    pub len: usize,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

impl FetchSlices {
    /// The last offset of the last batch, if any.
    pub fn last_offset(&self) -> Option<i64> {
        self.slices.last().map(|s| s.last_offset)
    }

    /// The batches' bytes, read now (the copying path).
    pub fn read(&self) -> Result<bytes::Bytes, LogError> {
        match self.slices.as_slice() {
            [] => Ok(bytes::Bytes::new()),
            [one] => one.read(),
            more => {
                let mut out = bytes::BytesMut::with_capacity(self.len);
                for s in more {
                    out.extend_from_slice(&s.read()?);
                }
                Ok(out.freeze())
            }
        }
    }
}

impl Partition {
    /// [`Partition::read`], planned: the same batches, up to the high watermark.
    pub fn read_slices(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FetchSlices, LogError> {
        self.read_slices_up_to(offset, max_bytes, min_one_batch, self.high_watermark())
    }

    /// [`Partition::read_committed`], planned: the same batches, up to the last stable offset,
    /// with the aborted transactions that overlap them.
    pub fn read_committed_slices(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<(FetchSlices, Vec<AbortedTxn>), LogError> {
        let last_stable = self.last_stable_offset();
        let data = self.read_slices_up_to(offset, max_bytes, min_one_batch, last_stable)?;
        let upper = data.last_offset().map_or(offset, |last| last + 1);
        let aborted = if upper > offset {
            self.log.collect_aborted_transactions(offset, upper)
        } else {
            Vec::new()
        };
        Ok((data, aborted))
    }

    /// `read_up_to`'s joins, planned: one segment's plan ends at its end or at the last whole
    /// batch that fits; only in the first case does the next segment's plan add more.
    fn read_slices_up_to(
        &self,
        offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
        high_watermark: i64,
    ) -> Result<FetchSlices, LogError> {
        let first =
            self.checked(
                self.log
                    .read_slice(offset, max_bytes, high_watermark, min_one_batch),
            )?;
        let mut out = FetchSlices {
            slices: Vec::new(),
            len: 0,
            log_start_offset: first.log_start_offset,
            log_end_offset: first.log_end_offset,
        };
        let Some(slice) = first.slice else {
            return Ok(out);
        };
        let mut next = slice.last_offset + 1;
        out.len = slice.len;
        out.slices.push(slice);
        while out.len < max_bytes && next < high_watermark {
            let more = self.checked(self.log.read_slice(
                next,
                max_bytes - out.len,
                high_watermark,
                false,
            ))?;
            let Some(slice) = more.slice else {
                break;
            };
            let last = slice.last_offset;
            out.len += slice.len;
            out.slices.push(slice);
            if last < next {
                break;
            }
            next = last + 1;
        }
        Ok(out)
    }
}
