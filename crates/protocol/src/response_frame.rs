//! A response frame in pieces: the encoded fields, with large record sets referenced where they
//! already are in memory instead of copied into the frame.
//!
//! A Fetch response is almost all record bytes, read from the log into their own buffers. The
//! `kafka-protocol` codecs write a record set with one `put_slice` of the whole `Bytes`, so a
//! buffer that recognises those slices by address can keep a reference to the `Bytes` and
//! start a new piece after it. The writer sends the pieces with one vectored write.

use std::io::IoSlice;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

/// Record sets smaller than this are copied: a piece per tiny slice costs more than the copy.
const SHARE_AT_LEAST: usize = 4096;

/// An encoded response, length prefix included, ready to write to the socket: one or more
/// pieces sent in order. As a [`Buf`] it is consumed by the write.
#[derive(Clone, Debug, Default)]
pub struct ResponseFrame {
    pieces: std::collections::VecDeque<Bytes>,
    remaining: usize,
}

impl ResponseFrame {
    /// A frame of one contiguous buffer.
    pub fn contiguous(bytes: Bytes) -> Self {
        let remaining = bytes.len();
        Self {
            pieces: std::iter::once(bytes).filter(|b| !b.is_empty()).collect(),
            remaining,
        }
    }

    pub(crate) fn from_pieces(pieces: Vec<Bytes>) -> Self {
        let remaining = pieces.iter().map(Bytes::len).sum();
        Self {
            pieces: pieces.into_iter().filter(|b| !b.is_empty()).collect(),
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

    /// The remaining bytes in one buffer (copies when there are several pieces).
    pub fn to_bytes(&self) -> Bytes {
        match self.pieces.len() {
            0 => Bytes::new(),
            1 => self.pieces[0].clone(),
            _ => {
                let mut out = BytesMut::with_capacity(self.remaining);
                for p in &self.pieces {
                    out.extend_from_slice(p);
                }
                out.freeze()
            }
        }
    }
}

impl Buf for ResponseFrame {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.pieces.front().map(|b| &b[..]).unwrap_or(&[])
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, piece) in dst.iter_mut().zip(&self.pieces) {
            *slot = IoSlice::new(piece);
            n += 1;
        }
        n
    }

    fn advance(&mut self, mut cnt: usize) {
        // Buf::advance may panic past the end; clamp instead, a frame never asks for that.
        cnt = cnt.min(self.remaining);
        self.remaining -= cnt;
        while cnt > 0 {
            let Some(front) = self.pieces.front_mut() else {
                break;
            };
            if cnt < front.len() {
                front.advance(cnt);
                break;
            }
            cnt -= front.len();
            self.pieces.pop_front();
        }
    }
}

/// The buffer an encoder writes into: plain bytes go to `head`; a `put_slice` of one of the
/// `shared` record sets ends the current piece and references the record set.
pub(crate) struct PieceBuf {
    /// Record sets that may be referenced, sorted by address: (address, length, bytes).
    shared: Vec<(usize, usize, Bytes)>,
    /// Finished pieces.
    done: Vec<Bytes>,
    /// Bytes in `done`.
    done_len: usize,
    head: BytesMut,
    /// Set when an encoder went back into a finished piece (a gap): the caller encodes again
    /// into one buffer. The Fetch codecs use no gaps; this keeps any other case correct.
    went_back: bool,
    scratch: Vec<u8>,
}

impl PieceBuf {
    /// A buffer for a frame of `frame_len` bytes in all, of which the `shared` record sets
    /// (those large enough) are referenced; the rest is reserved up front, as one buffer would
    /// be (each piece taken from `head` leaves it the remaining capacity).
    pub(crate) fn new(frame_len: usize, shared: impl IntoIterator<Item = Bytes>) -> Self {
        let mut shared: Vec<(usize, usize, Bytes)> = shared
            .into_iter()
            .filter(|b| b.len() >= SHARE_AT_LEAST)
            .map(|b| (b.as_ptr() as usize, b.len(), b))
            .collect();
        shared.sort_by_key(|s| s.0);
        let shared_len: usize = shared.iter().map(|s| s.1).sum();
        Self {
            shared,
            done: Vec::new(),
            done_len: 0,
            head: BytesMut::with_capacity(frame_len.saturating_sub(shared_len)),
            went_back: false,
            scratch: Vec::new(),
        }
    }

