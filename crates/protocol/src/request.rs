//! Request decoding and response encoding around the `kafka-protocol` codecs.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader, ResponseKind};
use kafka_protocol::protocol::buf::ByteBufMut;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::response_frame::{any_placeholder, FileRecords, Piece, PieceBuf};

use crate::versions::supported_range;

/// A request ferry serves, decoded.
#[derive(Debug)]
pub struct DecodedRequest {
    pub api_key: ApiKey,
    pub header: RequestHeader,
    pub body: RequestKind,
}

/// Why a frame could not become a [`DecodedRequest`].
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame too short for a request header ({0} bytes)")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApiKey(i16),
    #[error("API {api:?} is not served by ferry")]
    UnsupportedApi { api: ApiKey, correlation_id: i32 },
    /// ApiVersions at a version ferry does not serve: answer with the v0 fallback.
    #[error("ApiVersions v{version} is not supported")]
    UnsupportedApiVersionsVersion { correlation_id: i32, version: i16 },
    #[error("{api:?} v{version} is not supported")]
    UnsupportedVersion {
        api: ApiKey,
        version: i16,
        correlation_id: i32,
    },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Decodes one request frame (without its length prefix).
pub fn decode_request(frame: Bytes) -> Result<DecodedRequest, DecodeError> {
    if frame.len() < 8 {
        return Err(DecodeError::TooShort(frame.len()));
    }
    let raw_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let api_key = ApiKey::try_from(raw_key).map_err(|_| DecodeError::UnknownApiKey(raw_key))?;
    let Some(range) = supported_range(api_key) else {
        return Err(DecodeError::UnsupportedApi {
            api: api_key,
            correlation_id,
        });
    };
    if version < range.min || version > range.max {
        return Err(if api_key == ApiKey::ApiVersions {
            DecodeError::UnsupportedApiVersionsVersion {
                correlation_id,
                version,
            }
        } else {
            DecodeError::UnsupportedVersion {
                api: api_key,
                version,
                correlation_id,
            }
        });
    }
    let malformed = |e: anyhow::Error| DecodeError::Malformed {
        api: api_key,
        version,
        reason: e.to_string(),
    };
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, api_key.request_header_version(version))
        .map_err(malformed)?;
    let body = RequestKind::decode(api_key, &mut buf, version).map_err(malformed)?;
    Ok(DecodedRequest {
        api_key,
        header,
        body,
    })
}

pub use crate::response_frame::ResponseFrame;

/// Encodes a response with its header (the header version follows the API and version). A
/// Fetch response references its large record sets instead of copying them (see
/// [`ResponseFrame`]); every other response is one buffer.
pub fn encode_response(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
) -> anyhow::Result<ResponseFrame> {
    encode_response_with_files(api_key, version, correlation_id, body, FileRecords::new())
}

/// [`encode_response`] for a Fetch response whose record sets may be placeholders of `files`
/// (see [`FileRecords`]): they become file pieces of the frame. A response holding a
/// placeholder `files` does not map is an error, never a frame of zeros.
pub fn encode_response_with_files(
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &ResponseKind,
    files: FileRecords,
) -> anyhow::Result<ResponseFrame> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(version);
    let size = header.compute_size(header_version)? + body_size(body, version)?;
    if let ResponseKind::Fetch(fetch) = body {
        let records = || {
            fetch
                .responses
                .iter()
                .flat_map(|t| &t.partitions)
                .filter_map(|p| p.records.as_ref())
        };
        let mut buf = PieceBuf::new(4 + size, records().cloned(), files);
        buf.put_i32(size as i32);
        header.encode(&mut buf, header_version)?;
        fetch.encode(&mut buf, version)?;
        let written = buf.offset() - 4;
        // `None`: the encoder went back into a finished piece; encode into one buffer below.
        if let Some(mut pieces) = buf.finish() {
            if written != size {
                if let Some(Piece::Memory(first)) = pieces.first_mut() {
                    let mut fixed = BytesMut::from(&first[..]);
                    fixed[..4].copy_from_slice(&(written as i32).to_be_bytes());
                    *first = fixed.freeze();
                }
            }
            return Ok(ResponseFrame::from_pieces(pieces));
        }
        if any_placeholder(records()) {
            anyhow::bail!("a fetch response's file records could not be framed in pieces");
        }
    }
    let mut buf = BytesMut::with_capacity(4 + size);
    buf.put_i32(size as i32);
    header.encode(&mut buf, header_version)?;
    body.encode(&mut buf, version)?;
    let written = buf.len() - 4;
    if written != size {
        // compute_size disagreed with encode: fix up the prefix rather than send a bad frame.
        let prefix = (written as i32).to_be_bytes();
        buf[..4].copy_from_slice(&prefix);
    }
    Ok(ResponseFrame::contiguous(buf.freeze()))
}

