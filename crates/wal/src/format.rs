//! The remote WAL object layout (RFC 0001, `docs/rfcs/0001-remote-wal-object-format.md`).
//!
//! One object holds *slices*: runs of whole Kafka record batches of one partition, byte for byte
//! as the leader's log stores them, for many partitions at once. It is self-describing:
//!
//! ```text
//! offset 0            HEADER_LEN                           index_position            size-FOOTER_LEN
//! | header (8 bytes) | slice 0 | slice 1 | ... | slice n-1 | index (n x 56 bytes)    | footer (28 bytes) |
//!
//! header : magic "FWAL" | version u16 | flags u16 (0)
//! entry  : topic id [16] | partition i32 | base offset i64 | last offset i64 | leader epoch i32
//!          | position u64 | length u32 | CRC-32C of the slice bytes u32
//! footer : index position u64 | index length u32 | slice count u32 | version u16 | flags u16
//!          | CRC-32C(header ++ index ++ footer[0..20]) u32 | magic "FWAL"
//! ```
//!
//! All integers are big-endian, as in Kafka's own formats.
//!
//! # Invariants (checked by [`ObjectReader::parse`] and [`ObjectIndex::parse_tail`])
//!
//! - The header and footer carry the same magic, version and flags; a reader refuses any version
//!   it does not know ([`WalError::UnsupportedVersion`]) instead of guessing.
//! - One CRC-32C covers the header, the whole index and the footer's fields, so a damaged index
//!   or footer is never trusted; each slice has its own CRC-32C, checked when the slice is read,
//!   so a reader that range-GETs one slice can verify it without the rest of the object.
//! - Slices are non-empty, contiguous and in index order: slice 0 starts right after the header,
//!   each next slice starts where the previous one ended, and the last one ends at the index.
//!   `base_offset <= last_offset` for every slice.
//! - An object holds at least one slice ([`WalError::EmptyObject`]).
//!
//! A reader that knows the object size (from the metadata record) can read the footer and index
//! with one suffix range-GET ([`ObjectIndex::parse_tail`]) or a known slice directly.

use bytes::{BufMut, Bytes, BytesMut};
use ferry_objstore::ObjectBody;
use uuid::Uuid;

use crate::error::{Result, WalError};

/// First (and last) four bytes of every WAL object.
pub const MAGIC: [u8; 4] = *b"FWAL";
/// The format version this code writes and the only one it reads.
pub const VERSION: u16 = 1;
/// Size of the header.
pub const HEADER_LEN: usize = 8;
/// Size of one slice index entry.
pub const INDEX_ENTRY_LEN: usize = 56;
/// Size of the footer.
pub const FOOTER_LEN: usize = 28;
/// Bytes of the footer covered by its checksum (everything before the checksum itself).
const FOOTER_CHECKED_LEN: usize = 20;

/// Where a slice's data comes from: one partition's offsets under one leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceInfo {
    /// Kafka topic id (KIP-516).
    pub topic_id: Uuid,
    pub partition: i32,
    /// Offset of the first record of the first batch.
    pub base_offset: i64,
    /// Offset of the last record of the last batch.
    pub last_offset: i64,
    /// The epoch under which the uploading broker led the partition when it cut the object.
    /// Every batch inside carries a partition leader epoch at or below it.
    pub leader_epoch: i32,
}

/// One slice index entry: the [`SliceInfo`] plus where the bytes are and their checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SliceEntry {
    pub info: SliceInfo,
    /// Byte position of the slice inside the object.
    pub position: u64,
    /// Length of the slice in bytes (never zero).
    pub length: u32,
    /// CRC-32C of the slice bytes.
    pub crc: u32,
}

impl SliceEntry {
    /// The slice's byte range inside the object, as a ranged GET wants it.
    pub fn range(&self) -> std::ops::Range<u64> {
        self.position..self.position + u64::from(self.length)
    }

