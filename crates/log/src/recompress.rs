//! Broker-side compression (`compression.type` other than `producer`): batches a producer sent
//! with another codec are decoded and encoded again with the topic's codec before they are
//! appended, as Kafka's log validator does. Records keep their keys, values, headers,
//! timestamps and order; a batch keeps its producer id, epoch and base sequence, so
//! idempotent producers are checked exactly as for batches stored as sent.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions,
};

/// A topic's `compression.type` codec and its `compression.<codec>.level` (KIP-390).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetCodec {
    pub compression: Compression,
    /// The level as configured (gzip -1 = the codec's default); snappy and none have none.
    pub level: i32,
}

impl TargetCodec {
    /// The topic config key holding this codec's level, if it has one.
    pub fn level_key(compression: Compression) -> Option<&'static str> {
        match compression {
            Compression::Gzip => Some("compression.gzip.level"),
            Compression::Lz4 => Some("compression.lz4.level"),
            Compression::Zstd => Some("compression.zstd.level"),
            _ => None,
        }
    }

    /// Kafka's default level of each codec (gzip -1 = zlib's 6, lz4 9, zstd 3).
    pub fn default_level(compression: Compression) -> i32 {
        match compression {
            Compression::Gzip => -1,
            Compression::Lz4 => 9,
            Compression::Zstd => 3,
            _ => 0,
        }
    }

    pub fn with_default_level(compression: Compression) -> Self {
        Self {
            compression,
            level: Self::default_level(compression),
        }
    }

    /// Compresses `raw` (a batch's encoded records) into `out` at this level.
    fn compress(&self, raw: &mut BytesMut, out: &mut BytesMut) -> anyhow::Result<()> {
        use kafka_protocol::compression::{Compressor, Snappy};
        use std::io::Write;
        match self.compression {
            Compression::None => out.put(raw),
            Compression::Snappy => <Snappy as Compressor<BytesMut>>::compress(out, |b| {
                b.put(raw);
                Ok(())
            })?,
            Compression::Gzip => {
                let level = match self.level {
                    -1 => flate2::Compression::default(),
                    l => flate2::Compression::new(l.clamp(1, 9) as u32),
                };
                let mut e = flate2::write::GzEncoder::new(out.writer(), level);
                e.write_all(raw)?;
                e.finish()?;
            }
            Compression::Lz4 => {
                // Kafka's lz4 levels go to 17 (lz4-java); the C library's frame format stops
                // at 12, which compresses the same as anything above.
                let mut e = lz4::EncoderBuilder::new()
                    .level(self.level.clamp(1, 12) as u32)
                    .block_mode(lz4::BlockMode::Independent)
                    .build(out.writer())?;
                e.write_all(raw)?;
                let (_, finished) = e.finish();
                finished?;
            }
            Compression::Zstd => {
                zstd::stream::copy_encode(raw.reader(), out.writer(), self.level)?;
            }
        }
        Ok(())
    }
}

/// What a `compression.type` value asks for: `None` keeps the producer's codec.
pub fn target_codec(value: &str) -> Option<Compression> {
    match value {
        "gzip" => Some(Compression::Gzip),
        "snappy" => Some(Compression::Snappy),
        "lz4" => Some(Compression::Lz4),
        "zstd" => Some(Compression::Zstd),
        "none" | "uncompressed" => Some(Compression::None),
        _ => None,
    }
}

/// Codec bits of every whole v2 batch in `records` (the low bits of the attributes).
fn codecs(records: &[u8]) -> impl Iterator<Item = u8> + '_ {
    use crate::batch::{whole_batches, ATTRIBUTES_OFFSET, COMPRESSION_MASK};
    whole_batches(records).filter_map(move |span| {
        let at = span.bytes.start + ATTRIBUTES_OFFSET;
        let attributes = i16::from_be_bytes([*records.get(at)?, *records.get(at + 1)?]);
        u8::try_from(attributes & COMPRESSION_MASK).ok()
    })
}

