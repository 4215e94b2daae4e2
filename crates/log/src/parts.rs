//! Record batches laid end to end over several buffers: a remote-WAL slice in the pieces its
//! GET body arrived in. A follower appends them without joining them into one buffer (which
//! copied every downloaded byte): the batch headers are read where they lie (a 61-byte copy
//! for a header that straddles two pieces), and the bytes go to the segment in one `pwritev`.

use std::fs::File;
use std::io::{self, IoSlice};

use crate::batch::{scan_batch_with, scan_header, BatchCrcs, BatchHeader, Scan, HEADER_SIZE};
use crate::error::{LogError, Result};
use crate::txn::TxnMarker;

/// The control batches' markers among some batches: `(index in their headers, marker)`.
pub(crate) type Markers = Vec<(usize, TxnMarker)>;

/// The headers of the batches laid over `parts`, in order, and the markers of their control
/// batches (`(index in the headers, marker)`). The checks are [`scan_batch_with`]'s; a batch
/// that straddles two parts is copied into one buffer only when its bytes must be read whole
/// (a CRC to check, a control batch's marker), else only its header is.
pub(crate) fn scan_follower_batches(
    parts: &[&[u8]],
    crcs: BatchCrcs,
) -> Result<(Vec<BatchHeader>, Markers)> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut headers: Vec<BatchHeader> = Vec::new();
    let mut markers: Markers = Vec::new();
    let mut cursor = Cursor {
        parts,
        part: 0,
        offset: 0,
    };
    let mut pos = 0usize;
    let mut whole = Vec::new();
    while pos < total {
        cursor.skip_empty();
        let here = cursor.here();
        let available = total - pos;
        let scan = match scan_batch_with(here, crcs) {
            // The batch goes on into the next part.
            Scan::Torn if here.len() < available => {
                let mut header = [0u8; HEADER_SIZE];
                let n = HEADER_SIZE.min(available);
                cursor.peek(&mut header[..n]);
                match scan_header(&header[..n], available) {
                    Scan::Valid(h) if crcs == BatchCrcs::AlreadyVerified && !h.is_control() => {
                        Scan::Valid(h)
                    }
                    Scan::Valid(h) => {
                        whole.clear();
                        whole.resize(h.total_size(), 0);
                        cursor.peek(&mut whole);
                        scan_batch_with(&whole, crcs)
                    }
                    other => other,
                }
            }
            other => other,
        };
        let h = match scan {
            Scan::Valid(h) => h,
            Scan::Torn => {
                return Err(LogError::CorruptMessage(format!(
                    "record set ends inside a batch at byte {pos}"
                )))
            }
            Scan::Corrupt(why) => return Err(LogError::CorruptMessage(why)),
        };
        let size = h.total_size();
        if h.is_control() {
            let batch = if size <= here.len() {
                &here[..size]
            } else {
                // Copied into `whole` above: a control batch that straddles two parts.
                &whole[..]
            };
            if let Some(m) = TxnMarker::from_control_batch(batch)? {
                markers.push((headers.len(), m));
            }
        }
        cursor.advance(size);
        pos += size;
        headers.push(h);
    }
    Ok((headers, markers))
}

/// The header of the first batch laid over `parts` (read across them if it straddles two);
/// `None` when they hold less than a header.
pub fn first_batch_header(parts: &[&[u8]]) -> Option<BatchHeader> {
    if parts.iter().map(|p| p.len()).sum::<usize>() < HEADER_SIZE {
        return None;
    }
    let mut header = [0u8; HEADER_SIZE];
    Cursor {
        parts,
        part: 0,
        offset: 0,
    }
    .peek(&mut header);
    BatchHeader::parse(&header)
}

/// A position in `parts` laid end to end.
struct Cursor<'a> {
    parts: &'a [&'a [u8]],
    part: usize,
    offset: usize,
}

impl Cursor<'_> {
    /// Moves past finished and empty parts.
    fn skip_empty(&mut self) {
        while self
            .parts
            .get(self.part)
            .is_some_and(|p| self.offset >= p.len())
        {
            self.part += 1;
            self.offset = 0;
        }
    }

    /// The rest of the current part.
    fn here(&self) -> &[u8] {
        self.parts
            .get(self.part)
            .map_or(&[][..], |p| &p[self.offset..])
    }

    /// Copies the next `out.len()` bytes into `out` without moving (the caller checked that
    /// they are there).
    fn peek(&self, out: &mut [u8]) {
        let (mut part, mut offset, mut at) = (self.part, self.offset, 0);
        while at < out.len() {
            let Some(p) = self.parts.get(part) else {
                return;
            };
            let n = (p.len() - offset).min(out.len() - at);
            out[at..at + n].copy_from_slice(&p[offset..offset + n]);
            at += n;
            part += 1;
            offset = 0;
        }
    }

    /// Moves `n` bytes on.
    fn advance(&mut self, mut n: usize) {
        while n > 0 {
            let Some(p) = self.parts.get(self.part) else {
                return;
            };
            let step = (p.len() - self.offset).min(n);
            n -= step;
            self.offset += step;
            if self.offset == p.len() {
                self.part += 1;
                self.offset = 0;
            }
        }
    }
}

/// `pwritev` takes at most this many buffers a call (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Writes `parts` laid end to end at `offset` of `file`: one `pwrite` for one part, else
/// `pwritev` calls until all is written.
pub(crate) fn write_all_parts_at(file: &File, parts: &[&[u8]], mut offset: u64) -> io::Result<()> {
    if let [one] = parts {
        return std::os::unix::fs::FileExt::write_all_at(file, one, offset);
    }
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = rest.len().min(IOV_MAX);
        match rustix::io::pwritev(file, &rest[..n], offset) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(written) => {
                offset += written as u64;
                IoSlice::advance_slices(&mut rest, written);
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "parts_test.rs"]
mod tests;