fn body_size(body: &ResponseKind, version: i16) -> anyhow::Result<usize> {
    // ResponseKind has no compute_size of its own; encoding into a scratch buffer would double
    // the work for large fetch responses, so reserve from the common big cases only.
    Ok(match body {
        ResponseKind::Fetch(r) => r.compute_size(version)?,
        ResponseKind::Produce(r) => r.compute_size(version)?,
        _ => 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    fn frame_of<T: Encodable>(key: ApiKey, version: i16, body: &T) -> Bytes {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("test")));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, key.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        buf.freeze()
    }

    #[test]
    fn decodes_a_supported_request() {
        let f = frame_of(ApiKey::Metadata, 12, &MetadataRequest::default());
        let r = decode_request(f).unwrap();
        assert_eq!(r.api_key, ApiKey::Metadata);
        assert_eq!(r.header.correlation_id, 42);
        assert!(matches!(r.body, RequestKind::Metadata(_)));
    }

    #[test]
    fn apiversions_at_a_future_version_asks_for_the_fallback() {
        let mut f =
            BytesMut::from(&frame_of(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())[..]);
        f[2..4].copy_from_slice(&99i16.to_be_bytes());
        match decode_request(f.freeze()) {
            Err(DecodeError::UnsupportedApiVersionsVersion {
                correlation_id: 42,
                version: 99,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unknown_keys_short_frames_and_garbage_are_errors() {
        assert!(matches!(
            decode_request(Bytes::from_static(&[0x27, 0x0f, 0, 0, 0, 0, 0, 1])),
            Err(DecodeError::UnknownApiKey(9999))
        ));
        assert!(matches!(
            decode_request(Bytes::from_static(&[0, 3])),
            Err(DecodeError::TooShort(2))
        ));
        // Metadata v12 whose body is cut off.
        let f = frame_of(ApiKey::Metadata, 12, &MetadataRequest::default());
        let cut = f.slice(..f.len() - 1);
        assert!(matches!(
            decode_request(cut),
            Err(DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn unserved_api_is_reported_with_its_correlation_id() {
        // UpdateFeatures (57) is a real Kafka API that ferry does not serve.
        let f = Bytes::from_static(&[0, 57, 0, 1, 0, 0, 0, 7, 0, 0]);
        assert!(matches!(
            decode_request(f),
            Err(DecodeError::UnsupportedApi {
                correlation_id: 7,
                ..
            })
        ));
    }

    #[test]
    fn response_frame_is_length_prefixed() {
        let body = ResponseKind::ApiVersions(crate::api_versions_response(0));
        let f = encode_response(ApiKey::ApiVersions, 3, 9, &body)
            .unwrap()
            .to_bytes()
            .unwrap();
        let len = i32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        assert_eq!(len, f.len() - 4);
        assert_eq!(&f[4..8], &9i32.to_be_bytes());
    }

    /// A Fetch response of two topics, a large and a small record set in each.
    fn fetch_response() -> (ResponseKind, Vec<Bytes>) {
        use kafka_protocol::messages::fetch_response::{
            FetchResponse, FetchableTopicResponse, PartitionData,
        };
        use kafka_protocol::messages::TopicName;
        let big: Vec<Bytes> = (0..3u8)
            .map(|i| Bytes::from(vec![i + 1; 20_000 + usize::from(i)]))
            .collect();
        let topic = |name: &'static str, records: &[Option<Bytes>]| {
            FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str(name)))
                .with_partitions(
                    records
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            PartitionData::default()
                                .with_partition_index(i as i32)
                                .with_high_watermark(1000 + i as i64)
                                .with_records(r.clone())
                        })
                        .collect(),
                )
        };
        let body = FetchResponse::default().with_responses(vec![
            topic(
                "a",
                &[
                    Some(big[0].clone()),
                    Some(Bytes::from_static(b"tiny")),
                    None,
                ],
            ),
            topic("b", &[Some(big[1].clone()), Some(big[2].clone())]),
        ]);
        (ResponseKind::Fetch(body), big)
    }

    #[test]
    fn a_fetch_response_in_pieces_has_the_bytes_of_one_encoded_in_one_buffer() {
        let (body, big) = fetch_response();
        for version in [4i16, 11, 12, 13, 16] {
            let frame = encode_response(ApiKey::Fetch, version, 5, &body).unwrap();
            // The reference: the same response encoded the copying way.
            let header_version = ApiKey::Fetch.response_header_version(version);
            let mut flat = BytesMut::new();
            flat.put_i32(0);
            ResponseHeader::default()
                .with_correlation_id(5)
                .encode(&mut flat, header_version)
                .unwrap();
            body.encode(&mut flat, version).unwrap();
            let len = (flat.len() - 4) as i32;
            flat[..4].copy_from_slice(&len.to_be_bytes());
            assert_eq!(frame.to_bytes().unwrap(), flat.freeze(), "v{version}");
            // Each large record set is a piece of its own: the log's buffer, not a copy.
            // (After the last one come tagged fields, in the flexible versions only.)
            assert!(frame.piece_count() >= 2 * big.len(), "v{version}");
            let mut pieces = [std::io::IoSlice::new(&[]); 16];
            let n = frame.memory_slices(&mut pieces);
            for b in &big {
                assert!(
                    pieces[..n].iter().any(|p| p.as_ptr() == b.as_ptr()),
                    "v{version}: a record set was copied"
                );
            }
        }
    }

    /// The response of [`fetch_response`] with its large record sets in a file: placeholders
    /// in the response, the file regions in `FileRecords`.
    fn fetch_response_in_a_file(big: &[Bytes]) -> (ResponseKind, FileRecords) {
        use std::io::Write;
        let (body, _) = fetch_response();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"some bytes before").unwrap();
        let mut at = 17u64;
        let mut regions = Vec::new();
        for b in big {
            file.write_all(b).unwrap();
            regions.push((at, b.len()));
            at += b.len() as u64;
        }
        let file: std::sync::Arc<std::fs::File> = std::sync::Arc::new(file);
        let mut files = FileRecords::new();
        let ResponseKind::Fetch(mut fetch) = body else {
            unreachable!()
        };
        let mut next = regions.into_iter();
        for p in fetch.responses.iter_mut().flat_map(|t| &mut t.partitions) {
            if p.records.as_ref().is_some_and(|r| r.len() > 1000) {
                let (pos, len) = next.next().unwrap();
                // Split the first in two regions, as a read across segments is.
                let split = vec![
                    crate::response_frame::FileRegion::new(file.clone(), pos, 100),
                    crate::response_frame::FileRegion::new(file.clone(), pos + 100, len - 100),
                ];
                p.records = Some(files.placeholder(split).unwrap());
            }
        }
        (ResponseKind::Fetch(fetch), files)
    }

    #[test]
    fn a_fetch_response_with_file_records_has_the_bytes_of_the_in_memory_one() {
        let (body, big) = fetch_response();
        for version in [4i16, 11, 12, 13, 16, 17] {
            let in_memory = encode_response(ApiKey::Fetch, version, 5, &body)
                .unwrap()
                .to_bytes()
                .unwrap();
            let (with_files, files) = fetch_response_in_a_file(&big);
            let frame =
                encode_response_with_files(ApiKey::Fetch, version, 5, &with_files, files).unwrap();
            assert_eq!(frame.file_piece_count(), 2 * big.len(), "v{version}");
            assert_eq!(frame.len(), in_memory.len(), "v{version}");
            assert_eq!(frame.to_bytes().unwrap(), in_memory, "v{version}");
            // Without its file records the response cannot be framed: no zeros are sent.
            assert!(encode_response(ApiKey::Fetch, version, 5, &with_files).is_err());
        }
    }
}