    /// Checks that `data` are this slice's bytes (length and CRC-32C).
    pub fn verify(&self, data: &[u8]) -> Result<()> {
        if data.len() as u64 != u64::from(self.length) {
            return Err(WalError::Truncated {
                what: "slice",
                needed: u64::from(self.length),
                available: data.len() as u64,
            });
        }
        let computed = crc32c::crc32c(data);
        if computed != self.crc {
            return Err(WalError::ChecksumMismatch {
                what: format!(
                    "slice of partition {}/{} offsets {}..={}",
                    self.info.topic_id,
                    self.info.partition,
                    self.info.base_offset,
                    self.info.last_offset
                ),
                stored: self.crc,
                computed,
            });
        }
        Ok(())
    }

    fn encode(&self, buf: &mut BytesMut) {
        buf.put_slice(self.info.topic_id.as_bytes());
        buf.put_i32(self.info.partition);
        buf.put_i64(self.info.base_offset);
        buf.put_i64(self.info.last_offset);
        buf.put_i32(self.info.leader_epoch);
        buf.put_u64(self.position);
        buf.put_u32(self.length);
        buf.put_u32(self.crc);
    }

    fn decode(b: &[u8; INDEX_ENTRY_LEN]) -> Self {
        let mut topic = [0u8; 16];
        topic.copy_from_slice(&b[0..16]);
        Self {
            info: SliceInfo {
                topic_id: Uuid::from_bytes(topic),
                partition: i32::from_be_bytes(arr(&b[16..20])),
                base_offset: i64::from_be_bytes(arr(&b[20..28])),
                last_offset: i64::from_be_bytes(arr(&b[28..36])),
                leader_epoch: i32::from_be_bytes(arr(&b[36..40])),
            },
            position: u64::from_be_bytes(arr(&b[40..48])),
            length: u32::from_be_bytes(arr(&b[48..52])),
            crc: u32::from_be_bytes(arr(&b[52..56])),
        }
    }
}

/// Copies a slice of known length into an array; callers slice with constant bounds.
fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[..N]);
    out
}

fn header_bytes(version: u16, flags: u16) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&MAGIC);
    h[4..6].copy_from_slice(&version.to_be_bytes());
    h[6..8].copy_from_slice(&flags.to_be_bytes());
    h
}

/// Builds one WAL object from the slices' own buffers.
///
/// Slices are not copied: the object is the header, the slices' chunks as they were appended
/// (views of the produce requests' bytes) and the index and footer written by
/// [`ObjectBuilder::finish_body`], sent to the store in those parts. The CRC-32C of the whole
/// object, which the store sends with the PUT, is combined from the slices' CRCs as they are
/// appended instead of read again from the bytes.
#[derive(Debug)]
pub struct ObjectBuilder {
    parts: Vec<Bytes>,
    /// Bytes appended so far, header included: the next slice's position.
    len: u64,
    /// CRC-32C of those bytes.
    crc: u32,
    entries: Vec<SliceEntry>,
}

impl ObjectBuilder {
    /// A builder with room for `slices` slices.
    pub fn with_capacity(slices: usize) -> Self {
        let header = Bytes::copy_from_slice(&header_bytes(VERSION, 0));
        let crc = crc32c::crc32c(&header);
        let mut parts = Vec::with_capacity(2 + 2 * slices);
        parts.push(header);
        Self {
            parts,
            len: HEADER_LEN as u64,
            crc,
            entries: Vec::with_capacity(slices),
        }
    }

    /// Appends one slice whose bytes are `data` (copied).
    pub fn append(&mut self, info: SliceInfo, data: &[u8]) -> Result<&SliceEntry> {
        self.append_chunks(info, &[Bytes::copy_from_slice(data)])
    }

    /// Appends one slice made of `chunks` laid end to end (consecutive appends of one partition),
    /// without copying them.
    pub fn append_chunks(&mut self, info: SliceInfo, chunks: &[Bytes]) -> Result<&SliceEntry> {
        let total: usize = chunks.iter().map(Bytes::len).sum();
        if total == 0 {
            return Err(WalError::Invalid("empty slice".into()));
        }
        let length = u32::try_from(total)
            .map_err(|_| WalError::Invalid(format!("slice of {total} bytes exceeds 4 GiB")))?;
        if info.base_offset < 0 || info.last_offset < info.base_offset {
            return Err(WalError::Invalid(format!(
                "slice offsets {}..={} are not an offset range",
                info.base_offset, info.last_offset
            )));
        }
        let position = self.len;
        let mut crc = 0;
        for chunk in chunks.iter().filter(|c| !c.is_empty()) {
            crc = crc32c::crc32c_append(crc, chunk);
            self.parts.push(chunk.clone());
        }
        self.crc = crc32c_combine(self.crc, crc, u64::from(length));
        self.len += u64::from(length);
        self.entries.push(SliceEntry {
            info,
            position,
            length,
            crc,
        });
        Ok(&self.entries[self.entries.len() - 1])
    }