    /// The record set `src` is, if it is one of `shared` exactly.
    fn shared_for(&self, src: &[u8]) -> Option<Bytes> {
        if src.len() < SHARE_AT_LEAST {
            return None;
        }
        let addr = src.as_ptr() as usize;
        let i = self.shared.partition_point(|s| s.0 < addr);
        match self.shared.get(i) {
            Some((a, len, b)) if *a == addr && *len == src.len() => Some(b.clone()),
            _ => None,
        }
    }

    /// The pieces, or `None` if the encoder went back into a finished piece.
    pub(crate) fn finish(mut self) -> Option<Vec<Bytes>> {
        if self.went_back {
            return None;
        }
        if !self.head.is_empty() {
            self.done.push(self.head.freeze());
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
            Some(records) => {
                if !self.head.is_empty() {
                    let piece = self.head.split().freeze();
                    self.done_len += piece.len();
                    self.done.push(piece);
                }
                self.done_len += records.len();
                self.done.push(records);
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

    #[test]
    fn a_shared_record_set_is_referenced_not_copied() {
        let records = Bytes::from(vec![7u8; 10_000]);
        let mut buf = PieceBuf::new(64, [records.clone()]);
        buf.put_i32(5);
        buf.put_slice(&records);
        buf.put_i16(1);
        let pieces = buf.finish().expect("no gap used");
        assert_eq!(pieces.len(), 3);
        assert_eq!(
            pieces[1].as_ptr(),
            records.as_ptr(),
            "the record set itself"
        );
        let frame = ResponseFrame::from_pieces(pieces);
        assert_eq!(frame.len(), 4 + 10_000 + 2);
        let flat = frame.to_bytes();
        assert_eq!(&flat[..4], &5i32.to_be_bytes());
        assert_eq!(&flat[4..10_004], &records[..]);
        assert_eq!(&flat[10_004..], &1i16.to_be_bytes());
    }

    #[test]
    fn small_or_unknown_slices_are_copied() {
        let small = Bytes::from(vec![1u8; 100]);
        let other = vec![2u8; 10_000];
        let mut buf = PieceBuf::new(64, [small.clone()]);
        buf.put_slice(&small);
        buf.put_slice(&other);
        // A sub-slice of a shared record set is not the record set.
        let big = Bytes::from(vec![3u8; 10_000]);
        let mut buf2 = PieceBuf::new(64, [big.clone()]);
        buf2.put_slice(&big[1..]);
        assert_eq!(buf.finish().expect("no gap").len(), 1);
        assert_eq!(buf2.finish().expect("no gap").len(), 1);
    }

    #[test]
    fn going_back_into_a_finished_piece_is_reported() {
        let records = Bytes::from(vec![7u8; 10_000]);
        let mut buf = PieceBuf::new(64, [records.clone()]);
        let gap = buf.put_gap(4);
        buf.put_slice(&records);
        buf.gap_buf(gap).copy_from_slice(&[0, 0, 0, 1]);
        assert!(buf.finish().is_none());
    }

    #[test]
    fn a_gap_inside_the_current_piece_is_filled_in_place() {
        let mut buf = PieceBuf::new(64, []);
        let gap = buf.put_gap(4);
        buf.put_i16(9);
        buf.gap_buf(gap).copy_from_slice(&[0, 0, 0, 1]);
        let pieces = buf.finish().expect("gap in the head");
        assert_eq!(&pieces[0][..], &[0, 0, 0, 1, 0, 9]);
    }

    #[test]
    fn advancing_walks_across_pieces() {
        let mut frame = ResponseFrame::from_pieces(vec![
            Bytes::from_static(b"ab"),
            Bytes::from_static(b"cde"),
            Bytes::from_static(b"f"),
        ]);
        let mut slices = [IoSlice::new(&[]); 8];
        assert_eq!(frame.chunks_vectored(&mut slices), 3);
        frame.advance(3);
        assert_eq!(frame.chunk(), b"de");
        assert_eq!(frame.remaining(), 3);
        frame.advance(10);
        assert!(frame.is_empty());
        assert_eq!(frame.chunk(), b"");
    }
}
