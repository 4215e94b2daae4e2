//! RFC 0001 checks: round trip, and every kind of damage is detected with a clear error.

use super::*;
use crate::error::ErrorKind;

fn topic(n: u8) -> Uuid {
    Uuid::from_bytes([n; 16])
}

fn info(t: u8, partition: i32, base: i64, last: i64) -> SliceInfo {
    SliceInfo {
        topic_id: topic(t),
        partition,
        base_offset: base,
        last_offset: last,
        leader_epoch: 7,
    }
}

/// An object with 3 topics x 8 partitions, slices of different sizes.
fn sample() -> (Bytes, Vec<(SliceInfo, Vec<u8>)>) {
    let mut slices = Vec::new();
    for t in 1..=3u8 {
        for p in 0..8 {
            let len = 1 + (t as usize * 37 + p as usize * 101) % 700;
            let data: Vec<u8> = (0..len).map(|i| (i as u8) ^ t ^ (p as u8)).collect();
            slices.push((info(t, p, 100 * p as i64, 100 * p as i64 + 9), data));
        }
    }
    let mut b = ObjectBuilder::with_capacity(slices.len());
    for (i, d) in &slices {
        b.append(*i, d).unwrap();
    }
    let expected_len = b.finished_len();
    let obj = b.finish().unwrap();
    assert_eq!(obj.len(), expected_len);
    (obj, slices)
}

#[test]
fn round_trip_many_partitions() {
    let (obj, slices) = sample();
    let r = ObjectReader::parse(&obj).unwrap();
    assert_eq!(r.entries().len(), slices.len());
    for (i, (info, data)) in slices.iter().enumerate() {
        assert_eq!(r.entries()[i].info, *info);
        assert_eq!(&r.slice(i).unwrap()[..], &data[..]);
    }
    assert!(r.slice(slices.len()).is_err());
}

#[test]
fn builder_sends_the_chunks_themselves_with_the_object_crc() {
    let chunks: Vec<Bytes> = (0..3u8).map(|p| Bytes::from(vec![p; 100])).collect();
    let mut b = ObjectBuilder::with_capacity(3);
    for (p, chunk) in chunks.iter().enumerate() {
        b.append_chunks(info(1, p as i32, 0, 0), std::slice::from_ref(chunk))
            .unwrap();
    }
    let body = b.finish_body().unwrap();
    // Header, the three chunks (the same memory, not copies), index and footer.
    assert_eq!(body.parts().len(), 5);
    for (part, chunk) in body.parts()[1..4].iter().zip(&chunks) {
        assert_eq!(part.as_ptr(), chunk.as_ptr());
    }
    let whole = body.to_bytes();
    assert_eq!(body.len(), whole.len() as u64);
    // The CRC combined from the slices' CRCs is the CRC of the bytes.
    assert_eq!(body.crc32c(), crc32c::crc32c(&whole));
    assert_eq!(ObjectReader::parse(&whole).unwrap().entries().len(), 3);
}

#[test]
fn chunks_form_one_slice_with_one_crc() {
    let mut b = ObjectBuilder::with_capacity(1);
    let chunks = [Bytes::from_static(b"abc"), Bytes::from_static(b"defg")];
    let entry = *b.append_chunks(info(1, 0, 0, 1), &chunks).unwrap();
    assert_eq!(entry.length, 7);
    assert_eq!(entry.crc, crc32c::crc32c(b"abcdefg"));
    let obj = b.finish().unwrap();
    assert_eq!(
        &ObjectReader::parse(&obj).unwrap().slice(0).unwrap()[..],
        b"abcdefg"
    );
}

#[test]
fn index_from_suffix_alone() {
    let (obj, slices) = sample();
    let size = obj.len() as u64;
    // Step 1: the footer alone tells where the index is.
    let footer = &obj[obj.len() - FOOTER_LEN..];
    let range = ObjectIndex::tail_range(footer, size).unwrap();
    // Step 2: that exact suffix parses; so does a longer one.
    let exact = ObjectReader::parse_index(&obj[range.start as usize..], size).unwrap();
    let longer = ObjectReader::parse_index(&obj[range.start as usize - 5..], size).unwrap();
    assert_eq!(exact, longer);
    assert_eq!(exact.len(), slices.len());
    // Step 3: a known slice, range-read directly, verifies on its own.
    let e = exact.entries()[5];
    e.verify(&obj[e.range().start as usize..e.range().end as usize])
        .unwrap();
    // Too short a suffix is a truncation, not garbage.
    let err = ObjectReader::parse_index(&obj[range.start as usize + 1..], size).unwrap_err();
    assert!(matches!(err, WalError::Truncated { .. }), "{err}");
}

#[test]
fn empty_object_refused() {
    let b = ObjectBuilder::with_capacity(0);
    assert!(matches!(b.finish(), Err(WalError::EmptyObject)));
    // And a hand-made object claiming zero slices with a valid checksum is refused on read.
    let mut raw = header_bytes(VERSION, 0).to_vec();
    let mut footer = [0u8; FOOTER_LEN];
    footer[0..8].copy_from_slice(&(HEADER_LEN as u64).to_be_bytes());
    footer[16..18].copy_from_slice(&VERSION.to_be_bytes());
    let crc = checksum(&raw, &[], &footer[..FOOTER_CHECKED_LEN]);
    footer[20..24].copy_from_slice(&crc.to_be_bytes());
    footer[24..28].copy_from_slice(&MAGIC);
    raw.extend_from_slice(&footer);
    let err = ObjectReader::parse(&Bytes::from(raw)).unwrap_err();
    assert!(matches!(err, WalError::EmptyObject), "{err}");
}