    /// Slices appended so far, in object order.
    pub fn entries(&self) -> &[SliceEntry] {
        &self.entries
    }

    /// Bytes the object will have once finished.
    pub fn finished_len(&self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
            + self.entries.len() * INDEX_ENTRY_LEN
            + FOOTER_LEN
    }

    /// Writes the index and footer and returns the object in its parts, with its CRC-32C.
    /// Refuses an object without slices.
    pub fn finish_body(mut self) -> Result<ObjectBody> {
        if self.entries.is_empty() {
            return Err(WalError::EmptyObject);
        }
        let index_position = self.len;
        let slice_count = u32::try_from(self.entries.len())
            .map_err(|_| WalError::Invalid("too many slices".into()))?;
        let index_length = slice_count
            .checked_mul(INDEX_ENTRY_LEN as u32)
            .ok_or_else(|| WalError::Invalid("index exceeds 4 GiB".into()))?;
        let mut tail = BytesMut::with_capacity(index_length as usize + FOOTER_LEN);
        for entry in &self.entries {
            entry.encode(&mut tail);
        }
        let mut footer = [0u8; FOOTER_LEN];
        footer[0..8].copy_from_slice(&index_position.to_be_bytes());
        footer[8..12].copy_from_slice(&index_length.to_be_bytes());
        footer[12..16].copy_from_slice(&slice_count.to_be_bytes());
        footer[16..18].copy_from_slice(&VERSION.to_be_bytes());
        footer[18..20].copy_from_slice(&0u16.to_be_bytes());
        let crc = checksum(
            &self.parts[0][..HEADER_LEN],
            &tail,
            &footer[..FOOTER_CHECKED_LEN],
        );
        footer[20..24].copy_from_slice(&crc.to_be_bytes());
        footer[24..28].copy_from_slice(&MAGIC);
        tail.put_slice(&footer);
        let tail = tail.freeze();
        let object_crc = crc32c::crc32c_append(self.crc, &tail);
        self.parts.push(tail);
        Ok(ObjectBody::from_parts(self.parts, object_crc))
    }

    /// [`ObjectBuilder::finish_body`] in one buffer (a copy; for readers and tests).
    pub fn finish(self) -> Result<Bytes> {
        self.finish_body().map(|b| b.to_bytes())
    }
}

/// CRC-32C of `A ++ B` from `crc(A)`, `crc(B)` and `|B|`: `crc(A) · x^(8|B|) mod P`, plus
/// `crc(B)`, in O(log |B|) small multiplications. (The crc32c crate's `crc32c_combine` squares
/// 32×32-bit matrices for every bit of the length: ~20 µs a call, more than a CRC pass over a
/// 32 KB slice, which is what the combination is meant to save.)
pub(crate) fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    mul_mod_p(x_pow_8n(len_b), crc_a) ^ crc_b
}

/// CRC-32C's polynomial in the reflected bit order its register uses (x^0 is the top bit).
const CRC32C_POLY_REFLECTED: u32 = 0x82F6_3B78;

/// `a · b mod P` over GF(2), both in the reflected bit order.
fn mul_mod_p(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31; // x^0 of `a`
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        // b := b · x mod P
        b = if b & 1 != 0 {
            (b >> 1) ^ CRC32C_POLY_REFLECTED
        } else {
            b >> 1
        };
        bit >>= 1;
    }
    product
}

/// `x^(8n) mod P`, by squaring.
fn x_pow_8n(mut n: u64) -> u32 {
    let mut result = 1u32 << 31; // x^0
    let mut power = 1u32 << (31 - 8); // x^8
    while n != 0 {
        if n & 1 != 0 {
            result = mul_mod_p(power, result);
        }
        power = mul_mod_p(power, power);
        n >>= 1;
    }
    result
}

