//! A slice's bytes as views of the pieces its GET body arrived in.

use std::ops::Range;

use bytes::Bytes;

/// Bytes laid end to end over pieces: views of the buffers a GET body arrived in (tens of KB
/// each, fewer than a slice holds). Cutting a slice out of a body, checking it and appending
/// it copies nothing; joining the pieces into one buffer per slice copied every downloaded
/// byte (9 % of a follower broker's CPU at full load).
#[derive(Clone, Debug, Default)]
pub struct SliceBytes {
    pieces: Vec<Bytes>,
    len: usize,
}

impl SliceBytes {
    /// `pieces` laid end to end (empty ones dropped).
    pub fn from_pieces(pieces: impl IntoIterator<Item = Bytes>) -> Self {
        let pieces: Vec<Bytes> = pieces.into_iter().filter(|p| !p.is_empty()).collect();
        let len = pieces.iter().map(Bytes::len).sum();
        Self { pieces, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces, in order, none empty.
    pub fn pieces(&self) -> &[Bytes] {
        &self.pieces
    }

    /// CRC-32C (Castagnoli) of all the bytes.
    pub fn crc32c(&self) -> u32 {
        self.pieces
            .iter()
            .fold(0, |crc, p| crc32c::crc32c_append(crc, p))
    }

    /// Copies the `out.len()` bytes at `at` into `out`; false (and `out` unspecified) when fewer
    /// are there.
    pub fn copy_to(&self, at: usize, out: &mut [u8]) -> bool {
        if at.checked_add(out.len()).is_none_or(|end| end > self.len) {
            return false;
        }
        let mut skip = at;
        let mut filled = 0;
        for p in &self.pieces {
            if filled == out.len() {
                break;
            }
            if skip >= p.len() {
                skip -= p.len();
                continue;
            }
            let n = (p.len() - skip).min(out.len() - filled);
            out[filled..filled + n].copy_from_slice(&p[skip..skip + n]);
            filled += n;
            skip = 0;
        }
        true
    }

    /// Bytes `range` (clamped to what there is), as views of the same pieces.
    pub fn slice(&self, range: Range<usize>) -> SliceBytes {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        let mut pieces = Vec::new();
        let mut at = 0usize;
        for p in &self.pieces {
            let (p_start, p_end) = (at, at + p.len());
            at = p_end;
            if p_end <= start {
                continue;
            }
            if p_start >= end {
                break;
            }
            pieces.push(p.slice(start.max(p_start) - p_start..end.min(p_end) - p_start));
        }
        SliceBytes {
            pieces,
            len: end - start,
        }
    }

    /// The bytes in one buffer: the piece itself when there is one, else a joined copy.
    pub fn to_bytes(&self) -> Bytes {
        ferry_common::join_pieces(&self.pieces)
    }
}

impl From<Bytes> for SliceBytes {
    fn from(b: Bytes) -> Self {
        Self::from_pieces([b])
    }
}

impl From<Vec<u8>> for SliceBytes {
    fn from(b: Vec<u8>) -> Self {
        Self::from(Bytes::from(b))
    }
}

/// Equal when the bytes are, however they are cut into pieces.
impl PartialEq for SliceBytes {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.to_bytes() == other.to_bytes()
    }
}

impl Eq for SliceBytes {}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut_every(data: &[u8], step: usize) -> SliceBytes {
        SliceBytes::from_pieces(data.chunks(step).map(Bytes::copy_from_slice))
    }

    #[test]
    fn slices_reads_and_crcs_do_not_depend_on_the_pieces() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 256) as u8).collect();
        let whole = SliceBytes::from(data.clone());
        for step in [1, 3, 64, 999, 1000] {
            let s = cut_every(&data, step);
            assert_eq!(s.len(), 1000);
            assert_eq!(s.crc32c(), crc32c::crc32c(&data));
            assert_eq!(s, whole);
            for (a, b) in [
                (0, 0),
                (0, 1000),
                (5, 6),
                (63, 65),
                (500, 1000),
                (999, 1000),
            ] {
                let part = s.slice(a..b);
                assert_eq!(part.len(), b - a);
                assert_eq!(&part.to_bytes()[..], &data[a..b], "{step}: {a}..{b}");
                assert_eq!(part.crc32c(), crc32c::crc32c(&data[a..b]));
                let mut out = vec![0u8; b - a];
                assert!(s.copy_to(a, &mut out));
                assert_eq!(out, &data[a..b]);
            }
            assert!(!s.copy_to(990, &mut [0u8; 11]));
            assert!(!s.copy_to(usize::MAX, &mut [0u8; 2]));
            assert_eq!(s.slice(900..2000).len(), 100);
            assert!(s.slice(1200..2000).is_empty());
        }
    }

    #[test]
    fn a_slice_of_one_piece_is_a_view_of_it() {
        let data = Bytes::from(vec![9u8; 100]);
        let s = SliceBytes::from_pieces([data.clone(), Bytes::new(), data.clone()]);
        assert_eq!(s.pieces().len(), 2, "empty pieces are dropped");
        let inner = s.slice(10..90);
        assert_eq!(inner.pieces().len(), 1);
        assert_eq!(inner.pieces()[0].as_ptr(), data[10..].as_ptr());
        assert_eq!(s.slice(90..110).pieces().len(), 2);
    }
}
