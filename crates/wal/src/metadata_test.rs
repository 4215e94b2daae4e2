//! RFC 0002 checks: round trip, forward compatibility, truncation, and the measured size.

use super::*;

/// A realistic record: an S3 Express One Zone directory bucket, a real WAL key layout, offsets
/// about a billion in, a 256 KiB object.
fn sample() -> WalSliceMetadata {
    WalSliceMetadata {
        bucket: "ferry-wal--use1-az4--x-s3".into(),
        object_key: "wal/3/1732873212345-0000000042.wal".into(),
        byte_position: 131_072,
        byte_length: 16_384,
        topic_id: Uuid::from_u128(0x1f2e_3d4c_5b6a_7988_97a6_b5c4_d3e2_f101),
        partition: 11,
        base_offset: 1_234_567_890,
        last_offset: 1_234_567_899,
        leader_epoch: 5,
        slice_crc: 0xdead_beef,
        object_size: 262_144,
        uploader_broker_id: 3,
        upload_time_ms: 1_732_873_212_355,
    }
}

#[test]
fn record_round_trip() {
    let meta = sample();
    let rec = WalMetadataRecord::upsert(&meta).unwrap();
    let event = WalMetadataRecord::decode(&rec.key, rec.value.as_deref()).unwrap();
    assert_eq!(event, WalMetadataEvent::Upsert(meta.clone()));
    assert_eq!(decode_key(&rec.key).unwrap(), meta.key());
}

#[test]
fn zero_valued_fields_round_trip() {
    // proto3 omits zeros; they must still come back as zeros, not as errors.
    let meta = WalSliceMetadata {
        partition: 0,
        base_offset: 0,
        last_offset: 0,
        leader_epoch: 0,
        byte_position: 0,
        slice_crc: 0,
        uploader_broker_id: 0,
        upload_time_ms: 0,
        ..sample()
    };
    let bytes = encode_value(&meta).unwrap();
    assert_eq!(decode_value(&bytes).unwrap(), meta);
}

#[test]
fn tombstone_is_a_null_value() {
    let key = sample().key();
    let rec = WalMetadataRecord::tombstone(&key).unwrap();
    assert!(rec.value.is_none());
    let event = WalMetadataRecord::decode(&rec.key, None).unwrap();
    assert_eq!(event, WalMetadataEvent::Tombstone(key));
}

#[test]
fn value_must_match_its_key() {
    let meta = sample();
    let other = WalMetadataKey {
        base_offset: 7,
        ..meta.key()
    };
    let key = encode_key(&other).unwrap();
    let value = encode_value(&meta).unwrap();
    assert!(WalMetadataRecord::decode(&key, Some(&value)).is_err());
}

/// What a future broker might write: every field of today plus new ones.
#[derive(Clone, PartialEq, prost::Message)]
struct FutureValue {
    #[prost(string, tag = "1")]
    bucket: String,
    #[prost(string, tag = "2")]
    object_key: String,
    #[prost(uint64, tag = "3")]
    byte_position: u64,
    #[prost(uint32, tag = "4")]
    byte_length: u32,
    #[prost(bytes = "vec", tag = "5")]
    topic_id: Vec<u8>,
    #[prost(int32, tag = "6")]
    partition: i32,
    #[prost(int64, tag = "7")]
    base_offset: i64,
    #[prost(int64, tag = "8")]
    last_offset: i64,
    #[prost(int32, tag = "9")]
    leader_epoch: i32,
    #[prost(fixed32, tag = "10")]
    slice_crc: u32,
    #[prost(uint64, tag = "11")]
    object_size: u64,
    #[prost(int32, tag = "12")]
    uploader_broker_id: i32,
    #[prost(int64, tag = "13")]
    upload_time_ms: i64,
    #[prost(string, tag = "14")]
    storage_class: String,
    #[prost(uint64, repeated, tag = "99")]
    extra: Vec<u64>,
}