fn checksum(header: &[u8], index: &[u8], footer_fields: &[u8]) -> u32 {
    let crc = crc32c::crc32c(header);
    let crc = crc32c::crc32c_append(crc, index);
    crc32c::crc32c_append(crc, footer_fields)
}

/// The parsed, checksum-verified slice index of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectIndex {
    /// Total object size in bytes.
    pub object_size: u64,
    /// Byte position of the index (= end of the last slice).
    pub index_position: u64,
    entries: Vec<SliceEntry>,
}

impl ObjectIndex {
    /// Parses the index from a suffix of an object of `object_size` bytes. `tail` must hold at
    /// least the index and footer (`object_size - index_position` bytes); a longer suffix is
    /// fine. Read the last [`FOOTER_LEN`] bytes first to learn how much that is, or GET a
    /// generous suffix in one request.
    pub fn parse_tail(tail: &[u8], object_size: u64) -> Result<Self> {
        Self::parse_inner(tail, object_size, None)
    }

    /// Reads only the footer: returns the byte range of the index (plus footer) to GET next.
    pub fn tail_range(footer: &[u8], object_size: u64) -> Result<std::ops::Range<u64>> {
        let f = footer_of(footer)?;
        let (index_position, _, _) = check_footer_frame(f, object_size)?;
        Ok(index_position..object_size)
    }

    fn parse_inner(
        tail: &[u8],
        object_size: u64,
        header: Option<&[u8; HEADER_LEN]>,
    ) -> Result<Self> {
        let footer = footer_of(tail)?;
        let (index_position, index_length, slice_count) = check_footer_frame(footer, object_size)?;
        let needed = u64::from(index_length) + FOOTER_LEN as u64;
        if (tail.len() as u64) < needed {
            return Err(WalError::Truncated {
                what: "index (suffix too short)",
                needed,
                available: tail.len() as u64,
            });
        }
        let index_start = tail.len() - needed as usize;
        let index = &tail[index_start..tail.len() - FOOTER_LEN];
        let version = u16::from_be_bytes(arr(&footer[16..18]));
        let flags = u16::from_be_bytes(arr(&footer[18..20]));
        let own_header;
        let header = match header {
            Some(h) => h,
            None => {
                own_header = header_bytes(version, flags);
                &own_header
            }
        };
        let stored = u32::from_be_bytes(arr(&footer[20..24]));
        let computed = checksum(header, index, &footer[..FOOTER_CHECKED_LEN]);
        if stored != computed {
            return Err(WalError::ChecksumMismatch {
                what: "header, index and footer".into(),
                stored,
                computed,
            });
        }
        if flags != 0 {
            return Err(WalError::corrupt(
                "footer",
                format!("unknown flags {flags:#06x}"),
            ));
        }
        if slice_count == 0 {
            return Err(WalError::EmptyObject);
        }
        if u64::from(index_length) != u64::from(slice_count) * INDEX_ENTRY_LEN as u64 {
            return Err(WalError::corrupt(
                "footer",
                format!("index length {index_length} does not fit {slice_count} entries"),
            ));
        }
        let mut entries = Vec::with_capacity(slice_count as usize);
        let mut expected_position = HEADER_LEN as u64;
        for raw in index.chunks_exact(INDEX_ENTRY_LEN) {
            let entry = SliceEntry::decode(&arr(raw));
            if entry.position != expected_position {
                return Err(WalError::corrupt(
                    "index",
                    format!(
                        "slice {} starts at {} instead of {expected_position}",
                        entries.len(),
                        entry.position
                    ),
                ));
            }
            if entry.length == 0 {
                return Err(WalError::corrupt(
                    "index",
                    format!("slice {} is empty", entries.len()),
                ));
            }
            if entry.info.base_offset < 0 || entry.info.last_offset < entry.info.base_offset {
                return Err(WalError::corrupt(
                    "index",
                    format!(
                        "slice {} has offsets {}..={}",
                        entries.len(),
                        entry.info.base_offset,
                        entry.info.last_offset
                    ),
                ));
            }
            expected_position += u64::from(entry.length);
            entries.push(entry);
        }
        if expected_position != index_position {
            return Err(WalError::corrupt(
                "index",
                format!(
                    "slices end at {expected_position} but the index starts at {index_position}"
                ),
            ));
        }
        Ok(Self {
            object_size,
            index_position,
            entries,
        })
    }