#[test]
fn builder_refuses_empty_slice_and_bad_offsets() {
    let mut b = ObjectBuilder::with_capacity(0);
    assert!(b.append(info(1, 0, 0, 0), &[]).is_err());
    assert!(b.append(info(1, 0, 5, 4), b"x").is_err());
    assert!(b.append(info(1, 0, -1, 4), b"x").is_err());
    assert!(b.entries().is_empty());
}

fn flipped(obj: &Bytes, at: usize) -> Bytes {
    let mut v = obj.to_vec();
    v[at] ^= 0x40;
    Bytes::from(v)
}

#[test]
fn bad_magic_detected() {
    let (obj, _) = sample();
    let err = ObjectReader::parse(&flipped(&obj, 1)).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::BadMagic {
                place: "header",
                ..
            }
        ),
        "{err}"
    );
    let err = ObjectReader::parse(&flipped(&obj, obj.len() - 1)).unwrap_err();
    assert!(matches!(err, WalError::BadMagic { .. }), "{err}");
    assert_eq!(err.kind(), ErrorKind::Corrupt);
}

/// Rewrites the version in header and footer *with* a correct checksum: a genuine newer object.
fn with_version(obj: &Bytes, version: u16) -> Bytes {
    let mut v = obj.to_vec();
    let n = v.len();
    v[4..6].copy_from_slice(&version.to_be_bytes());
    v[n - 12..n - 10].copy_from_slice(&version.to_be_bytes());
    let index_position = u64::from_be_bytes(arr(&v[n - FOOTER_LEN..n - 20])) as usize;
    let crc = checksum(
        &v[..HEADER_LEN],
        &v[index_position..n - FOOTER_LEN],
        &v[n - FOOTER_LEN..n - FOOTER_LEN + FOOTER_CHECKED_LEN],
    );
    v[n - 8..n - 4].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(v)
}

#[test]
fn unknown_version_refused() {
    let (obj, _) = sample();
    let newer = with_version(&obj, 2);
    let err = ObjectReader::parse(&newer).unwrap_err();
    assert!(
        matches!(
            err,
            WalError::UnsupportedVersion {
                version: 2,
                known: 1
            }
        ),
        "{err}"
    );
    let err = ObjectIndex::parse_tail(&newer, newer.len() as u64).unwrap_err();
    assert!(
        matches!(err, WalError::UnsupportedVersion { version: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("version 2"));
}

#[test]
fn truncation_detected_at_every_length() {
    let (obj, _) = sample();
    for len in 0..obj.len() {
        let cut = obj.slice(..len);
        let err = ObjectReader::parse(&cut).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "len {len}: {err}");
    }
    let err = ObjectReader::parse(&obj.slice(..10)).unwrap_err();
    assert!(
        matches!(err, WalError::Truncated { what: "object", .. }),
        "{err}"
    );
}

#[test]
fn flipped_byte_in_a_slice_detected_on_read() {
    let (obj, _) = sample();
    let r = ObjectReader::parse(&obj).unwrap();
    let victim = r.entries()[9];
    let bad = flipped(&obj, victim.position as usize + victim.length as usize / 2);
    let r = ObjectReader::parse(&bad).expect("slice bytes are not covered by the index checksum");
    let err = r.slice(9).unwrap_err();
    assert!(matches!(err, WalError::ChecksumMismatch { .. }), "{err}");
    assert!(err.to_string().contains("offsets 100..=109"), "{err}");
    // Neighbours are still readable: damage stays local to one slice.
    r.slice(8).unwrap();
    r.slice(10).unwrap();
}

#[test]
fn flipped_byte_in_index_or_footer_or_header_detected() {
    let (obj, _) = sample();
    let r = ObjectReader::parse(&obj).unwrap();
    let index_position = r.index().index_position as usize;
    let n = obj.len();
    // Every byte of the index, the footer and the header.
    let positions = (0..HEADER_LEN).chain(index_position..n);
    for at in positions {
        let err = ObjectReader::parse(&flipped(&obj, at)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Corrupt, "byte {at}: {err}");
    }
    let err = ObjectReader::parse(&flipped(&obj, index_position + 30)).unwrap_err();
    assert!(matches!(err, WalError::ChecksumMismatch { .. }), "{err}");
    let err = ObjectReader::parse(&flipped(&obj, n - 8)).unwrap_err();
    assert!(matches!(err, WalError::ChecksumMismatch { .. }), "{err}");
    let err = ObjectReader::parse(&flipped(&obj, n - 25)).unwrap_err();
    assert!(
        matches!(err, WalError::Corrupt { what: "footer", .. }),
        "{err}"
    );
}

#[test]
fn combined_crc_equals_the_crc_of_the_concatenation() {
    let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    for (a, b) in [
        (0, 0),
        (0, 1),
        (1, 0),
        (3, 5),
        (8, 32_768),
        (40_000, 29_999),
        (1, 69_999),
    ] {
        let (left, right) = (&data[..a], &data[a..a + b]);
        let whole = crc32c::crc32c(&data[..a + b]);
        let combined =
            crate::format::crc32c_combine(crc32c::crc32c(left), crc32c::crc32c(right), b as u64);
        assert_eq!(combined, whole, "|A| = {a}, |B| = {b}");
        assert_eq!(
            combined,
            crc32c::crc32c_combine(crc32c::crc32c(left), crc32c::crc32c(right), b),
            "the crate's combine agrees"
        );
    }
}
