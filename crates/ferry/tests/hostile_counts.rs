//! A request that claims billions of array elements in a few bytes must be refused with an
//! error, not take the process down (see `ferry::alloc`).

use bytes::{BufMut, Bytes, BytesMut};

#[global_allocator]
static ALLOC: ferry::alloc::FerryAlloc = ferry::alloc::FerryAlloc;

fn frame(api_key: i16, version: i16, body: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(api_key);
    b.put_i16(version);
    b.put_i32(1); // correlation id
    b.put_i16(-1); // null client id (request header v1)
    b.put_slice(body);
    b.freeze()
}

#[test]
fn huge_array_counts_in_tiny_frames_are_decode_errors() {
    let max = i32::MAX.to_be_bytes();
    // Metadata v1, DescribeConfigs v1, CreateTopics v2: the body starts with an array count.
    for (key, version) in [(3, 1), (32, 1), (19, 2), (21, 1), (44, 0)] {
        let result = ferry_protocol::decode_request(frame(key, version, &max));
        assert!(
            result.is_err(),
            "api {key} v{version} decoded a hostile count"
        );
    }
    // Nested: one topic, then a partition array claiming i32::MAX entries (ListOffsets v1).
    let mut body = BytesMut::new();
    body.put_i32(-1); // replica id
    body.put_i32(1); // one topic
    body.put_i16(1);
    body.put_u8(b't');
    body.put_i32(i32::MAX);
    assert!(ferry_protocol::decode_request(frame(2, 1, &body)).is_err());
}

#[test]
fn large_legitimate_allocations_still_work() {
    let mut v: Vec<u8> = Vec::with_capacity(ferry::alloc::LAZY_THRESHOLD + 1);
    v.extend_from_slice(b"hello");
    v.resize(1 << 20, 7);
    assert_eq!(&v[..5], b"hello");
    v.shrink_to_fit();
    assert_eq!(v.len(), 1 << 20);
}