    /// The slice entries, in object order.
    pub fn entries(&self) -> &[SliceEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false for a parsed index (empty objects are refused); here for clippy's sake.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The last [`FOOTER_LEN`] bytes of `tail`, with the trailing magic checked.
fn footer_of(tail: &[u8]) -> Result<&[u8]> {
    if tail.len() < FOOTER_LEN {
        return Err(WalError::Truncated {
            what: "footer",
            needed: FOOTER_LEN as u64,
            available: tail.len() as u64,
        });
    }
    let footer = &tail[tail.len() - FOOTER_LEN..];
    let magic: [u8; 4] = arr(&footer[24..28]);
    if magic != MAGIC {
        return Err(WalError::BadMagic {
            place: "footer (object truncated, or not a WAL object)",
            found: magic,
        });
    }
    Ok(footer)
}

/// Checks the version and that the index position and length fit an object of `object_size`.
fn check_footer_frame(footer: &[u8], object_size: u64) -> Result<(u64, u32, u32)> {
    let version = u16::from_be_bytes(arr(&footer[16..18]));
    if version != VERSION {
        return Err(WalError::UnsupportedVersion {
            version,
            known: VERSION,
        });
    }
    let index_position = u64::from_be_bytes(arr(&footer[0..8]));
    let index_length = u32::from_be_bytes(arr(&footer[8..12]));
    let slice_count = u32::from_be_bytes(arr(&footer[12..16]));
    let end = index_position
        .checked_add(u64::from(index_length))
        .and_then(|e| e.checked_add(FOOTER_LEN as u64));
    if index_position < HEADER_LEN as u64 || end != Some(object_size) {
        return Err(WalError::corrupt(
            "footer",
            format!(
                "index at {index_position} (+{index_length}) does not end an object of {object_size} bytes"
            ),
        ));
    }
    Ok((index_position, index_length, slice_count))
}

/// A whole WAL object in memory, parsed and verified except for the slice bytes, which are
/// checked on access by [`ObjectReader::slice`].
#[derive(Debug, Clone)]
pub struct ObjectReader {
    data: Bytes,
    index: ObjectIndex,
}

impl ObjectReader {
    /// Parses a whole object: header, footer and index (slices are verified by [`Self::slice`]).
    pub fn parse(data: &Bytes) -> Result<Self> {
        let size = data.len() as u64;
        if data.len() < HEADER_LEN + FOOTER_LEN {
            return Err(WalError::Truncated {
                what: "object",
                needed: (HEADER_LEN + FOOTER_LEN) as u64,
                available: size,
            });
        }
        let header: [u8; HEADER_LEN] = arr(&data[..HEADER_LEN]);
        let magic: [u8; 4] = arr(&header[0..4]);
        if magic != MAGIC {
            return Err(WalError::BadMagic {
                place: "header",
                found: magic,
            });
        }
        let version = u16::from_be_bytes(arr(&header[4..6]));
        if version != VERSION {
            return Err(WalError::UnsupportedVersion {
                version,
                known: VERSION,
            });
        }
        let index = ObjectIndex::parse_inner(data, size, Some(&header))?;
        Ok(Self {
            data: data.clone(),
            index,
        })
    }

    /// Parses only the index, from a suffix of the object (see [`ObjectIndex::parse_tail`]).
    pub fn parse_index(tail: &[u8], object_size: u64) -> Result<ObjectIndex> {
        ObjectIndex::parse_tail(tail, object_size)
    }

    pub fn index(&self) -> &ObjectIndex {
        &self.index
    }

    pub fn entries(&self) -> &[SliceEntry] {
        self.index.entries()
    }

    /// The bytes of slice `i` (zero-copy), after checking their CRC-32C.
    pub fn slice(&self, i: usize) -> Result<Bytes> {
        let entry = self.index.entries.get(i).ok_or_else(|| {
            WalError::Invalid(format!(
                "slice {i} of an object with {} slices",
                self.index.len()
            ))
        })?;
        let range = entry.range();
        let bytes = self.data.slice(range.start as usize..range.end as usize);
        entry.verify(&bytes)?;
        Ok(bytes)
    }
}

#[cfg(test)]
#[path = "format_test.rs"]
mod tests;
