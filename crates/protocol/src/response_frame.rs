//! A response frame in pieces: the encoded fields, with large record sets referenced where they
//! already are (in memory, or in a segment file) instead of copied into the frame.
//!
//! A Fetch response is almost all record bytes. The `kafka-protocol` codecs write a record set
//! with one `put_slice` of the whole `Bytes`, so a buffer that recognises those slices by address
//! can keep a reference to the `Bytes` and start a new piece after it. The writer sends the
//! in-memory pieces with vectored writes.
//!
//! Record sets that stay in their files (issue 16) travel through the response as placeholders:
//! [`FileRecords::placeholder`] hands out a `Bytes` of the record set's length, a slice of a
//! static zeroed region that is never read (untouched, it takes no memory), and maps it to the
//! file regions it stands for. The encoder's `put_slice` of a placeholder becomes file pieces,
//! which a plaintext writer sends with `sendfile` and any other writer reads with `pread`.
//!
//! Invariants: a placeholder is never copied into a frame. A frame holding one that its
//! [`FileRecords`] does not map, or one the encoder wrote into a single buffer, is an encoding
//! error (the connection closes) rather than a frame of zeros. A file piece that reads short
//! (its segment was truncated under the fetch) is an I/O error for the writer, never data.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, IoSlice};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Record sets smaller than this are copied: a piece per tiny slice costs more than the copy.
const SHARE_AT_LEAST: usize = 4096;

/// Slack at the start of the placeholder region: placeholder `k` of a response starts at byte
/// `k`, so each has its own address.
const PLACEHOLDER_SLOTS: usize = 64 * 1024;
/// The largest record set a placeholder stands for (above Kafka's `fetch.max.bytes` default of
/// 55 MiB, and ferry's 31 MiB);
/// a larger one is read into memory by the caller.
const PLACEHOLDER_MAX_LEN: usize = 64 << 20;
/// Addresses for placeholders, never read or written (so never resident).
static PLACEHOLDER_SPACE: [u8; PLACEHOLDER_SLOTS + PLACEHOLDER_MAX_LEN] =
    [0; PLACEHOLDER_SLOTS + PLACEHOLDER_MAX_LEN];

/// Whether `src` lies in the placeholder region.
fn is_placeholder(src: &[u8]) -> bool {
    let start = PLACEHOLDER_SPACE.as_ptr() as usize;
    let addr = src.as_ptr() as usize;
    !src.is_empty() && addr >= start && addr < start + PLACEHOLDER_SPACE.len()
}

/// Whether any record set of `records` is a placeholder.
pub(crate) fn any_placeholder<'a>(mut records: impl Iterator<Item = &'a Bytes>) -> bool {
    records.any(|r| is_placeholder(r))
}

/// A byte range of an open file (a segment's `.log`), sent as it is. The `Arc` keeps the file
/// open while the frame lives, so a segment deleted meanwhile is still read from.
#[derive(Clone)]
pub struct FileRegion {
    file: Arc<dyn AsFd + Send + Sync>,
    position: u64,
    len: usize,
}

impl fmt::Debug for FileRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRegion")
            .field("fd", &self.file.as_fd())
            .field("position", &self.position)
            .field("len", &self.len)
            .finish()
    }
}

impl FileRegion {
    pub fn new(file: Arc<dyn AsFd + Send + Sync>, position: u64, len: usize) -> Self {
        Self {
            file,
            position,
            len,
        }
    }