#[test]
fn unknown_fields_are_ignored_forward_compatibility() {
    let m = sample();
    let future = FutureValue {
        bucket: m.bucket.clone(),
        object_key: m.object_key.clone(),
        byte_position: m.byte_position,
        byte_length: m.byte_length,
        topic_id: m.topic_id.as_bytes().to_vec(),
        partition: m.partition,
        base_offset: m.base_offset,
        last_offset: m.last_offset,
        leader_epoch: m.leader_epoch,
        slice_crc: m.slice_crc,
        object_size: m.object_size,
        uploader_broker_id: m.uploader_broker_id,
        upload_time_ms: m.upload_time_ms,
        storage_class: "EXPRESS_ONEZONE".into(),
        extra: vec![1, 2, 3],
    };
    let bytes = future.encode_length_delimited_to_vec();
    assert!(bytes.len() > encode_value(&m).unwrap().len());
    assert_eq!(decode_value(&bytes).unwrap(), m);
}

#[test]
fn truncated_record_is_an_error_at_every_length() {
    let bytes = encode_value(&sample()).unwrap();
    for len in 0..bytes.len() {
        let err = decode_value(&bytes[..len]).unwrap_err();
        assert!(
            matches!(err, WalError::BadMetadata { .. }),
            "len {len}: {err}"
        );
    }
    let key = encode_key(&sample().key()).unwrap();
    for len in 0..key.len() {
        assert!(decode_key(&key[..len]).is_err(), "key len {len}");
    }
    // Padding is as wrong as truncation.
    let mut padded = bytes.to_vec();
    padded.push(0);
    assert!(decode_value(&padded).is_err());
}

#[test]
fn size_limits_and_validation() {
    let huge = WalSliceMetadata {
        object_key: "k".repeat(MAX_VALUE_LEN),
        ..sample()
    };
    assert!(matches!(encode_value(&huge), Err(WalError::Invalid(_))));
    assert!(decode_value(&vec![0u8; MAX_VALUE_LEN + 1]).is_err());
    let outside = WalSliceMetadata {
        byte_position: 262_000,
        ..sample()
    };
    assert!(encode_value(&outside).is_err());
    let backwards = WalSliceMetadata {
        last_offset: 1,
        ..sample()
    };
    assert!(encode_value(&backwards).is_err());
    // A topic id that is not 16 bytes is refused on decode.
    let p = KeyProto {
        topic_id: vec![1; 15],
        partition: 0,
        base_offset: 0,
    };
    assert!(decode_key(&p.encode_length_delimited_to_vec()).is_err());
}

/// Bytes of a Kafka zig-zag varint.
fn varint_len(v: i64) -> usize {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

/// The figures RFC 0002 quotes. If they change, update the RFC's volume arithmetic.
#[test]
fn measured_size_of_one_record() {
    let rec = WalMetadataRecord::upsert(&sample()).unwrap();
    let key_len = rec.key.len();
    let value_len = rec.value.as_ref().map_or(0, Bytes::len);
    // A Kafka v2 record around it: attributes, timestamp and offset deltas (small within one
    // batch), key and value lengths, header count, all preceded by the record's own length.
    let body = 1
        + 1
        + 1
        + varint_len(key_len as i64)
        + key_len
        + varint_len(value_len as i64)
        + value_len
        + 1;
    let on_log = varint_len(body as i64) + body;
    println!("metadata record: key {key_len} B, value {value_len} B, in a batch {on_log} B");
    assert_eq!(key_len, 27);
    assert_eq!(value_len, 124);
    assert_eq!(on_log, 160);
}

#[test]
fn one_data_partition_always_maps_to_one_metadata_partition() {
    let t = Uuid::from_u128(0x1234_5678_9abc_def0_1234_5678_9abc_def0);
    let p = metadata_partition(t, 3, 16);
    assert!((0..16).contains(&p));
    // Stable (records of a partition keep their order) and independent of the offset.
    for _ in 0..3 {
        assert_eq!(metadata_partition(t, 3, 16), p);
    }
    // Spreads partitions of one topic over the metadata partitions.
    let used: std::collections::BTreeSet<i32> =
        (0..64).map(|i| metadata_partition(t, i, 16)).collect();
    assert!(used.len() >= 8, "{used:?}");
    assert_eq!(metadata_partition(t, 3, 1), 0);
    assert_eq!(metadata_partition(t, 3, 0), 0);
}
