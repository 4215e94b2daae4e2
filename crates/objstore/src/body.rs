//! An object's bytes as the parts they were built from, with their CRC-32C.

use bytes::Bytes;

/// The bytes of an object to store, as the parts its builder already holds (a remote-WAL
/// object: a header, the produce batches of many partitions, an index), with the CRC-32C of
/// them all when the builder knows it. A store sends the parts as they are instead of joining
/// them into one buffer (a copy of every byte, and the page faults of a fresh multi-megabyte
/// buffer), and a known checksum without a second pass over the bytes.
#[derive(Debug, Clone)]
pub struct ObjectBody {
    parts: Vec<Bytes>,
    len: u64,
    /// `None`: not known yet; [`ObjectBody::crc32c`] computes it for the stores that send it.
    crc32c: Option<u32>,
}

impl ObjectBody {
    /// `parts` laid end to end, whose CRC-32C the caller computed along the way (e.g. with
    /// `crc32c_combine` over per-slice CRCs). S3 refuses a PUT whose bytes do not match it
    /// (BadDigest), so a wrong CRC loses an upload, never stores damaged bytes.
    pub fn from_parts(parts: Vec<Bytes>, crc32c: u32) -> Self {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        Self {
            parts,
            len,
            crc32c: Some(crc32c),
        }
    }

    /// One buffer; its CRC-32C is computed only if a store asks for it.
    pub fn from_bytes(data: Bytes) -> Self {
        let len = data.len() as u64;
        Self {
            parts: vec![data],
            len,
            crc32c: None,
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// CRC-32C (Castagnoli) of all the bytes: the one given, else a pass over the parts.
    pub fn crc32c(&self) -> u32 {
        self.crc32c.unwrap_or_else(|| {
            self.parts
                .iter()
                .fold(0, |crc, p| crc32c::crc32c_append(crc, p))
        })
    }

    /// The parts, in order.
    pub fn parts(&self) -> &[Bytes] {
        &self.parts
    }

    /// The parts, in order, for a store that writes them itself.
    pub fn into_parts(self) -> Vec<Bytes> {
        self.parts
    }

    /// The bytes in one buffer: the part itself when there is one, else a joined copy (for
    /// stores that keep objects in memory, and for comparisons).
    pub fn to_bytes(&self) -> Bytes {
        ferry_common::join_pieces(&self.parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_join_to_the_bytes_they_stand_for() {
        let parts = vec![Bytes::from_static(b"FWAL"), Bytes::from_static(b"-slices-")];
        let crc = crc32c::crc32c_combine(crc32c::crc32c(b"FWAL"), crc32c::crc32c(b"-slices-"), 8);
        let body = ObjectBody::from_parts(parts, crc);
        assert_eq!(body.len(), 12);
        assert_eq!(&body.to_bytes()[..], b"FWAL-slices-");
        assert_eq!(body.crc32c(), crc32c::crc32c(b"FWAL-slices-"));
        let one = ObjectBody::from_bytes(Bytes::from_static(b"FWAL-slices-"));
        assert_eq!(one.crc32c(), body.crc32c());
        assert_eq!(one.parts().len(), 1);
    }
}