/// Re-encodes `records` with `target` unless every batch already uses its codec (then
/// `Ok(None)`: a producer's batch is kept as sent, whatever level it was compressed at, as
/// Kafka keeps it). A batch that cannot be decoded is an error (CORRUPT_MESSAGE).
pub fn recompress(records: &Bytes, target: TargetCodec) -> Result<Option<Bytes>, String> {
    if codecs(records).all(|c| c == target.compression as u8) {
        return Ok(None);
    }
    let mut input = records.clone();
    let sets = RecordBatchDecoder::decode_all(&mut input)
        .map_err(|e| format!("cannot decode batch: {e}"))?;
    let mut out = BytesMut::with_capacity(records.len());
    for set in sets {
        let mut records = set.records;
        let Some(first) = records.first() else {
            continue;
        };
        let (base_offset, base_sequence) = (first.offset, first.sequence);
        // The encoder keeps records in one batch while offset - sequence stays constant; give
        // sequence-less records (-1) a run that keeps them together and still writes -1 first.
        if base_sequence < 0 {
            for r in &mut records {
                r.sequence = (r.offset - base_offset) as i32 - 1;
            }
        }
        RecordBatchEncoder::encode_with_custom_compression(
            &mut out,
            &records,
            &RecordEncodeOptions {
                version: 2,
                compression: target.compression,
            },
            Some(|raw: &mut BytesMut, out: &mut BytesMut, _: Compression| {
                target.compress(raw, out)
            }),
        )
        .map_err(|e| format!("cannot encode batch: {e}"))?;
    }
    Ok(Some(out.freeze()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_test_support::{Batches, Keys};

    /// Five keyed records with a header, in one batch.
    fn batch(compression: Compression, producer: Option<(i64, i16, i32)>) -> Bytes {
        let records = Batches::of(5, |i| format!("value {i} ").repeat(20))
            .keys(Keys::Indexed)
            .header("h", "v")
            .compression(compression);
        match producer {
            Some((id, epoch, sequence)) => records.producer(id, epoch, sequence),
            None => records,
        }
        .encode()
    }

    #[test]
    fn same_codec_is_left_alone() {
        let b = batch(Compression::Gzip, None);
        assert!(
            recompress(&b, TargetCodec::with_default_level(Compression::Gzip))
                .unwrap()
                .is_none()
        );
        assert_eq!(target_codec("producer"), None);
        assert_eq!(target_codec("uncompressed"), Some(Compression::None));
    }

    #[test]
    fn other_codecs_are_reencoded_into_one_batch_with_the_same_records() {
        for (from, to) in [
            (Compression::None, Compression::Zstd),
            (Compression::Snappy, Compression::Gzip),
            (Compression::Lz4, Compression::None),
        ] {
            let original = batch(from, Some((7, 2, 40)));
            let again = recompress(&original, TargetCodec::with_default_level(to))
                .unwrap()
                .unwrap();
            assert_eq!(
                codecs(&again).collect::<Vec<_>>(),
                vec![to as u8],
                "one batch, new codec"
            );
            let a = RecordBatchDecoder::decode_all(&mut original.clone()).unwrap();
            let b = RecordBatchDecoder::decode_all(&mut again.clone()).unwrap();
            assert_eq!(a[0].records, b[0].records, "{from:?} -> {to:?}");
        }
    }

    #[test]
    fn records_without_a_producer_stay_in_one_batch() {
        let again = recompress(
            &batch(Compression::None, None),
            TargetCodec::with_default_level(Compression::Lz4),
        )
        .unwrap()
        .unwrap();
        let sets = RecordBatchDecoder::decode_all(&mut again.clone()).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].records.len(), 5);
        assert!(sets[0].records.iter().all(|r| r.producer_id == -1));
    }

    #[test]
    fn garbage_is_an_error() {
        let mut b = BytesMut::from(&batch(Compression::Gzip, None)[..]);
        let n = b.len();
        for byte in &mut b[61..n] {
            *byte = 0xAB;
        }
        assert!(recompress(
            &b.freeze(),
            TargetCodec::with_default_level(Compression::None)
        )
        .is_err());
    }

    #[test]
    fn the_configured_level_is_the_one_used() {
        let original = Batches::of(300, |i| {
            format!("record {i} of a level test, {} ", i * 7919 % 1000).repeat(8)
        })
        .encode();
        let before = RecordBatchDecoder::decode_all(&mut original.clone()).unwrap();
        for (compression, low, high) in [
            (Compression::Gzip, 1, 9),
            (Compression::Lz4, 1, 12),
            (Compression::Zstd, 1, 19),
        ] {
            let at = |level| {
                recompress(&original, TargetCodec { compression, level })
                    .unwrap()
                    .unwrap()
            };
            let (fast, small) = (at(low), at(high));
            assert!(
                small.len() < fast.len(),
                "{compression:?}: level {high} gave {} bytes, level {low} {}",
                small.len(),
                fast.len()
            );
            for b in [fast, small] {
                let after = RecordBatchDecoder::decode_all(&mut b.clone()).unwrap();
                assert_eq!(before[0].records, after[0].records, "{compression:?}");
            }
        }
    }
}