    pub fn position(&self) -> u64 {
        self.position
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region's bytes, read now (pread); an error if the file ends before them.
    pub fn read(&self) -> io::Result<Bytes> {
        let mut buf = Vec::with_capacity(self.len);
        while buf.len() < self.len {
            let at = self.position + buf.len() as u64;
            let spare = rustix::buffer::spare_capacity(&mut buf);
            match rustix::io::pread(self.file.as_fd(), spare, at) {
                Ok(0) => return Err(short_file(self.len - buf.len())),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Bytes::from(buf))
    }

    /// Reads the region's first `buf.len()` bytes (at most) into `buf` with `pread`: the bytes
    /// read, 0 only when the file ends before the region does.
    pub fn read_front(&self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(self.len);
        loop {
            match rustix::io::pread(self.file.as_fd(), &mut buf[..want], self.position) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Sends what the socket takes of the region with one `sendfile` (no copy through user
    /// space): the bytes sent, 0 only when the file ends before the region does. A socket
    /// that takes nothing now is `WouldBlock`.
    pub fn send_to(&self, socket: BorrowedFd<'_>) -> io::Result<usize> {
        let mut at = self.position;
        loop {
            match rustix::fs::sendfile(socket, self.file.as_fd(), Some(&mut at), self.len) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn advance(&mut self, n: usize) {
        let n = n.min(self.len);
        self.position += n as u64;
        self.len -= n;
    }
}

/// The error of a file piece whose file ended `missing` bytes early.
pub fn short_file(missing: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!(
            "segment file ended {missing} bytes before a fetched range (truncated under the fetch)"
        ),
    )
}

/// The record sets of one Fetch response that stay in their files: placeholders in the
/// response, each mapped to the file regions it stands for, in order.
#[derive(Debug, Default)]
pub struct FileRecords {
    /// (placeholder address, length, regions).
    entries: Vec<(usize, usize, Vec<FileRegion>)>,
}

impl FileRecords {
    pub fn new() -> Self {
        Self::default()
    }

    /// A placeholder for the record set made of `regions` in order, to put in the response in
    /// its place; `None` when there is nothing to send or no room for it (the caller reads the
    /// regions instead).
    pub fn placeholder(&mut self, regions: Vec<FileRegion>) -> Option<Bytes> {
        let len: usize = regions.iter().map(FileRegion::len).sum();
        let slot = self.entries.len();
        if len == 0 || len > PLACEHOLDER_MAX_LEN || slot >= PLACEHOLDER_SLOTS {
            return None;
        }
        let placeholder = Bytes::from_static(&PLACEHOLDER_SPACE[slot..slot + len]);
        self.entries
            .push((placeholder.as_ptr() as usize, len, regions));
        Some(placeholder)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every placeholder (their response was dropped: a long-polling fetch reads
    /// again).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

/// One piece of a frame: bytes in memory, or a range of a file.
#[derive(Clone, Debug)]
pub enum Piece {
    Memory(Bytes),
    File(FileRegion),
}

impl Piece {
    fn len(&self) -> usize {
        match self {
            Piece::Memory(b) => b.len(),
            Piece::File(f) => f.len(),
        }
    }
}

/// An encoded response, length prefix included, ready to write to the socket: one or more
/// pieces sent in order, consumed ([`ResponseFrame::advance`]) as they are written.
#[derive(Clone, Debug, Default)]
pub struct ResponseFrame {
    pieces: VecDeque<Piece>,
    remaining: usize,
}

impl ResponseFrame {
    /// A frame of one contiguous buffer.
    pub fn contiguous(bytes: Bytes) -> Self {
        Self::from_pieces(vec![Piece::Memory(bytes)])
    }

    pub(crate) fn from_pieces(pieces: Vec<Piece>) -> Self {
        let remaining = pieces.iter().map(Piece::len).sum();
        Self {
            pieces: pieces.into_iter().filter(|p| p.len() > 0).collect(),
            remaining,
        }
    }

    /// Bytes not yet consumed (the whole frame before writing).
    pub fn len(&self) -> usize {
        self.remaining
    }

    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// How many pieces remain.
    pub fn piece_count(&self) -> usize {
        self.pieces.len()
    }

    /// How many of the remaining pieces are file ranges.
    pub fn file_piece_count(&self) -> usize {
        self.pieces
            .iter()
            .filter(|p| matches!(p, Piece::File(_)))
            .count()
    }

    /// The in-memory pieces at the front, up to the first file piece, as slices for a
    /// vectored write; how many were filled in.
    pub fn memory_slices<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, piece) in dst.iter_mut().zip(&self.pieces) {
            let Piece::Memory(b) = piece else { break };
            *slot = IoSlice::new(b);
            n += 1;
        }
        n
    }

    /// The front piece when it is a file range (what is left of it).
    pub fn front_file(&self) -> Option<&FileRegion> {
        match self.pieces.front() {
            Some(Piece::File(f)) => Some(f),
            _ => None,
        }
    }

    /// Consumes `cnt` written bytes (at most what remains).
    pub fn advance(&mut self, mut cnt: usize) {
        cnt = cnt.min(self.remaining);
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.pieces.front_mut() else {
                break;
            };
            let len = front.len();
            if cnt < len {
                match front {
                    Piece::Memory(b) => bytes::Buf::advance(b, cnt),
                    Piece::File(f) => f.advance(cnt),
                }
                break;
            }
            cnt -= len;
            self.pieces.pop_front();
        }
    }

    /// The remaining bytes in one buffer: copies when there are several pieces, and reads
    /// file pieces (an error if a file ends early).
    pub fn to_bytes(&self) -> io::Result<Bytes> {
        match self.pieces.front() {
            None => return Ok(Bytes::new()),
            Some(Piece::Memory(b)) if self.pieces.len() == 1 => return Ok(b.clone()),
            _ => {}
        }
        let mut out = BytesMut::with_capacity(self.remaining);
        for p in &self.pieces {
            match p {
                Piece::Memory(b) => out.extend_from_slice(b),
                Piece::File(f) => out.extend_from_slice(&f.read()?),
            }
        }
        Ok(out.freeze())
    }
}

/// A record set the encoder may reference instead of copying.
enum Shared {
    Memory(Bytes),
    Files(Vec<FileRegion>),
}

/// The buffer an encoder writes into: plain bytes go to `head`; a `put_slice` of one of the
/// `shared` record sets ends the current piece and references the record set (in memory, or
/// in its files for a placeholder).
pub(crate) struct PieceBuf {
    /// Record sets that may be referenced, sorted by address: (address, length, what).
    shared: Vec<(usize, usize, Shared)>,
    /// Finished pieces.
    done: Vec<Piece>,
    /// Bytes in `done`.
    done_len: usize,
    head: BytesMut,
    /// Set when an encoder went back into a finished piece (a gap): the caller encodes again
    /// into one buffer. The Fetch codecs use no gaps; this keeps any other case correct.
    went_back: bool,
    /// Set when a placeholder was put that `shared` does not map: the frame cannot be made.
    unmapped_placeholder: bool,
    scratch: Vec<u8>,
}

impl PieceBuf {
    /// A buffer for a frame of `frame_len` bytes in all, of which the `shared` record sets
    /// (those large enough) and the placeholders of `files` are referenced; the rest is
    /// reserved up front, as one buffer would be (each piece taken from `head` leaves it the
    /// remaining capacity).
    pub(crate) fn new(
        frame_len: usize,
        shared: impl IntoIterator<Item = Bytes>,
        files: FileRecords,
    ) -> Self {
        let mut shared: Vec<(usize, usize, Shared)> = shared
            .into_iter()
            .filter(|b| b.len() >= SHARE_AT_LEAST && !is_placeholder(b))
            .map(|b| (b.as_ptr() as usize, b.len(), Shared::Memory(b)))
            .chain(
                files
                    .entries
                    .into_iter()
                    .map(|(addr, len, regions)| (addr, len, Shared::Files(regions))),
            )
            .collect();
        shared.sort_by_key(|s| s.0);
        let shared_len: usize = shared.iter().map(|s| s.1).sum();
        Self {
            shared,
            done: Vec::new(),
            done_len: 0,
            head: BytesMut::with_capacity(frame_len.saturating_sub(shared_len)),
            went_back: false,
            unmapped_placeholder: false,
            scratch: Vec::new(),
        }
    }

    /// The pieces record set `src` is, if it is one of `shared` exactly.
    fn shared_for(&self, src: &[u8]) -> Option<Vec<Piece>> {
        let placeholder = is_placeholder(src);
        if src.len() < SHARE_AT_LEAST && !placeholder {
            return None;
        }
        let addr = src.as_ptr() as usize;
        let i = self.shared.partition_point(|s| s.0 < addr);
        match self.shared.get(i) {
            Some((a, len, what)) if *a == addr && *len == src.len() => Some(match what {
                Shared::Memory(b) => vec![Piece::Memory(b.clone())],
                Shared::Files(regions) => regions.iter().cloned().map(Piece::File).collect(),
            }),
            _ => None,
        }
    }

    /// The pieces, or `None` if the encoder went back into a finished piece or put a
    /// placeholder nothing maps.
    pub(crate) fn finish(mut self) -> Option<Vec<Piece>> {
        if self.went_back || self.unmapped_placeholder {
            return None;
        }
        if !self.head.is_empty() {
            self.done.push(Piece::Memory(self.head.freeze()));
        }
        Some(self.done)
    }
}

unsafe impl BufMut for PieceBuf {
    fn remaining_mut(&self) -> usize {
        self.head.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: forwarded to `head`, whose chunk_mut the caller initialised `cnt` bytes of.
        unsafe { self.head.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.head.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        match self.shared_for(src) {
            Some(pieces) => {
                if !self.head.is_empty() {
                    let piece = self.head.split().freeze();
                    self.done_len += piece.len();
                    self.done.push(Piece::Memory(piece));
                }
                self.done_len += src.len();
                self.done.extend(pieces);
            }
            None if is_placeholder(src) => {
                // Never copy a placeholder's zeros: the frame fails at finish.
                self.unmapped_placeholder = true;
            }
            None => self.head.extend_from_slice(src),
        }
    }
}

impl ByteBufMut for PieceBuf {
    fn offset(&self) -> usize {
        self.done_len + self.head.len()
    }

    fn seek(&mut self, offset: usize) {
        match offset.checked_sub(self.done_len) {
            Some(in_head) => self.head.resize(in_head, 0),
            None => self.went_back = true,
        }
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let start = r.start.checked_sub(self.done_len);
        let end = r.end.checked_sub(self.done_len);
        match (start, end) {
            (Some(s), Some(e)) if s <= e && e <= self.head.len() => &mut self.head[s..e],
            _ => {
                self.went_back = true;
                self.scratch.clear();
                self.scratch.resize(r.len(), 0);
                &mut self.scratch
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn memory(p: &Piece) -> &Bytes {
        match p {
            Piece::Memory(b) => b,
            Piece::File(f) => panic!("a file piece: {f:?}"),
        }
    }

    #[test]
    fn a_shared_record_set_is_referenced_not_copied() {
        let records = Bytes::from(vec![7u8; 10_000]);
        let mut buf = PieceBuf::new(64, [records.clone()], FileRecords::new());
        buf.put_i32(5);
        buf.put_slice(&records);
        buf.put_i16(1);
        let pieces = buf.finish().expect("no gap used");
        assert_eq!(pieces.len(), 3);
        assert_eq!(
            memory(&pieces[1]).as_ptr(),
            records.as_ptr(),
            "the record set itself"
        );
        let frame = ResponseFrame::from_pieces(pieces);
        assert_eq!(frame.len(), 4 + 10_000 + 2);
        let flat = frame.to_bytes().unwrap();
        assert_eq!(&flat[..4], &5i32.to_be_bytes());
        assert_eq!(&flat[4..10_004], &records[..]);
        assert_eq!(&flat[10_004..], &1i16.to_be_bytes());
    }

    #[test]
    fn small_or_unknown_slices_are_copied() {
        let small = Bytes::from(vec![1u8; 100]);
        let other = vec![2u8; 10_000];
        let mut buf = PieceBuf::new(64, [small.clone()], FileRecords::new());
        buf.put_slice(&small);
        buf.put_slice(&other);
        // A sub-slice of a shared record set is not the record set.
        let big = Bytes::from(vec![3u8; 10_000]);
        let mut buf2 = PieceBuf::new(64, [big.clone()], FileRecords::new());
        buf2.put_slice(&big[1..]);
        assert_eq!(buf.finish().expect("no gap").len(), 1);
        assert_eq!(buf2.finish().expect("no gap").len(), 1);
    }

    #[test]
    fn going_back_into_a_finished_piece_is_reported() {
        let records = Bytes::from(vec![7u8; 10_000]);
        let mut buf = PieceBuf::new(64, [records.clone()], FileRecords::new());
        let gap = buf.put_gap(4);
        buf.put_slice(&records);
        buf.gap_buf(gap).copy_from_slice(&[0, 0, 0, 1]);
        assert!(buf.finish().is_none());
    }

    #[test]
    fn a_gap_inside_the_current_piece_is_filled_in_place() {
        let mut buf = PieceBuf::new(64, [], FileRecords::new());
        let gap = buf.put_gap(4);
        buf.put_i16(9);
        buf.gap_buf(gap).copy_from_slice(&[0, 0, 0, 1]);
        let pieces = buf.finish().expect("gap in the head");
        assert_eq!(&memory(&pieces[0])[..], &[0, 0, 0, 1, 0, 9]);
    }

    #[test]
    fn advancing_walks_across_pieces() {
        let mut frame = ResponseFrame::from_pieces(vec![
            Piece::Memory(Bytes::from_static(b"ab")),
            Piece::Memory(Bytes::from_static(b"cde")),
            Piece::Memory(Bytes::from_static(b"f")),
        ]);
        assert_eq!(frame.memory_slices(&mut [IoSlice::new(&[]); 8]), 3);
        frame.advance(3);
        assert_eq!(frame.to_bytes().unwrap(), &b"def"[..]);
        assert_eq!(frame.len(), 3);
        frame.advance(10);
        assert!(frame.is_empty());
        assert_eq!(frame.memory_slices(&mut [IoSlice::new(&[]); 8]), 0);
    }

    /// A temp file holding `bytes`, open for reading.
    fn file_of(bytes: &[u8]) -> Arc<std::fs::File> {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(bytes).unwrap();
        Arc::new(f)
    }

    #[test]
    fn a_placeholder_becomes_its_file_pieces_at_any_size() {
        let content: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let file = file_of(&content);
        let mut files = FileRecords::new();
        let small = files
            .placeholder(vec![FileRegion::new(file.clone(), 5, 10)])
            .unwrap();
        let two = files
            .placeholder(vec![
                FileRegion::new(file.clone(), 100, 8_000),
                FileRegion::new(file.clone(), 9_000, 3_000),
            ])
            .unwrap();
        assert_eq!((small.len(), two.len()), (10, 11_000));
        assert_ne!(
            small.as_ptr(),
            two.as_ptr(),
            "each placeholder has its own address"
        );
        let mut buf = PieceBuf::new(64, [small.clone(), two.clone()], files);
        buf.put_i16(1);
        buf.put_slice(&small);
        buf.put_i16(2);
        buf.put_slice(&two);
        let frame = ResponseFrame::from_pieces(buf.finish().expect("mapped"));
        assert_eq!(frame.file_piece_count(), 3);
        let mut want = vec![0, 1];
        want.extend_from_slice(&content[5..15]);
        want.extend_from_slice(&[0, 2]);
        want.extend_from_slice(&content[100..8_100]);
        want.extend_from_slice(&content[9_000..12_000]);
        assert_eq!(frame.to_bytes().unwrap(), want);
        // Consumed part way into a file piece, the rest reads from where it was left.
        let mut part = frame.clone();
        part.advance(2 + 10 + 2 + 50);
        assert_eq!(part.front_file().unwrap().position(), 150);
        assert_eq!(part.to_bytes().unwrap(), &want[64..]);
    }

    #[test]
    fn an_unmapped_placeholder_fails_the_frame_and_a_short_file_is_an_error() {
        let file = file_of(&[9u8; 100]);
        let mut files = FileRecords::new();
        let p = files
            .placeholder(vec![FileRegion::new(file.clone(), 0, 100)])
            .unwrap();
        // Encoded without its mapping: no frame of zeros.
        let mut buf = PieceBuf::new(64, [p.clone()], FileRecords::new());
        buf.put_slice(&p);
        assert!(buf.finish().is_none());
        // A region past the file's end reads short: an error, not data.
        let past = FileRegion::new(file, 50, 100);
        assert_eq!(
            past.read().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert!(FileRecords::new().placeholder(Vec::new()).is_none());
    }
}
