//! Kafka wire protocol for ferry: framing, request decoding, response encoding and the table of
//! API versions ferry serves.
//!
//! Message bodies come from the `kafka-protocol` crate's generated codecs; this crate only adds
//! what a server needs around them. Invariants:
//! - a frame is a big-endian `i32` length followed by that many bytes; a length that is negative,
//!   zero or above `socket.request.max.bytes` is never read (the caller closes the connection);
//! - a request is decoded only when its API key and version are in [`versions::SUPPORTED`];
//!   ApiVersions at an unsupported version is the one exception, answered with the v0 fallback
//!   (KIP-511) so that a newer client can still learn what ferry serves.

pub mod error_messages;
pub mod features;
pub mod frame;
pub mod request;
pub mod response_frame;
pub mod versions;

pub use error_messages::null_empty_error_messages;
pub use features::add_features;
pub use kafka_protocol;
pub use request::{
    decode_request, encode_response, encode_response_with_files, DecodeError, DecodedRequest,
    ResponseFrame,
};
pub use response_frame::{FileRecords, FileRegion};
pub use versions::{api_versions_response, supported_range, SUPPORTED};
